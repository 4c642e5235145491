"""``gpusleuth load`` against a real CPU engine, beside an independent stdlib streaming client (issue 26, 6).

A tiny Llama built from a config with a tokenizer trained here (``tests/servers/tiny_llama.py``, no hub
download) is served by ``transformers serve --continuous-batching`` on CPU. Then, interleaved (the order
alternates each repeat), at the same concurrency and for the same seconds, with the same request body:

* ``stdlib``: ``tests/servers/stream_client.py`` — threads with ``http.client``, one keep-alive connection
  each, a token event timed when its ``data:`` line is read;
* ``gpusleuth``: ``gpusleuth load URL --concurrency N --json`` (a child process too).

Each run gives TTFT p50, inter-token p50 and requests/s; the table has the medians over repeats and the
ratios gpusleuth / stdlib. Then both clients at once (equal shares of one engine: is either the
bottleneck?) and, as the yardstick's own spread, two stdlib clients at once: closed-loop clients sharing a
continuous-batching engine lock into phases with its steps, so at once their TTFT p50s differ by phase. The engine runs with ``OMP_NUM_THREADS=1`` (on a shared machine torch's
spinning intra-op threads otherwise slow it 10×) and a small KV cache (128 blocks of 32 tokens: the
default sizes its cache from free memory, which made its first request take a minute here).

    python benchmarks/llm_engine.py --concurrency 4 --seconds 6 --repeats 3 [--max-tokens 16]
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
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"


def engine_env() -> dict:
    return dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def build_model(out: Path) -> Path:
    """tests/servers/tiny_llama.py in a child (with the environment transformers imports in)."""
    subprocess.run([sys.executable, str(SERVERS / "tiny_llama.py"), str(out)], env=engine_env(), check=True,
                   capture_output=True, timeout=300)
    return out


def start_engine(model_dir: Path, port: int, log: Path) -> subprocess.Popen:
    """Its output goes to ``log`` (a pipe nobody reads fills up with access-log lines and stalls it)."""
    env = engine_env()
    exe = Path(sys.executable).with_name("transformers")
    cmd = [str(exe) if exe.exists() else "transformers", "serve", "--continuous-batching", "--cb-num-blocks", "128",
           "--cb-block-size", "32", "--device", "cpu", "--host", "127.0.0.1", "--port", str(port), str(model_dir)]
    with open(log, "wb") as out:
        return subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop_engine(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=20)


def wait_engine(url: str, proc: subprocess.Popen, body: bytes, log: Path, timeout: float = 240.0) -> None:
    """Until the engine answers a whole streamed request (its first one also warms it up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the engine exited ({proc.returncode}): {log.read_text(errors='replace')[-2000:]}")
        try:
            req = urllib.request.Request(url, body, {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=120) as r:
                if r.status == 200 and b"data:" in r.read():  # it sends no [DONE]
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer within {timeout:g} s")


def stdlib_start(url: str, body_file: Path, conc: int, seconds: float) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SERVERS / "stream_client.py"), url, str(body_file), str(conc),
                             str(seconds)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stdlib_result(proc: subprocess.Popen, seconds: float) -> dict:
    out, _ = proc.communicate(timeout=seconds + 120)
    r = json.loads(out)
    return {"ttft": statistics.median(r["ttft_ms"]), "itl": statistics.median(r["itl_ms"]), "rps": r["rps"],
            "requests": r["requests"], "errors": len(r["errors"]), "ttft_ms": r["ttft_ms"], "itl_ms": r["itl_ms"]}


def gpusleuth_start(url: str, prompts: Path, model: str, conc: int, seconds: float,
                    out: Path | None = None) -> subprocess.Popen:
    """With ``out``, the run directory is kept too: its ``load.parquet`` has every request's times."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, "-m", "gpusleuth", "load", url, "--prompts", str(prompts), "--model", model,
           "--concurrency", str(conc), "--duration", str(seconds), "--timeout", "60", "--json"]
    return subprocess.Popen(cmd + (["--out", str(out)] if out else []), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def gpusleuth_result(proc: subprocess.Popen, seconds: float, out: Path | None = None) -> dict:
    """The report's p50s; with ``out`` also every answered request's TTFT and token gaps (ms), read from the
    run's ``load.parquet`` as the stdlib client reports its own."""
    text, err = proc.communicate(timeout=seconds + 180)
    if proc.returncode:
        raise RuntimeError(err[-2000:])
    lv = json.loads(text)["serving"]["levels"][0]
    res = {"ttft": lv["tokens"]["ttft_ms"]["p50"], "itl": lv["tokens"]["itl_ms"]["p50"], "rps": lv["rps"],
           "requests": lv["requests"], "errors": lv["requests"] - lv["ok"], "cpu": lv["generator_cpu_cores"]}
    if out is not None:
        import pyarrow.parquet as pq

        rows = pq.read_table(out / "load.parquet").to_pylist()
        ok = [r for r in rows if r["status"] == 200 and not r["error"] and r["token_ns"]]
        res["ttft_ms"] = [(r["token_ns"][0] - r["start_ns"]) / 1e6 for r in ok]
        res["itl_ms"] = [(b - a) / 1e6 for r in ok for a, b in zip(r["token_ns"], r["token_ns"][1:])]
    return res


def write_requests(work: Path, model: str, max_tokens: int) -> tuple[Path, Path]:
    """The one request both clients send: as a body file (stdlib) and as a one-line dataset (gpusleuth)."""
    text = "hello world and more words about nothing in particular"
    body = {"model": model, "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens, "stream": True}
    body_file, prompts = work / "body.json", work / "prompts.jsonl"
    body_file.write_text(json.dumps(body))
    prompts.write_text(json.dumps({"messages": body["messages"], "max_tokens": max_tokens}) + "\n")
    return body_file, prompts


def together(url: str, model: str, work: Path, conc: int, seconds: float, max_tokens: int) -> dict:
    """Both clients at once, ``conc`` streams each, for the same seconds: they meet the same engine, the
    same batches and the same host, so what differs is the clients. Neither a bottleneck: equal shares."""
    body_file, prompts = write_requests(work, model, max_tokens)
    run = work / f"gpusleuth-run-{time.monotonic_ns()}"
    a = stdlib_start(url, body_file, conc, seconds)
    b = gpusleuth_start(url, prompts, model, conc, seconds, out=run)
    return {"stdlib": stdlib_result(a, seconds), "gpusleuth": gpusleuth_result(b, seconds, out=run)}


def stdlib_pair(url: str, work: Path, conc: int, seconds: float) -> tuple[dict, dict]:
    """Two stdlib clients at once (run after :func:`together`, whose request file it reuses): the yardstick's
    own disagreement with itself when two closed-loop clients share the engine's steps."""
    body_file = work / "body.json"
    a, b = stdlib_start(url, body_file, conc, seconds), stdlib_start(url, body_file, conc, seconds)
    return stdlib_result(a, seconds), stdlib_result(b, seconds)


def compare(url: str, model: str, work: Path, conc: int, seconds: float, repeats: int, max_tokens: int) -> dict:
    """Interleaved repeats; per client the runs and their medians."""
    body_file, prompts = write_requests(work, model, max_tokens)
    runs: dict[str, list[dict]] = {"stdlib": [], "gpusleuth": []}
    for i in range(repeats):
        order = ("stdlib", "gpusleuth") if i % 2 == 0 else ("gpusleuth", "stdlib")
        for who in order:
            runs[who].append(stdlib_result(stdlib_start(url, body_file, conc, seconds), seconds) if who == "stdlib"
                             else gpusleuth_result(gpusleuth_start(url, prompts, model, conc, seconds), seconds))
    med = {who: {k: statistics.median(r[k] for r in rs) for k in ("ttft", "itl", "rps")} for who, rs in runs.items()}
    return {"runs": runs, "median": med}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--port", type=int, default=18777)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model = build_model(work / "tiny-llama")
        url = f"http://127.0.0.1:{a.port}/v1/chat/completions"
        proc = start_engine(model, a.port, work / "engine.log")
        try:
            warm = json.dumps({"model": str(model), "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4,
                               "stream": True}).encode()
            wait_engine(url, proc, warm, work / "engine.log")
            res = compare(url, str(model), work, a.concurrency, a.seconds, a.repeats, a.max_tokens)
            both = [together(url, str(model), work, a.concurrency, a.seconds, a.max_tokens) for _ in range(a.repeats)]
            pairs = [stdlib_pair(url, work, a.concurrency, a.seconds) for _ in range(a.repeats)]
        finally:
            stop_engine(proc)
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; concurrency {a.concurrency}, "
          f"{a.seconds:g} s a run, {a.repeats} interleaved repeats, max_tokens {a.max_tokens}")
    for who, rs in res["runs"].items():
        print(who, [(round(r["ttft"], 1), round(r["itl"], 2), round(r["rps"], 1), r["errors"]) for r in rs])
    s, g = res["median"]["stdlib"], res["median"]["gpusleuth"]
    print("| client | TTFT p50 ms | inter-token p50 ms | requests/s |")
    print("|---|---:|---:|---:|")
    for who, m in (("stdlib http.client threads", s), ("gpusleuth load", g)):
        print(f"| {who} | {m['ttft']:.1f} | {m['itl']:.2f} | {m['rps']:.1f} |")
    print(f"| gpusleuth / stdlib | {g['ttft'] / s['ttft']:.2f} | {g['itl'] / s['itl']:.2f} | {g['rps'] / s['rps']:.2f} |")
    print(f"together ({a.concurrency} streams each at once), ratios gpusleuth / stdlib per repeat:")
    for r in both:
        s, g = r["stdlib"], r["gpusleuth"]
        print(f"  TTFT p50 {g['ttft']:.1f}/{s['ttft']:.1f} = {g['ttft'] / s['ttft']:.2f}, inter-token p50 "
              f"{g['itl']:.2f}/{s['itl']:.2f} = {g['itl'] / s['itl']:.2f}, req/s {g['rps']:.1f}/{s['rps']:.1f} = "
              f"{g['rps'] / s['rps']:.2f}")
    print(f"two stdlib clients at once ({a.concurrency} streams each), ratios second / first per repeat:")
    for s, g in pairs:
        print(f"  TTFT p50 {g['ttft']:.1f}/{s['ttft']:.1f} = {g['ttft'] / s['ttft']:.2f}, inter-token p50 "
              f"{g['itl']:.2f}/{s['itl']:.2f} = {g['itl'] / s['itl']:.2f}")


if __name__ == "__main__":
    main()
