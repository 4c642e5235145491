"""Prediction check: put what an earlier report predicted next to what the sweep measured.

A report's finding says "this fix is worth ×S" (e.g. an input-bound finding: ×1.9 with ``num_workers=3``).
When a sweep varies the knob that fix turns, we compare: predicted speedup (the finding's) versus measured
speedup (the configuration that applies the fix, or the best one if none matches exactly, over the baseline).
The baseline is ``--baseline RUN_DIR`` when given, else the sweep's first configuration — the user's setting.
A prediction that misses tells the user, and us, that the model behind it is wrong for this job.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

# Which swept parameters test which diagnosed cause.
CAUSE_KNOBS = {
    "input.preprocessing": ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers"),
    "input.io": ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers"),
    "batch.too_small": ("batch_size", "batch", "bs"),
    "precision": ("autocast", "tf32"),
}
HELD = 0.2  # a prediction "held" when measured is within ±20 % of predicted


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
    base_label, findings, base_tp = _baseline(sweep, baseline_dir, warmup)
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
        checks.append(PredictionCheck(
            cause=f["cause"], baseline=base_label, predicted_speedup=pred, predicted_setting=want,
            measured_config=pick.label if pick else None, measured_speedup=measured, exact=bool(exact),
            verdict=_say(pred, measured, bool(exact), want),
        ))
    return checks


def _say(pred: float, measured: float | None, exact: bool, want: dict) -> str:
    if measured is None:
        return "not measured: no configuration produced a throughput"
    ratio = measured / pred if pred else float("inf")
    where = "" if exact else (f" (the sweep did not run {', '.join(f'{k}={v}' for k, v in want.items())}; "
                              "compared with its best configuration)" if want else " (compared with the best configuration)")
    if abs(ratio - 1) <= HELD:
        return f"prediction held: measured ×{measured:.2f} vs predicted ×{pred:.2f}{where}"
    if ratio < 1:
        return f"over-predicted: measured ×{measured:.2f} is {1 - ratio:.0%} below the predicted ×{pred:.2f}{where}"
    return f"under-predicted: measured ×{measured:.2f} is {ratio - 1:.0%} above the predicted ×{pred:.2f}{where}"


def _baseline(sweep, baseline_dir: Path | None, warmup: int):
    """(label, findings, throughput) of the baseline: the given run, else the first configuration."""
    if baseline_dir is not None:
        from gpusleuth.experiments.measure import measure_dir

        m = measure_dir(Path(baseline_dir), warmup=warmup)
        tp = m.samples_per_s if sweep.configs and sweep.configs[0].unit == "samples/s" else m.steps_per_s
        return f"baseline run {baseline_dir}", m.findings, tp
    first = sweep.configs[0] if sweep.configs else None
    if first is None or not first.ok_attempts or first.throughput is None:
        return None, [], None
    return f"first configuration ({first.label})", first.ok_attempts[0].measurement.findings, first.throughput.median
