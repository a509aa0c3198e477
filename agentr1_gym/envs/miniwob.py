"""``AgentR1/MiniWoB-v0``: MiniWoB++'s web tasks in headless Chromium, scored by MiniWoB's own reward.

Each task is one of MiniWoB++'s HTML pages (Farama's ``miniwob`` package bundles about 130), loaded from local
files in a :class:`~agentr1_gym.tools.browser.Browser` (one per env, reused across resets, no network). A seed
fixes the task instance: the env seeds the page's random generator (``Math.seedrandom``) before MiniWoB starts the
episode, as MiniWoB's own Python driver does.

**What the agent sees**: the task's instruction (MiniWoB's utterance) and the page as compact text: one line per
visible element that can be acted on or that carries text, indented under the element that holds it, with a
stable ref (``[12]``: the same element keeps its ref for the whole episode), its kind, its text, and its state
(a field's value, checked or not, the focus, a list's options and the selected one). Text without an element of
its own is shown as a quoted line. The page text is bounded (``max_page_chars``).

**Tools** (each is one of MiniWoB's own actions on the element with that ref; there is no URL, script or
navigation action):

* ``click(ref)``: MiniWoB's ``CLICK_ELEMENT`` (``core.elementClick``);
* ``type(ref, text)``: MiniWoB's ``FOCUS_ELEMENT_AND_TYPE_TEXT``: click the field, select what it holds, and
  type the text as real key presses (so the typed text replaces it);
* ``press(key)``: MiniWoB's ``PRESS_KEY`` (``Enter``, ``Tab``, ``Backspace``, arrows, ``ctrl+a`` ...);
* ``select(ref, option)``: choose an option of a drop-down list (what picking it with the mouse does: the
  list's value changes and the page hears the change).

Refs must be on the page as last shown; anything else is an observation that says what went wrong.

**Reward**: MiniWoB decides when a task ends and its raw reward (1 done right, -1 done wrong, partial in a few
tasks). MiniWoB also scales the reward by wall-clock time (10 s per episode, then the episode is lost); on a
loaded machine, and with a model thinking between actions, wall-clock must not decide a score, so the timer is
switched off and a per-action rule replaces it::

    score = max(0, raw_reward) * max(0.5, 1 - step_decay * (actions - 1))

(``step_decay`` = 0.02 by default: each browser action after the first costs 2% of the reward, at most half of
it). ``score`` is the outcome (the default answer metric); ``solved`` (MiniWoB's success: raw reward > 0) decides
success; ``raw_reward`` is kept as a metric. There are no process rewards: nothing on the way to MiniWoB's own
outcome is paid, so nothing can be farmed.

**Tasks and splits**: ``task="click-button"`` (any MiniWoB task id, see :data:`MINIWOB_TASKS`), ``tasks=[...]``
for several (each episode draws one), default :data:`ORACLE_TASKS`. ``split="train"`` draws instance seeds
below 2**30, ``split="test"`` at or above it: disjoint held-out instances. The oracle
(:mod:`agentr1_gym.envs.miniwob_oracles`) solves the tasks in :data:`ORACLE_TASKS` from the instruction and the
page; other tasks have none.

Install: ``pip install "agentr1-gym[browser]"`` (MiniWoB and Selenium) and Chromium with its driver
(``apt-get install chromium chromium-driver``).
"""

from __future__ import annotations

import base64
import importlib.util
import time
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from agentr1_gym.env import ToolEnv
from agentr1_gym.envs.miniwob_oracles import ORACLES, oracle_call
from agentr1_gym.envs.miniwob_page import Element, MiniWoBPage, element_tree, page_line, quoted, render_page
from agentr1_gym.errors import ConfigError, MissingDependencyError, NoOracleError, ToolInfrastructureError
from agentr1_gym.formats import ToolCall
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.browser import Browser
from agentr1_gym.tools.function import tool

__all__ = [
    "MINIWOB_TASKS",
    "ORACLE_TASKS",
    "Element",
    "MiniWoBEnv",
    "MiniWoBPage",
    "MiniWoBTask",
    "miniwob_html_dir",
    "render_page",
]

