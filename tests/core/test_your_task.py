"""A user's own task: the open gate (any registered id, module:id), fixed-list splits, the public hooks, per-process
resources, public matchers, tools from functions, dataset and world tasks without subclassing."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import pickle
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from typing import Any

import gymnasium as gym
import pytest
from _paths import TESTS
from gymnasium.utils.env_checker import check_env

import agentr1_gym
from agentr1_gym import ConfigError, Tool, ToolEnv, ToolResult, make_task, register_task, tool
from agentr1_gym.errors import ToolInfrastructureError, UnknownEnvError
from agentr1_gym.evaluation import evaluate
from agentr1_gym.matching import answer_match, numeric_match, text_match
from agentr1_gym.task import RewardFunctionError, TaskEnv


def _run(env: gym.Env, seed: int = 0, policy: str = "oracle") -> dict[str, Any]:
    env.reset(seed=seed)
    while True:
        action = env.unwrapped.oracle_action() if policy == "oracle" else policy
        _, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info


# ---- the gate ------------------------------------------------------------------------------------------------
def test_module_id_form_imports_the_users_module_and_every_entry_point_takes_it():
    env = agentr1_gym.make("_user_task:UserOrg/Capitals-v0")
    assert isinstance(env.unwrapped, TaskEnv)
    assert _run(env)["metrics"]["success"] == 1.0
    # once imported, the plain id works too, with gym.make and agentr1_gym.make alike
    assert type(gym.make("UserOrg/Doubling-v0").unwrapped).__name__ == "Doubling"
    summary = evaluate("UserOrg/Doubling-v0", "oracle", episodes=5, progress=False)
    assert summary["success"] == 1.0


def test_unknown_and_foreign_ids_get_one_line_errors():
    import _user_task  # noqa: F401  (registers UserOrg/Capitals-v0 here: a test must not lean on another's import)

    with pytest.raises(
        UnknownEnvError, match=r"no env 'UserOrg/Capitols-v0'.*Did you mean 'UserOrg/Capitals-v0'"
    ):
        agentr1_gym.make("UserOrg/Capitols-v0")
    with pytest.raises(UnknownEnvError, match="cannot import 'no_such_module'"):
        agentr1_gym.make("no_such_module:X/Y-v0")
    with pytest.raises(ConfigError, match="not an agentr1 ToolEnv"):
        agentr1_gym.make("CartPole-v1")


@pytest.mark.interpreter
@pytest.mark.slow
def test_cli_eval_and_list_take_a_users_module(tmp_path):
    env = {"PYTHONPATH": str(TESTS), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-m", "agentr1_gym.cli", "eval", "_user_task:UserOrg/Capitals-v0", "--policy", "oracle",
         "--episodes", "4"],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["success"] == 1.0
    listed = subprocess.run(
        [sys.executable, "-m", "agentr1_gym.cli", "list", "_user_task"], capture_output=True, text=True, env=env,
        timeout=120,
    )  # fmt: skip
    assert "UserOrg/Capitals-v0" in listed.stdout and "AgentR1/HotpotQA-v0" in listed.stdout


@pytest.mark.interpreter
@pytest.mark.slow
def test_list_imports_a_module_from_the_working_directory_as_module_id_does(tmp_path):
    """A console script's sys.path starts at its own directory, not the working one: `agentr1 list MODULE` run
    next to MODULE.py finds it all the same (as `agentr1 eval MODULE:ID` does)."""
    shutil.copy(TESTS / "_user_task.py", tmp_path / "my_tasks.py")
    script = (
        "import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "  # what a console script sees
        "from agentr1_gym.cli import main; sys.exit(main(['list', 'my_tasks']))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120,
                         env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(TESTS.parent)})  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "UserOrg/Capitals-v0" in out.stdout


def test_old_private_hook_names_are_refused_with_the_new_name():
    with pytest.raises(TypeError, match=r"rename it to score_answer\(\)"):

        class Old(ToolEnv):
            def _score(self, answer):
                return {}


# ---- train / held-out splits of fixed task lists -------------------------------------------------------------
USER_TASK = (
    "_user_task:UserOrg/Capitals-v0"  # the module:id form: this test needs no earlier one to import it
)


def test_a_fixed_task_list_splits_into_disjoint_train_and_held_out_parts():
    ids = {}
    for split in ("train", "test", "all"):
        env = agentr1_gym.make(USER_TASK, task_split=split).unwrapped
        ids[split] = {env.reset(options={"task_index": i})[1]["task_id"] for i in range(env.num_tasks)}
    assert ids["train"].isdisjoint(ids["test"]) and ids["train"] | ids["test"] == ids["all"]
    assert len(ids["test"]) == 2 and len(ids["all"]) == 10  # test_fraction 0.2 of 10
    again = agentr1_gym.make(USER_TASK, task_split="test").unwrapped
    assert {again.reset(options={"task_index": i})[1]["task_id"] for i in range(2)} == ids["test"]
    # seeds sample only the chosen part
    env = agentr1_gym.make(USER_TASK, task_split="train")
    assert {env.reset(seed=s)[1]["task_id"] for s in range(50)} <= ids["train"]


def test_the_cli_trains_on_the_training_part_and_evaluates_on_the_held_out_part():
    pytest.importorskip("trl")
    from agentr1_trl.model_eval import split_env_kwargs

    fixed = agentr1_gym.make("UserOrg/Capitals-v0").unwrapped
    assert split_env_kwargs(fixed, {"max_turns": 4}) == (
        {"task_split": "train", "max_turns": 4},
        {"task_split": "test", "max_turns": 4},
    )
    procedural = agentr1_gym.make("UserOrg/Doubling-v0").unwrapped
    assert split_env_kwargs(procedural, {}) == ({}, {})
    shop = agentr1_gym.make("AgentR1/WebShop-v0", num_products=50, num_test=5).unwrapped
    train, held = split_env_kwargs(shop, {"num_products": 50, "num_test": 5})
    assert train["split"] == "train" and held["split"] == "test"


# ---- public hooks and per-process resources ------------------------------------------------------------------
class SqlEnv(ToolEnv):
    """An env holding a per-process resource: a database connection."""

    process_local = ("db",)
    answer_metrics = ("correct",)
    success_metric = "correct"
    tasks = ({"id": "count", "q": "How many rows?", "a": "3"},)

    def __init__(self, **settings: Any) -> None:
        self.opened = 0
        # a bound method as the tool: a copy of the env (deepcopy, pickle) calls its own copy's method
        super().__init__([Tool.from_function(self.sql)], **settings)
        self.open_resources()

    def sql(self, query: str) -> str:
        """Run a read-only SQL query.

        Args:
            query: one SELECT statement
        """
        return json.dumps(self.db.execute(query).fetchall())

    def open_resources(self) -> None:
        self.db = sqlite3.connect(":memory:")
        self.db.executescript("create table t(x); insert into t values (1), (2), (3);")
        self.opened += 1

    def close_resources(self) -> None:
        self.db.close()

    def task_prompt(self, task: Any) -> str:
        return task["q"]

    def score_answer(self, answer: str | None) -> dict[str, float]:
        return {"correct": float(answer is not None and numeric_match(answer, self.task["a"]) == 1.0)}


def test_per_process_resources_are_left_out_of_pickles_and_reopened():
    env = SqlEnv()
    env.reset(seed=0)
    obs = env.step(env.call_text("sql", query="select count(*) from t"))[0]
    assert "[[3]]" in obs
    # a deepcopy and an unpickled copy each reopen their own db (the connection itself cannot be pickled)
    clone = copy.deepcopy(env)
    assert clone.opened == 2 and clone.db is not env.db
    unpickled = pickle.loads(pickle.dumps(env))
    assert (
        unpickled.opened == 2
        and "[[3]]"
        in (unpickled.reset(seed=0), unpickled.step(env.call_text("sql", query="select count(*) from t")))[1][
            0
        ]
    )
    env.close()
    with pytest.raises(sqlite3.ProgrammingError):
        env.db.execute("select 1")
    clone.reset(seed=0)
    bad = clone.step(clone.call_text("sql", query="select * from nowhere"))
    assert "Error: OperationalError: no such table: nowhere" in bad[0]
    assert bad[4]["reward_components"]["tool_success"] == 0.0


def test_subclass_with_public_hooks_passes_gymnasiums_checker():
    check_env(SqlEnv(), skip_render_check=True)
    check_env(agentr1_gym.make("UserOrg/Doubling-v0").unwrapped, skip_render_check=True)


# ---- matchers -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("prediction", "gold", "expected"),
    [
        ("1.5", "15", 0.0),
        ("-3", "3", 0.0),
        ("15", "15", 1.0),
        ("The total is $1,200.", "1200", 1.0),
        ("3/4", 0.75, 1.0),
        ("15 or maybe 12", "15", 0.0),
        ("no number", "15", 0.0),
        ("15.00001", 15, 0.0),  # an integer gold is matched exactly (reliability round 4)
        ("0.3333", "1/3", 1.0),  # other golds within the tolerance
        ("15.1", 15, 0.0),
    ],
)
def test_numeric_match(prediction, gold, expected):
    assert numeric_match(prediction, gold) == expected


def test_text_and_answer_match():
    assert (
        agentr1_gym.matching.exact_match("1.5", "15") == 1.0
    )  # HotpotQA's official metric, kept for QA parity
    assert text_match("1.5", "15") == 0.0 and text_match(' "Paris". ', "paris") == 1.0
    assert text_match("Paris", "paris", case_sensitive=True) == 0.0
    assert answer_match("-3", "3") == 0.0 and answer_match("3", ["2", "3"]) == 1.0
    assert answer_match("France", "France") == 1.0 and answer_match("the France", "France") == 0.0


# ---- tools from functions --------------------------------------------------------------------------------------
def test_schema_from_type_hints_and_each_docstring_style():
    from typing import Literal

    @tool
    def google(city: str, limit: int = 3, mode: Literal["a", "b"] = "a") -> str:
        """Search cities.

        Args:
            city: the city
            limit (int): at most this many
                results, continued
            mode: how
        """
        return city

    def sphinx(x: float, tags: list[str] | None = None) -> str:
        """Sphinx style.

        :param x: the x value
        :param tags: optional tags
        """
        return str(x)

    def numpy_style(values: list[int]) -> int:
        """NumPy style.

        Parameters
        ----------
        values : list of int
            The values to sum.
        """
        return sum(values)

    params = google.schema()["function"]["parameters"]
    assert params["required"] == ["city"] and params["additionalProperties"] is False
    assert params["properties"]["limit"] == {"default": 3, "description": "at most this many results, continued",
                                             "type": "integer"}  # fmt: skip
    assert params["properties"]["mode"]["enum"] == ["a", "b"]
    assert google.schema()["function"]["description"] == "Search cities."
    sph = Tool.from_function(sphinx).schema()["function"]["parameters"]["properties"]
    assert sph["x"]["description"] == "the x value" and sph["tags"]["description"] == "optional tags"
    npy = Tool.from_function(numpy_style)
    assert (
        npy.schema()["function"]["parameters"]["properties"]["values"]["description"] == "The values to sum."
    )
    assert npy.execute(npy.validate({"values": [1, 2]})).content == "3"
    assert google("x") == "x"  # a decorated function stays callable


def test_sync_and_async_calls_and_what_failures_become():
    @tool(timeout_s=0.5)
    async def fetch(url: str, delay: float = 0.0) -> dict[str, str]:
        """Fetch a page.

        Args:
            url: the page
            delay: seconds to wait
        """
        await asyncio.sleep(delay)
        if url == "bad":
            raise ValueError("bad url")
        return {"url": url}

    @tool
    def service_down() -> str:
        """A tool whose backing service is down."""
        raise ToolInfrastructureError("the index server is down")

    @tool
    def move(direction: str) -> ToolResult:
        """Move and end the game."""
        return ToolResult(f"moved {direction}", terminal=True)

    assert fetch.execute(fetch.validate({"url": "a"})).content == '{"url": "a"}'
    failed = fetch.execute(fetch.validate({"url": "bad"}))
    assert not failed.success and failed.content == "Error: ValueError: bad url"
    slow = fetch.execute(fetch.validate({"url": "a", "delay": 3}))
    assert not slow.success and "did not finish within 0.5 s" in slow.content
    with pytest.raises(ToolInfrastructureError):
        service_down.execute(service_down.validate({}))
    assert move.execute(move.validate({"direction": "n"})).terminal
    with pytest.raises(Exception, match="validation error"):
        fetch.validate({"url": "a", "extra": 1})
    # inside a running event loop (a notebook, an async server) sync execution still works
    assert (
        asyncio.run(asyncio.to_thread(fetch.execute, fetch.validate({"url": "z"}))).content == '{"url": "z"}'
    )


def test_bad_functions_get_errors_that_name_the_problem():
    def no_hint(x) -> str:
        """Doc."""
        return x

    def no_doc(x: int) -> int:
        return x

    def star(*args: int) -> int:
        """Doc."""
        return 0

    with pytest.raises(ConfigError, match="parameter 'x' has no type hint"):
        Tool.from_function(no_hint)
    with pytest.raises(ConfigError, match="needs a description"):
        Tool.from_function(no_doc)
    assert Tool.from_function(no_doc, description="Identity.").description == "Identity."
    with pytest.raises(ConfigError, match=r"\*args"):
        Tool.from_function(star)
    with pytest.raises(ConfigError, match="not a valid function name"):
        Tool.from_function(lambda: 0, description="x")


def test_function_tools_pickle():
    from _user_task import lookup

    again = pickle.loads(pickle.dumps(lookup))
    assert again is lookup
    env = agentr1_gym.make("UserOrg/Capitals-v0").unwrapped
    clone = pickle.loads(pickle.dumps(env))
    clone.reset(seed=1)
    assert "France" in clone.step(clone.call_text("lookup", city="Paris"))[0]


# ---- dataset tasks ----------------------------------------------------------------------------------------------
ROWS = [
    {"question": f"What is {a} + {b}?", "answer": str(a + b), "a": a, "b": b}
    for a, b in [(1, 2), (3, 4), (10, 5)]
]


def test_answer_task_in_a_few_lines_runs_everywhere():
    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first
            b: second
        """
        return a + b

    spec = register_task(
        "Tests/Add-v0", ROWS, prompt="Use the tool. {question}", tools=[add],
        oracle=lambda env: env.call_text("add", a=env.task["a"], b=env.task["b"]) if env.turn == 0
        else env.answer_text(env.task["answer"]),
    )  # fmt: skip
    assert len(spec.rows) == 3
    check_env(gym.make("Tests/Add-v0").unwrapped, skip_render_check=True)
    for make in (gym.make, agentr1_gym.make):
        info = _run(make("Tests/Add-v0", max_turns=3), seed=2)
        assert info["metrics"] == {
            "score": 1.0,
            "correct": 1.0,
            "success": 1.0,
            "format_ok": 1.0,
            "turns": 2.0,
            "repeat_rate": 0.0,
        }
    env = gym.make("Tests/Add-v0")
    env.reset(seed=0)
    info = env.step(env.unwrapped.answer_text("-3"))[4]
    assert info["metrics"]["correct"] == 0.0
    assert gym.make("Tests/Add-v0").spec.to_json()  # JSON-able kwargs: {"task": "Tests/Add-v0"}


