"""Bad and damaged input: clear errors for non-traces, salvage for cut-off traces, reported data issues."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from gpusleuth.analysis.trace import analyze_trace
from gpusleuth.errors import InputError
from gpusleuth.sources.kineto import load_traces

FIX = Path(__file__).parent / "fixtures" / "traces"
HTA = Path(__file__).parent / "fixtures" / "hta"
NQ = HTA / "negative_queue_length_values_check" / "rank0.json.gz"


def analyze(name: str) -> dict:
    return analyze_trace(load_traces([FIX / name])[0]).to_dict()


@pytest.mark.parametrize("name, words", [
    ("empty.json", "empty"),
    ("not_json.json", "not JSON"),
    ("not_a_trace.json", "without a 'traceEvents' array"),
    ("number_list.json", "no trace events"),
])
def test_not_a_trace_is_a_clear_input_error(name, words):
    with pytest.raises(InputError) as err:
        load_traces([FIX / name])
    assert err.value.path.endswith(name)
    assert words in err.value.problem
    assert "Kineto" in err.value.problem or "empty" in err.value.problem


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_traces([tmp_path / "nope.json"])
    with pytest.raises(InputError, match="directory"):
        load_traces([tmp_path])


def test_gzip_of_garbage_and_empty_gzip(tmp_path):
    p = tmp_path / "junk.json.gz"
    p.write_bytes(gzip.compress(b"<html>not a trace</html>"))
    with pytest.raises(InputError, match="not JSON"):
        load_traces([p])
    e = tmp_path / "empty.json.gz"
    e.write_bytes(gzip.compress(b""))
    with pytest.raises(InputError, match="empty|not valid JSON"):
        load_traces([e])


def test_execution_trace_is_rejected_with_its_keys():
    et = HTA / "execution_trace" / "benchmark_simple_add_et.json.gz"
    with pytest.raises(InputError, match="keys: schema"):
        load_traces([et])


def _cut(tmp_path: Path, fraction: float, compress: bool) -> tuple[Path, int]:
    text = gzip.decompress(NQ.read_bytes())
    cut = text[: int(len(text) * fraction)]
    p = tmp_path / ("cut.json.gz" if compress else "cut.json")
    p.write_bytes(gzip.compress(cut, 1) if compress else cut)
    return p, len(json.loads(text)["traceEvents"])


@pytest.mark.parametrize("compress", [False, True])
def test_truncated_trace_is_salvaged_and_loss_stated(tmp_path, compress):
    p, _ = _cut(tmp_path, 0.6, compress)
    run = load_traces([p])[0]
    full = load_traces([NQ])[0]
    kept = run.meta["events"]
    assert 0.4 * full.meta["events"] < kept < full.meta["events"]
    assert run.losses and "cut off" in run.losses[0] and "salvaged" in run.losses[0]
    assert "lost about 1 event" in run.losses[0]  # only the event cut in half is lost
    # metadata after the array (none in this older trace) cannot be recovered, metadata before it is kept
    assert run.meta["rank"] == 0 and run.meta["device"] == "NVIDIA A100-SXM4-80GB"
    d = analyze_trace(run).to_dict()
    assert d["steps"] and d["device_span_s"] > 0


def test_gzip_cut_mid_stream_salvages_what_decompressed(tmp_path):
    raw = NQ.read_bytes()
    p = tmp_path / "cut_raw.json.gz"
    p.write_bytes(raw[: len(raw) // 2])  # the gzip stream itself ends early
    run = load_traces([p])[0]
    assert run.meta["events"] > 10_000
    assert any("gzip stream ends early" in s for s in run.losses)


def test_truncated_inside_header_is_an_error(tmp_path):
    p = tmp_path / "head.json"
    p.write_text('{"schemaVersion": 1, "deviceProperties": [{"id": 0, "na')
    with pytest.raises(InputError, match="no traceEvents array"):
        load_traces([p])


def test_damage_in_the_middle_loses_only_the_damaged_event(tmp_path):
    text = (FIX / "gpu_without_launch.json").read_text()
    broken = text.replace('"name": "k2"', '"name": "k2', 1)  # unterminated string inside one event
    p = tmp_path / "mid.json"
    p.write_text(broken)
    run = load_traces([p])[0]
    assert run.meta["events"] == 4  # step, launch, k1, k3 (k2 lost)
    assert "lost about 1 event" in run.losses[0]


def test_negative_duration_reported_and_clamped():
    d = analyze("negative_duration.json")
    assert any("negative duration" in s for s in d["issues"])
    assert d["device_span_s"] == pytest.approx(30e-6)  # k2 counts as zero-length at 40 µs
    assert sum(d["steps"][0]["partition"].values()) == pytest.approx(d["steps"][0]["duration_s"], abs=1e-12)


def test_overlapping_kernels_on_one_stream_reported():
    d = analyze("overlapping_kernels.json")
    assert any("start before the previous kernel on the same stream" in s and "10.0 µs" in s for s in d["issues"])
    assert d["device_time"]["busy_s"] == pytest.approx(40e-6)  # union, not 50 µs


def test_missing_correlation_reported():
    d = analyze("missing_correlation.json")
    assert any("2 GPU op(s) have no correlation id" in s for s in d["issues"])
    assert d["launch"]["launches"] == 1


def test_gpu_events_without_launch_reported():
    d = analyze("gpu_without_launch.json")
    assert any("2 GPU op(s) have no matching launch call" in s for s in d["issues"])
    assert d["kernels"]["kernels"] == 3


def test_empty_trace_reported_not_raised():
    runs = load_traces([FIX / "empty_events.json"])
    d = analyze_trace(runs[0]).to_dict()
    assert runs[0].meta["events"] == 0 and runs[0].meta["start_ns"] is None
    assert any("no complete events" in s for s in d["issues"])
    assert d["steps"] == [] and d["idle"] == 0.0
    json.dumps(d)


def test_bare_event_array_without_steps():
    d = analyze("bare_array.json")
    assert d["device_span_s"] == pytest.approx(10e-6)
    assert any("no ProfilerStep" in s for s in d["issues"])
    assert sum(d["trace_partition"].values()) == pytest.approx(d["trace_window_s"], abs=1e-12)


def test_odd_field_types_do_not_fail_the_load(tmp_path):
    events = [{"ph": "X", "cat": "kernel", "name": ["weird"], "pid": "gpu0", "tid": None, "ts": "12.5",
               "dur": 3, "args": {"stream": "0x7", "correlation": "abc", "External id": 1.5}},
              {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": None, "dur": 1},
              {"cat": "cpu_op", "name": "no phase at all", "ts": 1, "dur": 1},
              {"ph": 7, "name": "numeric phase"}]
    p = tmp_path / "odd.json"
    p.write_text(json.dumps({"traceEvents": events}))
    run = load_traces([p])[0]
    assert run.meta["events"] == 1
    assert any("without a numeric timestamp" in s for s in run.losses)
    d = analyze_trace(run).to_dict()
    assert any("no correlation id" in s for s in d["issues"])
