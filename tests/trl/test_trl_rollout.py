"""Rollouts: every masked token's origin, observation deltas, prefix-stability detection, token budgets."""

from __future__ import annotations

import gymnasium as gym
import pytest

pytest.importorskip("trl")

from agentr1_trl import HFGenerator, SamplingConfig, ScriptedGenerator, collect_rollouts
from agentr1_trl.testing import THINK_DROPPING_TEMPLATE as THINK_DROPPING
from agentr1_trl.testing import tiny_model, tiny_tokenizer

import agentr1_gym  # noqa: F401  (registers the envs)
from agentr1_gym.rewards import RewardConfig
from agentr1_gym.rollout import render_chat

ENV = "AgentR1/SyntheticMultihop-v0"


def _oracle_script(envs, bad_first_turn=()):
    """Each env's oracle, with a malformed call as the first turn of the envs listed in bad_first_turn."""
    turn = {}

    def script(prompt_ids, i):
        live = [k for k, e in enumerate(envs) if not e.unwrapped.done]
        k = live[i]
        turn[k] = turn.get(k, 0) + 1
        if k in bad_first_turn and turn[k] == 1:
            return '<think>hmm</think><tool_call>{"name": "search", "arguments": {"q": 1}}</tool_call>'
        return "<think>next step</think>" + envs[k].unwrapped.oracle_action()

    return script


def _check_provenance(traj, generated_turns, tok):
    """mask==1 exactly on the generated ids, in order; everything else is template/tool text."""
    gen_positions = [i for i, m in enumerate(traj.action_mask) if m == 1]
    assert [traj.completion_ids[i] for i in gen_positions] == [t for turn in generated_turns for t in turn]
    # each generated turn is contiguous and ends at turn_ends
    pos = 0
    for turn, end in zip(generated_turns, traj.turn_ends):
        start = traj.completion_ids.index(turn[0], pos) if turn else pos
        assert traj.completion_ids[start : start + len(turn)] == turn
        assert end == start + len(turn) - 1
        assert all(traj.action_mask[start : end + 1])
        pos = end + 1
    masked_out = tok.decode([t for t, m in zip(traj.completion_ids, traj.action_mask) if m == 0])
    assert "<tool_response>" in masked_out and "<|im_start|>assistant" in masked_out
    assert len(traj.logprobs) == len(traj.completion_ids) == len(traj.action_mask)


def test_mask_provenance_with_malformed_call(tok):
    envs = [gym.make(ENV) for _ in range(3)]
    gen = ScriptedGenerator(tok, _oracle_script(envs, bad_first_turn={1}))
    trajs = collect_rollouts(envs, gen, tok, seeds=[0, 1, 2], max_episode_tokens=8192)
    # history holds the generations in call order; regroup per episode using the turn counts
    per_ep = {k: [] for k in range(3)}
    calls = iter(gen.history)
    active = list(range(3))
    turn_idx = 0
    while active:
        for k in list(active):
            if turn_idx < trajs[k].num_turns:
                per_ep[k].append(next(calls))
        turn_idx += 1
        active = [k for k in active if turn_idx < trajs[k].num_turns]
    for k, traj in enumerate(trajs):
        assert traj.terminated and traj.one_sequence and traj.metrics["em"] == 1.0
        _check_provenance(traj, per_ep[k], tok)
    assert trajs[1].action_errors[0] and trajs[1].rewards[0] == pytest.approx(-0.05)
    # the token sequence decodes to exactly the chat template's rendering of the final conversation
    env = envs[0].unwrapped
    full = tok.decode(trajs[0].prompt_ids + trajs[0].completion_ids)
    rendered = render_chat(
        tok, env.messages, [t.schema() for t in env.tools.values()], add_generation_prompt=False
    )
    assert rendered.startswith(full)
    assert (
        rendered[len(full) :] == "<|im_end|>\n"
    )  # only the closing of the final answer turn is not part of it


