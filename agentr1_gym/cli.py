"""The ``agentr1`` command. ``agentr1 --help`` and ``agentr1 SUBCOMMAND --help`` document it."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = ["build_parser", "main"]


def _parse_kv(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are read as JSON when they parse (numbers, true/false, lists), else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: expected key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_list(args: argparse.Namespace) -> int:
    from agentr1_gym.envs import DESCRIPTIONS

    width = max(map(len, DESCRIPTIONS))
    for env_id in sorted(DESCRIPTIONS):
        print(f"{env_id:<{width}}  {DESCRIPTIONS[env_id]}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    import agentr1_gym

    env = agentr1_gym.make(args.env_id, **_parse_kv(args.env_arg))
    obs, info = env.reset(seed=args.seed)
    print(f"=== {args.env_id}  task {info['task_id']}\n{obs}\n")
    print(
        "Type one assistant turn per line ('\\n' for a newline). Commands: /oracle (show the oracle's next "
        "turn), /reset, /quit."
    )
    total = 0.0
    for line in sys.stdin:
        line = line.rstrip("\n")
        if line == "/quit":
            break
        if line == "/reset":
            obs, info = env.reset()
            total = 0.0
            print(f"=== task {info['task_id']}\n{obs}\n")
            continue
        if line == "/oracle":
            oracle = getattr(env.unwrapped, "oracle_action", None)
            print(oracle() if oracle else "(this env has no oracle)")
            continue
        obs, reward, terminated, truncated, info = env.step(line.replace("\\n", "\n"))
        total += reward
        comps = {k: round(v, 3) for k, v in info["reward_components"].items() if v}
        print(f"--- turn {info['turn']}  reward {reward:+.3f} (return {total:+.3f})  components {comps}")
        if info["action_error"]:
            print(f"action error: {info['action_error']}")
        if obs:
            print(obs)
        if terminated or truncated:
            why = "terminated" if terminated else f"truncated ({info['truncated_reason']})"
            print(
                f"=== episode {why}; metrics {info.get('metrics')}; gold {list(env.unwrapped.task.answers)}"
            )
            print("/reset for a new task, /quit to leave.")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agentr1_gym.evaluation import evaluate

    summary = evaluate(
        args.env_id,
        args.policy,
        episodes=args.episodes,
        seed=args.seed,
        env_kwargs=_parse_kv(args.env_arg),
        progress=not args.no_progress,
    )
    if not args.returns:
        summary.pop("returns")
    print(json.dumps({"env": args.env_id, "policy": args.policy, **summary}, indent=2))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentr1", description="Tool-using LLM agent envs (Agent-R1) for RL."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list the registered AgentR1 envs")
    p.set_defaults(func=cmd_list)

    env_arg = {
        "metavar": "KEY=VALUE",
        "action": "append",
        "default": [],
        "help": "env keyword argument (repeatable), e.g. --env-arg max_turns=8 --env-arg protocol=search_r1",
    }

    p = sub.add_parser(
        "play", help="play an env in the terminal: type assistant turns, see observations and rewards"
    )
    p.add_argument("env_id", help="e.g. AgentR1/HotpotQA-v0")
    p.add_argument("--seed", type=int, default=0, help="reset seed (default 0)")
    p.add_argument("--env-arg", **env_arg)
    p.set_defaults(func=cmd_play)

    p = sub.add_parser("eval", help="evaluate a policy: success, EM/F1, format validity, mean reward")
    p.add_argument("env_id", help="e.g. AgentR1/HotpotQA-v0")
    p.add_argument(
        "--policy",
        default="oracle",
        help="scripted policy: oracle | canonical (the oracle, named for code envs) | no-tool (default oracle)",
    )
    p.add_argument("--episodes", type=int, default=100, help="number of episodes (default 100)")
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed SEED+i (default 0)")
    p.add_argument("--env-arg", **env_arg)
    p.add_argument("--returns", action="store_true", help="also print every episode's return")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_eval)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from agentr1_gym.errors import AgentR1Error

    try:
        return int(args.func(args))
    except AgentR1Error as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
