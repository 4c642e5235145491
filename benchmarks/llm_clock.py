"""``gpusleuth load``'s TTFT and inter-token gaps against a streaming server's own clock (issue 26).

Starts ``tests/servers/openai_stream.py`` (a tiny causal transformer on CPU; per request it writes its TTFT
from the kernel's receive stamp of the request to the first token's write, and every gap between token
writes), loads it with gpusleuth at each concurrency, joins the two per request by ``X-Request-Id`` and
prints, per level: TTFT p50 and inter-token p50 by each clock, their ratio, the median per-request ratio,
output tokens/s, and goodput for an SLO.

    python benchmarks/llm_clock.py --concurrency 1,2,4,8 --seconds 4 --slo ttft=300ms,itl=40ms
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))


def main() -> None:
    from gpusleuth.serving.analysis.load import analyze_load
    from gpusleuth.serving.analysis.tokens import parse_slo
    from gpusleuth.serving.recorder.load_plan import LoadPlan
    from gpusleuth.serving.recorder.loadgen import run_plan
    from gpusleuth.serving.recorder.prompts import Lengths, synthetic
    from gpusleuth.run.model import Run, Table

    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--slo", default="ttft=300ms,itl=40ms")
    ap.add_argument("--port", type=int, default=18779)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        truth_file = Path(tmp) / "truth.jsonl"
        srv = subprocess.Popen([sys.executable, "openai_stream.py", str(a.port), str(truth_file), "--layers", "4",
                                "--width", "192"], cwd=REPO / "tests" / "servers", stdout=subprocess.DEVNULL)
        try:
            time.sleep(6)
            plan = LoadPlan(url=f"http://127.0.0.1:{a.port}/v1/chat/completions", mode="closed",
                            levels=[int(x) for x in a.concurrency.split(",")], duration_s=a.seconds, method="POST",
                            headers=[("Content-Type", "application/json")], api="chat", timeout_s=60,
                            prompts=synthetic(64, Lengths(300, 20), Lengths(16), seed=1), slo=parse_slo(a.slo))
            result = run_plan(plan)
            time.sleep(1)
        finally:
            srv.terminate()
            srv.wait()
        truth = {r["id"]: r for r in map(json.loads, truth_file.read_text().splitlines()) if r["id"]}
    c = result.columns
    an = analyze_load(Run(meta={"load": plan.to_meta()}, load=Table(c)))
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {a.seconds:g} s a level; SLO {a.slo}")
    print("| concurrency | requests | TTFT p50 gpusleuth / server ms | ratio | per-request ratio (median) "
          "| inter-token p50 gpusleuth / server ms | ratio | output tok/s | SLO attainment | goodput req/s |")
    print("|---:|---:|---|---:|---:|---|---:|---:|---:|---:|")
    for lv in an.levels:
        rows = [(i, truth[str(c["request_id"][i])]) for i in np.flatnonzero((c["level"] == lv.level) & (c["error"] == ""))
                if str(c["request_id"][i]) in truth]
        st = np.median([t["ttft_s"] * 1e3 for _, t in rows])
        si = np.median(np.concatenate([t["gaps_s"] for _, t in rows])) * 1e3
        pr = np.median([(c["first_token_ns"][i] - c["start_ns"][i]) / 1e9 / t["ttft_s"] for i, t in rows])
        tk = lv.tokens
        print(f"| {lv.concurrency} | {lv.ok} | {tk.ttft_ms.p50:.1f} / {st:.1f} | {tk.ttft_ms.p50 / st:.3f} | {pr:.3f} "
              f"| {tk.itl_ms.p50:.2f} / {si:.2f} | {tk.itl_ms.p50 / si:.3f} | {tk.output_tokens_per_s:.0f} "
              f"| {lv.slo.attainment:.0%} | {lv.slo.goodput_rps:.2f} |")
    print(an.slo_reason)


if __name__ == "__main__":
    main()
