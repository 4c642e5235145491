"""The ceiling of ``gpusleuth load``'s own client: requests/s against a trivial server (issue 16).

A load generator that is the bottleneck reports its own limit as the server's knee. This measures the
most requests/s the generator (``serving/recorder/loadgen.py`` on ``serving/recorder/http_client.py``, closed loop) gets
from a server that does nothing — a raw asyncio protocol answering a fixed 2-byte 200 to each request,
in its own process — per concurrency, interleaved with peers when they are there: Debian's ``wrk`` (one
thread, the anchor for plain HTTP), a plain httpx
``AsyncClient`` loop and a plain aiohttp ``ClientSession`` loop, same workers, same keep-alive. Each repeat runs every client once, in rotating order;
the table gives medians and the ratio to gpusleuth. Then the open loop alone: the rate it sustains and
how late it starts requests (its own lag) as the asked rate rises.

    python benchmarks/load_generator.py --concurrency 1,8,64 --seconds 3 --repeats 3 --rates 1000,3000,6000,10000
    PYTHONPATH=/path/to/httpx:/path/to/aiohttp python benchmarks/load_generator.py   # peers from elsewhere
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time

SERVER = r"""
import asyncio, sys
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
class P(asyncio.Protocol):
    def connection_made(self, t): self.t, self.buf = t, b""
    def data_received(self, data):
        self.buf += data
        n = self.buf.count(b"\r\n\r\n")
        if n:
            self.buf = self.buf[self.buf.rfind(b"\r\n\r\n") + 4:]
            self.t.write(RESP * n)
async def main():
    srv = await asyncio.get_running_loop().create_server(P, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())
"""


def gpusleuth_rps(url: str, conc: int, seconds: float) -> float:
    from gpusleuth.serving.recorder.load_plan import LoadPlan
    from gpusleuth.serving.recorder.loadgen import run_plan

    r = run_plan(LoadPlan(url=url, mode="closed", levels=[conc], duration_s=seconds))
    c = r.columns
    ok = (c["status"] == 200).sum()
    return ok / ((c["end_ns"].max() - c["start_ns"].min()) / 1e9)


async def _loop(send, conc: int, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    done = 0

    async def worker():
        nonlocal done
        while time.monotonic() < deadline:
            await send()
            done += 1

    t0 = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(conc)))
    return done / (time.monotonic() - t0)


def httpx_rps(url: str, conc: int, seconds: float) -> float:
    import httpx

    async def main():
        limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
        async with httpx.AsyncClient(limits=limits) as client:
            return await _loop(lambda: client.get(url), conc, seconds)

    return asyncio.run(main())


def aiohttp_rps(url: str, conc: int, seconds: float) -> float:
    import aiohttp

    async def main():
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as session:
            async def send():
                async with session.get(url) as r:
                    await r.read()
            return await _loop(send, conc, seconds)

    return asyncio.run(main())


def wrk_rps(url: str, conc: int, seconds: float) -> float:
    """Debian's ``wrk`` (C, epoll, one thread: the same single core as the Python clients), the anchor."""
    out = subprocess.run(["wrk", "-t1", f"-c{conc}", f"-d{max(int(seconds), 1)}s", url], capture_output=True,
                         text=True, timeout=seconds + 30).stdout
    line = next(ln for ln in out.splitlines() if ln.startswith("Requests/sec:"))
    return float(line.split()[1])


def open_loop(url: str, rate: float, seconds: float) -> tuple[float, float]:
    """gpusleuth's open loop at ``rate``: (2xx answers/s, p95 of how late it started requests, ms)."""
    import numpy as np

    from gpusleuth.serving.recorder.load_plan import LoadPlan
    from gpusleuth.serving.recorder.loadgen import run_plan

    c = run_plan(LoadPlan(url=url, mode="open", levels=[rate], duration_s=seconds)).columns
    ok = (c["status"] == 200).sum()
    return ok / ((c["end_ns"].max() - c["start_ns"].min()) / 1e9), float(np.percentile(c["lag_ns"], 95)) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,8,64")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rates", default="1000,3000,6000,10000", help="open-loop rates to try ('' for none)")
    args = ap.parse_args()
    clients = {"gpusleuth": gpusleuth_rps}
    import shutil

    if shutil.which("wrk"):
        clients["wrk"] = wrk_rps
    else:
        print("# wrk: not installed (apt-get install wrk), skipped", file=sys.stderr)
    for name, fn in (("httpx", httpx_rps), ("aiohttp", aiohttp_rps)):
        try:
            __import__(name)
            clients[name] = fn
        except ImportError:
            print(f"# {name}: not importable, skipped", file=sys.stderr)
    srv = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{srv.stdout.readline().strip()}/"
        print(f"# {os.cpu_count()} CPUs; server and client share them", file=sys.stderr)
        results = {(n, c): [] for n in clients for c in args.concurrency.split(",")}
        names = list(clients)
        for rep in range(args.repeats):
            for conc in args.concurrency.split(","):
                order = names[rep % len(names):] + names[:rep % len(names)]  # rotate who goes first
                for name in order:
                    rps = clients[name](url, int(conc), args.seconds)
                    results[(name, conc)].append(rps)
                    print(f"repeat {rep} concurrency {conc} {name}: {rps:,.0f} req/s", file=sys.stderr)
        print("| concurrency | " + " | ".join(f"{n} req/s (median)" for n in names)
              + "".join(f" | {n} ÷ gpusleuth" for n in names[1:]) + " |")
        print("|---" * (1 + 2 * len(names) - 1) + "|")
        for conc in args.concurrency.split(","):
            med = {n: statistics.median(results[(n, conc)]) for n in names}
            print(f"| {conc} | " + " | ".join(f"{med[n]:,.0f}" for n in names)
                  + "".join(f" | {med[n] / med['gpusleuth']:.2f}" for n in names[1:]) + " |")
        if args.rates:
            print("\n| open loop rate/s | achieved req/s (median) | generator lag p95 ms (median) |\n|---|---|---|")
            for rate in args.rates.split(","):
                runs = [open_loop(url, float(rate), args.seconds) for _ in range(args.repeats)]
                print(f"| {rate} | {statistics.median(r[0] for r in runs):,.0f} | "
                      f"{statistics.median(r[1] for r in runs):,.1f} |")
    finally:
        srv.terminate()
        srv.wait()


if __name__ == "__main__":
    main()
