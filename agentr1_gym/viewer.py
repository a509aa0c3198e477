"""The run viewer: ``agentr1 view RUN`` writes one self-contained HTML page (no network, no server needed).

It shows, for a run directory of ``agentr1 train`` (or an episodes file of ``agentr1 eval --save-episodes``):

* every logged metric's curve (``metrics.jsonl``, or the newest checkpoint's ``trainer_state.json`` while the run
  is still going), with the held-out evaluations before and after RL marked on the success curve;
* the held-out evaluations side by side (``eval_before_rl.json``, ``eval_after_rl.json``);
* the saved episodes (``episodes.jsonl``, :mod:`agentr1_gym.episodes`) of a chosen step, turn by turn: each
  token coloured by what training did with it (observation tokens, outside the action mask, grey; action tokens by
  their advantage, importance ratio, entropy or log-prob), tool calls, tool responses and reward components;
* where the env shows its page (``AgentR1/MiniWoB-v0`` with ``screenshots=True``), a small screenshot beside each
  turn: the page that turn saw, and the page after the last action;
* filters for successful and failed episodes, and two steps side by side.

The page's data sits in it as JSON; its script draws everything. Standard library only.
"""

from __future__ import annotations

import contextlib
import html
import http.server
import json
from pathlib import Path
from typing import Any

from agentr1_gym.episodes import EPISODES_FILE, RunFiles, read_episodes, screenshot_of
from agentr1_gym.errors import ConfigError
from agentr1_gym.rewards import COMPONENT_NOTES
from agentr1_gym.text import clean_json, clean_text

__all__ = ["OBS_RGB", "heat_rgb", "load_run", "render_html", "serve", "write_view"]

#: the background of tokens outside the action mask (the env's tokens: tool responses, chat scaffolding)
OBS_RGB = (228, 228, 228)
EVAL_FILES = {"before RL": RunFiles.eval_before, "after RL": RunFiles.eval_after}
#: keys of an evaluation summary that say how it was run, not what it measured (the page lists them apart)
EVAL_SETTINGS = (
    "env", "policy", "model", "adapter", "baseline", "episodes", "seed", "split", "value_guided", "temperature",
    "max_turns", "max_new_tokens", "max_episode_tokens", "context",
)  # fmt: skip


def heat_rgb(value: float | None, scale: float, diverging: bool = True) -> tuple[int, int, int]:
    """The colour of an action token (what the page's script computes, here for tests and other renderers):
    white at 0 (or no value), green for positive and red for negative values (diverging), or blue growing
    with the value (sequential), saturating at ``scale``."""
    if value is None or scale <= 0:
        return (255, 255, 255)
    t = min(abs(value) / scale, 1.0)
    if not diverging:
        return (round(255 - 130 * t), round(255 - 80 * t), 255)
    if value >= 0:
        return (round(255 - 130 * t), round(255 - 25 * t), round(255 - 130 * t))
    return (255, round(255 - 130 * t), round(255 - 130 * t))


def _read_json(path: Path) -> Any:
    """A whole JSON file (NaN and Infinity, which a diverged run writes, are read; the page shows them as
    empty); one line naming the file when it cannot be read."""
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{path}: not a readable JSON file ({str(exc)[:200]})") from None


def _json_lines(path: Path) -> list[Any]:
    """The values of a JSON-lines file; a line that is not UTF-8 or not JSON (or nested past the parser's
    limit) is skipped, as a run killed mid-write leaves one."""
    out = []
    with path.open("rb") as f:
        for raw in f:
            try:
                out.append(json.loads(raw.decode("utf-8")))
            except (UnicodeDecodeError, ValueError, RecursionError):
                continue
    return out


def _own_file(run_dir: Path, path: Path) -> bool:
    """Whether ``path`` is a regular file of the run itself: not a link, and inside ``run_dir`` once resolved. A
    downloaded run can hold a link to anything on the viewer's machine (``eval_before_rl.json -> ~/.ssh/...``);
    the page, which is made to be shared, embeds no such file."""
    if path.is_symlink() or not path.is_file():
        return False
    try:
        return path.resolve().is_relative_to(run_dir.resolve())
    except OSError:
        return False


