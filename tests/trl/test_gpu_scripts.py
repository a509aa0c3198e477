"""scripts/gpu_model.sh carries a file too large for one device call in parts: split here, kept part by part on the
warm machine, joined and checked there. Run on a small file in a copy of the script's folder (no GPU needed)."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(shutil.which("xz") is None, reason="xz is not installed")


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    """A folder laid out like the checkout (scripts/gpu_model.sh), so the script's parts land in it."""
    (tmp_path / "repo" / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "gpu_model.sh", tmp_path / "repo" / "scripts")
    return tmp_path / "repo"


def gpu_model(repo: Path, keep: Path, source: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "GPU_MODEL_FILE": str(source), "GPU_MODEL_KEEP": str(keep)}
    return subprocess.run(
        ["bash", str(repo / "scripts" / "gpu_model.sh"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_file_split_in_three_parts_is_joined_byte_for_byte(repo: Path, tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    source.write_bytes(random.Random(0).randbytes(3 * 1048576 + 12345))  # incompressible: three parts
    keep = tmp_path / "keep"
    assert gpu_model(repo, keep, source, "split", "1", "1").returncode == 0
    sizes = [(repo / f".gm{k}" / "part").stat().st_size for k in (1, 2, 3)]
    assert sizes[:2] == [1048576, 1048576] and sizes[2] > 1048576
    assert not (repo / ".gm4").exists() and not (repo / ".gm-all").exists()

    # the last part alone, or the first without the second, cannot be joined: the error names the missing part
    missing = gpu_model(repo, keep, source, "join", ".gm3")
    assert missing.returncode == 1 and "part 1 is not kept" in missing.stderr
    assert gpu_model(repo, keep, source, "keep", ".gm1").returncode == 0
    assert gpu_model(repo, keep, source, "keep", ".gm1").returncode == 0  # kept again: replaced, not appended
    missing = gpu_model(repo, keep, source, "join", ".gm3")
    assert missing.returncode == 1 and "part 2 is not kept" in missing.stderr

    assert gpu_model(repo, keep, source, "keep", ".gm2").returncode == 0
    joined = gpu_model(repo, keep, source, "join", ".gm3")
    assert joined.returncode == 0, joined.stderr
    assert Path(joined.stdout.strip()) == keep / "model.gguf"
    assert (keep / "model.gguf").read_bytes() == source.read_bytes()


def test_a_part_from_another_split_is_refused(repo: Path, tmp_path: Path) -> None:
    source = tmp_path / "model.gguf"
    source.write_bytes(random.Random(1).randbytes(2 * 1048576))
    keep = tmp_path / "keep"
    assert gpu_model(repo, keep, source, "split", "1").returncode == 0
    assert gpu_model(repo, keep, source, "keep", ".gm1").returncode == 0
    last = repo / ".gm2" / "part"
    data = bytearray(last.read_bytes())
    data[-100] ^= 0xFF  # a part damaged (or from another file's split)
    last.write_bytes(bytes(data))
    joined = gpu_model(repo, keep, source, "join", ".gm2")
    assert joined.returncode != 0
    assert not (keep / "model.gguf").exists()


def test_split_without_sizes_is_a_usage_error(repo: Path, tmp_path: Path) -> None:
    out = gpu_model(repo, tmp_path / "keep", tmp_path / "none", "split")
    assert out.returncode == 2 and "usage" in out.stderr
