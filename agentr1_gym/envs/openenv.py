"""``AgentR1/OpenEnv-v0``: an env on an OpenEnv server, as one of ours (``base_url=``; ``pip install
"agentr1-gym[openenv]"``).

The server runs the env; this side speaks OpenEnv's session protocol (a WebSocket on ``/ws``, JSON messages
``reset``/``step``/``state``/``close``) and turns its answers into our contract, so that eval, play, both trainers
and the viewer work on it unchanged:

* **Actions.** A turn is sent as the server's action: ``{"text": turn}`` for our own servers (``agentr1
  serve-env``); for another server, the one text field of its action schema (``/schema``), or the field named by
  ``action_field=``.
* **Observations.** The observation's ``text`` field (our servers), its one string field, or its fields as JSON.
  Our servers also send the messages each step added and the tool schemas, so the chat (and its tokens) is the
  one a direct ``gym.make`` episode would have; other servers' observations arrive as user turns.
* **Rewards and ends** come from the server: ``reward`` and ``done`` of each step, and, from our servers, the
  reward components, ``action_error`` and ``metrics``. Another server's last reward is the outcome; an episode
  succeeds when its return reaches ``success_return`` (default: when the last reward is positive).
  **Truncation** comes from our ``max_turns``.
* **An action the server's env fails on** (OpenEnv's ``EXECUTION_ERROR``) is the model's mistake, not the run's:
  it becomes the observation, ``info["action_error"]`` and the invalid-format penalty.
* **Infrastructure fails loudly, never silently and never by hanging.** Every answer must arrive whole within
  ``timeout_s`` (a deadline per answer, not per read: a server that drips bytes cannot hold a call). The
  session is created over HTTP and the WebSocket attached to it, so a dropped connection is re-attached to the same
  env within the episode's deadline (``episode_timeout_s``); a step whose answer was lost after the server ran it
  cannot be replayed, and raises. A full server, a refused session, an unreachable or lying server raise
  :class:`EnvServerError` with what happened. Nothing the server sends is evaluated, fetched or run: JSON only,
  redirects refused (HTTP and the WebSocket handshake alike), sizes bounded (a message over the limit fails at
  once, without retries).
* **Every value the server sends is checked**: rewards, reward components and ``max_episode_reward`` keep the
  reward rule (finite, within ``agentr1_gym.rewards.REWARD_LIMIT``), metrics are finite, counts are counts,
  NaN/Infinity or nesting too deep anywhere in an answer make it unreadable. A server that breaks any of these is
  lying: :class:`EnvServerError`, never a silent 0.0 and never a ``ValueError`` that a retry would miss.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any, ClassVar

from agentr1_gym.env import ToolEnv
from agentr1_gym.envs.openenv_session import EnvServerError, ServerSaid, Session
from agentr1_gym.errors import ConfigError, ResetNeededError
from agentr1_gym.rewards import reward_problem
from agentr1_gym.text import clean_json, clean_text

__all__ = ["EnvServerError", "OpenEnvEnv"]

#: action fields a text turn goes to on servers that are not ours, in order of preference
TEXT_FIELDS = ("text", "message", "content", "response", "answer", "command", "action", "code", "query")


class OpenEnvEnv(ToolEnv):
    """An env on an OpenEnv server (see the module docstring). ``base_url`` is the server
    (``http://127.0.0.1:8000``); ``timeout_s`` bounds every call, ``episode_timeout_s`` the time a dropped
    connection may take to come back; ``action_field`` names the action's text field on servers that are not
    ours; ``success_return`` is the return that counts as success there; ``reset_kwargs`` go with every reset."""

    final_answer: ClassVar[bool] = False  # the server decides when an episode ends
    process_local: ClassVar[tuple[str, ...]] = ("_session",)
    answer_metrics: ClassVar[tuple[str, ...]] = ("score",)

    def __init__(
        self,
        base_url: str | None = None,
        *,
        timeout_s: float = 60.0,
        episode_timeout_s: float = 600.0,
        action_field: str | None = None,
        success_return: float | None = None,
        reset_kwargs: dict[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        if not base_url or not isinstance(base_url, str):
            raise ConfigError(
                "AgentR1/OpenEnv-v0 needs base_url=, the OpenEnv server to play on (e.g. "
                "base_url='http://127.0.0.1:8000' after `agentr1 serve-env AgentR1/HotpotQA-v0 --port 8000`)"
            )
        if not timeout_s > 0 or not episode_timeout_s > 0:
            raise ConfigError("timeout_s and episode_timeout_s must be > 0")
        super().__init__([], **settings)
        self.base_url = base_url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.episode_timeout_s = float(episode_timeout_s)
        self.action_field = action_field
        self.success_return = success_return
        self.reset_kwargs = dict(reset_kwargs or {})
        self._schema: dict[str, Any] | None = None
        self._ours = False  # the server is agentr1 serve-env (its observations carry our info)
        self._return = 0.0
        self._last_reward = 0.0
        self._metrics: dict[str, float] = {}
        self._max_reward: float | None = None
        self._deadline = 0.0
        self._session: Session | None = None
        self.open_resources()

    def open_resources(self) -> None:
        self._session = None  # connected at the first reset

    def close_resources(self) -> None:
        if getattr(self, "_session", None) is not None:
            self._session.close()
            self._session = None

    # -- what ToolEnv asks of an env (the server holds the task) -----------------------------------------
    def task_prompt(self, task: Any) -> str:
        return self.messages[0]["content"] if self.messages else ""

    def score_answer(self, answer: str | None) -> dict[str, float]:
        return dict(self._metrics) if self._metrics else {"score": 0.0}

    # -- the action schema -----------------------------------------------------------------------------
    def _text_field(self, session: Session) -> str:
        if self._schema is None:
            schema = session.http("/schema")
            action = schema.get("action") if isinstance(schema, dict) else None
            if not isinstance(action, dict):
                raise EnvServerError(f"{self.base_url}/schema has no action schema")
            self._schema = action
            props = action.get("properties") or {}
            self._ours = {"text", "tool_name", "arguments"} <= set(props)
        props = self._schema.get("properties") or {}
        if self.action_field is not None:
            if self.action_field not in props:
                raise ConfigError(
                    f"action_field={self.action_field!r} is not in the server's action schema ({sorted(props)})"
                )
            return self.action_field

        def is_text(spec: Any) -> bool:
            if not isinstance(spec, dict):
                return False
            kinds = [spec.get("type")] + [s.get("type") for s in spec.get("anyOf", []) if isinstance(s, dict)]
            return "string" in kinds

        texts = [name for name, spec in props.items() if name != "metadata" and is_text(spec)]
        for name in TEXT_FIELDS:
            if name in texts:
                return name
        if len(texts) == 1:
            return texts[0]
        raise ConfigError(
            f"cannot tell which field of {self.base_url}'s action takes the model's text (string fields: "
            f"{texts or 'none'}); pass action_field=NAME"
        )

    # -- gym API ----------------------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super(ToolEnv, self).reset(seed=seed)
        if self._session is None:
            self._session = Session(self.base_url, self.timeout_s)
        session = self._session
        self._text_field(
            session
        )  # reads /schema once: which field takes text, and whether the server is ours
        self._deadline = time.monotonic() + self.episode_timeout_s
        if session.ws is None and session.session_id is None:
            session.open()  # the session (one env on the server) lasts until close(); episodes reset it
        data: dict[str, Any] = dict(self.reset_kwargs)
        if seed is not None:
            data["seed"] = int(seed)
        if options:
            data["options"] = options
        try:
            answer = session.request(
                {"type": "reset", "data": data}, replayable=True, deadline=self._deadline
            )
        except ServerSaid as exc:
            raise EnvServerError(f"the server could not reset: {exc} ({exc.code})") from None
        session.steps = 0
        text, meta = self._observation(answer)
        messages = meta.get("new_messages") if self._ours else None
        self.messages = _messages(messages) or [{"role": "user", "content": text}]
        self.turn, self._done, self._format_ok = 0, False, True
        self._return, self._last_reward, self._metrics = 0.0, 0.0, {}
        self.task = {"id": meta.get("task_id") or f"seed-{seed}", "prompt": self.messages[0]["content"]}
        self._episode_task_id = str(self.task["id"])
        bound = meta.get("max_episode_reward") if self._ours else None
        self._max_reward = (
            None if bound is None else _server_reward(bound, "max_episode_reward", self.base_url)
        )
        tools = meta.get("tools") if self._ours and isinstance(meta.get("tools"), list) else []
        self._tool_schemas = [clean_json(t, 64)[0] for t in tools if isinstance(t, dict)]
        info = {
            "messages": list(self.messages),
            "context": self.context_messages(),
            "tools": list(self._tool_schemas),
            "task_id": self._episode_task_id,
            "turn": 0,
        }
        return text, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        action = self.checked_action(action)
        session = self._session
        if session is None:  # an unpickled copy that was never reset
            raise ResetNeededError("Cannot call step() before reset(): call env.reset() first.")
        self.turn += 1
        field = self._text_field(session)
        payload: dict[str, Any] = {field: action}
        action_error: str | None = None
        try:
            answer = session.request(
                {"type": "step", "data": payload}, replayable=False, deadline=self._deadline
            )
        except ServerSaid as exc:
            if exc.code not in ("EXECUTION_ERROR", "VALIDATION_ERROR"):
                raise EnvServerError(f"the server failed the step: {exc} ({exc.code})") from None
            # the server's env failed on this turn (or refused its shape): the model's mistake, as any bad turn
            answer = None
            action_error = f"The environment could not take this turn: {exc}"
        session.steps += 1
        if answer is None:
            penalty = float(self.reward_config.invalid_format_penalty)
            reward, done, truncated_remote, meta, text = penalty, False, False, {}, action_error or ""
            components = {"invalid_format": penalty}
            self._format_ok = False
            new = [{"role": "assistant", "content": action}, {"role": "user", "content": text}]
        else:
            text, meta = self._observation(answer)
            reward = _server_reward(answer.get("reward"), "reward", self.base_url)
            done = bool(answer.get("done"))
            truncated_remote = bool(meta.get("truncated")) if self._ours else False
            action_error = meta.get("action_error") if isinstance(meta.get("action_error"), str) else None
            components = _components(meta.get("reward_components"), self.base_url) if self._ours else None
            if components is None:
                components = {"env_reward": reward}
            new = _messages(meta.get("new_messages")) if self._ours else None
            if not new:
                new = [{"role": "assistant", "content": action}]
                if text:
                    new.append({"role": "user", "content": text})
        self.messages.extend(new)
        self._return += reward
        self._last_reward = reward
        terminated = done and not truncated_remote
        truncated = (done and truncated_remote) or (not done and self.turn >= self.max_turns)
        info: dict[str, Any] = {
            "task_id": self._episode_task_id,
            "turn": self.turn,
            "action_error": action_error,
            "num_tool_calls": _count(meta.get("num_tool_calls", 0), self.base_url) if self._ours else 0,
            "tool_calls": _calls(meta.get("tool_calls"), self.base_url) if self._ours else [],
            "truncated_reason": "" if not truncated else str(meta.get("truncated_reason") or "max_turns"),
        }
        if terminated or truncated:
            self._done = True
            metrics = meta.get("metrics") if self._ours else None
            self._metrics = (
                _floats(metrics, self.base_url) if isinstance(metrics, dict) else self._remote_metrics()
            )
            self._metrics.setdefault("turns", float(self.turn))
            info["metrics"] = dict(self._metrics)
            if isinstance(meta.get("answer"), str):
                info["answer"] = meta["answer"]
        if self._ours and ("process_reward" in meta or "outcome_reward" in meta):
            process = _server_reward(meta.get("process_reward", "missing"), "process_reward", self.base_url)
            outcome = _server_reward(meta.get("outcome_reward", "missing"), "outcome_reward", self.base_url)
        else:
            process, outcome = (0.0, reward) if done else (reward, 0.0)
        self.finish_info(info, components, process, outcome)
        return ("" if terminated else text), float(reward), terminated, truncated, info

    def _remote_metrics(self) -> dict[str, float]:
        if self.success_return is not None:
            success = self._return >= self.success_return
        else:
            success = self._last_reward > 0
        return {"score": float(success), "success": float(success), "return": self._return,
                "format_ok": float(self._format_ok)}  # fmt: skip

    def close_episode(
        self, answer: str | None = None, *, terminated: bool = False
    ) -> tuple[dict[str, float], dict[str, float]]:
        """A cut episode (the rollout's token budget): nothing more is paid; the server's session ends at the
        next reset."""
        self._done = True
        if not self._metrics:
            self._metrics = self._remote_metrics() if not self._ours else {"score": 0.0, "success": 0.0}
            self._metrics.update(turns=float(self.turn), format_ok=0.0)
        return {}, dict(self._metrics)

    def _observation(self, answer: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        obs = answer.get("observation")
        obs = obs if isinstance(obs, dict) else {}
        meta = answer.get("metadata")
        if not isinstance(meta, dict):
            meta = obs.get("metadata") if isinstance(obs.get("metadata"), dict) else {}
        meta = clean_json(meta, 64)[0]
        fields = {k: v for k, v in obs.items() if k not in ("metadata", "reward", "done")}
        if isinstance(fields.get("text"), str):
            text = fields["text"]
        else:
            strings = [v for v in fields.values() if isinstance(v, str)]
            text = strings[0] if len(strings) == 1 else json.dumps(clean_json(fields, 16, strict=True)[0])
        return clean_text(text), meta

    def max_episode_reward(self) -> float:
        """The bound our servers send with each reset; other servers do not say."""
        self._require_task("max_episode_reward()")
        if self._max_reward is None:
            raise ConfigError(f"the server at {self.base_url} does not say its envs' largest return")
        return self._max_reward

    @property
    def done(self) -> bool:
        return self._done


def _messages(value: Any) -> list[dict[str, Any]] | None:
    """The server's messages, kept only if each is a ``{"role": str, "content": str, ...}`` dict."""
    if not isinstance(value, list) or not value:
        return None
    out = []
    for m in value:
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return None
        out.append({k: v for k, v in m.items() if k in ("role", "content", "name", "tool_call_id")})
    return out


#: the most tool calls a server may say one turn made
MAX_CALLS = 10_000


def _server_reward(value: Any, what: str, url: str) -> float:
    """A reward from the server under the reward rule (``None``, OpenEnv's "no reward", is 0.0); anything else
    that is not a finite number within ``REWARD_LIMIT`` means the server is lying: :class:`EnvServerError`."""
    if value is None:
        return 0.0
    problem = reward_problem(value)
    if problem is not None:
        raise EnvServerError(f"{url} sent {what} {problem}")
    return float(value)


def _floats(value: dict[str, Any], url: str) -> dict[str, float]:
    """The server's metrics: its numbers (other values are left out); one that is not finite is an
    :class:`EnvServerError`."""
    out = {}
    for k, v in value.items():
        if isinstance(v, (int, float)):
            try:
                number = float(v)
            except OverflowError:
                number = math.inf
            if not math.isfinite(number):
                raise EnvServerError(
                    f"{url} sent metric {str(k)[:60]!r} = {str(v)[:40]}, not a finite number"
                )
            out[str(k)] = number
    return out


def _components(value: Any, url: str) -> dict[str, float] | None:
    if not isinstance(value, dict) or not value:
        return None
    return {str(k): _server_reward(v, f"reward component {str(k)[:60]!r}", url) for k, v in value.items()}


def _count(value: Any, url: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_CALLS:
        raise EnvServerError(
            f"{url} sent num_tool_calls {str(value)[:40]!r}, not a count in [0, {MAX_CALLS}]"
        )
    return value


def _calls(value: Any, url: str) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_CALLS or not all(isinstance(c, dict) for c in value):
        raise EnvServerError(f"{url} sent tool_calls that are not a list of call objects")
    return list(value)
