"""``AgentR1/BFCL-MultiTurn-v0``: BFCL's multi-turn function calling, scored the way BFCL's own checker scores it.

The Berkeley Function Calling Leaderboard (BFCL v4) ships its multi-turn categories in the ``bfcl-eval`` wheel:
200 tasks each of ``base``, ``miss_func``, ``miss_param`` and ``long_context``; their ground-truth call sequences;
the simulated APIs as plain Python classes (a file system, math, messaging, posting, tickets, trading, travel
booking, vehicle control); and the multi-turn checker. A task is a conversation: the user speaks several times
("move the report ...", then "now grep it for ..."), and after each user turn the agent's calls must leave the
world in the state the ground truth leaves it in.

The env plays such a task:

* **Users who speak more than once** (``user_turns``, the env contract's): the agent calls tools; a turn without a
  tool call is its reply, and the next user message follows as a user turn. The episode ends after the last one.
* **Tools** are the functions of the task's involved classes, with schemas from BFCL's own function docs. Calls run
  on the task's own instances, built from its initial config, by calling the methods directly with arguments that
  the function documents (bounded in size; values of another type go in as they are, as in BFCL's harness, and
  the API answers them). Nothing is evaluated from a string: BFCL's harness builds a call string and passes it
  to ``eval``; this env never does. A call with an argument the function does not have, or without a required
  one, is refused before it runs (BFCL's harness would run it into a ``TypeError``). A turn's calls run in the
  order written.
* **Every agent call runs under a deadline and a memory bound** (``call_timeout_s=5``, ``call_memory_mb=512``):
  in the env's worker process (:mod:`agentr1_gym.tools.object_worker`, started at the first call), whose
  changes to the API instance come back and nothing else does. The APIs are plain Python, and arguments inside the bounds can still make a
  method run for minutes (``power(base=10, exponent=30000000)``) or set process-wide state (``square_root(...,
  precision=2)`` sets the thread's ``decimal`` precision, ``logarithm`` sets ``mpmath.mp.dps``): a call past its
  deadline is killed (with its worker, which the next call restarts with the env's own copies), a call past its
  memory fails; both answer BFCL's error text, and no setting leaks into the trainer's process.
  The ground truth's own calls run in-process with ``decimal`` and ``mpmath`` restored after each.
* **The outcome** is BFCL's verdict, computed as its ``multi_turn_checker`` computes it: after each user turn with
  ground-truth calls, the turn must have calls, every involved instance's public state must equal the ground
  truth's, and the ground truth's results for the turn must all be among the agent's results so far. A task is
  solved when every turn passes. The tests check that the verdicts equal the checker's, called directly, on
  the ground truth and on mutated ground truths, for every category.
* **Process rewards** (small): ``bfcl_turn`` for each user turn the checker passes while every earlier one
  passed, and ``bfcl_call`` for a ground-truth call of the current user turn made for the first time. A call
  that is not in the ground truth earns nothing, since paying any call that runs without an error would pay for
  calling every function.
* **miss_func**: the held-back functions are missing from the tools until the turn BFCL adds them, whose user
  message is BFCL's own ("I have updated some more functions ...") with the new functions listed.
  **miss_param**: a request lacks a parameter, the ground truth for that turn is empty, and the next user turn
  gives the parameter. The agent should ask, since calls made in such a turn still change the state.
* ``split="train"|"test"``: a fixed, seeded split of the category (a fifth held out). BFCL is an evaluation set,
  so a model trained on its train part is not a leaderboard entry. ``split="all"`` (the default) is the whole
  category, as BFCL reports it.

Install: ``pip install --no-deps bfcl-eval==2026.3.23 mpmath``. The ``--no-deps`` matters: ``bfcl-eval`` pins
its own stack (model SDKs, a ``numpy`` and a ``transformers`` of its own), and this env needs only its data, its
API classes and their one dependency, ``mpmath``.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib
import inspect
import json
import math
from functools import cache
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from agentr1_gym.env import ToolEnv
from agentr1_gym.errors import ConfigError, MissingDependencyError
from agentr1_gym.formats import ToolCall
from agentr1_gym.rewards import ProcessReward
from agentr1_gym.tools.base import Tool, ToolResult
from agentr1_gym.tools.object_worker import (
    CallFailed,
    CallTimedOut,
    ObjectWorker,
    numeric_state_kept,
    value_text,
)

__all__ = ["CATEGORIES", "BFCLMultiTurnEnv", "ground_truth_calls", "load_tasks"]

CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
#: the bounds a call's arguments must keep (the APIs are plain Python: an unbounded argument could make one call
#: run for minutes)
MAX_STRING, MAX_ITEMS, MAX_NUMBER = 20_000, 1_000, 1e12
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
REPLY_HINT = (
    "When you have done what the user asked, or need more information from them, reply in plain text without a "
    "tool call; the user then speaks again."
)


def require_bfcl() -> None:
    if importlib.util.find_spec("bfcl_eval") is None:
        raise MissingDependencyError(
            "bfcl-eval",
            "bfcl",
            "AgentR1/BFCL-MultiTurn-v0 (install it without its dependencies: "
            "`pip install --no-deps bfcl-eval==2026.3.23 mpmath`)",
        )


def _constants() -> Any:
    from bfcl_eval.constants import executable_backend_config

    return executable_backend_config


@cache
def _class(name: str) -> type:
    return getattr(importlib.import_module(_constants().CLASS_FILE_PATH_MAPPING[name]), name)


def _read_jsonl(*parts: str) -> list[dict[str, Any]]:
    from importlib import resources

    path = resources.files("bfcl_eval").joinpath("data", *parts)
    return [json.loads(line) for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


@cache
def func_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """BFCL's function docs of one API class."""
    return tuple(
        _read_jsonl("multi_turn_func_doc", _constants().MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name])
    )


