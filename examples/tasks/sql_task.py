"""An SQL agent's task from docs/tutorials/your_own_task.md: `agentr1 train --env sql_task:MyOrg/SQL-v0`."""

import sqlite3

from agentr1_gym import register_task, tool

DB = sqlite3.connect(":memory:", check_same_thread=False)
DB.executescript("""create table staff(name text, dept text, salary int);
insert into staff values ('Ada','eng',120),('Bo','eng',95),('Cy','ops',70),('Di','ops',82),('Ed','sales',60);""")
READS = (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION)
DB.set_authorizer(lambda op, *_: sqlite3.SQLITE_OK if op in READS else sqlite3.SQLITE_DENY)  # reads only
DB.set_progress_handler(lambda: 1, 5_000_000)  # a query past 5M SQLite steps is stopped
DB.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, 100_000)  # no value over 100 kB (randomblob(1e9) is refused)


@tool(timeout_s=5)
def sql(query: str) -> str:
    """Run one SELECT statement on the company database (table staff: name, dept, salary)."""
    return str(DB.execute(query).fetchmany(20))


QUERIES = {
    "How many people work in eng?": "select count(*) from staff where dept='eng'",
    "What is the highest salary in ops?": "select max(salary) from staff where dept='ops'",
    "Who earns the least?": "select name from staff order by salary limit 1",
    "What is the total salary of sales?": "select sum(salary) from staff where dept='sales'",
    "How many departments are there?": "select count(distinct dept) from staff",
}
ROWS = [{"question": q, "query": s, "answer": str(DB.execute(s).fetchone()[0])} for q, s in QUERIES.items()]
register_task(
    "MyOrg/SQL-v0",
    ROWS,
    prompt="Answer from the company database: {question}",
    tools=[sql],
    process_rewards={"saw_answer": lambda result, task: task["answer"] in result},
    oracle=lambda env: [("sql", {"query": env.task["query"]}), env.task["answer"]],
)
