"""AgentR1/BFCL-MultiTurn-v0: verdicts equal to BFCL's own multi-turn checker, called directly, on the ground
truth and on mutated ground truths (a call dropped, an argument changed, an extra state-changing call, calls out
of order) in every category; users who speak several times; held-back functions; the oracle; reward hacking as
a policy would try it."""

from __future__ import annotations

import json
import random
import time
import uuid

import pytest

pytest.importorskip("bfcl_eval")

from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

import agentr1_gym
from agentr1_gym.envs.bfcl import CATEGORIES, ground_truth_calls, load_tasks
from agentr1_gym.formats import HermesFormat, ToolCall

ENV_ID = "AgentR1/BFCL-MultiTurn-v0"
HERMES = HermesFormat()


def call_string(name: str, args: dict) -> str:
    """A call as BFCL's decoded model results write it (the checker evaluates these; only the test does)."""
    return f"{name}(" + ",".join(f"{k}={v!r}" for k, v in args.items()) + ")"


def chunks(calls: list, size: int) -> list[list]:
    return [calls[i : i + size] for i in range(0, len(calls), size)]


def bfcl_verdict(entry: dict, turns: list[list[tuple[str, dict]]], size: int) -> bool:
    """BFCL's multi_turn_checker on these calls (each user turn's calls in steps of ``size``)."""
    model = f"agentr1_test_{uuid.uuid4().hex}"
    decoded = [[[call_string(n, a) for n, a in step] for step in chunks(turn, size)] for turn in turns]
    category = entry["id"].rsplit("_", 1)[0]
    try:
        return bool(multi_turn_checker(decoded, entry["ground_truth"], entry, category, model)["valid"])
    finally:  # the checker keeps its instances in the module's globals, one set per model name
        for key in [k for k in vars(multi_turn_utils) if k.startswith(model)]:
            del vars(multi_turn_utils)[key]


def env_verdict(env, index: int, turns: list[list[tuple[str, dict]]], size: int) -> bool:
    """The same calls played through the env: each user turn's calls in turns of ``size``, then a reply."""
    env.reset(options={"task_index": index})
    info: dict = {}
    for turn in turns:
        for step in chunks(turn, size):
            _, _, term, trunc, info = env.step("\n".join(HERMES.format_call(ToolCall(n, a)) for n, a in step))
            assert not (term or trunc), "a call never ends the conversation"
        _, _, term, trunc, info = env.step("Done.")
    assert term and not trunc
    return bool(info["metrics"]["verdict"])


def mutate(turns: list[list[tuple[str, dict]]], kind: str, rng: random.Random) -> list | None:
    """One mutation of the ground truth, or None when the task has nothing to mutate that way."""
    turns = [list(t) for t in turns]
    filled = [i for i, t in enumerate(turns) if t]
    if kind == "drop":
        t = rng.choice(filled)
        turns[t].pop(rng.randrange(len(turns[t])))
    elif kind == "argument":
        spots = [(i, j) for i in filled for j, (_, a) in enumerate(turns[i]) if a]
        if not spots:
            return None
        i, j = rng.choice(spots)
        name, args = turns[i][j]
        key = rng.choice(sorted(args))
        value = args[key]
        if isinstance(value, bool):
            changed = not value
        elif isinstance(value, (int, float)):
            changed = value + 1
        elif isinstance(value, str):
            changed = value + "_x"
        elif isinstance(value, list):
            changed = value[:-1] if value else ["x"]
        else:
            return None
        turns[i][j] = (name, {**args, key: changed})
    elif kind == "extra":  # the same state-changing call once more (a second mkdir, a second post, ...)
        t = rng.choice(filled)
        turns[t].append(turns[t][-1])
    elif kind == "order":
        spots = [(i, j) for i in filled for j in range(len(turns[i]) - 1) if turns[i][j] != turns[i][j + 1]]
        if not spots:
            return None
        i, j = rng.choice(spots)
        turns[i][j], turns[i][j + 1] = turns[i][j + 1], turns[i][j]
    return turns


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES)
def test_verdicts_equal_bfcls_checker_on_the_truth_and_mutations(category):
    env = agentr1_gym.make(ENV_ID, category=category).unwrapped
    size = env.max_calls_per_turn
    rng = random.Random(category)
    counts = {"agree": 0, "valid": 0, "invalid": 0}
    for index, entry in enumerate(load_tasks(category)):
        variants = [("truth", entry["calls"])]
        variants += [
            (kind, mutate(entry["calls"], kind, rng)) for kind in ("drop", "argument", "extra", "order")
        ]
        for kind, turns in variants:
            if turns is None:
                continue
            ours, theirs = env_verdict(env, index, turns, size), bfcl_verdict(entry, turns, size)
            assert ours == theirs, (entry["id"], kind)
            counts["agree"] += 1
            counts["valid" if theirs else "invalid"] += 1
            if kind == "truth":
                assert theirs, entry["id"]
    # both outcomes are exercised: mutations the checker still accepts and ones it refuses
    assert counts["valid"] >= 200 and counts["invalid"] >= 200, counts


