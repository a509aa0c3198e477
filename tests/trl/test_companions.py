"""The companion guard: a torch companion package that cannot load is hidden in this process and in every Python
process started from it (vLLM imports transformers in a subprocess to inspect a model's class)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest
from _paths import REPO

pytestmark = pytest.mark.interpreter  # CI runs these again from a virtualenv

_PATH = REPO / "adapters" / "trl" / "agentr1_trl" / "_companions.py"


@pytest.fixture
def companions(monkeypatch, tmp_path):
    """The guard module (loaded by path, as conftest does), a broken package ``brokencompanion`` on the path of
    this process and its children, and a clean slate of the environment variables the guard sets."""
    spec = importlib.util.spec_from_file_location("_companions_under_test", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pkg = tmp_path / "pkgs" / "brokencompanion"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('operator brokencompanion::nms does not exist')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "pkgs"))
    monkeypatch.delenv("AGENTR1_HIDDEN_COMPANIONS", raising=False)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "pkgs"))
    monkeypatch.delitem(sys.modules, "brokencompanion", raising=False)
    yield module
    sys.modules.pop("brokencompanion", None)


def _child(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )


def test_a_child_process_sees_the_broken_companion_as_absent(companions):
    check = """
        import importlib.util
        try:
            import brokencompanion
        except ImportError:
            print("absent", importlib.util.find_spec("brokencompanion"))
    """
    before = _child(check)
    assert before.returncode != 0 and "RuntimeError" in before.stderr  # what vLLM's subprocess hit
    assert companions.hide_broken_companions(("brokencompanion",)) == ["brokencompanion"]
    with pytest.raises(ImportError):
        import brokencompanion  # noqa: F401
    after = _child(check)
    assert after.returncode == 0, after.stderr
    assert after.stdout.strip() == "absent None"  # what transformers' availability checks ask


def test_a_companion_that_loads_is_left_alone_and_nothing_reaches_children(companions, tmp_path, monkeypatch):
    good = tmp_path / "pkgs" / "goodcompanion"
    good.mkdir()
    (good / "__init__.py").write_text("VALUE = 7\n")
    monkeypatch.delitem(sys.modules, "goodcompanion", raising=False)
    assert companions.hide_broken_companions(("goodcompanion",)) == []
    assert sys.modules["goodcompanion"].VALUE == 7
    import os

    assert "AGENTR1_HIDDEN_COMPANIONS" not in os.environ
    assert companions.SITE_DIR not in os.environ["PYTHONPATH"]


def test_the_users_own_sitecustomize_still_runs(companions, tmp_path, monkeypatch):
    """The guard's sitecustomize comes first on PYTHONPATH, and runs the one it shadows."""
    own = tmp_path / "own"
    own.mkdir()
    (own / "sitecustomize.py").write_text("import builtins\nbuiltins.USER_SITECUSTOMIZE_RAN = True\n")
    monkeypatch.setenv("PYTHONPATH", f"{own}:{tmp_path / 'pkgs'}")
    companions.hide_broken_companions(("brokencompanion",))
    result = _child(
        """
        import builtins, sys
        assert sys.modules["brokencompanion"] is None
        print(getattr(builtins, "USER_SITECUSTOMIZE_RAN", False))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "True"
