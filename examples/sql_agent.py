"""An SQL agent on your own database, in the public API: a tool from a function, a task from rows, GRPO on it.

python examples/sql_agent.py [--model smollm2] [--max-steps 20] [--output-dir runs/sql-agent]

The task part (``sql`` and ``register_task`` below) is what a user writes; the rest is the usual training script.
Each process opens its own copy of the database on first use, so vector envs and workers need nothing extra.
"""

from __future__ import annotations

import functools
import sqlite3

from _common import parse, policy

from agentr1_gym import register_task, tool

SCHEMA = """
create table employees(name text, dept text, salary integer, hired integer);
insert into employees values ('Ada','eng',120,2019),('Bo','eng',95,2021),('Cy','ops',70,2018),
  ('Di','ops',82,2022),('Ed','sales',60,2020),('Flo','sales',66,2023),('Gus','eng',105,2017);
"""
QUESTIONS = [
    ("How many employees work in eng?", "select count(*) from employees where dept='eng'"),
    ("What is the highest salary in ops?", "select max(salary) from employees where dept='ops'"),
    ("How many people were hired after 2019?", "select count(*) from employees where hired > 2019"),
    ("What is the total salary of sales?", "select sum(salary) from employees where dept='sales'"),
    ("Who was hired first?", "select name from employees order by hired limit 1"),
    ("How many departments are there?", "select count(distinct dept) from employees"),
]


@functools.cache
def database() -> sqlite3.Connection:  # one per process, opened on first use
    db = sqlite3.connect(":memory:", check_same_thread=False)
    db.executescript(SCHEMA)
    return db


@tool
def sql(query: str) -> str:
    """Run one read-only SQL query on the company database (table employees: name, dept, salary, hired).

    Args:
        query: a single SELECT statement
    """
    if not query.lstrip().lower().startswith("select"):
        raise ValueError("only SELECT queries are allowed")
    return str(database().execute(query).fetchmany(20))


register_task(
    "Example/SQL-v0",
    [{"id": str(i), "question": q, "query": s, "answer": str(database().execute(s).fetchone()[0])}
     for i, (q, s) in enumerate(QUESTIONS)],
    prompt="Answer from the company database: {question}",
    tools=[sql],
    oracle=lambda env: [("sql", {"query": env.task["query"]}), env.task["answer"]],
    max_turns=3,
)  # fmt: skip


def main() -> None:
    args = parse(__doc__.split("\n\n")[0], output_dir="runs/sql-agent")
    from agentr1_trl import AgentGRPOConfig, AgentGRPOTrainer
    from peft import LoraConfig

    model, tokenizer = policy(args.model)
    config = AgentGRPOConfig(
        output_dir=args.output_dir,
        env_id="sql_agent:Example/SQL-v0",  # module:id, so that any worker process finds the task
        env_kwargs={"task_split": "train"},  # the held-out questions stay out of training
        num_generations=4,
        per_device_train_batch_size=8,
        max_steps=args.max_steps,
        max_new_tokens_per_turn=args.max_new_tokens,
        learning_rate=1e-4,
        beta=0.0,
        generation_backend=args.backend,
        save_strategy="no",
        logging_steps=1,
        report_to="none",
    )
    trainer = AgentGRPOTrainer(
        model, config, tokenizer, peft_config=LoraConfig(r=16, target_modules=["q_proj", "v_proj"])
    )
    trainer.train()
    trainer.save_model(f"{args.output_dir}/adapter")
    print("final env/success:", [h.get("env/success") for h in trainer.state.log_history if "loss" in h][-1])


if __name__ == "__main__":  # vLLM's engine needs the guard
    main()
