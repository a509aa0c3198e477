"""An agent's chat-completions calls as tokens (the recording half of :mod:`agentr1_trl.agent_proxy`): OpenAI
messages checked and rendered by the chat template, each prompt built on the tokens the episode sampled when the
agent sends back what it was given (:class:`ChatRenderer`), the model's text parsed into OpenAI tool calls
(:func:`parse_completion`), and an episode's calls merged into one trajectory (:func:`calls_to_trajectory`)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentr1_gym.formats import HermesFormat, ToolCall, tag_blocks
from agentr1_gym.rollout import Trajectory, observation_delta, render_chat
from agentr1_gym.text import MAX_JSON_DEPTH, clean_json, clean_text

__all__ = [
    "CallRecord",
    "ChatRenderer",
    "EpisodeCalls",
    "ProxyRequestError",
    "calls_to_trajectory",
    "message_signature",
    "parse_completion",
]

_HERMES = HermesFormat()
_ROLES = {"system", "user", "assistant", "tool", "developer"}


class ProxyRequestError(ValueError):
    """A request the endpoint refuses: becomes a 400 (or ``status``) in OpenAI's error shape."""

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.code, self.status = param, code, status

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": str(self), "type": kind, "param": self.param, "code": self.code}}


@dataclass
class CallRecord:
    """One chat-completions call as the model saw it: the prompt ids, the completion ids and log-probs as sampled,
    why it stopped, its text, and the template messages and tools the prompt rendered."""

    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    text: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    rendered: str
    #: whether the prompt was built on an earlier call's sampled tokens (else it was encoded from its text)
    extends_earlier: bool = False
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class EpisodeCalls:
    """The calls of one open episode, and the assistant messages returned to it (to find them again when the agent
    sends them back)."""

    episode_id: str
    calls: list[CallRecord] = field(default_factory=list)
    #: the signature of each assistant message returned -> the index of its call
    returned: dict[Any, int] = field(default_factory=dict)
    #: the prompt reached the context limit (``max_context_tokens``): the episode is truncated
    over_budget: bool = False
    closed: bool = False


