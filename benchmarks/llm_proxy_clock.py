"""Each request's TTFT and token gaps on a clock that is neither client's: a byte-level proxy between the
client and a real CPU engine (issue 26, "why still open" (a)).

``tests/servers/stamp_proxy.py`` forwards bytes unchanged and stamps, per request, when its bytes arrived
(the kernel's receive time: when the client's write went out) and when each token event's bytes were
forwarded to the client. A client's own TTFT of the same request is then three parts: the *request leg*
(its start stamp → its bytes out: its send path, and a reconnect where the server closed the connection
after the previous answer), the proxy's TTFT (engine and loopback), and the *answer leg* (the bytes in its
socket → its stamp: its own wake-up and parsing). The answer leg and every token gap against the proxy's are
the client's timing error; the request leg is reported. ``gpusleuth load`` is joined to the proxy's records
by its ``X-Request-Id``; the stdlib client (``tests/servers/stream_client.py``) sends none, so its p50s are
set beside the proxy's p50s over its own requests — the proxy's TTFT ratio of the two clients' requests says
whether they met the same engine (timing) or a different one (traffic).

The engine is llama.cpp's server (``tests/servers/llama_server.py``, a tiny GGUF from
``tests/servers/tiny_gguf.py``) or ``transformers serve --continuous-batching`` (``benchmarks/llm_engine.py``),
on CPU, offline. Each client alone, interleaved, at each concurrency:

    python benchmarks/llm_proxy_clock.py --engine llamacpp --concurrency 2,4 --seconds 5 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"
sys.path.append(str(Path(__file__).resolve().parent))  # appended: never shadows a caller's modules

from llm_engine import stop_engine as stop, wait_engine  # noqa: E402 (the engine's start and stop, shared)

# A client's TTFT of a request = request leg + the proxy's TTFT + answer leg (module docstring). The bound:
ANSWER_LEG_P50_MS = 0.5  # median over requests of the client's first-token stamp − the proxy's forward stamp
GAP_P50_MS = 0.25  # median over gaps of |client gap − proxy gap|
NEVER_EARLY_MS = 0.05  # a client stamp before the proxy's (start after the request arrived, a token before
                       # it was forwarded) by more than this is a clock error: it cannot happen
# the request leg (the client's start stamp → its request's bytes arriving) holds the client's send path and,
# where the server closed the connection after the previous answer (llama.cpp's after every stream), the
# reconnect the server forces on every client: measured and reported, not bounded


def start_llama(model: Path, port: int, log: Path, parallel: int = 4) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, str(SERVERS / "llama_server.py"), str(model), "--port", str(port),
                                 "--parallel", str(parallel), "--metrics", "--slots"], stdout=out,
                                stderr=subprocess.STDOUT)


def build_gguf(out: Path) -> Path:
    subprocess.run([sys.executable, str(SERVERS / "tiny_gguf.py"), str(out)], check=True, capture_output=True,
                   timeout=120)
    return out


def start_proxy(port: int, upstream_port: int, log: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(SERVERS / "stamp_proxy.py"), str(port),
                             f"127.0.0.1:{upstream_port}", str(log)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().startswith("listening"), "the proxy did not start"
    return proc


def proxy_records(log: Path, skip: int = 0) -> list[dict]:
    """The proxy's records from line ``skip`` on (a request it saw end, with at least one token event)."""
    lines = log.read_text().splitlines()[skip:] if log.exists() else []
    return [r for r in map(json.loads, lines) if r["status"] == 200 and r["event_ns"]]


def proxy_lines(log: Path) -> int:
    return len(log.read_text().splitlines()) if log.exists() else 0


def gpusleuth_rows(run: Path) -> list[dict]:
    import pyarrow.parquet as pq

    rows = pq.read_table(run / "load.parquet").to_pylist()
    return [r for r in rows if r["status"] == 200 and not r["error"] and r["token_ns"]]


def joined(rows: list[dict], records: list[dict]) -> list[dict]:
    """Per request answered both sides (by X-Request-Id): TTFT and gaps (ms) on the client's clock and the
    proxy's. Requests whose token event counts differ are left out (none expected)."""
    by_id = {r["request_id"]: r for r in records if r["request_id"] is not None}
    out = []
    for r in rows:
        p = by_id.get(r["request_id"])
        if p is None or len(p["event_ns"]) != len(r["token_ns"]):
            continue
        c, e = list(r["token_ns"]), p["event_ns"]
        out.append({"level": r["level"], "conn": p["conn"], "client_ttft": (c[0] - r["start_ns"]) / 1e6,
                    "proxy_ttft": (e[0] - p["sent_ns"]) / 1e6,
                    "request_leg": (p["sent_ns"] - r["start_ns"]) / 1e6, "answer_leg": (c[0] - e[0]) / 1e6,
                    "client_gaps": [(b - a) / 1e6 for a, b in zip(c, c[1:])],
                    "proxy_gaps": [(b - a) / 1e6 for a, b in zip(e, e[1:])]})
    return out


