"""AgentR1/MiniWoB-v0: MiniWoB++'s own pages in headless Chromium. The oracles solve their tasks on held-out
instances, the page text is what the agent can act on, bad actions are observations, the browser is reused,
bounded by deadlines, offline, and never outlives its env or its process."""

from __future__ import annotations

import http.server
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from _procs import processes_with

import agentr1_gym
from agentr1_gym.envs.miniwob_oracles import click_every_element, type_everywhere
from agentr1_gym.errors import ConfigError, MissingProgramError, ToolInfrastructureError

pytestmark = pytest.mark.slow


def _browser_or_skip() -> None:
    from agentr1_gym.tools.browser import find_browser

    try:
        find_browser()
    except MissingProgramError as exc:
        if os.environ.get("AGENTR1_REQUIRE_BROWSER"):
            raise
        pytest.skip(str(exc))
    pytest.importorskip("miniwob")


@pytest.fixture(autouse=True)
def _needs_browser():
    _browser_or_skip()


def _play(env, policy, seed: int) -> dict:
    env.reset(seed=seed)
    done = False
    while not done:
        _, _, terminated, truncated, info = env.step(policy(env))
        done = terminated or truncated
    return info["metrics"]


def test_every_oracle_solves_its_task_on_held_out_instances():
    from agentr1_gym.envs.miniwob import ORACLE_TASKS

    assert len(ORACLE_TASKS) >= 15
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", split="test")
    failed = []
    for name in ORACLE_TASKS:
        env.unwrapped.task_names = (name,)
        for seed in range(3):
            metrics = _play(env, lambda e: e.unwrapped.oracle_action(), seed)
            if metrics["success"] != 1.0:
                failed.append((name, seed))
            assert env.unwrapped.task.seed >= 2**30  # a held-out instance
    env.close()
    assert not failed


def test_the_page_is_text_with_refs_that_the_tools_take():
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="login-user")
    obs, info = env.reset(seed=5)
    assert 'Task: Enter the username "' in obs and "[" in obs and "password field" in obs
    assert {t["function"]["name"] for t in info["tools"]} == {"click", "type", "press", "select"}
    page = env.unwrapped.session.page
    user = next(e for e in page.elements() if e.kind == "text field")
    obs, *_ = env.step(env.unwrapped.call_text("type", ref=user.ref, text="someone"))
    assert f'[{user.ref}] text field value="someone"' in obs  # the same element, the same ref, its new value
    obs, *_ = env.step(env.unwrapped.call_text("type", ref=user.ref, text="other"))
    assert 'value="other"' in obs and "someoneother" not in obs  # typing replaces what the field held
    env.close()


def test_bad_actions_are_observations_not_crashes():
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="choose-list", max_turns=8)
    env.reset(seed=1)
    page = env.unwrapped.session.page
    listbox = next(e for e in page.elements() if e.tag == "select")
    button = next(e for e in page.elements() if e.tag == "button")
    for action, expected in (
        (env.unwrapped.call_text("click", ref=99999), "No element [99999]"),
        (env.unwrapped.call_text("type", ref=button.ref, text="x"), "not a text field"),
        (env.unwrapped.call_text("select", ref=listbox.ref, option="Atlantis"), "has no option"),
        (env.unwrapped.call_text("select", ref=button.ref, option="x"), "not a drop-down list"),
        (env.unwrapped.call_text("press", key="F13"), "Unknown key"),
        ("<tool_call>{not json</tool_call>", ""),
        ("I would click the button.", ""),
    ):
        obs, _, terminated, _, info = env.step(action)
        assert not terminated and expected in obs, action
        if not expected:  # not a call at all: a format error
            assert info["action_error"]
    env.close()


def test_select_and_submit_end_the_episode_with_miniwobs_reward():
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="choose-list")
    env.reset(seed=2)
    target = env.unwrapped.utterance.split("Select ", 1)[1].split(" from the list")[0]
    page = env.unwrapped.session.page
    listbox = next(e for e in page.elements() if e.tag == "select")
    wrong = next(o for o in listbox.options if o != target)
    obs, *_ = env.step(env.unwrapped.call_text("select", ref=listbox.ref, option=wrong))
    assert f'selected "{wrong}"' in obs
    button = next(e for e in page.elements() if e.tag == "button")
    _, _, terminated, _, info = env.step(env.unwrapped.call_text("click", ref=button.ref))
    assert terminated and info["metrics"]["raw_reward"] == -1.0 and info["metrics"]["success"] == 0.0
    assert info["metrics"]["score"] == 0.0
    env.close()


def test_refs_are_unique_and_the_same_in_a_reused_browser():
    """Before: the page read after an episode ended gave the body and the task's frame refs of the next episode's
    numbering, so from the second episode on a page could show two elements as [7] (the body and a button). Now
    every episode's refs are unique and the same as in a fresh browser (and as MiniWoB's own driver numbers them)."""
    reused = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-button", split="test").unwrapped
    fresh = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-button", split="test").unwrapped
    try:
        for ep in range(4):
            reused.reset(seed=ep)
            refs = [e.ref for e in reused.session.page.elements()]
            assert len(refs) == len(set(refs)), (ep, refs)
            fresh.close()  # a new browser, whose first episode this is
            fresh.reset(seed=ep)
            assert [(e.ref, e.tag, e.text) for e in reused.session.page.elements()] == [
                (e.ref, e.tag, e.text) for e in fresh.session.page.elements()
            ]
            *_, info = reused.step(reused.oracle_action())
            assert info["metrics"]["solved"] == 1.0
    finally:
        reused.close()
        fresh.close()


