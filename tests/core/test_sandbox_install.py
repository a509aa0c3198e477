"""A regular (non-editable) install, as users get from ``pip install agentr1-gym``: the bundled HumanEval file
(reference solutions and hidden tests) lies under site-packages, inside the Python installation the sandbox
mounts into every run. Before reliability round 3 one generic answer that found that file through ``sys.path``
and ran its own task's reference solution passed 158 of 164 tasks. The editable install the other tests use hides
this (its data is in the source tree, which runs never see), and so does a venv under /tmp (runs get their own
/tmp): this test installs into a venv under /var/tmp.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from _paths import REPO

pytestmark = pytest.mark.interpreter  # CI runs these again from a virtualenv

#: an answer a policy could give for any task: find the bundled file, run the task's reference solution
EXPLOIT = """```python
import gzip, json, os, sys

def _reference(entry):
    for root in sys.path:
        path = os.path.join(root, "agentr1_gym", "data", "bundled", "human_eval_164.jsonl.gz")
        if os.path.exists(path):
            for line in gzip.open(path, "rt"):
                task = json.loads(line)
                if task["entry_point"] == entry:
                    ns = {}
                    exec(task["prompt"] + task["canonical_solution"], ns)
                    return ns[entry]
    raise FileNotFoundError("no bundled HumanEval file in " + repr(sys.path))

def ENTRY(*args, **kwargs):
    return _reference("ENTRY")(*args, **kwargs)
```"""

PROBE = r"""
import json, os, sys
import gymnasium as gym
import agentr1_gym

env = gym.make("AgentR1/HumanEval-v0", max_turns=3).unwrapped
out = {"package": agentr1_gym.__file__, "passed": 0, "tasks": 0}
exploit = json.loads(sys.argv[1])
for i in range(int(sys.argv[2])):
    env.reset(options={"task_index": i})
    entry = env.task.entry_point
    answer = exploit.replace("ENTRY", entry)
    _, _, _, _, info = env.step(env.answer_text(answer))
    out["passed"] += int(info["metrics"]["pass"])
    out["tasks"] += 1
# what a run sees of the installed package and of site-packages
site = os.path.dirname(os.path.dirname(agentr1_gym.__file__))
seen = env.sandbox.run(f"import os\nprint(os.path.exists({agentr1_gym.__file__!r}), os.listdir({site!r}))")
out["run_sees"] = seen.stdout.strip()
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def installed_python():
    """A venv under /var/tmp (not shadowed by runs' /tmp) with this project installed the way a wheel installs:
    its packages unpacked under the venv's site-packages, with their dist-info (copied, so that the test needs no
    build backend in the environment under test: a fresh venv's setuptools cannot build a wheel without the
    ``wheel`` package). The venv sees the running environment's packages (gymnasium, numpy, ...) through a
    ``.pth`` file naming its site-packages, which works whether the tests run in the system Python or in a venv
    (``--system-site-packages`` would inherit the base interpreter's packages, not a venv's)."""
    import site
    import sysconfig

    base = Path(tempfile.mkdtemp(prefix="agentr1-install-", dir="/var/tmp"))
    try:
        venv = base / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        python = venv / "bin" / "python"
        target = Path(
            subprocess.run(
                [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True, text=True, check=True,
            ).stdout.strip()
        )  # fmt: skip
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        shutil.copytree(REPO / "agentr1_gym", target / "agentr1_gym", ignore=ignore)
        for package in ("trl", "skyrl", "verl", "verifiers"):
            shutil.copytree(
                REPO / "adapters" / package / f"agentr1_{package}",
                target / f"agentr1_{package}",
                ignore=ignore,
            )
        info = target / "agentr1_gym-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text("Metadata-Version: 2.1\nName: agentr1-gym\nVersion: 0.1.0\n")
        (info / "INSTALLER").write_text("tests\n")
        outer = [p for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"]) if Path(p).is_dir()]
        (target / "outer-env.pth").write_text("\n".join(dict.fromkeys(outer)) + "\n")
        yield python
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.slow
def test_a_regular_install_does_not_expose_hidden_tests_to_answers(installed_python):
    done = subprocess.run(
        [str(installed_python), "-c", PROBE, json.dumps(EXPLOIT), "164"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",  # not the source tree: the installed copy is imported
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "/site-packages/agentr1_gym/" in out["package"], out  # the wheel's copy, not the source tree
    assert out["tasks"] == 164 and out["passed"] == 0, out
    assert out["run_sees"] == "False []", out