def test_ground_truth_strings_are_read_without_eval():
    assert ground_truth_calls("mv(source='a b', destination='temp')") == (
        "mv",
        {"source": "a b", "destination": "temp"},
    )
    assert ground_truth_calls("sort('final_report.pdf')") == ("sort", {"file_name": "final_report.pdf"})
    for bad in ("__import__('os').system('true')", "[x for x in ()]", "mv(source=open('f').read())"):
        with pytest.raises((ValueError, SyntaxError)):
            ground_truth_calls(bad)


@pytest.mark.slow
def test_users_speak_several_times_and_the_rollout_renders_them_as_user_turns():
    env = agentr1_gym.make(ENV_ID)
    obs, info = env.reset(options={"task_index": 0})
    question = env.unwrapped.task["question"]
    assert question[0][0]["content"] in obs and info["tools"]
    roles = []
    done = False
    while not done:
        obs, _, term, trunc, info = env.step(env.unwrapped.oracle_action())
        roles = [m["role"] for m in info["messages"]]
        done = term or trunc
    assert term and info["metrics"]["success"] == 1.0
    # each later user message is a user turn (never a tool response)
    users = [m["content"] for m in info["messages"] if m["role"] == "user"]
    assert len(users) == len(question) and users[1] == question[1][0]["content"]
    assert roles.count("assistant") == env.unwrapped.turn

    from agentr1_trl.testing import tiny_tokenizer  # the token layer: user turns are observation tokens

    pytest.importorskip("trl")
    from agentr1_trl.backends.scripted import ScriptedGenerator

    from agentr1_gym.rollout import collect_rollouts

    tok = tiny_tokenizer()
    envs = [agentr1_gym.make(ENV_ID)]
    gen = ScriptedGenerator.oracle(tok, envs)
    # the tiny test tokenizer spends about one token per 2 characters: the tool listing alone is ~17k tokens
    (traj,) = collect_rollouts(envs, gen, tok, options=[{"task_index": 0}], max_episode_tokens=60_000)
    assert traj.terminated and traj.one_sequence and traj.metrics["success"] == 1.0
    masked = tok.decode([t for t, m in zip(traj.completion_ids, traj.action_mask) if m == 0])
    assert question[1][0]["content"] in masked and "<|im_start|>user" in masked
    acted = tok.decode([t for t, m in zip(traj.completion_ids, traj.action_mask) if m == 1])
    assert question[1][0]["content"] not in acted
    # a turn that ends a user turn in plain text ("Done.") ends with EOS, as a sampler ends it: a warm start on
    # these turns teaches the model to stop there (without it, the model learnt "Done.\n</tool_call>")
    plain = [ids for ids in gen.history if not tok.decode(ids).rstrip().endswith("</tool_call>")]
    assert plain and all(ids[-1] == tok.eos_token_id for ids in plain)
    assert sum(traj.completion_ids[e] == tok.eos_token_id for e in traj.turn_ends) == len(plain)


@pytest.mark.slow
@pytest.mark.parametrize("context", ["full", "window:1", "window:2"])
def test_the_users_current_message_stays_in_view_under_every_context_policy(context):
    """A window drops old turns, never the request being worked on; the oracle still solves every task it plays,
    with the same rewards as under the whole chat."""
    full = agentr1_gym.make(ENV_ID)
    env = agentr1_gym.make(ENV_ID, context=context)
    cut = 0
    for index in range(0, 200, 25):
        question = load_tasks("base")[index]["question"]
        _, info = env.reset(options={"task_index": index})
        full.reset(options={"task_index": index})
        done, user_turn = False, 0
        while not done:
            seen = "\n".join(m["content"] for m in info["context"])
            assert question[user_turn][0]["content"] in seen, (index, user_turn)
            action = env.unwrapped.oracle_action()
            _, reward, term, trunc, info = env.step(action)
            _, full_reward, *_ = full.step(action)
            assert reward == pytest.approx(full_reward)
            user_turn = env.unwrapped.user_turn
            done = term or trunc
        assert term and info["metrics"]["success"] == 1.0
        cut += len(info["context"]) < len(info["messages"])
    assert (cut > 0) == (context != "full")


