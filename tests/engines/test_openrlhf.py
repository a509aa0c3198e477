"""OpenRLHF: the agent file examples/engines/openrlhf_agent.py driven by OpenRLHF's own ``MultiTurnAgentExecutor``
(its multi-turn loop: tokenizing our text, concatenating ids, recording action ranges and rewards) against a
stand-in vLLM engine that plays the oracle. OpenRLHF's distribution pins deepspeed and flash-attn (GPU builds); its
agent module needs neither, so .ci/engine-tests installs it without dependencies in its own virtualenv
(``.venv-openrlhf``); in the main environment these tests skip."""

from __future__ import annotations

import asyncio
import json
import runpy
from types import SimpleNamespace

import pytest
from _paths import REPO

pytest.importorskip("openrlhf.utils.agent")

from agentr1_trl.testing import tiny_tokenizer

import agentr1_gym
from agentr1_gym.evaluation import evaluate
from agentr1_gym.rollout import EpisodeRecorder

#: the envs the tokenizer is trained on and the executor plays: answer-shaped and world-shaped
TOKENIZER_ENVS = (
    "AgentR1/SyntheticMultihop-v0",
    "AgentR1/Calculator-v0",
    "AgentR1/WebShop-v0",
    "AgentR1/TextWorld-Cooking-v0",
)

#: the envs the executor plays: those, and a conversation whose user speaks several times (its prompt lists a whole
#: API: a long one in the tiny tokenizer's ids)
PLAYED_ENVS = (*TOKENIZER_ENVS, "AgentR1/BFCL-MultiTurn-v0")

AGENT_FILE = REPO / "examples" / "engines" / "openrlhf_agent.py"


@pytest.fixture(scope="module")
def agent(tmp_path_factory, monkeypatch_module):
    path = tmp_path_factory.mktemp("tok")
    tiny_tokenizer(env_ids=TOKENIZER_ENVS).save_pretrained(path)
    monkeypatch_module.setenv("AGENTR1_TOKENIZER", str(path))
    module = runpy.run_path(str(AGENT_FILE))
    return SimpleNamespace(**module, tok=module["_tokenizer"](str(path)))


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp


class _OracleEngine:
    """vLLM's ``generate`` as OpenRLHF calls it, playing a shadow env's oracle: a turn that ends in one of the
    env's stop strings stops there (no EOS), any other ends with EOS, as vLLM with those stop strings would."""

    def __init__(self, tok):
        self.tok, self.generated = tok, []

    def start(self, env_id, seed):
        self.env = agentr1_gym.make(env_id)
        self.env.reset(seed=seed)
        self.stops = tuple(self.env.unwrapped.tool_format.stop_strings)

    async def generate(self, token_ids, params, multi_modal_data=None):
        action = self.env.unwrapped.oracle_action()
        self.env.step(action)
        ids = self.tok.encode(action, add_special_tokens=False)
        if not action.endswith(self.stops):
            ids.append(self.tok.eos_token_id)
        self.generated.append((action, ids))
        out = SimpleNamespace(token_ids=ids, text=action, finish_reason="stop", logprobs=None)
        return SimpleNamespace(outputs=[out])


def _tokenize(tok):
    def call(text, add_special_tokens=False, return_tensors=None):
        import torch

        return {"input_ids": torch.tensor([tok.encode(text, add_special_tokens=add_special_tokens)])}

    return call


@pytest.mark.parametrize("env_id", PLAYED_ENVS)
def test_openrlhf_executor_matches_our_evaluator_and_our_tokens(agent, env_id):
    seeds = range(2, 6)
    rows = agent.dataset_rows(env_id, seeds)
    ours = evaluate(env_id, "oracle", episodes=len(rows), seed=2, progress=False)
    executor = agent.AgentExecutor()
    budget = 65536 if env_id == "AgentR1/BFCL-MultiTurn-v0" else 4096
    for row, seed, expected in zip(rows, seeds, ours["returns"]):
        engine = _OracleEngine(agent.tok)
        engine.start(env_id, seed)
        params = SimpleNamespace(max_tokens=None, logprobs=None)
        result = asyncio.run(
            executor.execute(row["input"], row["label"], params, budget, _tokenize(agent.tok), engine)
        )
        assert result["reward"] == pytest.approx(expected)
        assert float(result["scores"]) == pytest.approx(expected)
        assert result["extra_logs"]["success"] == 1.0
        # OpenRLHF's sequence is token for token what our own rollouts build from the same turns
        env = agentr1_gym.make(env_id)
        _, info = env.reset(seed=seed)
        rec = EpisodeRecorder(agent.tok, info, max_episode_tokens=budget)
        for action, ids in engine.generated:
            rec.add_generation(ids, [0.0] * len(ids))
            _, r, term, trunc, step_info = env.step(action)
            rec.add_step(r, term, trunc, step_info)
        assert result["observation_tokens"] == rec.traj.prompt_ids + rec.traj.completion_ids
        # and its action ranges are exactly the generated turns
        mask = [0] * len(result["observation_tokens"])
        for start, end in result["action_ranges"]:
            mask[start:end] = [1] * (end - start)
        assert mask[len(rec.traj.prompt_ids) :] == rec.traj.action_mask


def test_rows_name_the_episode(agent):
    (row,) = agent.dataset_rows("AgentR1/HotpotQA-v0", range(7, 8), {"split": "dev"})
    assert json.loads(row["label"]) == {
        "env_id": "AgentR1/HotpotQA-v0",
        "env_kwargs": {"split": "dev"},
        "seed": 7,
    }
