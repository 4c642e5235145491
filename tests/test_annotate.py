"""``gpusleuth report TRACE --annotate OUT``: the user's trace, byte for byte, plus our tracks — checked
against the Trace Event Format, against the analysis numbers, and by re-reading it with our own loader."""

from __future__ import annotations

import gzip
import json

import pytest

from conftest import TRACES, gpusleuth

DF = TRACES / "df_index_resolver" / "df_index_resolver.json.gz"
NS = TRACES / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
MI250 = TRACES / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
NO_STEPS = TRACES / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"

META_NAMES = {"process_name", "process_labels", "process_sort_index", "thread_name", "thread_sort_index"}


def _text(path) -> bytes:
    raw = path.read_bytes()
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def validate_tef(events: list) -> None:
    """What viewers require of each event, by phase (Trace Event Format, as Perfetto/catapult read it)."""
    for ev in events:
        assert isinstance(ev, dict) and isinstance(ev.get("ph"), str), ev
        ph = ev["ph"]
        assert "pid" in ev and "tid" in ev, ev
        if ph == "X":
            assert isinstance(ev["name"], str)
            assert isinstance(ev["ts"], (int, float)) and isinstance(ev["dur"], (int, float)) and ev["dur"] >= 0, ev
        elif ph == "M":
            assert ev["name"] in META_NAMES and isinstance(ev.get("args"), dict), ev
        elif ph in ("B", "E", "i", "I", "C", "s", "t", "f"):
            assert isinstance(ev["ts"], (int, float)), ev


def annotate(path, out):
    res = gpusleuth("report", path, "--annotate", out)
    assert res.returncode == 0, res.stderr
    assert f"annotated trace written to {out}" in res.stderr
    return res


@pytest.mark.parametrize("trace", [DF, NS, MI250, NO_STEPS], ids=["df", "ns", "mi250", "nosteps"])
@pytest.mark.process
def test_annotated_trace_is_valid_faithful_and_matches_the_analysis(trace, tmp_path):
    from gpusleuth.analysis.trace import ALL_CATS, IDLE_CATS

    out = tmp_path / "annotated.json.gz"
    annotate(trace, out)
    original = _text(trace)
    text = gzip.decompress(out.read_bytes())  # gzip is valid
    doc = json.loads(text)  # and so is the JSON
    events = doc["traceEvents"]
    ours = [e for e in events if str(e.get("cat", "")).startswith("gpusleuth") or
            (e.get("ph") == "M" and e.get("pid") == events[0]["pid"])]
    n = len(ours)
    # byte-faithful: our block (one event per line) sits right after the '[' of traceEvents; cutting it
    # out gives the original file exactly
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    pos = start + 1
    for _ in range(n):
        pos = text.index(b"\n", pos) + 1
    assert text[:start] + text[pos:] == original, "original bytes altered"
    validate_tef(ours)
    pid = ours[0]["pid"]
    assert pid not in {e.get("pid") for e in events[n:]}  # a process of its own
    names = {(e["name"], e["tid"]): e["args"] for e in ours if e["ph"] == "M"}
    assert names[("process_name", 0)]["name"] == "gpusleuth: why the GPU waited"
    assert {names[("thread_name", t)]["name"] for t in (1, 2, 3)} == {
        "idle gaps (dominant cause)", "exposed-time partition (every instant)", "steps: exposed-time summary"}
    # our tracks carry exactly the analysis' numbers
    rep = json.loads(gpusleuth("report", trace, "--json").stdout)["ranks"][0]
    scale = 1e-9 if _ns_units(doc) else 1e-6
    by_cat: dict[str, float] = {}
    for e in ours:
        if e.get("cat") == "gpusleuth.partition":
            by_cat[e["args"]["category"]] = by_cat.get(e["args"]["category"], 0.0) + e["dur"] * scale
    for c in ALL_CATS:
        assert by_cat.get(c, 0.0) == pytest.approx(rep["trace_partition"].get(c, 0.0), abs=1e-6), c
    gaps = [e for e in ours if e.get("cat") == "gpusleuth.idle_gap"]
    idle_total = sum(v for k, v in rep["trace_partition"].items() if k in IDLE_CATS)
    assert sum(g["dur"] for g in gaps) * scale == pytest.approx(idle_total, abs=1e-6)
    assert len([e for e in ours if e.get("cat") == "gpusleuth.step"]) == len(rep["steps"])
    # timestamps are on the file's own clock: our spans lie within the original events' range
    orig_ts = [e["ts"] for e in events[n:] if e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))]
    assert min(orig_ts) - 1 <= min(g["ts"] for g in gaps) and max(g["ts"] for g in gaps) <= max(orig_ts) + 1e7
    # and our own loader reads the annotated file to the same device analysis
    res = gpusleuth("report", out, "--json")
    again = json.loads(res.stdout)["ranks"][0]
    for k in ("compute", "non_compute", "idle", "device_span_s"):
        assert again[k] == pytest.approx(rep[k], abs=1e-9)