def test_process_rewards_sit_on_turn_ends(tok):
    envs = [gym.make(ENV, min_hops=2, max_hops=2)]
    trajs = collect_rollouts(envs, ScriptedGenerator(tok, _oracle_script(envs)), tok, seeds=[4])
    (t,) = trajs
    tr = t.token_rewards()
    nonzero = [i for i, r in enumerate(tr) if r != 0]
    assert nonzero == t.turn_ends
    assert [tr[i] for i in t.turn_ends] == pytest.approx(
        [0.1, 0.1, 1.1]
    )  # gold paragraph, gold paragraph, answer+format
    assert sum(tr) == pytest.approx(envs[0].unwrapped.max_episode_reward())


def test_non_prefix_stable_template_falls_back_to_per_turn_samples():
    import copy

    tok = copy.deepcopy(tiny_tokenizer())
    tok.chat_template = THINK_DROPPING
    envs = [gym.make(ENV, min_hops=2, max_hops=2)]
    gen = ScriptedGenerator(tok, _oracle_script(envs))
    (t,) = collect_rollouts(envs, gen, tok, seeds=[1])
    assert not t.one_sequence and t.terminated
    samples = t.samples()
    assert len(samples) == t.num_turns == 3
    for sample, generated in zip(samples, gen.history):
        assert sample.completion_ids == generated and all(sample.action_mask)
        # the context of each turn is the template's own rendering (earlier thinking dropped)
        assert "next step" not in tok.decode(sample.prompt_ids)
    assert [s.token_rewards[-1] for s in samples] == pytest.approx(t.rewards)


def _over_budget(tok, env):
    """One episode of 400-token turns of junk within an 800-token budget."""
    (t,) = collect_rollouts(
        [env],
        ScriptedGenerator(tok, lambda p, i: "x " * 500),
        tok,
        seeds=[0],
        sampling=SamplingConfig(max_new_tokens=400),
        max_episode_tokens=800,
    )
    return t


def test_token_budget_truncates(tok):
    envs = [gym.make(ENV)]
    t = _over_budget(tok, envs[0])
    assert t.truncated and t.truncated_reason == "token_budget"
    assert len(t.prompt_ids) + len(t.completion_ids) <= 800
    # the env scores the cut episode as a truncation: metrics, and the outcome on the last turn
    assert envs[0].unwrapped.done and t.metrics["success"] == 0.0 and t.metrics["format_ok"] == 0.0
    assert set(t.reward_components[-1]) >= {"answer", "format", "offset"}
    cut = _over_budget(tok, gym.make(ENV, reward=RewardConfig.agent_r1()))
    # the malformed turn's penalty and Agent-R1's offset
    assert cut.episode_return == pytest.approx(-0.1 - 1.0)


def test_hf_generator_and_vector_env(tok):
    model = tiny_model(tok)
    venv = gym.vector.SyncVectorEnv(
        [lambda: gym.make(ENV, max_hops=1, max_turns=2, max_episode_steps=2) for _ in range(2)]
    )
    trajs = collect_rollouts(
        venv, HFGenerator(model, tok), tok, seeds=[0, 1], sampling=SamplingConfig(max_new_tokens=12)
    )
    for t in trajs:
        assert t.num_turns == 2 and t.truncated_reason == "max_turns"
        gen_logps = [lp for lp, m in zip(t.logprobs, t.action_mask) if m]
        assert all(lp <= 0 for lp in gen_logps) and any(lp < 0 for lp in gen_logps)
        assert sum(t.action_mask) <= 24


def test_temperature_zero_is_greedy(tok):
    """temperature=0 means greedy (the vLLM convention) instead of a transformers ValueError; two runs agree."""
    assert SamplingConfig(temperature=0).do_sample is False
    with pytest.raises(ValueError, match="temperature"):
        SamplingConfig(temperature=-1)
    model = tiny_model(tok)
    prompts = [tok.encode("hello world"), tok.encode("what is the capital")]
    gen = HFGenerator(model, tok)
    first = gen.generate(prompts, SamplingConfig(max_new_tokens=6, temperature=0))
    second = gen.generate(prompts, SamplingConfig(max_new_tokens=6, temperature=0))
    assert [g.ids for g in first] == [g.ids for g in second]
    assert all(len(g.ids) > 0 for g in first)


