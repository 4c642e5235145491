"""The workload table of BENCHMARKS.md: each job in workloads/ run under ``gpusleuth run`` on CPU, its own
timing (the GPUSLEUTH_TRUTH line) next to what gpusleuth measured, and the findings it raised.

Usage: PYTHONPATH=src python benchmarks/workloads_table.py [--repeat N]   (prints a Markdown table)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workloads"))
from _truth import parse  # noqa: E402

from gpusleuth.pipeline.build import build_report  # noqa: E402
from gpusleuth.sources.rundir import load_run  # noqa: E402

JOBS = [
    ("Lightning Trainer (step(closure))", "lightning_job.py", ["--steps", "60"]),
    ("HF Trainer, tiny GPT-2, eval + safetensors saves", "hf_trainer.py", ["--steps", "40"]),
    ("memmap get_batch LM, no DataLoader, 20 ms reads", "memmap_lm.py", ["--steps", "30", "--read-delay-ms", "20"]),
    ("memmap get_batch LM, local reads (control)", "memmap_lm.py", ["--steps", "20", "--batch", "64"]),
    ("hand-updated RNN, eval + test after the loop", "rnn_lm.py", []),
    ("grad accumulation ×4 + GradScaler", "accum_scaler.py", []),
    ("torch.compile (inductor, CPU)", "compiled.py", []),
]


def pct(got, want):
    if got is None or not want:
        return "–"
    return f"{(got / want - 1) * 100:+.0f} %"


def one(name, args, tmp):
    out = Path(tmp) / (name + str(len(list(Path(tmp).iterdir()))))
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--no-report", "--out", str(out),
                          "--", sys.executable, str(ROOT / "workloads" / name), *args],
                         capture_output=True, text=True, timeout=600)
    truth = parse(res.stderr + res.stdout)
    run = load_run(out)
    rep = build_report(run)
    st = run.steps
    pids, counts = np.unique(st["pid"], return_counts=True)
    st = st.filter(st["pid"] == pids[np.argmax(counts)])
    ph = run.phases
    dur = (ph["end_ns"] - ph["start_ns"]) / 1e9 if len(ph) else np.array([])
    last = int(st["end_ns"].max())
    g = {
        "steps": len(st),
        "optimizer": st["optimizer_ns"].sum() / 1e9,
        "input": (st["data_wait_ns"][st["wait_source"] == "pre_forward"].mean() / 1e9
                  if (st["wait_source"] == "pre_forward").any() else None),
        "eval": float(dur[ph["name"] == "eval"].sum()) if len(ph) else 0.0,
        "checkpoint": float(dur[ph["name"] == "checkpoint"].sum()) if len(ph) else 0.0,
        "after": float(dur[ph["start_ns"] >= last].sum()) if len(ph) else 0.0,
    }
    findings = "; ".join(f"{f.severity.upper()} {f.cause} ×{f.estimated_gain.speedup:.2f}"
                         for f in rep.findings if f.cause != "healthy") or "none"
    return truth, g, findings


def prediction_check(repeat: int) -> None:
    """The HIGH input.io finding on the no-DataLoader LM: its predicted speedup, then the fix applied
    (get_batch in 4 DataLoader workers) and measured as the loop time ratio, interleaved repeats, medians."""
    args = ["--steps", "40", "--read-delay-ms", "20"]
    with tempfile.TemporaryDirectory() as tmp:
        _, _, findings = one("memmap_lm.py", args, tmp)
    plain, fixed = [], []
    for _ in range(repeat):
        for workers, into in (("0", plain), ("4", fixed)):
            res = subprocess.run([sys.executable, str(ROOT / "workloads" / "memmap_lm.py"), *args,
                                  "--workers", workers], capture_output=True, text=True, timeout=600)
            t = parse(res.stderr)
            into.append((t["step_s_p50"], t["loop_s"]))
    steady = float(np.median([p[0] for p in plain])) / float(np.median([f[0] for f in fixed]))
    loop = float(np.median([p[1] for p in plain])) / float(np.median([f[1] for f in fixed]))
    # The prediction is about the steady step (what throughput becomes); the whole loop also pays the four
    # workers' one-off start-up (fork, first prefetch), which a 40-step loop cannot amortize.
    print(f"\nprediction check (memmap LM, 20 ms reads): gpusleuth said {findings}; fix applied "
          f"(--workers 4): steady step ×{steady:.2f} (median step p50 {np.median([p[0] for p in plain]) * 1e3:.1f} → "
          f"{np.median([f[0] for f in fixed]) * 1e3:.1f} ms); whole loop incl. worker start-up ×{loop:.2f} "
          f"({repeat} interleaved repeats)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repeats of the prediction check")
    ap.add_argument("--prediction-only", action="store_true", help="only the prediction check")
    a = ap.parse_args()
    if a.prediction_only:
        prediction_check(a.repeat)
        return
    print("| workload | steps truth / gpusleuth | optimizer s truth / gpusleuth | input wait per step | "
          "eval / checkpoint / after-loop s (truth → gpusleuth) | findings |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for label, name, args in JOBS:
            t, g, findings = one(name, args, tmp)
            s = t["sums_s"]
            opt = f"{s.get('optimizer', 0):.3f} / {g['optimizer']:.3f} ({pct(g['optimizer'], s.get('optimizer'))})"
            inp = "–"
            if "input" in s and g["input"] is not None:
                want = s["input"] / t["counts"]["input"]
                inp = f"{want * 1e3:.1f} / {g['input'] * 1e3:.1f} ms ({pct(g['input'], want)})"
            ev = s.get("evaluate", s.get("validation", s.get("validation_in_loop")))
            if "validation_in_loop" in s:
                g["eval"] -= g["after"]  # compare the in-loop validations with the in-loop eval phases
            phases = []
            if ev is not None:
                phases.append(f"eval {ev:.3f} → {g['eval']:.3f}")
            if "save" in s:
                phases.append(f"ckpt {s['save']:.3f} → {g['checkpoint']:.3f}")
            if "after_training" in s:
                phases.append(f"after-loop {s['after_training']:.3f} → {g['after']:.3f}")
            print(f"| {label} | {t['steps']} / {g['steps']} | {opt} | {inp} | {'; '.join(phases) or '–'} | "
                  f"{findings} |", flush=True)
    prediction_check(a.repeat)


if __name__ == "__main__":
    main()
