"""Hostile input, the whole CLI in-process: a few hundred fuzz cases made from real fixtures, plus one test
per fault family the fuzz found (so a regression names itself). The 10⁵-case run is
benchmarks/fuzz_at_scale.py."""

from __future__ import annotations

import gzip
import json
import os
import random
import time
from collections import Counter
from pathlib import Path

import pytest

import fuzz_inputs as F

FIX = Path(__file__).parent / "fixtures"
SMALL = FIX / "traces" / "idle_causes.json"


def _run_reader(reader: F.Reader, seeds: list[Path], tmp_path: Path, rng_seed: int, **kw) -> Counter:
    counts: Counter = Counter()
    bugs = []
    for seed in seeds:
        ref = F.reference_report(seed, tmp_path)
        if ref is None:  # a format gpusleuth refuses (pmon): the seed itself is one sentence
            kind, rc, _, err = F.run_cli(["report", str(seed), "--json"])
            assert kind == "exit" and rc == 2 and err.startswith("gpusleuth: error:"), (seed, err[-500:])
        for case in reader.cases(seed, random.Random(rng_seed)):
            o = F.run_case(case, tmp_path, ref, **kw)
            counts[o.cls] += 1
            if o.cls in F.BUGS:
                bugs.append(f"{seed.name} {o.case}: {o.cls}: {o.detail[-800:]}")
    assert not bugs, "\n".join(bugs[:10])
    return counts


