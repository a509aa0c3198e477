"""Saved episodes and the run viewer: what training writes (tokens, action mask, per-token credit), what
``agentr1 eval --save-episodes`` writes, and the page ``agentr1 view`` builds, checked in headless Chromium."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("trl")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from agentr1_trl import ScriptedGenerator
from agentr1_trl.grpo import AgentGRPOConfig, AgentGRPOTrainer
from agentr1_trl.ppo import AgentPPOConfig, AgentPPOTrainer
from agentr1_trl.testing import (
    alternating_script,
    record_rollouts,
    tiny_model,
    tiny_tokenizer,
    trainer_settings,
)
from peft import LoraConfig

from agentr1_gym.cli import main as cli
from agentr1_gym.episodes import EPISODES_FILE, append_episodes, read_episodes
from agentr1_gym.viewer import OBS_RGB, heat_rgb, load_run, render_html, write_view

SETTINGS = trainer_settings(save_episodes_count=8, max_steps=3, save_episodes_steps=2)


def _train(out: Path, trainer_cls=AgentGRPOTrainer, config_cls=AgentGRPOConfig, scripted=True, **kw):
    tok = tiny_tokenizer()
    trainer = trainer_cls(
        tiny_model(tok, seed=0),
        config_cls(output_dir=str(out), **{**SETTINGS, **kw}),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, alternating_script) if scripted else None,
    )
    seen = record_rollouts(trainer)
    trainer.train()
    with (out / "metrics.jsonl").open("w") as f:  # what agentr1 train writes at the end
        for row in trainer.state.log_history:
            f.write(json.dumps(row) + "\n")
    return trainer, tok, seen


@pytest.fixture(scope="module")
def grpo_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("grpo-run")
    _trainer, tok, seen = _train(out)
    (out / "eval_before_rl.json").write_text(json.dumps({"success": 0.25, "return": -0.1, "episodes": 4}))
    (out / "eval_after_rl.json").write_text(json.dumps({"success": 0.5, "return": 0.2, "episodes": 4}))
    return out, tok, seen


def _records(out: Path):
    return list(read_episodes(out / EPISODES_FILE))


@pytest.mark.slow
def test_training_saves_the_first_every_nth_and_last_step(grpo_run):
    out, _, _ = grpo_run
    records = _records(out)
    # max_steps=3, every 2 steps: steps 1 and 3 (the last), the batch's first 4 episodes (one group) each
    assert sorted({r["step"] for r in records}) == [1, 3]
    assert all(r["source"] == "train" and r["group"] == 0 for r in records)
    assert sorted(r["index"] for r in records if r["step"] == 1) == [0, 1, 2, 3]


def test_records_carry_the_question_gold_answer_and_template_tokens(grpo_run):
    out, tok, seen = grpo_run
    records = _records(out)
    special = {tok.convert_tokens_to_ids(t) for t in ("<|im_start|>", "<|im_end|>", "<|endoftext|>")}
    for rec in records:
        assert rec["question"] and rec["question"] in rec["prompt"]
        assert rec["gold"] and all(isinstance(g, str) and g for g in rec["gold"])
        assert all(
            g not in rec["question"] for g in rec["gold"]
        )  # the records, not the prompt, hold the gold
        # the alternating script answers "Nobody" (the episode ends on it) or writes junk until the turns run out
        assert rec["answer"] == ("Nobody" if rec["ended"] == "terminated" else None)
        t = rec["tokens"]
        assert t["special"] == [int(i in special) for i in t["ids"]]
        if len(rec["turns"]) > 1:  # the env's turns between the actions are wrapped in template tokens
            assert 0 < sum(t["special"]) < len(t["ids"])
    assert [t.question for t in seen[:4]] == [
        r["question"] for r in sorted((r for r in records if r["step"] == 1), key=lambda r: r["index"])
    ]


def test_info_carries_the_scored_answer_only_when_an_answer_ends_the_episode():
    import agentr1_gym

    env = agentr1_gym.make("AgentR1/SyntheticMultihop-v0")
    env.reset(seed=0)
    done, info = False, {}
    while not done:
        _, _, term, trunc, info = env.step(env.unwrapped.oracle_action())
        done = term or trunc
        assert ("answer" in info) == term
    assert info["answer"] in env.unwrapped.gold_answers and info["metrics"]["success"] == 1.0
    env.reset(seed=0)
    _, _, term, trunc, info = env.step("no tool call, no answer")
    assert "answer" not in info
    world = agentr1_gym.make("AgentR1/WebShop-v0")
    world.reset(seed=0)
    done = False
    while not done:
        _, _, term, trunc, info = world.step(world.unwrapped.oracle_action())
        done = term or trunc
    assert "answer" not in info and info["metrics"]["success"] == 1.0


def test_reward_notes_explain_generic_and_env_components():
    from agentr1_gym.registration import reward_notes
    from agentr1_gym.rewards import COMPONENT_NOTES

    notes = reward_notes(["AgentR1/HotpotQA-v0", "AgentR1/WebShop-v0", "Nobody/Missing-v0", "nomodule:X-v0"])
    assert set(COMPONENT_NOTES) <= set(notes) and "gold supporting paragraph" in notes["retrieval"]
    assert "purchase" in notes and "offset" in notes
    assert reward_notes([]) == COMPONENT_NOTES


def test_saved_tokens_are_the_trajectories_with_mask_and_grpo_credit(grpo_run):
    out, _tok, seen = grpo_run
    first_batch = seen[:4]
    for rec, traj in zip(
        sorted((r for r in _records(out) if r["step"] == 1), key=lambda r: r["index"]), first_batch
    ):
        t = rec["tokens"]
        assert t["ids"] == traj.completion_ids and t["action_mask"] == traj.action_mask
        assert len(t["text"]) == len(t["ids"]) and t["turn_ends"] == traj.turn_ends
        assert [turn["action"] for turn in rec["turns"]] == traj.actions
        assert rec["return"] == pytest.approx(traj.episode_return)
        # GRPO: one advantage per episode on every action token, nothing on the env's tokens
        on = {round(a, 6) for a, m in zip(t["advantage"], t["action_mask"]) if m}
        off = {a for a, m in zip(t["advantage"], t["action_mask"]) if not m}
        assert len(on) == 1 and off <= {0.0}
        assert all((r is None) == (m == 0) for r, m in zip(t["ratio"], t["action_mask"]))
        assert all(e is None or e >= 0 for e in t["entropy"])
    # the alternating script: answering episodes (return 0) beat junk ones (penalties), and the group's
    # advantages sum to zero
    advs = [next(a for a, m in zip(r["tokens"]["advantage"], r["tokens"]["action_mask"]) if m)
            for r in sorted((r for r in _records(out) if r["step"] == 1), key=lambda r: r["index"])]  # fmt: skip
    rets = [t.episode_return for t in first_batch]
    assert sum(advs) == pytest.approx(0.0, abs=1e-5)
    assert (advs[0] > advs[1]) == (rets[0] > rets[1]) and advs[0] != advs[1]


def test_turns_carry_tool_calls_observations_and_rewards(tmp_path):
    tok = tiny_tokenizer()

    def search_then_answer(prompt_ids, i):
        turn = tok.decode(prompt_ids).count("<|im_start|>assistant") - 1
        return (
            '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'
            if turn == 0
            else "<answer>x</answer>"
        )

    trainer = AgentGRPOTrainer(
        tiny_model(tok, seed=0),
        AgentGRPOConfig(
            output_dir=str(tmp_path), **{**SETTINGS, "max_steps": 1, "max_new_tokens_per_turn": 64}
        ),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, search_then_answer),
    )
    trainer.train()
    rec = _records(tmp_path)[0]
    first = rec["turns"][0]
    assert first["tool_calls"] == [{"name": "search", "arguments": {"query": "x"}}]
    assert first["observation"] and first["action_error"] is None
    assert "retrieval" in first["reward_components"] or first["reward"] == pytest.approx(
        sum(first["reward_components"].values())
    )
    assert rec["ended"] in ("terminated", "max_turns")


@pytest.mark.slow
def test_hf_rollouts_have_an_importance_ratio_of_one(tmp_path):
    """The sampler and the trainer are the same weights here: the ratio the viewer shows must be 1."""
    _train(tmp_path, scripted=False, generation_backend="hf", max_steps=1)
    ratios = [x for r in _records(tmp_path) for x in r["tokens"]["ratio"] if x is not None]
    assert ratios and max(abs(math.log(x)) for x in ratios) < 1e-3


@pytest.mark.slow
def test_ppo_saves_per_token_gae_credit(tmp_path):
    _train(tmp_path, AgentPPOTrainer, AgentPPOConfig, max_steps=1)
    records = _records(tmp_path)
    assert records
    varied = 0
    for rec in records:
        t = rec["tokens"]
        on = [a for a, m in zip(t["advantage"], t["action_mask"]) if m]
        assert all(a == 0.0 for a, m in zip(t["advantage"], t["action_mask"]) if not m)
        varied += len({round(a, 6) for a in on}) > 1  # GAE: each token its own advantage
    assert varied >= 1


def test_eval_save_episodes_and_view_cli(tmp_path, capsys):
    path = tmp_path / "oracle.jsonl"
    assert (
        cli(
            [
                "eval",
                "AgentR1/SyntheticMultihop-v0",
                "--episodes",
                "3",
                "--no-progress",
                "--save-episodes",
                str(path),
            ]
        )
        == 0
    )
    records = list(read_episodes(path))
    assert [r["index"] for r in records] == [0, 1, 2] and all(r["tokens"] is None for r in records)
    assert all(r["success"] == 1.0 and r["ended"] == "terminated" for r in records)
    calls = [c["name"] for r in records for turn in r["turns"] for c in turn["tool_calls"]]
    assert calls and set(calls) <= {"search"}
    assert all(turn["observation"] for r in records for turn in r["turns"][:-1])
    # what a person checks first: the question (without the tool instructions), the gold and the model's answer
    for r in records:
        assert r["question"] and r["question"] in r["prompt"] and len(r["question"]) < len(r["prompt"])
        assert r["gold"] and r["answer"] in r["gold"]
    capsys.readouterr()
    assert cli(["view", str(path)]) == 0
    page = path.with_suffix(".html").read_text()
    assert "3 saved episodes" in capsys.readouterr().out and '"tokens": null' in page


def test_view_errors_are_one_line(tmp_path, capsys):
    assert cli(["view", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "missing" in err[0]
    assert cli(["view", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_partial_last_line_and_resumed_repeats(tmp_path):
    path = tmp_path / EPISODES_FILE
    base = {"source": "train", "step": 1, "index": 0, "turns": [], "success": 0.0, "return": 0.0}
    append_episodes(path, [base, {**base, "index": 1}])
    append_episodes(path, [{**base, "success": 1.0}])  # a resumed run saved step 1 again
    with path.open("a") as f:
        f.write('{"source": "train", "st')  # killed mid-write
    run = load_run(tmp_path)
    assert len(run["episodes"]) == 2
    assert next(e for e in run["episodes"] if e["index"] == 0)["success"] == 1.0


def test_page_escapes_script_endings(tmp_path):
    run = {"title": "t</script>", "config": {}, "metrics": [], "evals": {}, "obs_rgb": list(OBS_RGB),
           "episodes": [{"source": "eval", "step": None, "index": 0, "turns": [{"action": "</script><b>x"}]}]}  # fmt: skip
    page = render_html(run)
    assert page.count("</script>") == 2  # the two script elements' own ends, nothing from the data


@pytest.mark.interpreter
@pytest.mark.slow
def test_serve(grpo_run, tmp_path):
    out, _, _ = grpo_run
    page = write_view(load_run(out), tmp_path / "v.html")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentr1_gym.cli", "view", str(out), "-o", str(page), "--serve", "--port", "0"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = None
        deadline = time.time() + 60
        while url is None and time.time() < deadline:
            line = proc.stdout.readline()
            m = re.search(r"(http://127\.0\.0\.1:\d+/)", line)
            url = m.group(1) if m else None
        assert url, "agentr1 view --serve printed no URL"
        assert urllib.request.urlopen(url, timeout=10).read().decode() == page.read_text()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# ---- the page in a real browser ----------------------------------------------------------------------------------
def _browser():
    if os.environ.get("AGENTR1_REQUIRE_BROWSER"):
        import selenium.webdriver as webdriver
    else:
        webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if not binary or not driver:
        why = "headless Chromium not installed (apt-get install chromium chromium-driver; .ci/run does)"
        if os.environ.get("AGENTR1_REQUIRE_BROWSER"):
            pytest.fail(why)
        pytest.skip(why)
    options = Options()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(driver), options=options)


def _rgb(css: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", css)[:3])


@pytest.mark.slow
def test_viewer_in_headless_chromium(grpo_run, tmp_path):
    out, _, _ = grpo_run
    page = write_view(load_run(out), source=out)
    records = _records(out)
    browser = _browser()
    try:
        browser.get(page.as_uri())
        body = browser.find_element("tag name", "body")
        assert body.get_attribute("data-ready") == "1", browser.get_log("browser")
        # curves: every env metric, and the held-out evaluations on the success curve
        charts = {
            c.get_attribute("data-metric") for c in browser.find_elements("css selector", "#charts .chart")
        }
        assert {"env/success", "env/return", "env/turns"} <= charts
        assert len(browser.find_elements("css selector", '[data-metric="env/success"] rect')) == 2
        assert "0.500" in browser.find_element("id", "evals").text
        # pane A: the first saved step, every episode, every token, coloured by its mask and advantage
        step1 = sorted((r for r in records if r["step"] == 1), key=lambda r: r["index"])
        cards = browser.find_elements("css selector", "#pane-a .episode")
        assert [int(c.get_attribute("data-index")) for c in cards] == [r["index"] for r in step1]
        scale = float(browser.find_element("css selector", "#pane-a .episodes").get_attribute("data-scale"))
        assert scale == pytest.approx(max(abs(a) for r in step1 for a in r["tokens"]["advantage"]), rel=1e-6)
        for card, rec in zip(cards, step1):
            spans = card.find_elements("css selector", ".tok")
            t = rec["tokens"]
            assert len(spans) == len(t["ids"])
            masks = [int(s.get_attribute("data-mask")) for s in spans]
            assert masks == t["action_mask"]
            colours = browser.execute_script(
                "return Array.from(arguments[0].querySelectorAll('.tok')).map(s => getComputedStyle(s).backgroundColor)",
                card,
            )
            for colour, mask, adv in zip(colours, masks, t["advantage"]):
                expected = heat_rgb(adv, scale) if mask else OBS_RGB
                assert _rgb(colour) == expected
        # the success filter, and two steps side by side
        from selenium.webdriver.support.ui import Select

        Select(browser.find_element("id", "filter")).select_by_value("success")
        shown = browser.find_elements("css selector", "#pane-a .episode")
        assert len(shown) == sum(r["success"] > 0 for r in step1)
        Select(browser.find_element("id", "filter")).select_by_value("all")
        browser.find_element("id", "compare").click()
        pane_b = browser.find_element("id", "pane-b")
        assert pane_b.is_displayed()
        assert (
            "train step 3" in Select(pane_b.find_element("css selector", "select")).first_selected_option.text
        )
        assert len(pane_b.find_elements("css selector", ".episode")) == sum(r["step"] == 3 for r in records)
        shot = Path(os.environ.get("AGENTR1_VIEWER_SCREENSHOT", str(tmp_path / "viewer.png")))
        assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    finally:
        browser.quit()


XSS_QUESTION = '<img src=x onerror="window.__xss=1">Which city? </script><script>window.__xss=2</script>'


def _run_with_held_out(grpo_run, tmp_path):
    """The grpo run plus saved held-out episodes before and after RL (records of the same writer, relabelled as
    the pipeline labels them), one with a hostile question and gold answer."""
    out, _, _ = grpo_run
    run = tmp_path / "run"
    shutil.copytree(out, run)
    records = _records(out)
    last = sorted((r for r in records if r["step"] == 3), key=lambda r: r["index"])
    held = [{**r, "source": "held-out before RL", "step": 0} for r in last]
    held += [{**r, "source": "held-out after RL", "step": 3} for r in last]
    held[-1] = {**held[-1], "question": XSS_QUESTION, "gold": ["<b>Lima</b>", "Lima & Callao"]}
    append_episodes(run / EPISODES_FILE, held)
    (run / "eval_after_rl.json").write_text(
        json.dumps({"episodes": 4, "value_guided": 0, "success": 0.5, "return": 0.2, "turns": 2})
    )
    return run, held


@pytest.mark.slow
def test_viewer_opens_on_held_out_after_rl_with_question_and_gold_in_chromium(grpo_run, tmp_path):
    from selenium.webdriver.support.ui import Select

    run_dir, held = _run_with_held_out(grpo_run, tmp_path)
    assert cli(["view", str(run_dir)]) == 0
    browser = _browser()
    try:
        browser.get((run_dir / "view.html").as_uri())
        assert browser.find_element("tag name", "body").get_attribute("data-ready") == "1", browser.get_log(
            "browser"
        )
        assert browser.execute_script("return window.__xss === undefined")
        pane_a = browser.find_element("id", "pane-a")
        shown = Select(pane_a.find_element("css selector", "select")).first_selected_option.text
        assert shown.startswith("held-out after RL")
        assert "held-out episodes after RL" in browser.find_element("id", "episodes-hint").text
        after = [r for r in held if r["source"] == "held-out after RL"]
        cards = pane_a.find_elements("css selector", ".episode")
        assert len(cards) == len(after)
        for card, rec in zip(cards, after):
            # the question first, then the model's answer beside the gold
            assert card.find_element("css selector", ".question").text == rec["question"].strip()
            assert card.find_element("css selector", ".gold").text == " | ".join(rec["gold"])
            answer = card.find_element("css selector", ".model-answer").text
            assert answer == (rec["answer"] if rec["answer"] is not None else "(none given)")
            top = card.find_element("css selector", ".question").location["y"]
            assert top < card.find_element("css selector", ".turn").location["y"]
            # chat-template tokens dimmed, the rest not
            spans = card.find_elements("css selector", ".tok")
            colours = browser.execute_script(
                "return Array.from(arguments[0].querySelectorAll('.tok')).map(s => getComputedStyle(s).color)",
                card,
            )
            for flag, colour in zip(rec["tokens"]["special"], colours):
                assert (_rgb(colour) == (160, 160, 160)) == bool(flag)
            assert len(spans) == len(rec["tokens"]["ids"])
        # zero reward components hidden until asked for, each explained on hover
        zeros = browser.find_elements("css selector", "#pane-a .comp.zero")
        paid = browser.find_elements("css selector", "#pane-a .comp:not(.zero)")
        assert zeros and paid and not any(z.is_displayed() for z in zeros)
        assert all(p.is_displayed() for p in paid)
        assert "gold supporting paragraph" in browser.execute_script(
            "return document.querySelector('#pane-a .comp[data-component=retrieval]').title"
        ) or not browser.find_elements("css selector", "#pane-a .comp[data-component=retrieval]")
        offset = browser.find_elements("css selector", "#pane-a .comp[data-component=offset]")
        assert offset and "constant added" in offset[0].get_attribute("title")
        browser.find_element("id", "zeros").click()
        assert all(z.is_displayed() for z in zeros)
        # settings apart from metrics, metrics in one format
        table = browser.find_element("css selector", "table.evals")
        settings = [r.get_attribute("data-key") for r in table.find_elements("css selector", "tr.setting")]
        metrics = {
            r.get_attribute("data-key"): [td.text for td in r.find_elements("tag name", "td")][1:]
            for r in table.find_elements("css selector", "tr.metric")
        }
        assert set(settings) == {"episodes", "value_guided"}
        assert metrics["success"] == ["0.250", "0.500"] and metrics["turns"] == ["", "2.000"]
        # comparing shows the held-out episodes before RL beside them
        browser.find_element("id", "compare").click()
        pane_b = browser.find_element("id", "pane-b")
        assert Select(pane_b.find_element("css selector", "select")).first_selected_option.text.startswith(
            "held-out before RL"
        )
    finally:
        browser.quit()


# ---- damaged and hostile run files (reliability round 4) -----------------------------------------------------------
def _hostile_run(tmp_path):
    """A run directory holding what a diverged run, a killed write and a hostile model leave behind."""
    run = tmp_path / "hostile"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        '{"step": 1, "env/return": NaN, "loss": Infinity, "env/success": 0.0}\n'
        '{"step": 2, "env/return": 0.5, "loss": -Infinity, "env/success": 0.5}\n'
    )
    (run / "eval_after_rl.json").write_text('{"episodes": 2, "success": NaN, "return": 0.25}')
    good = {
        "schema": 1, "source": "eval", "step": None, "index": 0, "group": None, "env_id": "x", "task_id": "t",
        "seed": 0, "prompt": "p", "success": 1.0, "return": float("nan"), "ended": "terminated", "metrics": {},
        "tokens": None,
        "turns": [{"action": "<!--<script>alert(1)</script>", "tool_calls": [], "observation": "obs \\ud800",
                   "reward": 1.0, "reward_components": {}, "action_error": None}],
    }  # fmt: skip
    lines = [
        json.dumps(good).replace('"obs \\\\ud800"', '"obs \\ud800"'),  # a lone surrogate escape
        json.dumps({**good, "index": 1, "turns": "not a list"}),  # malformed: would blank the page
        json.dumps({**good, "index": 2, "tokens": {"ids": [1, 2], "text": ["a"], "action_mask": [1, 1]}}),
        '{"turns": [' + "[" * 5000 + "]" * 5000 + "]}",  # 5,000 deep
    ]
    with (run / "episodes.jsonl").open("wb") as f:
        for line in lines:
            f.write(line.encode() + b"\n")
        f.write(b'{"turns": [], "bad": "\xff\xfe"}\n')  # not UTF-8
        f.write(json.dumps({**good, "index": 3}).encode() + b"\n")
    return run


def test_a_damaged_run_still_makes_a_page(tmp_path):
    """Before: NaN/Infinity, one invalid UTF-8 line, a \\ud800 escape or a 5,000-deep line each made
    ``agentr1 view`` fail."""
    run = load_run(_hostile_run(tmp_path))
    assert sorted(e["index"] for e in run["episodes"]) == [0, 3]
    assert run["skipped_records"] == 2
    page = render_html(run)
    page.encode("utf-8")
    assert "<!--" not in page.split('id="run-data">')[1].split("</script>")[0]
    assert page.count("</script>") == 2


@pytest.mark.slow
def test_a_damaged_run_renders_in_chromium(tmp_path):
    run_dir = _hostile_run(tmp_path)
    page = write_view(load_run(run_dir), source=run_dir)
    browser = _browser()
    try:
        browser.get(page.as_uri())
        body = browser.find_element("tag name", "body")
        assert body.get_attribute("data-ready") == "1", browser.get_log("browser")
        assert browser.execute_script("return window.__xss === undefined")
        cards = browser.find_elements("css selector", "#pane-a .episode")
        assert len(cards) == 2
        assert "<!--<script>alert(1)</script>" in cards[0].text
        assert "2 malformed episode record(s) left out" in browser.find_element("id", "subtitle").text
    finally:
        browser.quit()


def test_serve_refuses_foreign_hosts_and_is_not_blocked_by_an_idle_client(tmp_path):
    import http.client
    import socket
    import threading

    from agentr1_gym.viewer import serve

    page = tmp_path / "p.html"
    page.write_text("<p>run</p>")
    urls: list[str] = []
    ready = threading.Event()
    threading.Thread(
        target=serve, args=(page, 0), kwargs={"ready": lambda u: (urls.append(u), ready.set())}, daemon=True
    ).start()
    assert ready.wait(10)
    port = int(urls[0].rsplit(":", 1)[1].strip("/"))
    idle = socket.create_connection(("127.0.0.1", port))  # connects and sends nothing
    try:
        for host, status in (("127.0.0.1", 200), ("localhost", 200), ("evil.example", 403)):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/", headers={"Host": f"{host}:{port}"})
            assert conn.getresponse().status == status
            conn.close()
    finally:
        idle.close()


@pytest.mark.slow
def test_a_user_who_speaks_again_is_marked_in_records_and_on_the_page(tmp_path, capsys):
    """Multi-user-turn episodes: the turn whose observation is the user's next message says so, in training
    records and eval records alike, and the page shows it as the user speaking (checked in Chromium)."""
    import agentr1_gym

    env_id = "TestViewer/Conversation-v0"
    if env_id not in __import__("gymnasium").registry:
        agentr1_gym.register_task(
            env_id,
            [{"word": "cat", "later": ["Now backwards.", "Now twice."], "answer": "cattac"}],
            prompt="Spell {word}.",
            user_turns="later",
        )
    tok = tiny_tokenizer()
    trainer = AgentGRPOTrainer(
        tiny_model(tok, seed=0),
        AgentGRPOConfig(
            output_dir=str(tmp_path / "run"), env_id=env_id,
            **{**SETTINGS, "max_steps": 1, "env_kwargs": {"max_turns": 4}},
        ),
        tok,
        peft_config=LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]),
        generator=ScriptedGenerator(tok, lambda prompt_ids, i: "a reply"),
    )  # fmt: skip
    trainer.train()
    for rec in _records(tmp_path / "run"):
        assert [t.get("user", False) for t in rec["turns"]] == [True, True, False]
        assert [t["observation"] for t in rec["turns"][:2]] == ["Now backwards.", "Now twice."]

    path = tmp_path / "eval.jsonl"
    args = [
        "eval",
        env_id,
        "--episodes",
        "1",
        "--policy",
        "no-tool",
        "--no-progress",
        "--save-episodes",
        str(path),
    ]
    assert cli(args) == 0
    (rec,) = read_episodes(path)
    assert [t.get("user", False) for t in rec["turns"]] == [True, True, False]
    assert cli(["view", str(path)]) == 0
    page = path.with_suffix(".html")
    browser = _browser()
    try:
        browser.get(page.as_uri())
        assert browser.find_element("tag name", "body").get_attribute("data-ready") == "1"
        said = [e.text for e in browser.find_elements("css selector", "#pane-a .plain.obs.user")]
        assert said == ["user: Now backwards.", "user: Now twice."]
    finally:
        browser.quit()


# ---- screenshots of the page each turn saw ------------------------------------------------------------------------
def _png_uri(shade: int) -> str:
    """A real 2x2 PNG of one grey level, as a data URI (what a browser env's ``info["screenshot"]`` holds)."""
    import base64
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + bytes([shade]) * 2 for _ in range(2))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 2, 2, 8, 0, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    return "data:image/png;base64," + base64.b64encode(png).decode()


