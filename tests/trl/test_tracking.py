"""``report_to`` with TensorBoard and trackio (TRL's local tracker): a short run's env and learning metrics reach
both, offline."""

from __future__ import annotations

import glob
import json
import os
import sqlite3

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from test_viewer import _train


@pytest.mark.slow
def test_tensorboard_gets_the_env_and_learning_metrics(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _train(tmp_path, max_steps=2, report_to=["tensorboard"])
    events = [
        r
        for r in glob.glob(str(tmp_path / "runs" / "*"))
        if glob.glob(os.path.join(r, "events.out.tfevents.*"))
    ]
    assert events, f"no TensorBoard event file under {tmp_path}"
    acc = EventAccumulator(events[0])
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"train/env/success", "train/env/return", "train/loss", "train/time/rollout_s"} <= tags
    assert [e.step for e in acc.Scalars("train/env/return")] == [1, 2]


@pytest.mark.slow
def test_trackio_gets_the_env_and_learning_metrics(tmp_path):
    pytest.importorskip("trackio")
    store = os.environ["TRACKIO_DIR"]  # conftest: a fresh directory for this test session
    (tmp_path / "run").mkdir()
    _train(tmp_path / "run", max_steps=2, report_to=["trackio"], project="agentr1-test", run_name="tiny")
    dbs = glob.glob(os.path.join(store, "agentr1-test.db"))
    assert dbs, f"trackio wrote no local database for the project under {store}"
    with sqlite3.connect(dbs[0]) as db:
        rows = db.execute("select run_name, step, metrics from metrics").fetchall()
    logged = {}
    for run_name, step, metrics in rows:
        assert run_name == "tiny"
        for key, value in json.loads(metrics).items():
            logged.setdefault(key, {})[step] = value
    assert {"train/env/success", "train/env/return", "train/loss"} <= set(logged)
    assert sorted(logged["train/env/return"]) == [1, 2]
