"""The package layout: imports only point down a declared layer order, nothing forms a cycle, and the env suite
never imports the adapter. Reads the source (every import statement, including ones inside functions and under
``TYPE_CHECKING``), so a lazy import cannot hide an upward dependency."""

from __future__ import annotations

import ast
from pathlib import Path

from _paths import REPO

ROOT = REPO
PACKAGES = {
    "agentr1_gym": ROOT / "agentr1_gym",
    "agentr1_trl": ROOT / "adapters" / "trl" / "agentr1_trl",
    "agentr1_skyrl": ROOT / "adapters" / "skyrl" / "agentr1_skyrl",
    "agentr1_verl": ROOT / "adapters" / "verl" / "agentr1_verl",
    "agentr1_verifiers": ROOT / "adapters" / "verifiers" / "agentr1_verifiers",
}

#: module (or package prefix) -> layer; a module may import only modules of its own layer or lower ones
LAYERS: dict[str, int] = {
    # the env suite: core <- data <- tools <- env <- envs <- registration <- evaluation/retrieval_server/cli
    "agentr1_gym.errors": 0,
    "agentr1_gym.spaces": 0,
    "agentr1_gym.cache": 0,
    "agentr1_gym.deprecated": 0,  # old import paths of renamed modules, as aliases that warn (stdlib only)
    "agentr1_gym.text": 0,  # untrusted text made safe (lone surrogates, deep nesting)
    "agentr1_gym.deadline": 0,  # one HTTP exchange under a deadline for the whole answer (stdlib only)
    "agentr1_gym.rewards": 1,
    "agentr1_gym.matching": 1,
    "agentr1_gym.episodes": 1,
    "agentr1_gym.generation": 1,  # the generation-backend protocol (token ids in, token ids + log-probs out)
    "agentr1_gym.rollout": 2,  # the token layer: token-exact rollouts over any gymnasium env, action masks
    "agentr1_gym.tools.base": 2,
    "agentr1_gym.formats": 3,
    "agentr1_gym.data": 4,
    "agentr1_gym.tools": 5,
    "agentr1_gym.context": 1,  # the context policy: what the agent sees each step (parsed once per env)
    "agentr1_gym.settings": 4,  # EnvSettings and the keyword check around every env's __init__
    "agentr1_gym.task_rewards": 2,  # a task's reward functions, checked when made and held to their contract
    "agentr1_gym.env": 6,
    "agentr1_gym.envs": 7,
    "agentr1_gym.wrappers": 7,
    "agentr1_gym.registration": 8,
    "agentr1_gym.evaluation": 9,
    "agentr1_gym.task": 9,  # dataset tasks: registers them
    "agentr1_gym.mixture": 9,  # builds its components with agentr1_gym.make
    "agentr1_gym.retrieval_server": 9,
    "agentr1_gym.env_server": 9,  # any registered env over OpenEnv's protocol (builds envs with make)
    "agentr1_gym.viewer": 2,  # reads run directories; writes HTML (stdlib only)
    "agentr1_gym.cli": 10,
    "agentr1_gym": 11,  # the package's __init__: the public API
    # the TRL adapter (above everything in agentr1_gym)
    "agentr1_trl._quiet": 20,  # third-party logging kept off stdout (stdlib only)
    "agentr1_trl.hardware": 20,  # what the machine computes fast (CPU flags, measured bf16 speed-up)
    "agentr1_trl.value_head": 20,  # the PPO critic's head: PPO trains it, value-guided decoding reads it
    "agentr1_trl.backends": 21,
    "agentr1_trl.advantages": 22,
    "agentr1_trl.turn_rows": 23,
    "agentr1_trl.block_attention": 18,  # causal attention as bf16 matrix products over blocks of queries
    "agentr1_trl.causal_rows": 19,  # attention without a mask for rows that need none (the forward's kernel path)
    "agentr1_trl.forward": 20,  # the one log-prob forward (shared prompts once); the value head reads its states
    "agentr1_trl.run_dir": 22,  # one room for the run directory: record, resume rules, checkpoints, checks
    "agentr1_trl.presets": 22,  # a new run's defaults (the main job) and the settings' checks, without TRL
    "agentr1_trl.run_report": 23,  # what a run prints and writes for a person (card, closing lines, clock)
    "agentr1_trl.losses": 23,
    "agentr1_trl.signals": 23,
    "agentr1_trl.episodes": 23,
    "agentr1_trl.models": 23,
    "agentr1_trl.sft": 24,
    "agentr1_trl.estimators": 24,  # each advantage estimator declared once: its needs and its scoring
    "agentr1_trl.agent_tasks": 20,  # a user's agent: its function, its result, its tasks and their env session
    "agentr1_trl.agent_calls": 23,  # an agent's calls as tokens: rendering on sampled ids, parsing, trajectories
    "agentr1_trl.agent_proxy": 24,  # the OpenAI-compatible endpoint that records each call's tokens
    "agentr1_trl.model_eval": 24,
    "agentr1_trl.testing": 24,
    "agentr1_trl.config": 24,
    "agentr1_trl.trl_trainer": 25,
    "agentr1_trl.stock_trl": 25,
    "agentr1_trl.agent_trainer": 26,
    "agentr1_trl.generation": 27,  # deprecated alias of agentr1_trl.backends (until 0.3)
    "agentr1_trl.runs": 27,  # deprecated alias of agentr1_trl.run_dir (until 0.3)
    "agentr1_trl.checkpoints": 27,  # deprecated alias of agentr1_trl.run_dir (until 0.3)
    "agentr1_trl.run_outputs": 27,  # deprecated alias of agentr1_trl.run_report (until 0.3)
    "agentr1_trl.grpo": 27,
    "agentr1_trl.ppo": 27,
    "agentr1_trl.agent_loop": 28,  # a user's own agent loop through the endpoint, trained with GRPO
    "agentr1_trl.algorithms": 28,  # algo -> (config, trainer): the one table the CLI and benchmarks use
    "agentr1_trl.pipeline": 28,  # settings -> trainer -> evaluations -> outputs (agentr1 train, benchmarks)
    "agentr1_trl.cli": 28,
    "agentr1_trl": 29,
    # other engines' adapters: above the env suite, beside the TRL adapter (never on it); a token-in/token-out
    # engine (verl) uses the core's token layer (agentr1_gym.rollout)
    "agentr1_skyrl.env": 20,
    "agentr1_skyrl": 21,
    "agentr1_verl.loop": 23,
    "agentr1_verl": 24,
    "agentr1_verifiers.taskset": 20,
    "agentr1_verifiers": 21,
}