def ground_truth_calls(text: str) -> tuple[str, dict[str, Any]]:
    """One ground-truth call string (``"mv(source='a', destination='b')"``) as ``(name, keyword arguments)``, read
    with :mod:`ast` (literals only; positional arguments named by the method's signature). Nothing is evaluated."""
    node = ast.parse(text, mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {text!r}")
    name = node.func.id
    kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None}
    if node.args:
        owner = next(c for c in _constants().MULTI_TURN_FUNC_DOC_FILE_MAPPING if _has(c, name))
        params = [p for p in inspect.signature(getattr(_class(owner), name)).parameters if p != "self"]
        for param, arg in zip(params, node.args):
            kwargs[param] = ast.literal_eval(arg)
    return name, kwargs


def _has(class_name: str, method: str) -> bool:
    try:
        return any(d["name"] == method for d in func_docs(class_name))
    except (KeyError, FileNotFoundError):
        return False


@cache
def load_tasks(category: str) -> tuple[dict[str, Any], ...]:
    """The tasks of one multi-turn category, each with its ground truth: ``ground_truth`` (BFCL's call strings,
    per user turn) and ``calls`` (the same as ``(name, kwargs)``)."""
    require_bfcl()
    if category not in CATEGORIES:
        raise ConfigError(f"category must be one of {', '.join(CATEGORIES)}, got {category!r}")
    entries = _read_jsonl(f"BFCL_v4_multi_turn_{category}.json")
    truth = {
        row["id"]: row["ground_truth"]
        for row in _read_jsonl("possible_answer", f"BFCL_v4_multi_turn_{category}.json")
    }
    out = []
    for entry in entries:
        gt = truth[entry["id"]]
        out.append(
            {**entry, "ground_truth": gt, "calls": [[ground_truth_calls(c) for c in turn] for turn in gt]}
        )
    return tuple(out)


