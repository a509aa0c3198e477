"""Context policies (the step-level MDP): the env decides what the agent sees each step (``info["context"]``), the
whole chat, a window of the last K turns or the world's compact state, and rollouts turn a rewritten context into
one training row per step, so a row's length (and the update's memory) is bounded by the window."""

from __future__ import annotations

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import agentr1_gym
from agentr1_gym.errors import ConfigError

WORLDS = {
    "AgentR1/TextWorld-CoinCollector-v0": {"level": 3, "num_games": 2},
    "AgentR1/TextWorld-Cooking-v0": {"level": 1, "num_games": 2},
    "AgentR1/WebShop-v0": {"split": "test"},
}
POLICIES = ("full", "window:1", "window:2", "state")


def _oracle_episode(env, **reset) -> tuple[float, list[list[dict]]]:
    _, info = env.reset(**reset)
    contexts, total = [info["context"]], 0.0
    for _ in range(env.unwrapped.max_turns):
        _obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        total += reward
        contexts.append(info["context"])
        if terminated or truncated:
            break
    return total, contexts


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("env_id", sorted(WORLDS))
def test_worlds_pass_check_env_and_the_oracle_reaches_the_maximum_under_every_policy(env_id, policy):
    pytest.importorskip("textworld")
    for tool_format in ("hermes", "search_r1"):
        env = gym.make(env_id, context=policy, tool_format=tool_format, **WORLDS[env_id])
        check_env(env.unwrapped, skip_render_check=True)
        total, _ = _oracle_episode(env, seed=0, options={"task_index": 0})
        assert total == pytest.approx(env.unwrapped.max_episode_reward()), (env_id, policy, tool_format)
        env.close()


def test_rewards_do_not_depend_on_what_the_agent_sees():
    """The env scores the world, never the context: every step's reward is the same under every policy (so the
    reward-hacking bounds measured under ``full`` hold under each)."""
    pytest.importorskip("textworld")
    rewards = {}
    for policy in POLICIES:
        env = agentr1_gym.make("AgentR1/TextWorld-CoinCollector-v0", level=3, num_games=2, context=policy)
        env.reset(seed=0, options={"task_index": 1})
        steps = []
        for i in range(8):
            action = env.unwrapped.random_action() if i % 2 else env.unwrapped.oracle_action()
            _, reward, terminated, truncated, _ = env.step(action)
            steps.append(reward)
            if terminated or truncated:
                break
        rewards[policy] = steps
        env.close()
    assert all(r == rewards["full"] for r in rewards.values())


def test_a_window_shows_the_task_the_last_turns_and_a_note():
    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", context="window:1", max_turns=6, max_hops=2)
    _obs, info = env.reset(seed=0)
    first = info["context"][0]["content"]
    for _ in range(3):
        *_, info = env.step(env.unwrapped.call_text("search", query="anything"))
    roles = [m["role"] for m in info["context"]]
    assert roles == ["user", "assistant", "tool"]
    assert info["context"][0]["content"] == first + "\n\n[2 earlier turns not shown]"
    assert len(info["messages"]) == 7  # the env keeps the whole chat; the agent sees the window


def test_state_context_is_the_worlds_compact_state():
    pytest.importorskip("textworld")
    env = agentr1_gym.make("AgentR1/TextWorld-Cooking-v0", level=1, num_games=1, context="state")
    env.reset(seed=0)
    *_, info = env.step(env.unwrapped.call_text("act", command="inventory"))
    (only,) = info["context"]
    assert only["role"] == "user" and "Current state:" in only["content"]
    for part in ("Location:", "Inventory:", "Score:", "Last command: inventory", "Last feedback:"):
        assert part in only["content"], part
    shop = agentr1_gym.make("AgentR1/WebShop-v0", split="test", context="state").unwrapped
    shop.reset(options={"task_index": 0})
    *_, info = shop.step(shop.call_text("search", query=shop.task.query))
    text = info["context"][0]["content"]
    assert shop.task.instruction in text and "Page: results for" in text and "Options chosen: none" in text


def test_bad_policies_are_one_line_errors():
    with pytest.raises(ConfigError, match="context must be 'full', 'window:K'"):
        agentr1_gym.make("AgentR1/HotpotQA-v0", context="window:0")
    with pytest.raises(ConfigError, match="has no state_text"):
        agentr1_gym.make("AgentR1/HotpotQA-v0", context="state")


