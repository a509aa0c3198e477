"""verl adapter: our envs run by verl's own agent-loop worker (``AgentLoopWorker.generate_sequences`` on batches
that verl's ``RLHFDataset`` loads from the parquet our ``verl_dataset`` writes), with an LLM "server" that plays
the oracle or a tiny random model. verl pins transformers<5.11, so these tests run in their own virtualenv
(.ci/run makes it: ``.venv-verl``); in the main environment they skip."""

from __future__ import annotations

import asyncio
import itertools
import os

import pytest

verl = pytest.importorskip("verl")

import agentr1_verl  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from _engines import ENGINE_ENVS, step_rewards_show_process_rewards  # noqa: E402
from agentr1_verl import AGENT_LOOP_CONFIG, COMMON_METRICS, process_reward_tensor, verl_dataset  # noqa: E402
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker  # noqa: E402
from verl.workers.rollout.llm_server import LLMServerClient  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

import agentr1_gym  # noqa: E402
from agentr1_gym.errors import ConfigError  # noqa: E402
from agentr1_gym.evaluation import evaluate  # noqa: E402

PROMPT_LEN, RESPONSE_LEN = 1024, 768


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from agentr1_trl.testing import tiny_model, tiny_tokenizer

    path = tmp_path_factory.mktemp("verl-tiny")
    tok = tiny_tokenizer()
    tiny_model(tok, hidden_size=64).save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def _config(model_dir, **overrides):
    from hydra import compose, initialize_config_dir

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    args = {
        "actor_rollout_ref.model.path": model_dir,
        "actor_rollout_ref.rollout.name": "vllm",
        "data.max_prompt_length": PROMPT_LEN,
        "data.max_response_length": RESPONSE_LEN,
        "actor_rollout_ref.rollout.agent.agent_loop_config_path": AGENT_LOOP_CONFIG,
        **overrides,
    }
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return compose("ppo_trainer", overrides=[f"{k}={v}" for k, v in args.items()])


class _Server(LLMServerClient):
    """verl's LLM client with the server replaced: ``policy(request_id, prompt_ids, sampling_params)`` returns
    (token ids, logprobs). Records every call."""

    def __init__(self, config, policy):
        super().__init__(config)
        self.policy = policy
        self.calls: list[dict] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        ids, logps = self.policy(request_id, list(prompt_ids), dict(sampling_params))
        self.calls.append(
            {"request_id": request_id, "prompt_ids": list(prompt_ids), "ids": ids, "sp": sampling_params}
        )
        return TokenOutput(token_ids=ids, log_probs=logps)


class _Oracle:
    """Plays each episode's oracle: a shadow env per request id (the first context names the row by its prompt)."""

    def __init__(self, tokenizer, rows):
        self.tok = tokenizer
        self.by_prompt = {}
        for row in rows:
            info = row["extra_info"]
            env = agentr1_gym.make(
                info["env_id"], **({"max_turns": info["max_turns"]} if "max_turns" in info else {})
            )
            _, reset = env.reset(seed=info["seed"])
            text = self.tok.apply_chat_template(
                reset["messages"],
                tools=reset.get("tools") or None,
                add_generation_prompt=True,
                tokenize=False,
            )
            self.by_prompt[tuple(self.tok.encode(text, add_special_tokens=False))] = info
            env.close()
        self.shadows: dict[str, list] = {}

    def __call__(self, request_id, prompt_ids, sampling_params):
        if request_id not in self.shadows:
            info = self.by_prompt[tuple(prompt_ids)]
            env = agentr1_gym.make(info["env_id"])
            env.reset(seed=info["seed"])
            self.shadows[request_id] = [env, None]
        env, last = self.shadows[request_id]
        if last is not None:
            env.step(last)
        action = env.unwrapped.oracle_action()
        self.shadows[request_id][1] = action
        ids = [*self.tok.encode(action, add_special_tokens=False), self.tok.eos_token_id]
        return ids, None


def _batch(worker, rows, tmp_path, name="rows"):
    """The rows through verl's own data path: parquet -> RLHFDataset -> collate_fn -> DataProto."""
    import datasets
    from verl import DataProto
    from verl.utils.dataset.rl_dataset import collate_fn

    path = tmp_path / f"{name}.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    dataset = worker.dataset_cls(
        data_files=[str(path)], tokenizer=worker.tokenizer, processor=None, config=worker.config.data
    )
    return DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))


def _run(worker, batch):
    return asyncio.run(worker.generate_sequences(batch))