#: instance seeds below this are training instances; at or above it, held-out ones
TEST_SEED_START = 2**30
#: the tasks whose oracle solves them (see :mod:`agentr1_gym.envs.miniwob_oracles`)
ORACLE_TASKS = tuple(sorted(ORACLES))
MAX_TYPED_CHARS = 200
#: the keys ``press`` takes (case-insensitive), as Selenium key names or characters
SPECIAL_KEYS = {
    "enter": "ENTER", "tab": "TAB", "backspace": "BACKSPACE", "delete": "DELETE", "escape": "ESCAPE",
    "space": "SPACE", "arrowup": "ARROW_UP", "arrowdown": "ARROW_DOWN", "arrowleft": "ARROW_LEFT",
    "arrowright": "ARROW_RIGHT", "home": "HOME", "end": "END", "pageup": "PAGE_UP", "pagedown": "PAGE_DOWN",
}  # fmt: skip
MODIFIERS = {"ctrl": "CONTROL", "control": "CONTROL", "shift": "SHIFT", "alt": "ALT"}

# one round trip per observation: MiniWoB's own DOM walk (which assigns the refs its actions take), the lists'
# options, the episode's state and the instruction
# An ended episode's page is not read (nor does MiniWoB's own driver read it): reading it gave the elements that
# outlive an episode (the body, the task's frame) refs in the next episode's numbering, which that episode's own
# elements then repeated (a page with two [7]s)
_SNAPSHOT_JS = """
var done = WOB_DONE_GLOBAL;
var root = done ? null : core.getDOMInfo();
var lists = {};
if (!done) for (var ref in core.previousDOMInfo) {
  var el = core.previousDOMInfo[ref];
  if (el instanceof HTMLSelectElement) {
    lists[ref] = {options: Array.from(el.options).map(function (o) { return o.text; }),
                  selected: el.selectedIndex >= 0 ? el.options[el.selectedIndex].text : null};
  }
}
var utterance = core.getUtterance();
return {root: root, lists: lists, done: done, raw: WOB_RAW_REWARD_GLOBAL,
        utterance: (typeof utterance === 'string') ? utterance : utterance.utterance};
"""
# the wall-clock timer off (an episode would end after 10 s), the instance seeded, the episode started
_BEGIN_JS = """
core.EPISODE_MAX_TIME = 2000000000;  // 23 days: longer delays overflow setTimeout and fire at once
core.endEpisode(0);
Math.seedrandom(arguments[0]);
core.setDataMode('train');
core.startEpisodeReal();
return WOB_TASK_READY;
"""


