"""The env API every registered env declares, and ``gym.make`` == ``agentr1_gym.make`` for every keyword.

Each env's accepted keywords come from its signature (its own, its base classes' and ``EnvSettings``'), so a new
keyword without a case below fails ``test_every_keyword_has_a_case``.
"""

from __future__ import annotations

import inspect

import gymnasium as gym
import pytest
from _paths import DATA

import agentr1_gym
from agentr1_gym.data import bundled_path, bundled_tasks
from agentr1_gym.env import repeat_rate
from agentr1_gym.errors import AgentR1Error, ConfigError, ResetNeededError
from agentr1_gym.rewards import GENERIC_PROCESS_KEYS, OUTCOME_KEYS, RewardConfig

ENVS = agentr1_gym.env_ids()
WEBSHOP_DATA = str(DATA / "webshop")
QA = {"AgentR1/HotpotQA-v0", "AgentR1/2WikiMultihopQA-v0", "AgentR1/Musique-v0"}

#: keyword -> a non-default value (per env id where it differs); None: the keyword needs infrastructure (a
#: server, an index, an encoder) covered by tests/envs/test_retrieval_backends.py, and both makes must raise the same
#: typed error for it here
CASES: dict[str, object] = {
    "tool_format": "search_r1",
    "protocol": "search_r1",  # the deprecated name of tool_format
    "max_turns": 7,
    "max_calls_per_turn": 2,
    "max_action_chars": 5_000,
    "tool_output_chars": 500,
    "max_context_chars": 200_000,
    "reward": {"format_weight": 0.3, "process_scale": 0.5},
    "render_mode": "ansi",
    "retriever": "bm25",
    "retriever_kwargs": {"k1": 1.2, "b": 0.75},
    "top_k": 5,
    "index_path": None,
    "encoder_path": None,
    "server_url": None,
    "dataset": {"AgentR1/HotpotQA-v0": "musique", "AgentR1/Musique-v0": "hotpotqa", "*": "hotpotqa"},
    "split": {
        "AgentR1/2WikiMultihopQA-v0": "dev",
        "AgentR1/WebShop-v0": "test",
        "AgentR1/MiniWoB-v0": "test",
        "*": "train",
    },
    "data_path": {
        "AgentR1/WebShop-v0": WEBSHOP_DATA,
        "AgentR1/HumanEval-v0": str(bundled_path("human_eval_164.jsonl.gz")),
        "AgentR1/Musique-v0": str(bundled_path("musique_ans_train_100.json.gz")),
        "AgentR1/2WikiMultihopQA-v0": str(bundled_path("2wikimultihopqa_dev_177.jsonl.gz")),
        "*": str(bundled_path("hotpotqa_train_100.json.gz")),
    },
    "corpus_path": str(bundled_path("2wikimultihopqa_dev_corpus.json.gz")),
    "tasks": {
        "AgentR1/MiniWoB-v0": ["click-button", "enter-text"],
        "*": list(bundled_tasks("hotpotqa", "dev")[:5]),
    },
    "min_hops": 2,
    "max_hops": 3,
    "world_seed": 1,
    "entities_per_type": 12,
    "sandbox": {"timeout_s": 3.0},
    "kinds": ["rate", "sharing"],
    # worlds: text games and the shop
    "family": {"AgentR1/TextWorld-TreasureHunter-v0": "coin_collector", "*": "treasure_hunter"},
    "category": "miss_func",
    "call_timeout_s": 7.0,
    "call_memory_mb": 256.0,
    "level": 2,
    "num_games": 3,
    "pool_seed": 1,
    "game_files": None,
    "show_admissible": False,
    "num_products": 300,
    "catalog_seed": 1,
    "knockoff_share": 0.5,
    "oracle": "browse",
    "oracle_thoughts": True,  # (with oracle="browse", which it needs)
    "mark_visited": True,
    "oracle_skip_thought": True,  # (with oracle_thoughts and mark_visited, which it needs)
    "num_test": 50,
    "human_goals": None,
    "task_split": "test",
    # reasoning-gym and the mixture
    "task": {"AgentR1/MiniWoB-v0": "login-user", "*": "basic_arithmetic"},
    "config": {"AgentR1/RG-ChainSum-v0": {"min_terms": 3, "max_terms": 3}, "*": {}},
    "tool": "none",
    "partial_credit": False,
    "envs": [
        {"id": "AgentR1/RG-GSMSymbolic-v0", "weight": 2},
        {"id": "AgentR1/Calculator-v0", "name": "calc"},
    ],
    "test_fraction": 0.3,
    "context": "window:2",
    # the browser world
    "step_decay": 0.05,
    "max_page_chars": 3000,
    "browser_timeout_s": 20.0,
    "screenshots": True,
}


