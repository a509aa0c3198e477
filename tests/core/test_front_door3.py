"""Front door 3: what a newcomer writing their own task and agent tripped on (the world's feedback, the --agent
run's card and stdout, the CLI's prefixes and typos, `agentr1 list` of a user module, check_env's output)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import agentr1_gym
from agentr1_gym import register_task
from agentr1_gym.cli import main
from agentr1_gym.errors import ConfigError


class Door:
    """A door that opens."""

    def __init__(self, task: dict) -> None:
        self.done = False

    def open(self) -> str:
        """Open the door: ends the episode."""
        self.done = True
        return "open"


register_task("Tests/Door-v0", [{"q": "Open the door."}], world=Door, prompt="{q}", answer_field=None,
              reward=lambda world: float(world.done))  # fmt: skip


@pytest.mark.parametrize("env_id, kwargs", [
    ("Tests/Door-v0", {}), ("AgentR1/WebShop-v0", {}),
    ("AgentR1/TextWorld-CoinCollector-v0", {"level": 1, "num_games": 1}),
    ("AgentR1/TextWorld-CoinCollector-v0", {"level": 1, "num_games": 1, "tool_format": "search_r1"}),
])  # fmt: skip
def test_a_world_never_tells_the_model_to_write_an_answer(env_id, kwargs):
    """Item 3: a plain-text turn in a world got "to finish write <answer>your answer</answer>", and an <answer>
    there is itself a format error."""
    env = agentr1_gym.make(env_id, **kwargs)
    env.reset(seed=0)
    for turn in (
        "I will look around first.",
        '<tool_call>{"name": "open"',
        "<tool_call>not json</tool_call>",
    ):
        *_, info = env.step(turn)
        assert info["action_error"] and "<answer>" not in info["action_error"], info["action_error"]
        if turn.startswith("I will"):
            assert "This task has no final answer" in info["action_error"]
    # answer-shaped tasks still say how to finish
    qa = agentr1_gym.make("AgentR1/SyntheticMultihop-v0")
    qa.reset(seed=0)
    assert "<answer>your answer</answer>" in qa.step("I will look around first.")[4]["action_error"]


def test_the_card_of_an_agent_run_tells_the_truth():
    """Item 4: the --agent run's card said "Greedy, 0 episodes on seeds 100000+" with both results "not
    measured", suggested `agentr1 eval ... --episodes 0`, never named the agent and said "1 optimizer steps"."""
    pytest.importorskip("trl")
    from agentr1_trl.run_report import closing_lines, model_card

    settings = {"env_id": "MyOrg/SQL-v0", "env_kwargs": {}, "max_steps": 1, "agent": "my_sql_agent:rollout"}
    card = model_card(Path("runs/x"), algo="grpo", model="smollm2", settings=settings, evals=(None, None),
                      episodes=0, seed=100_000, steps=1)  # fmt: skip
    assert "my_sql_agent:rollout" in card and "1 optimizer step " in card
    assert "Not measured: this run evaluated no held-out episodes" in card
    assert "agentr1 eval" not in card and "0 episodes" not in card
    lines = closing_lines(Path("runs/x"), "MyOrg/SQL-v0", "smollm2", 8, 100_000, agent="my_sql_agent:rollout")
    assert not any("agentr1 eval" in line for line in lines)  # it would measure our rollout, not the agent
    going = model_card(Path("runs/x"), algo="grpo", model="smollm2", settings={**settings, "max_steps": 30},
                       evals=(None, None), episodes=8, seed=100_000, steps=3, finished=False)  # fmt: skip
    assert "**In progress**: 3 optimizer steps of 30" in going and "not yet measured" in going


def test_the_trainer_writes_our_card_at_a_checkpoint_never_trls():
    """Item 4: while a run was going, README.md was TRL's generic card until the end."""
    pytest.importorskip("trl")
    from agentr1_trl.trl_trainer import TRLAgentTrainer

    written = []

    class Stub:
        card_writer = staticmethod(lambda: written.append("ours"))

    TRLAgentTrainer.create_model_card(Stub(), model_name="x")  # what TRL calls at each checkpoint
    assert written == ["ours"]


