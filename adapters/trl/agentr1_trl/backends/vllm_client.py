"""The HTTP side of :class:`~agentr1_trl.backends.vllm.VLLMGenerator`'s server mode: one total deadline per
call, retries with back-off where a call is safe to repeat, and a check of every answer before it can reach a
rollout or an update.

A socket timeout bounds each *read*, so a server that sends a byte every few seconds can hold a plain
``urllib`` call forever. Here a call owns a deadline (``timeout_s``, connection, waiting, reading and retries
included): a watchdog shuts the connection down when it passes, whatever the server is doing.

Everything a server can get wrong is one :class:`~agentr1_gym.errors.InferenceServerError` that names the server
and the problem: unreachable, too slow, HTTP errors, a body that is not JSON or is cut short, missing choices or
token ids, ids outside the vocabulary, duplicate or missing choice indices, more tokens than asked for, missing or
impossible log-probs, a ``finish_reason`` that the tokens contradict.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from agentr1_gym.deadline import AnswerTooLarge, http_exchange
from agentr1_gym.errors import ConfigError, InferenceServerError

__all__ = ["MAX_BODY_BYTES", "ServerClient", "check_completions"]

#: the largest answer a call reads (a hostile or broken server cannot fill the trainer's memory)
MAX_BODY_BYTES = 1 << 29
#: HTTP statuses worth a retry: overloaded or restarting servers and proxies in front of them
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: the largest log-probability accepted as "<= 0" (rounding in the server's float32/bf16 arithmetic)
LOGPROB_SLACK = 1e-3


class _Retryable(Exception):
    """A failure another attempt may not meet (connection refused or reset, 429/502/503/504)."""


class ServerClient:
    """JSON over HTTP to one server, with one total deadline per call.

    Args:
        url: the server's base URL (``http://host:port``; https works too).
        timeout_s: the deadline of one call: connecting, waiting, reading the answer and any retries.
        retries: further attempts of a call that is safe to repeat (``idempotent=True``) after a connection
            failure or an overloaded answer (429, 502, 503, 504), within the same deadline.
        backoff_s: the wait before the first retry, doubled (with jitter) before each further one.
    """

    def __init__(
        self, url: str, *, timeout_s: float = 600.0, retries: int = 2, backoff_s: float = 0.5
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigError(f"vLLM server URL must look like http://HOST:PORT, got {url!r}")
        if not timeout_s > 0 or retries < 0 or backoff_s < 0:
            raise ConfigError(
                f"need timeout_s > 0, retries >= 0, backoff_s >= 0 (got {timeout_s}, {retries}, {backoff_s})"
            )
        self.url = url.rstrip("/")
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.backoff_s = float(backoff_s)
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._base = parts.path.rstrip("/")

    def call(
        self, path: str, body: dict | None = None, *, idempotent: bool = True, text_ok: bool = False
    ) -> Any:
        """GET (``body`` None) or POST ``path``; the parsed JSON answer (a plain-text answer as ``str`` when
        ``text_ok``). Raises :class:`InferenceServerError` on anything else, within ``timeout_s``."""
        deadline = time.monotonic() + self.timeout_s
        data = None if body is None else json.dumps(body).encode()
        attempts = 1 + (self.retries if idempotent else 0)
        for attempt in range(attempts):
            try:
                status, raw = self._once(path, data, deadline)
                break
            except _Retryable as exc:
                wait = self.backoff_s * (2**attempt) * (0.5 + random.random())
                if attempt + 1 >= attempts or time.monotonic() + wait >= deadline:
                    tried = f" ({attempt + 1} attempts)" if attempt else ""
                    raise InferenceServerError(self.url, f"{path}: {exc}{tried}") from None
                time.sleep(wait)
        if status >= 400:
            detail = raw[:300].decode(errors="replace").strip()
            raise InferenceServerError(self.url, f"{path}: HTTP {status}: {detail}")
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            if text_ok:
                return ""
            raise InferenceServerError(self.url, f"{path}: an empty answer (HTTP {status}), JSON expected")
        try:
            return json.loads(text)
        except ValueError:
            if text_ok:  # some routes answer in plain text ("Success: LoRA adapter ... added")
                return text
            raise InferenceServerError(
                self.url, f"{path}: the answer is not JSON (starts {text[:60]!r}); is this a vLLM server?"
            ) from None

    def _classify(self, path: str, exc: Exception) -> Exception:
        """A failed attempt (before its deadline) as a retryable failure or a final, named one."""
        if isinstance(exc, ConnectionRefusedError):
            return _Retryable(f"unreachable ({exc.strerror or exc})")
        if isinstance(exc, http.client.IncompleteRead):
            return _Retryable(
                f"the answer was cut short ({len(exc.partial)} bytes read, {exc.expected} more expected)"
            )
        if isinstance(exc, (http.client.RemoteDisconnected, ConnectionError)):
            return _Retryable(f"the connection broke ({type(exc).__name__}: {exc})")
        if isinstance(exc, http.client.HTTPException):
            return InferenceServerError(
                self.url, f"{path}: not a valid HTTP answer ({type(exc).__name__}: {exc})"
            )
        return _Retryable(f"unreachable ({getattr(exc, 'strerror', None) or exc})")

    # ---- one attempt ----------------------------------------------------------------------------------------
    def _once(self, path: str, data: bytes | None, deadline: float) -> tuple[int, bytes]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise InferenceServerError(self.url, f"{path}: no complete answer within {self.timeout_s:g} s")
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        try:  # the whole answer within the deadline (a watchdog shuts the socket), at most MAX_BODY_BYTES
            status, body = http_exchange(cls(self._host, self._port, timeout=remaining),
                                         "GET" if data is None else "POST", self._base + path, data, headers,
                                         timeout_s=remaining, limit=MAX_BODY_BYTES)  # fmt: skip
        except AnswerTooLarge:
            raise InferenceServerError(
                self.url, f"{path}: the answer is over {MAX_BODY_BYTES >> 20} MiB; refused"
            ) from None
        except (OSError, http.client.HTTPException) as exc:  # DeadlinePassed and ConnectionError are OSErrors
            if isinstance(exc, TimeoutError):
                raise InferenceServerError(
                    self.url, f"{path}: no complete answer within {self.timeout_s:g} s"
                ) from None
            raise self._classify(path, exc) from None
        if status in RETRY_STATUSES:
            raise _Retryable(f"HTTP {status}: {body[:200].decode(errors='replace').strip()}")
        return status, body


# ---- what a completions answer must be ----------------------------------------------------------------------
def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def check_completions(
    url: str,
    payload: Any,
    *,
    n: int,
    vocab_size: int,
    max_tokens: int,
    eos_ids: set[int],
    special_ids: set[int],
    stop_strings: Sequence[str],
    decode: Any,
) -> list[tuple[list[int], list[float]]]:
    """The ``(token_ids, logprobs)`` of each of the ``n`` prompts of a ``/v1/completions`` answer (asked with
    ``return_token_ids`` and ``logprobs=0``), in prompt order, after checking everything a rollout relies on.
    Raises :class:`InferenceServerError` naming the server and the first problem found."""

    def bad(problem: str) -> InferenceServerError:
        return InferenceServerError(url, f"/v1/completions: {problem}")

    if not isinstance(payload, dict):
        raise bad(f"the answer is a JSON {type(payload).__name__}, not an object")
    if "error" in payload and "choices" not in payload:
        raise bad(f"error {str(payload['error'])[:200]}")
    choices = payload.get("choices")
    if not isinstance(choices, list):
        raise bad("no 'choices' list in the answer")
    if len(choices) != n:
        raise bad(f"{len(choices)} choices for {n} prompts")
    by_index: dict[int, dict] = {}
    for choice in choices:
        if not isinstance(choice, dict):
            raise bad(f"a choice is a {type(choice).__name__}, not an object")
        index = choice.get("index")
        if not _is_int(index) or not 0 <= index < n:
            raise bad(f"choice index {index!r} is not one of 0..{n - 1}")
        if index in by_index:
            raise bad(f"choice index {index} appears twice")
        by_index[index] = choice
    out = []
    for index in range(n):
        choice = by_index[index]
        ids = choice.get("token_ids")
        if ids is None:
            raise bad(
                f"choice {index} has no 'token_ids' (the client asks for return_token_ids; vllm serve answers "
                "it from vLLM 0.10.2 on: is this a vLLM server, and recent enough?)"
            )
        if not isinstance(ids, list) or not all(_is_int(t) for t in ids):
            raise bad(f"choice {index}: 'token_ids' is not a list of whole numbers")
        outside = [t for t in ids if not 0 <= t < vocab_size]
        if outside:
            raise bad(
                f"choice {index}: token id {outside[0]} is outside the policy's vocabulary (0..{vocab_size - 1}); "
                "does the server serve the same model?"
            )
        if len(ids) > max_tokens:
            raise bad(f"choice {index}: {len(ids)} tokens, more than the {max_tokens} asked for")
        lp_obj = choice.get("logprobs")
        logprobs = lp_obj.get("token_logprobs") if isinstance(lp_obj, dict) else None
        if logprobs is None:
            raise bad(f"choice {index}: no log-probs ('logprobs.token_logprobs'), which were asked for")
        if not isinstance(logprobs, list) or len(logprobs) != len(ids):
            count = len(logprobs) if isinstance(logprobs, list) else type(logprobs).__name__
            raise bad(f"choice {index}: {count} log-probs for {len(ids)} tokens")
        values = []
        for lp in logprobs:
            number = isinstance(lp, (int, float)) and not isinstance(lp, bool)
            if not number or not math.isfinite(lp) or lp > LOGPROB_SLACK:
                raise bad(f"choice {index}: log-prob {lp!r} is not a finite number <= 0")
            values.append(float(lp))
        _check_finish(bad, index, choice.get("finish_reason"), ids, max_tokens, eos_ids | special_ids, eos_ids,
                      stop_strings, decode)  # fmt: skip
        out.append((ids, values))
    return out


def _check_finish(
    bad: Any,
    index: int,
    reason: Any,
    ids: list[int],
    max_tokens: int,
    enders: set[int],
    eos_ids: set[int],
    stop_strings: Sequence[str],
    decode: Any,
) -> None:
    """The tokens must agree with ``finish_reason``: nothing after an EOS, ``length`` only at ``max_tokens``,
    ``stop`` only at an EOS/special token or right after a stop string."""
    early_eos = [i for i, t in enumerate(ids[:-1]) if t in eos_ids]
    if early_eos:
        raise bad(f"choice {index}: {len(ids) - 1 - early_eos[0]} tokens after the end-of-sequence token")
    if reason == "length":
        if len(ids) != max_tokens:
            raise bad(f"choice {index}: finish_reason 'length' after {len(ids)} of {max_tokens} tokens")
        return
    if reason != "stop":
        raise bad(f"choice {index}: finish_reason {reason!r} (expected 'stop' or 'length')")
    if not ids:
        raise bad(f"choice {index}: finish_reason 'stop' with no tokens")
    if ids[-1] in enders:
        return
    text, before = decode(ids), decode(ids[:-1])
    if not any(s in text and s not in before for s in stop_strings):
        raise bad(
            f"choice {index}: finish_reason 'stop', but the tokens end in neither an EOS nor a stop string"
        )
