"""Token-exact multi-turn rollouts over Gymnasium envs, with action masks.

For each episode the token sequence is built as the policy saw it:

* the prompt is the chat template's rendering of the reset messages (with the env's tool schemas);
* each turn appends the ids **as generated** (never decoded and re-encoded) with ``action_mask = 1``;
* then the *observation tokens*: the template's text between the end of the generated turn and the start of the
  next one (the turn-closing tokens the template adds, the rendered tool response message(s), the next
  assistant header), with ``action_mask = 0``.

The observation text is the difference of two renderings, which is only valid for templates that are
*prefix-stable* (rendering more messages only appends text). Every turn checks that; a template that rewrites
earlier turns (e.g. one that drops earlier ``<think>`` blocks) is detected, the episode switches to re-rendering
the context each turn, and training uses one sample per turn (:meth:`Trajectory.samples`) instead of a
mis-masked single sequence.

The context is what the env says the agent sees (``info["context"]``, its context policy: the whole chat, a window
of the last K turns, or a compact state). When the env rewrites it (a window that drops old turns, a state
summary), each step is its own training row the same way: its context, then its action, with the action mask. A
window bounds a row's length, and so the update's memory, whatever the episode's length.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import gymnasium as gym

from agentr1_gym.episodes import screenshot_of
from agentr1_gym.generation import GenerationBackend, SamplingConfig, check_backend, check_generations
from agentr1_gym.text import clean_json, clean_text

__all__ = [
    "EpisodeRecorder",
    "Sample",
    "Trajectory",
    "collect_rollouts",
    "observation_delta",
    "render_chat",
    "task_facts",
]


@dataclass
class Sample:
    """One training sequence: prompt ids, completion ids and per-completion-token masks and rewards."""

    prompt_ids: list[int]
    completion_ids: list[int]
    action_mask: list[int]
    logprobs: list[float]
    token_rewards: list[float]


@dataclass
class Trajectory:
    """One episode.

    ``completion_ids`` holds everything after the prompt; ``action_mask[i]`` is 1 exactly where the policy
    generated ``completion_ids[i]``; ``logprobs`` are the sampler's log-probs (0 where the mask is 0);
    ``turn_ends[t]`` is the completion index of the last generated token of turn ``t`` and ``rewards[t]`` the env's
    step reward for it (process rewards, plus the outcome on the last step).

    When the chat template is not prefix-stable or the env rewrites the context (``one_sequence`` False), there
    is no single sequence the policy saw: ``completion_ids`` is then the episode's *action timeline* (the turns' generated ids back to back, all
    with ``action_mask`` 1, ``turn_ends`` indexing it) and ``turns`` holds the context each turn was generated
    from; :meth:`samples` gives one training sample per turn.
    """

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    action_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turn_ends: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    reward_components: list[dict[str, float]] = field(default_factory=list)
    action_errors: list[str | None] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    truncated_reason: str = ""
    metrics: dict[str, float] = field(default_factory=dict)
    task_id: str = ""
    #: the episode is one token sequence the policy saw (each turn's context a prefix of the next) and trains as
    #: one row; False when the template re-rendered an earlier turn or the env rewrote the context (a window, a
    #: state view): then each turn trains as its own row (:meth:`samples`)
    one_sequence: bool = True
    #: per turn: (context ids the turn was generated from, generated ids, logprobs)
    turns: list[tuple[list[int], list[int], list[float]]] = field(default_factory=list)
    #: per turn, when recorded (``collect_rollouts(record_state_keys=True)``): the env's ``state_key()`` before
    #: the turn (None for answer-shaped envs, whose state is the history)
    state_keys: list[Any] = field(default_factory=list)
    #: per step: the env's observation (the tool responses; "" at the end) and the turn's parsed tool calls
    observations: list[str] = field(default_factory=list)
    tool_calls: list[list[dict[str, Any]]] = field(default_factory=list)
    #: per step: whether the observation is the user speaking again (multi-user-turn envs), not a tool's answer
    user_spoke: list[bool] = field(default_factory=list)
    #: for people reading the episode (saved records, the viewer), never for the policy: the task without the
    #: tool instructions (the env's ``task_text()``), its gold answers (``gold_answers``; empty for world envs)
    #: and the final answer the env scored (``info["answer"]``; None when no answer ended the episode)
    question: str = ""
    gold: tuple[str, ...] = ()
    answer: str | None = None
    #: for people reading the episode, where the env shows its page (``info["screenshot"]``,
    #: :func:`agentr1_gym.episodes.screenshot_of`): the page the first turn saw, and per step the page after it
    screenshot: str | None = None
    screenshots: list[str | None] = field(default_factory=list)

    @property
    def prefix_stable(self) -> bool:
        """Deprecated (until 0.3): :attr:`one_sequence` (context policies set it too, not only templates)."""
        warnings.warn(
            "Trajectory.prefix_stable is now Trajectory.one_sequence", DeprecationWarning, stacklevel=2
        )
        return self.one_sequence

    @property
    def episode_return(self) -> float:
        return float(sum(self.rewards))

    @property
    def num_turns(self) -> int:
        return len(self.turn_ends)

    def token_rewards(self, components: Sequence[str] | None = None) -> list[float]:
        """Per completion token: each step's reward on the last generated token of its turn, 0 elsewhere; with
        ``components``, only those reward components of each step (e.g. ``("answer",)``)."""
        out = [0.0] * len(self.completion_ids)
        if components is None:
            steps = self.rewards
        else:
            steps = [sum(float(c.get(k, 0.0)) for k in components) for c in self.reward_components]
        for end, r in zip(self.turn_ends, steps):
            if 0 <= end < len(out):
                out[end] += r
        return out

    def samples(self) -> list[Sample]:
        """Training samples: the whole episode as one sequence when the template is prefix-stable, else one sample
        per turn (its own rendered context as prompt, the turn's generation as completion, its reward at the end)."""
        if self.one_sequence:
            return [
                Sample(
                    self.prompt_ids,
                    self.completion_ids,
                    self.action_mask,
                    self.logprobs,
                    self.token_rewards(),
                )
            ]
        out = []
        for (context, gen, logps), reward in zip(self.turns, self.rewards):
            rewards = [0.0] * len(gen)
            rewards[-1] = reward
            out.append(Sample(context, gen, [1] * len(gen), logps, rewards))
        return out


def render_chat(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    tools: list[dict] | None,
    *,
    add_generation_prompt: bool,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> str:
    """The chat template's text for ``messages`` (tools passed only when there are some)."""
    return tokenizer.apply_chat_template(
        messages,
        tools=tools or None,
        add_generation_prompt=add_generation_prompt,
        tokenize=False,
        **(chat_template_kwargs or {}),
    )


def observation_delta(
    tokenizer: Any,
    rendered: str,
    before: list[dict[str, Any]],
    messages: list[dict[str, Any]],
    tools: list[dict] | None,
    ended_with_eos: bool,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> tuple[str | None, str]:
    """The template's text between the end of a generated assistant turn and the start of the next one.

    ``rendered`` is the text the turn was generated after (``before`` with the generation prompt); ``messages`` is
    ``before`` + that assistant turn + what the env answered. Returns ``(delta, next_rendering)``: ``delta`` is the
    turn-closing text the template adds (without the end-of-turn token when the model generated it itself,
    ``ended_with_eos``), the rendered new messages and the next assistant header; it is None when the template
    is not prefix-stable here (the renderings do not extend each other)."""
    closed = render_chat(
        tokenizer, messages[: len(before) + 1], tools, add_generation_prompt=False,
        chat_template_kwargs=chat_template_kwargs,
    )  # fmt: skip
    nxt = render_chat(
        tokenizer, messages, tools, add_generation_prompt=True, chat_template_kwargs=chat_template_kwargs
    )
    head = rendered + messages[len(before)]["content"]
    if not (closed.startswith(head) and nxt.startswith(closed)):
        return None, nxt
    close = closed[len(head) :]
    eos = tokenizer.decode([tokenizer.eos_token_id]) if tokenizer.eos_token_id is not None else ""
    if ended_with_eos and eos and close.startswith(eos):
        close = close[len(eos) :]  # the model already generated the end-of-turn token
    return close + nxt[len(closed) :], nxt


def _context(info: dict[str, Any]) -> list[dict[str, Any]]:
    """What the agent sees for its next turn: the env's ``info["context"]`` (its context policy), else the whole
    chat (``info["messages"]``, for envs that predate context policies)."""
    context = info.get("context")
    return context if context else info["messages"]


def _clean(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the messages whose text a tokenizer can encode (:func:`~agentr1_gym.text.clean_text`: envs that
    are not ToolEnvs may pass a tool's or server's text on as it came)."""
    return [
        {**m, "content": clean_text(m["content"])} if isinstance(m.get("content"), str) else dict(m)
        for m in messages
    ]


class EpisodeRecorder:
    """The token bookkeeping of one episode, for any loop that generates turn by turn: the prompt ids from the
    reset info, each generated turn's ids as generated (``action_mask`` 1), each step's reward, components and
    errors, and the observation tokens between turns (``action_mask`` 0), checking prefix stability every turn
    (see the module docstring). :func:`collect_rollouts` drives one per episode over a batch; engine adapters
    (verl's agent loop) drive one from their own async loop.

    Use: ``rec = EpisodeRecorder(tokenizer, reset_info)``; while not ``rec.done``: generate at most ``rec.room``
    tokens from ``rec.context_ids``, ``action = rec.add_generation(ids, logprobs)``, and unless ``action`` is None
    step the env with it and pass the step's result to :meth:`add_step`. ``rec.traj`` is the trajectory.
    """

    def __init__(
        self,
        tokenizer: Any,
        reset_info: dict[str, Any],
        *,
        max_episode_tokens: int = 4096,
        max_completion_tokens: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.kw = chat_template_kwargs
        self.eos_ids = {tokenizer.eos_token_id}
        self.messages = _clean(_context(reset_info))
        tools = reset_info.get("tools")
        self.tools: list[dict] | None = clean_json(tools, 64)[0] if tools else tools
        #: the template's text of ``messages`` plus the generation prompt
        self.rendered = render_chat(
            tokenizer, self.messages, self.tools, add_generation_prompt=True, chat_template_kwargs=self.kw
        )
        ids = tokenizer.encode(self.rendered, add_special_tokens=False)
        self.traj = Trajectory(
            prompt_ids=list(ids),
            task_id=str(reset_info.get("task_id", "")),
            screenshot=screenshot_of(reset_info),
        )
        #: prompt + completion budget (``max_completion_tokens`` caps what follows the prompt, as engines that pad
        #: responses to a fixed length need)
        self.max_episode_tokens = max_episode_tokens
        if max_completion_tokens is not None:
            self.max_episode_tokens = min(max_episode_tokens, len(ids) + max_completion_tokens)
        #: what the next turn is generated from
        self.context_ids: list[int] = list(ids)
        self.done = False
        self._action: str | None = None
        self._check_budget()

    @property
    def room(self) -> int:
        """Tokens the next turn may still generate within ``max_episode_tokens``."""
        return max(0, self.max_episode_tokens - len(self.context_ids))

    def _check_budget(self) -> None:
        if not self.done and len(self.context_ids) >= self.max_episode_tokens:
            self._end(truncated_reason="token_budget")

    def _end(self, *, terminated: bool = False, truncated_reason: str = "") -> None:
        self.done = True
        self.traj.terminated = terminated
        self.traj.truncated = not terminated
        self.traj.truncated_reason = "" if terminated else truncated_reason

    def add_generation(
        self, ids: Sequence[int], logprobs: Sequence[float], state_key: Any = None
    ) -> str | None:
        """Record one generated turn (cut to :attr:`room`); returns the action text to step the env with, or None
        when nothing was generated (the episode then ends, truncated with reason ``empty_generation``).
        ``state_key``: the env's state before the turn, kept in ``traj.state_keys`` (step-level credit)."""
        room = self.room
        kept, logps = list(ids[:room]), list(logprobs[:room])
        if not kept:
            self._end(truncated_reason="empty_generation")
            return None
        traj = self.traj
        traj.state_keys.append(state_key)
        traj.turns.append((list(self.context_ids), kept, logps))
        traj.completion_ids += kept
        traj.action_mask += [1] * len(kept)
        traj.logprobs += logps
        traj.turn_ends.append(len(traj.completion_ids) - 1)
        text = self.tokenizer.decode(kept, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        traj.actions.append(text)
        if len(ids) > room:
            traj.truncated_reason = "token_budget"
        self._action = text
        return text

    def add_step(
        self, reward: float, terminated: bool, truncated: bool, info: dict[str, Any], observation: str = ""
    ) -> None:
        """Record the env's answer to the last action: reward, components, error, the observation text and the
        parsed tool calls; then either the end of the episode (with the env's ``metrics``) or the observation
        tokens that lead to the next turn."""
        if self._action is None:
            raise RuntimeError(
                "add_step() needs a recorded turn first: call add_generation() and step its action"
            )
        self._action = None
        traj = self.traj
        traj.rewards.append(float(reward))
        traj.reward_components.append({k: float(v) for k, v in info.get("reward_components", {}).items()})
        traj.action_errors.append(info.get("action_error"))
        traj.observations.append(str(observation))
        traj.tool_calls.append(list(info.get("tool_calls") or []))
        traj.user_spoke.append(bool(info.get("user_spoke")))
        traj.screenshots.append(screenshot_of(info))
        if terminated or truncated or traj.truncated_reason:
            traj.metrics = {k: float(v) for k, v in info.get("metrics", {}).items()}
            if isinstance(info.get("answer"), str):
                traj.answer = info["answer"]
            reason = "" if terminated else traj.truncated_reason or info.get("truncated_reason") or "env"
            self._end(terminated=terminated, truncated_reason=reason)
            return
        self._append_observation(_clean(_context(info)))
        self._check_budget()

    def _append_observation(self, messages: list[dict[str, Any]]) -> None:
        traj = self.traj
        ended_with_eos = traj.completion_ids[traj.turn_ends[-1]] in self.eos_ids
        n = len(self.messages)
        # the chat grew: one sequence, if the template is prefix-stable; else the env rewrote what the agent sees
        # (a context window, a state summary): one sample per step
        if len(messages) > n and messages[:n] == self.messages:
            delta, nxt = observation_delta(
                self.tokenizer, self.rendered, self.messages, messages, self.tools, ended_with_eos, self.kw
            )
        else:
            delta = None
            nxt = render_chat(
                self.tokenizer, messages, self.tools, add_generation_prompt=True, chat_template_kwargs=self.kw
            )
        if traj.one_sequence and delta is not None:
            obs_ids = self.tokenizer.encode(delta, add_special_tokens=False)
            traj.completion_ids += obs_ids
            traj.action_mask += [0] * len(obs_ids)
            traj.logprobs += [0.0] * len(obs_ids)
            self.context_ids = traj.prompt_ids + traj.completion_ids
        else:
            if traj.one_sequence:
                _to_action_timeline(traj)
            traj.one_sequence = False  # re-render the context each turn; train on per-turn samples
            self.context_ids = self.tokenizer.encode(nxt, add_special_tokens=False)
        self.rendered = nxt
        self.messages = messages


class _ListBatch:
    def __init__(self, envs: Sequence[gym.Env]) -> None:
        self.envs = list(envs)

    def reset(self, seeds: Sequence[int | None], options: Sequence[dict | None]) -> list[tuple[str, dict]]:
        return [env.reset(seed=s, options=o) for env, s, o in zip(self.envs, seeds, options)]

    def step(self, actions: dict[int, str]) -> dict[int, tuple]:
        return {i: self.envs[i].step(a) for i, a in actions.items()}

    def stop_strings(self) -> tuple[str, ...]:
        return tuple(self.envs[0].unwrapped.tool_format.stop_strings)

    def state_keys(self, live: Sequence[int]) -> list[Any]:
        return [_state_key(self.envs[i].unwrapped) for i in live]

    def task_facts(self) -> list[tuple[str, tuple[str, ...]]]:
        return [task_facts(env.unwrapped) for env in self.envs]


def _unbatch_info(infos: dict[str, Any], i: int) -> dict[str, Any]:
    out = {}
    for key, value in infos.items():
        if key.startswith("_"):
            continue
        mask = infos.get(f"_{key}")
        if mask is not None and not mask[i]:
            continue
        out[key] = _unbatch_info(value, i) if isinstance(value, dict) else value[i]
    return out


class _VectorBatch:
    """A Gymnasium vector env (sync or async, NEXT_STEP autoreset): finished sub-envs get a dummy action."""

    def __init__(self, venv: gym.vector.VectorEnv) -> None:
        self.venv = venv
        self.n = venv.num_envs

    def reset(self, seeds: Sequence[int | None], options: Sequence[dict | None]) -> list[tuple[str, dict]]:
        if any(o for o in options):
            raise ValueError(
                "per-episode reset options are not supported with vector envs; pass a list of envs"
            )
        obs, infos = self.venv.reset(seed=list(seeds) if any(s is not None for s in seeds) else None)
        return [(obs[i], _unbatch_info(infos, i)) for i in range(self.n)]

    def step(self, actions: dict[int, str]) -> dict[int, tuple]:
        full = tuple(actions.get(i, "") for i in range(self.n))
        obs, rewards, term, trunc, infos = self.venv.step(full)
        return {
            i: (obs[i], float(rewards[i]), bool(term[i]), bool(trunc[i]), _unbatch_info(infos, i))
            for i in actions
        }

    def stop_strings(self) -> tuple[str, ...]:
        return tuple(self.venv.get_attr("tool_format")[0].stop_strings)

    def state_keys(self, live: Sequence[int]) -> list[Any]:
        keys = self.venv.call("state_key")
        return [keys[i] for i in live]

    def task_facts(self) -> list[tuple[str, tuple[str, ...]]]:
        try:
            texts, golds = self.venv.call("task_text"), self.venv.get_attr("gold_answers")
        except (AttributeError, NotImplementedError):  # an env without the optional API: nothing to show
            return [("", ())] * self.n
        return [_facts(t, g) for t, g in zip(texts, golds)]


def _facts(text: Any, golds: Any) -> tuple[str, tuple[str, ...]]:
    text = clean_text(text) if isinstance(text, str) else ""
    golds = tuple(clean_text(str(g)) for g in golds) if isinstance(golds, (list, tuple)) else ()
    return text, golds


def task_facts(env: Any) -> tuple[str, tuple[str, ...]]:
    """The current task as a person reads it: ``(task_text(), gold_answers)`` of an env with the ToolEnv API,
    ``("", ())`` for one without (any gymnasium text env may be rolled out). Never shown to the policy."""
    try:
        return _facts(env.task_text(), getattr(env, "gold_answers", ()))
    except (AttributeError, NotImplementedError):
        return "", ()


def _state_key(env: Any) -> Any:
    """The env's ``state_key()`` (None for an env without one: its state is its history)."""
    method = getattr(env, "state_key", None)
    return method() if callable(method) else None


def collect_rollouts(
    envs: Sequence[gym.Env] | gym.vector.VectorEnv,
    backend: GenerationBackend,
    tokenizer: Any,
    *,
    sampling: SamplingConfig | None = None,
    seeds: Sequence[int | None] | None = None,
    options: Sequence[dict | None] | None = None,
    max_episode_tokens: int = 4096,
    chat_template_kwargs: dict[str, Any] | None = None,
    vocab_size: int | None = None,
    record_state_keys: bool = False,
) -> list[Trajectory]:
    """Run one episode per env, batching generation across all live episodes each turn.

    Args:
        envs: a list of envs (any env honouring the ToolEnv contract) or a Gymnasium vector env.
        backend: generates one turn per prompt (:class:`~agentr1_trl.backends.HFGenerator`, ...).
        tokenizer: the policy's tokenizer, with a chat template.
        sampling: sampling settings; the env's tool-format stop strings are added.
        seeds: per-env reset seeds.
        options: per-env reset options.
        max_episode_tokens: prompt + completion budget; an episode that reaches it ends with
            ``truncated_reason="token_budget"``.
        vocab_size: the policy's vocabulary (default ``len(tokenizer)``): every generated id must lie below it
            (:func:`~agentr1_gym.generation.check_generations` checks each turn of every backend).
        record_state_keys: keep each turn's starting world state (the env's ``state_key()``) in
            ``Trajectory.state_keys``, for step-level credit (GiGPO's step groups).
    """
    check_backend(backend)
    batch = _VectorBatch(envs) if isinstance(envs, gym.vector.VectorEnv) else _ListBatch(envs)
    n = batch.n if isinstance(batch, _VectorBatch) else len(batch.envs)
    sampling = sampling or SamplingConfig()
    sampling = replace(
        sampling, stop_strings=tuple(dict.fromkeys((*sampling.stop_strings, *batch.stop_strings())))
    )
    seeds = list(seeds) if seeds is not None else [None] * n
    options = list(options) if options is not None else [None] * n
    if len(seeds) != n or len(options) != n:
        raise ValueError(
            f"need one seed/option per env ({n}), got {len(seeds)} seeds and {len(options)} options"
        )
    vocab = int(vocab_size or len(tokenizer))
    episodes = [
        EpisodeRecorder(
            tokenizer, info, max_episode_tokens=max_episode_tokens, chat_template_kwargs=chat_template_kwargs
        )
        for _, info in batch.reset(seeds, options)
    ]
    for ep, (question, gold) in zip(episodes, batch.task_facts()):
        ep.traj.question, ep.traj.gold = question, gold
    while live := [i for i, ep in enumerate(episodes) if not ep.done]:
        gens = check_generations(
            backend,
            backend.generate([episodes[i].context_ids for i in live], sampling),
            len(live),
            vocab_size=vocab,
            max_new_tokens=sampling.max_new_tokens,
        )
        actions: dict[int, str] = {}
        keys = batch.state_keys(live) if record_state_keys else [None] * len(live)
        for i, gen, key in zip(live, gens, keys):
            action = episodes[i].add_generation(gen.ids, gen.logprobs, key)
            if action is not None:
                actions[i] = action
        for i, (obs, reward, terminated, truncated, info) in batch.step(actions).items():
            episodes[i].add_step(reward, terminated, truncated, info, obs)
    if isinstance(batch, _ListBatch):  # episodes the token budget ended are scored like any truncation
        for env, ep in zip(batch.envs, episodes):
            if not ep.traj.metrics and not env.unwrapped.done:
                _close_cut_episode(env.unwrapped, ep.traj)
    return [ep.traj for ep in episodes]


def _close_cut_episode(env: Any, traj: Trajectory) -> None:
    """An episode the rollout cut (its token budget spent, or nothing generated) ends for the env too: the env
    scores it as a truncation (outcome reward on the last turn, ``metrics``), as when it truncates itself."""
    outcome, metrics = env.close_episode(None)
    traj.metrics = {k: float(v) for k, v in metrics.items()}
    if traj.rewards:
        traj.rewards[-1] += sum(outcome.values())
        for key, value in outcome.items():
            traj.reward_components[-1][key] = traj.reward_components[-1].get(key, 0.0) + value


def _to_action_timeline(traj: Trajectory) -> None:
    """Drop the observation tokens appended so far: a trajectory that is not prefix-stable keeps, as its
    ``completion_ids``, only the turns' generated ids back to back (its action timeline)."""
    keep = [i for i, m in enumerate(traj.action_mask) if m]
    index = {old: new for new, old in enumerate(keep)}
    traj.turn_ends = [index[e] for e in traj.turn_ends]
    traj.completion_ids = [traj.completion_ids[i] for i in keep]
    traj.logprobs = [traj.logprobs[i] for i in keep]
    traj.action_mask = [1] * len(keep)
