"""`agentr1 train` end to end on the tiny model (2 steps): adapter, metrics and reward-curve PNG."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("trl")

from agentr1_trl.testing import tiny_model, tiny_tokenizer

from agentr1_gym.cli import main


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    tok = tiny_tokenizer()
    tiny_model(tok).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_train_writes_adapter_metrics_and_png(tmp_path, tiny_dir, algo):
    config = tmp_path / "config.yaml"
    config.write_text(f"algo: {algo}\nper_device_train_batch_size: 2\nnum_generations: 2\nuse_cpu: true\n")
    out = tmp_path / "run"
    code = main(
        [
            "train",
            "--model",
            tiny_dir,
            "--config",
            str(config),
            "--max-steps",
            "2",
            "--lora-r",
            "2",
            "--set",
            "max_new_tokens_per_turn=8",
            "--set",
            "max_episode_tokens=1536",
            "--output-dir",
            str(out),
        ]
    )
    assert code == 0
    assert (out / "adapter" / "adapter_config.json").exists()
    assert (out / "reward_curve.png").stat().st_size > 1000
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert sum("reward" in r for r in rows) == 2
    if algo == "ppo":
        assert (out / "adapter" / "value_head.pt").exists()


def test_train_rejects_bad_fields(tmp_path, tiny_dir, capsys):
    assert (
        main(["train", "--model", tiny_dir, "--set", "no_such_field=1", "--output-dir", str(tmp_path)]) == 2
    )
    assert "bad config field" in capsys.readouterr().err
