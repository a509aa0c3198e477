"""Model turns and tool output that Python accepts as ``str`` but UTF-8 and recursive serializers do not (a lone
surrogate from a cut emoji escape, arguments nested hundreds deep) never kill a run: the env makes them safe once,
and the token layer and the episode writer cannot fail on them either."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym
import pytest

import agentr1_gym
from agentr1_gym import register_task, tool
from agentr1_gym.episodes import append_episodes, read_episodes, scripted_record, turn_record
from agentr1_gym.evaluation import evaluate
from agentr1_gym.text import MAX_JSON_DEPTH, clean_json, clean_text

SURROGATE_TURN = '<tool_call>{"name": "country_of", "arguments": {"city": "Lima \\ud83c"}}</tool_call>'
DEEP_TURN = (
    '<tool_call>{"name": "country_of", "arguments": {"city": ' + "[" * 490 + "]" * 490 + "}}</tool_call>"
)


@tool
def country_of(city: str) -> str:
    """The country a city is in (echoes unknown cities, as the tutorial's tool does).

    Args:
        city: a city name
    """
    return {"Lima": "Peru"}.get(city, f"no city named {city}")


@tool
def broken_text() -> str:
    """Returns text with a lone surrogate, as a buggy tool or server might."""
    return "result \ud800 end"


register_task(
    "Tests/Surrogates-v0",
    [{"question": "Which country is Lima in?", "answer": "Peru", "id": "lima"}],
    prompt="{question}",
    tools=[country_of, broken_text],
)


def test_clean_text_replaces_lone_surrogates_and_keeps_pairs():
    assert clean_text("plain") == "plain"
    assert clean_text("Lima \ud83c") == "Lima \ufffd"
    assert clean_text("ok \ud83d\ude00") == "ok \U0001f600"
    assert clean_text("\udc00\ud800x") == "\ufffd\ufffdx"


def test_clean_json_cuts_any_depth_without_recursion():
    value: object = []
    for _ in range(100_000):
        value = [value]
    cleaned, cut = clean_json({"a": value, "\ud800": "x\ud83c"})
    assert cut and json.dumps(cleaned).count("[") == MAX_JSON_DEPTH - 1
    assert "\ufffd" in json.dumps(cleaned, ensure_ascii=False)


@pytest.mark.parametrize(
    "action", [SURROGATE_TURN, '<tool_call>{"name": "broken_text", "arguments": {}}</tool_call>']
)
def test_surrogates_in_calls_and_tool_output_become_encodable_text(action):
    env = gym.make("Tests/Surrogates-v0")
    env.reset(seed=0)
    obs, _, _, _, info = env.step(action)
    assert info["action_error"] is None
    obs.encode("utf-8")
    json.dumps(info, ensure_ascii=False).encode("utf-8")
    for message in info["messages"]:
        message["content"].encode("utf-8")


def test_arguments_nested_past_the_limit_are_an_invalid_call_and_recordable():
    env = gym.make("Tests/Surrogates-v0")
    env.reset(seed=0)
    _obs, _reward, *_, info = env.step(DEEP_TURN)
    assert "nest more than" in info["action_error"] and info["reward_components"]["invalid_call"] < 0
    json.dumps(info["tool_calls"])  # cut, so any serializer takes it


def test_saving_episodes_never_raises_on_model_input(tmp_path):
    env = gym.make("AgentR1/HotpotQA-v0")
    obs, info = env.reset(seed=0)
    turns = []
    for action in (
        '<tool_call>{"name": "search", "arguments": {"query": 5, "x": "\\ud83d"}}</tool_call>',
        '<tool_call>{"name": "search", "arguments": {"query": ' + "[" * 490 + "]" * 490 + "}}</tool_call>",
    ):
        obs, reward, _terminated, _truncated, info = env.step(action)
        turns.append(turn_record(action, reward, info, obs))
    # records built from raw text too (an engine that does not go through ToolEnv)
    turns.append({**turns[0], "tool_calls": [{"name": "x", "arguments": {"q": "\ud83d", "n": float("nan")}}]})
    deep: object = {}
    for _ in range(5000):
        deep = {"a": deep}
    turns.append({**turns[0], "tool_calls": [{"name": "x", "arguments": deep}]})
    record = scripted_record(
        source="eval", index=0, env_id="AgentR1/HotpotQA-v0", seed=0, task_id="t", prompt="p\ud800",
        turns=turns, metrics={}, terminated=False,
    )  # fmt: skip
    path = tmp_path / "episodes.jsonl"
    assert append_episodes(path, [record, record]) == 2
    assert len(list(read_episodes(path))) == 2


def test_eval_saves_each_episode_as_it_ends(tmp_path):
    env = gym.make("Tests/Surrogates-v0", max_turns=2)
    path = tmp_path / "eval.jsonl"
    seen: list[int] = []

    def policy(obs, info, unwrapped):
        seen.append(len(list(read_episodes(path))) if path.exists() else 0)
        return SURROGATE_TURN if info.get("turn", 0) == 0 else DEEP_TURN

    summary = evaluate(env, policy, episodes=3, save_episodes=str(path), progress=False)
    assert summary["episodes"] == 3
    assert seen == [0, 0, 1, 1, 2, 2]  # the file grows episode by episode, not at the end
    assert len(list(read_episodes(path))) == 3


@pytest.mark.slow
def test_cli_eval_save_episodes_on_surrogate_turns(tmp_path):
    """``agentr1 eval --save-episodes`` with a policy that writes the cut escape: rc 0, a summary, 2 episodes."""
    module = tmp_path / "surrogate_task.py"
    module.write_text(
        "from agentr1_gym import register_task, tool\n"
        f"TURN = {SURROGATE_TURN!r}\n"
        "@tool(description='Echo the city.')\n"
        "def country_of(city: str) -> str:\n"
        "    return 'no city named ' + city\n"
        "register_task('Cli/Surrogates-v0', [{'q': 'Lima?', 'answer': 'Peru'}], prompt='{q}',\n"
        "              tools=[country_of], oracle=lambda env: TURN)\n"
    )
    out = tmp_path / "eps.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "agentr1_gym.cli", "eval", "surrogate_task:Cli/Surrogates-v0", "--episodes", "2",
         "--policy", "oracle", "--save-episodes", str(out), "--env-arg", "max_turns=2"],
        capture_output=True, text=True, cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["episodes"] == 2
    assert len(list(read_episodes(out))) == 2


def test_rollouts_tokenize_surrogate_observations(tok):
    from agentr1_trl import ScriptedGenerator, collect_rollouts

    envs = [agentr1_gym.make("Tests/Surrogates-v0", max_turns=3) for _ in range(2)]

    def script(prompt_ids, i):
        return (
            SURROGATE_TURN
            if i % 2 == 0
            else '<tool_call>{"name": "broken_text", "arguments": {}}</tool_call>'
        )

    trajs = collect_rollouts(envs, ScriptedGenerator(tok, script), tok, seeds=[0, 1], max_episode_tokens=4096)
    assert all(t.num_turns >= 1 for t in trajs)
    for t in trajs:
        for obs in t.observations:
            obs.encode("utf-8")
