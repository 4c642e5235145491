"""How many concurrent token streams ``gpusleuth load`` sustains on one core, and its timing error (issue 26, 8).

A streaming server that does no model work (``tests/servers/token_pacer.py``: every answer is ``--tokens``
SSE token events, one every ``--gap-ms``, each event's write time logged by the request's ``X-Request-Id``)
runs on one core; ``gpusleuth load --concurrency N`` runs pinned to the other. For each N the table gives:
streams in flight, token events per second received, the client's CPU (its own measure, in cores), and the
*timing error* — for every token event, the client's arrival stamp minus the server's write stamp (one host,
one wall clock), p50 and p99 — plus the inter-token p50 the client reports against the pacing. A client that
is the bottleneck shows it as a growing p99 delay and its CPU at 1 core.

    python benchmarks/stream_ceiling.py --concurrency 16,64,256,512 --seconds 8 --gap-ms 20 --tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="16,64,256,512")
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    server_core, client_core = cores[0], cores[-1]
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; server on core {server_core}, client "
          f"on core {client_core}; {a.tokens} tokens a request, one every {a.gap_ms:g} ms, {a.seconds:g} s a level")
    print("| concurrency | requests | token events/s | client CPU (cores) | arrival − write p50 ms | p99 ms | "
          "inter-token p50 ms (paced at %g) |" % a.gap_ms)
    print("|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for conc in (int(c) for c in a.concurrency.split(",")):
            port = free_port()
            log = work / f"server-{conc}.jsonl"
            srv = subprocess.Popen([sys.executable, str(REPO / "tests" / "servers" / "token_pacer.py"), str(port),
                                    str(log), "--tokens", str(a.tokens), "--gap-ms", str(a.gap_ms)],
                                   preexec_fn=lambda: os.sched_setaffinity(0, {server_core}))
            try:
                time.sleep(1.5)
                out = work / f"run-{conc}"
                res = subprocess.run(
                    [sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/v1/completions",
                     "--model", "pacer", "--concurrency", str(conc), "--duration", str(a.seconds), "--timeout", "60",
                     "--input-tokens", "8", "--output-tokens", str(a.tokens), "--out", str(out), "--json"],
                    capture_output=True, text=True, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {client_core}))
                if res.returncode:
                    raise RuntimeError(res.stderr[-2000:])
            finally:
                srv.terminate()
                srv.wait()
            level = json.loads(res.stdout)["serving"]["levels"][0]
            writes = {}
            for line in log.read_text().splitlines():
                r = json.loads(line)
                writes[r["id"]] = r["writes_ns"]
            import pyarrow.parquet as pq

            rows = pq.read_table(out / "load.parquet").to_pylist()
            delays, events, first, last = [], 0, None, None
            for r in rows:
                w = writes.get(str(r["request_id"]))
                got = r["token_ns"] or []
                if not w or len(w) != len(got):
                    continue
                delays.extend(g - s for g, s in zip(got, w))
                events += len(got)
                first = min(first or got[0], got[0])
                last = max(last or got[-1], got[-1])
            d = np.array(delays) / 1e6
            rate = events / ((last - first) / 1e9) if first and last and last > first else 0.0
            print(f"| {conc} | {level['requests']} | {rate:,.0f} | {level['generator_cpu_cores']:.2f} | "
                  f"{np.percentile(d, 50):.2f} | {np.percentile(d, 99):.2f} | {level['tokens']['itl_ms']['p50']:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