def _value(name: str, env_id: str) -> object:
    value = CASES[name]
    if isinstance(value, dict) and "*" in value:
        return value.get(env_id, value["*"])
    return value


def _keywords(env_id: str) -> list[str]:
    cls = type(agentr1_gym.make(env_id).unwrapped)
    return [p.name for p in inspect.signature(cls).parameters.values() if p.kind is p.KEYWORD_ONLY]


def _episode(env: gym.Env, seed: int = 3) -> list[tuple]:
    obs, info = env.reset(seed=seed)
    trace: list[tuple] = [(obs, info["task_id"])]
    done = False
    while not done:
        obs, reward, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
        trace.append((obs, round(reward, 9), terminated, truncated, info.get("metrics")))
        done = terminated or truncated
    return trace


#: envs whose tools only the Hermes format can write (several arguments per call)
ONE_FORMAT = {"AgentR1/BFCL-MultiTurn-v0"}


def name_of(keyword: str) -> str:
    return "tool_format" if keyword == "protocol" else keyword


def _make_both(env_id: str, kwargs: dict) -> tuple:
    out = []
    for make in (gym.make, agentr1_gym.make):
        try:
            out.append(make(env_id, **kwargs))
        except AgentR1Error as exc:
            out.append(exc)
    return tuple(out)


@pytest.mark.parametrize("env_id", ENVS)
def test_every_keyword_has_a_case(env_id):
    assert set(_keywords(env_id)) <= set(CASES), "add a case for each new keyword to CASES"


@pytest.mark.filterwarnings("ignore:protocol= is now tool_format=")
@pytest.mark.parametrize(
    ("env_id", "keyword"),
    [(e, k) for e in ENVS for k in sorted(CASES) if k in _keywords(e) or k == "protocol"],
)
def test_gym_make_equals_agentr1_make_for_every_keyword(env_id, keyword):
    value = _value(keyword, env_id)
    if value is None:  # infrastructure keywords: the same typed error from both
        a, b = _make_both(env_id, {keyword: "/nonexistent/agentr1"})
        assert isinstance(a, AgentR1Error) and type(a) is type(b) and str(a) == str(b)
        return
    kwargs = {keyword: value}
    if keyword in ("min_hops", "max_hops"):
        kwargs["max_turns"] = 6
    if keyword == "oracle_thoughts":
        kwargs["oracle"] = "browse"
    if keyword == "oracle_skip_thought":
        kwargs.update(oracle="browse", oracle_thoughts=True, mark_visited=True)
    if (
        keyword == "data_path" and env_id == "AgentR1/2WikiMultihopQA-v0"
    ):  # its JSONL has no context paragraphs
        kwargs["corpus_path"] = CASES["corpus_path"]
    a, b = _make_both(env_id, kwargs)
    if env_id in ONE_FORMAT and name_of(keyword) == "tool_format":  # refused alike by both makes, in one line
        assert isinstance(a, ConfigError) and type(a) is type(b) and str(a) == str(b)
        return
    assert not isinstance(a, Exception), a
    assert not isinstance(b, Exception), b
    assert a.spec.kwargs == b.spec.kwargs
    name = "tool_format" if keyword == "protocol" else keyword
    if name in agentr1_gym.EnvSettings.model_fields:  # the setting reached the env
        got = getattr(a.unwrapped.settings, name)
        expected = RewardConfig(**value) if name == "reward" else value
        assert got == expected and getattr(b.unwrapped.settings, name) == expected
    assert _episode(a) == _episode(b)


@pytest.mark.parametrize("env_id", ENVS)
def test_declared_api(env_id):
    env = agentr1_gym.make(env_id).unwrapped
    assert env.gold_answers == ()  # safe before the first reset
    with pytest.raises(ResetNeededError):
        env.oracle_action()
    with pytest.raises(ResetNeededError):
        env.max_episode_reward()
    env.reset(seed=0)
    if env.final_answer:
        assert env.gold_answers and all(isinstance(g, str) and g for g in env.gold_answers)
    else:  # a world: no answer to be gold, the world's state is what it scores
        assert env.gold_answers == () and env.state_key() is not None
    assert env.answer_metrics and env.success_metric
    total, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(env.oracle_action())
        total += reward
        done = terminated or truncated
    metrics = info["metrics"]
    # one vocabulary: every env reports these, plus its own answer metrics
    assert {
        "score",
        "success",
        "format_ok",
        "turns",
        "repeat_rate",
        *env.answer_metrics,
        env.success_metric,
    } <= set(metrics)
    assert 0.0 <= metrics["repeat_rate"] < 1.0
    assert metrics["success"] == 1.0 and env.is_success(metrics)
    assert total == pytest.approx(env.max_episode_reward())
    keys = set(info["reward_components"])
    assert keys == {*GENERIC_PROCESS_KEYS, *(c.name for c in env.process_rewards), *OUTCOME_KEYS}
    if env_id not in QA and env_id != "AgentR1/SyntheticMultihop-v0":
        assert "em" not in metrics  # no faked QA metric on code and math envs


