"""Tool-call formats: parse one assistant turn into tool calls or a final answer, render tool results.

Formats are pluggable objects (:class:`ToolCallFormat`); two ship:

* :class:`HermesFormat` (default, the Hermes/Qwen format used by Agent-R1 and TRL):
  ``<think>...</think><tool_call>{"name": "search", "arguments": {"query": "..."}}</tool_call>`` and a final
  ``<answer>...</answer>``. Results go back as ``tool`` messages that chat templates wrap in
  ``<tool_response>...</tool_response>``.
* :class:`SearchR1Format` (Search-R1 tags): ``<search>query</search>``, answered by
  ``<information>...</information>``; any tool with exactly one required string argument gets a tag of its name.

Parsing never raises on model output: problems come back as :attr:`ParsedAction.error`, a message written
for the agent that says what was wrong and how to write it instead.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentr1_gym.errors import ConfigError

if TYPE_CHECKING:
    from agentr1_gym.tools.base import Tool

__all__ = [
    "FORMATS",
    "HermesFormat",
    "ParsedAction",
    "SearchR1Format",
    "ToolCall",
    "ToolCallFormat",
    "get_format",
    "strip_thinking",
]


def tag_blocks(text: str, tags: Sequence[str]) -> list[tuple[str, str, int, int]]:
    """Closed ``<tag>...</tag>`` blocks of any of ``tags``, left to right, as ``(tag, inner, start, end)``.

    The same blocks as the lazy regex ``<(a|b)>(.*?)</\\1>`` finds, in linear time: the regex rescans to the end
    of the text for every open tag that is never closed (100 KB of open tags took seconds). Once a tag has no
    closing tag after some open, no later open of that tag can close either, so it is dropped from the search."""
    out: list[tuple[str, str, int, int]] = []
    live = {t: (f"<{t}>", f"</{t}>") for t in tags}
    pos = 0
    while live:
        starts = {t: text.find(o, pos) for t, (o, _) in live.items()}
        starts = {t: i for t, i in starts.items() if i >= 0}
        if not starts:
            break
        tag = min(starts, key=lambda t: starts[t])
        open_tag, close_tag = live[tag]
        start = starts[tag]
        end = text.find(close_tag, start + len(open_tag))
        if end < 0:
            del live[tag]
            continue
        out.append((tag, text[start + len(open_tag) : end], start, end + len(close_tag)))
        pos = end + len(close_tag)
    return out


@dataclass(frozen=True)
class ToolCall:
    """One parsed tool call: the tool's name and its (not yet validated) JSON arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ParsedAction:
    """What one assistant turn asked for: tool calls, a final answer, or an error message for the agent."""

    calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    error: str | None = None


def strip_thinking(text: str) -> str:
    """``text`` without its closed ``<think>...</think>`` blocks."""
    if "<think>" not in text:
        return text
    kept, pos = [], 0
    for _, _, start, end in tag_blocks(text, ("think",)):
        kept.append(text[pos:start])
        pos = end
    kept.append(text[pos:])
    return "".join(kept)


def _answer_blocks(text: str) -> tuple[list[str], str | None]:
    """All closed ``<answer>`` blocks, or an error for an unclosed one."""
    answers = [inner for _, inner, _, _ in tag_blocks(text, ("answer",))]
    if text.count("<answer>") != len(answers):
        return (
            answers,
            "An <answer> tag was opened but not closed. Write the final answer as <answer>...</answer>.",
        )
    return answers, None


#: how each built-in format tells the model to finish (the end of its "how to" text), and what a world-shaped task
#: says instead (it has no final answer: see :func:`for_world`)
HERMES_FINISH = "; to finish write <answer>your answer</answer>."
SEARCH_R1_FINISH = " To finish, write <answer>your answer</answer>."
NO_CALL = "No tool call and no final answer found."
WORLD_FINISH = " This task has no final answer: act with the tools until the world ends the episode."


def for_world(error: str) -> str:
    """A parse error's text for a world-shaped task (``final_answer=False``): without the advice to write
    ``<answer>``, which there is itself a format error, and saying how such a task ends instead."""
    if HERMES_FINISH not in error and SEARCH_R1_FINISH not in error and NO_CALL not in error:
        return error
    error = (
        error.replace(HERMES_FINISH, ".")
        .replace(SEARCH_R1_FINISH, "")
        .replace(NO_CALL, "No tool call found.")
    )
    return error + WORLD_FINISH


def _finish(calls: list[ToolCall], answers: list[str], how_to: str) -> ParsedAction:
    """Shared rules once a format has extracted calls and answers."""
    if calls and answers:
        return ParsedAction(
            error="The turn contains both a tool call and an <answer>. Either call tools and wait for their "
            "results, or give the final answer; not both in one turn."
        )
    if len(answers) > 1:
        return ParsedAction(
            error=f"The turn contains {len(answers)} <answer> blocks; give exactly one final answer."
        )
    if answers:
        answer = answers[0].strip()
        if not answer:
            return ParsedAction(error="The <answer> block is empty. Put the answer text between the tags.")
        return ParsedAction(answer=answer)
    if calls:
        return ParsedAction(calls=tuple(calls))
    return ParsedAction(error=f"{NO_CALL} {how_to}")


