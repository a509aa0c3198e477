"""Bridges for users who keep TRL's stock ``GRPOTrainer``.

1. :func:`make_rollout_func` + :func:`prompt_dataset`: a ``rollout_func`` that runs our token-exact multi-turn
   rollouts. It returns ``prompt_ids``, ``completion_ids``, ``logprobs`` and ``env_mask`` (the action mask), and
   forwards ``episode_return``, ``step_rewards`` and ``reward_components`` (per step) to the reward functions;
   :func:`env_return` and :func:`component_reward` are ready-made reward functions over them.
2. :func:`make_environment_factory` + :func:`environment_dataset`: an ``environment_factory`` whose instances
   expose an env's tools as typed methods (TRL builds the tool schemas from their signatures and docstrings and
   lists them to the model), plus an ``answer`` tool that submits the final answer (world envs, which end by
   their own tools, get none), and ``get_reward()``
   returning the env's episode return. ``reset`` returns the one prompt of the episode: the task, and how to
   answer with the tools TRL lists (the env's own text-format instructions, ``<tool_call>``/``<answer>``, are
   not shown, since TRL parses tool calls itself and never passes text answers to the env). An episode the model
   ends without calling ``answer`` is scored as unanswered: no format bonus, no answer reward.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from datasets import Dataset

import agentr1_gym
from agentr1_gym.errors import ConfigError
from agentr1_gym.generation import SamplingConfig
from agentr1_gym.rollout import collect_rollouts
from agentr1_trl.backends import HFGenerator
from agentr1_trl.signals import env_return

__all__ = [
    "ACT_WITH_TOOLS",
    "ANSWER_WITH_TOOL",
    "component_reward",
    "env_return",
    "environment_dataset",
    "make_environment_factory",
    "make_rollout_func",
    "prompt_dataset",
]


def _first_messages(env_id: str, seeds: Sequence[int], env_kwargs: dict[str, Any] | None) -> list[str]:
    """The env's first user message for each reset seed."""
    env = agentr1_gym.make(env_id, **(env_kwargs or {}))
    return [env.reset(seed=int(s))[0] for s in seeds]


def prompt_dataset(env_id: str, seeds: Sequence[int], env_kwargs: dict[str, Any] | None = None) -> Dataset:
    """A conversational dataset of the env's first user message for each seed (column ``prompt``) and the seed
    (column ``seed``); :func:`make_rollout_func` maps each prompt back to its seed."""
    first = _first_messages(env_id, seeds, env_kwargs)
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": m}] for m in first], "seed": [int(s) for s in seeds]}
    )


def make_rollout_func(
    env_id: str,
    seeds: Sequence[int],
    *,
    env_kwargs: dict[str, Any] | None = None,
    max_new_tokens_per_turn: int = 128,
    max_episode_tokens: int = 2048,
    generator_factory: Callable[[Any], Any] | None = None,
) -> Callable[[list, Any], dict[str, list]]:
    """A ``rollout_func`` for TRL's ``GRPOTrainer`` over ``env_id``; use it with ``prompt_dataset(env_id, seeds)``.

    ``generator_factory(trainer)`` builds the generation backend (default: HF ``generate`` on the trainer's model).
    """
    by_prompt = dict(zip(_first_messages(env_id, seeds, env_kwargs), map(int, seeds)))
    pool: list[Any] = []

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        try:
            seeds_ = [by_prompt[p[-1]["content"] if isinstance(p, list) else p] for p in prompts]
        except KeyError:
            raise ConfigError(
                "a prompt is not one of prompt_dataset(env_id, seeds)'s prompts; build the train "
                "dataset with prompt_dataset() and the same seeds"
            ) from None
        while len(pool) < len(prompts):
            pool.append(agentr1_gym.make(env_id, **(env_kwargs or {})))
        tok = trainer.processing_class
        gen = (
            generator_factory(trainer)
            if generator_factory
            else HFGenerator(trainer.accelerator.unwrap_model(trainer.model), tok)
        )
        args = trainer.args
        sampling = SamplingConfig(
            max_new_tokens=max_new_tokens_per_turn,
            temperature=args.temperature,
            top_p=args.top_p,
            top_k=args.top_k or 0,
        )
        trajs = collect_rollouts(
            pool[: len(prompts)],
            gen,
            tok,
            sampling=sampling,
            seeds=seeds_,
            max_episode_tokens=max_episode_tokens,
            chat_template_kwargs=getattr(args, "chat_template_kwargs", None),
        )
        return {
            "prompt_ids": [t.prompt_ids for t in trajs],
            "completion_ids": [t.completion_ids for t in trajs],
            "logprobs": [t.logprobs for t in trajs],
            "env_mask": [t.action_mask for t in trajs],
            "episode_return": [t.episode_return for t in trajs],
            "step_rewards": [t.rewards for t in trajs],
            "reward_components": [t.reward_components for t in trajs],
        }

    return rollout_func


def component_reward(name: str) -> Callable[..., list[float]]:
    """A reward function returning the episode's sum of one reward component (e.g. ``"retrieval"``); give it a
    weight of 0 in ``GRPOConfig.reward_weights`` to only log it."""

    def reward(prompts: list, completions: list, reward_components: list, **_: Any) -> list[float]:
        return [float(sum(step.get(name, 0.0) for step in steps)) for steps in reward_components]

    reward.__name__ = f"env_{name}"
    return reward


_JSON_TO_PY = {"string": str, "integer": int, "number": float, "boolean": bool, "array": list, "object": dict}