class _ShowsItsPage(__import__("gymnasium").Wrapper):
    """A text env that shows a page after every step, as AgentR1/MiniWoB-v0 with screenshots=True does (a
    different grey per turn, so each screenshot can be told apart)."""

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        self.shade = 10
        return obs, {**info, "screenshot": _png_uri(self.shade)}

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.shade += 10
        return obs, reward, terminated, truncated, {**info, "screenshot": _png_uri(self.shade)}


def test_screenshot_of_keeps_only_small_image_data_uris():
    from agentr1_gym.episodes import MAX_SCREENSHOT_CHARS, screenshot_of

    good = _png_uri(0)
    assert screenshot_of({"screenshot": good}) == good
    assert (
        screenshot_of({"screenshot": "data:image/jpeg;base64,/9j/4A=="}) == "data:image/jpeg;base64,/9j/4A=="
    )
    for bad in ("http://127.0.0.1:9/x.png", "javascript:alert(1)", "data:text/html;base64,PHNjcmlwdD4=",
                "data:image/svg+xml;base64,PHN2Zz4=", good + '" onerror="alert(1)', good + "\n",
                "data:image/png;base64," + "A" * MAX_SCREENSHOT_CHARS, b"\x89PNG", 7, None):  # fmt: skip
        assert screenshot_of({"screenshot": bad}) is None, bad
    assert screenshot_of({}) is None


