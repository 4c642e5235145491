"""Display-ready data for charts: the run's time series on one clock, downsampled, plus trace histograms.

Why here and not in the HTML renderer: renderers only format (docs/architecture.md). Choosing what to
plot, turning cumulative counters into rates, finding throttled stretches and reducing an hours-long
10 Hz recording to a size a browser draws smoothly are computations, so they happen once, in the analysis
(``analyze(run, display=True)`` → ``RunAnalysis.display``), where the Run's tables still are. The result is plain lists (no numpy) that any renderer — the HTML page today, a notebook widget
later — can draw.

Downsampling keeps each bucket's minimum *and* maximum (in time order), so a 100 ms dip to zero
utilization in a two-hour run is still visible on the chart; exact numbers stay in the report's tables.
"""

from __future__ import annotations

from typing import Literal

from dataclasses import dataclass, field

import numpy as np

from gpusleuth.analysis.host_telemetry import cores_by_process
from gpusleuth.analysis.telemetry import throttle_sources
from gpusleuth.analysis.steps import StepView
from gpusleuth.analysis.trace import TraceAnalysis
from gpusleuth.analysis.trace.gaps import GapHistogram
from gpusleuth.run.model import Run, Table

MAX_POINTS = 2000  # per series, after downsampling (≈ what a browser redraws smoothly on zoom)
HEATMAP_COLUMNS = 800  # time buckets of the per-core CPU heatmap
MAX_BANDS = 300  # throttle stretches drawn; closer ones are merged beyond that
MAX_WORKER_LINES = 8  # more DataLoader workers than this are drawn as their sum
GPU_METRICS = [  # column, label — utilization first, then the metrics that show real work
    ("util_gpu", "util"), ("util_mem", "mem util"), ("sm_active", "SM active"),
    ("sm_occupancy", "SM occupancy"), ("tensor_active", "tensor active"), ("dram_active", "DRAM active"),
]
PANEL_ORDER = ["gpu_util", "gpu_power", "gpu_clocks", "gpu_mem", "steps", "procs", "cpu", "cores", "io"]


@dataclass
class Panel:
    key: str
    title: str
    unit: str


#: how a series is drawn (plotly's scatter modes): lines, markers (steps), or both
SeriesMode = Literal["lines", "markers", "lines+markers"]


@dataclass
class ChartSeries:
    panel: str
    name: str
    t: list[float | None]  # seconds since DisplayData.t0_ns
    y: list[float | None]
    points: int  # samples before downsampling
    mode: SeriesMode = "lines"  # markers: steps


@dataclass
class Heatmap:
    panel: str
    name: str
    t: list[float | None]  # bucket centres, s
    rows: list[str]
    z: list[list[float | None]]  # z[row][bucket]: mean of the bucket
    points: int


@dataclass
class ChartBand:
    kind: Literal["phase", "throttle"]  # a phase spans every panel, throttling is marked on the clocks panel
    label: str
    start_s: float
    end_s: float


@dataclass
class DisplayData:
    t0_ns: int | None = None
    duration_s: float | None = None
    panels: list[Panel] = field(default_factory=list)
    series: list[ChartSeries] = field(default_factory=list)
    heatmaps: list[Heatmap] = field(default_factory=list)
    bands: list[ChartBand] = field(default_factory=list)
    gap_histograms: list[GapHistogram] = field(default_factory=list)
    max_points: int = MAX_POINTS


# --- downsampling ----------------------------------------------------------------------------------