def test_repeat_rate_counts_the_turns_that_repeat_the_previous_one_word_for_word():
    """The loop a memoryless greedy policy falls into (the same click on a page that does not change) is what the
    metric shows; only consecutive repeats count, and it never touches the reward."""
    env = agentr1_gym.make("AgentR1/WebShop-v0", max_turns=5)
    env.reset(seed=0)
    click = env.unwrapped.call_text("click", button="no such button")
    search = env.unwrapped.call_text("search", query="shoes")
    rewards = []
    for action in (click, click, f"  {click}\n", search, click):
        _, reward, terminated, truncated, info = env.step(action)
        rewards.append(reward)
    assert truncated and not terminated
    assert info["metrics"]["repeat_rate"] == pytest.approx(2 / 5)
    assert rewards[1] == rewards[0]  # a repeat costs what the first try cost: a diagnostic, not a penalty
    assert repeat_rate([]) == 0.0 and repeat_rate([{"role": "assistant", "content": "a"}]) == 0.0
    assert repeat_rate([{"role": "assistant", "content": "a"}, {"role": "user", "content": "x"},
                        {"role": "assistant", "content": "a"}]) == 0.5  # fmt: skip


@pytest.mark.parametrize("env_id", ENVS)
def test_task_index_is_honoured_by_every_env(env_id):
    env = agentr1_gym.make(env_id)
    n = env.unwrapped.num_tasks
    index = 4 if n is None else min(4, n - 2)
    ids = set()
    for seed in (0, 1, 2):
        _, info = env.reset(seed=seed, options={"task_index": index})
        ids.add(info["task_id"])
    assert len(ids) == 1  # the index, not the seed, picks the task
    _, other = env.reset(seed=0, options={"task_index": index + 1})
    assert other["task_id"] not in ids
    with pytest.raises(ConfigError, match="task_index"):
        env.reset(options={"task_index": -1})
    with pytest.raises(ConfigError, match="did you mean 'task_index'"):
        env.reset(options={"task_idx": 1})
    if n is not None:
        with pytest.raises(ConfigError, match=rf"\[0, {n}\)"):
            env.reset(options={"task_index": n})


#: worlds without process rewards: MiniWoB pays MiniWoB's own outcome only (nothing on the way to it that a
#: policy could not farm: see agentr1_gym/envs/miniwob.py)
NO_SHAPING = {"AgentR1/MiniWoB-v0"}


@pytest.mark.parametrize("env_id", ENVS)
def test_process_rewards_are_declared_and_weighted_by_the_config(env_id):
    def process_total(reward):
        env = agentr1_gym.make(env_id, reward=reward)
        env.reset(seed=0)
        paid: dict[str, float] = {}
        done = False
        while not done:
            _, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            for c in env.unwrapped.process_rewards:
                paid[c.name] = paid.get(c.name, 0.0) + info["reward_components"][c.name]
            done = terminated or truncated
        return paid

    if not agentr1_gym.make(env_id).unwrapped.process_rewards:  # a world that pays its own outcome only
        assert env_id in NO_SHAPING
        return
    default = process_total(None)
    assert set(default) == {c.name for c in agentr1_gym.make(env_id).unwrapped.process_rewards}
    assert any(v > 0 for v in default.values())  # the oracle earns some shaping
    assert all(v == 0.0 for v in process_total({"process_scale": 0.0}).values())
    doubled = process_total({"process": {k: 2 * c.weight for c in agentr1_gym.make(env_id).unwrapped.process_rewards
                                         for k in [c.name]}})  # fmt: skip
    assert doubled == pytest.approx({k: 2 * v for k, v in default.items()})


def test_unknown_keyword_and_setting_errors_name_the_fix():
    with pytest.raises(ConfigError, match="did you mean 'max_turns'"):
        agentr1_gym.make("AgentR1/Calculator-v0", max_turn=5)
    with pytest.raises(ConfigError, match="max_calls_per_turn"):
        agentr1_gym.make("AgentR1/HotpotQA-v0", max_calls_per_turn=0)
    with pytest.warns(DeprecationWarning, match="tool_format"):
        env = agentr1_gym.make("AgentR1/HotpotQA-v0", protocol="search_r1")
    assert env.unwrapped.tool_format.name == "search_r1"


