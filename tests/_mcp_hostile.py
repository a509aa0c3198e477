"""A hand-written MCP stdio server that misbehaves on purpose (plain JSON-RPC lines, no SDK), for the reliability
tests: ``python _mcp_hostile.py SCHEMA`` serves one tool ``probe`` whose input schema is chosen by SCHEMA, plus
tools that break the protocol when called.

SCHEMA: ``plain`` | ``ref=URI`` (a property whose schema is ``{"$ref": URI}``) | ``redos`` | ``badregex`` |
``badtype`` | ``unresolvable``.

Tools: ``probe`` (echoes its arguments), ``garbage`` (answers a line that is not JSON, then nothing),
``badutf8`` (answers bytes that are not UTF-8), ``wrongid`` (from then on answers every request with another id),
``stop`` (the process stops itself with SIGSTOP), ``noisy`` (writes N MB to stderr, then answers).
"""

from __future__ import annotations

import json
import os
import signal
import sys

SCHEMAS = {
    "plain": {"type": "object", "properties": {"text": {"type": "string"}}},
    "redos": {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}},
    "badregex": {"type": "object", "properties": {"text": {"type": "string", "pattern": "([a-"}}},
    "badtype": {"type": "object", "properties": {"text": {"type": "strng"}}},
    "unresolvable": {"type": "object", "properties": {"text": {"$ref": "#/$defs/missing"}}},
}


def schema(kind: str) -> dict:
    if kind.startswith("ref="):
        return {"type": "object", "properties": {"role": {"$ref": kind[4:]}}}
    return SCHEMAS[kind]


def tool(name: str, input_schema: dict | None = None) -> dict:
    return {
        "name": name,
        "description": f"The {name} tool.",
        "inputSchema": input_schema or {"type": "object", "properties": {"mb": {"type": "number"}}},
    }


def main() -> None:
    kind = sys.argv[1] if len(sys.argv) > 1 else "plain"
    out = sys.stdout.buffer
    shift = 0  # added to every response id once ``wrongid`` was called

    def send(obj: dict) -> None:
        if "id" in obj and shift:
            obj = {**obj, "id": obj["id"] + shift}
        out.write(json.dumps(obj).encode() + b"\n")
        out.flush()

    for raw in sys.stdin.buffer:
        msg = json.loads(raw)
        method, mid = msg.get("method"), msg.get("id")
        if mid is None:
            continue  # a notification
        if method == "initialize":
            version = msg["params"].get("protocolVersion", "2025-06-18")
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": version, "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"}}})  # fmt: skip
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": mid, "result": {}})
        elif method == "tools/list":
            tools = [
                tool("probe", schema(kind)),
                *(tool(n) for n in ("garbage", "badutf8", "wrongid", "stop", "noisy")),
            ]
            send({"jsonrpc": "2.0", "id": mid, "result": {"tools": tools}})
        elif method == "tools/call":
            name, args = msg["params"]["name"], msg["params"].get("arguments") or {}
            if name == "garbage":
                out.write(b"this is not json {\n")
                out.flush()
                continue
            if name == "badutf8":
                out.write(b'{"jsonrpc": "2.0", "id": ' + str(mid).encode() + b', "result": "\xff\xfe"}\n')
                out.flush()
                continue
            if name == "wrongid":
                shift = 1000
            if name == "stop":
                os.kill(os.getpid(), signal.SIGSTOP)
                continue
            if name == "noisy":
                chunk = b"x" * 1023 + b"\n"
                for _ in range(int(float(args.get("mb", 1)) * 1024)):
                    sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.write(b"noisy: last line\n")
                sys.stderr.flush()
            text = json.dumps(args, ensure_ascii=True)
            send({"jsonrpc": "2.0", "id": mid, "result": {"content": [{"type": "text", "text": text}]}})
        else:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": f"no method {method}"}})


if __name__ == "__main__":
    main()
