"""Loaders and configs that used to fail late or untyped (reliability round 4): each is now accepted as meant, or a
one-line typed error at construction that names what is wrong."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest

import agentr1_gym
from agentr1_gym import ToolResult, register_task, tool
from agentr1_gym.data.webshop import load_webshop
from agentr1_gym.errors import ConfigError, DataError, ToolContractError
from agentr1_gym.task import TaskCodeError, load_rows


# ---- register_task ---------------------------------------------------------------------------------------------
def test_jsonl_with_line_separators_inside_strings_loads(tmp_path):
    path = tmp_path / "rows.jsonl"
    rows = [{"question": "a\u2028b", "answer": "1"}, {"question": "c\u2029d", "answer": "2"}]
    path.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows) + "\n", encoding="utf-8")
    assert load_rows(path) == rows


def test_a_reward_may_return_numpy_numbers():
    register_task(
        "Tests/NumpyReward-v0", [{"q": "?", "answer": "x"}], prompt="{q}",
        reward={"np32": lambda answer: np.float32(answer == "x"), "np0d": lambda answer: np.array(1.0)},
    )  # fmt: skip
    env = gym.make("Tests/NumpyReward-v0").unwrapped
    env.reset(seed=0)
    *_, info = env.step(env.answer_text("x"))
    assert info["metrics"]["np32"] == 1.0 and info["metrics"]["success"] == 1.0


def test_duplicate_ids_are_refused():
    """Before: rows with one id landed in both the training and the held-out split."""
    with pytest.raises(ConfigError, match=r"id 'a' .* is used by an earlier row"):
        register_task("Tests/DupIds-v0", [{"id": "a", "q": "1"}, {"id": "b", "q": "2"}, {"id": "a", "q": "3"}],
                      prompt="{q}", answer_field=None, reward=lambda answer: 0.0)  # fmt: skip


@pytest.mark.parametrize("template", ["{q.upper}x{q.nope}", "{q[5]}", "{n:d}"])
def test_a_template_that_cannot_be_filled_fails_at_registration(template):
    with pytest.raises(ConfigError, match="cannot be filled"):
        register_task("Tests/BadTemplate-v0", [{"q": "abc", "n": "x", "answer": "1"}], prompt=template)


def test_task_code_that_raises_is_a_typed_error_naming_the_task():
    def prompt(row):
        raise KeyError("topic")

    register_task("Tests/BadPrompt-v0", [{"q": "?", "answer": "1"}], prompt=prompt)
    with pytest.raises(TaskCodeError, match="prompt function raised KeyError"):
        gym.make("Tests/BadPrompt-v0").reset(seed=0)

    class Broken:
        def __init__(self, task):
            raise ValueError("no such table")

        def look(self) -> str:
            """Look."""
            return "x"

    register_task("Tests/BadWorld-v0", [{"q": "?"}], prompt="{q}", world=Broken, reward=lambda world: 0.0)
    with pytest.raises(TaskCodeError, match=r"world Broken\(task\) raised ValueError: no such table"):
        gym.make("Tests/BadWorld-v0").reset(seed=0)


@pytest.mark.parametrize(
    "result",
    [ToolResult(content=5), ToolResult("x", metadata=None), ToolResult("x", success="yes")],
)
def test_a_tool_result_of_the_wrong_shape_is_a_contract_error(result):
    @tool
    def bad() -> str:
        """Returns a malformed result."""
        return result

    register_task("Tests/BadResult-v0", [{"q": "?", "answer": "1"}], prompt="{q}", tools=[bad])
    env = gym.make("Tests/BadResult-v0").unwrapped
    env.reset(seed=0)
    with pytest.raises(ToolContractError, match="tool 'bad' returned"):
        env.step(env.call_text("bad"))


# ---- WebShop's files ---------------------------------------------------------------------------------------------
def _shop_files(tmp_path, items, attrs, human=None):
    (tmp_path / "items_shuffle_1.json").write_text(json.dumps(items))
    (tmp_path / "items_ins_v2_1.json").write_text(json.dumps(attrs))
    if human is not None:
        (tmp_path / "items_human_ins.json").write_text(json.dumps(human))
    return tmp_path


ITEM = {
    "asin": "B000000001", "name": "Organic Green Tea", "pricing": "$9.99", "category": "grocery",
    "product_category": "Grocery › Tea", "query": "green tea",
    "customization_options": {"size": [{"value": "Buy Now"}, {"value": "20 count"}]},
}  # fmt: skip


@pytest.mark.parametrize(
    ("attrs", "human"),
    [
        ({"B000000001": ["not", "a dict"]}, None),  # a product's attribute record that is not an object
        ({"B000000001": {"instruction": 5, "instruction_attributes": ["organic"]}}, None),  # not a string
        ({"B000000001": {"attributes": ["organic"]}}, {"B000000001": [{"instruction_attributes": ["x"]}]}),
    ],
)
def test_malformed_webshop_goals_are_one_line(tmp_path, attrs, human):
    root = _shop_files(tmp_path, [ITEM], attrs, human)
    with pytest.raises(DataError) as info:
        load_webshop(root, human_goals=human is not None)
    assert "\n" not in str(info.value)


def test_a_single_attribute_string_and_button_like_options(tmp_path):
    attrs = {"B000000001": {"attributes": "organic", "instruction": "i want organic green tea",
                            "instruction_attributes": "organic"}}  # fmt: skip
    products, goals = load_webshop(_shop_files(tmp_path, [ITEM], attrs))
    assert products[0].attributes == ("organic",) and goals[0].attributes == ("organic",)
    # an option value spelled like a page button stays clickable as the option
    assert dict(products[0].options)["size"] == ("buy now (size)", "20 count")
    env = agentr1_gym.make("AgentR1/WebShop-v0", data_path=str(tmp_path), num_test=1, split="test").unwrapped
    env.reset(options={"task_index": 0})
    for _ in range(env.max_turns):
        *_, terminated, _, info = env.step(env.oracle_action())
        if terminated:
            break
    assert info["metrics"]["success"] == 1.0


# ---- the mixture and reasoning-gym ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("envs", "message"),
    [
        (
            [{"id": "AgentR1/Calculator-v0", "weight": float("inf")}, "AgentR1/RG-ChainSum-v0"],
            "finite positive",
        ),
        (
            [{"id": "AgentR1/Calculator-v0", "weight": float("nan")}, "AgentR1/RG-ChainSum-v0"],
            "finite positive",
        ),
        ([{"id": 5}, "AgentR1/RG-ChainSum-v0"], "'id' must be an env id string"),
        (
            [{"id": "AgentR1/Calculator-v0", "kwargs": "max_turns=3"}, "AgentR1/RG-ChainSum-v0"],
            "'kwargs' must be a dict",
        ),
    ],
)
def test_bad_mixtures_fail_at_make(envs, message):
    with pytest.raises(ConfigError, match=message):
        agentr1_gym.make("AgentR1/Mixture-v0", envs=envs)


def test_overflowing_weights_still_mix():
    env = agentr1_gym.make(
        "AgentR1/Mixture-v0",
        envs=[
            {"id": "AgentR1/Calculator-v0", "weight": 1e308},
            {"id": "AgentR1/RG-ChainSum-v0", "weight": 1e308},
        ],
    ).unwrapped
    assert np.allclose(env.weights, [0.5, 0.5])
    env.reset(seed=0)


@pytest.mark.slow
def test_a_reasoning_gym_size_that_would_hang_reset_is_refused_at_make():
    """Before: min_terms=10**7 made every reset take minutes (a 70-million-character question)."""
    pytest.importorskip("reasoning_gym")
    with pytest.raises(ConfigError, match="lower its sizes"):
        agentr1_gym.make(
            "AgentR1/ReasoningGym-v0", task="chain_sum", config={"min_terms": 10**7, "max_terms": 10**7}
        )
