"""Issue 32's must-show for the two real LLM engines on CPU, each started by ``gpusleuth load … -- server`` at
concurrency 1, 4 and 16 and at one Poisson rate (one server per load, two loads per engine):

* ``transformers serve --continuous-batching`` (``tests/servers/transformers_cb.py`` runs the CLI unchanged and
  writes down the engine's own clock: each ``RequestState``'s ``created_time`` and the moment its scheduler took it
  out of PENDING, and which requests each generation step ran). Its manager's thread is Python, so each request is
  followed by the engine's ``request_id`` into the steps that ran it: per level the wait share (the put on the
  manager's queue → its first forward, over the server's service time) within 10 points of the engine's own
  (created → scheduled), every step's size the engine's own. A KV cache of 12 blocks of 32 tokens holds 4 of these
  sequences, so at concurrency 16 most of a request's time is the wait for room in the engine (65 % on its clock);
  the old join by time windows read 1.8 % and batches of 9 there, because the manager drains its queue into the
  scheduler every step, whether or not the request gets into a batch.
* llama.cpp's server (``tests/servers/llama_server.py``: xllamacpp embeds the C++ server in a Python process). Its
  HTTP threads and its slots are native: no request is seen in Python, so no wait can be attributed. gpusleuth
  says so in one sentence with the count per level and the reason (its ``/metrics`` name llama.cpp), and puts no
  share in its place; the engine's own gauges still say requests waited for a slot (``engine_capacity``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO, HostLoad, free_port
from test_serving import SERVERS, _env

sys.path.append(str(REPO / "benchmarks"))
pytestmark = [pytest.mark.process, pytest.mark.slow]

CLOSED = ("--concurrency", "1,4,16")
TF_RATE, LLAMA_RATE = 40, 20  # below each engine's capacity here (transformers ~60/s with its 12 blocks, llama ~25/s)
KV_BLOCKS = 12
# what a server whose batching is the engine's own is not told: a lock in front of the model, to start batching,
# preprocessing in the request path
NOT_THIS_PATTERN = {"serving.queueing", "serving.under_batched", "serving.preprocessing"}


def _fits_the_engine(rep: dict) -> None:
    """Findings that fit a continuous-batching engine: none of the patterns above, and a wait for a batch (if said)
    read as work queued for room in the engine — never as a batcher holding work for its window to fill."""
    causes = {f["cause"] for f in rep["findings"]}
    assert not causes & NOT_THIS_PATTERN, causes
    for f in rep["findings"]:
        if f["cause"] == "serving.batch_wait":
            assert "before the batcher took the work" in f["summary"] and "Shorten" not in f["fix"], f


def _poisson(rate: int) -> tuple[str, ...]:
    return ("--rate", str(rate), "--arrivals", "poisson", "--seed", "3")


def _report(out: Path) -> dict:
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(out), "--json"], env=_env(),
                         capture_output=True, text=True, timeout=120)
    assert rep.returncode == 0, rep.stderr[-3000:]
    return json.loads(rep.stdout)


def _load(out: Path, url_path: str, port: int, levels: tuple[str, ...], server: list[str]) -> None:
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}{url_path}", *levels,
                          "--duration", "3", "--input-tokens", "24", "--output-tokens", "16", "--no-gpu",
                          "--ready-timeout", "240", "--out", str(out), "--", *server],
                         env=_env(), capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]


# ------------------------------------------------------------------------- transformers' continuous batching
@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("openai")  # transformers[serving]
    import llm_engine as E

    return E.build_model(tmp_path_factory.mktemp("tf") / "tiny-llama")


def _transformers(tmp: Path, model: Path, levels: tuple[str, ...]) -> tuple[dict, list[dict], str | None]:
    port = free_port()
    truth = tmp / "engine.jsonl"
    host = HostLoad()
    _load(tmp / "run", "/v1/chat/completions", port, levels,
          ["env", "OMP_NUM_THREADS=1", "HF_HUB_OFFLINE=1", sys.executable, str(SERVERS / "transformers_cb.py"),
           str(truth), "--", "--continuous-batching", "--cb-num-blocks", str(KV_BLOCKS), "--cb-block-size", "32",
           "--device", "cpu", "--host", "127.0.0.1", "--port", str(port), str(model)])
    crowded = host.crowded()
    return _report(tmp / "run"), [json.loads(x) for x in truth.read_text().splitlines()], crowded


@pytest.fixture(scope="module")
def tf_closed(tmp_path_factory, tiny_llama):
    return _transformers(tmp_path_factory.mktemp("tf_closed"), tiny_llama, CLOSED)


@pytest.fixture(scope="module")
def tf_poisson(tmp_path_factory, tiny_llama):
    return _transformers(tmp_path_factory.mktemp("tf_poisson"), tiny_llama, _poisson(TF_RATE))


def _level(lv: dict) -> str:
    return f"c={lv['concurrency']}" if lv.get("concurrency") else f"{lv['rate']:g}/s"


def _against_the_engine(rep: dict, truth: list[dict], crowded: str | None, want: list[str]) -> None:
    rs = rep["request_stages"]
    assert rs["note"] is None, rs["note"]
    assert rs["batching"]["unattributed"] == 0
    reqs = [t for t in truth if "rid" in t and t["scheduled"] > 0]
    steps = [t for t in truth if "step" in t]
    levels = rep["serving"]["levels"]
    assert [_level(lv) for lv in levels] == want
    missed = []
    for lv, mine in zip(levels, rs["levels"]):
        s, e = lv["start_ns"], lv["end_ns"]
        rr = [r for r in reqs if s <= r["start"] < e]
        assert mine["requests"] == len(rr) > 10, (_level(lv), mine["requests"], len(rr))
        engine = sum(r["scheduled"] - r["created"] for r in rr) / sum(r["end"] - r["start"] for r in rr)
        print(f"{_level(lv)}: wait share {mine['shares']['wait']:.3f}, the engine's clock {engine:.3f}; "
              f"batch sizes {mine['batch_sizes']}")
        if abs(mine["shares"]["wait"] - engine) >= 0.10:
            missed.append((_level(lv), round(mine["shares"]["wait"], 3), round(engine, 3)))
        # the engine's own steps that ran this level's requests, by size: each forward's batch is the engine's
        ids = {r["rid"] for r in rr}
        sizes = Counter(x["size"] for x in steps if s <= x["step"] < e and ids & set(x["rids"]))
        mine_sizes = Counter({int(k): v for k, v in mine["batch_sizes"].items()})
        assert mine["batch_size_max"] <= max(sizes), (_level(lv), mine["batch_size_max"], sizes)
        assert sum(((mine_sizes - sizes) + (sizes - mine_sizes)).values()) <= 2, (_level(lv), mine_sizes, sizes)
    _fits_the_engine(rep)
    if missed and crowded:
        pytest.skip(f"wait share off by 10 points or more (level, gpusleuth, engine) {missed}, but {crowded}: "
                    "this needs a quiet host")
    assert not missed, missed


def test_transformers_continuous_batching_wait_held_to_the_engines_clock(tf_closed):
    rep, truth, crowded = tf_closed
    _against_the_engine(rep, truth, crowded, ["c=1", "c=4", "c=16"])
    # the KV cache holds 4 sequences: at concurrency 16 the engine never ran more, and the requests waited for room
    c16 = rep["request_stages"]["levels"][-1]
    assert c16["batch_size_max"] == 4 and c16["shares"]["wait"] > 0.3, c16


def test_transformers_continuous_batching_poisson_rate_held_to_the_engines_clock(tf_poisson):
    rep, truth, crowded = tf_poisson
    assert rep["serving"]["arrivals"] == "poisson"
    _against_the_engine(rep, truth, crowded, [f"{TF_RATE}/s"])


# ------------------------------------------------------------------------------------ llama.cpp's C++ server
@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    pytest.importorskip("xllamacpp", reason="llama.cpp's server comes with the test extra's xllamacpp wheel")
    pytest.importorskip("gguf", reason="the tiny model is written with the test extra's gguf package")
    import llm_proxy_clock as P

    return P.build_gguf(tmp_path_factory.mktemp("llama") / "tiny.gguf")


def _llama(tmp: Path, model: Path, levels: tuple[str, ...]) -> dict:
    port = free_port()
    _load(tmp / "run", "/v1/completions", port, levels,
          [sys.executable, str(SERVERS / "llama_server.py"), str(model), "--port", str(port), "--parallel", "4",
           "--metrics"])
    return _report(tmp / "run")


@pytest.fixture(scope="module")
def llama_closed(tmp_path_factory, gguf):
    return _llama(tmp_path_factory.mktemp("llama_closed"), gguf, CLOSED)


@pytest.fixture(scope="module")
def llama_poisson(tmp_path_factory, gguf):
    return _llama(tmp_path_factory.mktemp("llama_poisson"), gguf, _poisson(LLAMA_RATE))


def _not_followed_said(rep: dict, want: list[str]) -> None:
    """The sentence, with the count the load got answered per level and the reason; no share from the hook in its
    place — the engine's own per-request timings instead (serving/analysis/tokens.py ``EngineClock``)."""
    levels = rep["serving"]["levels"]
    assert [_level(lv) for lv in levels] == want
    rs = rep["request_stages"]
    assert rs is not None and rs["count"] == 0 and rs["levels"] == [] and rs["shares"] == {}, rs
    note = rs["note"]
    total = sum(lv["ok"] for lv in levels)
    assert note is not None and note.startswith(f"{total:,} of {total:,} requests"), note
    for lv in levels:
        name = f"concurrency {lv['concurrency']}" if lv.get("concurrency") else f"{lv['rate']:g}/s"
        assert f"{name}: {lv['ok']:,}" in note, (name, lv["ok"], note)
    # the hook attributes nothing inside the engine; llama.cpp's own timings on each answer split every request
    assert "llama.cpp" in note and "the hook attributes nothing" in note and "the engine's own timings" in note, note
    assert all(lv["tokens"]["engine"]["requests"] == lv["ok"] for lv in levels), [lv["tokens"] for lv in levels]
    assert note in rep["losses"]  # the terminal's "Data losses and salvage" says it too
    # nothing read from the requests it could not follow: no wait for a batch, no lock, no batch to start
    causes = {f["cause"] for f in rep["findings"]}
    assert not causes & (NOT_THIS_PATTERN | {"serving.batch_wait"}), causes


def test_llama_cpp_slots_not_followed_said_in_one_sentence(llama_closed):
    _not_followed_said(llama_closed, ["c=1", "c=4", "c=16"])
    # what the engine's own gauges say instead: requests waited for one of its 4 slots at concurrency 16
    cap = [f for f in llama_closed["findings"] if f["cause"] == "serving.engine_capacity"]
    assert cap and "concurrency 16" in cap[0]["title"], llama_closed["findings"]


def test_llama_cpp_poisson_rate_not_followed_said_in_one_sentence(llama_poisson):
    assert llama_poisson["serving"]["arrivals"] == "poisson"
    _not_followed_said(llama_poisson, [f"{LLAMA_RATE}/s"])