def _parameters(schema: Any) -> Any:
    """BFCL's parameter schema in JSON Schema's words (``dict`` -> ``object``, ``float`` -> ``number``)."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "type":
            mapped = _TYPES.get(value, value)
            if mapped is not None:
                out[key] = mapped
        elif key == "properties":
            out[key] = {name: _parameters(prop) for name, prop in value.items()}
        elif key == "items":
            out[key] = _parameters(value)
        elif key != "response":
            out[key] = value
    return out


def _bound_error(value: Any, where: str) -> str | None:
    """Why ``value`` is outside the bounds a call's arguments keep (None when it is inside). Types are not
    checked: BFCL's harness passes the model's values as they are (its own ground truth passes a string where a
    doc says integer), and the APIs answer a wrong type with an error of their own."""
    if isinstance(value, str) and len(value) > MAX_STRING:
        return f"{where}: longer than {MAX_STRING} characters"
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if number and ((isinstance(value, float) and not math.isfinite(value)) or abs(value) > MAX_NUMBER):
        return f"{where}: outside +-{MAX_NUMBER:g}"
    if isinstance(value, (list, dict)):
        if len(value) > MAX_ITEMS:
            return f"{where}: more than {MAX_ITEMS} items"
        items = value.values() if isinstance(value, dict) else value
        return next((p for v in items if (p := _bound_error(v, where)) is not None), None)
    return None


class _Args(BaseModel):
    """A BFCL call's arguments, as given (checked against the function's doc)."""

    model_config = ConfigDict(extra="allow")


def _refuse(name: str, problems: list[str]) -> ValidationError:
    return ValidationError.from_exception_data(
        name,
        [
            {"type": "value_error", "loc": ("arguments",), "input": "...", "ctx": {"error": p}}
            for p in problems[:5]
        ],
    )


class BFCLFunction(Tool):
    """One function of a BFCL API class, run on the env's instance of that class."""

    Args = _Args

    def __init__(self, doc: dict[str, Any], env: BFCLMultiTurnEnv) -> None:
        self.name = doc["name"]  # type: ignore[misc]
        self.description = doc["description"]  # type: ignore[misc]
        self.params = doc.get("parameters", {}) or {}
        self.env = env
        self._schema = {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _parameters(self.params),
            },
        }

    def schema_view(self) -> dict[str, Any]:
        return self._schema

    def validate(self, arguments: dict[str, Any]) -> BaseModel:
        props = self.params.get("properties", {}) or {}
        problems = [f"unknown argument {k!r}" for k in arguments if k not in props]
        problems += [
            f"missing required argument {k!r}" for k in self.params.get("required", []) if k not in arguments
        ]
        problems += [p for key, value in arguments.items() if (p := _bound_error(value, key)) is not None]
        if problems:
            raise _refuse(self.name, problems)
        return _Args(**arguments)

    def execute(self, args: BaseModel) -> ToolResult:
        return self.env.run_function(self.name, dict(args.model_extra or {}))


def _instances(entry: dict[str, Any], long_context: bool) -> dict[str, Any]:
    """The task's API instances, built from its initial config as BFCL builds them."""
    stateless = set(_constants().STATELESS_CLASSES)
    out = {}
    for name in entry["involved_classes"]:
        instance = _class(name)()
        if name not in stateless:
            instance._load_scenario(
                copy.deepcopy(entry["initial_config"].get(name, {})), long_context=long_context
            )
        out[name] = instance
    return out


