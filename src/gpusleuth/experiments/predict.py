"""Prediction check: put what an earlier report predicted next to what the sweep measured.

A report's finding says "this fix is worth ×S" (e.g. an input-bound finding: ×1.9 with ``num_workers=3``).
When a sweep varies the knob that fix turns, we compare: predicted speedup (the finding's) versus measured
speedup (the configuration that applies the fix, or the best one if none matches exactly, over the baseline).
The baseline is ``--baseline RUN_DIR`` when given, else the sweep's first configuration — the user's setting.
A prediction that misses tells the user, and us, that the model behind it is wrong for this job.
"""

from __future__ import annotations

import math
import re
import statistics
from pathlib import Path
from typing import NamedTuple

from gpusleuth.analysis.noise import load_band, load_statement, repeats_floor
from gpusleuth.experiments.measure import FindingDigest, Measurement
from gpusleuth.experiments.stats import Band
from gpusleuth.experiments.sweep_result import ConfigResult, PredictionCheck, SweepResult

# Which swept parameters test which diagnosed cause.
CAUSE_KNOBS = {
    "input.preprocessing": ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers"),
    "input.io": ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers"),
    "batch.too_small": ("batch_size", "batch", "bs"),
    "precision": ("autocast", "tf32"),
}
HELD = 0.2  # a prediction "held" when measured is within ±20 % of predicted (or of the noise band, if wider)


def fix_setting(fix: str, names: tuple[str, ...]) -> dict[str, str]:
    """``num_workers=3`` and friends, as written in a finding's fix."""
    out: dict[str, str] = {}
    for name in names:
        m = re.search(rf"\b{name}\s*=\s*([A-Za-z0-9_.]+)", fix or "")
        if m:
            out[name] = m.group(1)
    return out


def _norm(v: str) -> str:
    low = str(v).strip().lower()
    return {"true": "1", "false": "0"}.get(low, low)


def check_predictions(sweep: SweepResult, baseline_dir: Path | None, warmup: int) -> list[PredictionCheck]:
    swept = {n for n, _ in sweep.params}
    base = _baseline(sweep, baseline_dir, warmup)
    if base is None or not base.findings or not base.throughput:
        return []
    checks = []
    for f in base.findings:
        knobs = CAUSE_KNOBS.get(f["cause"], ())
        tested = [k for k in knobs if k in swept]
        pred = f["speedup"]
        if not tested or not pred:
            continue
        want = fix_setting(f["fix"], tuple(tested))
        candidates = [(c, c.throughput) for c in sweep.configs if c.throughput is not None]
        exact = [(c, tp) for c, tp in candidates
                 if want and all(_norm(c.config.get(k, "")) == _norm(v) for k, v in want.items())]
        best = max(exact or candidates, key=lambda ct: ct[1].median, default=None)
        pick = best[0] if best else None
        measured = best[1].median / base.throughput if best else None
        band, load_note = _band(base, pick, best[1] if best else None)
        checks.append(PredictionCheck(
            cause=f["cause"], baseline=base.label, predicted_speedup=float(pred), predicted_setting=want,
            measured_config=pick.label if pick else None, measured_speedup=measured, exact=bool(exact),
            verdict=_say(float(pred), measured, bool(exact), want, band, load_note), band=band, load_note=load_note,
        ))
    return checks


def _band(base: _Baseline, pick: ConfigResult | None, pick_tp: Band | None) -> tuple[float | None, str | None]:
    """(± relative change the baseline-vs-configuration ratio can resolve, the load sentence or None)."""
    if pick is None:
        return None, None
    widths = [w for w in (base.band, pick_tp.rel_halfwidth if pick_tp else None) if w is not None]
    band = math.hypot(*widths) if widths else None
    got = [m.cpu_attained for m in pick.measurements if m.cpu_attained is not None]
    base_attained = base.measurement.cpu_attained
    if base_attained is None or not got:
        return band, None
    mine = float(statistics.median(got))
    load = load_band((base_attained, mine))
    if not load:
        return band, None
    # the load's share stays out of the band (a ±100 % band would make any prediction "hold"): the verdict
    # names the load instead, and judges only a match
    return band, load_statement((base.label, pick.label), (base_attained, mine), load)


def _say(pred: float, measured: float | None, exact: bool, want: dict[str, str], band: float | None = None,
         load_note: str | None = None) -> str:
    """The verdict, judged only where the measurement can separate it: a predicted gain smaller than the noise
    band, or a miss inside it, is said as such — not "under-predicted ×1.57" beside "no significant
    difference (±20 %)" (issue 27)."""
    if measured is None:
        return "not measured: no configuration produced a throughput"
    where = "" if exact else (f" (the sweep did not run {', '.join(f'{k}={v}' for k, v in want.items())}; "
                              "compared with its best configuration)" if want else " (compared with the best configuration)")
    why = f" ({load_note})" if load_note else ""
    if band is not None and abs(pred - 1) <= band:
        return (f"not checkable here: the predicted ×{pred:.2f} is inside the noise these runs can resolve "
                f"(±{band:.0%}); measured ×{measured:.2f}{where}{why}. Repeat the runs (--repeat) on a quiet host "
                "to check it")
    ratio = measured / pred if pred else float("inf")
    if load_note:  # the runs differ by more than the fix: only a match is informative
        if abs(ratio - 1) <= HELD:
            return f"prediction held: measured ×{measured:.2f} vs predicted ×{pred:.2f} (within ±{HELD:.0%}){where}{why}"
        return (f"not checkable here: measured ×{measured:.2f} vs predicted ×{pred:.2f}, but the baseline and the "
                f"configuration ran under different host load{where}{why}; measure both on one quiet host")
    tol = max(HELD, band or 0.0)
    if abs(ratio - 1) <= tol:
        return f"prediction held: measured ×{measured:.2f} vs predicted ×{pred:.2f} (within ±{tol:.0%}){where}{why}"
    if ratio < 1:
        return (f"over-predicted: measured ×{measured:.2f} is {1 - ratio:.0%} below the predicted ×{pred:.2f} "
                f"(beyond ±{tol:.0%}){where}{why}")
    return (f"under-predicted: measured ×{measured:.2f} is {ratio - 1:.0%} above the predicted ×{pred:.2f} "
            f"(beyond ±{tol:.0%}){where}{why}")


class _Baseline(NamedTuple):
    label: str
    findings: list[FindingDigest]
    throughput: float | None
    measurement: Measurement
    band: float | None  # its ± relative band


def _baseline(sweep: SweepResult, baseline_dir: Path | None, warmup: int) -> _Baseline | None:
    """The baseline (its label, findings, throughput, Measurement and ± band): the given run (one run: the
    run-to-run floor), else the first configuration (its repeats' band); None when the first produced none."""
    if baseline_dir is not None:
        from gpusleuth.experiments.measure import measure_dir

        m = measure_dir(Path(baseline_dir), warmup=warmup)
        tp = m.samples_per_s if sweep.configs and sweep.configs[0].unit == "samples/s" else m.steps_per_s
        return _Baseline(f"baseline run {baseline_dir}", m.findings, tp, m, repeats_floor(1))
    first = sweep.configs[0] if sweep.configs else None
    if first is None or not first.measurements or first.throughput is None:
        return None
    m = first.measurements[0]
    return _Baseline(f"first configuration ({first.label})", m.findings, first.throughput.median, m,
                     first.throughput.rel_halfwidth)