def minmax_downsample(t: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most ``max_points`` points that keep every bucket's extremes, in time order.

    Equal-count buckets (samples are near-uniform in time); each bucket contributes its min and its max
    at the times they occurred. All-NaN buckets stay NaN so a chart shows the hole.
    """
    t = np.asarray(t, np.float64)
    y = np.asarray(y, np.float64)
    n = len(y)
    if n <= max_points:
        return t, y
    buckets = max(1, max_points // 2)
    k = -(-n // buckets)  # ceil
    pad = buckets * k - n
    yy = np.concatenate([y, np.full(pad, np.nan)]).reshape(buckets, k)
    tt = np.concatenate([t, np.full(pad, t[-1])]).reshape(buckets, k)
    nan = np.isnan(yy)
    i_min = np.where(nan, np.inf, yy).argmin(axis=1)
    i_max = np.where(nan, -np.inf, yy).argmax(axis=1)
    rows = np.arange(buckets)
    first = np.minimum(i_min, i_max)
    second = np.maximum(i_min, i_max)
    empty = nan.all(axis=1)
    t_out = np.stack([tt[rows, first], tt[rows, second]], axis=1).ravel()
    y_out = np.stack([yy[rows, first], yy[rows, second]], axis=1).ravel()
    y_out[np.repeat(empty, 2)] = np.nan
    return t_out, y_out


def _bucket_mean(t: np.ndarray, m: np.ndarray, columns: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean per time bucket of each row of ``m`` (rows × samples), NaN-aware: ``columns`` equal time buckets
    from the first sample to the last, each at its centre; a bucket with no sample is NaN at its own time.
    Buckets of equal *count* padded to a multiple of ``columns`` gave the padding buckets no time at all: the
    heatmap of a 92 s run (920 samples, 800 columns of 2) ended at 53 s, its last 340 columns at null."""
    n = m.shape[1]
    if n <= columns:
        return t, m
    finite = np.isfinite(t)
    if not finite.any():
        return t, m
    lo, hi = float(np.min(t[finite])), float(np.max(t[finite]))
    if hi <= lo:
        return t, m
    edges = np.linspace(lo, hi, columns + 1)
    idx = np.clip(np.searchsorted(edges, np.where(finite, t, lo), side="right") - 1, 0, columns - 1)
    idx = np.where(finite, idx, -1)
    rows = m.shape[0]
    sums = np.zeros((rows, columns))
    counts = np.zeros((rows, columns))
    keep = idx >= 0
    ok = np.isfinite(m) & keep[None, :]
    for r in range(rows):
        sums[r] = np.bincount(idx[ok[r]], weights=m[r][ok[r]], minlength=columns)
        counts[r] = np.bincount(idx[ok[r]], minlength=columns)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return (edges[:-1] + edges[1:]) / 2, mean


def _plain(a: np.ndarray, digits: int = 4) -> list[float | None]:
    """JSON-ready list: rounded, NaN/inf → None (no NaN in JSON)."""
    a = np.round(np.asarray(a, np.float64), digits)
    return [float(v) if np.isfinite(v) else None for v in a.tolist()]


# --- building ----------------------------------------------------------------------------------------

class _Builder:
    def __init__(self, t0_ns: int, max_points: int):
        self.d = DisplayData(t0_ns=t0_ns, max_points=max_points)
        self.t0 = t0_ns
        self._panels: dict[str, Panel] = {}

    def secs(self, t_ns: np.ndarray) -> np.ndarray:
        return (np.asarray(t_ns, np.int64) - self.t0) / 1e9

    def panel(self, key: str, title: str, unit: str) -> None:
        if key not in self._panels:
            self._panels[key] = Panel(key, title, unit)
            self.d.panels.append(self._panels[key])

    def line(self, panel: str, name: str, t_ns: np.ndarray, y: np.ndarray, mode: SeriesMode = "lines") -> None:
        y = np.asarray(y, np.float64)
        if not len(y) or not np.isfinite(y).any():
            return
        t, yy = minmax_downsample(self.secs(t_ns), y, self.d.max_points)
        self.d.series.append(ChartSeries(panel, name, _plain(t, 3), _plain(yy), len(y), mode))


def _col(table: Table, name: str) -> np.ndarray:
    return table[name].astype(np.float64) if name in table else np.full(len(table), np.nan)


def _advanced(counter: np.ndarray) -> np.ndarray:
    """Rows where a cumulative counter moved since its previous reading, every row in between included: a
    counter the sampler reads once a second (a field NVML times as slow) is null between its readings, and a
    rise says the clocks were held down somewhere in that second, not at the reading alone."""
    v = np.asarray(counter, dtype=np.float64)
    idx = np.flatnonzero(np.isfinite(v))
    mark = np.zeros(len(v) + 1, np.int64)
    if len(idx) >= 2:
        moved = np.diff(v[idx]) > 0
        np.add.at(mark, idx[:-1][moved] + 1, 1)
        np.add.at(mark, idx[1:][moved] + 1, -1)
    return np.cumsum(mark)[:-1] > 0


def _rate(t_ns: np.ndarray, counter: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-second rate of a cumulative counter between consecutive samples; resets give NaN."""
    if len(counter) < 2:
        return np.empty(0, np.int64), np.empty(0)
    dt = np.diff(t_ns) / 1e9
    dv = np.diff(counter)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where((dt > 0) & (dv >= 0), dv / dt, np.nan)
    return t_ns[1:], r


def _intervals(t_ns: np.ndarray, on: np.ndarray) -> list[tuple[int, int]]:
    """Stretches where ``on`` holds, from the sample before the first true one to the last true one."""
    if not on.any():
        return []
    edges = np.diff(np.r_[0, on.astype(np.int8), 0])
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1) - 1
    return [(int(t_ns[max(int(s) - 1, 0)]), int(t_ns[int(e)])) for s, e in zip(starts, ends)]


def _merge_close(iv: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
    """Fewer than ``limit`` bands: merge neighbours separated by less than a growing gap."""
    if len(iv) <= limit:
        return iv
    s = np.array([a for a, _ in iv], np.int64)
    e = np.array([b for _, b in iv], np.int64)
    gaps = np.sort(s[1:] - e[:-1])
    cut = gaps[len(iv) - limit]  # merging gaps up to this leaves about ``limit`` bands
    keep = np.r_[True, (s[1:] - e[:-1]) > cut]
    grp = np.cumsum(keep) - 1
    out_e = np.zeros(grp[-1] + 1, np.int64)
    np.maximum.at(out_e, grp, e)
    return list(zip(s[keep].tolist(), out_e.tolist()))


def _gpu(b: _Builder, run: Run) -> None:
    gpu = run.gpu
    if not len(gpu):
        return
    hw = (run.meta.get("recorder") or {}).get("gpu") or []
    several = len(np.unique(gpu["gpu"])) > 1
    for index in np.unique(gpu["gpu"]).astype(int):
        g = gpu.filter(gpu["gpu"] == index).sort_by("t_ns")
        t = g["t_ns"].astype(np.int64)
        tag = f"GPU{index} " if several else ""
        b.panel("gpu_util", "GPU utilization and real activity", "%")
        for column, label in GPU_METRICS:
            b.line("gpu_util", tag + label, t, _col(g, column))
        b.panel("gpu_power", "GPU power", "W")
        b.line("gpu_power", tag + "power", t, _col(g, "power_w"))
        b.panel("gpu_clocks", "GPU clocks (throttled stretches marked)", "MHz")
        b.line("gpu_clocks", tag + "SM clock", t, _col(g, "sm_clock_mhz"))
        b.line("gpu_clocks", tag + "memory clock", t, _col(g, "mem_clock_mhz"))
        mem = _col(g, "mem_used")
        if np.isfinite(mem).any():
            b.panel("gpu_mem", "GPU memory used", "GiB")
            b.line("gpu_mem", tag + "memory used", t, mem / 2**30)
        # throttled: per reason, its clock-event counter advanced since the previous sample, or its reason bit
        # set — read from where the summary reads it (telemetry.throttle_sources: one decision for both)
        on = np.zeros(len(g), bool)
        reasons: dict[str, np.ndarray] = {}
        counters, reason_bits = throttle_sources(g)
        for label, column in counters.items():
            hit = _advanced(_col(g, column))
            if hit.any():
                reasons[label] = hit
        if reason_bits:
            bits = np.nan_to_num(_col(g, "clock_event_reasons")).astype(np.int64)
            for label, bit in reason_bits.items():
                hit = (bits & bit) != 0
                if hit.any():
                    reasons[label] = hit
        for hit in reasons.values():
            on |= hit
        name = f"{tag}throttled ({', '.join(reasons)})".strip()
        for s, e in _merge_close(_intervals(t, on), MAX_BANDS):
            b.d.bands.append(ChartBand("throttle", name, (s - b.t0) / 1e9, (e - b.t0) / 1e9))
        _ = hw  # hardware names are in the report's GPU table


def _per_core(run: Run) -> np.ndarray | None:
    """cores × samples matrix from the host table's list column (rows of unequal length padded)."""
    if "cpu_per_core" not in run.host:
        return None
    col = run.host["cpu_per_core"]
    width = max((len(v) for v in col if v is not None), default=0)
    if not width:
        return None
    m = np.full((len(col), width), np.nan)
    for i, v in enumerate(col):  # one row per sample (≈10 Hz), not per event
        if v is not None and len(v):
            m[i, : len(v)] = np.asarray(v, np.float64)
    return m.T


def _host(b: _Builder, run: Run, roles: dict[int, str]) -> None:
    host = run.host.sort_by("t_ns") if len(run.host) else run.host
    if len(host):
        t = host["t_ns"].astype(np.int64)
        b.panel("cpu", "Host CPU", "%")
        b.line("cpu", "all cores", t, _col(host, "cpu_pct"))
        b.line("cpu", "iowait", t, _col(host, "iowait_pct"))
        m = _per_core(run)
        if m is not None:
            tt, mm = _bucket_mean(b.secs(t), m, HEATMAP_COLUMNS)
            b.panel("cores", "CPU per core (mean per time bucket)", "%")
            b.d.heatmaps.append(Heatmap("cores", "per-core CPU", _plain(tt, 3), [f"cpu{i}" for i in range(len(mm))],
                                        [_plain(row, 1) for row in mm], m.shape[1]))
        any_io = False
        for column, label in (("disk_read_bytes", "disk read"), ("disk_write_bytes", "disk write"),
                              ("net_rx_bytes", "net receive"), ("net_tx_bytes", "net send")):
            if column in host:
                tr, r = _rate(t, _col(host, column))
                if len(r) and np.isfinite(r).any():
                    b.panel("io", "I/O", "MB/s")
                    b.line("io", label, tr, r / 1e6)
                    any_io = True
        _ = any_io
    procs = run.procs
    if len(procs) and "cpu_pct" in procs:
        pids = procs["pid"].astype(np.int64)
        workers = sorted(p for p in np.unique(pids).tolist() if roles.get(p) == "dataloader_worker")
        mains = [p for p in np.unique(pids).tolist() if roles.get(p) == "main"]
        if mains or workers:
            b.panel("procs", "Training process and DataLoader workers", "% of a core")
        for p in mains:
            sel = procs.filter(pids == p).sort_by("t_ns")
            b.line("procs", f"training process (pid {p})" if len(mains) > 1 else "training process",
                   sel["t_ns"], _col(sel, "cpu_pct"))
        if 0 < len(workers) <= MAX_WORKER_LINES:
            for p in workers:
                sel = procs.filter(pids == p).sort_by("t_ns")
                b.line("procs", f"loader worker {p}", sel["t_ns"], _col(sel, "cpu_pct"))
        elif workers:
            together = cores_by_process(procs, None, workers)
            if together is not None:
                b.line("procs", f"{len(workers)} loader workers (sum)", together.times, together.per_time * 100)


def _steps(b: _Builder, view: StepView | None) -> None:
    if view is None or view.main is None or not view.main.count:
        return
    steps = view.main.table
    b.panel("steps", "Step time and data wait", "ms")
    end = steps["end_ns"].astype(np.int64)
    b.line("steps", "step time", end, (end - steps["start_ns"]) / 1e6, mode="lines+markers")
    b.line("steps", "data wait", end, np.maximum(steps["data_wait_ns"], 0) / 1e6, mode="lines+markers")


def _phases(b: _Builder, run: Run) -> None:
    ph = run.phases
    for i in np.argsort(ph["start_ns"], kind="stable") if len(ph) else []:
        b.d.bands.append(ChartBand("phase", str(ph["name"][i]), (int(ph["start_ns"][i]) - b.t0) / 1e9,
                              (int(ph["end_ns"][i]) - b.t0) / 1e9))


def build_display(run: Run | None, ranks: list[TraceAnalysis], view: StepView | None, roles: dict[int, str],
                  max_points: int = MAX_POINTS) -> DisplayData:
    """Everything the charts need, for a recorded run (``run``) and/or trace analyses (``ranks``);
    ``roles``: each process's role (``host_telemetry.assign_roles``, computed once by ``analyze``)."""
    if run is not None and run.start_ns is not None:
        b = _Builder(int(run.start_ns), max_points)
        b.d.duration_s = run.wall_s
        _steps(b, view)
        _gpu(b, run)
        _host(b, run, roles)
        _phases(b, run)
        d = b.d
        # top to bottom: what the device did, what the job saw, then the host that fed it
        d.panels.sort(key=lambda p: PANEL_ORDER.index(p.key) if p.key in PANEL_ORDER else len(PANEL_ORDER))
    else:
        d = DisplayData(max_points=max_points)
    # each rank's idle-gap histogram, as its trace analysis computed it (analysis/trace/gaps.py)
    d.gap_histograms += [a.gap_histogram for a in ranks if a.gap_histogram is not None]
    return d