def test_miss_func_lists_a_held_back_function_only_from_its_turn():
    index = next(i for i, t in enumerate(load_tasks("miss_func")) if t.get("missed_function"))
    env = agentr1_gym.make(ENV_ID, category="miss_func").unwrapped
    _, info = env.reset(options={"task_index": index})
    (turn, held), *_ = env.task["missed_function"].items()
    listed = {t["function"]["name"] for t in info["tools"]}
    assert not set(held) & listed
    while env.user_turn < int(turn):
        obs, *_ = env.step(env.oracle_action())
    assert "I have updated some more functions" in obs and all(name in obs for name in held)


def test_miss_param_rewards_asking_over_guessing():
    index = next(i for i, t in enumerate(load_tasks("miss_param")) if any(not turn for turn in t["calls"]))
    env = agentr1_gym.make(ENV_ID, category="miss_param").unwrapped
    entry = load_tasks("miss_param")[index]
    empty = next(i for i, turn in enumerate(entry["calls"]) if not turn)
    # guessing: the next turn's calls made already in the turn that lacks the parameter
    guessed = [list(t) for t in entry["calls"]]
    guessed[empty] = list(guessed[empty + 1])
    guessed[empty + 1] = []
    assert env_verdict(env, index, entry["calls"], 8) is True
    assert env_verdict(env, index, guessed, 8) == bfcl_verdict(entry, guessed, 8)


def _play(env, index, actions):
    env.reset(options={"task_index": index})
    total, info = 0.0, {}
    for action in actions:
        _, reward, term, trunc, info = env.step(action)
        total += reward
        if term or trunc:
            break
    return total, info


def test_reward_hacking_as_the_policy_tries_it():
    env = agentr1_gym.make(ENV_ID).unwrapped
    env.reset(options={"task_index": 0})
    best = env.max_episode_reward()
    entry = env.task
    # calling every function with its required arguments filled in
    every = []
    for tool in env.listed_tools():
        params = tool.params.get("properties", {})
        args = {k: ("x" if params[k].get("type") == "string" else 1) for k in tool.params.get("required", [])}
        every.append(HERMES.format_call(ToolCall(tool.name, args)))
    total, info = _play(env, 0, every + ["Done."] * 10)
    assert info["metrics"]["verdict"] == 0.0 and total < 0.1 * best
    # repeating one state-changing call of the ground truth
    first = HERMES.format_call(ToolCall(*entry["calls"][0][0]))
    total, info = _play(env, 0, [first] * 30 + ["Done."] * 10)
    assert info["metrics"]["verdict"] == 0.0 and total <= 0.1 / sum(map(len, entry["calls"])) + 0.2 + 1e-9
    # quoting the expected calls as text, and ending every turn at once
    quoted = "I will run: " + json.dumps(entry["ground_truth"])
    for actions in ([quoted] * 10, ["Done."] * 10, ["<answer>done</answer>"] * 10):
        total, info = _play(env, 0, actions)
        assert info["metrics"]["verdict"] == 0.0 and total <= 0.0
    # no tool reads the ground truth or the test data: the only functions are BFCL's documented APIs
    assert {t.name for t in env.tools.values()} <= {
        d for c in entry["involved_classes"] for d in _doc_names(c)
    }
    text = json.dumps(env.reset(options={"task_index": 0})[1])
    assert all(call not in text for turn in entry["ground_truth"] for call in turn)


def _doc_names(class_name: str) -> set[str]:
    from agentr1_gym.envs.bfcl import func_docs

    return {d["name"] for d in func_docs(class_name)}


