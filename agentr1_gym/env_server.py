"""Any registered env served over OpenEnv's session protocol, by the ``openenv`` package's own server
(``agentr1 serve-env``; ``pip install "agentr1-gym[openenv]"``).

An OpenEnv server holds one env per WebSocket session (``/ws``), answers ``/health``, ``/schema`` and
``/metadata``, and refuses a session over ``max_sessions`` with OpenEnv's ``CAPACITY_REACHED`` error. What we add
is the mapping between our contract and OpenEnv's types, nothing of the protocol:

* **Action** :class:`TextAction`: ``{"text": <one assistant turn>}``, exactly what ``env.step`` takes; or a tool
  call in the shape of OpenEnv's MCP ``call_tool`` (``{"tool_name": ..., "arguments": {...}}``), which the env's
  own tool format writes as a turn (so the env parses, checks and pays it like any other turn).
* **Observation** :class:`TextObservation`: ``text`` (the env's observation), ``reward`` (the step's),
  ``done`` (terminated or truncated) and ``metadata`` with what ``info`` holds: ``truncated``,
  ``truncated_reason``, ``reward_components``, ``process_reward``, ``outcome_reward``, ``action_error``, ``metrics``
  (at the end), ``task_id``, ``turn``, the messages the step appended (``new_messages``) and, at reset, the
  tool schemas (``tools``) and the first messages. Gold answers never leave the server.
* **reset** takes our ``seed`` and ``options``; **state** is the env id, task id, turn and step count.

Bad input stays an observation: a malformed turn is the env's business (an ``action_error`` and a penalty); an
action the schema refuses is OpenEnv's ``VALIDATION_ERROR``; a ``step`` after the episode ended is an
``EXECUTION_ERROR`` that says to reset. None of them ends the session or the server.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import threading
from pathlib import Path
from typing import Any

from agentr1_gym.errors import ConfigError, MissingDependencyError
from agentr1_gym.text import clean_json, clean_text

__all__ = ["DEFAULT_MAX_SESSIONS", "build_app", "serve", "write_space"]

#: concurrent sessions (one env each) a server holds by default
DEFAULT_MAX_SESSIONS = 16
#: seconds a session may sit idle before the server closes it (a client that vanished frees its slot)
DEFAULT_SESSION_TIMEOUT_S = 600.0


def _openenv() -> Any:
    try:
        from openenv.core.env_server import http_server, interfaces, types
    except ImportError as exc:
        raise MissingDependencyError("openenv", "openenv", "serving an env over OpenEnv") from exc
    return http_server, interfaces, types


@functools.cache
def _models() -> tuple[type, type, type, type]:
    """The OpenEnv action, observation and state models, and the environment class (built once, on first use, so
    that importing this module does not import openenv)."""
    _, interfaces, types = _openenv()
    from pydantic import Field

    class TextAction(types.Action):
        """One assistant turn (``text``), or one tool call (``tool_name`` + ``arguments``) that the env's tool
        format writes as the turn."""

        text: str | None = Field(default=None, description="one assistant turn, as the model wrote it")
        tool_name: str | None = Field(
            default=None, description="a tool to call instead of text (MCP call_tool)"
        )
        arguments: dict[str, Any] = Field(default_factory=dict, description="the tool call's arguments")

    class TextObservation(types.Observation):
        """The env's observation text; ``metadata`` carries the step's ``info`` (see the module docstring)."""

        text: str = Field(default="", description="the env's observation")

    class EnvState(types.State):
        env_id: str = Field(default="", description="the served env")
        task_id: str | None = Field(default=None, description="the current episode's task")
        turn: int = Field(default=0, description="turns taken in the current episode")

    class ServedEnv(interfaces.Environment):
        """One of our envs behind OpenEnv's ``Environment`` interface; the server builds one per session."""

        SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own env; shared resources are read-only

        def __init__(self, env_id: str, env_kwargs: dict[str, Any]) -> None:
            super().__init__()
            from agentr1_gym.registration import make

            self.env_id = env_id
            self.env = make(env_id, **env_kwargs)
            self._state = EnvState(env_id=env_id)
            self._seen = 0  # messages already sent to the client
            self._lock = threading.Lock()  # one call at a time per session, whatever thread runs it

        def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> Any:
            options = kwargs.get("options")
            if options is not None and not isinstance(options, dict):
                raise ConfigError(f"reset options must be an object, got {type(options).__name__}")
            with self._lock:
                obs, info = self.env.reset(seed=seed, options=options)
                messages = list(info.get("messages") or [{"role": "user", "content": obs}])
                self._seen = len(messages)
                self._state = EnvState(
                    env_id=self.env_id, episode_id=episode_id, task_id=_str(info.get("task_id")), step_count=0
                )
                meta = {
                    "task_id": _str(info.get("task_id")),
                    "turn": 0,
                    "tools": info.get("tools") or [],
                    "new_messages": messages,
                }
                if "context" in info and info["context"] != messages:
                    meta["context"] = info["context"]
                with contextlib.suppress(Exception):
                    meta["max_episode_reward"] = float(self.env.unwrapped.max_episode_reward())
                return TextObservation(text=obs, reward=None, done=False, metadata=_safe(meta))

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Any:
            with self._lock:
                turn = self._turn_text(action)
                obs, reward, terminated, truncated, info = self.env.step(turn)
                messages = list(info.get("messages") or [])
                new = messages[self._seen :] if messages else [{"role": "assistant", "content": turn}]
                self._seen = len(messages)
                self._state.step_count += 1
                self._state.turn = int(info.get("turn", self._state.step_count))
                meta = {key: info[key] for key in _INFO_KEYS if key in info}
                meta.update(terminated=bool(terminated), truncated=bool(truncated), new_messages=new)
                if "context" in info and info["context"] is not info.get("messages"):
                    meta["context"] = info["context"]
                return TextObservation(
                    text=obs, reward=float(reward), done=bool(terminated or truncated), metadata=_safe(meta)
                )

        def _turn_text(self, action: Any) -> str:
            if action.tool_name is not None:
                if action.text is not None:
                    raise ConfigError("an action is text or a tool call (tool_name + arguments), not both")
                tool_format = getattr(self.env.unwrapped, "tool_format", None)
                if tool_format is None:
                    raise ConfigError(f"{self.env_id} takes text actions only (it has no tool format)")
                from agentr1_gym.formats import ToolCall

                return tool_format.format_call(
                    ToolCall(name=action.tool_name, arguments=dict(action.arguments))
                )
            return action.text or ""

        @property
        def state(self) -> Any:
            return self._state

        def get_metadata(self) -> Any:
            from agentr1_gym.registration import DESCRIPTIONS, USER_DESCRIPTIONS

            described = {**DESCRIPTIONS, **USER_DESCRIPTIONS}.get(self.env_id, "")
            return types.EnvironmentMetadata(
                name=self.env_id,
                description=described or f"{self.env_id} (agentr1-gym)",
                version=_version(),
                author="agentr1-gym",
            )

        def close(self) -> None:
            self.env.close()

    return TextAction, TextObservation, EnvState, ServedEnv