def test_seeds_fix_instances_and_the_splits_are_disjoint():
    def utterances(split, seeds):
        env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="enter-text", split=split)
        out = []
        for seed in seeds:
            env.reset(seed=seed)
            out.append((env.unwrapped.task.seed, env.unwrapped.utterance))
        env.close()
        return out

    train = utterances("train", [0, 1, 0])
    assert train[0] == train[2] and train[0] != train[1]  # a seed fixes the instance
    test = utterances("test", [0, 1])
    assert all(s < 2**30 for s, _ in train) and all(s >= 2**30 for s, _ in test)


def test_the_wall_clock_decides_nothing():
    """MiniWoB ends an episode after 10 s (and scales its reward by time); the env switches the timer off, so a slow
    model loses nothing: the reward is the raw one, with the per-action rule only."""
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-test", step_decay=0.1)
    env.reset(seed=0)
    browser = env.unwrapped.session.browser
    assert browser.script("return core.EPISODE_MAX_TIME;") >= 10**9
    browser.script("core.ept0 = core.ept0 - 60000;")  # as if a minute had passed since the start
    _, _, terminated, _, info = env.step(env.unwrapped.oracle_action())
    assert terminated and info["metrics"]["raw_reward"] == 1.0 and info["metrics"]["score"] == 1.0
    env.close()


def test_the_per_action_rule():
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="login-user", step_decay=0.1)
    metrics = _play(env, lambda e: e.unwrapped.oracle_action(), 0)
    assert metrics["success"] == 1.0 and metrics["score"] == pytest.approx(1 - 0.1 * 2)  # 3 actions
    env.close()
    with pytest.raises(ConfigError, match="step_decay"):
        agentr1_gym.make("AgentR1/MiniWoB-v0", step_decay=0.9)
    with pytest.raises(ConfigError, match="did you mean 'click-button'"):
        agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-buton")


def test_one_browser_per_env_reused_and_closed():
    env = agentr1_gym.make("AgentR1/MiniWoB-v0")
    for seed in range(6):  # several tasks: the same browser loads each page
        env.reset(seed=seed)
    browser = env.unwrapped.session.browser
    assert browser.starts == 1
    profile = browser._keeper.profile
    assert processes_with(profile)
    env.close()
    deadline = time.monotonic() + 10
    while processes_with(profile) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(profile) and not os.path.exists(profile)