def _p(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(int(q * len(xs)), len(xs) - 1)]


def agreement(pairs: list[dict]) -> dict:
    """How far the client's per-request times are from the proxy's, for the same requests."""
    excess = [p["client_ttft"] - p["proxy_ttft"] for p in pairs]
    gap_diff = [abs(a - b) for p in pairs for a, b in zip(p["client_gaps"], p["proxy_gaps"])]
    return {"requests": len(pairs), "per_connection": len(pairs) / len({p["conn"] for p in pairs}),
            "client_ttft_p50": statistics.median(p["client_ttft"] for p in pairs),
            "proxy_ttft_p50": statistics.median(p["proxy_ttft"] for p in pairs),
            "ttft_excess_p50": statistics.median(excess), "ttft_excess_p90": _p(excess, 0.9),
            "request_leg_p50": statistics.median(p["request_leg"] for p in pairs),
            "request_leg_min": min(p["request_leg"] for p in pairs),
            "answer_leg_p50": statistics.median(p["answer_leg"] for p in pairs),
            "answer_leg_p90": _p([p["answer_leg"] for p in pairs], 0.9),
            "answer_leg_min": min(p["answer_leg"] for p in pairs),
            "client_itl_p50": statistics.median(g for p in pairs for g in p["client_gaps"]),
            "proxy_itl_p50": statistics.median(g for p in pairs for g in p["proxy_gaps"]),
            "gap_diff_p50": statistics.median(gap_diff), "gap_diff_p90": _p(gap_diff, 0.9)}


def disagreements(a: dict) -> list[str]:
    """What breaks the bound (empty: the client's stamps are the proxy's within it)."""
    bad = []
    if a["request_leg_min"] < -NEVER_EARLY_MS:
        bad.append(f"a request stamped as sent {-a['request_leg_min']:.3f} ms after its bytes arrived")
    if a["answer_leg_min"] < -NEVER_EARLY_MS:
        bad.append(f"a first token stamped {-a['answer_leg_min']:.3f} ms before its bytes were forwarded")
    if a["answer_leg_p50"] > ANSWER_LEG_P50_MS:
        bad.append(f"first tokens stamped {a['answer_leg_p50']:.3f} ms p50 after they reached the client "
                   f"(> {ANSWER_LEG_P50_MS})")
    if a["gap_diff_p50"] > GAP_P50_MS:
        bad.append(f"token gaps differ from the proxy's by {a['gap_diff_p50']:.3f} ms p50 (> {GAP_P50_MS})")
    return bad


def planted(pairs: list[dict], shift_ms: float) -> list[dict]:
    """The same requests with a bias planted in the client's first-token stamp (as a client that stamped a
    token when it parsed it, ``shift_ms`` after its bytes came): the check must catch it."""
    return [dict(p, client_ttft=p["client_ttft"] + shift_ms, answer_leg=p["answer_leg"] + shift_ms,
                 client_gaps=[p["client_gaps"][0] - shift_ms, *p["client_gaps"][1:]] if p["client_gaps"] else [])
            for p in pairs]


def gpusleuth_load(url: str, conc: str, seconds: float, out: Path, max_tokens: int, prompts: Path | None = None,
                   model: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "gpusleuth", "load", url, "--concurrency", conc, "--duration", str(seconds),
           "--timeout", "60", "--out", str(out), "--json"]
    if prompts is not None:
        cmd += ["--prompts", str(prompts)]
    else:
        cmd += ["--input-tokens", "32", "--output-tokens", str(max_tokens)]
    if model:
        cmd += ["--model", model]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=len(conc.split(",")) * (seconds + 90))
    if res.returncode:
        raise RuntimeError(res.stderr[-2000:])
    return res


def stdlib_through(url: str, body_file: Path, conc: int, seconds: float, log: Path) -> dict:
    """The stdlib client alone at ``conc`` through the proxy: its p50s and the proxy's over its requests."""
    skip = proxy_lines(log)
    out = subprocess.run([sys.executable, str(SERVERS / "stream_client.py"), url, str(body_file), str(conc),
                          str(seconds)], capture_output=True, text=True, timeout=seconds + 120)
    r = json.loads(out.stdout)
    recs = proxy_records(log, skip)
    return {"client_ttft_p50": statistics.median(r["ttft_ms"]), "client_itl_p50": statistics.median(r["itl_ms"]),
            "proxy_ttft_p50": statistics.median((p["event_ns"][0] - p["sent_ns"]) / 1e6 for p in recs),
            "proxy_itl_p50": statistics.median((b - a) / 1e6 for p in recs
                                               for a, b in zip(p["event_ns"], p["event_ns"][1:])),
            "requests": r["requests"], "rps": r["rps"]}


