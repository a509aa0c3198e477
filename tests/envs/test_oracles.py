"""Oracles plan from the episode, not from their own calls: asking twice gives the same turn, a step the player
already took is not suggested again, and `agentr1 play` shows and plays the oracle's turn."""

from __future__ import annotations

import io
import sys

import pytest

import agentr1_gym
from agentr1_gym.cli import main

ENVS = [
    "AgentR1/HotpotQA-v0",
    "AgentR1/2WikiMultihopQA-v0",
    "AgentR1/Musique-v0",
    "AgentR1/SyntheticMultihop-v0",
    "AgentR1/Calculator-v0",
    "AgentR1/HumanEval-v0",
    "AgentR1/RG-BasicArithmetic-v0",
    "AgentR1/WebShop-v0",
]


@pytest.mark.parametrize("env_id", ENVS)
def test_asking_the_oracle_twice_gives_the_same_turn_and_it_still_succeeds(env_id):
    env = agentr1_gym.make(env_id).unwrapped
    env.reset(seed=3)
    done, info = False, {}
    while not done:
        turn = env.oracle_action()
        assert env.oracle_action() == turn == env.oracle_action()
        _, _, terminated, truncated, info = env.step(turn)
        done = terminated or truncated
    assert info["metrics"]["success"] == 1.0
    env.close()


def test_the_calculator_oracle_does_not_suggest_a_step_the_player_took():
    env = agentr1_gym.make("AgentR1/Calculator-v0").unwrapped
    env.reset(seed=5)
    steps = env.task.steps
    assert len(steps) >= 2
    env.step(env.call_text("calculator", expression=steps[0]))
    assert env.oracle_action() == env.call_text("calculator", expression=steps[1])


def test_play_shows_and_plays_the_oracle_and_stops_after_the_end(monkeypatch, capsys):
    env = agentr1_gym.make("AgentR1/Calculator-v0").unwrapped
    env.reset(seed=0)
    turns = len(env.task.steps) + 1
    commands = ["/oracle", "/oracle"] + ["/play-oracle"] * turns + ["/oracle", "anything", "/quit"]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(commands) + "\n"))
    assert main(["play", "AgentR1/Calculator-v0", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    first = env.call_text("calculator", expression=env.task.steps[0])
    assert out.count(first) == 3  # shown twice, then played once (the same turn each time)
    assert "'success': 1.0" in out and out.count("(the oracle plays)") == turns
    assert out.count("the episode has ended") == 2  # /oracle and a typed turn after the end