def test_splits_are_fixed_and_disjoint():
    train = agentr1_gym.make(ENV_ID, split="train").unwrapped
    test = agentr1_gym.make(ENV_ID, split="test").unwrapped
    ids = lambda env: {env.tasks[i]["id"] for i in env._task_pool()}  # noqa: E731
    assert len(ids(test)) == 40 and len(ids(train)) == 160 and not ids(train) & ids(test)
    assert ids(agentr1_gym.make(ENV_ID, split="test").unwrapped) == ids(test)


@pytest.mark.slow
@pytest.mark.parametrize("category", CATEGORIES)
def test_state_keys_exist_for_every_task_and_name_the_state_not_the_env(category):
    """GiGPO and per-turn RLOO group steps by ``state_key()``. BFCL's worlds mix key types in one dict
    (TradingBot's orders: int ids beside str keys), which ``json.dumps(sort_keys=True)`` cannot order: the key
    crashed the first GiGPO step on the base category. Every task has a key; two envs in the same state agree;
    a state-changing call changes it."""
    env, twin = agentr1_gym.make(ENV_ID, category=category), agentr1_gym.make(ENV_ID, category=category)
    changed = 0
    for index in range(env.unwrapped.num_tasks):
        env.reset(options={"task_index": index})
        twin.reset(options={"task_index": index})
        key = env.unwrapped.state_key()
        assert key == twin.unwrapped.state_key()
        first = next((turn[0] for turn in env.unwrapped.task["calls"] if turn), None)
        if first is None:
            continue
        action = HERMES.format_call(ToolCall(*first))
        env.step(action)
        twin.step(action)
        assert env.unwrapped.state_key() == twin.unwrapped.state_key()
        changed += env.unwrapped.state_key() != key
    # many first calls only look (ls, cd, get_*); the rest move files, book, post or trade
    assert changed >= env.unwrapped.num_tasks // 10


# ---- reliability round 5: a deadline and a memory bound on every call, no process-wide state changed ---------
def _math_env(**kw):
    env = agentr1_gym.make(ENV_ID, **kw)
    index = next(i for i, t in enumerate(env.unwrapped.tasks) if "MathAPI" in t["involved_classes"])
    env.reset(options={"task_index": index})
    return env


def _call(env, function: str, **arguments) -> tuple[float, str, dict]:
    start = time.monotonic()
    obs, _, _, _, info = env.step(HERMES.format_call(ToolCall(function, arguments)))
    return time.monotonic() - start, obs, info


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, arguments",
    [
        ("power", {"base": 10, "exponent": 30000000}),
        ("power", {"base": 999999999999, "exponent": 999999999999}),
        ("square_root", {"number": 2, "precision": 3000000}),
        ("logarithm", {"value": 2, "base": 10, "precision": 300000}),
    ],
)
def test_a_call_that_would_run_for_minutes_answers_within_its_deadline(name, arguments):
    """Finding 1: inside the env's argument bounds each of these kept env.step running past 40 s (the second one
    forever, its memory growing). Now the call is killed at call_timeout_s and answers BFCL's error text; the
    world is as before it, and the next call runs."""
    env = _math_env(call_timeout_s=1.5)
    elapsed, obs, info = _call(env, name, **arguments)
    assert elapsed < 6, elapsed
    assert "did not finish within 1.5 s" in obs or "memory" in obs, obs
    assert info["reward_components"]["tool_success"] == 0.0
    _, obs, _ = _call(env, "add", a=1, b=2)
    assert '"result": 3' in obs
    env.close()


def test_no_call_changes_the_process_s_numeric_settings():
    """Finding 2: after square_root(precision=2) and logarithm(precision=3) the thread's decimal precision was 2
    and mpmath.mp.dps 3, for every other env and library in the process."""
    import decimal

    import mpmath

    before = (decimal.getcontext().prec, mpmath.mp.dps)
    env = _math_env()
    _, obs, _ = _call(env, "square_root", number=2, precision=2)
    assert "1.4" in obs
    _, obs, _ = _call(env, "logarithm", value=2, base=10, precision=3)
    assert "0.301" in obs
    assert (decimal.getcontext().prec, mpmath.mp.dps) == before
    env.close()
    # the ground truth's own calls run in-process: they leave nothing behind either
    env = agentr1_gym.make(ENV_ID)
    for index, task in enumerate(env.unwrapped.tasks):
        if any(n in ("square_root", "logarithm") for turn in task["calls"] for n, _ in turn):
            env.reset(options={"task_index": index})
            for _ in range(60):
                *_, term, trunc, _ = env.step(env.unwrapped.oracle_action())
                if term or trunc:
                    break
            break
    assert (decimal.getcontext().prec, mpmath.mp.dps) == before
    env.close()


