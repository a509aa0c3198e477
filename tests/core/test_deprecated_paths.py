"""Renamed modules keep their old import paths for one release (agentr1_trl.generation until 0.3), with a DeprecationWarning that names the new one."""

from __future__ import annotations

import subprocess
import sys

import pytest

RENAMED = [
    (
        "agentr1_trl.generation",
        "agentr1_trl.backends",
        ["HFGenerator", "ScriptedGenerator", "ValueGuidedGenerator"],
    ),
    ("agentr1_trl.generation.vllm", "agentr1_trl.backends.vllm", ["VLLMGenerator"]),
    ("agentr1_trl.generation.factory", "agentr1_trl.backends.factory", ["make_generator"]),
    ("agentr1_trl.runs", "agentr1_trl.run_dir", ["read_run_file", "write_run_file", "IDENTITY"]),
    ("agentr1_trl.checkpoints", "agentr1_trl.run_dir", ["resolve_resume", "COMPLETE_MARKER"]),
    ("agentr1_trl.run_outputs", "agentr1_trl.run_report", ["model_card", "closing_lines"]),
]


@pytest.mark.slow
@pytest.mark.parametrize(("old", "new", "names"), RENAMED)
def test_an_old_path_warns_and_gives_the_same_objects(old, new, names):
    if old.startswith("agentr1_trl"):
        pytest.importorskip("trl")
    code = (  # the warning names both paths and points at the importing line
        "import importlib, sys, warnings\n"
        "with warnings.catch_warnings(record=True) as seen:\n"
        "    warnings.simplefilter('always')\n"
        f"    import {old}\n"
        f"old, new = sys.modules[{old!r}], importlib.import_module({new!r})\n"
        "hits = [w for w in seen if issubclass(w.category, DeprecationWarning) and ' is renamed ' in str(w.message)]\n"
        f"assert any({old!r} in str(w.message) and {new!r} in str(w.message) for w in hits), hits\n"
        "assert hits and all((w.filename, w.lineno) == ('<string>', 4) for w in hits), hits\n"
        f"assert all(getattr(old, n) is getattr(new, n) for n in {names!r})\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, timeout=300)
