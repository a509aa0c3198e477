"""The two own tasks in examples/tasks/, written against docs/tutorials/your_own_task.md (an SQL agent and a
booking world): each is a working env (gymnasium's checker, the oracle solves every task, a random policy plays,
the task's process reward pays once) and stays within the line targets of renovation 3 (30 and 60 lines, blank
lines excluded; before that renovation the same two tasks took 51 and 75)."""

from __future__ import annotations

import sys

import gymnasium as gym
import pytest
from _paths import REPO
from gymnasium.utils.env_checker import check_env

from agentr1_gym.evaluation import evaluate

TASKS = REPO / "examples" / "tasks"
TARGETS = {"sql_task.py": ("MyOrg/SQL-v0", 30), "booking_world.py": ("MyOrg/Booking-v0", 60)}


@pytest.fixture(scope="module", autouse=True)
def _importable():
    sys.path.insert(0, str(TASKS))
    import booking_world  # noqa: F401  (registers the tasks)
    import sql_task  # noqa: F401

    yield
    sys.path.remove(str(TASKS))


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_within_the_line_target(name):
    lines = [line for line in (TASKS / name).read_text().splitlines() if line.strip()]
    assert len(lines) <= TARGETS[name][1], f"{name}: {len(lines)} lines"


@pytest.mark.parametrize("name", sorted(TARGETS))
def test_a_working_env_that_the_oracle_solves_and_a_random_policy_plays(name):
    env_id = TARGETS[name][0]
    check_env(gym.make(env_id).unwrapped, skip_render_check=True)
    oracle = evaluate(env_id, "oracle", all_tasks=True, progress=False)
    assert oracle["success"] == 1.0 and oracle["episodes"] >= 5
    random = evaluate(env_id, "random", episodes=6, progress=False)
    assert random["episodes"] == 6 and random["success"] < 1.0


def test_the_process_rewards_pay_once_per_episode():
    sql = gym.make("MyOrg/SQL-v0")
    sql.reset(options={"task_index": 0})
    query = sql.unwrapped.call_text("sql", query=sql.unwrapped.task["query"])
    paid = [sql.step(query)[4]["reward_components"]["saw_answer"] for _ in range(3)]
    assert paid == [0.1, 0.0, 0.0]
    booking = gym.make("MyOrg/Booking-v0")
    booking.reset(options={"task_index": 0})
    city = booking.unwrapped.task["city"]
    turns = [booking.unwrapped.call_text("search", city=c) for c in ("Nowhere", city, city)]
    assert [booking.step(t)[4]["reward_components"]["searched"] for t in turns] == [0.0, 0.1, 0.0]


def test_the_sql_tool_is_read_only_and_bounded_by_sqlite_itself():
    """What the model may send: writes, pragmas and attachments are refused by SQLite's authorizer, and a query
    that would run for minutes is stopped by its progress handler (no Python parsing of the SQL)."""
    import sql_task

    def run(query):
        return sql_task.sql.execute(sql_task.sql.validate({"query": query}))

    for query in ("delete from staff", "pragma query_only = off", "attach database '/tmp/x.db' as x",
                  "insert into staff values ('Mallory', 'eng', 1)"):  # fmt: skip
        assert run(query).content == "Error: DatabaseError: not authorized"
    runaway = run("select count(*) from " + ", ".join(f"staff t{i}" for i in range(12)))  # 5**12 rows
    assert runaway.content == "Error: OperationalError: interrupted"
    assert run("select count(*) from staff").content == "[(5,)]"
    # one VM step that would allocate a gigabyte (the blind trial's trap): SQLite's length limit refuses it
    assert run("select length(randomblob(1000000000))").content == "Error: DataError: string or blob too big"