def _metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The run's logged rows: ``metrics.jsonl`` when the run finished, else the newest checkpoint's log."""
    rows: list[dict[str, Any]] = []
    path = run_dir / RunFiles.metrics
    if _own_file(run_dir, path):
        rows = _json_lines(path)
    else:
        states = sorted(
            (p for p in run_dir.glob("checkpoint-*/trainer_state.json") if _own_file(run_dir, p)),
            key=lambda p: (
                int(p.parent.name.rsplit("-", 1)[1]) if p.parent.name.rsplit("-", 1)[1].isdigit() else -1
            ),
        )
        if states:
            rows = list(_read_json(states[-1]).get("log_history", []))
    out = []
    for row in rows:
        if not isinstance(row, dict) or "step" not in row:
            continue
        numeric = {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if len(numeric) > 2:  # more than step and epoch
            out.append(numeric)
    return out


def load_run(path: str | Path) -> dict[str, Any]:
    """What the page shows, from a run directory or an episodes JSONL file: ``title``, ``metrics`` (logged rows),
    ``evals`` (label -> summary), ``episodes`` (records; a resumed run's repeats keep the newest) and
    ``component_notes`` (reward component -> what it pays for: the generic ones; add the envs' own with
    :func:`agentr1_gym.registration.reward_notes`, as ``agentr1 view`` does)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: no such run directory or episodes file")
    evals: dict[str, Any] = {}
    config: dict[str, Any] = {}
    if path.is_dir():
        metrics = _metrics(path)
        for label, name in EVAL_FILES.items():
            if _own_file(path, path / name):
                evals[label] = _read_json(path / name)
        if _own_file(path, path / RunFiles.config):
            config = _read_json(path / RunFiles.config)
        episodes_file: Path | None = path / EPISODES_FILE
        if not _own_file(path, episodes_file):
            episodes_file = None
        if not metrics and not evals and episodes_file is None:
            raise ConfigError(
                f"{path}: not a run directory (no metrics.jsonl, checkpoint, evaluation or {EPISODES_FILE}); "
                "give an `agentr1 train` output directory or an episodes file"
            )
    else:
        metrics, episodes_file = [], path
    episodes: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    skipped = 0
    if episodes_file is not None and episodes_file.is_file():
        for record in read_episodes(episodes_file):
            if not _well_formed(record):
                skipped += 1
                continue
            _keep_screenshots(record)
            key = (str(record.get("source")), record.get("step"), record.get("index"))
            episodes[key] = record
    settings = config.get("settings", {}) if isinstance(config, dict) else {}
    title = path.name
    if settings.get("env_id"):
        title = f"{path.name}: {str(config.get('algo', '')).upper()} on {settings['env_id']} ({config.get('model', '')})"
    return {
        "title": title,
        "config": config,
        "metrics": metrics,
        "evals": evals,
        "episodes": list(episodes.values()),
        "skipped_records": skipped,
        "obs_rgb": list(OBS_RGB),
        "eval_settings": list(EVAL_SETTINGS),
        "component_notes": dict(COMPONENT_NOTES),  # `agentr1 view` adds the envs' own components
    }


def _is_num(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _well_formed(r: dict[str, Any]) -> bool:
    """Whether a record has the shape the page's script draws (:mod:`agentr1_gym.episodes`); others are counted
    and left out, so one damaged record cannot blank the page."""
    turns = r.get("turns")
    if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
        return False
    for t in turns:
        calls = t.get("tool_calls", [])
        if not (isinstance(calls, list) and all(isinstance(c, dict) for c in calls)):
            return False
        if not isinstance(t.get("reward_components", {}), dict) or not _is_num(t.get("reward", 0.0)):
            return False
    if not (
        isinstance(r.get("index", 0), int)
        and _is_num(r.get("success", 0.0))
        and _is_num(r.get("return", 0.0))
    ):
        return False
    tokens = r.get("tokens")
    if tokens is None:
        return True
    if not isinstance(tokens, dict):
        return False
    ids, text, mask = tokens.get("ids"), tokens.get("text"), tokens.get("action_mask")
    if not (isinstance(ids, list) and isinstance(text, list) and isinstance(mask, list)):
        return False
    if not len(ids) == len(text) == len(mask) or not isinstance(tokens.get("turn_ends", []), list):
        return False
    return all(
        tokens.get(k) is None or (isinstance(tokens[k], list) and len(tokens[k]) == len(ids))
        for k in ("advantage", "ratio", "entropy", "logprob")
    )


def _keep_screenshots(record: dict[str, Any]) -> None:
    """Drop a record's screenshots that are not small image data URIs (:func:`agentr1_gym.episodes.screenshot_of`):
    the page draws only those, never another URL it would fetch."""
    for holder in (record, *record["turns"]):
        if "screenshot" in holder and screenshot_of(holder) is None:
            del holder["screenshot"]


def render_html(run: dict[str, Any]) -> str:
    """The page: the run as JSON inside a document whose script draws it. The data is made JSON-safe first
    (NaN/inf as null, lone surrogates replaced, nesting cut at 64 levels: :func:`agentr1_gym.text.clean_json`),
    and every ``<``, ``>`` and ``&`` in it is written as a ``\\u`` escape, so no text in it (``</script>``,
    ``<!--<script``) can end or re-open the data block."""
    safe, _ = clean_json(run, 64, strict=True)
    data = json.dumps(safe, ensure_ascii=False, allow_nan=False)
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    title = html.escape(clean_text(str(run.get("title", ""))))
    return _PAGE.replace("__TITLE__", title).replace("__DATA__", data)


def write_view(
    run: dict[str, Any], output: str | Path | None = None, source: str | Path | None = None
) -> Path:
    """Write the page; the default place is ``RUN/view.html`` for a run directory, ``FILE.html`` for a file."""
    if output is None:
        base = Path(source) if source is not None else None
        if base is None:
            raise ConfigError("write_view needs an output path or the run's path")
        output = base / "view.html" if base.is_dir() else base.with_suffix(".html")
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_html(run), encoding="utf-8")
    return out


#: how long the server waits on a client that sends nothing (an idle connection never blocks other clients)
CLIENT_TIMEOUT_S = 10.0


def serve(page: str | Path, port: int = 8000, *, ready: Any = None) -> None:
    """Serve ``page`` on http://127.0.0.1:PORT/ until interrupted. Loopback only; a request whose ``Host`` is not
    this machine's loopback name is refused (403: a web page elsewhere cannot read the run through DNS
    rebinding); clients are served in threads, each with a time-out. ``ready(url)`` is called once listening."""
    page = Path(page).resolve()
    body = page.read_bytes()

    class Handler(http.server.BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT_S

        def do_GET(self) -> None:
            host = (self.headers.get("Host") or "").strip().lower()
            name = host.rsplit(":", 1)[0] if not host.startswith("[") else host.split("]")[0] + "]"
            if name not in ("127.0.0.1", "localhost", "[::1]"):
                self.send_error(403, "this viewer answers requests for 127.0.0.1 or localhost only")
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(http.server.ThreadingHTTPServer):
        daemon_threads = True

    with Server(("127.0.0.1", port), Handler) as httpd:
        url = f"http://127.0.0.1:{httpd.server_address[1]}/"
        print(f"serving {page} on {url} (Ctrl-C stops)", flush=True)
        if ready is not None:
            ready(url)
        with contextlib.suppress(KeyboardInterrupt):
            httpd.serve_forever()


_PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#1d1d1f;background:#fafafa}
header{padding:14px 22px;background:#23262e;color:#fff}header h1{font-size:18px;margin:0}
header .sub{color:#b8bcc8;font-size:12px;margin-top:3px}
section{padding:12px 22px}h2{font-size:16px;margin:8px 0}
.charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(250px,1fr));gap:10px}
.chart{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px}.chart .name{font-size:12px;font-weight:600}
.chart .range{font-size:11px;color:#666}
table.evals{border-collapse:collapse;background:#fff}table.evals td,table.evals th{border:1px solid #ddd;padding:3px 9px;text-align:right}
table.evals th:first-child,table.evals td:first-child{text-align:left}
.controls{display:flex;gap:14px;align-items:center;flex-wrap:wrap;margin-bottom:8px}
.panes{display:flex;gap:14px;align-items:flex-start}.pane{flex:1;min-width:0}
.pane-head{display:flex;gap:8px;align-items:center;margin-bottom:6px;flex-wrap:wrap}
.episode{background:#fff;border:1px solid #ddd;border-radius:6px;margin-bottom:10px;padding:8px 10px}
.episode.success{border-left:5px solid #3a9d4f}.episode.failure{border-left:5px solid #c8443a}
.ep-head{font-weight:600;font-size:13px}.ep-head .meta{font-weight:400;color:#555}
#more-metrics{margin-top:8px}details.prompt{font-size:12px;color:#444;margin:4px 0}details.prompt pre{white-space:pre-wrap;max-height:240px;overflow:auto}
.turn{border-top:1px dashed #ddd;padding-top:5px;margin-top:5px}.turn-head{font-size:12px;color:#555}
.tokens{font:12.5px/1.6 ui-monospace,monospace;white-space:pre-wrap;word-break:break-word}
.tok{border-radius:2px}.tok.act{border-bottom:2px solid #3b4a6b}.tok.obs{color:#555}
.plain{font:12.5px/1.5 ui-monospace,monospace;white-space:pre-wrap;margin:2px 0}.plain.obs{background:rgb(228,228,228);color:#555}.plain.obs.user{background:#e3ecfa;color:#1d2b45}
.calls,.rewards{font-size:12px;margin:2px 0}.err{color:#b3261e;font-size:12px}
.legend span{display:inline-block;padding:0 6px;margin-right:4px;border-radius:2px;font-size:12px}
.empty{color:#777;font-style:italic}
.question{background:#f2f5fa;border-left:3px solid #3366cc;padding:4px 8px;margin:5px 0;white-space:pre-wrap;font-size:13px}
.answers{font-size:12.5px;margin:3px 0}.answers b{font-weight:600}.answers .right{color:#2d7a3e}.answers .wrong{color:#b3261e}
.tok.tmpl{color:#a0a0a0}.comp{border-bottom:1px dotted #888;cursor:help}.comp.zero{display:none}body.show-zeros .comp.zero{display:inline}body.show-zeros .comp-none{display:none}
table.evals tr.setting td{color:#555}table.evals tr.group th{background:#f0f0f0;text-align:left;font-weight:600}
.hint{font-size:12px;color:#555;margin:-4px 0 8px}
figure.shot{float:right;margin:0 0 4px 10px;font-size:11px;color:#555;text-align:center}figure.shot img{display:block;max-width:240px;border:1px solid #ccc;image-rendering:auto}
.turn::after,.episode::after{content:"";display:block;clear:both}
</style></head><body>
<header><h1 id="title"></h1><div class="sub" id="subtitle"></div></header>
<section id="evals-section"><h2>Held-out evaluations</h2><div id="evals"></div></section>
<section><h2>Metrics</h2><div class="charts" id="charts"></div>
<details id="more-metrics"><summary>every other logged metric</summary><div class="charts" id="charts-more"></div></details></section>
<section><h2>Episodes</h2>
<div class="hint" id="episodes-hint"></div>
<div class="controls">
 <label>colour action tokens by <select id="colour">
  <option value="advantage">advantage</option><option value="ratio">importance ratio</option>
  <option value="entropy">entropy</option><option value="logprob">surprise (-log-prob)</option></select></label>
 <label>show <select id="filter"><option value="all">all</option><option value="success">successes</option>
  <option value="failure">failures</option></select></label>
 <label><input type="checkbox" id="compare"> two steps side by side</label>
 <label><input type="checkbox" id="zeros"> zero reward components</label>
 <span class="legend"><span style="background:rgb(228,228,228)">observation (mask 0)</span><span class="tok tmpl" style="background:rgb(228,228,228)">&lt;|template|&gt;</span><span style="background:rgb(125,230,125)">+</span><span style="background:rgb(255,125,125)">&minus;</span><span style="border-bottom:2px solid #3b4a6b">action (mask 1)</span></span>
</div>
<div class="panes"><div class="pane" id="pane-a"></div><div class="pane" id="pane-b" hidden></div></div>
</section>
<script type="application/json" id="run-data">__DATA__</script>
<script>
"use strict";
const RUN = JSON.parse(document.getElementById("run-data").textContent);
const OBS = "rgb(" + RUN.obs_rgb.join(", ") + ")";
const $ = (id) => document.getElementById(id);
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) { if (k === "class") e.className = v; else e.setAttribute(k, v); }
  if (text !== undefined) e.textContent = text;
  return e;
}
function fmt(v) { return (typeof v === "number") ? (Math.abs(v) >= 100 || Number.isInteger(v) ? String(Math.round(v * 1000) / 1000) : v.toFixed(3)) : String(v); }
function fmtMetric(v) { return (typeof v === "number") ? (Math.abs(v) >= 1000 ? String(Math.round(v)) : v.toFixed(3)) : ""; }
const NOTES = RUN.component_notes || {};

$("title").textContent = RUN.title;
const cfg = RUN.config && RUN.config.settings ? RUN.config.settings : null;
$("subtitle").textContent = cfg ? ("max_steps " + cfg.max_steps + " · lr " + cfg.learning_rate + " · groups of " +
  cfg.num_generations + " · " + (RUN.config.engine || "")) : (RUN.episodes.length + " saved episodes");
if (RUN.skipped_records) $("subtitle").textContent += " · " + RUN.skipped_records + " malformed episode record(s) left out";

// ---- evaluations ----
(function evals() {
  const labels = Object.keys(RUN.evals);
  if (!labels.length) { $("evals-section").hidden = true; return; }
  const SETTING = new Set(RUN.eval_settings || []);
  const scalar = (v) => ["number", "string", "boolean"].includes(typeof v);
  const all = [...new Set(labels.flatMap((l) => Object.keys(RUN.evals[l]).filter((k) => scalar(RUN.evals[l][k]))))];
  const settings = all.filter((k) => SETTING.has(k));
  const metrics = all.filter((k) => !SETTING.has(k) && labels.some((l) => typeof RUN.evals[l][k] === "number"));
  const t = el("table", {class: "evals"});
  const head = el("tr"); head.append(el("th", {}, "")); labels.forEach((l) => head.append(el("th", {}, l))); t.append(head);
  const block = (title, keys, cls, show) => {
    if (!keys.length) return;
    const g = el("tr", {class: "group"}); g.append(el("th", {colspan: labels.length + 1}, title)); t.append(g);
    for (const k of keys) {
      const tr = el("tr", {class: cls, "data-key": k}); tr.append(el("td", {}, k));
      labels.forEach((l) => tr.append(el("td", {}, k in RUN.evals[l] ? show(RUN.evals[l][k]) : "")));
      t.append(tr);
    }
  };
  block("metrics", metrics, "metric", fmtMetric);
  block("settings", settings, "setting", (v) => String(v));
  $("evals").append(t);
})();

// ---- curves ----
(function charts() {
  const rows = RUN.metrics;
  if (!rows.length) { $("charts").append(el("div", {class: "empty"}, "no logged metrics")); return; }
  const skip = new Set(["step", "epoch"]);
  const keys = [...new Set(rows.flatMap((r) => Object.keys(r)))].filter((k) => !skip.has(k)).sort((a, b) => {
    const pa = a.startsWith("env/") ? 0 : 1, pb = b.startsWith("env/") ? 0 : 1; return pa - pb || a.localeCompare(b); });
  const NS = "http://www.w3.org/2000/svg", W = 240, H = 90, P = 4;
  for (const k of keys) {
    const pts = rows.filter((r) => typeof r[k] === "number").map((r) => [r.step, r[k]]);
    if (!pts.length) continue;
    const extra = [];
    if (k === "env/success") for (const [l, e] of Object.entries(RUN.evals)) if (typeof e.success === "number")
      extra.push([l.startsWith("before") ? 0 : Math.max(...rows.map((r) => r.step)), e.success, l]);
    const all = pts.concat(extra);
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
    const sx = (x) => P + (x1 > x0 ? (x - x0) / (x1 - x0) : 0.5) * (W - 2 * P);
    const sy = (y) => H - P - (y1 > y0 ? (y - y0) / (y1 - y0) : 0.5) * (H - 2 * P);
    const box = el("div", {class: "chart", "data-metric": k});
    box.append(el("div", {class: "name"}, k));
    const svg = document.createElementNS(NS, "svg"); svg.setAttribute("width", W); svg.setAttribute("height", H);
    const line = document.createElementNS(NS, "polyline");
    line.setAttribute("points", pts.map((p) => sx(p[0]) + "," + sy(p[1])).join(" "));
    line.setAttribute("fill", "none"); line.setAttribute("stroke", "#3366cc"); line.setAttribute("stroke-width", "1.5");
    svg.append(line);
    for (const p of pts) { const c = document.createElementNS(NS, "circle"); c.setAttribute("cx", sx(p[0])); c.setAttribute("cy", sy(p[1]));
      c.setAttribute("r", 2); c.setAttribute("fill", "#3366cc"); const tt = document.createElementNS(NS, "title");
      tt.textContent = "step " + p[0] + ": " + fmt(p[1]); c.append(tt); svg.append(c); }
    for (const p of extra) { const c = document.createElementNS(NS, "rect"); c.setAttribute("x", sx(p[0]) - 4); c.setAttribute("y", sy(p[1]) - 4);
      c.setAttribute("width", 8); c.setAttribute("height", 8); c.setAttribute("fill", "#e07b00"); const tt = document.createElementNS(NS, "title");
      tt.textContent = "held-out " + p[2] + ": " + fmt(p[1]); c.append(tt); svg.append(c); }
    box.append(svg);
    box.append(el("div", {class: "range"}, "steps " + x0 + "–" + x1 + " · min " + fmt(y0) + " · max " + fmt(y1) + " · last " + fmt(pts[pts.length - 1][1])));
    $(k.startsWith("env/") ? "charts" : "charts-more").append(box);
  }
})();

// ---- episodes ----
const SNAPS = [];
(function snapshots() {
  const seen = new Map();
  for (const e of RUN.episodes) {
    const key = e.source + "|" + (e.step === null || e.step === undefined ? "" : e.step);
    if (!seen.has(key)) { seen.set(key, {key, source: e.source, step: e.step, episodes: []}); SNAPS.push(seen.get(key)); }
    seen.get(key).episodes.push(e);
  }
  const order = (s) => (s.source === "train" ? 1 : s.source.includes("before") ? 0 : 2);
  SNAPS.sort((a, b) => (a.step ?? 0) - (b.step ?? 0) || order(a) - order(b));
  SNAPS.forEach((s) => s.episodes.sort((a, b) => a.index - b.index));
})();

function colourValue(mode, tokens, i) {
  const pick = (arr) => (arr && arr[i] !== null && arr[i] !== undefined) ? arr[i] : null;
  if (mode === "advantage") return pick(tokens.advantage);
  if (mode === "ratio") { const r = pick(tokens.ratio); return r === null || r <= 0 ? null : Math.log(r); }
  if (mode === "entropy") return pick(tokens.entropy);
  const lp = pick(tokens.logprob); return lp === null ? null : -lp;
}
function heat(v, scale, diverging) {
  if (v === null || !(scale > 0)) return "rgb(255, 255, 255)";
  const t = Math.min(Math.abs(v) / scale, 1);
  const r = (x) => Math.round(x);
  if (!diverging) return "rgb(" + r(255 - 130 * t) + ", " + r(255 - 80 * t) + ", 255)";
  if (v >= 0) return "rgb(" + r(255 - 130 * t) + ", " + r(255 - 25 * t) + ", " + r(255 - 130 * t) + ")";
  return "rgb(255, " + r(255 - 130 * t) + ", " + r(255 - 130 * t) + ")";
}
function scaleOf(mode, episodes) {
  let m = 0;
  for (const e of episodes) { const t = e.tokens; if (!t) continue;
    for (let i = 0; i < t.ids.length; i++) { if (!t.action_mask[i]) continue; const v = colourValue(mode, t, i); if (v !== null) m = Math.max(m, Math.abs(v)); } }
  return m;
}
function turnFooter(turn, k) {
  const box = el("div");
  if (turn.tool_calls && turn.tool_calls.length) box.append(el("div", {class: "calls"}, "tool calls: " + turn.tool_calls.map((c) => c.name + "(" + JSON.stringify(c.arguments) + ")").join("; ")));
  const line = el("div", {class: "rewards"}, "reward " + fmt(turn.reward));
  const entries = Object.entries(turn.reward_components || {});  // the paid ones first; zeros behind the toggle
  const comps = entries.filter(([, v]) => v !== 0).concat(entries.filter(([, v]) => v === 0));
  if (comps.length) {
    line.append(document.createTextNode(" ("));
    comps.forEach(([n, v], j) => {
      const c = el("span", {class: "comp" + (v === 0 ? " zero" : ""), "data-component": n,
        title: NOTES[n] || "a component this env declares"}, (j ? ", " : "") + n + " " + fmt(v));
      line.append(c);
    });
    if (comps.every(([, v]) => v === 0)) line.append(el("span", {class: "comp-none"}, "all 0"));
    line.append(document.createTextNode(")"));
  }
  box.append(line);
  if (turn.action_error) box.append(el("div", {class: "err"}, "action error: " + turn.action_error));
  return box;
}
const SHOT = /^data:image\/(png|jpeg|webp);base64,[A-Za-z0-9+\/]+={0,2}$/;
function shot(src, caption) {  // a page screenshot the record carries (only an image data URI is ever drawn)
  if (typeof src !== "string" || !SHOT.test(src)) return null;
  const fig = el("figure", {class: "shot"});
  fig.append(el("img", {src: src, alt: caption}), el("figcaption", {}, caption));
  return fig;
}
function turnShot(e, k, box) {  // the page turn k saw: the first page, then the page after the turn before
  const f = shot(k === 0 ? e.screenshot : (e.turns[k - 1] || {}).screenshot, "the page turn " + (k + 1) + " saw");
  if (f) box.append(f);
}
function finalShot(e, card) {
  const last = e.turns.length ? e.turns[e.turns.length - 1].screenshot : null;
  const f = shot(last, "the page after the last action");
  if (f) { const box = el("div", {class: "turn final-page"}); box.append(f); card.append(box); }
}
function renderEpisode(e, mode, scale) {
  const ok = e.success > 0;
  const card = el("div", {class: "episode " + (ok ? "success" : "failure"), "data-index": e.index, "data-success": ok ? "1" : "0"});
  const head = el("div", {class: "ep-head"}, "#" + e.index + (e.group !== null && e.group !== undefined ? " · group " + e.group : "") + " · " + (ok ? "success" : "failure") + " ");
  head.append(el("span", {class: "meta"}, "return " + fmt(e["return"]) + " · " + e.turns.length + " turns · ended: " + e.ended + (e.task_id ? " · task " + e.task_id : "") + (e.seed !== null && e.seed !== undefined ? " · seed " + e.seed : "")));
  card.append(head);
  if (typeof e.question === "string" && e.question) card.append(el("div", {class: "question"}, e.question));
  const golds = Array.isArray(e.gold) ? e.gold.map(String) : [];
  if (golds.length || typeof e.answer === "string") {
    const a = el("div", {class: "answers"});
    a.append(el("b", {}, "answer: "));
    a.append(el("span", {class: "model-answer " + (ok ? "right" : "wrong")}, typeof e.answer === "string" ? e.answer : "(none given)"));
    if (golds.length) { a.append(document.createTextNode(" · ")); a.append(el("b", {}, "gold: ")); a.append(el("span", {class: "gold"}, golds.join(" | "))); }
    card.append(a);
  }
  const det = el("details", {class: "prompt"}); det.append(el("summary", {}, "prompt")); det.append(el("pre", {}, e.prompt || "")); card.append(det);
  const t = e.tokens;
  if (t && !t.timeline) {
    let start = 0;
    e.turns.forEach((turn, k) => {
      const end = k < t.turn_ends.length ? t.turn_ends[k] : t.ids.length - 1;
      const stop = k + 1 < t.turn_ends.length ? (() => { let j = end + 1; while (j < t.ids.length && !t.action_mask[j]) j++; return j; })() : t.ids.length;
      const box = el("div", {class: "turn"}); box.append(el("div", {class: "turn-head"}, "turn " + (k + 1)));
      turnShot(e, k, box);
      const toks = el("div", {class: "tokens"});
      for (let i = start; i < stop; i++) {
        const act = t.action_mask[i] === 1;
        const v = act ? colourValue(mode, t, i) : null;
        const tmpl = Array.isArray(t.special) && t.special[i] === 1;
        const s = el("span", {class: "tok " + (act ? "act" : "obs") + (tmpl ? " tmpl" : ""), "data-mask": act ? "1" : "0", "data-i": i}, t.text[i]);
        if (act && v !== null) s.setAttribute("data-value", String(v));
        s.style.background = act ? heat(v, scale, mode === "advantage" || mode === "ratio") : OBS;
        const tip = ["token " + t.ids[i], "mask " + (act ? 1 : 0)];
        for (const [n, arr] of [["advantage", t.advantage], ["ratio", t.ratio], ["entropy", t.entropy], ["log-prob", t.logprob]])
          if (arr && arr[i] !== null && arr[i] !== undefined && (act || n === "advantage")) tip.push(n + " " + fmt(arr[i]));
        s.title = tip.join(" · ");
        toks.append(s);
      }
      box.append(toks); box.append(turnFooter(turn, k)); card.append(box);
      start = stop;
    });
  } else {
    e.turns.forEach((turn, k) => {
      const box = el("div", {class: "turn"}); box.append(el("div", {class: "turn-head"}, "turn " + (k + 1)));
      turnShot(e, k, box);
      if (typeof turn.context === "string") {  // the env rewrote what the agent saw (a window, a state summary)
        const ctx = el("details", {class: "prompt context"});
        ctx.append(el("summary", {}, "the context the model saw (" + turn.context.length + " characters)"));
        ctx.append(el("pre", {}, turn.context)); box.append(ctx);
      }
      box.append(el("div", {class: "plain act"}, turn.action));
      if (turn.observation) box.append(turn.user ? el("div", {class: "plain obs user"}, "user: " + turn.observation)
                                                 : el("div", {class: "plain obs"}, turn.observation));
      box.append(turnFooter(turn, k)); card.append(box);
    });
  }
  finalShot(e, card);
  return card;
}
function snapLabel(s) { return (s.source === "train" ? "train step " + s.step : s.source + (s.step !== null && s.step !== undefined ? " (step " + s.step + ")" : "")) + " · " + s.episodes.length + " episodes"; }
function setupPane(pane, initial) {
  const head = el("div", {class: "pane-head"});
  const sel = el("select", {class: "snapshot"});
  SNAPS.forEach((s, i) => { const o = el("option", {value: i}, snapLabel(s)); sel.append(o); });
  sel.value = String(initial);
  const stats = el("span", {class: "stats"});
  head.append(sel, stats); pane.append(head);
  const list = el("div", {class: "episodes"}); pane.append(list);
  const draw = () => {
    list.textContent = "";
    const snap = SNAPS[Number(sel.value)];
    if (!snap) { list.append(el("div", {class: "empty"}, "no saved episodes")); return; }
    const mode = $("colour").value, filter = $("filter").value;
    const shown = snap.episodes.filter((e) => filter === "all" || (filter === "success") === (e.success > 0));
    const scale = scaleOf(mode, snap.episodes);
    list.setAttribute("data-scale", String(scale)); list.setAttribute("data-mode", mode);
    const wins = snap.episodes.filter((e) => e.success > 0).length;
    stats.textContent = "success " + wins + "/" + snap.episodes.length + (scale ? " · colour scale ±" + fmt(scale) : "");
    if (!shown.length) list.append(el("div", {class: "empty"}, "no episodes match the filter"));
    shown.forEach((e) => {
      try { list.append(renderEpisode(e, mode, scale)); }
      catch (err) { list.append(el("div", {class: "episode failure"}, "episode " + e.index + " could not be drawn: " + err)); }
    });
  };
  sel.addEventListener("change", draw);
  pane.draw = draw; draw();
}
// the first view: the held-out episodes after RL (what the run produced), beside those before RL when compared;
// a run without them opens on its first training step, beside its last
const firstTrain = Math.max(0, SNAPS.findIndex((s) => s.source === "train"));
let lastTrain = -1; SNAPS.forEach((s, i) => { if (s.source === "train") lastTrain = i; });
const after = SNAPS.findIndex((s) => s.source.startsWith("held-out after"));
const before = SNAPS.findIndex((s) => s.source.startsWith("held-out before"));
const startA = after >= 0 ? after : firstTrain;
const startB = after >= 0 && before >= 0 ? before : (lastTrain >= 0 ? lastTrain : SNAPS.length - 1);
setupPane($("pane-a"), startA);
setupPane($("pane-b"), startB);
if (after >= 0) $("episodes-hint").textContent = "Showing the held-out episodes after RL. Pick a training step in the menu to see what it trained on" + (before >= 0 ? ", or tick \u201ctwo steps side by side\u201d to compare with the episodes before RL." : ".");
else if (SNAPS.length && lastTrain >= 0) $("episodes-hint").textContent = "Showing the first saved training step; pick another in the menu, or tick \u201ctwo steps side by side\u201d.";
const redraw = () => { $("pane-a").draw(); $("pane-b").draw(); };
$("colour").addEventListener("change", redraw); $("filter").addEventListener("change", redraw);
$("compare").addEventListener("change", () => { $("pane-b").hidden = !$("compare").checked; });
$("zeros").addEventListener("change", () => { document.body.classList.toggle("show-zeros", $("zeros").checked); });
if (location.hash === "#compare") { $("compare").checked = true; $("pane-b").hidden = false; }
document.body.setAttribute("data-ready", "1");
</script></body></html>
"""