def _tool_method(schema: dict[str, Any]) -> Callable[..., str]:
    fn = schema["function"]
    name, params = fn["name"], fn["parameters"]
    props, required = params.get("properties", {}), set(params.get("required", []))

    def method(self: Any, **kwargs: Any) -> str:
        return self._call(name, kwargs)

    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {"return": str}
    arg_docs = []
    for arg, spec in props.items():
        py = _JSON_TO_PY.get(spec.get("type", "string"), str)
        default = inspect.Parameter.empty if arg in required else spec.get("default")
        parameters.append(
            inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=py)
        )
        annotations[arg] = py
        arg_docs.append(f"    {arg}: {spec.get('description', arg)}")
    method.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    method.__annotations__ = annotations
    method.__name__ = method.__qualname__ = name
    method.__doc__ = (
        f"{fn['description']}\n\nArgs:\n" + "\n".join(arg_docs) + "\n\nReturns:\n    The tool's output."
    )
    return method


#: how an environment-factory episode is answered (the tools themselves are listed by TRL's chat template)
ANSWER_WITH_TOOL = (
    "Use the tools by calling them as functions, one call per turn. When you know the answer, call the answer "
    "tool with it; text you write outside tool calls is not graded."
)
#: the same for world envs, which end when their world says so (a game won or lost, an item bought)
ACT_WITH_TOOLS = (
    "Use the tools by calling them as functions, one call per turn; the episode ends when the task is done. Text "
    "you write outside tool calls has no effect."
)


def environment_dataset(seeds: Sequence[int]) -> Dataset:
    """The train dataset for :func:`make_environment_factory`: one row per task seed with an empty prompt, which
    ``reset`` fills with the task (TRL appends what ``reset`` returns to the row's last message)."""
    return Dataset.from_dict(
        {"prompt": [[{"role": "user", "content": ""}] for _ in seeds], "seed": [int(s) for s in seeds]}
    )


def _row_text(row: dict[str, Any]) -> str:
    prompt = row.get("prompt")
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        content = prompt[-1].get("content", "")
        return content if isinstance(content, str) else ""
    return prompt if isinstance(prompt, str) else ""


class _EnvironmentBase:
    """Shared behaviour of the generated environment classes (see :func:`make_environment_factory`)."""

    _make_env: Callable[[], Any]

    def __init__(self) -> None:
        self.env = type(self)._make_env()
        self.total = 0.0
        self.done = True

    def reset(self, **row: Any) -> str | None:
        """Start a new episode (seeded by the row's ``seed`` column if present) and return its prompt: the task
        and how to answer with the listed tools. A row whose prompt already holds text keeps it (None is
        returned, so TRL adds nothing): the prompt is never doubled."""
        seed = row.get("seed")
        self.env.reset(seed=int(seed) if seed is not None else None)
        self.total, self.done = 0.0, False
        existing = _row_text(row)
        if existing.strip():
            if "<tool_call>" in existing or "<answer>" in existing:
                raise ConfigError(
                    "this row's prompt carries the env's text-format instructions (<tool_call>/<answer>), which "
                    "contradict the tools TRL lists; with make_environment_factory use environment_dataset(seeds) "
                    "(or no train_dataset): reset() writes the prompt"
                )
            return None
        how = ANSWER_WITH_TOOL if self.env.unwrapped.final_answer else ACT_WITH_TOOLS
        return f"{self.env.unwrapped.task_text()}\n\n{how}"

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.done:
            return "The episode is over; no more tool calls."
        env = self.env.unwrapped
        _obs, reward, terminated, truncated, info = self.env.step(env.call_text(name, **arguments))
        self.total += float(reward)
        self.done = terminated or truncated
        return info["messages"][-1]["content"] if not info["action_error"] else info["action_error"]

    def get_reward(self) -> float:
        """The env's episode return (process rewards plus the outcome). An episode the model ended without
        calling ``answer`` (or, in a world, before the world ended it) is closed like a truncation: no answer
        reward and no format bonus."""
        if not self.done:
            outcome, _ = self.env.unwrapped.close_episode(None)
            self.total += sum(outcome.values())
            self.done = True
        return self.total


class _Answering:
    """The ``answer`` tool of answer-shaped envs (world envs end by their own tools and get none)."""

    env: Any
    total: float
    done: bool

    def answer(self, answer: str) -> str:
        """Submit the final answer and end the episode.

        Args:
            answer: The final answer, short (a name, a date, a number, or yes/no).

        Returns:
            A confirmation.
        """
        if self.done:
            return "The episode is over."
        env = self.env.unwrapped
        _, reward, terminated, truncated, _ = self.env.step(env.answer_text(answer))
        self.total += float(reward)
        self.done = terminated or truncated
        return "Answer recorded."


def make_environment_factory(env_id: str, **env_kwargs: Any) -> Callable[[], Any]:
    """An ``environment_factory`` for TRL's ``GRPOTrainer``: each instance wraps one ``env_id`` env and exposes
    its tools as typed methods, ``answer(answer)`` (answer-shaped envs only: a world env ends by its own tools),
    ``reset(**row)`` and ``get_reward()``."""
    probe = agentr1_gym.make(env_id, **env_kwargs)
    _, info = probe.reset(seed=0)
    methods = {}
    for schema in info["tools"]:
        if schema["function"]["name"] in {"reset", "get_reward", "answer"}:
            raise ConfigError(
                f"tool name {schema['function']['name']!r} clashes with the environment's own methods"
            )
        methods[schema["function"]["name"]] = _tool_method(schema)
    cls_name = "".join(ch for ch in env_id.split("/")[-1] if ch.isalnum()) + "Environment"
    bases = (_EnvironmentBase, _Answering) if probe.unwrapped.final_answer else (_EnvironmentBase,)
    cls = type(
        cls_name,
        bases,
        {**methods, "_make_env": staticmethod(partial(agentr1_gym.make, env_id, **env_kwargs))},
    )
    return cls
