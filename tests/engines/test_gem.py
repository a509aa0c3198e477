"""GEM: our envs through the glue in examples/engines/agentr1_gem.py, played by GEM's own ``make_vec`` vector env
(its constructor seeds, positional resets and same-step autoreset). gem-llm pins its own stack, so these tests run
in their own virtualenv (.ci/run makes it: ``.venv-gem``); in the main environment they skip."""

from __future__ import annotations

import runpy

import pytest
from _paths import REPO

gem = pytest.importorskip("gem")

from _engines import ENGINE_ENVS  # noqa: E402

from agentr1_gym.evaluation import evaluate  # noqa: E402

GLUE = runpy.run_path(str(REPO / "examples" / "engines" / "agentr1_gem.py"))


@pytest.mark.parametrize("env_id", ENGINE_ENVS)
def test_oracle_through_gem_vector_env_matches_our_evaluator(env_id):
    finals = GLUE["run_oracle"](env_id, 4, seed=3)
    ours = evaluate(env_id, "oracle", episodes=4, seed=3, progress=False)
    assert [f["return"] for f in finals] == pytest.approx(ours["returns"])
    # the finished episodes' metrics survive GEM's autoreset
    assert [f["metrics"]["success"] for f in finals] == [1.0] * 4


def test_gem_calling_conventions():
    GLUE["register_all"]()
    env = gem.make("agentr1:AgentR1/SyntheticMultihop-v0", seed=5)  # GEM passes seed= to constructors
    first, _ = env.reset()  # the constructor's seed
    again, _ = env.reset(5)  # GEM resets positionally
    assert first == again
    other, _ = env.reset()  # later resets continue the RNG (Gymnasium's seeding), not the constructor seed
    assert other != first