class ToolCallFormat(ABC):
    """How tool calls and answers are written by the model and how tool results are shown to it."""

    #: registry key
    name: str = ""
    #: chat role of the message carrying tool results ("tool" for chat templates with tool support)
    result_role: str = "tool"
    #: strings that end a generated turn (generation backends stop on these)
    stop_strings: tuple[str, ...] = ()

    @abstractmethod
    def parse(self, text: str, tools: Mapping[str, Tool]) -> ParsedAction:
        """Parse one assistant turn. Never raises on any ``str``."""

    @abstractmethod
    def render_result(self, content: str) -> str:
        """The observation text for one tool result, as the model will read it."""

    @abstractmethod
    def format_call(self, call: ToolCall) -> str:
        """Write a call the way a model should (used by oracle policies and demonstrations)."""

    @abstractmethod
    def instructions(self, tools: Sequence[Tool], answer: bool = True) -> str:
        """The part of the task prompt that explains how to call the given tools and (``answer``: for tasks that
        end with a final answer, not for worlds that end themselves) how to answer."""

    def format_answer(self, answer: str) -> str:
        return f"<answer>{answer}</answer>"

    def unwrap_result(self, message_content: str) -> str:
        """The tool output inside a result message this format wrote (the inverse of how :meth:`render_result`
        went into the message; formats whose results go back as ``tool`` messages store them unwrapped)."""
        return message_content

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other)

    def __hash__(self) -> int:
        return hash(type(self))


def _tool_signature(tool: Tool) -> str:
    props = tool.schema_view()["function"]["parameters"].get("properties", {})
    args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in props.items())
    return f"{tool.name}({args}): {tool.description}"


class HermesFormat(ToolCallFormat):
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` calls and ``<answer>...</answer>``."""

    name = "hermes"
    result_role = "tool"
    stop_strings = ("</tool_call>", "</answer>")
    _HOW_TO = (
        'To use a tool write <tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
        f"{HERMES_FINISH}"
    )

    def parse(self, text: str, tools: Mapping[str, Tool]) -> ParsedAction:
        # the common turn, one call and nothing else to strip or check, without the general scan: the same
        # result, in about half the time (it runs right after a world's step, with the CPU's caches cold)
        start = text.find("<tool_call>")
        if (
            start >= 0
            and "<think>" not in text
            and "<answer>" not in text
            and text.find("<tool_call>", start + 11) < 0
        ):
            end = text.find("</tool_call>", start + 11)
            if end >= 0 and text.find("</tool_call>", end + 12) < 0:
                call = self._parse_body(text[start + 11 : end])
                if isinstance(call, str):
                    return ParsedAction(error=f"{call}. {self._HOW_TO}")
                return ParsedAction(calls=(call,))
        return self._parse_general(text, tools)

    def _parse_general(self, text: str, tools: Mapping[str, Tool]) -> ParsedAction:
        """Any turn: thinking stripped, every block found, the rules of :func:`_finish` applied."""
        text = strip_thinking(text)
        bodies = [inner for _, inner, _, _ in tag_blocks(text, ("tool_call",))]
        if text.count("<tool_call>") != len(bodies):
            return ParsedAction(error="A <tool_call> tag was opened but not closed with </tool_call>.")
        answers, error = _answer_blocks(text)
        if error:
            return ParsedAction(error=error)
        calls: list[ToolCall] = []
        for i, body in enumerate(bodies):
            call = self._parse_body(body)
            if isinstance(call, str):
                where = f" (tool call {i + 1} of {len(bodies)})" if len(bodies) > 1 else ""
                return ParsedAction(error=f"{call}{where}. {self._HOW_TO}")
            calls.append(call)
        return _finish(calls, answers, self._HOW_TO)

    @staticmethod
    def parse_call(body: str) -> ToolCall | str:
        """One ``<tool_call>`` block's inside as a :class:`ToolCall`, or a message saying what is wrong with it
        (the parser the env uses, for callers that take tool calls out of a turn themselves: the agent endpoint)."""
        return HermesFormat._parse_body(body)

    @staticmethod
    def _parse_body(body: str) -> ToolCall | str:
        body = body.strip()
        if body.startswith("```"):
            body = body.strip("`").removeprefix("json").strip()
        try:
            obj = json.loads(body, strict=False)
        except (ValueError, RecursionError) as exc:  # ValueError: also integers of more than 4,300 digits
            if isinstance(exc, json.JSONDecodeError):
                msg = exc.msg
            elif isinstance(exc, RecursionError):
                msg = "nested too deeply"
            else:
                msg = "a number is too long"
            return f"The tool call is not valid JSON ({msg})"
        if not isinstance(obj, dict):
            return f"The tool call must be a JSON object, got {type(obj).__name__}"
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            return 'The tool call has no "name" string'
        unknown_keys = set(obj) - {"name", "arguments"}
        if unknown_keys:
            return (
                f'The tool call has unexpected keys {sorted(unknown_keys)}; use only "name" and "arguments"'
            )
        args = obj.get("arguments", {})
        if isinstance(args, str):  # some models stringify the arguments, as the OpenAI API does
            try:
                args = json.loads(args, strict=False) if args.strip() else {}
            except (ValueError, RecursionError):
                return '"arguments" is a string that is not valid JSON'
        if not isinstance(args, dict):
            return f'"arguments" must be a JSON object, got {type(args).__name__}'
        return ToolCall(name=name, arguments=args)

    def render_result(self, content: str) -> str:
        return f"<tool_response>\n{content}\n</tool_response>"

    def format_call(self, call: ToolCall) -> str:
        payload = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
        return f"<tool_call>\n{payload}\n</tool_call>"

    def instructions(self, tools: Sequence[Tool], answer: bool = True) -> str:
        listing = "\n".join(f"- {_tool_signature(t)}" for t in tools)
        text = (
            "You can call tools. Think step by step inside <think>...</think>. To call a tool, write\n"
            '<tool_call>\n{"name": "<tool name>", "arguments": {<arguments as JSON>}}\n</tool_call>\n'
            "and stop; its result comes back inside <tool_response>...</tool_response>.\n"
            f"Available tools:\n{listing}"
        )
        return text + (
            "\nWhen you know the answer, write it inside <answer>...</answer> and stop." if answer else ""
        )


