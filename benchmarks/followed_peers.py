"""gpusleuth's client beside aiperf on the frameworks of issue 32 (LitServe, Ray Serve), with the server's own clock.

Starts ``tests/servers/litserve_infer.py`` or ``ray_infer.py`` (each writes, per request, its handler's start and end
as they happen), then, interleaved and repeated, the same closed-loop load from each client — concurrency C, N
requests of the same JSON body — and prints per run: requests/s and latency p50/p95 by the client's clock, and the
server's handler time p50 over the requests that started in that client's window (what the client's latency holds
besides the HTTP hop). aiperf runs from its own venv (``--aiperf``), with ``--endpoint-type raw`` and a raw-payload
dataset (each line the body, verbatim) and a local tokenizer (``benchmarks/llm_engine.build_model``): it rejects
these servers' answers (``{"label": 7}``: "No responses with actual content", every request an error) but records
each request's start and end (``profile_export.jsonl``), and its numbers here are from those. guidellm speaks only
OpenAI's API: it cannot load these servers.

    python benchmarks/followed_peers.py --server litserve --aiperf /tmp/venv/bin/aiperf --concurrency 4 --requests 400
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))
BODY = {"messages": [{"role": "user", "content": "x"}], "input": [1, 2, 3, 4]}  # aiperf's raw loader wants messages
SERVERS = {"litserve": ("litserve_infer.py", "/predict", ".api", lambda r: r), "ray": ("ray_infer.py", "/", ".replica",
                                                                                      lambda r: r.get("request"))}


def _stats(lat_ns: np.ndarray, start: int, end: int) -> tuple[float, float, float]:
    return len(lat_ns) / ((end - start) / 1e9), float(np.percentile(lat_ns, 50)) / 1e6, \
        float(np.percentile(lat_ns, 95)) / 1e6


def main() -> None:
    from llm_engine import build_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--server", choices=tuple(SERVERS), default="litserve")
    ap.add_argument("--aiperf", help="the aiperf executable (its own venv)")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--port", type=int, default=18795)
    a = ap.parse_args()
    script, path, suffix, record = SERVERS[a.server]
    url = f"http://127.0.0.1:{a.port}{path}"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        truth = work / "truth.json"
        body = work / "body.json"
        body.write_text(json.dumps(BODY))
        payloads = work / "payloads.jsonl"
        payloads.write_text((json.dumps(BODY) + "\n") * a.requests)
        tokenizer = build_model(work / "tok") if a.aiperf else None
        srv = subprocess.Popen([sys.executable, str(REPO / "tests" / "servers" / script), str(a.port), str(truth), "8",
                                "10"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def handler_p50(start: int, end: int) -> float:
            recs = [record(json.loads(x)) for x in Path(str(truth) + suffix).read_text().splitlines() if x.strip()]
            ms = [(r["end"] - r["start"]) / 1e6 for r in recs if r and "end" in r and start <= r["start"] <= end]
            return float(np.median(ms)) if ms else float("nan")

        def gpusleuth(warm: bool = False) -> None:
            out = subprocess.run([sys.executable, "-m", "gpusleuth", "load", url, "--concurrency", str(a.concurrency),
                                  "--requests", str(a.requests), "--duration", "600", "--body-file", str(body),
                                  "--ready-timeout", "180", "--no-warmup", "--json"], capture_output=True, text=True,
                                 env=env, check=True)
            lv = json.loads(out.stdout)["serving"]["levels"][0]
            if not warm:
                time.sleep(0.5)
                rows.append(("gpusleuth", lv["rps"], lv["p50_ms"], lv["p95_ms"],
                             handler_p50(lv["start_ns"], lv["end_ns"])))

        def aiperf() -> None:
            art = work / "aiperf"
            shutil.rmtree(art, ignore_errors=True)
            subprocess.run([a.aiperf, "profile", "--model", "m", "--tokenizer", str(tokenizer), "--url",
                            f"http://127.0.0.1:{a.port}", "--endpoint-type", "raw", "--custom-endpoint", path,
                            "--input-file", str(payloads), "--custom-dataset-type", "raw-payload",
                            "--use-server-token-count", "--concurrency", str(a.concurrency), "--request-count",
                            str(a.requests), "--artifact-dir", str(art), "--no-server-metrics", "--no-gpu-telemetry",
                            "--ui-type", "none"], capture_output=True, text=True)  # exits 1: every answer "invalid"
            recs = [json.loads(x)["metadata"] for x in (art / "profile_export.jsonl").read_text().splitlines()]
            s = np.asarray([m["request_start_ns"] for m in recs], np.int64)
            e = np.asarray([m["request_end_ns"] for m in recs], np.int64)
            time.sleep(0.5)
            rows.append(("aiperf (its per-request start/end)", *_stats(e - s, int(s.min()), int(e.max())),
                         handler_p50(int(s.min()), int(e.max()))))

        try:
            for _ in range(30):  # the server's first requests (a cold start) in no one's numbers; Ray's proxy
                gpusleuth(warm=True)  # answers 404 until the app is deployed
                if Path(str(truth) + suffix).exists():
                    break
                time.sleep(2)
            for _ in range(a.repeats):
                gpusleuth()
                if a.aiperf:
                    aiperf()
        finally:  # SIGINT: LitServe stops its workers on KeyboardInterrupt (SIGTERM left them serving the port)
            srv.send_signal(signal.SIGINT)
            try:
                srv.wait(timeout=30)
            except subprocess.TimeoutExpired:
                srv.kill()
                srv.wait()
    print(f"{a.server}, concurrency {a.concurrency}, {a.requests} requests a run; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print("| client | req/s | p50 ms | p95 ms | server's handler p50 ms |")
    print("|---|---:|---:|---:|---:|")
    for who, rps, p50, p95, srv_p50 in rows:
        print(f"| {who} | {rps:.1f} | {p50:.2f} | {p95:.2f} | {srv_p50:.2f} |")


if __name__ == "__main__":
    main()