def test_rollouts_and_evaluations_record_the_page_each_turn_saw(tmp_path):
    """Training records (trajectory_records over collect_rollouts) and `evaluate` records carry the first page and
    the page after each step; `load_run` drops any screenshot that is not an image data URI."""
    from agentr1_trl.episodes import trajectory_records

    import agentr1_gym
    from agentr1_gym.evaluation import evaluate
    from agentr1_gym.rollout import collect_rollouts

    tok = tiny_tokenizer()
    env = _ShowsItsPage(agentr1_gym.make("AgentR1/SyntheticMultihop-v0", max_turns=3))
    reply = '<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>'
    trajs = collect_rollouts([env], ScriptedGenerator(tok, lambda ids, i: reply), tok, seeds=[0])
    (rec,) = trajectory_records(trajs, tok, source="train", step=1, env_id="x", seeds=[0])
    assert rec["screenshot"] == _png_uri(10)
    assert [t["screenshot"] for t in rec["turns"]] == [_png_uri(20), _png_uri(30), _png_uri(40)]

    path = tmp_path / "eval.jsonl"
    evaluate(env, "oracle", episodes=1, progress=False, save_episodes=str(path))
    (ev,) = read_episodes(path)
    assert ev["screenshot"] == _png_uri(10)
    assert [t["screenshot"] for t in ev["turns"]] == [_png_uri(10 * (k + 2)) for k in range(len(ev["turns"]))]

    hostile = {**ev, "index": 1, "screenshot": "http://127.0.0.1:9/leak.png"}
    hostile["turns"] = [{**ev["turns"][0], "screenshot": "javascript:alert(1)"}, *ev["turns"][1:]]
    append_episodes(path, [hostile])
    run = load_run(path)
    kept = {e["index"]: e for e in run["episodes"]}
    assert kept[0]["screenshot"] == _png_uri(10)
    assert "screenshot" not in kept[1] and "screenshot" not in kept[1]["turns"][0]
    assert kept[1]["turns"][1:] == ev["turns"][1:]


