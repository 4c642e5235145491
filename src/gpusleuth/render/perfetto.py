"""Annotated trace: the user's own trace, plus tracks that label every idle gap by cause and every step's
exposed-time partition — for Perfetto UI (ui.perfetto.dev) and chrome://tracing.

What is drawn comes from the trace analysis (``TraceAnalysis.segments``: the painted partition, and its
idle gaps); this module only formats it as Trace Event Format events.

The original file is kept byte for byte: we stream its text (decompressed by the trace reader's own
``sources.kineto.decompress.text_blocks``, handed in by the CLI, so every compression the reader reads can be
annotated, and this renderer opens no file), find the opening ``[`` of ``traceEvents``, insert
our events right after it and copy everything else unchanged (so every field a viewer or another tool
understands — flows, counters, args, metadata, ``baseTimeNanoseconds`` — still means what it meant).
Timestamps are written in the file's own units and clock (µs; relative to ``baseTimeNanoseconds`` when
the trace has one; ns for the rare writer that used ns), as exact decimal text, never through a float.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping

if TYPE_CHECKING:
    from gpusleuth.analysis.trace import TraceAnalysis

TRACK_PROCESS = "gpusleuth: why the GPU waited"
TRACKS = {  # tid -> thread (track) name
    1: "idle gaps (dominant cause)",
    2: "exposed-time partition (every instant)",
    3: "steps: exposed-time summary",
}


@dataclass
class AnnotateResult:
    path: Path
    events_added: int
    gaps: int
    segments: int
    steps: int


def _labels() -> dict[str, str]:
    from gpusleuth.render.labels import CATEGORY_LABELS as _LABELS

    return _LABELS


class _Clock:
    """Trace-relative ns (the analysis clock) → the file's timestamp text."""

    def __init__(self, meta: Mapping[str, Any], origin_ns: int):
        base = int(meta.get("baseTimeNanoseconds") or 0)
        self.zero = int(origin_ns) - base  # ns on the file's clock at analysis time 0
        self.ns_units = bool(meta.get("ts_scaled_from_ns"))

    def ts(self, rel_ns: int) -> str:
        t = self.zero + int(rel_ns)
        if self.ns_units:
            return str(t)
        sign, t = ("-", -t) if t < 0 else ("", t)
        return f"{sign}{t // 1000}.{t % 1000:03d}"

    def dur(self, ns: int) -> str:
        ns = max(int(ns), 0)
        return str(ns) if self.ns_units else f"{ns // 1000}.{ns % 1000:03d}"


def _pick_pid(pids: Iterable[Any]) -> int:
    """A numeric pid no event of the trace uses (Kineto uses process ids and small device ids)."""
    nums = [int(p) for p in pids if isinstance(p, int) or (isinstance(p, str) and p.isdigit())]
    return max(nums, default=0) + 1


def annotation_events(analysis: TraceAnalysis, meta: Mapping[str, Any], pids: Iterable[Any]) -> tuple[list[str], dict[str, int]]:
    """Our events as JSON text, one per element, in the file's units (``meta``: the trace file's own
    metadata — its clock base and units; ``pids``: the process ids its events use)."""
    from gpusleuth.analysis.trace import ALL_CATS

    seg = analysis.segments
    if seg is None:
        raise ValueError("the trace analysis has no segments (built without them)")
    if analysis.origin_ns is None:
        raise ValueError("the trace analysis has no clock origin")
    labels = _labels()
    clock = _Clock(meta, analysis.origin_ns)
    pid = _pick_pid(pids)
    out: list[str] = []
    named: list[tuple[str, int, dict[str, Any]]] = [("process_name", 0, {"name": TRACK_PROCESS}),
                                                    ("process_sort_index", 0, {"sort_index": -100})]
    for tid, track in TRACKS.items():
        named += [("thread_name", tid, {"name": track}), ("thread_sort_index", tid, {"sort_index": tid})]
    for what, tid, values in named:
        out.append(json.dumps({"ph": "M", "name": what, "pid": pid, "tid": tid, "ts": 0, "args": values}))

    def x(tid: int, name: str, cat: str, start: int, end: int, args: dict[str, Any]) -> str:
        return (f'{{"ph":"X","cat":{json.dumps(cat)},"name":{json.dumps(name)},"pid":{pid},"tid":{tid},'
                f'"ts":{clock.ts(start)},"dur":{clock.dur(end - start)},"args":{json.dumps(args)}}}')

    gaps = seg.idle_gaps()
    for s, e, c in zip(gaps.start.tolist(), gaps.end.tolist(), gaps.cause.tolist()):
        cat = ALL_CATS[c]
        out.append(x(1, labels.get(cat, cat), "gpusleuth.idle_gap", s, e,
                     {"cause": cat, "gap_us": round((e - s) / 1e3, 3)}))
    for s, e, c in zip(seg.start.tolist(), seg.end.tolist(), seg.cat.tolist()):
        cat = ALL_CATS[c]
        out.append(x(2, labels.get(cat, cat), "gpusleuth.partition", s, e, {"category": cat}))
    steps = analysis.steps
    lo = int(seg.start[0]) if len(seg) else 0
    for st in steps:
        start = lo + round(st.start_s * 1e9)
        end = start + round(st.duration_s * 1e9)
        part = st.partition
        idle = sum(v for k, v in part.items() if k.startswith("idle_"))
        worst = max(((k, v) for k, v in part.items() if k.startswith("idle_")), key=lambda kv: kv[1], default=None)
        name = f"step {st.step}: idle {idle / st.duration_s:.0%}" if st.duration_s else f"step {st.step}"
        if worst and worst[1] > 0:
            name += f" (most: {labels.get(worst[0], worst[0])})"
        args = {f"{k} (ms)": round(v * 1e3, 6) for k, v in sorted(part.items(), key=lambda kv: -kv[1])}
        args["step time (ms)"] = round(st.duration_s * 1e3, 6)
        out.append(x(3, name, "gpusleuth.step", start, end, args))
    return out, {"gaps": len(gaps), "segments": len(seg), "steps": len(steps)}


