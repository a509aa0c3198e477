"""The ``agentr1`` command. ``agentr1 --help`` and ``agentr1 SUBCOMMAND --help`` document it."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

__all__ = ["build_parser", "main"]


def parse_kv(items: Sequence[str]) -> dict[str, Any]:
    """``key=value`` pairs; values are read as JSON when they parse (numbers, true/false, lists), else strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: expected key=value, got {item!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def cmd_list(args: argparse.Namespace) -> int:
    from agentr1_gym.errors import ConfigError
    from agentr1_gym.registration import DESCRIPTIONS, USER_DESCRIPTIONS, import_user_module

    for module in getattr(args, "modules", None) or []:
        try:  # as the module:id form imports: the working directory counts
            import_user_module(module)
        except ImportError as exc:
            hint = f"; give a module name: drop the .py ({module[:-3]})" if module.endswith(".py") else ""
            raise ConfigError(f"cannot import {module!r}: {exc}{hint}") from None
    listed = {**DESCRIPTIONS, **USER_DESCRIPTIONS}
    width = max(map(len, listed))
    for env_id in sorted(listed):
        print(f"{env_id:<{width}}  {listed[env_id]}")
    return 0


def cmd_play(args: argparse.Namespace) -> int:
    from agentr1_gym.errors import NoOracleError, ResetNeededError
    from agentr1_gym.registration import make

    env = make(args.env_id, **parse_kv(args.env_arg))
    obs, info = env.reset(seed=args.seed)
    print(f"=== {args.env_id}  task {info['task_id']}\n{obs}\n")
    print(
        "Type one assistant turn per line ('\\n' for a newline). Commands: /oracle (show the oracle's next "
        "turn), /play-oracle (play it), /reset, /quit."
    )
    total = 0.0
    ended = "(the episode has ended: /reset for a new task, /quit to leave)"
    for line in sys.stdin:
        line = line.rstrip("\n")
        if line == "/quit":
            break
        if line == "/reset":
            obs, info = env.reset()
            total = 0.0
            print(f"=== task {info['task_id']}\n{obs}\n")
            continue
        if env.unwrapped.done:
            print(ended)
            continue
        if line in ("/oracle", "/play-oracle"):
            try:
                turn = env.unwrapped.oracle_action()
            except (NoOracleError, ResetNeededError) as exc:
                print(f"({exc})")
                continue
            print(turn if line == "/oracle" else f"(the oracle plays)\n{turn}")
            if line == "/oracle":
                continue
        else:
            turn = line.replace("\\n", "\n")
        obs, reward, terminated, truncated, info = env.step(turn)
        total += reward
        comps = {k: round(v, 3) for k, v in info["reward_components"].items() if v}
        print(f"--- turn {info['turn']}  reward {reward:+.3f} (return {total:+.3f})  components {comps}")
        if info["action_error"]:
            print(f"action error: {info['action_error']}")
        if obs:
            print(obs)
        if terminated or truncated:
            why = "terminated" if terminated else f"truncated ({info['truncated_reason']})"
            gold = env.unwrapped.gold_answers
            print(
                f"=== episode {why}; metrics {info.get('metrics')}"
                + (f"; gold {list(gold)!r}" if gold else "")
            )
            print("/reset for a new task, /quit to leave.")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    from agentr1_gym.evaluation import evaluate, print_result

    if args.model:  # model-backed policies live in the TRL adapter, found through an entry point
        from importlib.metadata import entry_points

        found = [ep for ep in entry_points(group="agentr1.policies") if ep.name == "model"]
        if not found:
            print('error: --model needs the TRL adapter: pip install "agentr1-gym[trl]"', file=sys.stderr)
            return 2
        return int(found[0].load()(args, env_kwargs=parse_kv(args.env_arg)))

    summary = evaluate(
        args.env_id,
        args.policy,
        episodes=args.episodes,
        seed=args.seed,
        env_kwargs=parse_kv(args.env_arg),
        progress=not args.no_progress,
        save_episodes=args.save_episodes,
        all_tasks=args.all_tasks,
    )
    if not args.returns:
        summary.pop("returns")
    print_result({"env": args.env_id, "policy": args.policy, **summary}, args.json)
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from agentr1_gym.registration import reward_notes
    from agentr1_gym.viewer import load_run, serve, write_view

    run = load_run(args.run)
    env_ids = {e.get("env_id") for e in run["episodes"]}
    settings = run["config"].get("settings") if isinstance(run["config"], dict) else None
    env_ids.add(settings.get("env_id") if isinstance(settings, dict) else None)
    run["component_notes"].update(reward_notes(sorted(i for i in env_ids if isinstance(i, str))))
    out = write_view(run, args.output, source=args.run)
    print(
        f"wrote {out}: {len(run['metrics'])} logged steps, {len(run['episodes'])} saved episodes, "
        f"{len(run['evals'])} evaluations"
    )
    if args.serve:
        serve(out, args.port)
    return 0


def _load_corpus(args: argparse.Namespace):
    """The corpus to index or serve: ``--corpus FILE``, else the corpus ``--env ID`` searches, else the bundled
    HotpotQA sample's."""
    from agentr1_gym.data import Corpus, bundled_corpus
    from agentr1_gym.errors import ConfigError

    if args.corpus and args.env:
        raise ConfigError("give --corpus FILE or --env ID, not both")
    if args.corpus:
        return Corpus.from_jsonl(args.corpus)
    if not args.env:
        return bundled_corpus("hotpotqa")
    from agentr1_gym.envs.qa import QAEnvBase
    from agentr1_gym.registration import env_ids, make

    env = make(args.env, **parse_kv(args.env_arg)).unwrapped
    if not isinstance(env, QAEnvBase) or env.corpus is None:
        searchable = [e for e in env_ids() if issubclass(type(make(e).unwrapped), QAEnvBase)]
        raise ConfigError(
            f"{args.env} has no search corpus (its tools: {', '.join(env.tools)}); envs with one: "
            f"{', '.join(searchable)}"
        )
    return env.corpus


def cmd_corpus_build(args: argparse.Namespace) -> int:
    import json as _json

    from agentr1_gym.data import load_qa

    seen: dict[str, str] = {}
    questions = 0
    for path in args.input:
        tasks = load_qa(path, None if args.dataset == "auto" else args.dataset)
        questions += len(tasks)
        for task in tasks:
            for title, text in task.context:
                seen.setdefault(title, text)  # dedup by title, first paragraph wins
    if not seen:
        print("error: the inputs carry no context paragraphs", file=sys.stderr)
        return 2
    with open(args.output, "w", encoding="utf-8") as f:
        for i, (title, text) in enumerate(seen.items()):
            f.write(
                _json.dumps(
                    {"id": str(i), "contents": f'"{title}"\n{text}', "title": title, "text": text},
                    ensure_ascii=False,
                )
                + "\n"
            )
    print(f"wrote {len(seen)} passages (deduplicated by title) from {questions} questions to {args.output}")
    return 0


def cmd_index_build(args: argparse.Namespace) -> int:
    import time

    corpus = _load_corpus(args)
    start = time.perf_counter()
    if args.backend == "lucene":
        from agentr1_gym.tools.search.lucene import build_lucene_index

        build_lucene_index(corpus, args.output, threads=args.threads)
    else:
        from agentr1_gym.tools.search.dense import build_dense_index

        if not args.encoder:
            print("error: --encoder MODEL_DIR is required for the dense backend", file=sys.stderr)
            return 2
        build_dense_index(
            corpus,
            args.output,
            encoder_path=args.encoder,
            index_type=args.index_type,
            prefixes=args.prefixes,
            show_progress=True,
        )
    print(
        f"built a {args.backend} index of {len(corpus)} passages in {time.perf_counter() - start:.1f} s: {args.output}"
    )
    return 0


def cmd_serve_retriever(args: argparse.Namespace) -> int:
    from agentr1_gym.retrieval_server import serve
    from agentr1_gym.tools.search import make_retriever

    settings: dict[str, Any] = {}
    if args.index:
        settings["index_path"] = args.index
    if args.encoder:
        settings["encoder_path"] = args.encoder
    if args.backend == "dense" and args.index_type:
        settings["index_type"] = args.index_type
    corpus = None if (args.index and args.backend != "bm25") else _load_corpus(args)
    retriever = make_retriever(args.backend, corpus, **settings)
    size = len(retriever) if hasattr(retriever, "__len__") else None
    print(
        f"serving {args.backend} over {size} passages on http://{args.host}:{args.port} "
        "(/health, /v1/search, /retrieve, /search)",
        flush=True,
    )
    serve(retriever, host=args.host, port=args.port, backend=args.backend, passages=size, docs=args.docs)
    return 0


def cmd_serve_env(args: argparse.Namespace) -> int:
    from agentr1_gym import env_server

    kwargs = parse_kv(args.env_arg)
    if args.write_space:
        written = env_server.write_space(
            args.write_space, args.env_id, kwargs, max_sessions=args.max_sessions, port=args.port
        )
        print(f"wrote {len(written)} files for a Hugging Face Space (Docker) serving {args.env_id}:")
        for path in written:
            print(f"  {path}")
        return 0
    timeout = args.session_timeout if args.session_timeout > 0 else None
    app = env_server.build_app(args.env_id, kwargs, max_sessions=args.max_sessions, session_timeout_s=timeout)
    print(
        f"serving {args.env_id} over OpenEnv on http://{args.host}:{args.port} (/ws sessions, at most "
        f"{args.max_sessions}; /health, /schema, /metadata)",
        flush=True,
    )
    env_server.serve(app, host=args.host, port=args.port)
    return 0


class Parser(argparse.ArgumentParser):
    """argparse without prefix matching (``--max-step 1`` is refused, never taken as ``--max-steps``), and with
    the closest option named when one is unknown. Subcommands' parsers are of this class too."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments:"):
            known = _options(self, getattr(self, "_given", ()))
            for word in message.split(":", 1)[1].split():
                close = difflib.get_close_matches(word.split("=", 1)[0], known, n=1, cutoff=0.75)
                if word.startswith("--") and close:
                    message += f" (did you mean {close[0]}?)"
                    break
        super().error(message)


def _options(parser: argparse.ArgumentParser, command: Sequence[str]) -> list[str]:
    """The option strings of ``parser`` and, for the subcommand named in ``command``, of its parser."""
    out = []
    for action in parser._actions:
        out += action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            for name in command:
                if name in action.choices:
                    out += _options(action.choices[name], ())
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="agentr1", description="Tool-using LLM agent envs (Agent-R1) for RL.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    sub = parser.add_subparsers(dest="command", required=True)
    _env_commands(sub)
    _eval_command(sub)
    _view_command(sub)
    _retrieval_commands(sub)
    _plugin_commands(sub)
    return parser


#: ``--env-arg``, for every command that makes an env
ENV_ARG: dict[str, Any] = {
    "metavar": "KEY=VALUE",
    "action": "append",
    "default": [],
    "help": "env keyword argument (repeatable), e.g. --env-arg max_turns=8 --env-arg tool_format=search_r1",
}


def _env_commands(sub: Any) -> None:
    p = sub.add_parser("list", help="list the registered AgentR1 envs (and the tasks your modules register)")
    p.add_argument(
        "modules", nargs="*", help="modules to import first, e.g. your module calling register_task"
    )
    p.set_defaults(func=cmd_list)

    p = sub.add_parser(
        "play", help="play an env in the terminal: type assistant turns, see observations and rewards"
    )
    p.add_argument("env_id", help="e.g. AgentR1/HotpotQA-v0, or your_module:Namespace/Name-v0")
    p.add_argument("--seed", type=int, default=0, help="reset seed (default 0)")
    p.add_argument("--env-arg", **ENV_ARG)
    p.set_defaults(func=cmd_play)


def _eval_command(sub: Any) -> None:
    p = sub.add_parser("eval", help="evaluate a policy: success, EM/F1, format validity, mean reward")
    p.add_argument("env_id", help="e.g. AgentR1/HotpotQA-v0, or your_module:Namespace/Name-v0")
    p.add_argument(
        "--policy",
        default="oracle",
        help="scripted policy: oracle | canonical (the oracle, named for code envs) | no-tool (answers at once) | "
        "random (a random admissible move in worlds) (default oracle)",
    )
    p.add_argument("--episodes", type=int, default=100, help="number of episodes (default 100)")
    p.add_argument("--seed", type=int, default=0, help="episode i is reset with seed SEED+i (default 0)")
    p.add_argument(
        "--all-tasks",
        action="store_true",
        help="play each task of a fixed task list once (its current split; --episodes is ignored), as a "
        "benchmark's accuracy is defined: BFCL's multi-turn accuracy is the mean success over its category",
    )
    p.add_argument("--env-arg", **ENV_ARG)
    p.add_argument("--returns", action="store_true", help="also print every episode's return")
    p.add_argument(
        "--model",
        default=None,
        help="evaluate a model instead of a scripted policy: 'smollm2' or a "
        "local model directory (needs the trl extra)",
    )
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the result to FILE, unrounded (stdout shows it rounded to 6 significant digits)",
    )
    p.add_argument(
        "--save-episodes",
        default=None,
        metavar="FILE",
        help="append every episode, turn by turn (with --model: its tokens and action mask too), to this JSONL "
        "file; `agentr1 view FILE` shows them",
    )
    _model_eval_flags(p)
    p.set_defaults(func=cmd_eval)


def _view_command(sub: Any) -> None:
    p = sub.add_parser(
        "view",
        help="write a run's viewer: one self-contained HTML page with its metric curves, held-out evaluations "
        "and saved episodes (action-mask colouring, token-level credit)",
    )
    p.add_argument(
        "run", metavar="RUN", help="a run directory (agentr1 train's --output-dir) or an episodes JSONL file"
    )
    p.add_argument(
        "-o", "--output", default=None, help="the HTML file to write (default RUN/view.html, or FILE.html)"
    )
    p.add_argument("--serve", action="store_true", help="also serve the page on localhost until Ctrl-C")
    p.add_argument(
        "--port", type=int, default=8000, help="with --serve: the port (default 8000; 0: any free)"
    )
    p.set_defaults(func=cmd_view)


def _retrieval_commands(sub: Any) -> None:
    p = sub.add_parser(
        "serve-retriever",
        help="serve a retriever over HTTP (our API, Search-R1's /retrieve, Agent-R1's /search)",
    )
    p.add_argument("--backend", default="bm25", choices=["bm25", "lucene", "dense"], help="default bm25")
    _corpus_flags(p)
    p.add_argument(
        "--index", default=None, help="prebuilt lucene/dense index directory (else built from --corpus)"
    )
    p.add_argument("--index-type", default=None, choices=["flat", "ivf", "hnsw"], help="dense index type")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1; use 0.0.0.0 to serve other machines, explicitly)",
    )
    p.add_argument("--port", type=int, default=8000, help="default 8000")
    p.add_argument("--docs", action="store_true", help="also serve /docs and /openapi.json (off by default)")
    p.set_defaults(func=cmd_serve_retriever)

    p = sub.add_parser(
        "serve-env",
        help="serve an env over OpenEnv's session protocol (OpenEnv's own server; one env per WebSocket session)",
    )
    p.add_argument("env_id", help="e.g. AgentR1/HotpotQA-v0, or your_module:Namespace/Name-v0")
    p.add_argument("--env-arg", **ENV_ARG)
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1; use 0.0.0.0 to serve other machines, explicitly)",
    )
    p.add_argument("--port", type=int, default=8000, help="default 8000")
    p.add_argument(
        "--max-sessions", type=int, default=16, help="concurrent sessions, one env each (default 16)"
    )
    p.add_argument(
        "--session-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="close a session idle this long, freeing its slot (default 600; 0: never)",
    )
    p.add_argument(
        "--write-space",
        default=None,
        metavar="DIR",
        help="instead of serving, write a Hugging Face Space (Docker) that serves the env: openenv.yaml, "
        "Dockerfile, server/app.py, README.md",
    )
    p.set_defaults(func=cmd_serve_env)

    p = sub.add_parser("index", help="build retrieval indexes")
    isub = p.add_subparsers(dest="index_command", required=True)
    b = isub.add_parser("build", help="build a lucene or dense index from a JSONL corpus")
    b.add_argument("--backend", required=True, choices=["lucene", "dense"])
    _corpus_flags(b)
    b.add_argument("--output", required=True, help="index directory to write")
    b.add_argument(
        "--index-type", default="flat", choices=["flat", "ivf", "hnsw"], help="dense: default flat"
    )
    b.add_argument(
        "--prefixes", default=None, choices=["none", "e5", "bge"], help="dense: instruction prefixes"
    )
    b.add_argument("--threads", type=int, default=2, help="lucene: indexing threads (default 2)")
    b.set_defaults(func=cmd_index_build)

    p = sub.add_parser("corpus", help="build retrieval corpora")
    csub = p.add_subparsers(dest="corpus_command", required=True)
    c = csub.add_parser(
        "build", help="turn official HotpotQA/2Wiki/MuSiQue files into a JSONL corpus (dedup by title)"
    )
    c.add_argument("--input", nargs="+", required=True, help="dataset files (JSON/JSONL, optionally .gz)")
    c.add_argument(
        "--dataset",
        default="auto",
        choices=["auto", "hotpotqa", "2wikimultihopqa", "musique"],
        help="layout of the inputs (default: detected)",
    )
    c.add_argument(
        "--output", required=True, help="corpus JSONL to write ({id, contents, title, text} per line)"
    )
    c.set_defaults(func=cmd_corpus_build)


def _corpus_flags(p: argparse.ArgumentParser) -> None:
    """What ``serve-retriever`` and ``index build`` read (:func:`_load_corpus`) and the dense encoder."""
    p.add_argument(
        "--corpus", default=None, help="JSONL corpus (default: the bundled HotpotQA sample's corpus)"
    )
    p.add_argument(
        "--env", default=None, metavar="ENV_ID", help="use the corpus this env searches (any search env)"
    )
    p.add_argument(
        "--env-arg", action="append", default=[], metavar="KEY=VALUE", help="keyword for --env (repeatable)"
    )
    p.add_argument("--encoder", default=None, help="sentence-transformers model directory (dense)")


def _model_eval_flags(p: argparse.ArgumentParser) -> None:
    """``eval --model``'s own flags, added by the package that evaluates models (the TRL adapter's
    ``agentr1.eval_options`` entry point); the core knows only ``--model``."""
    from importlib.metadata import entry_points

    group = p.add_argument_group("with --model (added by the TRL adapter)")
    for ep in entry_points(group="agentr1.eval_options"):
        with contextlib.suppress(ImportError):  # the adapter's dependencies are missing: --model says so
            ep.load()(group)


def _plugin_commands(sub: Any) -> None:
    """Subcommands contributed by other packages through the ``agentr1.commands`` entry point group (the TRL
    adapter's ``train``); the core package never imports them by name."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="agentr1.commands"):
        try:
            ep.load()(sub)
        except ImportError as exc:
            missing = str(exc)
            p = sub.add_parser(ep.name, help=f"(unavailable: {missing})")
            p.set_defaults(func=lambda args, _m=missing, _n=ep.name: _unavailable(_n, _m))


def _unavailable(name: str, missing: str) -> int:
    print(
        f'error: `agentr1 {name}` needs the TRL adapter: pip install "agentr1-gym[trl]" ({missing})',
        file=sys.stderr,
    )
    return 2


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``agentr1`` command. Errors are one line on stderr (exit 2); ``--debug`` shows the traceback."""
    args = build_parser().parse_args(argv)
    from agentr1_gym.errors import AgentR1Error

    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Exception as exc:
        if args.debug:
            raise
        first = (str(exc).strip().splitlines() or [""])[0][:500]
        what = first if isinstance(exc, AgentR1Error) else f"{type(exc).__name__}: {first}"
        print(f"error: {what} (agentr1 --debug {args.command} ... shows the traceback)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