@pytest.mark.parametrize("env_id", ENVS)
def test_a_wrapper_that_cuts_the_episode_scores_it(env_id):
    """ScoredTimeLimit scores a cut episode as the env's own truncation does (same metrics and outcome);
    Gymnasium's TimeLimit cannot (it does not tell the env), which is why the envs register none."""
    from agentr1_gym.wrappers import ScoredTimeLimit

    def last_step(env):
        env.reset(seed=0)
        done = False
        while not done:
            _, reward, terminated, truncated, info = env.step("not a valid turn")
            done = terminated or truncated
        return reward, info

    cut_reward, cut = last_step(ScoredTimeLimit(agentr1_gym.make(env_id, max_turns=6), 5))
    own_reward, own = last_step(agentr1_gym.make(env_id, max_turns=5))
    assert cut["truncated_reason"] == "time_limit" and own["truncated_reason"] == "max_turns"
    assert cut["metrics"] == own["metrics"] and cut["metrics"]["turns"] == 5.0
    assert cut_reward == pytest.approx(own_reward) and cut["outcome_reward"] == pytest.approx(
        own["outcome_reward"]
    )
    gym_cut = gym.make(env_id, max_turns=6, max_episode_steps=5)
    _, info = last_step(gym_cut)
    assert "metrics" not in info  # the reason to prefer max_turns or ScoredTimeLimit


def test_async_vector_env_works_with_default_shared_memory():
    venv = gym.make_vec("AgentR1/SyntheticMultihop-v0", num_envs=2, vectorization_mode="async")
    singles = [agentr1_gym.make("AgentR1/SyntheticMultihop-v0") for _ in range(2)]
    try:
        obs, _ = venv.reset(seed=[1, 2])
        assert list(obs) == [env.reset(seed=s)[0] for env, s in zip(singles, (1, 2))]
        actions = tuple(env.unwrapped.oracle_action() for env in singles)
        obs, rewards, *_ = venv.step(actions)
        expected = [env.step(a) for env, a in zip(singles, actions)]
        assert list(obs) == [e[0] for e in expected] and list(rewards) == [e[1] for e in expected]
    finally:
        venv.close()


def test_free_text_shared_memory_round_trips_any_text():
    from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

    from agentr1_gym.spaces import FreeText

    space = FreeText(20)
    memory = create_shared_memory(space, n=3)
    texts = ["", "héllo 😀 <tool_call>", "x" * 20]
    for i, text in enumerate(texts):
        write_to_shared_memory(space, i, text, memory)
    view = read_from_shared_memory(space, memory, n=3)
    assert list(view) == texts
    write_to_shared_memory(space, 0, "new", memory)
    assert view[0] == "new"  # a live view, as Gymnasium's shared arrays are
    with pytest.raises(ValueError, match="at most 20"):
        write_to_shared_memory(space, 1, "y" * 21, memory)


def test_a_mixture_forwards_a_declared_set_of_names_and_no_public_toolenv_name_is_forgotten():
    """Every public ToolEnv name is the mixture's own, forwarded to the current component, or declared a part of
    a component's own step: a new ToolEnv method fails here until it is placed (it would otherwise run on the
    mixture's own, empty state)."""
    from agentr1_gym import mixture
    from agentr1_gym.env import ToolEnv

    declared = {*mixture.FORWARDED_METHODS, *mixture.FORWARDED_ATTRIBUTES, *mixture.COMPONENT_MACHINERY}
    own = {name for name in vars(mixture.MixtureEnv) if not name.startswith("_")} - declared
    public = {name for name in dir(ToolEnv) if not name.startswith("_")} - set(dir(gym.Env))
    assert not public - own - declared, sorted(public - own - declared)
    env = agentr1_gym.make(
        "AgentR1/Mixture-v0",
        envs=["AgentR1/Calculator-v0", {"id": "AgentR1/WebShop-v0", "kwargs": {"context": "state"}}],
    )
    for seed in range(8):  # both components: each answer is the current one's
        env.reset(seed=seed)
        current = env.unwrapped.current
        assert env.unwrapped.messages is current.messages and env.unwrapped.tools is current.tools
        assert env.unwrapped.has_state_text() == current.has_state_text()
        assert env.unwrapped.context_messages() == current.context_messages()
        assert env.unwrapped.context_policy == current.context_policy
    env.close()
