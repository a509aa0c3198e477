"""Every ``register()`` call, and :func:`make`.

Registration uses string entry points, so ``import agentr1_gym`` stays light: an env's module (and its
dependencies) loads on the first ``gym.make`` of that env. ``gym.make(id, **kwargs)`` and
``agentr1_gym.make(id, **kwargs)`` build the same env for every keyword: the ids register no wrappers
(no ``TimeLimit``: each env truncates itself at ``max_turns`` and scores it), and :func:`make` only adds a typed
error for unknown ids.
"""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import register, registry

from agentr1_gym.errors import UnknownEnvError

__all__ = ["DESCRIPTIONS", "env_ids", "make", "register_envs"]

#: env id -> one-line description (``agentr1 list``)
DESCRIPTIONS: dict[str, str] = {}


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


def env_ids() -> list[str]:
    """The ids of every registered ``AgentR1/*`` env."""
    return sorted(DESCRIPTIONS)


def make(env_id: str, **kwargs: Any) -> gym.Env:
    """``gym.make`` with a typed error for unknown ids (``UnknownEnvError`` suggests the closest ids); otherwise
    exactly ``gym.make``. ``"agentr1_gym:AgentR1/..."`` (the form that imports the package first) works too."""
    env_id = env_id.removeprefix("agentr1_gym:")
    if env_id not in DESCRIPTIONS:
        close = difflib.get_close_matches(env_id, env_ids(), n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownEnvError(f"no AgentR1 env {env_id!r}.{hint} Registered: {', '.join(env_ids())}")
    return gym.make(env_id, **kwargs)