def test_a_killed_process_leaves_no_browser_behind(tmp_path):
    script = textwrap.dedent(
        """
        import os, agentr1_gym
        env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-button")
        env.reset(seed=0)
        print(env.unwrapped.session.browser._keeper.profile, flush=True)
        os.kill(os.getpid(), 9)
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=os.environ.copy()
    )
    assert child.returncode == -signal.SIGKILL
    profile = child.stdout.strip().splitlines()[-1]
    deadline = time.monotonic() + 15
    while processes_with(profile) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(profile), "a browser outlived the process that started it"
    assert not os.path.exists(profile)


def test_a_hung_page_is_an_infrastructure_error_and_the_next_episode_runs():
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-test", browser_timeout_s=2)
    env.reset(seed=0)
    session = env.unwrapped.session
    # the page hangs when its button is clicked
    session.browser.script(
        "document.querySelector('button').addEventListener('click', function () { while (true) {} });"
    )
    started = time.monotonic()
    with pytest.raises(ToolInfrastructureError, match="browser"):
        env.step(env.unwrapped.oracle_action())
    assert time.monotonic() - started < 30
    metrics = _play(env, lambda e: e.unwrapped.oracle_action(), 1)  # a new browser
    assert metrics["success"] == 1.0 and session.browser.starts == 2
    env.close()


class _Handler(http.server.BaseHTTPRequestHandler):
    hits = 0

    def do_GET(self):
        type(self).hits += 1
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"secret")

    def log_message(self, *args):
        pass


def test_the_browser_reaches_no_network_not_even_loopback():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-test")
    env.reset(seed=0)
    browser = env.unwrapped.session.browser
    for url in (f"http://127.0.0.1:{server.server_port}/", f"http://localhost:{server.server_port}/",
                "http://example.com/"):  # fmt: skip
        answer = browser.call(
            "fetch",
            lambda d, u=url: d.execute_async_script(
                "var done = arguments[arguments.length - 1];"
                "fetch(arguments[0]).then(function (r) { return r.text(); })"
                ".then(function (t) { done('read ' + t); }, function (e) { done('refused ' + e); });",
                u,
            ),
        )
        assert answer.startswith("refused"), (url, answer)
    assert _Handler.hits == 0
    with pytest.raises(ConfigError, match="file://"):
        browser.open("http://example.com/")
    server.shutdown()
    env.close()


def test_a_missing_browser_is_one_line_that_says_how_to_install(monkeypatch):
    monkeypatch.setenv("AGENTR1_CHROMIUM", "/nonexistent/chromium")
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-test")
    with pytest.raises(MissingProgramError, match="apt-get install chromium chromium-driver") as exc:
        env.reset(seed=0)
    assert "\n" not in str(exc.value)
    env.close()


def test_pickled_mid_episode_the_browser_reopens_and_replays():
    import pickle

    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-checkboxes")
    env.reset(seed=4)
    env.step(env.unwrapped.oracle_action())
    clone = pickle.loads(pickle.dumps(env))
    env.close()
    done = False
    while not done:
        _, _, terminated, truncated, info = clone.step(clone.unwrapped.oracle_action())
        done = terminated or truncated
    assert info["metrics"]["success"] == 1.0
    clone.close()


def test_gaming_the_world_stays_far_below_the_oracle():
    """What a policy could try instead of the task (random clicks, every element clicked, every field typed
    into, one turn repeated) succeeds at most 0.2 of the oracle's rate over tasks that need reading."""
    tasks = ["click-button", "click-checkboxes", "click-option", "choose-list", "enter-text", "login-user",
             "click-link", "click-tab-2", "enter-password", "read-table"]  # fmt: skip
    env = agentr1_gym.make("AgentR1/MiniWoB-v0", tasks=tasks, split="test")
    u = env.unwrapped

    def every_element(e):
        name, arguments = click_every_element(u.session.page, u.session.actions)
        return u.call_text(name, **arguments)

    def typing(e):
        name, arguments = type_everywhere(u.session.page, u.session.actions, u.utterance[:40])
        return u.call_text(name, **arguments)

    first: dict[str, str] = {}

    def repeat(e):
        if not u.session.actions:
            first["action"] = u.random_action()
        return first["action"]

    rates = {}
    for name, policy in (("oracle", lambda e: u.oracle_action()), ("random", lambda e: u.random_action()),
                         ("every element", every_element), ("type everywhere", typing),
                         ("repeat", repeat)):  # fmt: skip
        rates[name] = sum(_play(env, policy, seed)["success"] for seed in range(20)) / 20
    env.close()
    assert rates["oracle"] >= 0.95
    for name, rate in rates.items():
        if name != "oracle":
            assert rate <= 0.2 * rates["oracle"], rates


def test_screenshots_show_each_page_the_agent_saw_and_saved_episodes_keep_them(tmp_path):
    """screenshots=True: the reset's page and the page after each step that leaves the task running, as real PNGs
    of MiniWoB's 160x210 task area; `evaluate --save-episodes` keeps them and the viewer draws them. Off by
    default, and never in the observation."""
    import base64
    import struct

    from agentr1_gym.episodes import read_episodes
    from agentr1_gym.evaluation import evaluate
    from agentr1_gym.viewer import load_run, render_html

    def size(uri: str) -> tuple[int, int]:
        png = base64.b64decode(uri.split(",", 1)[1])
        assert png[:8] == b"\x89PNG\r\n\x1a\n"
        return struct.unpack(">II", png[16:24])

    env = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-checkboxes", screenshots=True)
    try:
        obs, info = env.reset(seed=3)
        assert size(info["screenshot"]) == (160, 210) and "data:image" not in obs
        steps = []
        while True:
            obs, _, terminated, truncated, info = env.step(env.unwrapped.oracle_action())
            steps.append(info.get("screenshot"))
            if terminated or truncated:
                break
        assert info["metrics"]["solved"] == 1.0 and len(steps) >= 2
        assert steps[-1] is None  # the task ended: MiniWoB covers its page
        assert all(size(s) == (160, 210) for s in steps[:-1]) and len(set(steps[:-1])) == len(steps) - 1
        path = tmp_path / "eval.jsonl"
        evaluate(env, "oracle", episodes=2, seed=5, progress=False, save_episodes=str(path))
        records = list(read_episodes(path))
        assert all(size(r["screenshot"]) == (160, 210) for r in records)
        assert all("screenshot" in t for r in records for t in r["turns"][:-1])
        page = render_html(load_run(path))
        assert records[0]["screenshot"] in page
    finally:
        env.close()
    plain = agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-button")
    try:
        _, info = plain.reset(seed=0)
        _, _, _, _, step_info = plain.step(plain.unwrapped.oracle_action())
        assert "screenshot" not in info and "screenshot" not in step_info
    finally:
        plain.close()


@pytest.mark.skipif(shutil.which("chromedriver") is None, reason="needs ChromeDriver")
def test_vector_envs_each_have_their_own_browser():
    import gymnasium as gym

    for vector in (gym.vector.SyncVectorEnv, gym.vector.AsyncVectorEnv):
        envs = vector([lambda: agentr1_gym.make("AgentR1/MiniWoB-v0", task="click-test")] * 2)
        obs, _ = envs.reset(seed=[0, 1])
        assert all("Click Me!" in o for o in obs)
        envs.close()
