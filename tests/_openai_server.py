"""Test helper: an OpenAI-compatible chat server on a local port whose replies come from a Python policy (the
engines that talk to an inference endpoint, verifiers and ART, are tested against it), and a policy that replays
the conversation in a shadow env and answers with the env's oracle."""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

import agentr1_gym


def text_of(content) -> str:
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


class PolicyServer:
    """An OpenAI-compatible ``/v1/chat/completions`` whose reply is ``policy(messages)``; records the requests."""

    def __init__(self, policy):
        self.policy = policy
        self.requests: list[dict] = []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def chat(req: Request):
            body = await req.json()
            self.requests.append(body)
            content = self.policy(body["messages"])
            head = {"id": uuid.uuid4().hex, "created": int(time.time()), "model": body.get("model", "policy")}
            if body.get("stream"):

                def chunks():
                    delta = {"role": "assistant", "content": content}
                    for choice in (
                        {"index": 0, "delta": delta},
                        {"index": 0, "delta": {}, "finish_reason": "stop"},
                    ):
                        yield f"data: {json.dumps({**head, 'object': 'chat.completion.chunk', 'choices': [choice]})}\n\n"
                    yield "data: [DONE]\n\n"

                return StreamingResponse(chunks(), media_type="text/event-stream")
            message = {"role": "assistant", "content": content}
            return JSONResponse(
                {
                    **head,
                    "object": "chat.completion",
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }
            )

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.thread.start()
        while not self.server.started:
            time.sleep(0.05)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(timeout=10)
        if hasattr(self.policy, "close"):
            self.policy.close()


class ReplayOracle:
    """Replays the conversation in a shadow env (the row found by its first user message; tasks with the same
    prompt have the same oracle) and answers with the env's oracle action.

    The shadow env of each conversation stays live between requests, so a request that extends the conversation
    by one turn costs one step, not a replay from the start (a fresh env, and a BFCL worker process, per turn made
    a 4-episode BFCL check take minutes). A request that does not extend it (a retry, a forked conversation) is
    replayed in a fresh env."""

    def __init__(self, env_id, seeds, **env_kwargs):
        self.env_id, self.kwargs = env_id, env_kwargs
        env = agentr1_gym.make(env_id, **env_kwargs)
        self.seeds = {}
        for seed in seeds:
            _, info = env.reset(seed=seed)
            self.seeds[next(m["content"] for m in info["messages"] if m["role"] == "user")] = seed
        env.close()
        self._live: dict[str, tuple] = {}  # first user message -> (env, the assistant turns it has stepped)

    def __call__(self, messages):
        first = text_of(next(m for m in messages if m["role"] == "user")["content"])
        turns = [text_of(m["content"]) for m in messages if m["role"] == "assistant"]
        env, done = self._live.pop(first, (None, []))
        if env is None or done != turns[: len(done)]:
            if env is not None:
                env.close()
            env, done = agentr1_gym.make(self.env_id, **self.kwargs), []
            env.reset(seed=self.seeds[first])
        for turn in turns[len(done) :]:
            env.step(turn)
        self._live[first] = (env, turns)
        return env.unwrapped.oracle_action()

    def close(self):
        for env, _ in self._live.values():
            env.close()
        self._live.clear()