#: the ``info`` entries a step's observation metadata carries (gold answers and whole histories do not)
_INFO_KEYS = (
    "task_id",
    "turn",
    "action_error",
    "reward_components",
    "process_reward",
    "outcome_reward",
    "metrics",
    "answer",
    "truncated_reason",
    "num_tool_calls",
    "tool_calls",
)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def _safe(value: Any) -> Any:
    return clean_json(value, strict=True)[0]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentr1-gym")
    except PackageNotFoundError:
        return "0"


def build_app(
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_timeout_s: float | None = DEFAULT_SESSION_TIMEOUT_S,
) -> Any:
    """The FastAPI app of OpenEnv's server for ``env_id`` (``module:id`` for a user's env): one env per session,
    at most ``max_sessions`` at once, a session idle for ``session_timeout_s`` closed (None: never). One env is
    built here first, so that a bad id or argument fails now, not at the first session."""
    http_server, _, types = _openenv()
    from agentr1_gym.registration import make

    if max_sessions < 1:
        raise ConfigError(f"max_sessions must be >= 1, got {max_sessions}")
    kwargs = dict(env_kwargs or {})
    make(env_id, **kwargs).close()  # fails here, with our error, on a bad id or argument
    action, observation, state, served = _models()
    app = http_server.create_fastapi_app(
        functools.partial(served, env_id, kwargs),
        action,
        observation,
        concurrency_config=types.ConcurrencyConfig(
            max_concurrent_envs=max_sessions, session_timeout=session_timeout_s
        ),
        env_name=_space_name(env_id),
        state_cls=state,
    )
    return app


