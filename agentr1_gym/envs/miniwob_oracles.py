"""Scripted solvers of MiniWoB++ tasks, for the warm start and the tests: each reads the instruction and the page as
the agent sees them (:class:`~agentr1_gym.envs.miniwob.MiniWoBPage`) and the actions taken so far, and returns
the next tool call. They read nothing the agent cannot see: no field MiniWoB keeps for its own scoring, no hidden
element.

:func:`oracle_call` returns ``(tool, arguments)``, or None for a task without a solver.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from agentr1_gym.envs.miniwob_page import Element, MiniWoBPage

__all__ = ["ORACLES", "click_every_element", "oracle_call", "type_everywhere"]

Call = tuple[str, dict[str, Any]]
Actions = Sequence[tuple[str, dict[str, Any]]]


def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _find(page: MiniWoBPage, pred: Callable[[Element], bool]) -> list[Element]:
    return [e for e in page.elements() if e.ref > 0 and pred(e)]


def _by_text(page: MiniWoBPage, text: str, tags: Sequence[str] = ()) -> Element | None:
    hits = _find(page, lambda e: e.all_text() == text and (not tags or e.tag in tags))
    return hits[0] if hits else None


def _button(page: MiniWoBPage, text: str) -> Element | None:
    """The button labelled ``text`` (exactly; else ignoring case)."""
    buttons = _find(page, lambda e: e.tag == "button")
    hits = [b for b in buttons if b.all_text() == text] or [
        b for b in buttons if b.all_text().lower() == text.lower()
    ]
    return hits[0] if hits else None


def _click(e: Element | None) -> Call | None:
    return ("click", {"ref": e.ref}) if e is not None else None


def _clicked(actions: Actions) -> set[int]:
    return {a["ref"] for name, a in actions if name == "click"}


def _text_fields(page: MiniWoBPage) -> list[Element]:
    return _find(page, lambda e: e.is_text_input)


def _labelled(page: MiniWoBPage, kind: str) -> list[tuple[Element, str]]:
    """(checkbox or radio, the text of the label that holds it)."""
    out = []
    for label in _find(page, lambda e: e.tag == "label"):
        boxes = [c for c in label.children if c.tag == f"input_{kind}"]
        if boxes:
            out.append((boxes[0], label.all_text()))
    return out


def click_button(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    return _click(_button(page, target))


def click_test_2(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"Click button (\w+)", page.utterance)
    return _click(_button(page, m.group(1))) if m else None


def click_button_sequence(page: MiniWoBPage, actions: Actions) -> Call | None:
    first, second = _button(page, "ONE"), _button(page, "TWO")
    if first is not None and first.ref not in _clicked(actions):
        return _click(first)
    return _click(second)


def click_checkboxes(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"Select (.*) and click Submit", page.utterance)
    wanted = set()
    if m and m.group(1) != "nothing":
        wanted = {w.strip() for w in re.split(r",\s*", m.group(1)) if w.strip()}
    for box, text in _labelled(page, "checkbox"):
        if (text in wanted) != bool(box.value):
            return _click(box)
    return _click(_button(page, "Submit"))


def click_option(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"Select (.*) and click Submit", page.utterance)
    target = m.group(1).strip() if m else ""
    for box, text in _labelled(page, "radio"):
        if text == target and not box.value:
            return _click(box)
    return _click(_button(page, "Submit"))


def click_collapsible(page: MiniWoBPage, actions: Actions) -> Call | None:
    submit = _button(page, "Submit")
    headers = _find(page, lambda e: e.tag == "h3")
    if headers and not _clicked(actions) & {h.ref for h in headers}:
        return _click(headers[0])
    return _click(submit)


def click_dialog(page: MiniWoBPage, actions: Actions) -> Call | None:
    return _click(_button(page, "Close"))


def click_dialog_2(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r'labeled "(.*)"', page.utterance)
    target = m.group(1) if m else ""
    if target.lower() == "x":
        return _click(_button(page, "Close"))
    return _click(_button(page, target))


def click_link(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    return _click(_by_text(page, target, ("span", "a")))


def click_tab(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"Tab #(\d+)", page.utterance)
    return _click(_by_text(page, f"Tab #{m.group(1)}", ("a",))) if m else None


def click_tab_2(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    link = _by_text(page, target, ("span", "a"))
    if link is not None and not link.all_text().startswith("Tab #"):
        return _click(link)
    tabs = _find(page, lambda e: e.tag == "a" and e.all_text().startswith("Tab #"))
    seen = _clicked(actions)
    rest = [t for t in tabs[1:] if t.ref not in seen]  # the first tab is open at the start
    return _click(rest[0] if rest else None)


def choose_list(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"Select (.*) from the list", page.utterance)
    target = m.group(1).strip() if m else ""
    lists = _find(page, lambda e: e.tag == "select")
    if lists and lists[0].selected != target:
        return ("select", {"ref": lists[0].ref, "option": target})
    return _click(_button(page, "Submit"))


def _fill(page: MiniWoBPage, values: Sequence[str], submit: str) -> Call | None:
    fields = _text_fields(page)
    for f, value in zip(fields, values):
        if f.value != value:
            return ("type", {"ref": f.ref, "text": value})
    return _click(_button(page, submit))


def enter_text(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    return _fill(page, [target], "Submit")


def enter_text_2(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    case = target.upper() if "upper case" in page.utterance else target.lower()
    return _fill(page, [case], "Submit")


def enter_password(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    return _fill(page, [target, target], "Submit")


def login_user(page: MiniWoBPage, actions: Actions) -> Call | None:
    user, password = [*_quoted(page.utterance), "", ""][:2]
    return _fill(page, [user, password], "Login")


def focus_text(page: MiniWoBPage, actions: Actions) -> Call | None:
    fields = _text_fields(page)
    return _click(fields[0] if fields else None)


def focus_text_2(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"the (\d+)(?:st|nd|rd|th) input", page.utterance)
    fields = _text_fields(page)
    index = int(m.group(1)) - 1 if m else 0
    return _click(fields[index] if 0 <= index < len(fields) else None)


def click_test(page: MiniWoBPage, actions: Actions) -> Call | None:
    buttons = _find(page, lambda e: e.tag == "button")
    return _click(buttons[0] if buttons else None)


_WIDGET_KINDS = {"button": "button", "text": "text field", "textarea": "text area", "checkbox": "checkbox",
                 "radio": "radio"}  # fmt: skip


def click_widget(page: MiniWoBPage, actions: Actions) -> Call | None:
    (target,) = _quoted(page.utterance)[:1] or [""]
    kind = _WIDGET_KINDS.get(target, target)
    hits = _find(page, lambda e: e.kind == kind)
    return _click(hits[0] if hits else None)


def simple_arithmetic(page: MiniWoBPage, actions: Actions) -> Call | None:
    problem = next((e.all_text() for e in page.elements() if re.search(r"\d+ [-+x] \d+ =", e.text)), "")
    m = re.search(r"(-?\d+) ([-+x]) (-?\d+) =", problem)
    if not m:
        return None
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    answer = a + b if op == "+" else a - b if op == "-" else a * b
    return _fill(page, [str(answer)], "Submit")


def read_table(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"the value of (.*) into the text field", page.utterance)
    cells = _find(page, lambda e: e.tag == "td")
    for i, cell in enumerate(cells[:-1]):
        if m and cell.all_text() == m.group(1).strip():
            return _fill(page, [cells[i + 1].all_text()], "Submit")
    return None


def find_word(page: MiniWoBPage, actions: Actions) -> Call | None:
    m = re.search(r"Find the (\d+)\w* word in the paragraph", page.utterance)
    paragraphs = _find(page, lambda e: e.tag == "p")
    if not m or not paragraphs:
        return None
    words = [re.sub(r"[^A-Za-z0-9]", "", w) for w in paragraphs[0].all_text().split()]
    index = int(m.group(1)) - 1
    return _fill(page, [words[index] if 0 <= index < len(words) else ""], "Submit")


# ---- gaming, not solving: what a policy could try instead of reading the task (the reward-hacking tests and
# benchmarks/miniwob_env.py measure what they earn) -------------------------------------------------------------
def click_every_element(page: MiniWoBPage, actions: Actions) -> Call:
    """A click on the next element of the page not clicked yet (the first one again once all were)."""
    refs = [e.ref for e in page.elements() if e.ref > 1]
    tried = _clicked(actions)
    rest = [r for r in refs if r not in tried]
    return ("click", {"ref": (rest or refs)[0]})


def type_everywhere(page: MiniWoBPage, actions: Actions, text: str) -> Call:
    """``text`` typed into the next text field not typed into yet; then :func:`click_every_element`."""
    typed = {a["ref"] for name, a in actions if name == "type"}
    rest = [f for f in _text_fields(page) if f.ref not in typed]
    if rest:
        return ("type", {"ref": rest[0].ref, "text": text})
    return click_every_element(page, actions)


#: task id -> solver
ORACLES: dict[str, Callable[[MiniWoBPage, Actions], Call | None]] = {
    "click-button": click_button,
    "click-button-sequence": click_button_sequence,
    "click-checkboxes": click_checkboxes,
    "click-checkboxes-transfer": click_checkboxes,
    "click-collapsible": click_collapsible,
    "click-dialog": click_dialog,
    "click-dialog-2": click_dialog_2,
    "click-link": click_link,
    "click-option": click_option,
    "click-tab": click_tab,
    "click-tab-2": click_tab_2,
    "click-test": click_test,
    "click-test-2": click_test_2,
    "click-widget": click_widget,
    "choose-list": choose_list,
    "enter-password": enter_password,
    "enter-text": enter_text,
    "enter-text-2": enter_text_2,
    "enter-text-dynamic": enter_text,
    "find-word": find_word,
    "focus-text": focus_text,
    "focus-text-2": focus_text_2,
    "login-user": login_user,
    "read-table": read_table,
    "simple-arithmetic": simple_arithmetic,
    "unicode-test": click_button,
}


def oracle_call(task: str, page: MiniWoBPage | None, actions: Actions) -> Call | None:
    """The next call of ``task``'s solver on ``page`` (None: the task has no solver). When the solver finds
    nothing to do (the page is not what it expects), it clicks the first element it can, so an episode still
    moves on."""
    solver = ORACLES.get(task)
    if solver is None:
        return None
    call = solver(page, actions) if page is not None and page.root is not None else None
    if call is None:
        refs = [e.ref for e in (page.elements() if page is not None else []) if e.ref > 1]
        return ("click", {"ref": refs[0]}) if refs else ("press", {"key": "enter"})
    return call