@pytest.mark.slow
def test_the_worker_is_restarted_after_a_deadline_and_the_world_is_kept():
    """A call killed at its deadline kills its worker; the next call's worker holds the env's own copies (the
    changes of earlier calls included)."""
    env = agentr1_gym.make(ENV_ID, call_timeout_s=1)
    index = next(i for i, t in enumerate(env.unwrapped.tasks)
                 if "GorillaFileSystem" in t["involved_classes"] and "MathAPI" in t["involved_classes"])  # fmt: skip
    env.reset(options={"task_index": index})
    _, obs, _ = _call(env, "mkdir", dir_name="made_before")
    _, obs, _ = _call(env, "power", base=10, exponent=30000000)
    assert "did not finish" in obs
    assert env.unwrapped._worker.restarts == 1
    _, obs, _ = _call(env, "ls")
    assert "made_before" in obs
    env.close()
    assert env.unwrapped._worker is None


@pytest.mark.slow
def test_a_pickled_env_mid_episode_plays_on_with_a_worker_of_its_own():
    import pickle

    env = agentr1_gym.make(ENV_ID)
    index = next(i for i, t in enumerate(env.unwrapped.tasks) if "GorillaFileSystem" in t["involved_classes"])
    env.reset(options={"task_index": index})
    _call(env, "mkdir", dir_name="kept")
    copy_ = pickle.loads(pickle.dumps(env))
    _, obs, _ = _call(copy_, "ls")
    assert "kept" in obs
    assert copy_.unwrapped._worker is not env.unwrapped._worker
    env.close()
    copy_.close()


def _bound_value(spec: dict, rng: random.Random):
    """A value at the env's argument bounds for one parameter's schema type."""
    from agentr1_gym.envs.bfcl import MAX_ITEMS, MAX_NUMBER, MAX_STRING

    kind = spec.get("type")
    if kind in ("integer",):
        return rng.choice([int(MAX_NUMBER), -int(MAX_NUMBER), 0, 999999999999])
    if kind in ("float", "number"):
        return rng.choice([MAX_NUMBER, -MAX_NUMBER, 1e-300, 0.0])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind in ("array", "tuple"):
        item = spec.get("items") or {"type": "string"}
        return [_bound_value(item, rng) for _ in range(rng.choice([0, MAX_ITEMS]))]
    if kind == "dict":
        return {f"k{i}": "v" * 100 for i in range(rng.choice([0, MAX_ITEMS]))}
    return rng.choice(["", "x" * MAX_STRING, "../" * 5000, "*" * 1000])


@pytest.mark.slow
def test_every_simulated_api_at_its_bounds_answers_within_the_deadline():
    """Every function of every class (base category), called three times with arguments at the env's bounds:
    each step returns within the deadline plus the worker's restart, never raises, and leaves the process's
    numeric settings alone."""
    import decimal

    import mpmath

    from agentr1_gym.envs.bfcl import func_docs

    rng = random.Random(0)
    before = (decimal.getcontext().prec, mpmath.mp.dps)
    env = agentr1_gym.make(ENV_ID, call_timeout_s=2, max_turns=10_000)
    tasks = env.unwrapped.tasks
    classes = sorted({c for t in tasks for c in t["involved_classes"]})
    slowest, ran = 0.0, 0
    for class_name in classes:
        index = next(i for i, t in enumerate(tasks) if class_name in t["involved_classes"])
        env.reset(options={"task_index": index})
        for doc in func_docs(class_name):
            props = (doc.get("parameters") or {}).get("properties") or {}
            for _ in range(4):
                args = {k: _bound_value(v, rng) for k, v in props.items()}
                elapsed, obs, info = _call(env, doc["name"], **args)
                slowest = max(slowest, elapsed)
                ran += info["action_error"] is None  # validated and ran (an API error is the API's answer)
                assert isinstance(obs, str)
    assert ran > 300, ran  # the sweep reached the methods, not only the argument checks
    assert slowest < 2 + 10, slowest
    assert (decimal.getcontext().prec, mpmath.mp.dps) == before
    env.close()