def serve(app: Any, host: str = "127.0.0.1", port: int = 8000, max_connections: int = 256) -> None:
    """Run ``app`` with uvicorn until interrupted: at most ``max_connections`` open at once (uvicorn answers 503
    past it, so slow or idle clients cannot take every file descriptor), idle keep-alive connections closed after
    5 s. What this does not bound (OpenEnv's own HTTP ``/reset`` and ``/step`` build an env per request outside
    ``max_sessions``; a client that sends its headers a byte at a time holds its connection) is why the server
    binds 127.0.0.1 by default: see docs/engines/openenv.md before serving on a shared network."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", ws_max_size=16 * 1024 * 1024,
                limit_concurrency=max_connections, timeout_keep_alive=5)  # fmt: skip


def _space_name(env_id: str) -> str:
    base = env_id.rsplit(":", 1)[-1]
    return "".join(c if c.isalnum() else "_" for c in base).strip("_").lower() or "env"


def _reward_range(env_id: str, kwargs: dict[str, Any]) -> tuple[float, float, float]:
    """``(floor, top, spread)`` of an env's episode returns for OpenEnv's manifest: the return of an episode of
    malformed turns, the largest ``max_episode_reward`` over 8 tasks, and how much that bound varies between
    tasks (the oracle reaches each task's own)."""
    from agentr1_gym.registration import make

    env = make(env_id, **kwargs)
    try:
        env.reset(seed=0)
        low, done = 0.0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step("x")
            low += float(reward)
            done = terminated or truncated
        tops = []
        for seed in range(8):
            env.reset(seed=seed)
            try:
                tops.append(float(env.unwrapped.max_episode_reward()))
            except Exception:
                break
    finally:
        env.close()
    high = max(tops) if tops else max(low + 1.0, 1.0)
    if high <= low:
        high = low + 1.0
    spread = (high - min(tops)) if tops else 0.0
    # written with 4 decimals: rounded outwards, so that the declared range holds every return
    return (
        math.floor(low * 1e4) / 1e4,
        math.ceil(high * 1e4 - 1e-6) / 1e4,
        math.ceil(spread * 1e4 - 1e-6) / 1e4,
    )


def write_space(
    directory: str | Path,
    env_id: str,
    env_kwargs: dict[str, Any] | None = None,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    port: int = 8000,
) -> list[Path]:
    """Write what a Hugging Face Space (Docker SDK) needs to serve ``env_id`` with ``agent r1 serve-env``:
    ``openenv.yaml`` (OpenEnv's manifest), ``Dockerfile``, ``server/app.py`` (the app OpenEnv's tools load) and
    ``README.md`` (the Space card). A user's ``module:id`` env needs its module in the image: the Dockerfile
    copies the directory, so put the module there. Returns the files written."""
    out = Path(directory)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out} is not empty: write the Space files into a new directory")
    kwargs = dict(env_kwargs or {})
    json.dumps(kwargs)  # the app rebuilds them from JSON
    name, version = _space_name(env_id), _version()
    low, high, spread = _reward_range(env_id, kwargs)
    pin = f"agentr1-gym[openenv]=={version}" if version != "0" else "agentr1-gym[openenv]"
    files = {
        "openenv.yaml": (
            "spec_version: 1\n"
            f"name: {name}\n"
            f"version: {version if version != '0' else '0.1.0'}\n"
            "type: space\n"
            "runtime: fastapi\n"
            "app: server.app:app\n"
            f"port: {port}\n"
            "validation:\n"
            "  reward:\n"
            "    # episode returns: the floor is an episode of malformed turns, the top the largest bound of 8 tasks\n"
            f"    range: [{low:g}, {high:g}]\n"
            f"    oracle_tolerance: {spread:g}\n"
            f"    floor_margin: {max(0.1 * (high - low), 0.01):.4g}\n"
            "  resources:\n"
            f"    cpu: 1.0\n    memory_mb: 2048\n    disk_mb: 1024\n    episode_timeout_s: {DEFAULT_SESSION_TIMEOUT_S:g}\n"
            "  capabilities:\n"
            "    verifier:\n"
            "      kind: reward_channel\n"
            "  types:\n"
            "    tags: [agentr1-gym, tool-use]\n"
        ),
        "server/__init__.py": "",
        "server/app.py": (
            f'"""OpenEnv server for {env_id} (written by `agentr1 serve-env --write-space`)."""\n\n'
            "import json\n\n"
            "from agentr1_gym.env_server import build_app\n\n"
            f"ENV_ID = {json.dumps(env_id)}\n"
            f"ENV_KWARGS = json.loads({json.dumps(kwargs)!r})\n"
            f"MAX_SESSIONS = {int(max_sessions)}\n\n"
            "app = build_app(ENV_ID, ENV_KWARGS, max_sessions=MAX_SESSIONS)\n"
        ),
        "Dockerfile": (
            "FROM python:3.11-slim\n"
            "RUN useradd -m -u 1000 user\n"
            "USER user\n"
            "ENV PATH=/home/user/.local/bin:$PATH PYTHONUNBUFFERED=1\n"
            "WORKDIR /home/user/app\n"
            "# the CPU build of torch is not needed to serve envs: agentr1-gym's core imports no torch\n"
            f'RUN pip install --no-cache-dir --user "{pin}"\n'
            "COPY --chown=user . /home/user/app\n"
            f"EXPOSE {port}\n"
            f'CMD ["uvicorn", "server.app:app", "--host", "0.0.0.0", "--port", "{port}"]\n'
        ),
        "README.md": (
            "---\n"
            f"title: {name}\n"
            "sdk: docker\n"
            f"app_port: {port}\n"
            "tags:\n  - openenv\n  - agentr1-gym\n"
            "---\n\n"
            f"# {env_id} on OpenEnv\n\n"
            f"`{env_id}` from agentr1-gym, served by OpenEnv's server: one env per WebSocket session (`/ws`), "
            f"at most {int(max_sessions)} at once.\n\n"
            "```python\n"
            "from openenv.core.generic_client import GenericEnvClient\n\n"
            'with GenericEnvClient(base_url="https://YOUR-SPACE.hf.space").sync() as env:\n'
            "    result = env.reset(seed=0)\n"
            '    print(result.observation["text"])\n'
            '    result = env.step({"text": "<answer>...</answer>"})\n'
            "```\n\n"
            "Or train on it with agentr1-gym: "
            '`agentr1_gym.make("AgentR1/OpenEnv-v0", base_url="https://YOUR-SPACE.hf.space")`.\n'
        ),
    }
    written = []
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(clean_text(text), encoding="utf-8")
        written.append(path)
    return written