class SearchR1Format(ToolCallFormat):
    """Search-R1 tags: ``<search>query</search>`` (one tag per single-string-argument tool) and ``<answer>``."""

    name = "search_r1"
    result_role = "user"
    stop_strings = ("</search>", "</answer>")

    @staticmethod
    def _tag_argument(tool: Tool) -> str | None:
        params = tool.schema_view()["function"]["parameters"]
        required = params.get("required", [])
        props = params.get("properties", {})
        if len(required) == 1 and props.get(required[0], {}).get("type") == "string":
            return str(required[0])
        return None

    def parse(self, text: str, tools: Mapping[str, Tool]) -> ParsedAction:
        text = strip_thinking(text)
        answers, error = _answer_blocks(text)
        if error:
            return ParsedAction(error=error)
        tag_tools = {
            name: arg for name, tool in tools.items() if (arg := self._tag_argument(tool)) is not None
        }
        if not tag_tools:
            return ParsedAction(error="No tool of this environment can be called with a tag.")
        calls: list[ToolCall] = []
        for tag, inner, _, _ in tag_blocks(text, tuple(tag_tools)):
            calls.append(ToolCall(name=tag, arguments={tag_tools[tag]: inner.strip()}))
        for tag in tag_tools:
            if text.count(f"<{tag}>") != sum(c.name == tag for c in calls):
                return ParsedAction(error=f"A <{tag}> tag was opened but not closed with </{tag}>.")
        how_to = " ".join(f"To use {t}, write <{t}>...</{t}>." for t in tag_tools)
        return _finish(calls, answers, how_to + SEARCH_R1_FINISH)

    def render_result(self, content: str) -> str:
        return f"<information>{content}</information>"

    def unwrap_result(self, message_content: str) -> str:
        return message_content.removeprefix("<information>").removesuffix("</information>")

    def format_call(self, call: ToolCall) -> str:
        (value,) = call.arguments.values()
        return f"<{call.name}>{value}</{call.name}>"

    def instructions(self, tools: Sequence[Tool], answer: bool = True) -> str:
        tags = [t for t in tools if self._tag_argument(t) is not None]
        listing = "\n".join(f"- <{t.name}>...</{t.name}>: {t.description}" for t in tags)
        text = (
            "Reason inside <think> and </think> first. If you lack knowledge, call a tool with a tag; "
            "its result comes back between <information> and </information>. You may call tools as often "
            f"as you want.\nTools:\n{listing}"
        )
        if answer:
            text += "\nWhen you know the answer, write it inside <answer> and </answer>, without detailed explanation."
        return text


FORMATS: dict[str, type[ToolCallFormat]] = {"hermes": HermesFormat, "search_r1": SearchR1Format}


def get_format(fmt: str | ToolCallFormat) -> ToolCallFormat:
    """Return a format object from its name (``"hermes"``, ``"search_r1"``) or pass an instance through."""
    if isinstance(fmt, ToolCallFormat):
        return fmt
    try:
        return FORMATS[fmt]()
    except (KeyError, TypeError):
        raise ConfigError(f"unknown tool-call format {fmt!r}; choose one of {sorted(FORMATS)}") from None