def _find_array_start(src: Iterator[bytes]) -> tuple[bytes, int, bool]:
    """Read until the ``[`` that opens ``traceEvents`` (or a top-level array) is found.

    Returns (bytes read so far, index of that ``[``, whether the array is empty). Keys before
    ``traceEvents`` are skipped as whole JSON values, so a string that merely contains "traceEvents"
    cannot fool it. The bytes are parsed as Latin-1 text: one character per byte, so offsets are byte
    offsets, and JSON's structure (quotes, brackets, backslashes) is ASCII, which UTF-8 never reuses.
    """
    buf = b""
    text = ""
    dec = json.JSONDecoder()

    def more() -> bool:
        nonlocal buf, text
        chunk = next(src, b"")
        buf += chunk
        text = buf.decode("latin-1")
        return bool(chunk)

    def ws(i: int) -> int:
        while True:
            while i < len(text) and text[i] in " \t\r\n":
                i += 1
            if i < len(text) or not more():
                return i

    def value(i: int) -> tuple[Any, int]:
        while True:
            try:
                return dec.raw_decode(text, i)
            except ValueError:
                if not more():
                    raise ValueError("the file ends before its traceEvents array") from None

    more()
    if buf.startswith(b"\xef\xbb\xbf"):
        raise ValueError("a UTF-8 byte-order mark precedes the JSON")
    i = ws(0)
    if text[i:i + 1] == "[":
        pos = i
    elif text[i:i + 1] != "{":
        raise ValueError("not a JSON object or array")
    else:
        i += 1
        while True:
            i = ws(i)
            if text[i:i + 1] != '"':
                raise ValueError("no traceEvents array")
            key, i = value(i)
            i = ws(i)
            if text[i:i + 1] != ":":
                raise ValueError("malformed JSON object")
            i = ws(i + 1)
            if key == "traceEvents":
                if text[i:i + 1] != "[":
                    raise ValueError("traceEvents is not an array")
                pos = i
                break
            _, i = value(i)
            i = ws(i)
            if text[i:i + 1] == ",":
                i += 1
    n = ws(pos + 1)
    return buf, pos, text[n:n + 1] == "]"


def write_annotated(text: Iterable[bytes], analysis: TraceAnalysis, meta: Mapping[str, Any], pids: Iterable[Any],
                    out: Path) -> AnnotateResult:
    """Copy a trace's text (``text``: its decompressed blocks) to ``out`` with our tracks inserted (gzip if
    ``out`` ends in .gz). A text that is not a trace raises ``ValueError`` saying why; ``out`` is written
    through a temporary file, so a failure leaves nothing half-written."""
    events, counts = annotation_events(analysis, meta, pids)
    src = iter(text)
    head, pos, empty = _find_array_start(src)
    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    try:
        sink = gzip.open(tmp, "wb", compresslevel=6) if out.name.endswith(".gz") else open(tmp, "wb")
        with sink:
            sink.write(head[: pos + 1])
            sink.write(b"\n" + ",\n".join(events).encode("utf-8") + (b"\n" if empty else b",\n"))
            sink.write(head[pos + 1:])
            for chunk in src:  # a damaged compressed tail ends the blocks: what was readable is kept
                sink.write(chunk)
        tmp.replace(out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return AnnotateResult(out, len(events), counts["gaps"], counts["segments"], counts["steps"])
