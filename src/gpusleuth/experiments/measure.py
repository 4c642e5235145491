"""What one configuration of a sweep measured, read from its run directory.

Throughput and step times are taken over the *steady state*: the first ``warmup`` steps (worker start-up,
allocator warm-up, cudnn autotuning, the first optimizer step creating its state) are excluded, because a
short bounded run would otherwise be judged on its start-up. Everything else comes from the same run
directory and Report that ``gpusleuth report`` uses, so a sweep row and a report of that run agree.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from gpusleuth.run.model import Run


@dataclass
class Measurement:
    steps: int = 0  # measured steps (after warm-up)
    warmup_steps: int = 0
    samples_per_s: float | None = None
    steps_per_s: float | None = None
    samples_per_step: float | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    data_wait_share: float | None = None  # exposed data wait ÷ step time, measured steps
    gpu_util_mean: float | None = None
    cpu_cores_busy: float | None = None  # whole host, mean, in cores
    main_cpu_pct: float | None = None  # the training process, % of one core
    peak_mem_bytes: float | None = None
    peak_mem_source: str | None = None  # "GPU memory used" | "RSS of the job's processes"
    energy_j_per_1k: float | None = None
    cost_per_1k: float | None = None
    knobs_applied: dict = field(default_factory=dict)
    knob_notes: list[str] = field(default_factory=list)
    findings: list[dict] = field(default_factory=list)  # cause, severity, speedup, fix (for the prediction check)
    dataloaders: list[dict] = field(default_factory=list)
    note: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def main_steps(run: Run, warmup: int) -> tuple[dict[str, np.ndarray], int]:
    """The training process's steps after warm-up (as columns), and how many were skipped."""
    s = run.steps
    if not len(s):
        return {}, 0
    pids, counts = np.unique(s["pid"], return_counts=True)
    pid = pids[np.argmax(counts)]
    sel = s["pid"] == pid
    cols = {k: np.asarray(s[k])[sel] for k in ("start_ns", "end_ns", "data_wait_ns", "samples")}
    order = np.argsort(cols["start_ns"], kind="stable")
    cols = {k: v[order] for k, v in cols.items()}
    n = len(cols["start_ns"])
    skip = min(warmup, max(n - 2, 0))  # keep at least two steps to measure
    return {k: v[skip:] for k, v in cols.items()}, skip


def measure_run(run: Run, warmup: int = 2, price_per_hour: float | None = None) -> Measurement:
    m = Measurement()
    cols, m.warmup_steps = main_steps(run, warmup)
    if cols and len(cols["start_ns"]):
        start, end = cols["start_ns"], cols["end_ns"]
        dur = (end - start) / 1e9
        span = (int(end[-1]) - int(start[0])) / 1e9
        m.steps = len(dur)
        m.step_p50_s = float(np.percentile(dur, 50))
        m.step_p95_s = float(np.percentile(dur, 95))
        if span > 0:
            m.steps_per_s = m.steps / span
            samples = cols["samples"]
            if (samples >= 0).all():
                m.samples_per_step = float(samples.mean())
                m.samples_per_s = float(samples.sum()) / span
        total = float(dur.sum())
        if total > 0:
            m.data_wait_share = float(cols["data_wait_ns"].sum() / 1e9 / total)
        window = (int(start[0]), int(end[-1]))
        _energy(run, window, m)
        if price_per_hour is not None:
            rate = m.samples_per_s or None
            if rate:
                m.cost_per_1k = price_per_hour / 3600.0 / rate * 1000.0
    else:
        m.note = "no training steps were recorded (not a PyTorch optimizer loop, or it ended before one step)"
    _knobs(run, m)
    m.dataloaders = [i for i in run.infos if i.get("kind") == "dataloader"]
    _from_report(run, m)
    return m