def miniwob_html_dir() -> Path:
    """The directory of MiniWoB++'s task pages, from the installed ``miniwob`` package (found without importing
    it: its import registers MiniWoB's own Gymnasium envs)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError("miniwob", "browser", "AgentR1/MiniWoB-v0")
    return Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"


def _task_ids() -> tuple[str, ...]:
    try:
        return tuple(sorted(p.stem for p in miniwob_html_dir().glob("*.html")))
    except MissingDependencyError:
        return ()


#: every MiniWoB++ task id the installed package has (empty without it)
MINIWOB_TASKS = _task_ids()


class MiniWoBTask(BaseModel):
    """One task instance: the MiniWoB task id and the seed of its page."""

    model_config = ConfigDict(frozen=True)

    name: str
    seed: int

    @property
    def id(self) -> str:
        return f"{self.name}:{self.seed}"


def parse_key(key: str) -> tuple[list[str], str] | None:
    """``press``'s key as (modifiers, key), lower case: ``"ctrl+a"`` -> (["ctrl"], "a"), ``"+"`` and ``"ctrl++"``
    press the plus key; None when it is not one ``press`` takes."""
    normal = key.strip().lower().replace(" ", "")
    if normal.endswith("+") and (normal == "+" or normal.endswith("++")):
        mods, last = (normal[:-2].split("+") if normal != "+" else []), "+"
    else:
        *mods, last = normal.split("+")
    if any(m not in MODIFIERS for m in mods) or not (last in SPECIAL_KEYS or len(last) == 1):
        return None
    return mods, last


def _plain(text: str) -> str:
    """Typed text: printable characters only (no control characters, which would press keys)."""
    return "".join(c for c in text if c == " " or (c.isprintable() and unicodedata.category(c)[0] != "C"))


class MiniWoBSession:
    """One MiniWoB task page in a browser: the episode's instance, its actions, and the tools acting on it."""

    def __init__(self, browser: Browser, step_decay: float, max_page_chars: int) -> None:
        self.browser = browser
        self.step_decay = step_decay
        self.max_page_chars = max_page_chars
        self.task: MiniWoBTask | None = None
        self.loaded = ""  # the task page the browser holds
        self.page: MiniWoBPage | None = None
        #: the browser actions of this episode, as (tool, arguments): replayed when a pickled env resumes
        self.actions: list[tuple[str, dict[str, Any]]] = []
        self._replay: list[tuple[str, dict[str, Any]]] | None = None  # set by unpickling

    # ---- the episode ------------------------------------------------------------------------------------
    def begin(self, task: MiniWoBTask) -> MiniWoBPage:
        if self.loaded != task.name or not self.browser.running:
            self.browser.open((miniwob_html_dir() / f"{task.name}.html").as_uri())
            self.loaded = task.name
        ready = self.browser.script(_BEGIN_JS, task.seed)
        if not ready:  # MiniWoB's own driver polls WOB_TASK_READY; every bundled task sets it at once
            for _ in range(40):
                if self.browser.script("return WOB_TASK_READY;"):
                    break
                time.sleep(0.05)
            else:
                raise ToolInfrastructureError(f"MiniWoB task {task.name} did not get ready")
        self.task, self.actions = task, []
        return self.snapshot()

    def ensure(self) -> None:
        """After unpickling: reload the instance and replay the episode's actions."""
        if self._replay is not None and self.task is not None:
            replay, self._replay = self._replay, None
            self.begin(self.task)
            # a snapshot after each action, as in the episode: the snapshots assign the refs
            for name, arguments in replay:
                self._act(name, arguments)
                self.snapshot()

    def snapshot(self) -> MiniWoBPage:
        raw = self.browser.script(_SNAPSHOT_JS)
        if not isinstance(raw, dict):
            raise ToolInfrastructureError(f"MiniWoB's page answered {type(raw).__name__}, not its state")
        done = bool(raw.get("done"))
        root = (
            None
            if done or not isinstance(raw.get("root"), dict)
            else element_tree(raw["root"], raw.get("lists") or {})
        )
        self.page = MiniWoBPage(
            utterance=" ".join(str(raw.get("utterance") or "").split()),
            root=root,
            done=done,
            raw_reward=float(raw.get("raw") or 0.0),
        )
        return self.page

    def score(self) -> dict[str, float]:
        raw = self.page.raw_reward if self.page is not None and self.page.done else 0.0
        decay = max(0.5, 1.0 - self.step_decay * max(0, len(self.actions) - 1))
        return {"score": max(0.0, raw) * decay, "solved": float(raw > 0), "raw_reward": raw}

    def screenshot(self) -> str:
        """The task's area as the browser draws it now, as a PNG data URI."""
        png = self.browser.screenshot("wrap")
        return "data:image/png;base64," + base64.b64encode(png).decode("ascii")

    def render(self) -> str:
        return render_page(self.page, self.max_page_chars) if self.page is not None else ""

    # ---- the tools -------------------------------------------------------------------------------------
    def _result(self, what: str) -> ToolResult:
        page = self.snapshot()
        if page.done:
            verdict = "done right" if page.raw_reward > 0 else "done wrong"
            return ToolResult(
                f"{what}\nThe task is over ({verdict}; MiniWoB's reward {page.raw_reward:g}).", terminal=True
            )
        return ToolResult(f"{what}\n\nThe page:\n{self.render()}")

    def _check_ref(self, ref: Any, *, want: str = "") -> Element | str:
        if self.page is None or self.page.done:
            return "The task is over."
        element = self.page.by_ref(ref) if isinstance(ref, int) else None
        if element is None:
            return f"No element [{ref}] on the page: use a ref shown in brackets on the page as last shown."
        if want == "text" and not element.is_text_input:
            return f"[{ref}] is a {element.kind}, not a text field: type into a text field."
        if want == "list" and element.tag != "select":
            return f"[{ref}] is a {element.kind}, not a drop-down list."
        return element

    def _act(self, name: str, arguments: dict[str, Any]) -> None:
        getattr(self, f"_{name}")(**arguments)
        self.actions.append((name, arguments))

    def _click(self, ref: int) -> None:
        answer = self.browser.script("return core.elementClick(arguments[0]);", ref)
        if answer is not True:
            raise ToolInfrastructureError(f"MiniWoB could not click [{ref}]: {str(answer)[:200]}")

    def _type(self, ref: int, text: str) -> None:
        self._click(ref)
        self.browser.script(
            "var el = core.previousDOMInfo[arguments[0]]; if (el && el.select) { el.select(); }", ref
        )
        from selenium.webdriver.common.keys import Keys

        self.browser.keys([Keys.BACKSPACE, text] if text else [Keys.BACKSPACE])

    def _press(self, key: str) -> None:
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        mods, last = parse_key(key)  # checked by press
        main = getattr(Keys, SPECIAL_KEYS[last]) if last in SPECIAL_KEYS else last
        held = [getattr(Keys, MODIFIERS[m]) for m in mods]

        def chord(driver: Any) -> None:
            chain = ActionChains(driver, duration=0)
            for m in held:
                chain.key_down(m)
            chain.send_keys(main)
            for m in reversed(held):
                chain.key_up(m)
            chain.perform()

        self.browser.call("a key press", chord)

    def _select(self, ref: int, index: int) -> None:
        self.browser.script(
            "var el = core.previousDOMInfo[arguments[0]]; el.focus(); el.selectedIndex = arguments[1];"
            "el.dispatchEvent(new Event('input', {bubbles: true}));"
            "el.dispatchEvent(new Event('change', {bubbles: true}));",
            ref,
            index,
        )

    def click(self, ref: Annotated[int, Field(ge=0)]) -> ToolResult:
        """Click an element of the page.

        Args:
            ref: The element's ref, the number in brackets on the page.
        """
        self.ensure()
        element = self._check_ref(ref)
        if isinstance(element, str):
            return ToolResult(element, success=False, terminal=self._over())
        self._act("click", {"ref": ref})
        return self._result(f"Clicked [{ref}] {element.kind}.")

    def type(
        self,
        ref: Annotated[int, Field(ge=0)],
        text: Annotated[str, Field(max_length=MAX_TYPED_CHARS)],
    ) -> ToolResult:
        """Type text into a text field (what the field held is replaced).

        Args:
            ref: The text field's ref, the number in brackets on the page.
            text: The text to type.
        """
        self.ensure()
        element = self._check_ref(ref, want="text")
        if isinstance(element, str):
            return ToolResult(element, success=False, terminal=self._over())
        typed = _plain(text)
        self._act("type", {"ref": ref, "text": typed})
        return self._result(f"Typed {quoted(typed)} into [{ref}].")

    def press(self, key: Annotated[str, Field(min_length=1, max_length=30)]) -> ToolResult:
        """Press a key on the focused element: Enter, Tab, Backspace, Delete, Escape, Space, ArrowUp, ArrowDown,
        ArrowLeft, ArrowRight, Home, End, PageUp, PageDown, a single character, or a combination such as ctrl+a.

        Args:
            key: The key, e.g. 'Enter' or 'ctrl+a'.
        """
        self.ensure()
        if self.page is None or self.page.done:
            return ToolResult("The task is over.", success=False, terminal=True)
        if parse_key(key) is None:
            return ToolResult(
                f"Unknown key {key[:30]!r}: press Enter, Tab, Backspace, Delete, Escape, Space, an arrow key, Home, "
                "End, PageUp, PageDown, one character, or ctrl/shift/alt+ one of them.",
                success=False,
            )
        self._act("press", {"key": key.strip()})
        return self._result(f"Pressed {key.strip()}.")

    def select(
        self,
        ref: Annotated[int, Field(ge=0)],
        option: Annotated[str, Field(min_length=1, max_length=300)],
    ) -> ToolResult:
        """Choose an option of a drop-down list.

        Args:
            ref: The list's ref, the number in brackets on the page.
            option: The option's text, as the page shows it.
        """
        self.ensure()
        element = self._check_ref(ref, want="list")
        if isinstance(element, str):
            return ToolResult(element, success=False, terminal=self._over())
        wanted = " ".join(option.split())
        index = next((i for i, o in enumerate(element.options) if o == wanted), None)
        if index is None:
            index = next((i for i, o in enumerate(element.options) if o.lower() == wanted.lower()), None)
        if index is None:
            return ToolResult(
                f"[{ref}] has no option {quoted(wanted)}; its options: "
                + " | ".join(quoted(o) for o in element.options[:30]),
                success=False,
            )
        self._act("select", {"ref": ref, "index": index})
        return self._result(f"Selected {quoted(element.options[index])} in [{ref}].")

    def _over(self) -> bool:
        return bool(self.page is not None and self.page.done)

    def state_key(self) -> tuple:
        if self.page is None or self.page.root is None:
            return ("done", self.page.raw_reward if self.page is not None else 0.0)
        return tuple(page_line(e) for e in self.page.elements())

    def close(self) -> None:
        self.browser.close()
        self.loaded = ""

    def __getstate__(self) -> dict[str, Any]:
        return {"browser": self.browser, "step_decay": self.step_decay, "max_page_chars": self.max_page_chars,
                "task": self.task, "actions": list(self.actions), "page": self.page}  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["browser"], state["step_decay"], state["max_page_chars"])
        self.task, self.page = state["task"], state["page"]
        self._replay = list(state["actions"])