def test_engines_that_only_append_observations_refuse_a_rewritten_context():
    from agentr1_gym.context import require_full_context

    require_full_context(agentr1_gym.make("AgentR1/WebShop-v0"), "SkyRL")  # the whole chat: nothing to refuse
    for policy in ("window:2", "state"):
        with pytest.raises(
            ConfigError, match=rf"SkyRL keeps its own .*context='{policy}'.* agentr1_trl, which"
        ):
            require_full_context(agentr1_gym.make("AgentR1/WebShop-v0", context=policy), "SkyRL")
    mixed = agentr1_gym.make(
        "AgentR1/Mixture-v0",
        envs=["AgentR1/Calculator-v0", {"id": "AgentR1/WebShop-v0", "kwargs": {"context": "window:1"}}],
    )
    with pytest.raises(ConfigError, match="AgentR1/WebShop-v0 builds"):  # one component's is enough
        require_full_context(mixed, "verifiers")


def test_a_users_function_decides_the_context():
    def last_only(task_messages, history):
        return task_messages + history[-1:]

    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0", context=last_only, max_turns=5)
    env.reset(seed=0)
    for _ in range(2):
        *_, info = env.step(env.unwrapped.call_text("search", query="x"))
    assert [m["role"] for m in info["context"]] == ["user", "tool"]
    bad = agentr1_gym.make(
        "AgentR1/SyntheticMultihop-v0", context=lambda task_messages, history: "no", max_turns=5
    )
    with pytest.raises(ConfigError, match="context function must return"):
        bad.reset(seed=0)  # called for the first turn already


def test_a_world_task_may_define_state_text():
    class Counter:
        def __init__(self, task):
            self.n, self.done = 0, False

        def bump(self) -> str:
            """Add one."""
            self.n += 1
            self.done = self.n >= 3
            return "ok"

        def state_text(self) -> str:
            return f"count {self.n}"

    agentr1_gym.register_task("Tests/CtxWorld-v0", [{"q": "count to 3"}], prompt="{q}", world=Counter,
                              reward=lambda world: world.n >= 3)  # fmt: skip
    env = agentr1_gym.make("Tests/CtxWorld-v0", context="state")
    env.reset(seed=0)
    *_, info = env.step(env.unwrapped.call_text("bump"))
    assert info["context"][0]["content"].endswith("Current state:\ncount 1")
    assert "state_text" not in [t["function"]["name"] for t in env.reset(seed=0)[1]["tools"]]


# ---- rows: one per step, bounded by the window -------------------------------------------------------------------
def _contexts(tok, policy: str, turns: int) -> list[int]:
    from agentr1_trl import ScriptedGenerator, collect_rollouts

    env = agentr1_gym.make("AgentR1/TextWorld-CoinCollector-v0", level=10, num_games=1, context=policy,
                           max_turns=turns)  # fmt: skip
    look = env.unwrapped.call_text("act", command="look")
    (traj,) = collect_rollouts([env], ScriptedGenerator(tok, lambda p, i: look), tok, seeds=[0],
                               max_episode_tokens=10**6)  # fmt: skip
    assert traj.num_turns == turns
    if policy == "full":
        return [len(traj.prompt_ids) + traj.turn_ends[t] for t in range(turns)]
    assert not traj.one_sequence  # one row per step
    samples = traj.samples()
    assert len(samples) == turns and all(sum(s.action_mask) == len(s.completion_ids) for s in samples)
    return [len(s.prompt_ids) for s in samples]


@pytest.mark.slow
def test_a_fifty_turn_game_stays_flat_under_a_window(tok):
    pytest.importorskip("textworld")
    full = _contexts(tok, "full", 50)
    window = _contexts(tok, "window:2", 50)
    state = _contexts(tok, "state", 50)
    assert full[-1] > 6 * full[2]  # the whole chat grows with every turn
    assert max(window[5:]) <= 1.05 * max(window[2:5])  # a window does not
    assert max(state[5:]) <= 1.05 * max(state[1:5])
    assert max(window) < full[-1] / 5 and max(state) < full[-1] / 5


