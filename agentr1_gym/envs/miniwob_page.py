"""The page of a MiniWoB++ task as the agent sees it: the element tree MiniWoB's own DOM walk returns (each
element with the ref MiniWoB's actions take), and its rendering as compact text
(:func:`render_page`). Shared by the env (:mod:`agentr1_gym.envs.miniwob`) and its scripted solvers
(:mod:`agentr1_gym.envs.miniwob_oracles`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["LINE_CHARS", "Element", "MiniWoBPage", "element_tree", "page_line", "quoted", "render_page"]

#: the longest text a line of the page shows (longer text is cut with an ellipsis)
LINE_CHARS = 300

#: the elements a line is shown for even without text of their own
_CONTROLS = ("input", "select", "textarea", "button")
_SHOWN_CONTAINERS = ("a", "label", "li", "button", "h1", "h2", "h3", "h4", "td", "th", "option")
_TEXT_INPUTS = ("text", "password", "email", "number", "search", "tel", "url", "date", "time")


@dataclass
class Element:
    """One visible element of the page (``ref`` < 0: text without an element of its own)."""

    ref: int
    tag: str
    text: str = ""
    value: Any = None
    focused: bool = False
    options: tuple[str, ...] = ()
    selected: str | None = None
    children: list[Element] = field(default_factory=list)

    @property
    def kind(self) -> str:
        """``button``, ``checkbox``, ``text field``, ``list``, ... (MiniWoB's tag, ``input_text`` -> ``text``)."""
        if self.tag.startswith("input_"):
            kind = self.tag[6:]
            return f"{kind} field" if kind in _TEXT_INPUTS else kind
        return {"select": "list", "textarea": "text area", "t": "text"}.get(self.tag, self.tag)

    @property
    def is_text_input(self) -> bool:
        return self.tag == "textarea" or (self.tag.startswith("input_") and self.tag[6:] in _TEXT_INPUTS)

    def all_text(self) -> str:
        """The element's text and its descendants', in order."""
        parts = [self.text] if self.text else []
        parts += [c.all_text() for c in self.children]
        return " ".join(p for p in parts if p)


def element_tree(raw: dict[str, Any], lists: dict[str, Any]) -> Element:
    """The element tree of MiniWoB's ``core.getDOMInfo()`` answer, with the drop-down lists' options (by ref)."""
    extra = lists.get(str(raw.get("ref")), {})
    element = Element(
        ref=int(raw.get("ref", 0)),
        tag=str(raw.get("tag", "")).lower(),
        text=" ".join(str(raw.get("text") or "").split()),
        value=raw.get("value"),
        focused=bool(raw.get("focused", False)),
        options=tuple(str(o) for o in extra.get("options", ())),
        selected=extra.get("selected"),
    )
    element.children = [element_tree(c, lists) for c in raw.get("children", ()) if isinstance(c, dict)]
    # MiniWoB's walk splits a text node into one node per line: rejoin runs of them
    merged: list[Element] = []
    for child in element.children:
        if child.tag == "t" and merged and merged[-1].tag == "t":
            merged[-1].text = f"{merged[-1].text} {child.text}".strip()
        else:
            merged.append(child)
    element.children = merged
    if element.children and all(c.tag == "t" for c in element.children):  # an element holding text only
        element.text = " ".join(c.text for c in element.children)
        element.children = []
    return element


@dataclass
class MiniWoBPage:
    """The page as the agent sees it: the instruction, the element tree, and MiniWoB's episode state."""

    utterance: str
    root: Element | None
    done: bool
    raw_reward: float

    def elements(self) -> list[Element]:
        """Every element in document order (text nodes included, ref < 0)."""
        out: list[Element] = []

        def walk(e: Element) -> None:
            out.append(e)
            for c in e.children:
                walk(c)

        if self.root is not None:
            walk(self.root)
        return out

    def by_ref(self, ref: int) -> Element | None:
        return next((e for e in self.elements() if e.ref == ref and ref > 0), None)


def quoted(text: str) -> str:
    text = text if len(text) <= LINE_CHARS else text[: LINE_CHARS - 1] + "\u2026"
    return '"' + text.replace('"', "'") + '"'


def page_line(e: Element) -> str:
    if e.tag == "t":
        return quoted(e.text)
    parts = [f"[{e.ref}] {e.kind}"]
    if e.text and e.tag != "textarea":  # a text area's text is its value
        parts.append(quoted(e.text))
    if e.tag in ("input_checkbox", "input_radio"):
        parts.append("checked" if e.value else "unchecked")
    elif e.is_text_input or (e.tag.startswith("input_") and e.value not in (None, "")):
        parts.append(f"value={quoted(str(e.value or ''))}")
    if e.options:
        shown = " | ".join(quoted(o) for o in e.options[:30])
        more = f" (+{len(e.options) - 30} more)" if len(e.options) > 30 else ""
        parts.append(f"options: {shown}{more}; selected {quoted(e.selected or '')}")
    if e.focused:
        parts.append("(focused)")
    return " ".join(parts)


def _shown(e: Element) -> bool:
    base = e.tag.split("_", 1)[0]
    return e.tag == "t" or bool(e.text) or base in _CONTROLS or e.tag in _SHOWN_CONTAINERS


def render_page(page: MiniWoBPage, max_chars: int = 6000) -> str:
    """The page as compact text: one line per element shown, indented under the shown element that holds it."""
    lines: list[str] = []

    def walk(e: Element, indent: int) -> None:
        if e.tag in ("body", "html"):
            for c in e.children:
                walk(c, indent)
            return
        own = _shown(e)
        if own:
            lines.append("  " * indent + page_line(e))
        for c in e.children:
            walk(c, indent + 1 if own else indent)

    if page.root is not None:
        walk(page.root, 0)
    text, total = "", 0
    for i, line in enumerate(lines):
        if total + len(line) + 1 > max_chars:
            text += f"... ({len(lines) - i} more elements not shown)"
            break
        text += line + "\n"
        total += len(line) + 1
    return text.rstrip("\n") or "(the page shows nothing)"
