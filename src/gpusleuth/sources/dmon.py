"""``nvidia-smi dmon`` logs (any ``-s`` selection, with or without ``-o DT``) → a GPU-only Run.

Columns are read by the ``# gpu …`` header, never by position (their order changed between drivers);
``-`` (MIG parents, unsupported fields) is null. Without ``-o T``/``-o DT`` dmon prints no time: the
samples are then placed ``interval`` seconds apart (dmon's ``-d``, default 1 s) from ``start`` (default:
the file's modification time minus the capture's length), and the report says so.
Rates become the recorder's cumulative counters (PCIe MB/s → bytes; ``pviol``/``tviol`` % → throttle ns),
so the telemetry analysis differences them exactly as it does NVML's own counters.
"""

from __future__ import annotations

import io
import re
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpusleuth.errors import InputError
from gpusleuth.run.model import Run
from gpusleuth.sources.gpu_samples import build_gpu_run

# dmon header name → (gpu column, factor)
GAUGES = {"pwr": ("power_w", 1.0), "gtemp": ("temp_c", 1.0), "sm": ("util_gpu", 1.0), "mem": ("util_mem", 1.0),
          "mclk": ("mem_clock_mhz", 1.0), "pclk": ("sm_clock_mhz", 1.0), "fb": ("mem_used", 2.0**20)}
# per-second rates integrated into cumulative counters: name → (column, factor of value·s)
RATES = {"rxpci": ("pcie_rx_bytes", 1e6), "txpci": ("pcie_tx_bytes", 1e6),
         "pviol": ("throttle_power_ns", 1e7), "tviol": ("throttle_thermal_ns", 1e7)}


def is_dmon(text: str) -> bool:
    lines = [ln for ln in text.splitlines()[:400] if ln.startswith("#")]
    return any(re.match(r"#\s*(Date\s+Time\s+)?gpu\s", ln) and "pid" not in ln for ln in lines) and \
        any(re.match(r"#\s*(\S+\s+\S+\s+)?Idx\b", ln) for ln in lines)


def is_pmon(text: str) -> bool:
    return any(re.match(r"#\s*(Date\s+Time\s+)?gpu\s+pid\s", ln) for ln in text.splitlines()[:400])


def read_dmon(path: Path, start_ns: int | None = None, interval_s: float = 1.0) -> Run:
    # a BOM and CRLF line ends (a log saved on Windows) are layout, not content
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n")
    text = data.decode("utf-8", errors="replace")
    header = None
    for line in text.splitlines():
        m = re.match(r"#\s*(.*)", line)
        if m and re.match(r"(#?Date\s+Time\s+)?gpu\b", m.group(1).lstrip("#")) and "Idx" not in line:
            header = [h.lstrip("#").lower() for h in m.group(1).split()]
            break
    if not header or "gpu" not in header:
        raise InputError(path, "not an nvidia-smi dmon log (no `# gpu …` header line)")
    # one space between cells, no leading/trailing blanks, comment lines dropped: then a CSV reader can do it
    body = re.sub(rb"(?m)^#.*\n?", b"", data)
    body = re.sub(rb"[ \t]+", b" ", body)
    body = re.sub(rb"(?m)^ | $", b"", body)
    # bytes that are not UTF-8 (a damaged log) made pyarrow fail while building the bad row's text for the
    # handler below, and Python print that failure as a traceback (fuzz: 'Exception ignored in … invalid')
    body = body.decode("utf-8", "replace").encode()
    bad: list[int] = []

    def invalid(row: object) -> str:
        bad.append(1)
        return "skip"

    names = [f"c{i}" for i in range(len(header))]
    try:
        tbl = pacsv.read_csv(io.BytesIO(body), read_options=pacsv.ReadOptions(column_names=names),
                             parse_options=pacsv.ParseOptions(delimiter=" ", quote_char=False,
                                                              invalid_row_handler=invalid),
                             convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names}))
    except pa.ArrowInvalid as exc:
        raise InputError(path, f"not readable as an nvidia-smi dmon log ({exc})") from None
    losses: list[str] = []
    if bad:
        losses.append(f"{path.name}: {len(bad):,} line(s) that do not match the dmon header were skipped "
                      "(a cut-off line or a message such as 'dmon was stopped')")
    cols = {h: tbl.column(i) for i, h in enumerate(header)}
    gpu = _num(cols["gpu"])
    ok = np.isfinite(gpu)
    if not ok.any():
        raise InputError(path, "an nvidia-smi dmon header but no sample rows")
    gpu = gpu[ok].astype(np.int32)
    out: dict[str, np.ndarray] = {"gpu": gpu}
    if "date" in cols and "time" in cols:
        stamp = pc.binary_join_element_wise(cols["date"], cols["time"], " ").filter(pa.array(ok))
        t = pc.strptime(stamp, format="%Y%m%d %H:%M:%S", unit="ns", error_is_null=True)
        t_ns = t.cast(pa.int64()).to_numpy(zero_copy_only=False)
        t_ns = np.asarray(t_ns, dtype=np.float64)
        losses.append(f"{path.name}: dmon prints local time without a zone at 1 s resolution; read as UTC")
        keep = np.isfinite(t_ns)
        out["t_ns"] = t_ns.astype(np.int64)
    elif "time" in cols:
        raise InputError(path, "a dmon log with -o T (time without date): re-run with -o DT, or give --start")
    else:
        # the k-th row of each GPU is the k-th tick
        tick = np.zeros(len(gpu), np.int64)
        for g in np.unique(gpu):
            sel = gpu == g
            tick[sel] = np.arange(sel.sum())
        n_ticks = int(tick.max()) + 1
        if start_ns is None:
            start_ns = int(path.stat().st_mtime * 1e9) - int(n_ticks * interval_s * 1e9)
            when = "the file's modification time minus its length"
        else:
            when = "--start"
        out["t_ns"] = start_ns + (tick * interval_s * 1e9).astype(np.int64)
        losses.append(f"{path.name}: dmon printed no timestamps (no -o DT); samples placed {interval_s:g} s apart "
                      f"(--interval) from {datetime.fromtimestamp(start_ns / 1e9, timezone.utc):%Y-%m-%d %H:%M:%S} UTC "
                      f"({when})")
        keep = np.ones(len(gpu), bool)
    for name, arr in cols.items():
        if name in GAUGES:
            column, factor = GAUGES[name]
            out[column] = _num(arr)[ok] * factor
    for name, (column, factor) in RATES.items():
        if name in cols:
            rate = np.nan_to_num(_num(cols[name])[ok])
            counter = np.zeros(len(gpu))
            for g in np.unique(gpu):
                sel = np.flatnonzero(gpu == g)
                dt = np.diff(out["t_ns"][sel], prepend=out["t_ns"][sel][0]) / 1e9
                counter[sel] = np.cumsum(rate[sel] * dt * factor)
            out[column] = counter
    if not keep.all():
        out = {k: v[keep] for k, v in out.items()}
    return build_gpu_run(path, out, source="nvidia-smi-dmon", devices={}, losses=losses,
                         meta={"import_fields": header})


def _num(arr: pa.Array) -> np.ndarray:
    """Cells → float64; ``-`` and anything else not a number → NaN."""
    s = pc.if_else(pc.match_substring_regex(arr, r"^-?\d+(\.\d+)?$"), arr, pa.scalar(None, pa.string()))
    return np.asarray(pc.cast(s, pa.float64()).to_numpy(zero_copy_only=False), dtype=np.float64)
