"""Run every scenario twice (planted, fixed) under `gpusleuth run`, diagnose both, and compare the planted
run's top-finding prediction with the fixed twin's measured speedup.

    python scenarios/run_all.py --table            # all scenarios, markdown table for BENCHMARKS.md
    python scenarios/run_all.py --only slow_storage

Prediction error (docs/diagnosis.md): gains are shares of the training loop's time saved,
``gain = 1 − 1/speedup``; predicted from the top finding's ``estimated_gain.speedup``, measured from the
scripts' own loop timing (samples/s of the fixed twin ÷ the planted one; a planted run recorded with
--profile-steps leaves its profiled steps and the trace export out of that timing). Error = |predicted − measured|
in percentage points. GPU-only scenarios are skipped without CUDA.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Spec:
    name: str
    cause: str
    gpu: bool = False
    profile_steps: str | None = None


SPECS = (
    Spec("slow_transform", "input.preprocessing"),
    Spec("slow_storage", "input.io"),
    Spec("io_workers", "input.io"),
    Spec("tiny_batch", "batch.too_small"),
    Spec("periodic_eval", "phase.eval"),
    Spec("checkpoint", "phase.checkpoint"),
    Spec("heavy_logging", "phase.logging"),
    Spec("oversubscription", "contention"),
    Spec("python_loop", "host.python", profile_steps="5-14"),
    Spec("healthy", "healthy"),
    Spec("gpu_pageable_h2d", "input.transfer", gpu=True, profile_steps="5-9"),
    Spec("gpu_item_sync", "sync", gpu=True, profile_steps="5-9"),
    Spec("gpu_fp32", "precision", gpu=True, profile_steps="5-9"),
    Spec("gpu_launch_bound", "host.launch_bound", gpu=True, profile_steps="5-9"),
)


def has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except ImportError:
        return False


def run_one(spec: Spec, variant: str, base: Path) -> dict:
    """Record one twin; return its report, truth and run dir."""
    from gpusleuth.recorder.launcher import LaunchOptions, launch
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.rundir import load_run

    out = base / f"{spec.name}-{variant}"
    truth = base / f"{spec.name}-{variant}.json"
    cmd = [sys.executable, str(HERE / f"{spec.name}.py"), f"--{variant}", "--truth", str(truth)]
    profile = spec.profile_steps if variant == "planted" else None
    env = {}
    if profile:
        lo, hi = (int(x) for x in profile.split("-"))
        env["SCENARIO_EXCLUDE_STEPS"] = f"{lo}-{hi + 1}"  # the profiled steps and the one that exports
    res = launch(LaunchOptions(command=cmd, out=out, profile_steps=profile, label=f"{spec.name} ({variant})",
                               extra_env=env))
    if res.exit_code != 0:
        raise RuntimeError(f"{spec.name} --{variant} exited {res.exit_code}; see {out}")
    report = build_report(load_run(res.run_dir))
    return {"report": report, "truth": json.loads(truth.read_text()), "run_dir": res.run_dir}


def compare(spec: Spec, planted: dict, fixed: dict) -> dict:
    rep = planted["report"]
    top = rep.findings[0] if rep.findings else None
    measured = fixed["truth"]["samples_per_s"] / planted["truth"]["samples_per_s"]
    predicted = top.estimated_gain.speedup if top is not None and top.estimated_gain else 1.0
    gain = lambda s: 1 - 1 / s if s and s > 0 else 0.0  # noqa: E731
    return {
        "scenario": spec.name,
        "expected": spec.cause,
        "top": top.cause if top else None,
        "top_severity": top.severity if top else None,
        "fixed_high": [f.cause for f in fixed["report"].findings if f.severity == "high"],
        "predicted_speedup": predicted,
        "measured_speedup": measured,
        "predicted_gain_pp": 100 * gain(predicted),
        "measured_gain_pp": 100 * gain(measured),
        "error_pp": abs(100 * (gain(predicted) - gain(measured))),
    }


def run_spec(spec: Spec, base: Path) -> dict:
    planted = run_one(spec, "planted", base)
    fixed = run_one(spec, "fixed", base)
    return compare(spec, planted, fixed)


def table(rows: list[dict]) -> str:
    lines = ["| scenario | planted cause | top finding | fixed twin high findings | predicted speedup | "
             "measured speedup | predicted gain | measured gain | error (pp) |",
             "|---|---|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        ok = "✓" if r["top"] == r["expected"] else "✗"
        lines.append(f"| {r['scenario']} | `{r['expected']}` | `{r['top']}` {ok} | {', '.join(r['fixed_high']) or 'none'} | "
                     f"{r['predicted_speedup']:.2f}× | {r['measured_speedup']:.2f}× | {r['predicted_gain_pp']:.1f}% | "
                     f"{r['measured_gain_pp']:.1f}% | {r['error_pp']:.1f} |")
    errs = [r["error_pp"] for r in rows]
    if errs:
        lines.append(f"\nmedian absolute error: **{statistics.median(errs):.1f} pp** over {len(errs)} scenarios "
                     f"(max {max(errs):.1f} pp)")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", action="append", help="run only this scenario (repeatable)")
    p.add_argument("--table", action="store_true", help="print a markdown table")
    p.add_argument("--out", type=Path, default=None, help="keep run directories here")
    args = p.parse_args(argv)
    base = args.out or Path(tempfile.mkdtemp(prefix="gpusleuth-scenarios-"))
    base.mkdir(parents=True, exist_ok=True)
    cuda = has_cuda()
    rows = []
    for spec in SPECS:
        if args.only and spec.name not in args.only:
            continue
        if spec.gpu and not cuda:
            print(f"skip {spec.name}: needs a CUDA GPU", file=sys.stderr)
            continue
        r = run_spec(spec, base)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr)
    if args.table:
        print(table(rows))
    return 0 if all(r["top"] == r["expected"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
