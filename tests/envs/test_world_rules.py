"""World rules a policy or a damaged file could break: text-game files checked before the C interpreter sees them,
one move per ``act`` with meta commands refused anywhere in a chain, exact integer answers, and process rewards
capped per episode by the library."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import gymnasium as gym
import pytest
from test_reward_hacking import run_sql  # the same read-only SQL tool

import agentr1_gym
from agentr1_gym import register_task
from agentr1_gym.envs.textgames import chained_commands
from agentr1_gym.errors import DataError
from agentr1_gym.matching import answer_match, numeric_match
from agentr1_gym.rewards import RewardConfig

pytest.importorskip("textworld")


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """One compiled TextWorld game (and its .json), copied out of the cache."""
    env = agentr1_gym.make("AgentR1/TextWorld-Simple-v0", num_games=1).unwrapped
    env.reset(seed=0)
    src = env.game.path
    env.close()
    d = tmp_path_factory.mktemp("game")
    shutil.copy(src, d / "game.z8")
    shutil.copy(src[:-3] + ".json", d / "game.json")
    return d / "game.z8"


DAMAGE = {
    "truncated": (lambda b: b[: len(b) // 2], "cut short"),
    "emptied": (lambda b: b"", "shorter than a Z-machine header"),
    "garbage": (lambda b: bytes((i * 7 + 171) % 256 for i in range(len(b))), "not a Z-machine story"),
    "one byte flipped": (lambda b: b[:5000] + bytes([b[5000] ^ 0xFF]) + b[5001:], "checksum"),
}


@pytest.mark.slow
def test_damaged_story_files_are_one_line_errors_and_the_process_lives(game, tmp_path):
    """Before: the interpreter printed "Fatal error: Story file read error" and exited the whole process (rc 1). In
    a subprocess, so that the old behaviour could not take pytest down with it."""
    data = game.read_bytes()
    for name, (damage, _) in DAMAGE.items():
        slug = name.replace(" ", "_")
        (tmp_path / f"{slug}.z8").write_bytes(damage(data))
        shutil.copy(game.with_suffix(".json"), tmp_path / f"{slug}.json")
    script = textwrap.dedent(f"""
        import agentr1_gym
        from agentr1_gym.errors import DataError
        for slug in {[n.replace(" ", "_") for n in DAMAGE]!r}:
            try:
                env = agentr1_gym.make("AgentR1/TextWorld-Simple-v0", game_files=[{str(tmp_path)!r} + "/" + slug + ".z8"])
                env.reset(seed=0)
                print(slug, "PLAYED")
            except DataError as exc:
                print(slug, "DataError", str(exc).replace(chr(10), " "))
        print("alive")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-1000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[-1] == "alive"
    for (name, (_, message)), line in zip(DAMAGE.items(), lines, strict=False):
        assert line.startswith(name.replace(" ", "_") + " DataError") and message in line, line


@pytest.mark.parametrize(
    ("json_text", "message"),
    [("{broken", "not valid JSON"), (None, "no game.json beside it"), ("{}", "TextWorld cannot load it")],
)
def test_a_broken_or_missing_game_json_is_a_data_error(game, tmp_path, json_text, message):
    shutil.copy(game, tmp_path / "game.z8")
    if json_text is not None:
        (tmp_path / "game.json").write_text(json_text)
    env = agentr1_gym.make("AgentR1/TextWorld-Simple-v0", game_files=[str(tmp_path / "game.z8")])
    with pytest.raises(DataError, match=message) as info:
        env.reset(seed=0)
    assert "\n" not in str(info.value)