def _canonical_args(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            return arguments
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def message_signature(content: str | None, tool_calls: Sequence[dict[str, Any]]) -> Any:
    """What identifies an assistant message the endpoint returned when an agent sends it back: its stripped text
    and its calls' names and arguments in canonical JSON (any key order or spacing)."""
    calls = tuple(
        (
            str(c.get("function", {}).get("name", "")),
            _canonical_args(c.get("function", {}).get("arguments", "")),
        )
        for c in tool_calls
    )
    return ((content or "").strip(), calls)


def _text_content(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return clean_text(content)
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise ProxyRequestError(f"{where}: only text content parts are supported", param=where)
            parts.append(part["text"])
        return clean_text("".join(parts))
    raise ProxyRequestError(f"{where}: content must be a string or a list of text parts", param=where)


def _check_tool_calls(tool_calls: Any, where: str) -> list[dict[str, Any]]:
    if tool_calls is None:
        return []
    if not isinstance(tool_calls, list):
        raise ProxyRequestError(f"{where}.tool_calls must be a list", param=f"{where}.tool_calls")
    for j, call in enumerate(tool_calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ProxyRequestError(
                f"{where}.tool_calls[{j}] must be {{'type': 'function', 'function': {{'name', 'arguments'}}}}",
                param=f"{where}.tool_calls[{j}]",
            )
    return tool_calls


def parse_completion(text: str, parse_tools: bool = True) -> tuple[str | None, list[tuple[str, dict]]]:
    """The model's turn as OpenAI's message: ``(content, [(name, arguments), ...])``. Every
    ``<tool_call>{...}</tool_call>`` block that parses becomes a tool call and leaves the content; if any block does
    not parse, there are no tool calls and the content is the whole text (the agent sees what the model wrote)."""
    if not parse_tools or "<tool_call>" not in text:
        return text, []
    blocks = tag_blocks(text, ("tool_call",))
    calls: list[tuple[str, dict]] = []
    for _, body, _, _ in blocks:
        call = HermesFormat.parse_call(body)
        if not isinstance(call, ToolCall):
            return text, []
        calls.append((call.name, call.arguments))
    if not calls:
        return text, []
    kept, pos = [], 0
    for _, _, start, end in blocks:
        kept.append(text[pos:start])
        pos = end
    kept.append(text[pos:])
    content = "".join(kept).strip()
    return content or None, calls


class ChatRenderer:
    """OpenAI messages -> the chat template's messages, and prompt ids built on an episode's sampled tokens."""

    def __init__(self, tokenizer: Any, chat_template_kwargs: dict[str, Any] | None) -> None:
        self.tokenizer = tokenizer
        self.kw = chat_template_kwargs

    def template_messages(self, episode: EpisodeCalls, messages: Any) -> list[dict[str, Any]]:
        if not isinstance(messages, list) or not messages:
            raise ProxyRequestError("messages must be a non-empty list", param="messages")
        out: list[dict[str, Any]] = []
        for i, msg in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(msg, dict) or msg.get("role") not in _ROLES:
                raise ProxyRequestError(
                    f"{where} must be an object with a role in {sorted(_ROLES)}", param=where
                )
            role = "system" if msg["role"] == "developer" else msg["role"]
            content = _text_content(msg.get("content"), where)
            if role == "assistant":
                calls = _check_tool_calls(msg.get("tool_calls"), where)
                index = episode.returned.get(message_signature(content, calls))
                if index is not None:  # ours: the text exactly as sampled
                    content = episode.calls[index].text
                else:  # written or edited by the agent: its calls in the model's own format
                    for call in calls:
                        fn = call["function"]
                        args = fn.get("arguments", {})
                        try:
                            parsed = (
                                json.loads(args) if isinstance(args, str) and args.strip() else args or {}
                            )
                            # an escaped lone surrogate decodes to one; nesting past the bound stays as written
                            parsed, cut = clean_json(parsed, MAX_JSON_DEPTH)
                        except (ValueError, RecursionError):
                            parsed, cut = args, True
                        if cut or not isinstance(parsed, dict):
                            parsed = {"_raw": parsed if not cut else clean_text(str(args))}
                        block = _HERMES.format_call(ToolCall(name=fn["name"], arguments=parsed))
                        content = f"{content}\n{block}" if content else block
            out.append({"role": role, "content": content})
        return out

    def prompt(
        self, episode: EpisodeCalls, messages: list[dict[str, Any]], tools: list[dict] | None
    ) -> tuple[list[int], str, bool]:
        """``(prompt ids, rendered text, built on an earlier call's tokens)``."""
        tok = self.tokenizer
        try:
            rendered = render_chat(
                tok, messages, tools, add_generation_prompt=True, chat_template_kwargs=self.kw
            )
        except Exception as exc:  # a template that refuses this conversation (jinja raises its own errors)
            raise ProxyRequestError(f"the chat template cannot render these messages: {exc}") from None
        for call in reversed(episode.calls):
            n = len(call.messages)
            if (
                call.tools == tools
                and len(messages) > n
                and messages[:n] == call.messages
                and messages[n] == {"role": "assistant", "content": call.text}
            ):
                ended_with_eos = bool(call.completion_ids) and call.completion_ids[-1] == tok.eos_token_id
                delta, nxt = observation_delta(tok, call.rendered, call.messages, messages, tools,
                                               ended_with_eos, self.kw)  # fmt: skip
                if delta is not None and nxt == rendered:
                    ids = call.prompt_ids + call.completion_ids + tok.encode(delta, add_special_tokens=False)
                    return ids, rendered, True
                break
        return tok.encode(rendered, add_special_tokens=False), rendered, False


def calls_to_trajectory(calls: Sequence[CallRecord]) -> tuple[Trajectory, int]:
    """One episode's calls as a :class:`~agentr1_gym.rollout.Trajectory` and the number of calls whose prompt did
    not extend the previous prompt plus completion token for token (``drift/split_calls``).

    With no split, the calls are one sequence: the first prompt, each completion (``action_mask`` 1) and between
    them the new prompt tokens (``action_mask`` 0). With a split, the trajectory is not prefix-stable: its
    ``turns`` hold each call's own prompt and completion and training uses one row per call. Rewards are left to
    the caller (one per call)."""
    if not calls:
        raise ValueError("an episode without calls has no trajectory")
    splits = 0
    for prev, call in itertools.pairwise(calls):
        seq = prev.prompt_ids + prev.completion_ids
        if call.prompt_ids[: len(seq)] != seq:
            splits += 1
    traj = Trajectory(prompt_ids=list(calls[0].prompt_ids), one_sequence=splits == 0)
    for k, call in enumerate(calls):
        if k > 0 and traj.one_sequence:
            prev = calls[k - 1]
            new = call.prompt_ids[len(prev.prompt_ids) + len(prev.completion_ids) :]
            traj.completion_ids += new
            traj.action_mask += [0] * len(new)
            traj.logprobs += [0.0] * len(new)
        traj.turns.append((list(call.prompt_ids), list(call.completion_ids), list(call.logprobs)))
        traj.completion_ids += call.completion_ids
        traj.action_mask += [1] * len(call.completion_ids)
        traj.logprobs += list(call.logprobs)
        traj.turn_ends.append(len(traj.completion_ids) - 1)
        traj.actions.append(call.text)
        traj.tool_calls.append(list(call.tool_calls))
        traj.action_errors.append(None)
    return traj, splits
