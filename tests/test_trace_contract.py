"""The trace analysis is a typed contract (issue 22): ``TraceAnalysis`` and everything in it are dataclasses
with typed fields, every reader in ``src/`` uses attribute access, and the JSON a rank writes keeps the keys
of ``gpusleuth.report/1`` whatever the trace holds.

Why: the analysis used to travel as ``dict[str, Any]`` read with ``.get("x") or 0`` chains, so a renamed key
turned into a silent zero in a finding or a report. Now a renamed field is a type error (``python -m mypy``,
``tests/test_types.py``) or an AttributeError, never a zero.
"""

from __future__ import annotations

import ast
import dataclasses
import gzip
import json
import typing
from pathlib import Path

import pytest

from gpusleuth.analysis.trace import TraceAnalysis, analyze_trace
from gpusleuth.sources.kineto import load_traces

SRC = Path(__file__).resolve().parents[1] / "src" / "gpusleuth"
HTA = Path(__file__).parent / "fixtures" / "hta"
GPU_TRACE = HTA / "nccl_parser_config" / "nccl_data.json.gz"  # A100: steps, kernels, launches, NCCL
CPU_TRACE = HTA / "cpu_only" / "rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"  # no device at all


def _types_in(tp: object) -> typing.Iterator[object]:
    yield tp
    for arg in typing.get_args(tp):
        yield from _types_in(arg)


def _untyped_fields(cls: type, seen: set[type]) -> list[str]:
    """``Class.field`` for every field, here and in the dataclasses it holds, whose type contains ``Any``."""
    if cls in seen:
        return []
    seen.add(cls)
    bad = []
    for name, tp in typing.get_type_hints(cls).items():
        for t in _types_in(tp):
            if t is typing.Any:
                bad.append(f"{cls.__name__}.{name}: {tp}")
            elif isinstance(t, type) and dataclasses.is_dataclass(t):
                bad += _untyped_fields(t, seen)
    return bad


def test_every_field_of_the_trace_analysis_is_typed_all_the_way_down():
    assert _untyped_fields(TraceAnalysis, set()) == []


# The TraceAnalysis fields that are structures (not numbers, strings or category maps)
STRUCT_FIELDS = {"steps", "step_stats", "idle_causes", "kernels", "launch", "overlap", "device_time", "copy_calls"}


def test_the_struct_fields_are_the_structured_ones():
    """STRUCT_FIELDS (what the reader check below looks for) is every field that holds dataclasses."""
    hints = typing.get_type_hints(TraceAnalysis)
    holds = {name for name, tp in hints.items()
             if any(isinstance(t, type) and dataclasses.is_dataclass(t) for t in _types_in(tp))}
    assert holds - {"segments", "gap_histogram"} == STRUCT_FIELDS


# ``steps`` is a list (a string key on it fails loudly), and ``run.steps`` is a Run's table of arrays: the
# silent reads on steps were on their items, which _dict_reads finds through the loops over ``x.steps``
DIRECT = STRUCT_FIELDS - {"steps"}


def _is_field(node: ast.AST) -> bool:
    """``x.kernels`` or ``(x.kernels or {})``: an expression that is one of the struct fields."""
    if isinstance(node, ast.BoolOp):
        node = node.values[0]
    return isinstance(node, ast.Attribute) and node.attr in DIRECT