def _energy(run: Run, window: tuple[int, int], m: Measurement) -> None:
    g = run.gpu
    if not len(g) or "energy_j" not in g:
        return
    total = 0.0
    for dev in np.unique(g["gpu"]):
        sel = g["gpu"] == dev
        t, e = np.asarray(g["t_ns"][sel], dtype=np.float64), np.asarray(g["energy_j"][sel], dtype=np.float64)
        ok = ~np.isnan(e)
        if ok.sum() < 2:
            return
        total += float(np.interp(window[1], t[ok], e[ok]) - np.interp(window[0], t[ok], e[ok]))
    if m.samples_per_s and window[1] > window[0]:
        samples = m.samples_per_s * (window[1] - window[0]) / 1e9
        m.energy_j_per_1k = total / samples * 1000.0 if samples else None


def _knobs(run: Run, m: Measurement) -> None:
    """Which requested knobs the job really applied — a knob that never reached a DataLoader is said so."""
    requested: dict = {}
    for info in run.infos:
        if info.get("kind") != "knob":
            continue
        ev = info.get("event")
        if ev == "requested":
            requested.update(info.get("knobs") or {})
        elif ev == "applied":
            m.knobs_applied.update(info.get("set") or {})
            for name, why in (info.get("skipped") or {}).items():
                m.knob_notes.append(f"{name} not applied in {info.get('where')}: {why}")
        elif ev == "stopped":
            pass
    for name in requested:
        if name in ("max_steps", "accum") or name in m.knobs_applied:
            continue
        if not any(n.startswith(name + " ") for n in m.knob_notes):
            m.knob_notes.append(f"{name} was requested but the job never applied it (no DataLoader / model call seen)")
    for info in run.infos:
        if info.get("kind") == "hook_error" and str(info.get("where", "")).startswith("knob"):
            m.knob_notes.append(f"knob error in {info.get('where')}: {info.get('error')}")


def _from_report(run: Run, m: Measurement) -> None:
    """GPU, CPU, memory and findings from the run's Report; a report failure costs only these columns."""
    try:
        from gpusleuth.report.build import build_report

        rep = build_report(run)
    except Exception as exc:  # noqa: BLE001 - the sweep must survive a report bug
        m.note = (m.note + "; " if m.note else "") + f"report failed: {type(exc).__name__}: {exc}"
        return
    utils = [g.util_gpu["mean"] for g in rep.gpus if g.util_gpu]
    if utils:
        m.gpu_util_mean = float(np.mean(utils))
    mems = [g.mem_used_max_bytes for g in rep.gpus if g.mem_used_max_bytes is not None]
    if mems:
        m.peak_mem_bytes, m.peak_mem_source = float(sum(mems)), "GPU memory used"
    host = rep.host
    if host is not None:
        if host.cpu_pct and host.logical_cores:
            m.cpu_cores_busy = host.cpu_pct["mean"] * host.logical_cores / 100.0
        m.main_cpu_pct = getattr(host, "main_cpu_pct_mean", None)
    if m.peak_mem_bytes is None:
        peak = _tree_rss_peak(run)
        if peak is not None:
            m.peak_mem_bytes, m.peak_mem_source = peak, "RSS of the job's processes"
    for f in rep.findings:
        g = f.estimated_gain
        m.findings.append({"cause": f.cause, "severity": f.severity, "title": f.title,
                           "speedup": g.speedup if g else None, "fix": f.fix,
                           "method": g.method if g else None})


def _tree_rss_peak(run: Run) -> float | None:
    p = run.procs
    if not len(p) or "rss_bytes" not in p:
        return None
    t = np.asarray(p["t_ns"])
    rss = np.nan_to_num(np.asarray(p["rss_bytes"], dtype=np.float64))
    uniq, inv = np.unique(t, return_inverse=True)
    sums = np.bincount(inv, weights=rss, minlength=len(uniq))
    return float(sums.max()) if len(sums) else None


def measure_dir(path: Path, warmup: int = 2, price_per_hour: float | None = None) -> Measurement:
    from gpusleuth.run.loader import load_run

    return measure_run(load_run(path), warmup=warmup, price_per_hour=price_per_hour)
