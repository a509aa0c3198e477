"""The shared-prompt forward pass: each distinct prompt runs once, with the same log-probs and gradients as the
full forward pass TRL runs."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch
from agentr1_trl import ScriptedGenerator
from agentr1_trl.forward import (
    MIN_SHARED_PREFIX,
    common_prefix,
    completion_logps,
    prompt_groups,
    share_plan,
)
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer
from agentr1_trl.testing import alternating_script, tiny_model, tiny_tokenizer
from peft import LoraConfig

from agentr1_gym.errors import ConfigError


def _batch(tok, seed=0):
    """6 rows, 2 distinct left-padded prompts (3 rows each, interleaved), right-padded completions."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 200, (n,), generator=g).tolist() for n in (9, 14)]
    rows = [0, 1, 0, 1, 1, 0]
    lengths = [5, 7, 3, 7, 1, 6]
    pad = tok.pad_token_id
    wp, wc = 14, 7
    pid = torch.full((6, wp), pad)
    pm = torch.zeros((6, wp), dtype=torch.long)
    cid = torch.full((6, wc), pad)
    cm = torch.zeros((6, wc), dtype=torch.long)
    for r, (p, n) in enumerate(zip(rows, lengths)):
        pid[r, wp - len(prompts[p]) :] = torch.tensor(prompts[p])
        pm[r, wp - len(prompts[p]) :] = 1
        cid[r, :n] = torch.randint(10, 200, (n,), generator=g)
        cm[r, :n] = 1
    return pid, pm, cid, cm


def _step_batch(tok, seed=0):
    """5 step rows (a context policy's): one task prefix of 20 tokens, then each row's own context (1-9 tokens,
    all different) and its completion; left-padded prompts, right-padded completions."""
    g = torch.Generator().manual_seed(seed)
    prefix = torch.randint(10, 200, (20,), generator=g).tolist()
    owns, lengths = (1, 4, 9, 6, 3), (5, 7, 3, 1, 6)
    pad = tok.pad_token_id
    wp, wc = 20 + max(owns) + 2, max(lengths)
    pid, pm = torch.full((5, wp), pad), torch.zeros((5, wp), dtype=torch.long)
    cid, cm = torch.full((5, wc), pad), torch.zeros((5, wc), dtype=torch.long)
    for r, (k, n) in enumerate(zip(owns, lengths)):
        own = torch.randint(10, 200, (k,), generator=g)
        own[0] = 200 + r  # every row's own part differs from the others' at its first token
        prompt = torch.tensor(prefix + own.tolist())
        pid[r, wp - len(prompt) :], pm[r, wp - len(prompt) :] = prompt, 1
        cid[r, :n], cm[r, :n] = torch.randint(10, 200, (n,), generator=g), 1
    return pid, pm, cid, cm


def test_common_prefix_of_step_rows():
    tok = tiny_tokenizer()
    pid, pm, _, _ = _step_batch(tok)
    assert common_prefix(pid, pm) == 20
    assert (
        common_prefix(pid[:1].repeat(3, 1), pm[:1].repeat(3, 1)) == 20
    )  # every row keeps one token of its own
    other = pid.clone()
    other[2, -pm[2].sum()] = 7  # one row's first token differs: nothing is shared
    assert common_prefix(other, pm) == 0 and MIN_SHARED_PREFIX <= 20


def test_prompt_groups_finds_the_distinct_prompts():
    pid, pm, _, _ = _batch(tiny_tokenizer())
    first, inverse = prompt_groups(pid, pm)
    assert inverse.tolist() in ([0, 1, 0, 1, 1, 0], [1, 0, 1, 0, 0, 1])
    assert sorted(first.tolist()) == [0, 1]
    assert torch.equal(pid[first][inverse], pid)


@pytest.mark.parametrize("plan", ["full", "prompts", "prefix"])
def test_the_vocabulary_projection_never_sees_a_strided_state(plan):
    """Every forward pass asks the model for the last position's logits only, by index: a strided slice through a
    bf16 linear on a CPU made PyTorch copy the projection's weight once per row (0.8 s per call on SmolLM2)."""
    tok = tiny_tokenizer()
    model = tiny_model(tok)
    pid, pm, cid, cm = _step_batch(tok) if plan == "prefix" else _batch(tok)
    if plan == "full":
        pid, pm, cid, cm = pid[:2], pm[:2], cid[:2], cm[:2]
    assert share_plan(pid, pm) == plan
    seen = []
    model.get_output_embeddings().register_forward_pre_hook(lambda _, args: seen.append(args[0]))
    completion_logps(model, pid, pm, cid, cm)
    assert seen and all(x.is_contiguous() and x.size(1) == 1 for x in seen)


def _trainer(cls, config_cls, tmp_path, **kw):
    tok = tiny_tokenizer()
    args = config_cls(
        output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=4, max_steps=1,
        report_to="none", save_strategy="no", use_cpu=True, bf16=False, gradient_checkpointing=False,
        temperature=0.7, max_new_tokens_per_turn=16, max_episode_tokens=1536, **kw,
    )  # fmt: skip
    return cls(
        tiny_model(tok, seed=0),
        args,
        tok,
        peft_config=LoraConfig(
            r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
        ),
        generator=ScriptedGenerator(tok, alternating_script),
    )