def test_weighted_reward_components_are_reported():
    def correct(answer: str | None, task: dict) -> float:
        return float(answer is not None and answer.strip() == task["answer"])

    def brief(answer: str | None) -> bool:
        return answer is not None and len(answer) <= 2

    env = make_task(
        ROWS, prompt="{question}", reward={"correct": (correct, 3.0), "brief": (brief, 1.0)}
    ).make()
    env.reset(options={"task_index": 2})
    metrics = env.step(env.answer_text("15"))[4]["metrics"]
    assert metrics["correct"] == 1.0 and metrics["brief"] == 1.0 and metrics["score"] == 1.0
    env.reset(options={"task_index": 2})
    metrics = env.step(env.answer_text("15 "))[4]["metrics"]  # the parsed answer is stripped by the format
    env.reset(options={"task_index": 2})
    metrics = env.step(env.answer_text("the answer: 15"))[4]["metrics"]
    assert metrics["correct"] == 0.0 and metrics["brief"] == 0.0 and metrics["success"] == 0.0
    half = make_task(ROWS, prompt="{question}", reward=[correct, brief], success_threshold=0.5).make()
    half.reset(options={"task_index": 0})
    m = half.step(half.answer_text("3 "))[4]["metrics"]
    assert m["score"] in (0.5, 1.0) and m["success"] == 1.0


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: first
        b: second
    """
    return a + b


def _used_the_tasks_numbers(arguments: dict, task: dict) -> bool:
    return (arguments.get("a"), arguments.get("b")) == (task["a"], task["b"])


def test_a_task_declares_its_reward_settings_and_its_own_process_rewards():
    """`settings=` takes gym.make's names (gym.make's own win, a reward dict field by field); `process_rewards=`
    pays a function's units per successful call, capped per episode, reweighted like any env's process reward."""
    register_task(
        "Tests/AddPaid-v0", ROWS, prompt="Use the tool. {question}", tools=[add],
        settings={"reward": {"tool_success_reward": 0.05, "tool_success_cap": 1}},
        process_rewards={"right_numbers": (_used_the_tasks_numbers, 0.2)},
    )  # fmt: skip
    env = gym.make("Tests/AddPaid-v0")
    check_env(env.unwrapped, skip_render_check=True)
    env.reset(options={"task_index": 1})
    u = env.unwrapped
    assert u.reward_config.tool_success_reward == 0.05
    assert u.max_episode_reward() == pytest.approx(1.0 + 0.1 + 0.05 + 0.2)  # answer, format, the two process
    rewards, parts = [], []
    for action in (
        u.call_text("add", a=1, b=2),  # a call with other numbers: tool success only
        u.call_text("add", a=3, b=4),  # the task's numbers: paid once
        u.call_text("add", a=3, b=4),  # again: the cap is reached, nothing more (a policy cannot farm it)
        u.call_text("add", a="x", b=4),  # a failed call earns nothing
        u.answer_text("7"),
    ):
        _, reward, _, _, info = env.step(action)
        rewards.append(reward)
        parts.append({k: v for k, v in info["reward_components"].items() if v and k != "invalid_call"})
    assert parts[:3] == [{"tool_success": 0.05}, {"right_numbers": 0.2}, {}]
    assert sum(rewards) <= u.max_episode_reward() + 1e-9 and info["metrics"]["success"] == 1.0
    # gym.make's settings override the task's, field by field; the process reward reweights by its name
    other = gym.make("Tests/AddPaid-v0", reward={"answer_weight": 2.0, "process": {"right_numbers": 0.5}})
    assert other.unwrapped.reward_config.tool_success_reward == 0.05
    assert other.unwrapped.reward_config.answer_weight == 2.0
    other.reset(options={"task_index": 1})
    paid = other.step(other.unwrapped.call_text("add", a=3, b=4))[4]["reward_components"]["right_numbers"]
    assert paid == 0.5
    clone = pickle.loads(pickle.dumps(env.unwrapped))
    clone.reset(options={"task_index": 0})
    assert clone.step(clone.call_text("add", a=1, b=2))[4]["reward_components"]["right_numbers"] == 0.2


def test_reward_settings_in_the_wrong_place_get_one_line_errors_that_say_where_they_go():
    parts = {"prompt": "{question}", "tools": [add]}
    cases = [
        (
            {"tool_success_reward": 0.05},
            "settings={'reward': {'tool_success_reward'",
        ),  # was a plain TypeError
        ({"max_calls_per_turn": 2}, "settings={'max_calls_per_turn'"),
        ({"promt": "{question}"}, "did you mean prompt="),
        ({"settings": {"reward": {"tool_sucess_reward": 0.1}}}, "RewardConfig field 'tool_success_reward'"),
        ({"settings": {"max_turn": 3}}, "did you mean 'max_turns'"),
        ({"settings": {"max_turns": 3}}, "pass max_turns= to the task"),
        (
            {
                "settings": {"reward": {"process": {"right_number": 1}}},
                "process_rewards": {"right_numbers": _used_the_tasks_numbers},
            },
            "did you mean 'right_numbers'",
        ),
        ({"process_rewards": {"x": lambda foo: 1}}, "takes parameter 'foo'"),
        ({"process_rewards": {"x": (_used_the_tasks_numbers, 0.1, 0)}}, "cap"),
        ({"process_rewards": {"tool_success": _used_the_tasks_numbers}}, "name it otherwise"),
        ({"process_rewards": [_used_the_tasks_numbers]}, "a dict"),
    ]
    for extra, message in cases:
        with pytest.raises(ConfigError, match=re.escape(message)):
            register_task("Tests/AddBad-v0", ROWS, **{**parts, **extra})


def test_a_process_reward_that_misbehaves_raises_a_typed_error():
    for fn, message in (
        (lambda arguments: 1 / 0, "raised ZeroDivisionError"),
        (lambda: -1.0, "returned -1.0"),
    ):
        env = make_task(ROWS, prompt="{question}", tools=[add], process_rewards={"p": fn}).make()
        env.reset(options={"task_index": 0})
        with pytest.raises(RewardFunctionError, match=message):
            env.step(env.call_text("add", a=1, b=2))


def test_bad_task_parts_raise_at_construction_naming_the_field(tmp_path):
    with pytest.raises(ConfigError, match="reward function 'reward' takes parameter 'completion'"):
        make_task(ROWS, prompt="{question}", reward=lambda completion: 1.0 if completion else 0.0)

    def f(completion: str) -> float:
        return 0.0

    with pytest.raises(ConfigError, match="reward function 'f' takes parameter 'completion'"):
        make_task(ROWS, prompt="{question}", reward=f)
    with pytest.raises(ConfigError, match=r"dataset row 1 \(id 1\) lacks the field 'question'"):
        make_task([ROWS[0], {"answer": "1"}], prompt="{question}")
    with pytest.raises(ConfigError, match="tool name 'add_numbers' is used twice"):
        make_task(ROWS, prompt="{question}", tools=[add_numbers, add_numbers])
    with pytest.raises(ConfigError, match="name lambdas with a dict"):
        make_task(ROWS, prompt="{question}", reward=[lambda answer: 1.0])
    bad = tmp_path / "rows.jsonl"
    bad.write_text('{"question": "q", "answer": "1"}\n{oops\n')
    with pytest.raises(ConfigError, match=r"rows.jsonl, line 2: not valid JSON"):
        make_task(bad, prompt="{question}")
    with pytest.raises(ConfigError, match="the AgentR1/ namespace is the library's"):
        register_task("AgentR1/Mine-v0", ROWS, prompt="{question}")
    with pytest.raises(ConfigError, match="'world', but the task has no world"):
        make_task(ROWS, prompt="{question}", reward=lambda world: 1.0)


def add_numbers(a: int, b: int) -> int:
    """Add."""
    return a + b


def test_reward_functions_that_misbehave_raise_typed_errors():
    env = make_task(ROWS, prompt="{question}", reward={"r": lambda answer: 2.0}).make()
    env.reset(seed=0)
    with pytest.raises(
        RewardFunctionError, match=r"returned 2.0 for task '.*'; a reward function returns a number"
    ):
        env.step(env.answer_text("1"))
    env = make_task(ROWS, prompt="{question}", reward={"r": lambda answer: float(int(answer))}).make()
    env.reset(seed=0)
    with pytest.raises(RewardFunctionError, match="'r' raised ValueError"):
        env.step(env.answer_text("seven"))


def test_datasets_from_jsonl_and_a_hugging_face_dataset(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    assert make_task(path, prompt="{question}").rows == tuple(ROWS)
    datasets = pytest.importorskip("datasets")
    spec = make_task(datasets.Dataset.from_list(ROWS), prompt="{question}")
    env = spec.make()
    env.reset(options={"task_index": 1})
    assert env.step(env.answer_text("7"))[4]["metrics"]["success"] == 1.0


# ---- world tasks -----------------------------------------------------------------------------------------------
class Vault:
    """A world: find the code digit by digit; the vault opens (and the episode ends) on the right code."""

    def __init__(self, task: dict) -> None:
        self.code = task["code"]
        self.tries = 0
        self.opened = False
        self.done = False

    def probe(self, position: int) -> str:
        """Reveal one digit of the code.

        Args:
            position: 0-based digit position
        """
        if not 0 <= position < len(self.code):
            raise IndexError(f"position must be in [0, {len(self.code)})")
        return self.code[position]

    def open(self, code: str) -> str:
        """Try a code; three wrong tries lock the vault.

        Args:
            code: the full code
        """
        self.tries += 1
        self.opened = code == self.code
        self.done = self.opened or self.tries >= 3
        return "open!" if self.opened else "wrong code"

    def state_key(self) -> tuple:
        return (self.tries, self.opened)


def _vault_oracle(env: ToolEnv) -> str:
    code = env.task["code"]
    if env.turn < len(code):
        return env.call_text("probe", position=env.turn)
    return env.call_text("open", code=code)


def test_world_task_ends_when_the_world_says_and_scores_its_state():
    spec = register_task(
        "Tests/Vault-v0", [{"code": "42"}, {"code": "917"}], prompt="Open the vault.", world=Vault,
        reward=lambda world: float(world.opened), oracle=_vault_oracle, max_turns=6,
    )  # fmt: skip
    assert [t.name for t in spec.world_tools] == ["probe", "open"]
    env = gym.make("Tests/Vault-v0")
    check_env(env.unwrapped, skip_render_check=True)
    info = _run(env, seed=1)
    assert info["metrics"]["success"] == 1.0
    env.reset(options={"task_index": 0})
    assert "This task has no final answer" in env.step(env.unwrapped.answer_text("42"))[4]["action_error"]
    bad = env.step(env.unwrapped.call_text("probe", position=9))
    assert "Error: IndexError: position must be in [0, 2)" in bad[0] and not bad[2]
    assert env.unwrapped.state_key() == (0, False)
    for _ in range(3):
        _, _, terminated, _, info = env.step(env.unwrapped.call_text("open", code="00"))
    assert terminated and info["metrics"]["success"] == 0.0  # locked after three wrong tries
    # each episode gets a fresh world
    env.reset(options={"task_index": 1})
    assert env.unwrapped.world.tries == 0 and env.unwrapped.world.code == "917"


@pytest.mark.slow
def test_ppo_trains_on_a_users_task_from_the_cli_and_evaluates_its_held_out_part(tmp_path, tiny_dir, capsys):
    pytest.importorskip("trl")
    from agentr1_gym.cli import main

    out = tmp_path / "run"
    argv = ["train", "--env", "_user_task:UserOrg/Capitals-v0", "--algo", "ppo", "--model", tiny_dir, "--max-steps",
            "1", "--lora-r", "2", "--warm-start", "2", "--eval-episodes", "2", "--output-dir", str(out)]  # fmt: skip
    for field in (
        "per_device_train_batch_size=2",
        "num_generations=2",
        "use_cpu=true",
        "max_new_tokens_per_turn=8",
    ):
        argv += ["--set", field]
    assert main(argv) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "evaluating on its held-out tasks (task_split=test)" in printed
    assert json.loads((out / "eval_after_rl.json").read_text())["episodes"] == 2
    assert (out / "adapter" / "value_head.pt").exists()


# ---- fuzz and reward hacking on the new surfaces: function tools, dataset and world tasks --------------------
def _fuzz(env: gym.Env, steps: int, seed: int) -> None:
    from test_fuzz_steps import _adversarial

    rng = random.Random(seed)
    tools = [t["function"]["name"] for t in env.reset(seed=0)[1]["tools"]]
    episode = 0
    for _ in range(steps):
        action = _adversarial(rng, tools)
        if (
            rng.random() < 0.3
        ):  # well-formed calls with hostile arguments under the tools' own parameter names
            tool = rng.choice(tools)
            params = list(env.unwrapped.tools[tool].schema_view()["function"]["parameters"]["properties"])
            value = rng.choice(["", "x" * 50_000, -(10**30), None, [1], {"a": 1}, "\x00", 1e308, "🙂"])
            action = env.unwrapped.call_text(tool, **{p: value for p in params})
        obs, reward, terminated, truncated, _ = env.step(action)
        assert isinstance(obs, str) and math.isfinite(reward), action[:200]
        if terminated or truncated:
            episode += 1
            env.reset(seed=episode)
    env.close()


def test_fuzz_a_dataset_task_with_function_tools_and_a_world_task():
    register_task("Tests/FuzzVault-v0", [{"code": "42"}, {"code": "917"}], prompt="Open the vault.", world=Vault,
                  reward=lambda world: float(world.opened), max_turns=6)  # fmt: skip
    _fuzz(agentr1_gym.make("_user_task:UserOrg/Capitals-v0"), 1500, 1)
    _fuzz(gym.make("Tests/FuzzVault-v0"), 1500, 2)


def test_a_world_task_pays_nothing_it_was_not_solved_for():
    register_task("Tests/HackVault-v0", [{"code": "42"}, {"code": "917"}], prompt="Open the vault.", world=Vault,
                  reward=lambda world: float(world.opened), max_turns=6)  # fmt: skip
    env = gym.make("Tests/HackVault-v0").unwrapped
    policies = {
        "probe every digit, never open": lambda turn: env.call_text("probe", position=turn % 2),
        "guess codes": lambda turn: env.call_text("open", code=str(turn)),
        "answer instead of acting": lambda turn: env.answer_text("42"),
    }
    for name, policy in policies.items():
        for i in range(2):
            env.reset(options={"task_index": i})
            total, done, turn = 0.0, False, 0
            while not done:
                _, reward, terminated, truncated, info = env.step(policy(turn))
                total, done, turn = total + reward, terminated or truncated, turn + 1
            assert info["metrics"]["success"] == 0.0, name
            assert total <= 0.05 * env.max_episode_reward(), (name, total)


class ListingVault(Vault):
    """The vault, listing its admissible moves: a probe of each digit, or a guess."""

    def admissible_actions(self) -> list:
        return [("probe", {"position": i}) for i in range(len(self.code))] + [("open", {"code": "000"})]


def test_random_policy_on_a_world_plays_its_moves_not_answers():
    """--policy random on a register_task world: a random admissible move (the world's own list, else a method
    that needs no argument), never an answer; a world with neither says how to give one, in one line."""
    from agentr1_gym.errors import NoOracleError

    register_task("Tests/ListingVault-v0", [{"code": "42"}, {"code": "917"}], prompt="Open the vault.",
                  world=ListingVault, reward=lambda world: float(world.opened))  # fmt: skip
    env = agentr1_gym.make("Tests/ListingVault-v0").unwrapped
    seen = set()
    for seed in range(12):
        env.reset(seed=seed)
        action = env.random_action()
        assert "<answer>" not in action
        call = env.tool_format.parse(action, env.tools).calls[0]
        seen.add((call.name, tuple(sorted(call.arguments.items()))))
        _, _, _, _, info = env.step(action)
        assert info["action_error"] is None
    assert {name for name, _ in seen} == {"probe", "open"}
    result = evaluate("Tests/ListingVault-v0", "random", episodes=6, progress=False)
    assert result["episodes"] == 6

    register_task(
        "Tests/QuietVault-v0",
        [{"code": "42"}],
        prompt="Open the vault.",
        world=Vault,
        reward=lambda world: float(world.opened),
    )
    quiet = agentr1_gym.make("Tests/QuietVault-v0").unwrapped
    quiet.reset(seed=0)
    with pytest.raises(NoOracleError, match="admissible_actions"):
        quiet.random_action()


def test_an_oracle_may_return_the_whole_plan():
    """``oracle=lambda env: [(tool, {args}), ..., answer]``: turn ``env.turn`` is played; a bad step or a plan too
    short is a one-line ConfigError."""

    @tool
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return {"a": "1"}.get(key, "?")

    rows = [{"key": "a", "answer": "1"}]
    register_task("Tests/Plan-v0", rows, prompt="{key}?", tools=[lookup],
                  oracle=lambda env: [("lookup", {"key": env.task["key"]}), env.task["answer"]])  # fmt: skip
    env = gym.make("Tests/Plan-v0")
    env.reset(options={"task_index": 0})
    first = env.unwrapped.oracle_action()
    assert first == env.unwrapped.call_text("lookup", key="a")
    env.step(first)
    assert env.unwrapped.oracle_action() == env.unwrapped.answer_text("1")
    *_, info = env.step(env.unwrapped.oracle_action())
    assert info["metrics"]["success"] == 1.0
    for plan, message in (([("lookup", "a")], "a step is a call"), ([], "the oracle's plan has 0 steps")):
        register_task("Tests/BadPlan-v0", rows, prompt="{key}?", tools=[lookup], oracle=lambda env, p=plan: p)
        bad = gym.make("Tests/BadPlan-v0")
        bad.reset(options={"task_index": 0})
        with pytest.raises(ConfigError, match=message):
            bad.unwrapped.oracle_action()