def _ns_units(doc) -> bool:
    return False  # none of the real traces writes epoch nanoseconds; see test_clock_text_is_exact


@pytest.mark.process
def test_several_traces_go_to_a_directory_and_plain_json_stays_plain(tmp_path):
    out = tmp_path / "annotated"
    annotate_res = gpusleuth("report", DF, NS, "--annotate", out)
    assert annotate_res.returncode == 0, annotate_res.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([DF.name, NS.name])
    single = tmp_path / "one.json"
    annotate(MI250, single)
    assert single.read_bytes().lstrip()[:1] in (b"{", b"[")  # not gzipped
    json.loads(single.read_text())


@pytest.mark.process
def test_annotate_needs_a_trace(tmp_path):
    import sys

    res = gpusleuth("run", "--no-report", "--out", tmp_path / "run", "--", sys.executable, "-c", "pass")
    assert res.returncode == 0, res.stderr
    res = gpusleuth("report", tmp_path / "run", "--annotate", tmp_path / "x.json.gz")
    assert res.returncode == 2
    assert "--annotate needs a profiler trace" in res.stderr and "Traceback" not in res.stderr


def test_clock_text_is_exact():
    from gpusleuth.render.perfetto import _Clock

    c = _Clock({"baseTimeNanoseconds": None, "ts_scaled_from_ns": False}, 1_712_195_495_519_689_000)
    assert c.ts(6_813) == "1712195495519695.813"  # no float rounding at 1.7e15 µs
    assert c.dur(63_813) == "63.813"
    based = _Clock({"baseTimeNanoseconds": 1_735_632_360_000_000_000, "ts_scaled_from_ns": False},
                   1_735_632_360_000_000_000 + 4_203_669_604_595_000)
    assert based.ts(407) == "4203669604595.407"
    ns = _Clock({"baseTimeNanoseconds": None, "ts_scaled_from_ns": True}, 1_700_000_000_000_000_000)
    assert ns.ts(5) == "1700000000000000005" and ns.dur(7) == "7"


def _compressions():
    """Every container the trace reader reads (sources/kineto/decompress.py), made from one real trace."""
    import bz2
    import lzma
    import zipfile

    def zst(data: bytes) -> bytes:
        import pyarrow as pa

        sink = pa.BufferOutputStream()
        with pa.CompressedOutputStream(sink, "zstd") as f:
            f.write(data)
        return sink.getvalue().to_pybytes()

    def zipped(data: bytes) -> bytes:
        import io

        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("trace.json", data)
        return buf.getvalue()

    return {"plain.json": lambda d: d, "gz.json.gz": gzip.compress, "xz.json.xz": lzma.compress,
            "bz2.json.bz2": bz2.compress, "zst.json.zst": zst, "zip.zip": zipped}


@pytest.mark.parametrize("name", sorted(_compressions()))
def test_annotate_reads_every_compression_the_reader_reads(name, tmp_path, capsys):
    """The annotation copies the trace through the reader's own decompression: a trace the report reads can
    be annotated (xz used to fail with "not a JSON object or array": a gzip-only reader of its own)."""
    from gpusleuth.cli.main import main

    original = _text(MI250)
    src = tmp_path / name
    src.write_bytes(_compressions()[name](original))
    out = tmp_path / "annotated.json"
    assert main(["report", str(src), "--annotate", str(out)]) == 0, capsys.readouterr().err
    text = out.read_bytes()
    start = text.index(b"[", text.index(b'"traceEvents"')) + 1
    ours = [e for e in json.loads(text)["traceEvents"] if str(e.get("cat", "")).startswith("gpusleuth")]
    assert ours, "no events added"
    # the original text follows our block unchanged
    assert text.endswith(original[original.index(b"[", original.index(b'"traceEvents"')) + 1:])
    assert text[:start] == original[:original.index(b"[", original.index(b'"traceEvents"')) + 1]