def _public_state(instance: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


def _canonical(value: Any) -> Any:
    """``value`` with every dict key a type-tagged string and every set sorted, so that ``json.dumps(...,
    sort_keys=True)`` is total and the same state gives the same text in any env. BFCL's worlds mix key types in
    one dict (TradingBot's ``orders``: int order ids beside str keys), which sorting alone cannot order."""
    if isinstance(value, dict):
        return {f"{type(k).__name__}:{k}": _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(json.dumps(_canonical(v), sort_keys=True, default=str) for v in value)
    return value


def _same_state(model: dict[str, Any], truth: dict[str, Any]) -> bool:
    """BFCL's state check: every public attribute of every ground-truth instance equals the model's."""
    for name, gt in truth.items():
        mine = model[name]
        if any(not k.startswith("_") and getattr(mine, k) != v for k, v in vars(gt).items()):
            return False
    return True


def _contains_all(results: list[str], needed: list[str]) -> bool:
    """BFCL's response check: every ground-truth result is among the model's results so far (as a multiset)."""
    pool = list(results)
    for item in needed:
        try:
            pool.remove(item)
        except ValueError:
            return False
    return True


class BFCLMultiTurnEnv(ToolEnv):
    """BFCL's multi-turn categories (see the module docstring).

    Args:
        category: ``"base"``, ``"miss_func"``, ``"miss_param"`` or ``"long_context"``.
        split: ``"all"`` (BFCL's whole category, the default), ``"train"`` or ``"test"`` (a fixed fifth).
        call_timeout_s: the deadline of one agent call (default 5 s; BFCL's calls take milliseconds). A call past
            it is killed and answers ``"Error during execution: ... did not finish within 5 s"``, the world
            unchanged.
        call_memory_mb: the memory one agent call may add (default 512 MB); past it the call fails the same way.
        **settings: the env settings (``max_turns`` defaults to 60 assistant turns over the whole conversation,
            ``max_calls_per_turn`` to 8).
    """

    default_max_turns = 60  # assistant turns over the whole conversation

    process_rewards: ClassVar[tuple[ProcessReward, ...]] = (
        ProcessReward(
            "bfcl_turn",
            0.2,
            "each user turn BFCL's checker passes, while every earlier one passed (all turns' units add up to 1)",
        ),
        ProcessReward(
            "bfcl_call",
            0.1,
            "a ground-truth call of the current user turn, made for the first time (all of them add up to 1)",
        ),
    )
    answer_metrics: ClassVar[tuple[str, ...]] = ("verdict",)
    success_metric: ClassVar[str] = "verdict"
    user_turns: ClassVar[bool] = True
    ordered_calls: ClassVar[bool] = True
    final_answer: ClassVar[bool] = False
    reset_options: ClassVar[tuple[str, ...]] = ()
    process_local: ClassVar[tuple[str, ...]] = ("_worker",)

    def __init__(
        self,
        category: str = "base",
        split: str = "all",
        call_timeout_s: float = 5.0,
        call_memory_mb: float = 512.0,
        **settings: Any,
    ) -> None:
        require_bfcl()
        if split not in ("all", "train", "test"):
            raise ConfigError(f"split must be 'all', 'train' or 'test', got {split!r}")
        for label, value in (("call_timeout_s", call_timeout_s), ("call_memory_mb", call_memory_mb)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
                raise ConfigError(f"{label} must be a positive number, got {value!r}")
        self.call_timeout_s = float(call_timeout_s)
        self.call_memory_mb = float(call_memory_mb)
        self.category = category
        self.split = split
        self.tasks = load_tasks(category)
        settings.setdefault("max_calls_per_turn", 8)
        settings.setdefault("task_split", split)
        settings.setdefault("test_fraction", 0.2)
        self._all_tools: dict[str, BFCLFunction] = {}
        for class_name in sorted({c for t in self.tasks for c in t["involved_classes"]}):
            for doc in func_docs(class_name):
                self._all_tools[doc["name"]] = BFCLFunction(doc, self)
        self._owner = {
            d["name"]: c for c in {c for t in self.tasks for c in t["involved_classes"]} for d in func_docs(c)
        }
        super().__init__(list(self._all_tools.values()), **settings)
        if self.tool_format.name != "hermes":
            raise ConfigError(
                f"AgentR1/BFCL-MultiTurn-v0 needs tool_format='hermes': BFCL's functions take several arguments, "
                f"which {self.tool_format.name!r} cannot write"
            )
        self._reset_episode()
        self.open_resources()

    def open_resources(self) -> None:
        self._worker: ObjectWorker | None = None  # started at the first agent call

    def close_resources(self) -> None:
        if getattr(self, "_worker", None) is not None:
            self._worker.close()
            self._worker = None

    def _reset_episode(self) -> None:
        self._episode_token = object()  # the worker reloads the API instances once per episode
        self.model: dict[str, Any] = {}
        self.truth: dict[str, Any] = {}
        self.user_turn = 0
        self.attempted: list[list[ToolCall]] = []
        self.results: list[str] = []
        self.turn_passed: list[bool] = []
        self.failed_turn: int | None = None
        self._paid_calls: set[int] = set()
        self.held: set[str] = set()

    def split_kwargs(self, split: str) -> dict[str, Any]:
        return {"split": split}

    # ---- an episode ---------------------------------------------------------------------------------------
    def on_reset(self) -> None:
        self._reset_episode()
        entry = self.task
        long_context = "long_context" in entry["id"]
        self.model = _instances(entry, long_context)
        self.truth = _instances(entry, long_context)
        self.attempted = [[] for _ in entry["question"]]
        # held-back functions stay callable (as in BFCL's harness, which runs any method of the instances) but are
        # not listed until the turn that adds them
        self.held = {name for names in entry.get("missed_function", {}).values() for name in names}
        self.tools = {
            d["name"]: self._all_tools[d["name"]] for c in entry["involved_classes"] for d in func_docs(c)
        }
        self._list_tools()

    def listed_tools(self) -> list[Tool]:
        return [tool for name, tool in self.tools.items() if name not in self.held]

    def _list_tools(self) -> None:
        self._tool_schemas = [copy.deepcopy(tool.schema_view()) for tool in self.listed_tools()]

    def task_prompt(self, task: Any) -> str:
        return f"{REPLY_HINT}\n\n{self._user_text(0)}"

    def _user_text(self, turn: int) -> str:
        return "\n\n".join(str(m.get("content", "")) for m in self.task["question"][turn])

    def run_function(self, name: str, arguments: dict[str, Any]) -> ToolResult:
        """Run one validated call on the agent's instance of its class, as BFCL's harness runs it (an exception
        becomes BFCL's ``"Error during execution: ..."`` text); the full result is kept for the checker."""
        owner = self._owner[name]
        instance = self.model[owner]
        worker = self._worker
        if worker is None:
            worker = self._worker = ObjectWorker(self.call_timeout_s, self.call_memory_mb)
        worker.load(self.model, self._episode_token)
        state, failed = None, True
        try:  # in the env's worker process (the arguments are pickled there: a copy), under its deadline and
            # memory bound; the instance's state comes back
            text, state = worker.call(owner, name, arguments, text=True)
            failed = False
        except CallTimedOut:
            text = f"Error during execution: {name} did not finish within {self.call_timeout_s:g} s"
        except CallFailed as exc:  # the API's own failure (BFCL's text for it), or out of memory
            text, state = f"Error during execution: {exc}", exc.state
        if state is not None:
            vars(instance).clear()
            vars(instance).update(state)
        self.results.append(text)
        logical_error = text.startswith("{") and '"error"' in text[:20]
        return ToolResult(text, success=not (failed or logical_error))

    def on_tool_calls(self, calls: Any) -> None:
        if self.user_turn < len(self.attempted):
            self.attempted[self.user_turn].extend(calls)

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        gt = self.task["calls"][self.user_turn] if self.user_turn < len(self.task["calls"]) else []
        offset = sum(len(t) for t in self.task["calls"][: self.user_turn])
        for j, (name, args) in enumerate(gt):
            if offset + j not in self._paid_calls and name == call.name and args == call.arguments:
                self._paid_calls.add(offset + j)
                return {"bfcl_call": 1.0 / max(1, self._gt_call_count())}
        return {}

    def _gt_call_count(self) -> int:
        return sum(len(t) for t in self.task["calls"])

    def process_reward_caps(self) -> dict[str, float]:
        return {"bfcl_turn": 1.0, "bfcl_call": 1.0}

    def user_turn_units(self, reply: str) -> dict[str, float]:
        """BFCL's checks for the user turn the reply ends (the ground truth's calls for it run now, on the ground
        truth's own instances)."""
        t = self.user_turn
        if t >= len(self.task["calls"]):
            return {}
        gt = self.task["calls"][t]
        truth_results = []
        for name, args in gt:
            instance = self.truth[self._owner[name]]
            try:  # BFCL's own calls: trusted, in-process, but their decimal/mpmath settings do not leak
                with numeric_state_kept():
                    truth_results.append(value_text(getattr(instance, name)(**copy.deepcopy(args))))
            except Exception as exc:
                truth_results.append(f"Error during execution: {exc}")
        passed = True
        if gt:
            passed = (
                bool(self.attempted[t])
                and _same_state(self.model, self.truth)
                and _contains_all(self.results, truth_results)
            )
        self.turn_passed.append(passed)
        if not passed and self.failed_turn is None:
            self.failed_turn = t
        self.user_turn += 1
        checked = sum(1 for turn in self.task["calls"] if turn)
        if gt and passed and self.failed_turn is None:
            return {"bfcl_turn": 1.0 / max(1, checked)}
        return {}

    def next_user_message(self) -> str | None:
        t = self.user_turn
        if t >= len(self.task["question"]):
            return None
        added = self.task.get("missed_function", {}).get(str(t))
        if not added:
            return self._user_text(t)
        from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

        self.held -= set(added)
        self._list_tools()
        listing = "\n".join(json.dumps(self._all_tools[n].schema_view()["function"]) for n in added)
        return f"{DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}\n\nNew functions:\n{listing}"

    def score_answer(self, answer: str | None) -> dict[str, float]:
        """BFCL's verdict: every user turn was reached and passed (an episode cut short is invalid, as BFCL
        scores a conversation its model did not finish)."""
        finished = self.user_turn >= len(self.task["question"])
        verdict = finished and self.failed_turn is None
        checked = [p for p, turn in zip(self.turn_passed, self.task["calls"]) if turn]
        return {
            "verdict": float(verdict),
            "turns_passed": (sum(checked) / len(checked)) if checked else float(verdict),
        }

    def state_key(self) -> str:
        state = {name: _canonical(_public_state(inst)) for name, inst in self.model.items()}
        blob = json.dumps([self.user_turn, state], sort_keys=True, default=str)
        return hashlib.sha1(blob.encode()).hexdigest()

    # ---- the oracle: the ground truth, turn by turn -------------------------------------------------------
    def oracle_action(self) -> str:
        self._require_task("oracle_action()")
        t = self.user_turn
        gt = self.task["calls"][t] if t < len(self.task["calls"]) else []
        done = len(self.attempted[t]) if t < len(self.attempted) else 0
        todo = gt[done : done + self.max_calls_per_turn]
        if todo:
            return "\n".join(self.tool_format.format_call(ToolCall(name=n, arguments=a)) for n, a in todo)
        return "Done." if gt else "Could you tell me the missing detail, please?"

    def max_episode_reward(self) -> float:
        self._require_task("max_episode_reward()")
        return super().max_episode_reward()
