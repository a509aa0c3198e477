"""An ART (openpipe-art 0.5) rollout over the AgentR1 envs: ART needs no adapter, only this function.

ART trains on ``art.Trajectory`` objects: the messages the model saw, its sampled ``Choice`` objects (the
trainable turns) and a reward. One episode here: reset the env, ask the model's OpenAI-compatible endpoint for
each turn (the env's tool-call stop strings passed; ``include_stop_str_in_output`` for vLLM servers, so the env
sees the closing tag), step the env with the reply, append the env's new messages (tool responses, or the
explanation of a malformed turn), until the env terminates or truncates. Reward: the episode return (process
rewards + outcome); metrics: the env's episode metrics; metadata: env id and seed.

    pip install openpipe-art==0.5.18     # in its own environment (.ci/engine-tests art makes one)
    python examples/engines/art_rollout.py --base-url http://vllm-host:8000/v1 --model Qwen/Qwen2.5-3B-Instruct

With ``art.TrainableModel`` and a backend (``LocalBackend`` on a GPU), group these trajectories with
``art.gather_trajectory_groups`` and ``model.train(groups)``, as ART's own examples do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

import art

import agentr1_gym
from agentr1_gym.context import require_full_context


async def rollout(
    model: art.Model,
    env_id: str,
    seed: int,
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_tokens: int = 512,
    temperature: float = 1.0,
) -> art.Trajectory:
    env = agentr1_gym.make(env_id, **(env_kwargs or {}))
    require_full_context(env, "ART")
    _, info = env.reset(seed=seed)
    messages = [dict(m) for m in info["messages"]]
    traj = art.Trajectory(messages_and_choices=list(messages), metadata={"env_id": env_id, "seed": seed})
    client = model.openai_client()
    stops = list(env.unwrapped.tool_format.stop_strings)
    done = False
    while not done:
        completion = await client.chat.completions.create(
            model=model.get_inference_name(),
            messages=traj.messages(),
            max_completion_tokens=max_tokens,
            temperature=temperature,
            stop=stops or None,
            extra_body={"include_stop_str_in_output": True},
        )
        choice = completion.choices[0]
        traj.messages_and_choices.append(choice)
        _, reward, terminated, truncated, info = await asyncio.to_thread(
            env.step, choice.message.content or ""
        )
        traj.reward += float(reward)
        done = terminated or truncated
        if not done:
            new = info["messages"][len(messages) + 1 :]  # after the assistant's own turn
            traj.messages_and_choices.extend(dict(m) for m in new)
            messages = [dict(m) for m in info["messages"]]
    traj.metrics.update({k: float(v) for k, v in info.get("metrics", {}).items()})
    env.close()
    return traj.finish()


async def _main(args: argparse.Namespace) -> None:
    model = art.Model(
        name="agentr1-eval",
        project="agentr1",
        inference_base_url=args.base_url,
        inference_api_key=args.api_key,
        inference_model_name=args.model,
    )
    trajectories = await art.gather_trajectories(
        (rollout(model, args.env, s) for s in range(args.seed, args.seed + args.episodes)), pbar_desc=args.env
    )
    print(
        json.dumps(
            {
                "env": args.env,
                "returns": [t.reward for t in trajectories],
                "success": sum(t.metrics.get("success", 0.0) for t in trajectories) / len(trajectories),
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-url", required=True, help="an OpenAI-compatible endpoint (vLLM's serve)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--api-key", default="unused")
    parser.add_argument("--env", default="AgentR1/SyntheticMultihop-v0")
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    main()
