"""Where a test finds the repository and the tests' shared files, from any folder under tests/."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent  # tests/: the shared helpers (_*.py), data/ and scripts/
REPO = TESTS.parent
DATA = TESTS / "data"  # small official-layout excerpts (tests/data/README.md)
SCRIPTS = TESTS / "scripts"