@pytest.mark.parametrize("env_id", ENGINE_ENVS)
def test_oracle_through_verl_matches_our_evaluator(model_dir, tmp_path, env_id):
    rows = verl_dataset(env_id, range(5, 11))
    # room for the retrieved passages, long in the tiny tokenizer's ids (an episode cut by the response budget is
    # not scored: tested below)
    # BFCL's prompt lists a task's whole API (about 15k ids of the tiny tokenizer), and its conversations run long
    budget = (24576, 16384) if env_id == "AgentR1/BFCL-MultiTurn-v0" else (4096, 8192)
    config = _config(
        model_dir, **{"data.max_response_length": budget[1], "data.max_prompt_length": budget[0]}
    )
    worker = AgentLoopWorker(config, llm_client=None)
    server = _Server(config, _Oracle(worker.tokenizer, rows))
    worker.llm_client = server
    out = _run(worker, _batch(worker, rows, tmp_path))
    ours = evaluate(env_id, "oracle", episodes=len(rows), seed=5, progress=False)

    scores = out.batch["rm_scores"].sum(-1).tolist()
    assert scores == pytest.approx(ours["returns"])  # verl's reward = our episode return, row by row
    turn_scores = out.non_tensor_batch["turn_scores"]
    assert [sum(t) for t in turn_scores] == pytest.approx(ours["returns"])
    # process rewards on the steps that earned them (retrieval before the answer, a game's points on its moves)
    assert all(step_rewards_show_process_rewards(env_id, list(t)) for t in turn_scores)
    assert out.non_tensor_batch["success"].tolist() == [1.0] * len(rows)
    assert set(COMMON_METRICS) <= set(out.meta_info["reward_extra_keys"])

    # the response mask is 1 exactly on the tokens the server generated, turn by turn, in order
    mask, responses = out.batch["response_mask"], out.batch["responses"]
    by_request: dict[str, list[int]] = {}
    for call in server.calls:
        by_request.setdefault(call["request_id"], []).extend(call["ids"])
        assert call["sp"]["include_stop_str_in_output"] and call["sp"]["stop"]
    generated = sorted(by_request.values())
    assert sorted(responses[i][mask[i].bool()].tolist() for i in range(len(rows))) == generated
    # each turn's context is the previous context + its generation + observation tokens (token in, token out)
    for calls in _group(server.calls).values():
        for a, b in itertools.pairwise(calls):
            assert b["prompt_ids"][: len(a["prompt_ids"]) + len(a["ids"])] == a["prompt_ids"] + a["ids"]
    # per-step rewards on each turn's last generated token
    placed = process_reward_tensor(mask, turn_scores)
    assert placed.sum(-1).tolist() == pytest.approx(scores)
    assert torch.all(placed[mask == 0] == 0)


def _group(calls):
    out: dict[str, list] = {}
    for c in calls:
        out.setdefault(c["request_id"], []).append(c)
    return out


def test_response_budget_cuts_the_episode_unscored(model_dir, tmp_path):
    rows = verl_dataset("AgentR1/HotpotQA-v0", [5, 6])
    config = _config(model_dir, **{"data.max_response_length": 256})
    worker = AgentLoopWorker(config, llm_client=None)
    worker.llm_client = _Server(config, _Oracle(worker.tokenizer, rows))
    out = _run(worker, _batch(worker, rows, tmp_path))
    assert out.batch["responses"].shape[1] == 256
    for i in range(len(rows)):
        meta = out.non_tensor_batch["agentr1"][i]
        assert meta["truncated_reason"] == "token_budget" and not meta["terminated"]
        assert out.non_tensor_batch["success"][i] == 0.0 and out.non_tensor_batch["agentr1_metrics"][i] == {}
        # the steps taken keep their process rewards; no outcome was paid
        assert float(out.batch["rm_scores"][i].sum()) == pytest.approx(
            sum(out.non_tensor_batch["turn_scores"][i])
        )
        assert float(out.batch["rm_scores"][i].sum()) < 1.0