@pytest.mark.slow
def test_the_page_draws_each_turn_beside_the_screenshot_it_saw(tmp_path):
    """In Chromium: turn k shows the page it saw (the first page, then the page after turn k-1), the last page
    follows the last turn; a screenshot that is no image data URI is never drawn (nor fetched)."""
    records = []
    for index in range(2):
        turns = [{"action": f"act {k}", "tool_calls": [], "observation": f"obs {k}", "reward": 0.0,
                  "reward_components": {}, "action_error": None, "screenshot": _png_uri(100 + 10 * k)}
                 for k in range(3)]  # fmt: skip
        records.append({"source": "eval", "step": None, "index": index, "prompt": "p", "turns": turns,
                        "success": 1.0, "return": 1.0, "ended": "terminated", "metrics": {}, "tokens": None,
                        "screenshot": _png_uri(50)})  # fmt: skip
    records[1]["screenshot"] = "http://127.0.0.1:9/leak.png"
    records[1]["turns"][0]["screenshot"] = "javascript:alert(1)"
    path = tmp_path / "eval.jsonl"
    append_episodes(path, records)
    page = write_view(load_run(path), source=path)
    browser = _browser()
    try:
        browser.get(page.as_uri())
        assert browser.find_element("tag name", "body").get_attribute("data-ready") == "1"
        cards = browser.find_elements("css selector", "#pane-a .episode")
        first = {c.get_attribute("data-index"): c for c in cards}["0"]
        shots = [(f.find_element("tag name", "img").get_attribute("src"), f.text)
                 for f in first.find_elements("css selector", "figure.shot")]  # fmt: skip
        assert shots == [
            (_png_uri(50), "the page turn 1 saw"),
            (_png_uri(100), "the page turn 2 saw"),
            (_png_uri(110), "the page turn 3 saw"),
            (_png_uri(120), "the page after the last action"),
        ]
        assert all(
            browser.execute_script("return arguments[0].naturalWidth", img) == 2
            for img in first.find_elements("css selector", "figure.shot img")
        )
        second = {c.get_attribute("data-index"): c for c in cards}["1"]
        srcs = [i.get_attribute("src") for i in second.find_elements("css selector", "figure.shot img")]
        assert srcs == [_png_uri(110), _png_uri(120)]  # turns 1 and 2 saw what was dropped
    finally:
        browser.quit()