def _grads(model):
    return {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("rows", ["groups", "steps"])
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_shared_prompt_forward_equals_the_full_forward(tmp_path, algo, rows):
    """groups: GRPO groups' identical prompts, each run once; steps: step rows' distinct prompts, their common
    task prefix run once."""
    if algo == "grpo":
        trainer = _trainer(AgentGRPOTrainer, AgentGRPOConfig, tmp_path)
    else:
        trainer = _trainer(AgentPPOTrainer, AgentPPOConfig, tmp_path)
        torch.nn.init.normal_(trainer.value_head.weight, std=0.5)
    model = trainer.model
    model.train()
    assert trainer.shares_prompts(model)
    pid, pm, cid, cm = (_batch if rows == "groups" else _step_batch)(trainer.processing_class)
    ids, attn, n = torch.cat([pid, cid], 1), torch.cat([pm, cm], 1), cid.size(1)
    mask = cm.bool()
    if rows == "steps":
        assert len(prompt_groups(pid, pm)[0]) == len(pid)  # no prompt repeats: only the prefix is shared
    # the cached path applies (else the comparison below would compare the full forward with itself)
    assert share_plan(pid, pm) == ("prompts" if rows == "groups" else "prefix")

    def run(shared):
        trainer.args.share_prompt_prefix = shared
        model.zero_grad()
        if algo == "grpo":
            logps = trainer.token_logps(model, ids, attn, n)
            values = torch.zeros_like(logps)
        else:
            logps, values = trainer._logps_and_values(model, ids, attn, n)
        ((logps * mask).sum() + (values * mask).sum()).backward()
        return logps.detach(), values.detach(), _grads(model)

    full_logps, full_values, full_grads = run(False)
    shared_logps, shared_values, shared_grads = run(True)
    assert torch.allclose(shared_logps[mask], full_logps[mask], atol=1e-5)
    assert torch.allclose(shared_values[mask], full_values[mask], atol=1e-5)
    assert full_grads.keys() == shared_grads.keys() and any("lora_" in k for k in full_grads)
    for k in full_grads:
        assert torch.allclose(shared_grads[k], full_grads[k], atol=1e-5, rtol=1e-4), k
    # only the needed positions are scored (the loss passes its action mask): the same values there, 0 elsewhere
    sub = mask.clone()
    sub[:, ::2] = False
    with torch.no_grad():
        part = trainer.token_logps(model, ids, attn, n, needed=sub)
    assert torch.allclose(part[sub], full_logps[sub], atol=1e-5) and bool((part[~sub] == 0).all())
    # the log-probs are at the sampling temperature (as TRL's)
    with torch.no_grad():
        direct = completion_logps(model, pid, pm, cid, cm, temperature=1.0)[0]
    assert not torch.allclose(direct[mask], shared_logps[mask], atol=1e-3)


def test_not_used_with_gradient_checkpointing_or_when_no_prompt_repeats(tmp_path):
    trainer = _trainer(AgentGRPOTrainer, AgentGRPOConfig, tmp_path)
    pid, pm, _, _ = _batch(trainer.processing_class)
    assert share_plan(pid[:2], pm[:2]) == "full"  # two distinct prompts, no long common prefix
    trainer.model.gradient_checkpointing_enable()
    assert not trainer.shares_prompts(trainer.model)


@pytest.mark.parametrize("chunk", [3, 64])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize(
    "block", [None, 7, 16, 50]
)  # the whole vocabulary (50) in one block, or uneven blocks
def test_projected_logps_equals_cross_entropy_in_values_and_gradients(chunk, temperature, block):
    from agentr1_trl.forward import projected_logps

    g = torch.Generator().manual_seed(0)
    states = torch.randn(10, 8, generator=g, dtype=torch.float64, requires_grad=True)
    head = torch.nn.Linear(8, 50, bias=False).double()
    targets = torch.randint(0, 50, (10,), generator=g)
    upstream = torch.randn(10, generator=g, dtype=torch.float64)

    got = projected_logps(states, head, targets, temperature, chunk, block)
    (got.double() * upstream).sum().backward()
    got_states, got_weight = states.grad.clone(), head.weight.grad.clone()
    states.grad = head.weight.grad = None
    want = -torch.nn.functional.cross_entropy(head(states) / temperature, targets, reduction="none")
    (want * upstream).sum().backward()

    assert torch.allclose(got.double(), want, atol=1e-5)
    assert torch.allclose(got_states, states.grad, atol=1e-5)
    assert torch.allclose(got_weight, head.weight.grad, atol=1e-5)


def test_projected_logps_under_autocast_recomputes_its_backward_in_bf16():
    """Under bf16 autocast the backward pass (which autocast does not reach) recomputes the logits in bf16, as the
    forward computed them: the same gradients as the direct path under autocast, and no float32 product of the
    (rows, vocabulary) size."""
    from agentr1_trl.forward import projected_logps
    from torch.utils._python_dispatch import TorchDispatchMode

    class Products(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.dtypes = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.mm.default and 1000 in (args[0].shape[-1], args[1].shape[-1]):
                self.dtypes.append(args[0].dtype)
            return func(*args, **(kwargs or {}))

    g = torch.Generator().manual_seed(0)
    states = torch.randn(24, 16, generator=g, requires_grad=True)
    head = torch.nn.Linear(16, 5000, bias=False)
    targets = torch.randint(0, 5000, (24,), generator=g)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = projected_logps(states, head, targets, 0.7, 8, 1000)  # vocabulary blocks of 1,000
    with Products() as products:
        got.sum().backward()
    assert products.dtypes and set(products.dtypes) == {torch.bfloat16}
    got_states, got_weight = states.grad.clone(), head.weight.grad.clone()
    states.grad = head.weight.grad = None
    with torch.autocast("cpu", dtype=torch.bfloat16):
        want = -torch.nn.functional.cross_entropy(head(states).float() / 0.7, targets, reduction="none")
    want.sum().backward()
    assert got.dtype == torch.float32 and torch.allclose(got, want, atol=0.05)
    assert torch.allclose(got_states, states.grad, atol=0.02, rtol=0.05)
    assert torch.allclose(got_weight, head.weight.grad, atol=0.02, rtol=0.05)


def test_projected_logps_keeps_no_vocabulary_sized_tensor_for_backward():
    """What autograd holds between the passes is the inputs and one number per row, not (rows, vocabulary)."""
    from agentr1_trl.forward import projected_logps

    states = torch.randn(32, 16, requires_grad=True)
    head = torch.nn.Linear(16, 5000, bias=False)
    saved: list[torch.Size] = []

    def pack(t):
        saved.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = projected_logps(states, head, torch.randint(0, 5000, (32,)), 0.7, 8)
    out.sum().backward()
    assert states.grad is not None and head.weight.grad is not None
    assert all(5000 not in shape or shape == head.weight.shape for shape in saved), saved


def test_projected_logps_frozen_head_gets_no_gradient():
    from agentr1_trl.forward import projected_logps

    states = torch.randn(6, 4, requires_grad=True)
    head = torch.nn.Linear(4, 9, bias=False).requires_grad_(False)
    projected_logps(states, head, torch.randint(0, 9, (6,))).sum().backward()
    assert head.weight.grad is None and states.grad is not None


def test_projected_logps_refuses_an_empty_block_or_chunk():
    from agentr1_trl.forward import projected_logps

    from agentr1_gym.errors import ConfigError

    states, head = torch.randn(4, 4), torch.nn.Linear(4, 9, bias=False)
    for chunk, block in ((256, 0), (0, None)):
        with pytest.raises(ConfigError, match="block=None for the default"):
            projected_logps(states, head, torch.randint(0, 9, (4,)), 1.0, chunk, block)


# ---- a micro-batch in several forward/backward passes, bounded by tokens ------------------------------------------
def test_update_passes_cover_every_row_once_within_the_budget():
    from agentr1_trl.forward import pass_tokens, select_rows, update_passes

    tok = tiny_tokenizer()
    pid, pm, cid, cm = _step_batch(tok)
    batch = {"prompt_ids": pid, "prompt_mask": pm, "completion_ids": cid, "completion_mask": cm,
             "advantages": torch.arange(5.0), "action_mask": cm.clone(), "num_items_in_batch": 17}  # fmt: skip
    assert [p.tolist() for p in update_passes(batch, 0)] == [[0, 1, 2, 3, 4]]  # no limit
    whole = pass_tokens(pm.sum(1), cm.sum(1), 0)
    assert [p.tolist() for p in update_passes(batch, whole)] == [[0, 1, 2, 3, 4]]
    for shared in (False, True):
        for budget in (1, 40, 60, 90):
            passes = update_passes(batch, budget, shared=shared)
            assert sorted(r for p in passes for r in p.tolist()) == [0, 1, 2, 3, 4]
            prefix = 20 if shared else 0
            for p in passes:
                part = select_rows(batch, p)
                cost = pass_tokens(part["prompt_mask"].sum(1), part["completion_mask"].sum(1), prefix)
                assert len(p) == 1 or cost <= budget
                # padding nobody needs is trimmed; the rows' real tokens are all there
                assert bool(part["prompt_mask"][:, 0].any()) and bool(part["completion_mask"][:, -1].any())
                assert torch.equal(part["prompt_mask"].sum(1), pm[p].sum(1))
                assert torch.equal(
                    part["completion_ids"][part["completion_mask"].bool()], cid[p][cm[p].bool()]
                )
                assert torch.equal(part["advantages"], batch["advantages"][p])
                assert part["num_items_in_batch"] == 17
        assert len(update_passes(batch, 60, shared=True)) < len(
            update_passes(batch, 60)
        )  # prefix counted once


def _loss_trainer(tmp_path, algo, loss_type):
    """A GRPO or PPO trainer (PPO with a non-trivial value head) in training mode, two micro-batches per step."""
    if algo == "grpo":
        trainer = _trainer(AgentGRPOTrainer, AgentGRPOConfig, tmp_path, loss_type=loss_type)
    else:
        trainer = _trainer(AgentPPOTrainer, AgentPPOConfig, tmp_path, loss_type=loss_type)
        torch.nn.init.normal_(trainer.value_head.weight, std=0.5)
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2  # as TRL's training loop sets it
    return trainer


def _add_loss_inputs(trainer, batch, algo, g):
    """The old policy's log-probs (a little off the current ones) and, for PPO, per-token advantages, returns and
    old values: what the loss reads besides the tokens."""
    cm = batch["completion_mask"]
    with torch.no_grad():
        batch["old_per_token_logps"] = trainer.token_logps(
            trainer.model, torch.cat([batch["prompt_ids"], batch["completion_ids"]], 1),
            torch.cat([batch["prompt_mask"], cm], 1), cm.size(1)) - 0.05  # fmt: skip
    if algo == "ppo":
        batch["advantages"] = torch.randn(cm.shape, generator=g) * cm
        batch["returns"] = torch.randn(cm.shape, generator=g) * cm
        batch["old_values"] = torch.randn(cm.shape, generator=g) * cm


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_several_passes_give_the_micro_batch_loss_and_gradient(tmp_path, algo, loss_type):
    """A micro-batch of step rows run as several passes under max_update_tokens: the loss TRL logs and the
    gradient it steps with are those of one pass over the micro-batch."""
    from agentr1_trl.forward import update_passes

    trainer = _loss_trainer(tmp_path, algo, loss_type)
    model = trainer.model
    pid, pm, cid, cm = _step_batch(trainer.processing_class)
    g = torch.Generator().manual_seed(1)
    action = cm * (torch.rand(cm.shape, generator=g) > 0.3)
    batch = {"prompt_ids": pid, "prompt_mask": pm, "completion_ids": cid, "completion_mask": cm,
             "action_mask": action, "advantages": torch.tensor([1.0, -0.5, 0.0, 2.0, -1.0]),
             "num_items_in_batch": torch.tensor(float(action.sum() * 3))}  # fmt: skip
    _add_loss_inputs(trainer, batch, algo, g)

    def run(budget):
        trainer.args.max_update_tokens = budget
        model.zero_grad()
        loss = trainer._compute_loss(model, dict(batch))
        loss.backward()
        return loss.detach(), _grads(model)

    with torch.no_grad():  # TRL's evaluation loss: the passes add up, nothing is backpropagated
        trainer.args.max_update_tokens = 0
        whole = trainer._compute_loss(model, dict(batch))
        trainer.args.max_update_tokens = 40
        assert torch.allclose(trainer._compute_loss(model, dict(batch)), whole, atol=1e-6, rtol=1e-5)
    one_loss, one_grads = run(0)
    assert len(update_passes(batch, 40, shared=True)) >= 3
    several_loss, several_grads = run(40)
    assert torch.allclose(several_loss, one_loss, atol=1e-6, rtol=1e-5)
    assert one_grads.keys() == several_grads.keys() and any("lora_" in k for k in one_grads)
    for k in one_grads:
        assert torch.allclose(several_grads[k], one_grads[k], atol=1e-6, rtol=1e-4), k


def test_the_update_budget_defaults_to_cpus_only(tmp_path):
    from agentr1_trl.hardware import CPU_UPDATE_TOKENS

    trainer = _trainer(AgentGRPOTrainer, AgentGRPOConfig, tmp_path)
    assert trainer.args.max_update_tokens is None and trainer.update_token_budget() == CPU_UPDATE_TOKENS
    assert (
        _trainer(
            AgentGRPOTrainer, AgentGRPOConfig, tmp_path / "one", max_update_tokens=0
        ).update_token_budget()
        == 0
    )
    with pytest.raises(ConfigError, match="max_update_tokens"):
        AgentGRPOConfig(output_dir=str(tmp_path), max_update_tokens=-1, use_cpu=True)


def test_every_log_prob_reader_goes_through_the_one_forward_and_agrees_with_trl(tmp_path):
    """The loss's log-probs without prompt sharing (before: TRL's own ``_get_per_token_logps_and_entropies``), the
    shared forward, the viewer's per-token statistics and the value head's states all read
    :func:`~agentr1_trl.forward.completion_states`, and agree with TRL's log-probs and the model's full logits."""
    from agentr1_trl.episodes import token_stats
    from agentr1_trl.forward import completion_states, sequence_states
    from agentr1_trl.value_head import state_values

    trainer = _trainer(AgentGRPOTrainer, AgentGRPOConfig, tmp_path)
    model = trainer.model.eval()
    pid, pm, cid, cm = _batch(trainer.processing_class)
    ids, attn, n = torch.cat([pid, cid], 1), torch.cat([pm, cm], 1), cid.size(1)
    mask = cm.bool()
    with torch.no_grad():
        trl_logps = trainer._get_per_token_logps_and_entropies(model, ids, attn, n)[0]
        trainer.args.share_prompt_prefix = False
        full = trainer.token_logps(model, ids, attn, n)
        trainer.args.share_prompt_prefix = True
        shared = trainer.token_logps(model, ids, attn, n)
        assert torch.allclose(full[mask], trl_logps[mask], atol=1e-5)
        assert torch.allclose(shared[mask], trl_logps[mask], atol=1e-5)
        assert bool((full[~mask] == 0).all())
        # the viewer's statistics: one unpadded episode, against log_softmax of the model's own logits
        row = 3
        prompt = pid[row][pm[row].bool()].tolist()
        completion = cid[row][cm[row].bool()].tolist()
        logps, entropy = token_stats(model, prompt, completion, temperature=trainer.temperature)
        logits = model(input_ids=torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        expected = torch.log_softmax(logits.float() / trainer.temperature, -1)
        assert torch.allclose(torch.tensor(logps), expected.gather(1, torch.tensor(completion)[:, None])[:, 0],
                              atol=1e-5)  # fmt: skip
        assert torch.allclose(torch.tensor(entropy), -(expected.exp() * expected).sum(-1), atol=1e-4)
        # the states before each completion token, shared or not, and the value head's last state
        states = completion_states(model, pid, pm, cid, cm)
        plain = completion_states(model, pid, pm, cid, cm, share_prompts=False)
        assert torch.allclose(states[mask], plain[mask], atol=1e-5)
        head = torch.nn.Linear(states.size(-1), 1)
        seqs = [prompt + completion, prompt]
        values = state_values(model, head, trainer.processing_class, seqs)
        alone = [head(sequence_states(model, torch.tensor([s]), torch.ones(1, len(s), dtype=torch.long))[0, -1])
                 for s in seqs]  # fmt: skip
        assert torch.allclose(values, torch.cat(alone), atol=1e-5)
    with pytest.raises(ValueError, match="at least one prompt token"):
        completion_logps(model, pid[:, :0], pm[:, :0], cid, cm)


def _groups_batch(tok, seed=0):
    """8 rows of 2 GRPO groups (prompts of 9 and 40 tokens), completions of 2-30 tokens, in the shuffled order
    TRL cuts micro-batches from; padded to the batch's longest prompt and completion, as TRL pads them."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(10, 200, (n,), generator=g).tolist() for n in (9, 40)]
    rows = [1, 0, 0, 1, 0, 1, 1, 0]
    lengths = [30, 2, 11, 4, 25, 17, 9, 6]
    pad = tok.pad_token_id
    wp, wc = 40, 30
    pid, pm = torch.full((8, wp), pad), torch.zeros((8, wp), dtype=torch.long)
    cid, cm = torch.full((8, wc), pad), torch.zeros((8, wc), dtype=torch.long)
    for r, (p, n) in enumerate(zip(rows, lengths)):
        pid[r, wp - len(prompts[p]) :], pm[r, wp - len(prompts[p]) :] = torch.tensor(prompts[p]), 1
        cid[r, :n], cm[r, :n] = torch.randint(10, 200, (n,), generator=g), 1
    action = cm * (torch.rand(cm.shape, generator=g) > 0.3)
    return {"prompt_ids": pid, "prompt_mask": pm, "completion_ids": cid, "completion_mask": cm,
            "action_mask": action, "advantages": torch.randn(8, generator=g),
            "episode": list(range(8)), "num_items_in_batch": torch.tensor(float(action.sum()))}  # fmt: skip


def test_regrouped_micro_batches_hold_the_same_rows_a_group_together_trimmed():
    from agentr1_trl.forward import regroup_micro_batches
    from trl.trainer.utils import split_tensor_dict

    batch = _groups_batch(tiny_tokenizer())
    chunks = regroup_micro_batches(split_tensor_dict(batch, 2))
    assert [c["prompt_ids"].size(0) for c in chunks] == [4, 4]
    seen = sorted(e for c in chunks for e in c["episode"])
    assert seen == list(range(8))  # every row once, lists travel with their rows
    for c in chunks:
        assert len({tuple(r[m.bool()].tolist()) for r, m in zip(c["prompt_ids"], c["prompt_mask"])}) == 1
        assert c["num_items_in_batch"] is batch["num_items_in_batch"]
        for i, e in enumerate(c["episode"]):  # each row's tokens and per-row values are its own
            n = int(batch["completion_mask"][e].sum())
            assert torch.equal(c["completion_ids"][i, :n], batch["completion_ids"][e, :n])
            assert torch.equal(c["action_mask"][i, :n], batch["action_mask"][e, :n])
            assert c["advantages"][i] == batch["advantages"][e]
    # each micro-batch is as wide as its own rows: the short prompt's group drops 31 prompt columns
    widths = sorted(c["prompt_ids"].size(1) + c["completion_ids"].size(1) for c in chunks)
    assert widths == [9 + 25, 40 + 30]


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_regrouped_micro_batches_give_the_steps_loss_and_gradient(tmp_path, algo, loss_type):
    """A step's micro-batches as TRL cuts them and regrouped: the summed loss and the gradient are the same."""
    from agentr1_trl.forward import regroup_micro_batches
    from trl.trainer.utils import split_tensor_dict

    trainer = _loss_trainer(tmp_path, algo, loss_type)
    model = trainer.model
    batch = _groups_batch(trainer.processing_class)
    del batch["episode"]
    _add_loss_inputs(trainer, batch, algo, torch.Generator().manual_seed(3))

    def run(chunks):
        model.zero_grad()
        total = 0.0
        for chunk in chunks:
            loss = trainer._compute_loss(model, dict(chunk))
            loss.backward()
            total += float(loss.detach())
        return total, _grads(model)

    shuffled_loss, shuffled = run(split_tensor_dict(batch, 2))
    regrouped_loss, regrouped = run(regroup_micro_batches(split_tensor_dict(batch, 2)))
    assert regrouped_loss == pytest.approx(shuffled_loss, rel=1e-5, abs=1e-6)
    assert shuffled.keys() == regrouped.keys() and any("lora_" in k for k in shuffled)
    for k in shuffled:
        assert torch.allclose(regrouped[k], shuffled[k], atol=1e-6, rtol=1e-4), k


# ---- rows that need no attention mask (agentr1_trl.causal_rows) ---------------------------------------------
def test_rows_are_causal_only_without_prompt_padding_and_with_completions_padded_at_their_end():
    from agentr1_trl.causal_rows import rows_are_causal

    ones = torch.ones((2, 4), dtype=torch.long)
    right = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert rows_are_causal(ones, right)
    assert rows_are_causal(ones, torch.zeros((2, 0), dtype=torch.long))
    assert rows_are_causal(ones, torch.zeros((2, 3), dtype=torch.long))  # empty completions: nothing attends
    assert not rows_are_causal(torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]]), right)  # a left-padded prompt
    assert not rows_are_causal(ones, torch.tensor([[1, 0, 1, 0], [1, 1, 1, 1]]))  # a hole in a completion


