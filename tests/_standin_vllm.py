"""Test helper: a stand-in for ``vllm serve`` on loopback whose ``/v1/completions`` misbehaves on request (slow,
silent, cut short, malformed, out of vocabulary, ...), for the server client's tests. ``mode`` is switched per
test; ``calls`` records every request's path."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "standin"


class StandinVLLM:
    def __init__(self, vocab_size: int, eos_id: int) -> None:
        self.vocab_size = vocab_size
        self.eos_id = eos_id
        self.mode = "ok"
        self.models_mode = "ok"
        self.calls: list[str] = []
        self.failures_left = 0  # for "flaky": answers 503 this many times, then well
        self.stop = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.calls.append(self.path)
                if self.path == "/v1/models":
                    outer._models(self)
                else:
                    outer._send(self, 200, {"ok": True})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                outer.calls.append(self.path)
                if self.path == "/v1/completions":
                    outer._completions(self, body)
                else:  # weight reloads, prefix-cache resets, LoRA loading: fine
                    outer._send(self, 200, {"ok": True})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()

    # ---- answers ------------------------------------------------------------------------------------------
    @staticmethod
    def _send(
        h: BaseHTTPRequestHandler, status: int, payload: Any, content_type: str = "application/json"
    ) -> None:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _models(self, h: BaseHTTPRequestHandler) -> None:
        mode = self.models_mode
        if mode == "empty":
            return self._send(h, 200, {"object": "list", "data": []})
        if mode == "not_json":
            return self._send(h, 200, b"<html>proxy login</html>", "text/html")
        if mode == "no_data":
            return self._send(h, 200, {"object": "list"})
        self._send(h, 200, {"object": "list", "data": [{"id": MODEL, "max_model_len": 2048}]})

    def good_choices(self, body: dict) -> list[dict]:
        n, k = len(body["prompt"]), body["max_tokens"]
        ids = [(7 + j) % self.vocab_size for j in range(k)]
        return [
            {"index": i, "text": "", "token_ids": list(ids), "finish_reason": "length",
             "logprobs": {"token_logprobs": [-0.5] * k, "tokens": [], "top_logprobs": []}}
            for i in range(n)
        ]  # fmt: skip

    def _completions(self, h: BaseHTTPRequestHandler, body: dict) -> None:
        mode = self.mode
        choices = self.good_choices(body)
        if mode == "flaky":
            if self.failures_left > 0:
                self.failures_left -= 1
                return self._send(h, 503, {"error": "overloaded"})
            mode = "ok"
        if mode == "hang":
            self.stop.wait(60)
            return
        if mode == "trickle":  # a byte every 0.5 s: each read is quick, the whole answer never comes
            data = json.dumps({"choices": choices}).encode()
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            for b in data:
                if self.stop.wait(0.5):
                    return
                try:
                    h.wfile.write(bytes([b]))
                    h.wfile.flush()
                except OSError:
                    return
            return
        if mode == "cut_short":
            data = json.dumps({"choices": choices}).encode()
            h.send_response(200)
            h.send_header("Content-Length", str(len(data)))
            h.end_headers()
            h.wfile.write(data[: len(data) // 2])
            h.wfile.flush()
            h.close_connection = True
            return
        if mode == "drop":  # the connection closes without an answer
            h.close_connection = True
            return
        if mode == "http500":
            return self._send(h, 500, {"error": "CUDA out of memory"})
        if mode == "not_json":
            return self._send(h, 200, b"<html>502 Bad Gateway</html>", "text/html")
        if mode == "empty":
            return self._send(h, 200, b"")
        if mode == "list":
            return self._send(h, 200, [1, 2])
        if mode == "error_object":
            return self._send(h, 200, {"error": {"message": "model not found"}})
        if mode == "no_choices":
            return self._send(h, 200, {"id": "x"})
        if mode == "too_few":
            choices = choices[:-1]
        elif mode == "duplicate_index":
            choices[-1]["index"] = 0
        elif mode == "index_out_of_range":
            choices[0]["index"] = 99
        elif mode == "no_token_ids":
            for c in choices:
                del c["token_ids"]
        elif mode == "negative_id":
            choices[0]["token_ids"][0] = -3
        elif mode == "out_of_vocab":
            choices[0]["token_ids"][0] = self.vocab_size + 5
        elif mode == "float_ids":
            choices[0]["token_ids"][0] = 7.0
        elif mode == "extra_tokens":
            for c in choices:
                c["token_ids"] += [8, 9]
                c["logprobs"]["token_logprobs"] += [-0.1, -0.1]
        elif mode == "no_logprobs":
            for c in choices:
                c["logprobs"] = None
        elif mode == "logprob_count":
            choices[0]["logprobs"]["token_logprobs"] = choices[0]["logprobs"]["token_logprobs"][:-1]
        elif mode == "nan_logprob":
            choices[0]["logprobs"]["token_logprobs"][0] = float("nan")
        elif mode == "positive_logprob":
            choices[0]["logprobs"]["token_logprobs"][0] = 2.5
        elif mode == "after_eos":
            choices[0]["token_ids"][0] = self.eos_id
        elif mode == "length_but_short":
            choices[0]["token_ids"] = choices[0]["token_ids"][:1]
            choices[0]["logprobs"]["token_logprobs"] = [-0.5]
        elif mode == "stop_without_stop":
            choices[0]["finish_reason"] = "stop"
        elif mode == "no_finish_reason":
            choices[0]["finish_reason"] = None
        elif mode != "ok":
            raise ValueError(mode)
        if mode == "nan_logprob":  # json.dumps writes NaN, as a careless server would
            return self._send(h, 200, json.dumps({"choices": choices}).encode())
        self._send(h, 200, {"id": "cmpl", "model": MODEL, "choices": choices})