@pytest.mark.slow
def test_a_damaged_cache_entry_is_generated_again(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTR1_CACHE", str(tmp_path))
    from agentr1_gym.data import textgames

    spec = textgames.game_specs("simple", [1], "train", 1)[0]
    path = textgames.game_path(spec)
    good = path.read_bytes()
    path.write_bytes(good[:1000])
    textgames._CHECKED.clear()
    again = textgames.game_path(spec)
    assert again == path and path.read_bytes() == good


# ---- one move per act ------------------------------------------------------------------------------------------
def test_chained_commands_are_split_as_the_parser_would():
    assert chained_commands("go north.") == ["go north"]
    assert chained_commands("look. restart") == ["look", "restart"]
    assert chained_commands("look then restart") == ["look", "restart"]
    assert chained_commands("look, restart; inventory") == ["look", "restart", "inventory"]


@pytest.fixture
def simple():
    env = agentr1_gym.make("AgentR1/TextWorld-Simple-v0", num_games=3, max_turns=12).unwrapped
    yield env
    env.close()


@pytest.mark.parametrize(
    "chain", ["look. restart", "look then restart", "look, restart", "inventory.restart"]
)
def test_meta_commands_are_refused_anywhere_in_a_chain(simple, chain):
    """Before: ``look. restart`` then ``yes`` restarted the game but not TextWorld's tracker."""
    simple.reset(options={"task_index": 0})
    simple.step(simple.oracle_action())
    score = simple.game.state.score
    obs, *_ = simple.step(simple.call_text("act", command=chain))
    assert "disabled here" in obs
    simple.step(simple.call_text("act", command="yes"))
    assert simple.game.state.score == score and "You are carrying nothing" not in obs


def test_one_act_is_one_move(simple):
    """Before: the whole walkthrough chained with ". " in one act won 12 of 12 games in 1-2 turns."""
    wins = 0
    for i in range(3):
        simple.reset(options={"task_index": i})
        plan = list(simple.game.state.policy_commands)[:5]  # within the act tool's 200 characters
        for chain in (". ".join(plan), " then ".join(plan), ", ".join(plan)):
            obs, _, terminated, *_ = simple.step(simple.call_text("act", command=chain))
            wins += terminated
            if len(plan) > 1:
                assert "One command per turn" in obs or "disabled here" in obs
        assert simple.game.commands == []  # nothing reached the game
    assert wins == 0
    # multi-object commands act on several objects at once: refused unless admissible as written
    simple.reset(options={"task_index": 0})
    obs, *_ = simple.step(simple.call_text("act", command="take all"))
    assert "One object per command" in obs


# ---- exact integers --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("wrong", ["123540", "123564", "123552.9", "about 123550", "123,550"])
def test_integer_answers_match_exactly(wrong):
    assert answer_match(wrong, 123552) == 0.0 and answer_match(wrong, "123552") == 0.0
    assert answer_match("123,552", 123552) == 1.0 and answer_match("$123552.0", "123552") == 1.0
    assert numeric_match("0.33333", "1/3") == 1.0  # non-integers keep the tolerance


def test_register_tasks_default_reward_wants_the_exact_integer():
    register_task("Tests/ExactInt-v0", [{"q": "?", "answer": 123552}], prompt="{q}")
    env = gym.make("Tests/ExactInt-v0").unwrapped
    for answer, success in (("123550", 0.0), ("123552", 1.0)):
        env.reset(seed=0)
        *_, info = env.step(env.answer_text(answer))
        assert info["metrics"]["success"] == success


# ---- process rewards capped by the library ---------------------------------------------------------------------
register_task(
    "Tests/SqlCaps-v0",
    [{"question": f"How many orders were placed on day {i}?", "answer": str(40 + i)} for i in range(20)],
    prompt="{question}",
    tools=[run_sql],
)


def test_declared_caps_are_enforced():
    """Before: with a cap of 1 declared, five searches paid 0.50 (the cap only fed max_episode_reward)."""
    from agentr1_gym.task import TaskEnv

    class Capped(TaskEnv):
        from agentr1_gym.rewards import ProcessReward

        process_rewards = (ProcessReward("lookups", 0.1, "per successful lookup"),)

        def process_reward_units(self, call, result):
            return {"lookups": 1.0}

        def process_reward_caps(self):
            return {"lookups": 1.0}

    register_task("Tests/Capped-v0", [{"q": "?", "answer": "x"}], prompt="{q}", tools=[run_sql])
    env = Capped("Tests/Capped-v0", max_turns=6)
    env.reset(seed=0)
    paid = 0.0
    for _ in range(5):
        *_, info = env.step(env.call_text("run_sql", query="SELECT 1"))
        paid += info["reward_components"]["lookups"]
    assert paid == pytest.approx(0.1)
    assert env.max_episode_reward() == pytest.approx(RewardConfig().max_outcome() + 0.1)


def test_tool_success_is_paid_up_to_its_cap_and_max_reward_agrees():
    cfg = RewardConfig(tool_success_reward=0.05, tool_success_cap=3)
    env = gym.make("Tests/SqlCaps-v0", max_turns=10, reward=cfg).unwrapped
    env.reset(seed=0)
    paid = [
        env.step(env.call_text("run_sql", query="SELECT 1"))[4]["reward_components"]["tool_success"]
        for _ in range(5)
    ]
    assert paid == [0.05, 0.05, 0.05, 0.0, 0.0]
    assert env.max_episode_reward() == pytest.approx(cfg.max_outcome() + 0.15)


def test_world_moves_are_function_tools_whose_bugs_raise():
    """The shop's and the text games' moves are the worlds' own methods as ``@tool``s (schemas as before:
    tests/envs/test_worlds.py checks the prompts); a world answers every model input itself, so an exception inside it
    is our bug and raises instead of becoming an observation the fuzz tests would not see."""
    import pickle

    from agentr1_gym.tools.function import FunctionTool

    for env_id in ("AgentR1/WebShop-v0", "AgentR1/TextWorld-CoinCollector-v0"):
        env = gym.make(env_id)
        env.reset(seed=0)
        tools = list(env.unwrapped.tools.values())
        assert tools and all(isinstance(t, FunctionTool) and t.errors == "raise" for t in tools)
        name = tools[0].name
        world = tools[0].fn.__self__
        again = pickle.loads(pickle.dumps(env.unwrapped))  # the tools keep their setting and follow the world
        owner = getattr(again, "world", None) or again.game
        assert all(t.errors == "raise" and t.fn.__self__ is owner for t in again.tools.values())
        setattr(world, "render" if name == "search" else "_footer", lambda: 1 / 0)
        arg = "query" if name == "search" else "command"
        with pytest.raises(ZeroDivisionError):
            env.step(env.unwrapped.call_text(name, **{arg: "look"}))
