"""The field-corpus table of BENCHMARKS.md: every real public script in workloads/field/ under ``gpusleuth run``
on CPU, with and without ``--profile-steps``, against its own clock (workloads/field/corpus.py).

Usage: PYTHONPATH=src python benchmarks/field_corpus.py [--only NAME,...] [--plain-only]   (prints Markdown)

Columns: steps (the script's count / gpusleuth's), the median steady step and the steady throughput (the
script's clock → gpusleuth, relative error), the data wait where the script times it, the findings with
their predicted speed-ups, whether each HIGH is one the script's structure makes true, the host's load
average while it ran, and the wall time of the recording.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workloads" / "field"))
import corpus  # noqa: E402

from gpusleuth.pipeline.build import build_report  # noqa: E402
from gpusleuth.sources.rundir import load_run  # noqa: E402


def num(x: float) -> str:
    """Three significant figures below 100 (a ViT step on a CPU trains 0.2 samples/s), thousands apart above."""
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def pct(err: float | None) -> str:
    return "–" if err is None else f"{err * 100:+.1f} %"


def row(script: corpus.Script, profiled: bool, tmp: Path) -> str:
    work = Path(tempfile.mkdtemp(dir=tmp))
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = corpus.record(script, work / "run", profiled, work)
    wall = time.perf_counter() - t0
    load = (load0 + os.getloadavg()[0]) / 2
    mode = "profiled" if profiled else "plain"
    if res.returncode != 0:
        return f"| {script.name} | {mode} | job failed (exit {res.returncode}) | | | | | | {load:.1f} | {wall:.0f} s |"
    clock = script.parse(res.stdout + res.stderr, script)
    run = load_run(work / "run")
    v = corpus.check(script, clock, run, build_report(run), profiled)
    err = v.errors()
    data = "–"
    if v.data_clock is not None:
        data = f"{v.data_clock * 1e3:.1f} → {(v.data_got or 0) * 1e3:.1f} ms"
    findings = "; ".join(f"{sev.upper()} {cause}" + (f" ×{sp:.2f}" if sp else "")
                         for sev, cause, sp in v.findings if sev != "none") or "none"
    highs = [c for sev, c, _ in v.findings if sev == "high"]
    verdict = "✗ " + "; ".join(v.problems()) if v.problems() else "✓"
    true_high = ", ".join(f"{c}: {script.true_high[c]}" for c in highs if c in script.true_high) or "–"
    return (f"| {script.name} | {mode} | {v.steps_clock} / {v.steps_got} | "
            f"{v.step_s_clock * 1e3:.1f} → {(v.step_s_got or 0) * 1e3:.1f} ms ({pct(err['step'])}) | "
            f"{num(v.tput_clock)} → {num(v.tput_got or 0)} {v.tput_unit} ({pct(err['tput'])}) | {data} | "
            f"{findings} | {true_high} | {verdict} | {load:.1f} | {wall:.0f} s |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--only", default="", help="comma-separated script names (default: all)")
    ap.add_argument("--plain-only", action="store_true", help="skip the --profile-steps recordings")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or [s.name for s in corpus.SCRIPTS]
    print("| script | recording | steps (clock / gpusleuth) | median step (clock → gpusleuth) | throughput "
          "(clock → gpusleuth) | data wait | findings | true HIGH (why) | within bands | load avg | wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            script = corpus.BY_NAME[name]
            for profiled in (False, True) if script.profiled_too and not a.plain_only else (False,):
                print(row(script, profiled, Path(tmp)), flush=True)


if __name__ == "__main__":
    main()
