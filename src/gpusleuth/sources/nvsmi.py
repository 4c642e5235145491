"""``nvidia-smi --query-gpu=… --format=csv[,noheader][,nounits] [-l N | -lms N]`` logs → a GPU-only Run.

Every variant seen in the wild is read: header or ``noheader`` (fields inferred from value shapes where
that is unambiguous, or given with ``--fields``), units or ``nounits``, any field subset and order, with
or without ``index``/``uuid`` (GPU identity then is the row's position within one sampling burst),
several GPUs interleaved, ``[N/A]``/``[Not Supported]``/``N/A`` (null), ``-lms`` sub-second sampling,
text before the CSV (a pasted ``nvidia-smi`` table), header lines repeated by a shell loop, and
sampler gaps (kept as gaps, stated as losses). The body is parsed by pyarrow's CSV reader and converted
column-wise with pyarrow compute, so a day of 8 GPUs at 1 Hz reads in about a second.

Timestamps are local time without a zone: read in ``tz`` (an IANA name) or the importing machine's zone,
and the report says which.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from gpusleuth.errors import InputError
from gpusleuth.run.model import Run
from gpusleuth.sources.gpu_samples import build_gpu_run

#: query field (canonical or alias) → (gpu column, factor to the column's unit)
FIELD_COLUMNS: dict[str, tuple[str, float]] = {
    "utilization.gpu": ("util_gpu", 1.0),
    "utilization.memory": ("util_mem", 1.0),
    "memory.used": ("mem_used", 2.0**20),
    "memory.total": ("mem_total", 2.0**20),
    "power.draw": ("power_w", 1.0),
    "power.draw.average": ("power_w", 1.0),
    "power.draw.instant": ("power_instant_w", 1.0),
    "temperature.gpu": ("temp_c", 1.0),
    "clocks.sm": ("sm_clock_mhz", 1.0),
    "clocks.current.sm": ("sm_clock_mhz", 1.0),
    "clocks.mem": ("mem_clock_mhz", 1.0),
    "clocks.current.memory": ("mem_clock_mhz", 1.0),
    "clocks_event_reasons_counters.sw_power_cap": ("throttle_power_ns", 1e3),
    "clocks_event_reasons_counters.sw_thermal_slowdown": ("throttle_thermal_ns", 1e3),
    "clocks_event_reasons_counters.hw_thermal_slowdown": ("throttle_hw_thermal_ns", 1e3),
    "clocks_event_reasons_counters.hw_power_brake_slowdown": ("throttle_hw_power_brake_ns", 1e3),
    "clocks_event_reasons_counters.sync_boost": ("throttle_sync_boost_ns", 1e3),
}
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
ID_FIELDS = ("index", "uuid", "pci.bus_id")
#: per-device constants kept in meta (the report's hardware line, MFU peaks)
DEVICE_FIELDS = {"name": "name", "uuid": "uuid", "pci.bus_id": "pci_bus_id", "clocks.max.sm": "max_sm_clock_mhz",
                 "clocks.max.graphics": "max_graphics_clock_mhz", "memory.total": "mem_total_mib",
                 "power.limit": "power_limit_w", "driver_version": "driver_version"}
# value unit → factor to the column's unit, when a header (noheader) or value carries one
UNIT_FACTORS = {"MiB": 2.0**20, "GiB": 2.0**30, "KiB": 2.0**10, "us": 1e3, "ms": 1e6}

_HEADER_TOKEN = re.compile(r"^[a-zA-Z][a-zA-Z0-9_]*(\.[a-zA-Z0-9_]+)*( \[[^\]]*\])?$")
_TS = r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?"
_TS_RE = re.compile(_TS)
_NUM = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)\s*$")
_PCI_RE = re.compile(r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]")
_GPU_NAME_PREFIXES = ("NVIDIA ", "Tesla ", "Quadro ", "GeForce ", "TITAN ")
_MAX_HEADER_SCAN = 4 << 20
BURST_NS = 5_000_000  # rows of one sampling tick (one per GPU) are at most this far apart


def split_header(line: str) -> list[tuple[str, str | None]] | None:
    """``"timestamp, memory.used [MiB]"`` → ``[("timestamp", None), ("memory.used", "MiB")]``; None if the
    line is not a ``--query-gpu`` header (every cell a dotted field name, at least two of them)."""
    cells = [c.strip() for c in line.strip().split(",")]
    if len(cells) < 2 or not all(_HEADER_TOKEN.match(c) for c in cells):
        return None
    out = []
    for c in cells:
        name, _, unit = c.partition(" [")
        out.append((name.lower(), unit.rstrip("]") or None))
    known = sum(1 for n, _ in out if n in FIELD_COLUMNS or n in ID_FIELDS or n == "timestamp" or n in DEVICE_FIELDS)
    return out if known >= 2 else None


def find_header(text: str) -> tuple[int, int, list[tuple[str, str | None]]] | None:
    """(line number from 1, byte offset of the line, parsed header) of the first ``--query-gpu`` header."""
    offset = 0
    for lineno, line in enumerate(text.splitlines(keepends=True), 1):
        if "," in line and not line.startswith("#"):
            hdr = split_header(line)
            if hdr:
                return lineno, offset, hdr
        offset += len(line.encode())
    return None


def looks_like_noheader(text: str) -> bool:
    """Data rows with no header: a ``YYYY/MM/DD HH:MM:SS`` cell and ``NN %``/``NN MiB``-shaped cells."""
    rows = [ln for ln in text.splitlines()[:50] if ln.strip()]
    hits = sum(1 for ln in rows if _TS_RE.match(ln.strip()) and ln.count(",") >= 1)
    return bool(rows) and hits >= max(1, len(rows) // 2)


def read_nvsmi_csv(path: Path, fields: list[str] | None = None, tz: str | None = None) -> Run:
    data = path.read_bytes()
    losses: list[str] = []
    if data.startswith(b"\xef\xbb\xbf"):  # a BOM (Windows editors): not part of the first field
        data = data[3:]
    if data.endswith(b"\0"):
        # a log cut while being written (the machine or the logger killed): the file system leaves the
        # unwritten tail as NUL bytes — a held-out real 2-GPU log ends in 2,533 of them
        kept = data.rstrip(b"\0")
        losses.append(f"{path.name}: the file ends in {len(data) - len(kept):,} NUL bytes (cut off while being "
                      "written); the samples before them are kept")
        data = kept
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # pyarrow decodes a bad row's text for the invalid-row handler and fails inside it on non-UTF-8
        # bytes; replaced here, the row is skipped like any other damaged one and the loss said.
        data = data.decode("utf-8", errors="replace").encode("utf-8")
        losses.append(f"{path.name}: bytes that are not UTF-8 (first at byte {exc.start:,}) were replaced")
    head = data[:_MAX_HEADER_SCAN].decode("utf-8", errors="replace")
    found = find_header(head)
    if fields:
        hdr: list[tuple[str, str | None]] = [(f.strip().lower(), None) for f in fields]
        body_at, header_line = (found[1], found[0]) if found else (_first_data_offset(head), None)
        skip_first = found is not None
    elif found:
        header_line, body_at, hdr = found
        skip_first = True
    else:
        hdr = infer_fields(path, head)
        body_at, header_line, skip_first = _first_data_offset(head), None, False
        losses.append(f"{path.name}: no header line (noheader); fields inferred from the values: "
                      f"{', '.join(n for n, _ in hdr)} (give --fields to set them)")
    names = [f"c{i}" for i in range(len(hdr))]
    bad: list[int] = []

    def invalid(row: object) -> str:
        bad.append(getattr(row, "number", None) or -1)
        return "skip"

    try:
        tbl = pacsv.read_csv(
            pa.BufferReader(pa.py_buffer(data).slice(body_at)),  # zero-copy: a day of 8 GPUs is ~50 MB
            read_options=pacsv.ReadOptions(column_names=names, skip_rows=1 if skip_first else 0,
                                           block_size=8 << 20),
            parse_options=pacsv.ParseOptions(quote_char=False, invalid_row_handler=invalid),
            convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                                 strings_can_be_null=False),
        )
    except pa.ArrowInvalid as exc:
        raise InputError(path, f"not readable as nvidia-smi CSV ({exc})") from None
    col = {h[0]: tbl.column(i) for i, h in enumerate(hdr) if h[0] not in ("", None)}
    units = {h[0]: h[1] for h in hdr}
    if "timestamp" not in col:
        raise InputError(path, "this nvidia-smi CSV has no timestamp field: add `timestamp` to --query-gpu "
                               "(gpusleuth needs to know when each sample was taken)")
    ts_raw = pc.utf8_trim_whitespace(col["timestamp"])
    ok = pc.match_substring_regex(ts_raw, f"^{_TS}$")
    n_rows = len(ts_raw)
    ok_np = ok.to_numpy(zero_copy_only=False)
    not_rows = int((~ok_np).sum())
    if not_rows:
        header_repeats = int(pc.sum(pc.equal(ts_raw, "timestamp")).as_py() or 0)
        other = not_rows - header_repeats
        if other:
            first = _line_of(data, body_at, ts_raw.filter(pc.invert(ok))[0].as_py(), header_line)
            losses.append(f"{path.name}: {other:,} line(s) that are not samples were skipped "
                          f"(first at line {first}: no valid timestamp)")
    if bad:
        first_bad = (header_line or 0) + bad[0] if bad[0] > 0 else None
        losses.append(f"{path.name}: {len(bad):,} line(s) with a different number of fields than the header "
                      f"({len(hdr)}) were skipped" + (f" (first at line {first_bad})" if first_bad else ""))
    if not ok_np.any():
        raise InputError(path, "an nvidia-smi CSV header but no sample rows with a valid timestamp")
    keep = ok
    ts = ts_raw.filter(keep)
    t_ns, zone = _epoch_ns(ts, tz)
    out: dict[str, np.ndarray] = {"t_ns": t_ns}
    devices_raw: dict[str, np.ndarray] = {}
    for name, arr in col.items():
        arr = arr.filter(keep)
        if name in FIELD_COLUMNS:
            target, factor = FIELD_COLUMNS[name]
            if target in out and name == "power.draw.average":
                continue
            values, unit = _numbers(arr)
            factor = _factor(units.get(name) or unit, factor)
            out[target] = values * factor
        elif name in REASON_FIELDS:
            out["clock_event_reasons"] = _hex(arr)
        if name in ID_FIELDS or name in DEVICE_FIELDS:
            devices_raw[name] = pc.utf8_trim_whitespace(arr).to_numpy(zero_copy_only=False)
    out["gpu"] = _gpu_ids(out["t_ns"], devices_raw, losses, path)
    if "power_w" not in out and "power_instant_w" in out:
        out["power_w"] = out["power_instant_w"]
    devices = _devices(out["gpu"], devices_raw)
    losses.append(f"{path.name}: nvidia-smi timestamps carry no time zone; read as {zone}"
                  + ("" if tz else " (this machine's zone; give --tz to change)"))
    n_fields = sum(1 for n, _ in hdr if n in FIELD_COLUMNS or n in REASON_FIELDS)
    return build_gpu_run(path, out, source="nvidia-smi", devices=devices, losses=losses,
                         meta={"import_fields": [n for n, _ in hdr], "import_rows": int(n_rows),
                               "import_metric_fields": n_fields})


def _first_data_offset(head: str) -> int:
    offset = 0
    for line in head.splitlines(keepends=True):
        if _TS_RE.match(line.strip()):
            return offset
        offset += len(line.encode())
    return 0


def _line_of(data: bytes, body_at: int, text: str | None, header_line: int | None) -> int:
    """The 1-based line number of the first occurrence of ``text`` in the body (for a sentence)."""
    if not text:
        return (header_line or 0) + 1
    at = data.find(text.encode(), body_at)
    return data.count(b"\n", 0, at) + 1 if at >= 0 else (header_line or 0) + 1


def _numbers(arr: pa.ChunkedArray) -> tuple[np.ndarray, str | None]:
    """Cells like ``"87 %"``, ``"1234 MiB"``, ``"[N/A]"`` → float64 (NaN for anything not a number) and the
    unit the values carry (first non-empty)."""
    parts = pc.extract_regex(arr, r"^\s*(?P<v>-?\d+(?:\.\d+)?)\s*(?P<u>[A-Za-z%]*)\s*$")
    v = pc.struct_field(parts, "v")
    values = pc.cast(v, pa.float64()).to_numpy(zero_copy_only=False)
    units = pc.struct_field(parts, "u").drop_null()
    unit = None
    for u in units.chunks:
        nz = pc.filter(u, pc.not_equal(u, ""))
        if len(nz):
            unit = nz[0].as_py()
            break
    return np.asarray(values, dtype=np.float64), unit


def _factor(unit: str | None, default: float) -> float:
    """The header's (or values') unit wins over the field's usual one; %, W, MHz need no scaling."""
    if not unit or not unit.strip():
        return default
    return UNIT_FACTORS.get(unit.strip(), 1.0)