def test_training_says_it_evaluates_only_when_it_does(capsys):
    """Item 4: stdout announced "evaluating on its held-out tasks" when nothing was evaluated."""
    pytest.importorskip("trl")
    from agentr1_trl.model_eval import split_env_kwargs

    shop = agentr1_gym.make("AgentR1/WebShop-v0").unwrapped
    split_env_kwargs(shop, {}, evaluates=False)
    out = capsys.readouterr().out
    assert "no held-out evaluation" in out and "evaluating" not in out


@pytest.mark.parametrize(
    "argv, said",
    [
        (
            ["eval", "AgentR1/SyntheticMultihop-v0", "--policy", "oracle", "--episode", "1"],
            "did you mean --episodes?",
        ),
        (
            ["eval", "AgentR1/SyntheticMultihop-v0", "--policy", "orcale", "--episodes", "1"],
            "Did you mean 'oracle'?",
        ),
        (
            ["eval", "tasks_mod.py:Tests/Door-v0", "--policy", "oracle"],
            "drop the .py (tasks_mod:Tests/Door-v0)",
        ),
    ],
)
def test_a_mistyped_flag_or_name_is_refused_with_the_closest(argv, said, capsys):
    """Item 5: `--max-step 1` was silently taken as `--max-steps` (argparse prefixes), `--policy orcale` had no
    "did you mean", and `sql_shop.py:MyOrg/...` did not say to drop the .py."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    assert code == 2
    assert said in capsys.readouterr().err


@pytest.mark.interpreter
@pytest.mark.slow
def test_agentr1_list_shows_a_user_task_with_its_description(tmp_path):
    """Item 5: `agentr1 list MODULE` showed a user task without its description (the world class and the module
    have docstrings)."""
    (tmp_path / "hotel_task.py").write_text(
        '"""Hotel bookings: find a room within the budget and pay for it."""\n'
        "from agentr1_gym import register_task, tool\n\n\n"
        "@tool\ndef rooms(city: str) -> str:\n"
        '    """Rooms.\n\n    Args:\n        city: a city\n    """\n    return city\n\n\n'
        'register_task("MyOrg/Hotel-v0", [{"q": "a", "answer": "b"}], prompt="{q}", tools=[rooms])\n'
    )
    out = subprocess.run([sys.executable, "-m", "agentr1_gym.cli", "list", "hotel_task"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    line = next(x for x in out.stdout.splitlines() if x.startswith("MyOrg/Hotel-v0"))
    assert "Hotel bookings: find a room within the budget and pay for it. (1 task, answer-shaped)" in line
    from agentr1_gym.registration import USER_DESCRIPTIONS

    assert USER_DESCRIPTIONS["Tests/Door-v0"] == "A door that opens. (1 task, world-shaped)"


def test_human_rendering_shows_each_message_once(capsys):
    """Item 5: check_env(env.unwrapped) printed the first observation twice (the reset rendered it, then the
    checker's render() again)."""
    from gymnasium.utils.env_checker import check_env

    env = gym.make("Tests/Door-v0")
    capsys.readouterr()
    check_env(env.unwrapped)
    assert capsys.readouterr().out.count("Open the door.") <= 1
    human = gym.make("Tests/Door-v0", render_mode="human")
    human.reset(seed=0)
    human.render()
    human.step('<tool_call>{"name": "open", "arguments": {}}</tool_call>')
    out = capsys.readouterr().out
    assert out.count("Open the door.") == 1 and out.count("[tool] open") == 1


def test_a_relative_dataset_path_that_is_missing_says_where_it_was_looked_for(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="read from the working directory"):
        register_task("Tests/Missing-v0", "nowhere/tasks.jsonl", prompt="{q}")
