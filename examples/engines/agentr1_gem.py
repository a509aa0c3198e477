"""Our envs in GEM (gem-llm 0.1): the glue GEM needs, and GEM's own vector loop over it with the oracle policy.

GEM passes ``seed=`` to env constructors, calls ``reset(seed)`` positionally and, with its default same-step
autoreset, replaces a finished episode's ``info`` (and so its ``metrics``) with the next episode's reset info.
:class:`AgentR1GEMEnv` takes the constructor's seed as the first reset's, accepts the positional one, and hands
the finished episode's ``metrics`` and return to the next reset as ``info["final_info"]``.

    pip install gem-llm==0.1.0      # in its own environment (.ci/engine-tests gem makes one)
    python examples/engines/agentr1_gem.py --env AgentR1/HotpotQA-v0 --episodes 8
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import gem

import agentr1_gym
from agentr1_gym.context import require_full_context

PREFIX = "agentr1:"


class AgentR1GEMEnv(gem.Env):
    """An ``AgentR1/*`` env with GEM's calling conventions (see the module docstring)."""

    def __init__(self, agentr1_id: str, seed: int | None = None, **kwargs: Any) -> None:
        # (GEM's register() takes the name env_id itself, and make() sets .env_id to GEM's id afterwards)
        self.env = agentr1_gym.make(agentr1_id, **kwargs)
        require_full_context(self.env, "GEM")
        self._seed = seed
        self._final: dict[str, Any] | None = None
        self._return = 0.0

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        seed, self._seed = (
            (self._seed if seed is None else seed),
            None,
        )  # the constructor's seed: first reset only
        obs, info = self.env.reset(seed=seed)
        if self._final is not None:
            info, self._final = {**info, "final_info": self._final}, None
        self._return = 0.0
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        if terminated or truncated:
            self._final = {"metrics": dict(info.get("metrics", {})), "return": self._return}
        return obs, reward, terminated, truncated, info

    def oracle_action(self) -> str:
        return self.env.unwrapped.oracle_action()


def register_all() -> None:
    """Every registered AgentR1 env in GEM's registry as ``agentr1:<id>`` (idempotent)."""
    for env_id in agentr1_gym.env_ids():
        if PREFIX + env_id not in gem.envs.registration.ENV_REGISTRY:
            gem.register(PREFIX + env_id, entry_point=AgentR1GEMEnv, agentr1_id=env_id)


def run_oracle(env_id: str, episodes: int, seed: int = 0) -> list[dict[str, Any]]:
    """One oracle episode per sub-env of ``gem.make_vec`` (sub-env ``i`` plays seed ``seed + i``); returns each
    finished episode's ``final_info``, read back from GEM's autoreset."""
    register_all()
    venv = gem.make_vec([PREFIX + env_id] * episodes, seed=seed)
    venv.reset()
    finals: dict[int, dict[str, Any]] = {}
    while len(finals) < episodes:
        live = [i for i in range(episodes) if i not in finals]
        _, _, _, _, infos = venv.step({i: venv.envs[i].oracle_action() for i in live})
        for i, info in zip(live, infos):
            if "final_info" in info:
                finals[i] = info["final_info"]
    for env in venv.envs:
        env.env.close()
    return [finals[i] for i in range(episodes)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", default="AgentR1/SyntheticMultihop-v0")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    finals = run_oracle(args.env, args.episodes, args.seed)
    success = sum(f["metrics"].get("success", 0.0) for f in finals) / len(finals)
    print(json.dumps({"env": args.env, "returns": [f["return"] for f in finals], "success": success}))


if __name__ == "__main__":
    main()