# ---- training on step rows from the command line --------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize(
    ("algo", "extra"),
    [("grpo", []), ("grpo", ["--credit", "step"]), ("ppo", []), ("ppo", ["--credit", "step"])],
)
def test_train_on_step_rows_with_a_window(tmp_path, tiny_dir, algo, extra, capsys):
    """`agentr1 train --context window:1` on a text game: every estimator trains on one row per step; the policy
    is in run_config.json and a resume refuses another."""
    pytest.importorskip("textworld")
    import json

    from agentr1_gym.cli import main

    out = tmp_path / "run"
    from test_trl_durable import TINY_FLAGS  # the tiny runs' flags: no warm start, no evaluations, LoRA r=2

    argv = ["train", "--env", "AgentR1/TextWorld-CoinCollector-v0", "--env-kwargs", '{"level": 2, "num_games": 2, '
            '"max_turns": 4}', "--context", "window:1", "--algo", algo, *extra, "--model", tiny_dir, "--max-steps",
            "1", *TINY_FLAGS, "--output-dir", str(out)]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    record = json.loads((out / "run_config.json").read_text())
    assert record["settings"]["env_kwargs"]["context"] == "window:1"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("loss" in r for r in rows)
    saved = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert any("context" in t for r in saved for t in r["turns"])  # each row's own context, for the viewer
    capsys.readouterr()
    assert main(["train", "--resume", str(out), "--context", "window:2", "--set", "max_steps=2"]) == 2
    assert "cannot resume" in capsys.readouterr().err


@pytest.mark.slow
def test_the_viewer_shows_the_context_each_step_saw(tmp_path):
    """Saved episodes keep, per turn, the context the agent saw where the env rewrote it; the page shows it."""
    pytest.importorskip("textworld")
    from test_viewer import _browser

    from agentr1_gym.episodes import read_episodes
    from agentr1_gym.evaluation import evaluate
    from agentr1_gym.viewer import load_run, write_view

    env = agentr1_gym.make("AgentR1/TextWorld-CoinCollector-v0", level=5, num_games=2, context="window:1")
    path = tmp_path / "eps.jsonl"
    evaluate(env, "random", episodes=2, save_episodes=str(path), progress=False)
    records = list(read_episodes(path))
    contexts = [t.get("context") for r in records for t in r["turns"]]
    assert contexts[0] is None and any(c and "earlier turn" in c for c in contexts)
    page = write_view(load_run(path), source=path)
    browser = _browser()
    try:
        browser.get(page.as_uri())
        assert browser.find_element("tag name", "body").get_attribute("data-ready") == "1"
        shown = browser.find_elements("css selector", "#pane-a details.context")
        assert len(shown) == sum(c is not None for c in contexts) > 0  # both episodes are on the page
    finally:
        browser.quit()


# ---- fuzz and reward hacking under each policy ---------------------------------------------------------------------
@pytest.mark.parametrize("policy", ["window:1", "state"])
@pytest.mark.parametrize("env_id", ["AgentR1/WebShop-v0", "AgentR1/TextWorld-CoinCollector-v0"])
def test_adversarial_steps_under_a_context_policy(env_id, policy):
    """The fuzz's turns (cut surrogate escapes, deep nesting, chained commands included) under a rewritten context:
    no exception, and what the agent sees encodes and serializes."""
    pytest.importorskip("textworld")
    import json
    import math
    import random

    from test_fuzz_steps import _adversarial, _assert_recordable

    rng = random.Random(7)
    env = gym.make(env_id, context=policy, **WORLDS[env_id])
    tools = [t["function"]["name"] for t in env.reset(seed=0)[1]["tools"]]
    for i in range(600):
        action = _adversarial(rng, tools)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and math.isfinite(reward), action[:200]
        _assert_recordable(obs, info, action)
        json.dumps(info["context"], ensure_ascii=False).encode("utf-8")
        if terminated or truncated:
            env.reset(seed=i)
    env.close()


@pytest.mark.parametrize("policy", ["window:1", "window:2", "state"])
def test_shortcut_policies_earn_little_under_a_context_policy(policy):
    """The reward-hacking suite's world exploits, played with the context rewritten: still at most the bound."""
    pytest.importorskip("textworld")
    from test_reward_hacking import TEXTGAME_POLICIES, WEBSHOP_POLICIES, _unearned

    from agentr1_gym.rewards import UNEARNED_REWARD_BOUND

    cases = [("AgentR1/WebShop-v0", WEBSHOP_POLICIES[n], 10, {"split": "test"}) for n in WEBSHOP_POLICIES]
    cases += [("AgentR1/TextWorld-CoinCollector-v0", TEXTGAME_POLICIES[n], 3,
               {"max_turns": 12, "num_games": 3, "level": 4}) for n in TEXTGAME_POLICIES]  # fmt: skip
    for env_id, exploit, episodes, kwargs in cases:
        fraction, _ = _unearned(env_id, "default", exploit, episodes, context=policy, **kwargs)
        assert fraction <= UNEARNED_REWARD_BOUND, (
            env_id,
            policy,
            exploit.__name__ if hasattr(exploit, "__name__") else exploit,
            fraction,
        )