def _modules() -> dict[str, Path]:
    out = {}
    for pkg, base in PACKAGES.items():
        for path in base.rglob("*.py"):
            parts = [pkg, *path.relative_to(base).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The project module an import refers to (the longest known prefix), or None for third-party ones."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _imports(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from pkg import sub` imports the submodule when there is one
            names = [f"{node.module}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target is not None and target != module:
                found.add(target)
    return found


GRAPH = {m: _imports(m) for m in MODULES}


def _layer(module: str) -> int:
    parts = module.split(".")
    while parts:
        key = ".".join(parts)
        if key in LAYERS:
            return LAYERS[key]
        parts.pop()
    raise AssertionError(
        f"{module} has no layer in tests/core/test_layout.py::LAYERS; add it where it belongs"
    )


def test_every_module_has_a_layer():
    for module in MODULES:
        _layer(module)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
        for m, targets in graph.items()
        for t in targets
        if _layer(t) > _layer(m) and not t.startswith(m + ".")  # a package may import its own submodules
    )


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # edges from a package to its own submodules are how packages re-export; every other edge counts
    edges = {m: {t for t in ts if not t.startswith(m + ".")} for m, ts in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])
    return cycles


def test_imports_only_point_down():
    upward = upward_imports(GRAPH)
    assert not upward, "upward imports:\n" + "\n".join(upward)


def test_no_import_cycles():
    cycles = import_cycles(GRAPH)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_env_suite_never_imports_the_adapter():
    bad = [f"{m} imports {t}" for m, ts in GRAPH.items() if m.startswith("agentr1_gym") for t in ts
           if t.startswith("agentr1_trl")]  # fmt: skip
    assert not bad


ENGINE_ADAPTERS = ("agentr1_verl", "agentr1_skyrl", "agentr1_verifiers")
ADAPTERS = ("agentr1_trl", *ENGINE_ADAPTERS)


def adapter_crossings(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one adapter into another: each engine's adapter depends on the core package only."""
    return sorted(
        f"{m} imports {t}"
        for m, targets in graph.items()
        if m.startswith(ADAPTERS)
        for t in targets
        if t.startswith(ADAPTERS) and t.split(".")[0] != m.split(".")[0]
    )


def test_engine_adapters_import_the_core_only():
    crossings = adapter_crossings(GRAPH)
    assert not crossings, "adapters importing each other:\n" + "\n".join(crossings)


def test_the_adapter_check_rejects_an_engine_adapter_on_the_trl_adapter():
    """What verl's adapter did before the token layer moved to the core: the check must fail on it."""
    before = {
        "agentr1_verl.loop": {"agentr1_trl.rollout", "agentr1_gym.env"},
        "agentr1_trl.trainer": {"agentr1_gym.rollout"},
    }
    assert adapter_crossings(before) == ["agentr1_verl.loop imports agentr1_trl.rollout"]
    assert adapter_crossings({"agentr1_verl.loop": {"agentr1_gym.rollout"}}) == []


def test_the_checks_fail_on_the_layout_this_renovation_removed():
    """The old layout (core.py holding Tool, protocol.py importing it; data <-> the search corpus) must fail
    both checks: a checker that cannot fail proves nothing."""
    old = {
        "agentr1_gym.formats": {"agentr1_gym.env"},  # protocol.py -> core.py (Tool lived there)
        "agentr1_gym.env": {"agentr1_gym.formats"},
        "agentr1_gym.data.qa": {"agentr1_gym.tools.search"},  # data -> tools/search/corpus.py
        "agentr1_gym.tools.search": {"agentr1_gym.data.qa"},
    }
    assert len(upward_imports(old)) == 2
    assert {tuple(c) for c in import_cycles(old)} == {
        ("agentr1_gym.env", "agentr1_gym.formats", "agentr1_gym.env"),
        ("agentr1_gym.data.qa", "agentr1_gym.tools.search", "agentr1_gym.data.qa"),
    }
