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
from dataclasses import dataclass
from pathlib import Path

from gpusleuth.analysis.noise import load_band, load_statement, repeats_floor

# Which swept parameters test which diagnosed cause.
CAUSE_KNOBS = {
    "input.preprocessing": ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers"),
    "input.io": ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers"),
    "batch.too_small": ("batch_size", "batch", "bs"),
    "precision": ("autocast", "tf32"),
}
HELD = 0.2  # a prediction "held" when measured is within ±20 % of predicted (or of the noise band, if wider)


@dataclass
class PredictionCheck:
    cause: str
    baseline: str  # where the prediction and the baseline throughput came from
    predicted_speedup: float
    predicted_setting: dict[str, str]  # what the finding's fix asked for (parsed from its text)
    measured_config: str | None
    measured_speedup: float | None
    exact: bool  # the measured configuration is the predicted setting
    verdict: str
    # ± relative change the measurement can resolve: the repeats' band (or the one-run floor) of the baseline
    # and the picked configuration, widened by what a difference in host load between them explains
    band: float | None = None
    load_note: str | None = None  # the baseline was recorded under other host load: how much

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def fix_setting(fix: str, names: tuple[str, ...]) -> dict[str, str]:
    """``num_workers=3`` and friends, as written in a finding's fix."""
    out = {}
    for name in names:
        m = re.search(rf"\b{name}\s*=\s*([A-Za-z0-9_.]+)", fix or "")
        if m:
            out[name] = m.group(1)
    return out


def _norm(v: str) -> str:
    low = str(v).strip().lower()
    return {"true": "1", "false": "0"}.get(low, low)


def check_predictions(sweep, baseline_dir: Path | None, warmup: int) -> list[PredictionCheck]:
    swept = {n for n, _ in sweep.params}
    base_label, findings, base_tp, base_m, base_band = _baseline(sweep, baseline_dir, warmup)
    if not findings or not base_tp:
        return []
    checks = []
    for f in findings:
        knobs = CAUSE_KNOBS.get(f.get("cause"), ())
        tested = [k for k in knobs if k in swept]
        if not tested or not f.get("speedup"):
            continue
        want = fix_setting(f.get("fix", ""), tuple(tested))
        candidates = [c for c in sweep.configs if c.throughput is not None]
        exact = [c for c in candidates if want and all(_norm(c.config.get(k, "")) == _norm(v) for k, v in want.items())]
        pick = max(exact or candidates, key=lambda c: c.throughput.median, default=None)
        measured = pick.throughput.median / base_tp if pick else None
        pred = float(f["speedup"])
        band, load_note = _band(base_label, base_m, base_band, pick)
        checks.append(PredictionCheck(
            cause=f["cause"], baseline=base_label, predicted_speedup=pred, predicted_setting=want,
            measured_config=pick.label if pick else None, measured_speedup=measured, exact=bool(exact),
            verdict=_say(pred, measured, bool(exact), want, band, load_note), band=band, load_note=load_note,
        ))
    return checks


def _band(base_label: str, base_m, base_band: float | None, pick) -> tuple[float | None, str | None]:
    """(± relative change the baseline-vs-configuration ratio can resolve, the load sentence or None)."""
    if pick is None:
        return None, None
    widths = [w for w in (base_band, pick.throughput.rel_halfwidth if pick.throughput else None) if w is not None]
    band = math.hypot(*widths) if widths else None
    ms = [a.measurement for a in pick.ok_attempts]
    got = [m.cpu_attained for m in ms if m.cpu_attained is not None]
    if base_m is None or base_m.cpu_attained is None or not got:
        return band, None
    mine = float(statistics.median(got))
    load = load_band((base_m.cpu_attained, mine))
    if not load:
        return band, None
    # the load's share stays out of the band (a ±100 % band would make any prediction "hold"): the verdict
    # names the load instead, and judges only a match
    return band, load_statement((base_label, pick.label), (base_m.cpu_attained, mine), load)


def _say(pred: float, measured: float | None, exact: bool, want: dict, band: float | None = None,
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


def _baseline(sweep, baseline_dir: Path | None, warmup: int):
    """(label, findings, throughput, its Measurement, its ± band) of the baseline: the given run (one run: the
    run-to-run floor), else the first configuration (its repeats' band)."""
    if baseline_dir is not None:
        from gpusleuth.experiments.measure import measure_dir

        m = measure_dir(Path(baseline_dir), warmup=warmup)
        tp = m.samples_per_s if sweep.configs and sweep.configs[0].unit == "samples/s" else m.steps_per_s
        return f"baseline run {baseline_dir}", m.findings, tp, m, repeats_floor(1)
    first = sweep.configs[0] if sweep.configs else None
    if first is None or not first.ok_attempts or first.throughput is None:
        return None, [], None, None, None
    m = first.ok_attempts[0].measurement
    return (f"first configuration ({first.label})", m.findings, first.throughput.median, m,
            first.throughput.rel_halfwidth)