def test_tiny_model_episodes_are_token_exact_and_scored_like_a_replay(model_dir, tmp_path):
    """A real (random) policy: junk turns become explanatory observations and penalties; the episode ends at
    max_turns and is scored; verl's tensors carry exactly the sampled ids and their logprobs."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    gen = torch.Generator().manual_seed(0)

    def sample(request_id, prompt_ids, sp):
        ids, logps, ctx = [], [], list(prompt_ids)
        for _ in range(min(12, sp["max_tokens"])):
            with torch.no_grad():
                logits = model(torch.tensor([ctx])).logits[0, -1].float()
            probs = torch.softmax(logits, -1)
            tok = int(torch.multinomial(probs, 1, generator=gen))
            ids.append(tok)
            logps.append(float(torch.log(probs[tok])))
            ctx.append(tok)
        return ids, logps

    rows = verl_dataset("AgentR1/SyntheticMultihop-v0", [1, 2], env_kwargs={"max_hops": 1}, max_turns=2)
    config = _config(model_dir, **{"actor_rollout_ref.rollout.calculate_log_probs": True})
    server = _Server(config, sample)
    worker = AgentLoopWorker(config, llm_client=server)
    out = _run(worker, _batch(worker, rows, tmp_path))
    mask = out.batch["response_mask"]
    episodes = _group(server.calls)
    assert len(episodes) == 2 and all(len(c) == 2 for c in episodes.values())  # max_turns=2, both turns used
    prompts = [
        out.batch["prompts"][i][out.batch["attention_mask"][i, :PROMPT_LEN].bool()].tolist() for i in range(2)
    ]
    for i in range(2):
        calls = next(c for c in episodes.values() if c[0]["prompt_ids"] == prompts[i])
        got = out.batch["responses"][i][mask[i].bool()].tolist()
        assert got == calls[0]["ids"] + calls[1]["ids"]
        logps = out.batch["rollout_log_probs"][i][mask[i].bool()]
        assert logps.abs().sum() > 0 and torch.all(out.batch["rollout_log_probs"][i][mask[i] == 0] == 0)
        # replay the decoded actions through a fresh env: same per-step rewards, same end
        env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", max_hops=1, max_turns=2)
        env.reset(seed=rows[i]["extra_info"]["seed"])
        rewards = []
        for call in calls:
            action = worker.tokenizer.decode(
                call["ids"], skip_special_tokens=True, clean_up_tokenization_spaces=False
            )
            _, r, _, trunc, info = env.step(action)
            rewards.append(r)
        assert trunc and "metrics" in info  # max_turns ends it, scored
        assert list(out.non_tensor_batch["turn_scores"][i]) == pytest.approx(rewards)
        assert float(out.batch["rm_scores"][i].sum()) == pytest.approx(sum(rewards))
        assert out.non_tensor_batch["agentr1"][i]["action_errors"][0]  # junk is explained, not a crash


def test_bad_rows_raise_typed_errors(model_dir, tmp_path):
    config = _config(model_dir)
    worker = AgentLoopWorker(config, llm_client=_Server(config, lambda *a: ([1], None)))
    row = verl_dataset("AgentR1/SyntheticMultihop-v0", [0])[0]
    row["extra_info"] = {**row["extra_info"], "env_id": ""}
    with pytest.raises(ConfigError, match=r"extra_info\.env_id"):
        _run(worker, _batch(worker, [row], tmp_path, "noenv"))
    short = _config(model_dir, **{"data.max_prompt_length": 16})
    worker = AgentLoopWorker(short, llm_client=_Server(short, lambda *a: ([1], None)))
    rows = verl_dataset("AgentR1/SyntheticMultihop-v0", [0])
    with pytest.raises(ConfigError, match="max_prompt_length"):
        _run(worker, _unfiltered_batch(rows, worker))
    # one sequence per episode: an env that rewrites the agent's context is refused before any episode runs
    with pytest.raises(ConfigError, match=r"verl's agent loop .*context='window:2'"):
        verl_dataset("AgentR1/WebShop-v0", [0], env_kwargs={"context": "window:2"})
    windowed = verl_dataset("AgentR1/WebShop-v0", [0])
    windowed[0]["extra_info"] = {**windowed[0]["extra_info"], "env_kwargs": '{"context": "state"}'}
    worker = AgentLoopWorker(config, llm_client=_Server(config, lambda *a: ([1], None)))
    with pytest.raises(ConfigError, match="context='state'"):
        _run(worker, _unfiltered_batch(windowed, worker))


def _unfiltered_batch(rows, worker):
    """The non-tensor fields verl's dataset would give, without its prompt-length filter (which drops long rows)."""
    from verl import DataProto

    return DataProto.from_single_dict(
        {
            "raw_prompt": np.array([r["prompt"] for r in rows], dtype=object),
            "agent_name": np.array([r["agent_name"] for r in rows], dtype=object),
            "extra_info": np.array([r["extra_info"] for r in rows], dtype=object),
            "index": np.arange(len(rows)),
        }
    )


def test_registered_and_config_file_names_the_loop():
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry

    assert _agent_loop_registry[agentr1_verl.AGENT_NAME]["_target_"].endswith("AgentR1AgentLoop")
    (entry,) = OmegaConf.load(AGENT_LOOP_CONFIG)
    assert entry.name == agentr1_verl.AGENT_NAME and entry._target_ == "agentr1_verl.loop.AgentR1AgentLoop"


def test_process_reward_tensor_places_each_turn_on_its_last_token():
    mask = torch.tensor([[1, 1, 0, 0, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0, 0]])
    out = process_reward_tensor(mask, [[0.1, 1.0], [0.5]])
    want = torch.tensor([[0, 0.1, 0, 0, 0, 0, 1.0, 0], [0, 0, 0, 0.5, 0, 0, 0, 0]])
    assert torch.allclose(out, want)