def _hex(arr: pa.ChunkedArray) -> np.ndarray:
    raw = pc.utf8_trim_whitespace(arr).to_numpy(zero_copy_only=False)
    uniq, inv = np.unique(raw.astype(str), return_inverse=True)
    conv = np.array([_parse_int(u) for u in uniq], dtype=np.float64)
    return conv[inv]


def _parse_int(s: str) -> float:
    try:
        return float(int(s, 16 if s.lower().startswith("0x") else 10))
    except ValueError:
        return np.nan


def _epoch_ns(ts: pa.ChunkedArray, tz: str | None) -> tuple[np.ndarray, str]:
    iso = pc.replace_substring(ts, "/", "-").cast(pa.timestamp("ns"))
    if tz:
        try:
            stamped = pc.assume_timezone(iso, tz, ambiguous="earliest", nonexistent="earliest")
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError) as exc:
            raise InputError(tz, f"unknown time zone for --tz ({exc})") from None
        return stamped.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64), tz
    naive = iso.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64)
    first = int(naive[0] // 1_000_000_000)
    offset = 60 * round((first - time.mktime(time.gmtime(first))) / 60)  # local UTC offset at the first sample
    zone = time.strftime("%Z", time.localtime(first - offset)) or "local time"
    return naive - int(offset) * 1_000_000_000, f"{zone} (UTC{offset / 3600:+g} h)"


def _gpu_ids(t_ns: np.ndarray, raw: dict[str, np.ndarray], losses: list[str], path: Path) -> np.ndarray:
    if "index" in raw:
        idx = np.array([_parse_int(x) for x in raw["index"]]) if raw["index"].dtype == object else raw["index"]
        idx = np.asarray(idx, dtype=np.float64)
        if np.isfinite(idx).all():
            return idx.astype(np.int32)
    for key in ("uuid", "pci.bus_id"):
        if key in raw:
            uniq, first = np.unique(raw[key].astype(str), return_index=True)
            rank = np.empty(len(uniq), np.int32)
            rank[np.argsort(first)] = np.arange(len(uniq), dtype=np.int32)
            _, inv = np.unique(raw[key].astype(str), return_inverse=True)
            return rank[inv]
    # No identity column: several GPUs of one loop iteration come as a burst of rows 0–2 ms apart
    # (their timestamps differ by the time nvidia-smi took to query each), ticks far apart.
    if len(t_ns) < 2:
        return np.zeros(len(t_ns), np.int32)
    dt = np.diff(t_ns)
    within = dt <= BURST_NS
    if within.mean() < 0.2 or not (dt > 10 * BURST_NS).any():
        return np.zeros(len(t_ns), np.int32)
    new = np.concatenate([[True], ~within])
    starts = np.flatnonzero(new)
    sizes = np.diff(np.append(starts, len(t_ns)))
    n_gpus = int(np.bincount(sizes).argmax())  # the usual burst: one row per GPU
    if n_gpus <= 1:
        return np.zeros(len(t_ns), np.int32)
    # nvidia-smi writes every GPU, in order, on each tick; a sampler stall can split one tick's rows (the
    # first GPU on time, the rest hundreds of ms later: a real 8-GPU log does this 95 times), so numbering
    # rows by their place in each burst would hand GPU 1's samples to GPU 0. Count rows in cycles of the
    # usual burst size instead, re-aligned at every complete burst (a dropped line costs one tick, not all).
    anchors = starts[sizes == n_gpus]
    rows = np.arange(len(t_ns))
    last = anchors[np.maximum(np.searchsorted(anchors, rows, side="right") - 1, 0)]
    pos = (rows - last) % n_gpus
    split = int((sizes != n_gpus).sum())
    losses.append(f"{path.name}: no index/uuid field; GPUs are numbered by their row's position in each "
                  f"sampling burst ({n_gpus} GPUs)"
                  + (f"; {split} burst(s) were split or short (a sampler stall), their rows counted on in "
                     "nvidia-smi's GPU order" if split else ""))
    return np.asarray(pos, dtype=np.int32)


def _devices(gpu: np.ndarray, raw: dict[str, np.ndarray]) -> dict[int, dict[str, Any]]:
    out: dict[int, dict[str, Any]] = {}
    for field, key in DEVICE_FIELDS.items():
        if field not in raw:
            continue
        vals = raw[field]
        for g in np.unique(gpu):
            sel = vals[gpu == g]
            v = next((x for x in sel if x and not x.startswith("[") and x != "N/A"), None)
            if v is None:
                continue
            if key.endswith(("_mhz", "_mib", "_w")):
                m = _NUM.match(v)
                if not m:
                    continue
                v = float(m.group(1))
            out.setdefault(int(g), {})[key] = v
    return out


# --- noheader: infer the fields from value shapes ------------------------------------------------

def _matched(m: re.Match[str] | None) -> re.Match[str]:
    """A match the caller knows happened (every cell of a unit column matched); AttributeError as before."""
    if m is None:
        raise AttributeError("'NoneType' object has no attribute 'group'")
    return m


def infer_fields(path: Path, head: str) -> list[tuple[str, str | None]]:
    """Name the columns of a ``noheader`` log from its values where that is unambiguous.

    ``YYYY/MM/DD …`` is the timestamp; ``0000:3B:00.0`` the PCI bus id (the GPU's identity); ``NVIDIA …`` the
    name; ``W`` is power; two ``MiB`` columns are used and total (total is
    the constant, larger one); ``%`` columns in nvidia-smi's usual query order are utilization.gpu then
    utilization.memory; a ``MHz`` column is the SM clock. With ``nounits`` the shapes are gone: unless the
    values say it (a timestamp and nothing else) the user must give ``--fields``.
    """
    rows = [ln for ln in head.splitlines() if _TS_RE.match(ln.strip())][:200]
    if not rows:
        raise InputError(path, "not an nvidia-smi --query-gpu log (no header line and no timestamped rows)")
    cells = [[c.strip() for c in r.split(",")] for r in rows]
    width = max(set(len(c) for c in cells), key=[len(c) for c in cells].count)
    cells = [c for c in cells if len(c) == width]
    fields: list[str | None] = [None] * width
    unit_cols: dict[str, list[int]] = {}
    for i in range(width):
        col = [c[i] for c in cells]
        if all(_TS_RE.fullmatch(x) for x in col):
            fields[i] = "timestamp"
            continue
        if col and all(x.startswith("GPU-") for x in col):
            fields[i] = "uuid"
            continue
        if col and all(_PCI_RE.fullmatch(x) for x in col):
            fields[i] = "pci.bus_id"  # a GPU's identity: better than its row's place in a burst
            continue
        if col and all(x.startswith(_GPU_NAME_PREFIXES) for x in col):
            fields[i] = "name"
            continue
        units = {(m.group(2) if (m := _NUM.match(x)) else "?") for x in col if not x.startswith("[")}
        if len(units) == 1:
            unit_cols.setdefault(units.pop(), []).append(i)
    for unit, name in (("W", "power.draw"), ("MHz", "clocks.sm")):
        if len(unit_cols.get(unit, [])) == 1:
            fields[unit_cols[unit][0]] = name
    pct = unit_cols.get("%", [])
    if 1 <= len(pct) <= 2:
        for i, name in zip(pct, ("utilization.gpu", "utilization.memory")):
            fields[i] = name
    mib = unit_cols.get("MiB", [])
    if len(mib) == 2:
        const = [len({c[i] for c in cells}) == 1 for i in mib]
        vals = [max(float(_matched(_NUM.match(c[i])).group(1)) for c in cells) for i in mib]
        total = mib[0] if const[0] and not const[1] else mib[1] if const[1] and not const[0] else \
            mib[int(np.argmax(vals))]
        fields[total] = "memory.total"
        fields[mib[0] if total == mib[1] else mib[1]] = "memory.used"
    elif len(mib) == 1:
        fields[mib[0]] = "memory.used"
    if "timestamp" not in fields or sum(f is not None for f in fields) < 2:
        raise InputError(path, "a header-less nvidia-smi log whose fields cannot be told from the values (nounits?); "
                               "give the --query-gpu list with --fields timestamp,index,utilization.gpu,…")
    return [(f or "", None) for f in fields]