def _dict_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``.get(…)`` or a string subscript on a struct field, or on a step of ``x.steps`` in a loop."""
    step_names = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.For, ast.comprehension)) and isinstance(node.iter, ast.Attribute) \
                and node.iter.attr == "steps" and isinstance(node.target, ast.Name):
            step_names.add(node.target.id)
    out = []
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target = node.func.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, str):
            target = node.value
        if target is None:
            continue
        if _is_field(target) or (isinstance(target, ast.Name) and target.id in step_names):
            out.append((node.lineno, ast.unparse(node)))
    return out


def test_no_reader_in_src_treats_the_trace_analysis_as_a_dict():
    bad = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC)
        if rel.parts[0] == "hook":
            continue
        bad += [f"{rel}:{line}: {text}" for line, text in _dict_reads(ast.parse(path.read_text(), str(path)))]
    assert not bad, "read these as attributes of the typed analysis:\n" + "\n".join(bad)


def test_the_reader_check_sees_the_old_dict_reads():
    """The check above would have caught what the dict-typed analysis invited."""
    old = '''
short = (t.kernels.get("short_kernels") or {}).get("count_share") or 0.0
ov = t.overlap.get("overlap_ratio")
total = sum(s["duration_s"] for s in t.steps)
n = r.step_stats["count"]
ok = t.kernels.short_kernels.count_share + sum(s.duration_s for s in t.steps) + s.partition.get("comm", 0.0)
'''
    assert sorted(line for line, _ in _dict_reads(ast.parse(old))) == [2, 3, 4, 5]


# gpusleuth.report/1 (docs/report-json.md): these keys, in this order, for every rank, whatever its trace
# holds; the values of a map (a partition, precision_s, streams) are keyed by category and left out here
CONTRACT = {
    "": ["rank", "label", "device", "device_span_s", "compute", "non_compute", "idle", "device_time",
         "span_partition", "trace_window_s", "trace_partition", "steps", "step_stats", "idle_causes", "kernels",
         "launch", "overlap", "copy_calls", "peak_tflops", "peak_source", "issues", "losses", "cpu_only"],
    "device_time": ["busy_s", "compute_s", "non_compute_s", "idle_s", "copy_between_kernels_s"],
    "step_stats": ["count", "mean_s", "median_s", "std_s", "cv", "min_s", "max_s", "outliers"],
    "idle_causes": ["total_s", "seconds", "share", "over"],
    "kernels": ["kernels", "distinct_names", "kernel_time_s", "top", "families", "short_kernels", "precision_s",
                "precision_share_of_gemm", "tensor_core_share", "precision_from_op_share"],
    "kernels.families": ["communication", "tensor_core", "triton", "cuda_graph", "driver_api"],
    "kernels.families.communication": ["count", "time_s", "share"],
    "launch": ["launches", "device_ops_launched", "launch_cost_us", "launch_latency_us", "queueing_delay_us",
               "hta_launch_delay_us", "queue_depth_at_launch", "max_queue_depth", "saturation_depth",
               "saturated_s", "saturated_share", "ops_shorter_than_launch", "streams"],
    "launch.launch_cost_us": ["median", "p95", "total_s"],
    "launch.launch_latency_us": ["count", "median", "p95"],
    "launch.queueing_delay_us": ["count", "median", "p95"],
    "launch.hta_launch_delay_us": ["median"],
    "launch.queue_depth_at_launch": ["median", "p95", "max"],
    "launch.ops_shorter_than_launch": ["count", "share"],
    "overlap": ["comm_s", "overlapped_s", "exposed_s", "overlap_ratio"],
    "copy_calls": ["h2d_call_s", "h2d_pageable_call_s", "window_s", "steps"],
}
STEP_KEYS = ["step", "start_s", "duration_s", "partition", "comm_overlapped_s"]
KERNEL_ROW_KEYS = ["name", "count", "total_s", "share", "mean_us", "median_us", "min_us", "max_us", "family"]


def _at(d: dict, path: str) -> dict:
    for part in filter(None, path.split(".")):
        d = d[part]
    return d


@pytest.mark.parametrize("trace", [GPU_TRACE, CPU_TRACE], ids=["gpu", "cpu_only"])
def test_a_rank_json_has_the_report_1_keys_whatever_the_trace_holds(trace):
    """The keys are the contract: a trace without kernels, launches or steps (a CPU profile) writes the same
    keys as a GPU trace, with zeros or nulls, never a shorter object (was ``{"launches": 0}``)."""
    d = json.loads(json.dumps(analyze_trace(load_traces([trace])[0]).to_dict(), allow_nan=False))
    assert {path: list(_at(d, path)) for path in CONTRACT} == CONTRACT
    assert all(list(s) == STEP_KEYS for s in d["steps"])
    assert all(list(k) == KERNEL_ROW_KEYS for k in d["kernels"]["top"])


def test_the_typed_analysis_reads_what_the_trace_file_says():
    """Values through the typed structures, checked against the trace's own JSON (not against our output):
    kernel count and time, NCCL kernels, and each ProfilerStep's number and duration."""
    doc = json.loads(gzip.open(GPU_TRACE).read())
    xs = [e for e in doc["traceEvents"] if isinstance(e, dict) and e.get("ph") == "X"]
    kern = [e for e in xs if e.get("cat") == "kernel"]
    nccl = [e for e in kern if "nccl" in e["name"].lower()]
    steps = sorted((e for e in xs if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    a = analyze_trace(load_traces([GPU_TRACE])[0])
    assert a.kernels.kernels == len(kern) > 1000
    assert a.kernels.kernel_time_s == pytest.approx(sum(e["dur"] for e in kern) / 1e6, rel=1e-9)
    comm = a.kernels.families.communication
    assert comm.count == len(nccl) > 0
    assert comm.time_s == pytest.approx(sum(e["dur"] for e in nccl) / 1e6, rel=1e-9)
    assert a.overlap.overlapped_s + a.overlap.exposed_s == pytest.approx(a.overlap.comm_s, abs=1e-12)
    assert a.overlap.comm_s <= comm.time_s + 1e-9  # the union of the NCCL kernels on the device
    assert [s.step for s in a.steps] == [int(e["name"].split("#")[1]) for e in steps]
    assert [s.duration_s for s in a.steps] == pytest.approx([e["dur"] / 1e6 for e in steps], abs=1e-9)
    assert a.step_stats.count == len(steps) and a.launch.launches > 0
