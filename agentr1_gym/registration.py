"""Every ``register()`` call, and :func:`make`.

Registration uses string entry points, so ``import agentr1_gym`` stays light: an env's module (and its
dependencies) loads on the first ``gym.make`` of that env. ``gym.make(id, **kwargs)`` and
``agentr1_gym.make(id, **kwargs)`` build the same env for every keyword: the ids register no wrappers
(no ``TimeLimit``: each env truncates itself at ``max_turns`` and scores it), and :func:`make` only adds a typed
error for unknown ids.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import register, registry

from agentr1_gym.errors import BadArgumentError, ConfigError, UnknownEnvError

__all__ = [
    "DESCRIPTIONS",
    "NEEDS_SERVER",
    "USER_DESCRIPTIONS",
    "env_ids",
    "make",
    "register_envs",
    "resolve_env_id",
    "reward_notes",
]

#: env id -> one-line description (``agentr1 list``) of the library's ``AgentR1/*`` envs
DESCRIPTIONS: dict[str, str] = {}
#: the same for tasks registered with :func:`agentr1_gym.register_task` in this process
USER_DESCRIPTIONS: dict[str, str] = {}
#: ids that need a server to play on (``base_url=``): listed by ``agentr1 list``, left out of :func:`env_ids`
#: (whose envs all build offline with no arguments)
NEEDS_SERVER: set[str] = set()


def _register(env_id: str, entry_point: str, description: str, **kwargs: object) -> None:
    """Register without ``max_episode_steps``: every env truncates itself at its ``max_turns`` (default 6) and
    scores that truncation (outcome reward, ``info["metrics"]``). A registered ``TimeLimit`` would cut
    ``gym.make(id, max_turns=10)`` at 6 steps, unscored."""
    DESCRIPTIONS[env_id] = description
    if env_id not in registry:
        register(id=env_id, entry_point=entry_point, kwargs=kwargs)


def register_envs() -> None:
    """Register every ``AgentR1/*`` env (idempotent)."""
    qa = "agentr1_gym.envs.qa:MultiHopQAEnv"
    _register(
        "AgentR1/HotpotQA-v0",
        qa,
        "HotpotQA multi-hop QA with a search tool (bundled 300-question dev sample, BM25).",
        dataset="hotpotqa",
    )
    _register(
        "AgentR1/2WikiMultihopQA-v0",
        qa,
        "2WikiMultihopQA with a search tool (bundled 177-question dev sample, 6,119-passage corpus, BM25).",
        dataset="2wikimultihopqa",
    )
    _register(
        "AgentR1/Musique-v0",
        qa,
        "MuSiQue-Ans 2-4 hop QA with a search tool (bundled 50-question dev sample, BM25).",
        dataset="musique",
    )
    _register(
        "AgentR1/SyntheticMultihop-v0",
        "agentr1_gym.envs.synthetic:SyntheticMultihopEnv",
        "Procedurally generated k-hop questions (1-2 hops by default) over a synthetic world; has an oracle.",
    )
    _register(
        "AgentR1/HumanEval-v0",
        "agentr1_gym.envs.code:HumanEvalEnv",
        "HumanEval (164 problems): debug with a sandboxed python tool, submit a function; hidden tests grade it.",
    )
    _register(
        "AgentR1/Calculator-v0",
        "agentr1_gym.envs.calculator:CalculatorEnv",
        "Procedural arithmetic and multi-step word problems with exact answers and a safe calculator tool.",
    )
    register_worlds()
    _register(
        "AgentR1/Mixture-v0",
        "agentr1_gym.mixture:MixtureEnv",
        "A weighted mixture of envs (envs=[{id, weight, kwargs}]): one run trains on several; metrics per env.",
    )
    rg = "agentr1_gym.envs.reasoning_gym:ReasoningGymEnv"
    _register(
        "AgentR1/ReasoningGym-v0",
        rg,
        "Any reasoning-gym dataset (task=<name>, config={...}), scored by its own score_answer; optional tool.",
    )
    _register(
        "AgentR1/BFCL-MultiTurn-v0",
        "agentr1_gym.envs.bfcl:BFCLMultiTurnEnv",
        "BFCL v4 multi-turn function calling (category=base|miss_func|miss_param|long_context; users who speak "
        "several times), scored as BFCL's own checker scores it.",
    )
    _register(
        "AgentR1/OpenEnv-v0",
        "agentr1_gym.envs.openenv:OpenEnvEnv",
        "An env on an OpenEnv server (base_url=...; ours from `agentr1 serve-env`, or any OpenEnv text env).",
    )
    NEEDS_SERVER.add("AgentR1/OpenEnv-v0")
    from agentr1_gym.envs.reasoning_gym import CURATED

    for suffix, task, config, tool, what in CURATED:
        _register(
            f"AgentR1/RG-{suffix}-v0",
            rg,
            f"reasoning-gym {task} ({what}) with the {tool}.",
            task=task,
            config=config,
            tool=tool,
        )


def register_worlds() -> None:
    """World-shaped envs: the world decides when an episode ends and what it scored."""
    games = "agentr1_gym.envs.textgames:TextGameEnv"
    for name, family, what in (
        ("Simple", "simple", "fetch an item and put it somewhere in a house (levels 1-4)"),
        ("Cooking", "cooking", "find the kitchen, read the recipe, prepare and eat the meal (levels 1-5)"),
        ("TreasureHunter", "treasure_hunter", "find a named object among distractors (levels 1-30)"),
        ("CoinCollector", "coin_collector", "find the coin along a chain of rooms (levels 1-300)"),
    ):
        _register(f"AgentR1/TextWorld-{name}-v0", games, f"TextWorld text game: {what}.", family=family)
    _register(
        "AgentR1/WebShop-v0",
        "agentr1_gym.envs.webshop:WebShopEnv",
        "Find and buy the product an instruction describes in a WebShop-style shop (2,000 procedural products).",
    )
    _register(
        "AgentR1/MiniWoB-v0",
        "agentr1_gym.envs.miniwob:MiniWoBEnv",
        "MiniWoB++ web tasks in headless Chromium (click, type, press, select on the page's elements), scored by "
        "MiniWoB's own reward.",
    )


def env_ids() -> list[str]:
    """The ids of every registered ``AgentR1/*`` env that builds offline with no arguments (tasks of
    :func:`register_task`: ``USER_DESCRIPTIONS``; envs that play on a server: :data:`NEEDS_SERVER`)."""
    return sorted(set(DESCRIPTIONS) - NEEDS_SERVER)


def import_user_module(module: str) -> None:
    """Import ``module``; like ``python -m``, the working directory counts (``agentr1 eval mytask:...`` run next
    to ``mytask.py`` finds it, although a console script's ``sys.path`` starts at its own directory)."""
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        cwd = os.getcwd()
        if exc.name != module.split(".")[0] or cwd in sys.path or "" in sys.path:
            raise
        sys.path.insert(0, cwd)
        importlib.import_module(module)


def resolve_env_id(env_id: str) -> str:
    """The registry id of ``env_id``, importing its module first for the ``"module:Namespace/Name-v0"`` form
    (what another process, a worker or the CLI, needs to find an env registered by the user's own module).
    Raises :class:`UnknownEnvError` (with the closest ids) when the id is not registered with Gymnasium."""
    if not isinstance(env_id, str) or not env_id:
        raise UnknownEnvError(f"an env id is a non-empty string, got {env_id!r}")
    name = env_id
    if ":" in env_id:
        module, name = env_id.split(":", 1)
        if module != "agentr1_gym":
            try:
                import_user_module(module)
            except ImportError as exc:
                hint = ""
                if module.endswith(".py"):
                    hint = f"; the module:id form takes a module name: drop the .py ({module[:-3]}:{name})"
                raise UnknownEnvError(
                    f"cannot import {module!r} (from the env id {env_id!r}, module:id form): {exc}{hint}"
                ) from None
    if name not in registry:
        known = sorted(set(env_ids()) | {i for i in registry if "/" in i})
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        where = (
            ""
            if ":" in env_id
            else (
                " An env registered by your own module needs the 'your_module:Namespace/Name-v0' form in other "
                "processes (the CLI, workers)."
            )
        )
        raise UnknownEnvError(
            f"no env {name!r} is registered.{hint}{where} AgentR1 envs: {', '.join(env_ids())}"
        )
    return name


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` for any agentr1 env: an ``AgentR1/*`` id, any Gymnasium-registered id of a
    :class:`~agentr1_gym.env.ToolEnv`, or ``"module:id"`` (imports the module that registers it first).
    Unknown ids raise :class:`UnknownEnvError` with the closest ids; an id whose env is not a ``ToolEnv`` raises
    :class:`ConfigError` (every trainer, evaluator and adapter needs one)."""
    name = resolve_env_id(env_id)
    try:
        env = gym.make(name, **kwargs)
    except BadArgumentError as exc:
        # Gymnasium re-raises a creator's TypeError with its id and every kwarg appended: our message already
        # names the argument and the fix
        message = str(exc).split(" was raised from the environment creator for ", 1)[0]
        raise BadArgumentError(message) from None
    from agentr1_gym.env import ToolEnv

    if not isinstance(env.unwrapped, ToolEnv):
        env.close()
        raise ConfigError(
            f"{name!r} is a Gymnasium env ({type(env.unwrapped).__name__}) but not an agentr1 ToolEnv: agentr1's "
            "trainers, evaluators and adapters need one (subclass agentr1_gym.ToolEnv or build it with "
            "agentr1_gym.make_task)"
        )
    return env


def reward_notes(env_ids: Any) -> dict[str, str]:
    """What each reward component of these envs pays for (component name -> one line): the generic ones
    (:data:`agentr1_gym.rewards.COMPONENT_NOTES`) and each env's declared process components, read from its
    class without building it (a mixture's from its components'). An id that cannot be resolved here (a user
    module that is not importable any more) adds nothing: the notes only explain a page."""
    from gymnasium.envs.registration import load_env_creator

    from agentr1_gym.rewards import COMPONENT_NOTES

    notes = dict(COMPONENT_NOTES)
    todo, seen = [i for i in env_ids if isinstance(i, str)], set()
    while todo:
        env_id = todo.pop()
        if env_id in seen:
            continue
        seen.add(env_id)
        try:
            spec = gym.spec(resolve_env_id(env_id))
            creator = (
                load_env_creator(spec.entry_point) if isinstance(spec.entry_point, str) else spec.entry_point
            )
        except (gym.error.Error, ImportError, AttributeError, ValueError, ConfigError):
            continue
        for component in getattr(creator, "process_rewards", ()) or ():
            notes.setdefault(str(component.name), str(component.description))
        for part in (spec.kwargs or {}).get("envs") or ():
            todo.append(part.get("id") if isinstance(part, dict) else part)
    return notes