def gpusleuth_through(url: str, prompts: Path, model: str, conc: int, seconds: float, log: Path,
                      work: Path, max_tokens: int) -> dict:
    run = work / f"run-{time.monotonic_ns()}"
    skip = proxy_lines(log)
    res = gpusleuth_load(url, str(conc), seconds, run, max_tokens, prompts=prompts, model=model)
    lv = json.loads(res.stdout)["serving"]["levels"][0]
    a = agreement(joined(gpusleuth_rows(run), proxy_records(log, skip)))
    return dict(a, rps=lv["rps"], report_ttft_p50=lv["tokens"]["ttft_ms"]["p50"], bad=disagreements(a))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("llamacpp", "transformers"), default="llamacpp")
    ap.add_argument("--concurrency", default="2,4")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--port", type=int, default=18787)
    a = ap.parse_args()
    import llm_engine as E

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        engine_port, proxy_port = a.port, a.port + 1
        path = "/v1/chat/completions"
        log = work / "engine.log"
        if a.engine == "llamacpp":
            model = str(build_gguf(work / "tiny.gguf"))
            proc = start_llama(Path(model), engine_port, log)
        else:
            model = str(E.build_model(work / "tiny-llama"))
            proc = E.start_engine(Path(model), engine_port, log)
        plog = work / "proxy.jsonl"
        proxy = None
        rows = []
        try:
            warm = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                               "stream": True}).encode()
            wait_engine(f"http://127.0.0.1:{engine_port}{path}", proc, warm, log)
            proxy = start_proxy(proxy_port, engine_port, plog)
            url = f"http://127.0.0.1:{proxy_port}{path}"
            body_file, prompts = E.write_requests(work, model, a.max_tokens)
            for conc in (int(c) for c in a.concurrency.split(",")):
                for i in range(a.repeats):
                    order = ("stdlib", "gpusleuth") if i % 2 == 0 else ("gpusleuth", "stdlib")
                    for who in order:
                        r = (stdlib_through(url, body_file, conc, a.seconds, plog) if who == "stdlib" else
                             gpusleuth_through(url, prompts, model, conc, a.seconds, plog, work, a.max_tokens))
                        rows.append(dict(r, who=who, conc=conc, rep=i))
        finally:
            if proxy is not None:
                stop(proxy)
            stop(proc)
    print(f"engine {a.engine}; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {a.seconds:g} s "
          f"a run, {a.repeats} interleaved repeats, max_tokens {a.max_tokens}")
    print("| conc | client | rep | client TTFT p50 ms | proxy TTFT p50 ms | client ITL p50 | proxy ITL p50 | "
          "per-request TTFT excess p50 / p90 ms | gap diff p50 ms | req/s |")
    print("|---:|---|---:|---:|---:|---:|---:|---|---:|---:|")
    for r in rows:
        ex = (f"{r['ttft_excess_p50']:.3f} / {r['ttft_excess_p90']:.3f} (legs {r['request_leg_p50']:.3f} + "
              f"{r['answer_leg_p50']:.3f}; {r['per_connection']:.1f} requests a connection)"
              if r["who"] == "gpusleuth" else "—")
        gd = f"{r['gap_diff_p50']:.3f}" if r["who"] == "gpusleuth" else "—"
        print(f"| {r['conc']} | {r['who']} | {r['rep']} | {r['client_ttft_p50']:.2f} | {r['proxy_ttft_p50']:.2f} | "
              f"{r['client_itl_p50']:.3f} | {r['proxy_itl_p50']:.3f} | {ex} | {gd} | {r['rps']:.1f} |")
    for conc in sorted({r["conc"] for r in rows}):
        med = {who: {k: statistics.median(r[k] for r in rows if r["who"] == who and r["conc"] == conc)
                     for k in ("client_ttft_p50", "proxy_ttft_p50")} for who in ("gpusleuth", "stdlib")}
        g, s = med["gpusleuth"], med["stdlib"]
        print(f"concurrency {conc}: gpusleuth / stdlib TTFT p50 on the clients' clocks "
              f"{g['client_ttft_p50'] / s['client_ttft_p50']:.2f}, on the proxy's {g['proxy_ttft_p50'] / s['proxy_ttft_p50']:.2f}")
    for r in rows:
        if r["who"] == "gpusleuth" and r["bad"]:
            print(f"concurrency {r['conc']} repeat {r['rep']}: outside the bound: {'; '.join(r['bad'])}")


if __name__ == "__main__":
    main()
