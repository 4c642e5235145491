"""What one Prometheus scrape of ``gpusleuth run --prometheus`` costs the recorder (issue 15).

Writes a hook event file with STEPS step lines (the real line format, docs/run-format.md) into a scratch
run directory, then times ``LiveMetrics`` scrapes through prometheus-client's real exposition
(``generate_latest`` on the private registry, what the HTTP handler calls): the first scrape reads every
line; a steady scrape reads only the lines appended since (NEW per scrape, e.g. 10 steps/s × 15 s).

    python benchmarks/exporter_scrape.py --steps 100000 --new 150 --repeats 21
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path


def step_lines(start: int, n: int) -> str:
    t = 1_790_000_000_000_000_000 + start * 50_000_000
    return "".join(f"S\t{t + i * 50_000_000}\t{t + (i + 1) * 50_000_000}\t5000000\t1000000\t64\t3000000\t1\to\n"
                   for i in range(n))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--new", type=int, default=150)
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()
    from prometheus_client import CollectorRegistry, generate_latest

    from gpusleuth.recorder.exporter import LiveMetrics

    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        raw.mkdir()
        events = raw / "events-4242.tsv"
        events.write_text("H\t" + json.dumps({"pid": 4242, "role": "main", "rank": "0"}) + "\n"
                          + step_lines(0, args.steps))
        metrics = LiveMetrics(Path(tmp), job="bench", hostname="node")
        registry = CollectorRegistry(auto_describe=False)
        registry.register(metrics)
        t = time.perf_counter()
        generate_latest(registry)
        first = time.perf_counter() - t
        steady, written = [], args.steps
        for _ in range(args.repeats):
            with open(events, "a") as f:
                f.write(step_lines(written, args.new))
            written += args.new
            t = time.perf_counter()
            text = generate_latest(registry).decode()
            steady.append(time.perf_counter() - t)
        assert f'gpusleuth_steps_total{{Hostname="node",job="bench",rank="0"}} {float(written)}' in text, text
    print(f"first scrape over {args.steps:,} steps: {first * 1e3:.1f} ms")
    print(f"steady scrape with {args.new} new steps: median {statistics.median(steady) * 1e3:.2f} ms "
          f"(min {min(steady) * 1e3:.2f}, max {max(steady) * 1e3:.2f}, {args.repeats} scrapes)")


if __name__ == "__main__":
    main()
