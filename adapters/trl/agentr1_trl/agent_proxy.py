"""An OpenAI-compatible endpoint over our generation backends that records the tokens of every call.

Any agent written against the OpenAI API (the ``openai`` client, LangGraph, smolagents, ...) can run against it
unchanged: point its ``base_url`` at ``http://127.0.0.1:PORT/episodes/{episode_id}/v1`` and every call it makes is
recorded under that episode, token for token:

* ``POST .../v1/chat/completions`` takes OpenAI's request (``messages``, ``tools``, ``tool_calls`` in assistant
  messages, ``tool`` messages, ``max_tokens``, ``stop``) and answers in OpenAI's shape. The model writes tool calls
  in its own format (Hermes ``<tool_call>{...}</tool_call>``); they are parsed here into ``tool_calls``. ``tool``
  messages go to the chat template as they are (the template renders them the way the model was trained on).
* ``GET .../v1/models`` lists the one model.
* A bad request is a 400 in OpenAI's error shape (``{"error": {"message", "type", "param", "code"}}``), a call
  for an episode nobody opened a 404: neither reaches the model.

**Token-exact episodes.** When an agent sends back the assistant message this endpoint returned (its content and
tool calls, in any JSON spelling), the next prompt is built on the tokens *as sampled*: the previous prompt ids,
the previous completion ids, then only the new text's tokens (the template's closing of the turn, the tool
results, the next assistant header), exactly as :mod:`agentr1_gym.rollout` builds our own episodes. A re-encoded
completion could tokenize differently from how it was sampled; it never is. :func:`calls_to_trajectory` then
merges the episode's calls into one sequence while each prompt extends the previous prompt plus completion, and
splits it into one training row per call otherwise (a chat template that rewrites history, as Qwen3's drops
earlier ``<think>`` blocks; an agent that edits or summarises its history): the split is counted.

**Sampling is the trainer's.** Temperature, top-p and top-k come from the training config, whatever a request asks
(a framework's ``temperature=0`` would make the rollouts off-policy); a request's ``max_tokens`` can only lower
the per-turn limit, and its ``stop`` strings are added to the config's.

The server is Starlette under uvicorn. Concurrent requests are batched: a scheduler thread collects the calls that arrive within ``batch_wait_s`` and
generates them in one ``backend.generate`` call. The server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import queue
import socket
import threading
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from agentr1_gym.errors import ConfigError, MissingDependencyError
from agentr1_gym.generation import (
    GenerationBackend,
    SamplingConfig,
    check_backend,
    check_generations,
)
from agentr1_gym.text import clean_json
from agentr1_trl.agent_calls import (
    CallRecord,
    ChatRenderer,
    EpisodeCalls,
    ProxyRequestError,
    calls_to_trajectory,
    message_signature,
    parse_completion,
)

__all__ = [
    "AgentProxy",
    "CallRecord",
    "EpisodeCalls",
    "ProxyRequestError",
    "calls_to_trajectory",
]

#: how deep a request may nest (JSON Schemas of real tools stay far below; deeper is refused, never recursed into)
MAX_BODY_DEPTH = 64
#: the largest request body the endpoint reads (HTTP 413 past it): a chat this long is far past any policy's
#: context (a 32k-token prompt is about 130 kB of text), and reading, parsing and tokenizing a larger one is work
#: an agent could make the endpoint do for nothing
MAX_BODY_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class _Request:
    """One chat-completions request, checked and tokenized: what generation takes and the answer records."""

    body: dict[str, Any]
    tools: list[dict] | None
    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    rendered: str
    extends: bool
    sampling: SamplingConfig


@dataclass
class _Job:
    prompt: list[int]
    sampling: SamplingConfig
    future: concurrent.futures.Future


class _Batcher:
    """Generates the calls that arrive together in one ``backend.generate`` call (per sampling setting)."""

    def __init__(self, backend: GenerationBackend, vocab_size: int, wait_s: float, max_batch: int) -> None:
        self.backend, self.vocab, self.wait_s, self.max_batch = backend, vocab_size, wait_s, max_batch
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.batches = 0
        self.thread = threading.Thread(target=self._loop, name="agentr1-proxy-generate", daemon=True)
        self.thread.start()

    def submit(self, prompt: list[int], sampling: SamplingConfig) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.jobs.put(_Job(prompt, sampling, future))
        return future

    def _loop(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            jobs = [first]
            deadline = time.monotonic() + self.wait_s
            while len(jobs) < self.max_batch:
                try:
                    job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    self.jobs.put(None)
                    break
                jobs.append(job)
            groups: dict[Any, list[_Job]] = {}
            for job in jobs:
                s = job.sampling
                key = (s.max_new_tokens, s.temperature, s.top_p, s.top_k, s.do_sample, s.stop_strings)
                groups.setdefault(key, []).append(job)
            for group in groups.values():
                self._run(group)

    def _run(self, group: list[_Job]) -> None:
        sampling = group[0].sampling
        try:
            gens = check_generations(
                self.backend,
                self.backend.generate([j.prompt for j in group], sampling),
                len(group),
                vocab_size=self.vocab,
                max_new_tokens=sampling.max_new_tokens,
            )
            self.batches += 1
        except (
            BaseException
        ) as exc:  # the backend failed: every waiting call fails with it (a 500), never silently
            for job in group:
                job.future.set_exception(exc)
            return
        for job, gen in zip(group, gens):
            job.future.set_result(gen)

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join(timeout=30)


class AgentProxy:
    """The endpoint, served from a background thread (uvicorn) on ``host:port`` (0: a free port).

    Args:
        backend: the generation backend (HF ``generate`` on the training model, vLLM colocated or a vLLM server).
        tokenizer: the policy's tokenizer, with a chat template.
        sampling: the training config's sampling (temperature, top-p, top-k, per-turn token limit, stop strings).
        model_name: the name ``/v1/models`` lists and responses carry.
        max_context_tokens: a prompt at or over this many tokens is refused (400, ``context_length_exceeded``)
            and its episode marked over budget; a completion never runs past it.
        vocab_size: the policy's vocabulary (every generated id is checked below it).
        batch_wait_s: how long the scheduler waits for more calls to batch into one ``generate``.
        max_batch: at most how many calls one ``generate`` takes.
        max_body_bytes: a request body past this many bytes is refused (413, ``request_too_large``) unread.
            Parsing, rendering and tokenizing run in worker threads, off the event loop, so one long request
            does not delay another episode's call.

    Use: ``with AgentProxy(...) as proxy: proxy.open_episode(eid); base_url = proxy.base_url(eid); ...;
    calls = proxy.close_episode(eid)``.
    """

    def __init__(
        self,
        backend: GenerationBackend,
        tokenizer: Any,
        sampling: SamplingConfig,
        *,
        model_name: str = "agentr1-policy",
        host: str = "127.0.0.1",
        port: int = 0,
        max_context_tokens: int = 4096,
        vocab_size: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        batch_wait_s: float = 0.005,
        max_batch: int = 64,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        try:
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(exc.name or "starlette", "agent", "the agent endpoint") from None
        self.backend = check_backend(backend)
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.model_name = model_name
        self.host = host
        self.port = port or _free_port(host)
        self.max_context_tokens = int(max_context_tokens)
        self.renderer = ChatRenderer(tokenizer, chat_template_kwargs)
        self.vocab = int(vocab_size or len(tokenizer))
        self.batch_wait_s, self.max_batch = batch_wait_s, max_batch
        self.max_body_bytes = int(max_body_bytes)
        self.episodes: dict[str, EpisodeCalls] = {}
        self._lock = threading.Lock()
        self._batcher: _Batcher | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        #: seconds spent per call outside generation (parsing, rendering, tokenizing, HTTP): the overhead
        self.overhead_s: list[float] = []

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> AgentProxy:
        import uvicorn

        if self._thread is not None:
            return self
        self._batcher = _Batcher(self.backend, self.vocab, self.batch_wait_s, self.max_batch)
        config = uvicorn.Config(
            self.app(), host=self.host, port=self.port, log_level="warning", access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="agentr1-proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise ConfigError(f"the agent endpoint could not start on {self.host}:{self.port}")
            time.sleep(0.01)
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=30)
        if self._batcher is not None:
            self._batcher.close()
        self._server = self._thread = self._batcher = None

    def __enter__(self) -> AgentProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base_url(self, episode_id: str) -> str:
        """The ``base_url`` an OpenAI client of episode ``episode_id`` uses."""
        return f"{self.url}/episodes/{episode_id}/v1"

    # ---- episodes -----------------------------------------------------------------------------------------
    def open_episode(self, episode_id: str | None = None) -> str:
        """Start recording an episode; returns its id (a fresh one by default)."""
        episode_id = episode_id or uuid.uuid4().hex
        with self._lock:
            if episode_id in self.episodes:
                raise ConfigError(f"episode {episode_id!r} is already open")
            self.episodes[episode_id] = EpisodeCalls(episode_id)
        return episode_id

    def close_episode(self, episode_id: str) -> EpisodeCalls:
        """Stop recording: later calls for it are refused (404). Returns what was recorded."""
        with self._lock:
            episode = self.episodes.pop(episode_id)
            episode.closed = True
        return episode

    # ---- one call -----------------------------------------------------------------------------------------
    def _sampling(self, body: dict[str, Any], room: int) -> SamplingConfig:
        limit = self.sampling.max_new_tokens
        for key in ("max_completion_tokens", "max_tokens"):
            value = body.get(key)
            if value is not None:
                if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                    raise ProxyRequestError(f"{key} must be a whole number >= 1", param=key)
                limit = min(limit, value)
                break
        stop = body.get("stop")
        if isinstance(stop, str):
            stop = [stop]
        if stop is not None and (
            not isinstance(stop, list) or not all(isinstance(s, str) and s for s in stop)
        ):
            raise ProxyRequestError("stop must be a string or a list of strings", param="stop")
        stops = tuple(dict.fromkeys((*self.sampling.stop_strings, *(stop or ()))))
        return replace(self.sampling, max_new_tokens=max(1, min(limit, room)), stop_strings=stops)

    async def complete(self, episode_id: str, body: Any) -> dict[str, Any]:
        """Answer one chat-completions request for ``episode_id`` (raises :class:`ProxyRequestError`)."""
        start = time.perf_counter()
        with self._lock:
            episode = self.episodes.get(episode_id)
        if episode is None:
            raise ProxyRequestError(
                f"no open episode {episode_id[:64]!r}: the trainer opens episodes and gives each its base_url",
                code="episode_not_found", status=404,
            )  # fmt: skip
        # parsing, rendering and tokenizing run off the event loop: one episode's long chat never delays another's
        request = await asyncio.to_thread(self._prepare, episode, body)
        assert self._batcher is not None, "start() the proxy first"
        prepared = time.perf_counter()
        gen = await asyncio.wrap_future(self._batcher.submit(request.prompt_ids, request.sampling))
        generated = time.perf_counter()
        answer = self._answer(episode_id, episode, request, gen)
        self.overhead_s.append((prepared - start) + (time.perf_counter() - generated))
        return answer

    def _prepare(self, episode: EpisodeCalls, body: Any) -> _Request:
        """A request's body (raw bytes or parsed) -> what generation needs; in a worker thread."""
        if isinstance(body, (bytes, str)):
            try:
                body = json.loads(body)
            except (ValueError, RecursionError):
                raise ProxyRequestError("the request body is not valid JSON") from None
        if not isinstance(body, dict):
            raise ProxyRequestError("the request body must be a JSON object")
        # every string as text the tokenizer and the response can carry (an escaped lone surrogate is valid JSON)
        body, cut = clean_json(body, MAX_BODY_DEPTH)
        if cut:
            raise ProxyRequestError(f"the request nests deeper than {MAX_BODY_DEPTH} levels")
        if body.get("n", 1) != 1:
            raise ProxyRequestError("only n=1 is supported", param="n")
        if body.get("stream"):
            raise ProxyRequestError("streaming is not supported; send stream=false", param="stream")
        tools = body.get("tools")
        if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
            raise ProxyRequestError("tools must be a list of tool objects", param="tools")
        tools = tools or None
        messages = self.renderer.template_messages(episode, body.get("messages"))
        prompt_ids, rendered, extends = self.renderer.prompt(episode, messages, tools)
        room = self.max_context_tokens - len(prompt_ids)
        if room <= 0:
            episode.over_budget = True
            raise ProxyRequestError(
                f"the prompt is {len(prompt_ids)} tokens; this endpoint's context limit is {self.max_context_tokens}",
                param="messages", code="context_length_exceeded",
            )  # fmt: skip
        return _Request(body, tools, messages, prompt_ids, rendered, extends, self._sampling(body, room))

    def _answer(self, episode_id: str, episode: EpisodeCalls, request: _Request, gen: Any) -> dict[str, Any]:
        """The completion as OpenAI's answer, recorded in the episode."""
        body, tools, sampling, prompt_ids = request.body, request.tools, request.sampling, request.prompt_ids
        tok = self.tokenizer
        text = tok.decode(gen.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        content, calls = parse_completion(text, body.get("tool_choice") != "none" and bool(tools))
        if (gen.ids and gen.ids[-1] == tok.eos_token_id) or any(
            text.endswith(s) for s in sampling.stop_strings
        ):
            finish = "tool_calls" if calls else "stop"
        elif len(gen.ids) >= sampling.max_new_tokens:
            finish = "length"
        else:
            finish = "tool_calls" if calls else "stop"
        k = len(episode.calls)
        tool_calls = [
            {
                "id": f"call_{episode_id[:12]}_{k}_{j}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)},
            }
            for j, (name, args) in enumerate(calls)
        ]
        record = CallRecord(
            prompt_ids=list(prompt_ids), completion_ids=list(gen.ids), logprobs=list(gen.logprobs),
            finish_reason=finish, text=text, messages=request.messages, tools=tools, rendered=request.rendered,
            extends_earlier=request.extends, tool_calls=tool_calls,
        )  # fmt: skip
        with self._lock:
            if episode.closed:
                raise ProxyRequestError(
                    "the episode ended while this call ran", code="episode_closed", status=409
                )
            episode.calls.append(record)
            episode.returned[message_signature(content, tool_calls)] = k
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if tool_calls:
            message["tool_calls"] = tool_calls
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(gen.ids),
                "total_tokens": len(prompt_ids) + len(gen.ids),
            },
        }

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "agentr1"}],
        }

    def app(self) -> Any:
        """The ASGI app (Starlette)."""
        from starlette.applications import Starlette
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        proxy = self

        def error(exc: ProxyRequestError) -> JSONResponse:
            return JSONResponse(exc.body(), status_code=exc.status)

        async def chat(request: Any) -> Any:
            try:
                return JSONResponse(
                    await proxy.complete(request.path_params["episode_id"], await body(request))
                )
            except ProxyRequestError as exc:
                return error(exc)

        async def body(request: Any) -> bytes:
            """The request's bytes, refused past ``max_body_bytes`` (by its Content-Length, or while it streams)."""
            limit = proxy.max_body_bytes
            too_large = ProxyRequestError(
                f"the request body is larger than this endpoint's limit of {limit} bytes",
                code="request_too_large",
                status=413,
            )
            length = request.headers.get("content-length", "")
            if length.isdigit() and int(length) > limit:
                raise too_large
            chunks, size = [], 0
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
            return b"".join(chunks)

        async def models(request: Any) -> Any:
            return JSONResponse(proxy.models())

        async def unrecorded(request: Any) -> Any:
            return error(
                ProxyRequestError(
                    "calls are recorded per episode: use the base_url /episodes/{episode_id}/v1 the trainer gave",
                    code="episode_not_found",
                    status=404,
                )
            )

        return Starlette(
            routes=[
                Route("/episodes/{episode_id}/v1/chat/completions", chat, methods=["POST"]),
                Route("/episodes/{episode_id}/v1/models", models, methods=["GET"]),
                Route("/v1/models", models, methods=["GET"]),
                Route("/v1/chat/completions", unrecorded, methods=["POST"]),
            ]
        )


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
