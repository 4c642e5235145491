"""Everything a verb reads comes in through one door, ``sources/inputs.read_inputs`` (issue 35 item 3): a verb
(``cli/``) or the flow that drives it (``pipeline/``, ``experiments/``, ``demo/``) never calls a reader of runs,
traces or logs itself. Checked from the AST, like tests/test_house_rules.py: what these modules import from a
``sources`` package is listed here with why it is not a second door, and the run-directory files they still
read around the door are the KNOWN list below, which may only shrink."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "gpusleuth"
VERBS = ("cli", "pipeline", "experiments", "demo")

# (module, name) a verb or its flow may import from sources/, and why it is not a way around the door
ALLOWED = {
    ("gpusleuth.sources.inputs", "read_inputs"): "the door",
    ("gpusleuth.sources.inputs", "Inputs"): "the door's answer",
    ("gpusleuth.sources.detect", "ImportOptions"): "the door's options (a type)",
    ("gpusleuth.sources.prices", "read_price_table"): "a price table named by a flag: an option, not a run's data",
    ("gpusleuth.sources.rundir", "find_run_dirs"): "fleet: which folders are runs (reads no run's data)",
    ("gpusleuth.sources.summaries", "read_summary"): "fleet: a run's summary.json, the report's own cache",
    ("gpusleuth.sources.summaries", "cache_summary_outside"): "fleet: writes the cache outside the run",
    # read_inputs' trace-set reader runs in worker processes; the door hands it the paths (read_trace_set)
    ("gpusleuth.sources.kineto", "load_trace"): "pipeline/trace_set.py: one rank, in a worker, for the door",
    ("gpusleuth.sources.kineto", "load_traces"): "pipeline/trace_set.py: the ranks here, for the door",
    ("gpusleuth.sources.kineto", "distinct_files"): "pipeline/trace_set.py: planning the workers",
    ("gpusleuth.sources.kineto", "json_size"): "pipeline/trace_set.py: planning the workers' memory",
    ("gpusleuth.sources.kineto.decompress", "text_blocks"): "report --annotate: copies the trace's bytes, reads no Run",
    ("gpusleuth.sources.mllog", "MlLog"): "a type",
    ("gpusleuth.sources.mllog", "read_mllog"): "--mllog FILE (an option); the run's own output.log is Run.mllog",
    # the ledger reads a Prometheus server, not paths: its one door is ledger/pipeline.build_ledger_report
    ("gpusleuth.ledger.sources.prom_client", "*"): "a server, not a path",
    ("gpusleuth.ledger.sources.prom_fleet", "*"): "a server, not a path",
    ("gpusleuth.ledger.sources.fleet_cache", "*"): "the ledger's cache of that server's answers",
}

# (module, function) that still read a run directory's file beside the door: each a reason, none to be added
KNOWN: dict[tuple[str, str], str] = {}


def _verb_modules():
    for folder in VERBS:
        for path in sorted((PKG / folder).rglob("*.py")):
            yield path.relative_to(PKG).as_posix(), ast.parse(path.read_text(), str(path))
    yield "ledger/pipeline.py", ast.parse((PKG / "ledger" / "pipeline.py").read_text())


def _source_imports(tree):
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and ".sources" in f".{node.module.removeprefix('gpusleuth')}":
            for alias in node.names:
                yield node.lineno, node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpusleuth.") and ".sources" in alias.name:
                    yield node.lineno, alias.name, "*"


def test_verbs_read_through_the_one_door():
    bad = [f"{rel}:{line}: from {mod} import {name}" for rel, tree in _verb_modules()
           for line, mod, name in _source_imports(tree)
           if (mod, name) not in ALLOWED and (mod, "*") not in ALLOWED]
    assert not bad, ("a verb reads a source itself; go through sources/inputs.read_inputs (or say here why it "
                     "is not a second door):\n" + "\n".join(bad))


def _reads_a_run_file(fn: ast.AST) -> bool:
    """A call that reads meta.json or another file of a run directory through its names (``RunDir``)."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "read_meta":
                return True
            if node.func.attr in ("read_text", "read_bytes", "open") and "RunDir" in ast.unparse(node.func.value):
                return True
    names = {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
    calls = [ast.unparse(n.func) for n in ast.walk(fn) if isinstance(n, ast.Call)]
    # a run file's path (RunDir's output_log, meta_file) handed to a reader
    # (a reader's name starts a word with "read": read_mllog, _read_table — not LoadThread)
    return bool(names & {"output_log", "meta_file"}) and any(
        re.search(r"(^|_)read", c.rsplit(".", 1)[-1]) and not c.endswith("read_inputs") for c in calls)


def test_run_files_read_beside_the_door_only_where_known():
    found = set()
    for rel, tree in _verb_modules():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and _reads_a_run_file(fn):
                found.add((rel, fn.name))
    assert found - set(KNOWN) == set(), "a verb reads a run directory's file itself; read it with read_inputs"
    assert set(KNOWN) - found == set(), "a KNOWN read is gone: take it off the list"