def test_fuzz_kineto_traces_json(tmp_path):
    """Every mutation family on three real traces (HTA's and hand-made): no traceback, hang or wrong answer."""
    seeds = [SMALL, FIX / "hta" / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
             FIX / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
    counts = _run_reader(F.reader("kineto"), seeds, tmp_path, 7)
    assert sum(counts.values()) > 300
    assert counts["same"] >= 40 and counts["salvaged"] >= 60 and counts["error"] >= 10, counts


@pytest.mark.process  # each split read forks a child
def test_fuzz_kineto_read_by_two_processes(tmp_path, monkeypatch):
    """The same families with every trace read in two parts (a big trace's way, forced on these small ones):
    damage in either part, a cut-off end, a false boundary — the same answers, salvage and sentences."""
    from gpusleuth.sources.kineto import split

    monkeypatch.setattr(split, "SPLIT_MIN_TEXT", 0)
    monkeypatch.setattr(split, "_usable_cpus", lambda: 2)
    seeds = [SMALL, FIX / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"]
    counts = _run_reader(F.reader("kineto"), seeds, tmp_path, 13)
    assert counts["same"] >= 20 and counts["salvaged"] >= 30 and counts["error"] >= 5, counts


def test_fuzz_kineto_console_and_html(tmp_path):
    """The same cases through the console (no raw control character) and the HTML page (escaped)."""
    counts = _run_reader(F.reader("kineto"), [FIX / "traces" / "overlapping_kernels.json"], tmp_path, 11,
                         console=True, html=tmp_path / "r.html")
    assert sum(counts.values()) > 100


def test_fuzz_odd_paths(tmp_path):
    outcomes = [F.run_case(c, tmp_path, None, timeout=10) for c in F.paths()]
    assert {o.cls for o in outcomes} == {"error"}, [(o.case, o.cls, o.detail) for o in outcomes]


def test_fuzz_run_directories(tmp_path):
    """Damaged copies of a finished and a killed recording: salvaged with the loss stated, or one sentence."""
    counts = _run_reader(F.reader("rundir"), F.rundir_seeds(), tmp_path, 3)
    assert sum(counts.values()) > 200 and counts["salvaged"] > 100, counts


# ---- one test per fault family ----------------------------------------------------------------------------

def _report(path: Path, timeout: float = 20.0) -> dict:
    kind, rc, out, err = F.run_cli(["report", str(path), "--json"], timeout=timeout)
    assert (kind, rc) == ("exit", 0), err
    return json.loads(out)


def test_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "t.json"
    os.mkfifo(fifo)
    t = time.monotonic()
    kind, rc, _, err = F.run_cli(["report", str(fifo), "--json"], timeout=10)
    assert (kind, rc) == ("exit", 2) and "named pipe" in err
    assert time.monotonic() - t < 5


def test_damaged_gzip_is_salvaged_up_to_the_damage(tmp_path):
    """One flipped byte in the middle of a real trace's gzip: the events before it are reported (it used to
    say "the file is empty")."""
    seed = FIX / "hta" / "amd_trace" / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
    gz = bytearray(seed.read_bytes())
    gz[len(gz) // 2] ^= 0x55
    p = tmp_path / "t.json.gz"
    p.write_bytes(bytes(gz))
    rep = _report(p)
    assert any("gzip stream is damaged" in m for m in rep["losses"]), rep["losses"]
    kept = int(next(m for m in rep["losses"] if "salvaged" in m).split("salvaged ")[1].split()[0].replace(",", ""))
    assert kept > 0.3 * _report(seed)["ranks"][0].get("events", 0) or kept > 50, rep["losses"]


def test_inner_traceEvents_key_is_not_the_trace(tmp_path):
    doc = json.loads(SMALL.read_text())
    decoy = {"meta": {"traceEvents": [{"ph": "X", "cat": "kernel", "name": "decoy", "ts": 1, "dur": 1}]}}
    decoy.update(doc)
    for name, text in (("pretty.json", json.dumps(decoy, indent=1)), ("compact.json", json.dumps(decoy))):
        (tmp_path / name).write_text(text)
        assert F.comparable(_report(tmp_path / name)) == F.comparable(_report(SMALL))


def test_escaped_lone_surrogate_is_not_damage(tmp_path):
    text = SMALL.read_text().replace('"name": "', '"name": "\\ud800', 1)
    p = tmp_path / "t.json"
    p.write_text(text)
    rep = _report(p)
    assert not rep["losses"]
    kind, rc, out, err = F.run_cli(["report", str(p)])
    assert (kind, rc) == ("exit", 0), err


def test_raw_invalid_utf8_is_replaced_and_counted(tmp_path):
    data = SMALL.read_bytes().replace(b'"name": "', b'"name": "\xff\xfe', 1)
    p = tmp_path / "t.json"
    p.write_bytes(data)
    rep = _report(p)
    assert any("not UTF-8" in m for m in rep["losses"]), rep["losses"]


def test_terminal_escapes_from_trace_names_are_inert(tmp_path):
    doc = json.loads(SMALL.read_text())
    for e in doc["traceEvents"]:
        if e.get("cat") == "kernel":
            e["name"] = "\x1b]52;c;aGVsbG8=\x07\x1b[2J\x00\u009b\u202e" + e["name"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    kind, rc, out, err = F.run_cli(["report", str(p)])
    assert (kind, rc) == ("exit", 0), err
    assert "\\x1b]52" in out  # shown, escaped
    assert not F.raw_controls(out + err)


@pytest.mark.parametrize("value, words", [
    (10 ** 30, "more than a day away"), (2 ** 63 + 5, "more than a day away"), (1e300, "more than a day away"),
    (3e14, "more than a day away"),
])
def test_implausible_timestamps_are_dropped_with_the_loss_stated(tmp_path, value, words):
    doc = json.loads(SMALL.read_text())
    next(e for e in doc["traceEvents"] if e.get("ph") == "X")["ts"] = value
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    rep = _report(p)
    assert any(words in m for m in rep["losses"]), rep["losses"]
    assert rep["ranks"][0]["trace_window_s"] < 1.0


def test_same_file_twice_is_one_rank(tmp_path):
    kind, rc, out, err = F.run_cli(["report", str(SMALL), str(SMALL), "--json"])
    rep = json.loads(out)
    assert len(rep["ranks"]) == 1
    assert any("same file" in m for m in rep["losses"])


@pytest.mark.parametrize("suffix", ["bz2", "xz", "zst", "zip", "bom"])
def test_other_containers_read_the_same(tmp_path, suffix):
    case = next(c for c in F.layouts(SMALL.read_bytes(), random.Random(0))
                if c.name.endswith({"bz2": "bz2", "xz": "xz", "zst": "zstd", "zip": "zip", "bom": "bom"}[suffix]))
    p = tmp_path / f"t{case.suffix}"
    p.write_bytes(case.data)
    assert F.comparable(_report(p)) == F.comparable(_report(SMALL))


def _lane(trace: str):
    """A trace big enough to be read by two processes (``sources/kineto/split.py``) forks: not the unit lane."""
    from gpusleuth.sources.kineto import json_size, split

    big = json_size(FIX / "hta" / trace) >= split.SPLIT_MIN_TEXT
    return pytest.param(trace, marks=pytest.mark.process) if big else trace


@pytest.mark.parametrize("trace", [_lane(t) for t in sorted(p.relative_to(FIX / "hta").as_posix()
                                                            for p in F.kineto_seeds(small=False) if "hta" in p.parts)])
def test_numbers_do_not_depend_on_event_order(tmp_path, trace):
    """Every real trace, shuffled: the same report (sorting is the reader's job, not the file's)."""
    seed = FIX / "hta" / trace
    ref = F.reference_report(seed, tmp_path)
    assert ref is not None
    doc = json.loads(F.read_text(seed))
    random.Random(5).shuffle(doc["traceEvents"])
    p = tmp_path / "shuffled.json"
    p.write_text(json.dumps(doc))
    diff = F.first_difference(F.comparable(ref), F.comparable(_report(p)))
    assert diff is None, diff


# every registered input format but the traces (fuzzed above, by event): made from sources/detect.FORMATS
IMPORTED = [r.name for r in F.READERS if r.name not in ("kineto", "rundir")]
# where the seeds allow more: layout-only variants that must give the same report, damage salvaged
FLOORS = {"nvidia-smi": (60, 10, 30), "prometheus-text": (60, 10, 30), "nsys": (60, 0, 30)}


@pytest.mark.parametrize("name", IMPORTED)
# an exception a reader's callback raised inside a C library is printed to the user as a traceback, yet
# raises nothing here: make it fail the fuzz (a dmon log with bytes that are not UTF-8 did this); so is a
# numpy warning (a 1e308 s Prometheus timestamp printed 'overflow encountered in multiply')
@pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning", "error::RuntimeWarning")
def test_fuzz_imported_logs_and_exports(name, tmp_path):
    """Issue 14's readers under the same harness (issue 18: every new reader as it lands; issue 35: every
    format in the registry, seeded from its fixtures): nvidia-smi CSV (with and without a header), dmon and
    pmon logs, DCGM / nvidia_gpu_exporter scrapes and query_range JSON, Nsight Systems SQLite exports —
    layout-only changes give the same report, damage is salvaged with its loss or is one sentence."""
    reader = F.reader(name)
    counts = _run_reader(reader, reader.seeds(), tmp_path, 5)
    cases, same, salvaged = FLOORS.get(name, (20, 0, 0))
    assert sum(counts.values()) >= cases, counts
    assert counts["same"] >= same and counts["salvaged"] >= salvaged, counts


def test_every_registered_input_format_is_fuzzed_from_a_seed_of_its_own():
    """A format added to sources/detect.FORMATS is in the fuzz table without an edit to it; it needs a
    fixture (its seed, found by content) — this fails until it has one."""
    from gpusleuth.sources.detect import FORMATS, sniff

    assert [r.name for r in F.READERS] == [f.name for f in FORMATS] + ["rundir"]
    for f in FORMATS:
        seeds = F.reader(f.name).seeds()
        assert seeds, f"no fixture of format {f.name!r} in tests/fixtures: the fuzz has no seed for it"
        assert all(sniff(p) == f.name for p in seeds), (f.name, [p.name for p in seeds if sniff(p) != f.name])


# ---- found when the fuzz table came from the registry (issue 35): dmon and query_range JSON, fuzzed first then

def test_dmon_saved_on_windows_reads_the_same(tmp_path):
    from gpusleuth.sources.detect import sniff
    from gpusleuth.sources.dmon import read_dmon

    seed = FIX / "nvidia-smi" / "h100_dmon_load.log"
    ref = read_dmon(seed, start_ns=0)
    for name, data in (("crlf", seed.read_bytes().replace(b"\n", b"\r\n")),
                       ("bom", b"\xef\xbb\xbf" + seed.read_bytes())):
        p = tmp_path / f"{name}.log"
        p.write_bytes(data)
        assert sniff(p) == "dmon", name
        run = read_dmon(p, start_ns=0)
        assert list(run.gpu["power_w"]) == list(ref.gpu["power_w"]) and len(run.gpu) == 5, name
        assert [x.split(": ", 1)[1] for x in run.losses] == [x.split(": ", 1)[1] for x in ref.losses], name


def test_query_range_with_a_bom_or_a_time_that_is_not_one(tmp_path):
    from gpusleuth.sources.prometheus import read_query_range

    seed = FIX / "dcgm" / "query_range_two_gpus.json"
    p = tmp_path / "bom.json"
    p.write_bytes(b"\xef\xbb\xbf" + seed.read_bytes())
    assert len(read_query_range(p).gpu) == len(read_query_range(seed).gpu) > 0
    doc = json.loads(seed.read_text())
    doc["data"]["result"][0]["values"][3][0] = 10 ** 400  # a 400-digit number: no float holds it
    doc["data"]["result"][1]["values"][5][0] = 1e308  # a float, but no time in nanoseconds
    p.write_text(json.dumps(doc))
    run = read_query_range(p)
    assert any("1 point(s) whose timestamp is not a time" in x for x in run.losses), run.losses
    assert any("1 series without a metric name or readable values" in x for x in run.losses), run.losses


# ---- found by a held-out generator (issue 18's must-show) ------------------------------------------------

def _compact(path: Path) -> bytes:
    return json.dumps(json.loads(F.read_text(path))).encode()


def test_damaged_xz_is_a_sentence(tmp_path):
    """lzma.LZMAError is not an OSError: a flipped byte in a .json.xz escaped as a traceback."""
    import lzma

    packed = bytearray(lzma.compress(_compact(SMALL)))
    packed[len(packed) // 2] ^= 0x10
    p = tmp_path / "t.json.xz"
    p.write_bytes(bytes(packed))
    kind, rc, _, err = F.run_cli(["report", str(p), "--json"])
    assert (kind, rc) == ("exit", 2) and "xz stream is damaged" in err and "Traceback" not in err


def test_escaped_traceEvents_key_is_the_trace(tmp_path):
    """``"trace\\u0045vents"`` is the key ``traceEvents`` in JSON: the same report, not 'no traceEvents'."""
    p = tmp_path / "t.json"
    p.write_bytes(_compact(SMALL).replace(b'"traceEvents"', b'"trace\\u0045vents"'))
    assert F.comparable(_report(p)) == F.comparable(_report(SMALL))


def test_rank_written_as_a_float_is_the_rank(tmp_path):
    """``"rank": 0.0`` is the number 0: the rank is kept (labels, per-rank tables), ``true`` is no rank."""
    doc = json.loads(F.read_text(SMALL))
    doc["distributedInfo"] = {"rank": 3.0, "world_size": 8.0}
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    assert _report(p)["ranks"][0]["rank"] == 3
    doc["distributedInfo"] = {"rank": True}
    p.write_text(json.dumps(doc))
    assert _report(p)["ranks"][0]["rank"] is None


def test_device_id_beyond_an_array_index(tmp_path):
    """A device id of 2**53 fits int64 but not ``np.bincount`` (it tried to allocate 64 PiB)."""
    doc = json.loads(F.read_text(FIX / "traces" / "overlapping_kernels.json"))
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["args"]["device"] = 2 ** 53 + 1
    p = tmp_path / "t.json"
    p.write_text(json.dumps(doc))
    assert _report(p)["ranks"]


@pytest.mark.process  # reads every real trace: the 87 MB one by two processes (their parts must not overlap)
def test_events_written_twice_are_dropped_and_said(tmp_path):
    """A trace concatenated into itself doubled kernel time (and every gain priced from it) in silence; the
    copies are now dropped with the loss stated and every number equals the original's. Real traces keep
    their CPU ops that share name, thread and time (no loss on any real fixture)."""
    seed = FIX / "hta" / "critical_path" / "alexnet" / "benchmark_result_2869224_1695835535_trace.json.gz"
    doc = json.loads(F.read_text(seed))
    doc["traceEvents"] = doc["traceEvents"] + doc["traceEvents"]
    p = tmp_path / "twice.json"
    p.write_text(json.dumps(doc))
    report, ref = _report(p), _report(seed)
    assert any("written twice" in loss for loss in report["losses"]), report["losses"]
    for r in (report, ref):
        r.pop("losses")
        for rank in r["ranks"]:
            rank.pop("losses", None)
    assert F.first_difference(F.comparable(ref), F.comparable(report)) is None
    for real in F.kineto_seeds(small=False):
        assert not any("written twice" in loss for loss in _report(real)["losses"]), real


@pytest.mark.parametrize("blob", ["string", "nested"])
def test_one_huge_event_is_not_damage(tmp_path, blob):
    """A valid trace with one 17 MB event — a string full of ``}, {`` (the boundary pattern) or an args
    object nested deep — was called "cut off or damaged" and lost events (the pattern's cuts all failed and
    16 MB of text was taken for damage). The reader now walks the structure to the true boundary."""
    doc = json.loads(F.read_text(SMALL))
    x = next(e for e in doc["traceEvents"] if e.get("ph") == "X")
    x["args"] = {**x.get("args", {}), "blob": ("x" * 1000 + "}, {") * 17_000 if blob == "string" else
                 [{"a": {"b": [1]}} for _ in range(700_000)]}  # an arg no analysis reads
    p = tmp_path / "huge-event.json"
    p.write_text(json.dumps(doc))  # compact, one line
    # 2.7 s of CPU here; on a host at load 12 that took more than 20 s of wall time: the hang bound is what a
    # hang would exceed on any host, not what a quiet one needs
    report = _report(p, timeout=180.0)
    assert report["losses"] == []
    assert F.comparable(report) == F.comparable(_report(SMALL))


def test_file_name_that_is_not_utf8(tmp_path):
    """A trace whose name is not UTF-8 (surrogate-escaped by Python): the JSON and HTML reports are written
    (the HTML writer raised UnicodeEncodeError on the name before)."""
    p = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"\xff\xfe-trace.json")))
    p.write_bytes(SMALL.read_bytes())
    kind, rc, out, err = F.run_cli(["report", str(p), "--json", "--html", str(tmp_path / "r.html")])
    assert (kind, rc) == ("exit", 0), err
    assert json.loads(out)["ranks"] and (tmp_path / "r.html").stat().st_size > 0


@pytest.mark.parametrize("how", ["as-text", "renamed", "other-table"])
def test_telemetry_table_not_the_recorders(tmp_path, how):
    """procs.parquet rewritten as text, with renamed columns, or swapped for host.parquet raised TypeError /
    KeyError in the analysis; it is now left out with the loss stated."""
    run = tmp_path / "run"
    import shutil

    shutil.copytree(FIX / "rundir" / "finished", run)
    F._rewrite_parquet(run, "procs", how)
    losses = _report(run)["losses"]
    assert any("procs.parquet does not hold the columns" in loss for loss in losses), losses


def test_a_run_recorded_before_a_column_was_added_loses_nothing():
    """fixtures/rundir/finished was recorded before procs gained nspid (and the schedstat clocks): its process
    samples were dropped as "not the recorder's columns" — a phantom loss of every process sample. A column
    added later (recorder.schemas.ADDED_LATER) may be absent; the core columns may not."""
    from gpusleuth.sources.rundir import load_run

    run = load_run(FIX / "rundir" / "finished")
    assert "nspid" not in run.procs and len(run.procs) > 0
    assert not [loss for loss in _report(FIX / "rundir" / "finished")["losses"] if "procs" in loss]


def test_host_core_count_as_text(tmp_path):
    """recorder.host.logical_cores = "x" in meta.json (cores × a string: TypeError) is ignored and said."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(FIX / "rundir" / "finished", run)
    meta = json.loads((run / "meta.json").read_text())
    meta["recorder"]["host"]["logical_cores"] = "x"
    (run / "meta.json").write_text(json.dumps(meta))
    assert any("logical_cores" in loss for loss in _report(run)["losses"])


def test_prometheus_value_beyond_float_range(tmp_path):
    """A 400-digit sample value in a scrape raised OverflowError; the sample is dropped and said."""
    text = (FIX / "dcgm" / "demo__seeded.metrics").read_text()
    m = [m for m in __import__("re").finditer(r"(?<= )\d+(\.\d+)?(?=\n)", text)][3]
    p = tmp_path / "scrape.metrics"
    p.write_text(text[:m.start()] + "9" * 400 + text[m.end():])
    assert any("beyond any number range" in loss for loss in _report(p)["losses"])


def test_arrow_stream_of_another_table(tmp_path):
    """An unfinalized run whose procs stream is host's (KeyError 'pid' before): left out, said."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(FIX / "rundir" / "unfinalized", run)
    shutil.copy(run / "host.arrows", run / "procs.arrows")
    assert any("does not hold the columns" in loss for loss in _report(run)["losses"])
