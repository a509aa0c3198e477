"""`import agentr1_gym` stays light: no torch/transformers/trl/pyserini."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.interpreter  # CI runs these again from a virtualenv


def test_import_is_light():
    code = (
        "import sys, gymnasium as gym, agentr1_gym; env = gym.make('AgentR1/HotpotQA-v0'); env.reset(seed=0); "
        # the token layer and the generation protocol, which other engines' adapters use, are light too
        "import agentr1_gym.rollout, agentr1_gym.generation; "
        "import json; print(json.dumps(sorted(m for m in ('torch', 'transformers', 'trl', 'pyserini', 'peft', 'vllm', 'faiss') if m in sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_py_typed_is_shipped():
    from importlib import resources

    assert (resources.files("agentr1_gym") / "py.typed").is_file()