TASK_PROMPT = (
    "You are using a web browser. Do the task below by acting on the page with the tools, one action at a "
    "time; each action shows you the page again. Elements are named by the ref in brackets. The task ends when "
    "the page says so.\n\nTask: {utterance}\n\nThe page:\n{page}"
)


class MiniWoBEnv(ToolEnv):
    """MiniWoB++ web tasks in headless Chromium.

    Args:
        task: one MiniWoB task id (e.g. ``"click-button"``); or
        tasks: several (each episode draws one); default :data:`ORACLE_TASKS`.
        split: ``"train"`` (instance seeds below 2**30) or ``"test"`` (held-out instances, seeds from 2**30).
        step_decay: the share of the reward each browser action after the first costs (at most half in all).
        max_page_chars: the longest page text shown.
        browser_timeout_s: the deadline of every browser call (a page that hangs past it is an infrastructure
            error, and the browser restarts).
        screenshots: put a PNG of the task's area (MiniWoB's 160x210 pixels, as a ``data:image/png;base64,`` URI
            of a few kilobytes) in ``info["screenshot"]`` at reset and after every step that leaves the task
            running (an ended task's page is MiniWoB's cover): saved episodes keep it and ``agentr1 view`` draws
            each turn beside the page it saw. Never part of the observation; off by default (a screenshot costs
            a browser call: benchmarks/results/miniwob_env.json).
        Other arguments: :class:`~agentr1_gym.settings.EnvSettings` (default ``max_turns=10``).

    Metrics: ``score`` (the outcome, see the module doc), ``solved`` (MiniWoB's success), ``raw_reward``.
    """

    default_max_turns = 10
    answer_metrics = ("score", "solved", "raw_reward")
    success_metric = "solved"
    final_answer = False
    ordered_calls = True

    def __init__(
        self,
        *,
        task: str | None = None,
        tasks: Sequence[str] | None = None,
        split: str = "train",
        step_decay: float = 0.0,
        max_page_chars: int = 6000,
        browser_timeout_s: float = 15.0,
        screenshots: bool = False,
        **settings: Any,
    ) -> None:
        miniwob_html_dir()  # a one-line error without the package
        if task is not None and tasks is not None:
            raise ConfigError("pass task= (one MiniWoB task) or tasks= (several), not both")
        if isinstance(tasks, str):
            raise ConfigError(f"tasks= takes a list of MiniWoB task ids; for one task pass task={tasks!r}")
        names = (task,) if task is not None else tuple(tasks if tasks is not None else ORACLE_TASKS)
        if not names:
            raise ConfigError("tasks= is empty: name at least one MiniWoB task")
        unknown = [n for n in names if n not in MINIWOB_TASKS]
        if unknown:
            import difflib

            close = difflib.get_close_matches(str(unknown[0]), MINIWOB_TASKS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(
                f"unknown MiniWoB task {unknown[0]!r}{hint}; the tasks are listed in "
                "agentr1_gym.envs.miniwob.MINIWOB_TASKS"
            )
        if split not in ("train", "test"):
            raise ConfigError(f"split must be 'train' or 'test', got {split!r}")
        if not 0 <= step_decay <= 0.5:
            raise ConfigError(f"step_decay must be in [0, 0.5], got {step_decay!r}")
        if max_page_chars < 200:
            raise ConfigError(f"max_page_chars must be >= 200, got {max_page_chars!r}")
        self.task_names = tuple(dict.fromkeys(names))
        self.split = split
        self.screenshots = bool(screenshots)
        self.session = MiniWoBSession(Browser(call_timeout_s=browser_timeout_s), step_decay, max_page_chars)
        s = self.session
        tools = [tool(s.click, errors="raise"), tool(s.type, errors="raise"), tool(s.press, errors="raise"),
                 tool(s.select, errors="raise")]  # fmt: skip
        super().__init__(tools, **settings)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        if self.screenshots:
            info["screenshot"] = self.session.screenshot()
        return obs, info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.screenshots and not self.session._over():  # an ended task's page is MiniWoB's cover
            info["screenshot"] = self.session.screenshot()
        return obs, reward, terminated, truncated, info

    def generate_task(self, rng: np.random.Generator, options: dict[str, Any]) -> MiniWoBTask:
        name = self.task_names[int(rng.integers(len(self.task_names)))]
        seed = int(rng.integers(TEST_SEED_START))
        return MiniWoBTask(name=name, seed=seed + (TEST_SEED_START if self.split == "test" else 0))

    def split_kwargs(self, split: str) -> dict[str, Any]:
        return {"split": split}

    def on_reset(self) -> None:
        self.session.begin(self.task)

    def task_prompt(self, task: MiniWoBTask) -> str:
        page = self.session.page
        return TASK_PROMPT.format(utterance=page.utterance if page else "", page=self.session.render())

    def task_answers(self, task: Any) -> tuple[str, ...]:
        return ()

    def score_answer(self, answer: str | None) -> dict[str, float]:
        return self.session.score()

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        return {}

    def state_key(self) -> tuple:
        return self.session.state_key()

    def state_text(self) -> str:
        """The instruction and the page as it is now: what ``context='state'`` shows instead of the history."""
        page = self.session.page
        return f"Task: {page.utterance if page else ''}\n\nThe page:\n{self.session.render()}"

    @property
    def utterance(self) -> str:
        self._require_task("utterance")
        return self.session.page.utterance if self.session.page else ""

    def oracle_action(self) -> str:
        """The next action of the task's scripted solver (:mod:`agentr1_gym.envs.miniwob_oracles`), read from the
        instruction and the page."""
        self._require_task("oracle_action()")
        call = oracle_call(self.task.name, self.session.page, self.session.actions)
        if call is None:
            raise NoOracleError(
                f"MiniWoB task {self.task.name!r} has no oracle; the tasks with one are ORACLE_TASKS"
            )
        return self.call_text(call[0], **call[1])

    def random_action(self) -> str:
        """A click on a random element of the page (or Enter, when it shows none)."""
        self._require_task("random_action()")
        refs = [e.ref for e in (self.session.page.elements() if self.session.page else []) if e.ref > 0]
        refs = [r for r in refs if r > 1]  # not the page's body
        if not refs:
            return self.call_text("press", key="Enter")
        return self.call_text("click", ref=refs[int(self.np_random.integers(len(refs)))])

    def close(self) -> None:
        self.session.close()
        super().close()