def test_a_backend_declares_what_it_provides(tok):
    """A backend says what it is, whether its log-probs are the sampler's, and how to release it; an object
    that only generates is refused with what is missing, before any episode starts."""
    from agentr1_gym.errors import ConfigError
    from agentr1_gym.generation import BaseGenerator, Generation, check_backend

    class OnlyGenerates:
        def generate(self, prompts, sampling):
            return [Generation(ids=[tok.eos_token_id]) for _ in prompts]

    with pytest.raises(ConfigError, match="lacks describe, sync_weights, close, provides_logprobs; inherit"):
        collect_rollouts([gym.make(ENV)], OnlyGenerates(), tok)

    class Inherits(BaseGenerator, OnlyGenerates):
        pass

    backend = check_backend(Inherits())
    assert (backend.describe(), backend.provides_logprobs, backend.close()) == ("Inherits", True, None)
    assert ScriptedGenerator(tok, lambda p, i: "x").provides_logprobs is False
    assert HFGenerator(tiny_model(tok), tok).describe() == "Hugging Face generate"


def test_one_factory_decides_the_backend(tok, monkeypatch):
    """``auto`` is vLLM only for a policy vLLM can load (a model directory, or servers); a model built in memory
    generates with Hugging Face, and asking vLLM to colocate one is a ConfigError that says what to do."""
    from agentr1_trl.backends import factory

    from agentr1_gym.errors import ConfigError

    model = tiny_model(tok)
    assert factory.model_directory(model) is None
    monkeypatch.setattr("agentr1_trl.backends.vllm.vllm_available", lambda: True)
    assert factory.resolve_backend("auto", model) == "hf"
    assert factory.resolve_backend("auto", model, ["http://127.0.0.1:9"]) == "vllm"
    assert factory.resolve_backend("hf", model, ["http://127.0.0.1:9"]) == "hf"
    assert isinstance(factory.make_generator(model, tok), HFGenerator)
    with pytest.raises(ConfigError, match="needs a policy loaded from a model directory"):
        factory.make_generator(model, tok, factory.GenerationSettings(backend="vllm"))
    with pytest.raises(ConfigError, match="must be one of"):
        factory.GenerationSettings(backend="sglang")


def test_the_factory_passes_enforce_eager_to_the_engine(tiny_dir, tok, monkeypatch):
    """``GenerationSettings.enforce_eager`` (the trainer's ``vllm_enforce_eager``) reaches the vLLM engine as
    given; None leaves the choice to the engine (eager on CPUs, compiled on GPUs)."""
    from agentr1_trl.backends import factory
    from transformers import AutoModelForCausalLM

    made = []

    class Engine:
        def __init__(self, model_dir, tokenizer, **kwargs):
            made.append(kwargs)

    monkeypatch.setattr("agentr1_trl.backends.vllm.VLLMGenerator", Engine)
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    for eager in (None, False, True):
        factory.make_generator(
            model, tok, factory.GenerationSettings(backend="vllm", enforce_eager=eager), sync=False
        )
    assert [kw["enforce_eager"] for kw in made] == [None, False, True]


def test_a_scripted_turn_ends_as_a_sampler_ends_it(tok):
    """``add_eos="unless_stopped"`` (the oracle's): EOS after a plain-text turn, none after a turn a stop string
    ends (a sampler stops there without EOS), so a warm start on oracle turns teaches the model to end a plain
    reply; False and True keep their meaning, and anything else is a ConfigError."""
    from agentr1_gym.errors import ConfigError

    texts = ["Done.", '<tool_call>{"name": "f", "arguments": {}}</tool_call>', "<answer>x</answer>\n"]
    sampling = SamplingConfig(max_new_tokens=64, stop_strings=("</tool_call>", "</answer>"))

    def ends(add_eos):
        gen = ScriptedGenerator(tok, lambda ids, i: texts[i], add_eos=add_eos)
        return [g.ids[-1] == tok.eos_token_id for g in gen.generate([[1]] * len(texts), sampling)]

    assert ends("unless_stopped") == [True, False, False]
    assert ends(False) == [False, False, False] and ends(True) == [True, True, True]
    no_stops = ScriptedGenerator(tok, lambda ids, i: texts[i], add_eos="unless_stopped")
    assert no_stops.generate([[1]], SamplingConfig(max_new_tokens=64))[0].ids[-1] == tok.eos_token_id
    with pytest.raises(ConfigError, match="add_eos"):
        ScriptedGenerator(tok, lambda ids, i: "", add_eos="yes")
