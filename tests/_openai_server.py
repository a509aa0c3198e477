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


class ReplayOracle:
    """Replays the conversation in a shadow env (the row found by its first user message; tasks with the same
    prompt have the same oracle) and answers with the env's oracle action."""

    def __init__(self, env_id, seeds, **env_kwargs):
        self.env_id, self.kwargs = env_id, env_kwargs
        env = agentr1_gym.make(env_id, **env_kwargs)
        self.seeds = {}
        for seed in seeds:
            _, info = env.reset(seed=seed)
            self.seeds[next(m["content"] for m in info["messages"] if m["role"] == "user")] = seed
        env.close()

    def __call__(self, messages):
        first = text_of(next(m for m in messages if m["role"] == "user")["content"])
        env = agentr1_gym.make(self.env_id, **self.kwargs)
        env.reset(seed=self.seeds[first])
        for m in messages:
            if m["role"] == "assistant":
                env.step(text_of(m["content"]))
        return env.unwrapped.oracle_action()
