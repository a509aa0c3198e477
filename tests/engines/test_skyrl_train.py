"""SkyRL: our envs run by SkyRL's own generator (``skyrl_train``'s ``SkyRLGymGenerator.generate``: its multi-turn
agent loop, token in/token out, loss masks and per-token rewards) through ``agentr1_skyrl``, against a stand-in
inference engine that plays the oracle. skyrl-train declares Python 3.12 and pins GPU builds (flash-attn,
vllm); its generator needs neither and runs on 3.11 with transformers 4.x, so .ci/engine-tests installs it without
dependencies plus what the generator imports, in its own virtualenv (``.venv-skyrl-train``); in the main
environment these tests skip."""

from __future__ import annotations

import asyncio
import os

import pytest

pytest.importorskip("skyrl_train.generators.skyrl_gym_generator")

import agentr1_skyrl  # noqa: F401  (registers our envs in skyrl_gym)
import skyrl_train
from agentr1_skyrl import skyrl_dataset
from agentr1_trl.testing import tiny_tokenizer
from omegaconf import OmegaConf
from skyrl_train.generators.skyrl_gym_generator import SkyRLGymGenerator

import agentr1_gym
from agentr1_gym.evaluation import evaluate

#: the envs the tokenizer is trained on and the executor plays: answer-shaped and world-shaped
TOKENIZER_ENVS = (
    "AgentR1/SyntheticMultihop-v0",
    "AgentR1/Calculator-v0",
    "AgentR1/WebShop-v0",
    "AgentR1/TextWorld-Cooking-v0",
)

TOK = tiny_tokenizer(env_ids=TOKENIZER_ENVS)


class _OracleEngine:
    """SkyRL's ``InferenceEngineClient.generate`` playing each trajectory's oracle in a shadow env (the row found
    by the rendered prompt, the session id keeping it); records the generated ids per session."""

    def __init__(self, rows):
        self.rows, self.shadows, self.generated = rows, {}, {}

    async def generate(self, engine_input):
        sid = engine_input["session_ids"][0]
        if sid not in self.shadows:
            text = TOK.decode(engine_input["prompt_token_ids"][0])
            row = next(
                r
                for r in self.rows
                if TOK.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False) == text
            )
            env = agentr1_gym.make(row["env_class"])
            env.reset(seed=row["extra_info"]["seed"])
            self.shadows[sid] = env
        env = self.shadows[sid]
        action = env.unwrapped.oracle_action()
        env.step(action)
        ids = [*TOK.encode(action, add_special_tokens=False), TOK.eos_token_id]
        self.generated.setdefault(sid, []).extend(ids)
        return {
            "responses": [action],
            "response_ids": [ids],
            "stop_reasons": ["stop"],
            "response_logprobs": None,
        }


def _generator(engine, max_turns=6):
    cfg = OmegaConf.load(
        os.path.join(os.path.dirname(skyrl_train.__file__), "config", "ppo_base_config.yaml")
    )
    cfg.trainer.policy.model.path = "tiny"
    cfg.trainer.max_prompt_length = 8192
    cfg.generator.max_turns = max_turns
    cfg.generator.sampling_params.max_generate_length = 256
    return SkyRLGymGenerator(cfg.generator, OmegaConf.create({"max_env_workers": 0}), engine, TOK, "tiny")


def _generate(generator, rows):
    batch = {
        "prompts": [r["prompt"] for r in rows],
        "env_classes": [r["env_class"] for r in rows],
        "env_extras": rows,
        "sampling_params": None,
    }
    return asyncio.run(generator.generate(batch, disable_tqdm=True))


@pytest.mark.parametrize("env_id", TOKENIZER_ENVS)
def test_skyrl_generator_matches_our_evaluator(env_id):
    rows = skyrl_dataset(env_id, range(5, 9))
    engine = _OracleEngine(rows)
    out = _generate(_generator(engine), rows)
    ours = evaluate(env_id, "oracle", episodes=len(rows), seed=5, progress=False)
    # per-step rewards on the tokens where SkyRL puts them, summing to our returns
    assert [sum(r) for r in out["rewards"]] == pytest.approx(ours["returns"])
    if env_id == "AgentR1/SyntheticMultihop-v0":  # retrieval pays on the search steps, before the answer
        assert all(sum(1 for x in r if x) == len(ps) for r, ps in zip(out["rewards"], _steps(rows)))
    assert out["rollout_metrics"]["environment/success"] == 1.0
    # SkyRL's loss mask is 1 on exactly the ids the engine generated (observations 0)
    masked = [
        [t for t, m in zip(ids, mask) if m] for ids, mask in zip(out["response_ids"], out["loss_masks"])
    ]
    assert sorted(masked) == sorted(engine.generated.values())


def _steps(rows):
    """The oracle's per-step rewards for each row (the steps with a non-zero reward)."""
    out = []
    for row in rows:
        env = agentr1_gym.make(row["env_class"])
        env.reset(seed=row["extra_info"]["seed"])
        rewards, done = [], False
        while not done:
            _, r, term, trunc, _ = env.step(env.unwrapped.oracle_action())
            rewards.append(r)
            done = term or trunc
        out.append([r for r in rewards if r])
    return out


class _JunkEngine:
    async def generate(self, engine_input):
        ids = [*TOK.encode("no tags at all", add_special_tokens=False), TOK.eos_token_id]
        return {
            "responses": ["no tags at all"],
            "response_ids": [ids],
            "stop_reasons": ["stop"],
            "response_logprobs": None,
        }


def test_skyrl_turn_limit_reaches_the_env_and_is_scored():
    """SkyRL's generator sets the env's max_turns from its own config; junk turns are penalised, explained as
    observations, and the cut there is scored by the env."""
    rows = skyrl_dataset("AgentR1/SyntheticMultihop-v0", [3], env_kwargs={"max_hops": 1})
    out = _generate(_generator(_JunkEngine(), max_turns=2), rows)
    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", max_hops=1, max_turns=2)
    env.reset(seed=3)
    replay = [env.step("no tags at all") for _ in range(2)]
    assert replay[-1][3] and "metrics" in replay[-1][4]  # truncated at SkyRL's max_turns, scored
    assert sum(out["rewards"][0]) == pytest.approx(sum(r for _, r, *_ in replay))
    feedback = TOK.decode([t for t, m in zip(out["response_ids"][0], out["loss_masks"][0]) if not m])
    assert "<tool_call>" in feedback  # the explanation of the malformed turn, as the next observation