def _kernel_calls(monkeypatch):
    """Every call of PyTorch's attention: (queries, keys, mask given, is_causal, grouped keys kept grouped)."""
    import torch.nn.functional as F

    calls, real = [], F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, *a, is_causal=False, enable_gqa=False, **kw):
        grouped = enable_gqa or k.shape[1] < q.shape[1]
        calls.append((q.shape[2], k.shape[2], attn_mask is not None, is_causal, grouped))
        return real(q, k, v, attn_mask, *a, is_causal=is_causal, enable_gqa=enable_gqa, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    return calls


def _lora_group(prompt, lengths):
    """A tiny LoRA model whose adapters change its output (B starts at zero: drawn here), and one group's rows: a
    shared prompt of ``prompt`` tokens, completions of ``lengths`` tokens right-padded to the longest."""
    from agentr1_trl.pipeline import lora_config
    from peft import get_peft_model

    torch.manual_seed(0)
    model = get_peft_model(tiny_model(tiny_tokenizer(), hidden_size=64), lora_config(8))
    for name, p in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(p, std=0.1)
    g = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    width = max(lengths) or 1
    pid = torch.randint(10, vocab, (1, prompt), generator=g).repeat(len(lengths), 1)
    cid = torch.randint(10, vocab, (len(lengths), width), generator=g)
    cm = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return model, pid, cid, cm


def _group_pass(model, rows, calls, **settings):
    """``completion_logps`` of a group's rows (``_lora_group``) under ``settings``, then the backward pass of their
    sum: the masked log-probs, the gradients and the attention kernel's calls."""
    pid, cid, cm = rows
    model.zero_grad()
    calls.clear()
    logps, _ = completion_logps(model, pid, torch.ones_like(pid), cid, cm, **settings)
    (logps * cm).sum().backward()
    return logps * cm, _grads(model), list(calls)


@pytest.mark.parametrize(
    "prompt,lengths,share,kernel",
    [
        (8, [20, 13, 0], True, "causal"),  # a group on its prompt's cache (zero queries in front)
        (8, [20, 13], False, "causal"),  # whole rows
        (40, [6, 4], True, "mask"),  # a short continuation of a long cache: the mask's way
    ],
)
def test_unmasked_causal_rows_give_the_masked_log_probs_and_gradients(
    monkeypatch, prompt, lengths, share, kernel
):
    """The same rows with transformers' padding mask and without any: equal log-probs and LoRA gradients, and the
    kernel asked for causality (no mask, grouped keys and values not copied out) where the rows allow it."""
    from agentr1_trl.causal_rows import CAUSAL_ROWS_ATTENTION

    model, pid, cid, cm = _lora_group(prompt, lengths)
    calls = _kernel_calls(monkeypatch)

    def run(unmasked):
        return _group_pass(model, (pid, cid, cm), calls, share_prompts=share, unmasked_causal_rows=unmasked)

    masked, masked_grads, masked_calls = run(False)
    unmasked, unmasked_grads, unmasked_calls = run(True)
    assert (
        model.config._attn_implementation == "sdpa" != CAUSAL_ROWS_ATTENTION
    )  # switched for the passes only
    assert torch.allclose(unmasked, masked, atol=1e-5)
    assert masked_grads.keys() == unmasked_grads.keys() and any("lora_" in k for k in masked_grads)
    for k in masked_grads:
        assert torch.allclose(unmasked_grads[k], masked_grads[k], atol=1e-5, rtol=1e-4), k
    passes = [c for c in unmasked_calls if c[0] > 1]  # (a 1-query pass is the prompt's last position)
    assert passes and any(has_mask for _, _, has_mask, _, _ in masked_calls)
    if kernel == "causal":
        assert all(not has_mask and causal and grouped for _, _, has_mask, causal, grouped in passes), passes
    else:  # the prompt's own pass is causal, the completion's on its cache keeps the mask
        assert any(q < k and has_mask and not causal for q, k, has_mask, causal, _ in passes), passes
        assert all(has_mask or (q == k and causal) for q, k, has_mask, causal, _ in passes), passes


def test_padded_prompts_keep_the_mask_and_other_attentions_are_left_alone(monkeypatch):
    """Rows whose prompts are padded need the mask; a model not on SDPA attention (eager here) is not switched,
    and a pass that raises leaves the model's attention as it was."""
    from agentr1_trl.causal_rows import causal_rows

    tok = tiny_tokenizer()
    model = tiny_model(tok, hidden_size=64)
    pid, pm, cid, cm = _batch(tok)
    calls = _kernel_calls(monkeypatch)
    completion_logps(model, pid, pm, cid, cm)
    assert calls and all(has_mask for q, _, has_mask, _, _ in calls if q > 1)
    with pytest.raises(RuntimeError), causal_rows(model) as switched:
        assert switched and model.config._attn_implementation != "sdpa"
        raise RuntimeError("a failing pass")
    assert model.config._attn_implementation == "sdpa"
    model.config._attn_implementation = "eager"
    with causal_rows(model) as switched:
        assert not switched and model.config._attn_implementation == "eager"


@pytest.mark.parametrize("algo", ["grpo", "ppo"])
def test_a_step_with_and_without_unmasked_causal_rows_has_the_same_loss_and_gradient(tmp_path, algo):
    """Regrouped micro-batches (one group each: no prompt padding) through the trainer, unmasked_causal_rows on
    (the default) and off: the same summed loss and gradient."""
    from agentr1_trl.forward import regroup_micro_batches
    from trl.trainer.utils import split_tensor_dict

    trainer = _loss_trainer(tmp_path, algo, "grpo")
    assert trainer.args.unmasked_causal_rows
    model = trainer.model
    batch = _groups_batch(trainer.processing_class)
    del batch["episode"]
    _add_loss_inputs(trainer, batch, algo, torch.Generator().manual_seed(3))
    chunks = regroup_micro_batches(split_tensor_dict(batch, 4))

    def run(unmasked):
        trainer.args.unmasked_causal_rows = unmasked
        model.zero_grad()
        losses = []
        for c in chunks:
            loss = trainer._compute_loss(model, dict(c))
            loss.backward()
            losses.append(float(loss.detach()))
        return sum(losses), _grads(model)

    on_loss, on = run(True)
    off_loss, off = run(False)
    assert on_loss == pytest.approx(off_loss, rel=1e-5, abs=1e-6)
    for k in off:
        assert torch.allclose(on[k], off[k], atol=1e-6, rtol=1e-4), k


def test_models_with_a_sliding_window_keep_the_mask():
    """A sliding window's mask is not causality alone: such models are not switched."""
    from agentr1_trl.causal_rows import causal_rows

    model = tiny_model(tiny_tokenizer(), hidden_size=64)
    model.config.layer_types = ["sliding_attention", *model.config.layer_types[1:]]
    with causal_rows(model) as switched:
        assert not switched


def _warm_start_batch(seed: int, scored: float):
    """A tiny LoRA model, its tokenizer and three warm-start samples of random tokens (prompts of 7, 12 and 3,
    completions of 20, 5 and 9), each completion token the assistant's with probability ``scored``."""
    from agentr1_trl.pipeline import lora_config
    from peft import get_peft_model

    from agentr1_gym.rollout import Sample

    tok = tiny_tokenizer()
    torch.manual_seed(0)
    model = get_peft_model(tiny_model(tok, hidden_size=64), lora_config(8))
    g = torch.Generator().manual_seed(seed)

    def sample(prompt, completion):
        ids = torch.randint(10, 200, (prompt + completion,), generator=g).tolist()
        mask = (torch.rand(completion, generator=g) < scored).long().tolist()
        return Sample(ids[:prompt], ids[prompt:], mask, [0.0] * completion, [0.0] * completion)

    return model, tok, [sample(7, 20), sample(12, 5), sample(3, 9)]


def test_the_warm_starts_right_padded_rows_attend_unmasked_with_the_same_loss_and_gradient(monkeypatch):
    """The warm start's batches are right-padded rows: without a mask, the same NLL and gradient as with it."""
    import contextlib

    from agentr1_trl import sft

    model, tok, batch = _warm_start_batch(2, 0.7)
    calls = _kernel_calls(monkeypatch)

    def run():
        model.zero_grad()
        calls.clear()
        loss = sft._masked_nll(model, batch, tok.pad_token_id, torch.device("cpu"))
        loss.backward()
        return loss.item(), _grads(model), list(calls)

    unmasked_loss, unmasked, unmasked_calls = run()
    monkeypatch.setattr(sft, "causal_rows", lambda model: contextlib.nullcontext(False))
    masked_loss, masked, masked_calls = run()
    assert all(not has_mask and causal for _, _, has_mask, causal, _ in unmasked_calls)
    assert all(has_mask for _, _, has_mask, _, _ in masked_calls)
    assert unmasked_loss == pytest.approx(masked_loss, rel=1e-6)
    for k in masked:
        assert torch.allclose(unmasked[k], masked[k], atol=1e-6, rtol=1e-4), k


@pytest.mark.parametrize("bf16", [False, True])
def test_the_warm_starts_nll_is_the_models_own_loss_with_the_head_only_where_scored(monkeypatch, bf16):
    """The warm start's NLL projects only the assistant tokens' states onto the vocabulary: the same loss and LoRA
    gradients as the model's own ``labels=`` loss (which projects every position), under bf16 autocast too; the
    projection sees only the scored positions; a batch without an assistant token is a zero, not a NaN."""
    from agentr1_trl import forward, sft

    from agentr1_gym.rollout import Sample

    model, tok, batch = _warm_start_batch(3, 0.5)
    scored = sum(sum(s.action_mask) for s in batch)
    projected = []
    real = forward.projected_logps
    monkeypatch.setattr(
        sft, "projected_logps", lambda states, *a: projected.append(len(states)) or real(states, *a)
    )

    def run(fn):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = fn()
        loss.backward()
        return loss.item(), _grads(model)

    got, got_grads = run(lambda: sft._masked_nll(model, batch, tok.pad_token_id, torch.device("cpu")))
    assert projected == [scored]

    def own_loss():
        ids, att, labels = sft.padded_rows(batch, tok.pad_token_id)
        return model(input_ids=ids, attention_mask=att, labels=labels).loss

    want, want_grads = run(own_loss)
    assert got == pytest.approx(want, rel=2e-2 if bf16 else 1e-5)
    assert set(got_grads) == set(want_grads)
    for k in want_grads:
        tol = dict(atol=1e-3, rtol=0.1) if bf16 else dict(atol=1e-6, rtol=1e-4)
        assert torch.allclose(got_grads[k], want_grads[k], **tol), k
    silent = [Sample(s.prompt_ids, s.completion_ids, [0] * len(s.action_mask), s.logprobs, s.token_rewards)
              for s in batch]  # fmt: skip
    assert sft._masked_nll(model, silent, tok.pad_token_id, torch.device("cpu")).item() == 0.0


# ---- the block attention kernel in the update's passes (agentr1_trl.block_attention) -----------------------
@pytest.mark.parametrize(
    "prompt,lengths,share", [(8, [20, 13, 0], True), (8, [20, 13], False), (40, [6, 4], True)]
)
def test_the_block_kernel_gives_sdpas_log_probs_and_gradients(monkeypatch, prompt, lengths, share):
    """Causal rows through the block kernel (``attention_kernel="block"``) and through PyTorch's SDPA: equal
    log-probs and LoRA gradients (float32), on a prompt's cache and on whole rows, and PyTorch's kernel is then
    called for no pass of more than one query."""
    model, pid, cid, cm = _lora_group(prompt, lengths)
    calls = _kernel_calls(monkeypatch)

    def run(kernel):
        return _group_pass(model, (pid, cid, cm), calls, share_prompts=share, attention_kernel=kernel)

    sdpa, sdpa_grads, sdpa_calls = run("sdpa")
    block, block_grads, block_calls = run("block")
    assert [c for c in sdpa_calls if c[0] > 1] and not [c for c in block_calls if c[0] > 1]
    assert torch.allclose(block, sdpa, atol=1e-5)
    assert any("lora_" in k for k in sdpa_grads)
    for k in sdpa_grads:
        assert torch.allclose(block_grads[k], sdpa_grads[k], atol=1e-5, rtol=1e-4), k


def test_auto_attends_bf16_rows_through_the_block_kernel_and_float32_rows_through_sdpa(monkeypatch):
    """``attention_kernel="auto"`` (the default): bf16 rows on a CPU take the block kernel, float32 rows PyTorch's;
    an unknown kernel is a typed error in the config and a ValueError in the forward."""
    from agentr1_trl import block_attention

    seen = []
    real = block_attention.block_causal_attention

    def counted(*a, **kw):
        seen.append(a[0].dtype)
        return real(*a, **kw)

    monkeypatch.setattr(block_attention, "block_causal_attention", counted)
    tok = tiny_tokenizer()
    model = tiny_model(tok, hidden_size=64)
    pid = torch.randint(10, 200, (2, 9), generator=torch.Generator().manual_seed(0))
    cid, cm = pid.flip(1), torch.ones_like(pid)
    completion_logps(model, pid, torch.ones_like(pid), cid, cm)
    assert not seen
    completion_logps(model.to(torch.bfloat16), pid, torch.ones_like(pid), cid, cm)
    assert seen and set(seen) == {torch.bfloat16}
    with pytest.raises(ValueError, match="not one of auto, sdpa, block"):
        completion_logps(model, pid, torch.ones_like(pid), cid, cm, attention_kernel="flash")
    # gradient checkpointing recomputes each layer after the pass, under SDPA: the pass keeps PyTorch's kernel
    seen.clear()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    model.get_input_embeddings().weight.requires_grad_(True)
    logps, _ = completion_logps(model, pid, torch.ones_like(pid), cid, cm, share_prompts=False)
    logps.sum().backward()
    assert not seen and model.get_input_embeddings().weight.grad is not None
    with pytest.raises(ConfigError, match="attention_kernel"):
        AgentGRPOConfig(output_dir="/tmp/x", attention_kernel="flash", use_cpu=True, report_to="none")
