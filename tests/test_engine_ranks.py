"""The engine's per-rank loop on real multi-rank traces (HTA's published test traces, tests/fixtures/hta).

Each rule marked ``@per_rank`` is written for one rank; the engine calls it once per rank and merges. What
the job's report must say is computed here from each rank's own trace analysis — the partition and kernel
numbers the analysis computed once — not from a stored report: the worst rank speaks with its own number,
every other rank that crossed the threshold is named in the evidence, and ranks without the data are said
to be not judged. Any of these fails if the engine stops iterating (a per-rank rule refuses the whole job's
facts) or stops merging.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpusleuth.diagnosis.engine import diagnose
from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.gather import build_facts
from gpusleuth.diagnosis.rules import distributed, precision
from gpusleuth.pipeline.build import analyze_run
from gpusleuth.sources.inputs import read_inputs

HTA = Path(__file__).parent / "fixtures" / "hta"


def job_facts(folder: str) -> Facts:
    inputs = read_inputs(sorted((HTA / folder).rglob("*.json.gz")))
    return build_facts(analyze_run(inputs.job, ranks=inputs.ranks, display=False))


def merged(facts: Facts, cause: str):
    found = [f for f in diagnose(facts)[0] if f.cause == cause]
    assert len(found) <= 1, f"{len(found)} findings of {cause}: the engine stopped merging ranks"
    return found[0] if found else None


def exposed_comm_share(t) -> float:
    total = sum(s.duration_s for s in t.steps)
    return sum(s.partition.get("comm", 0.0) for s in t.steps) / total if total else 0.0


@pytest.mark.parametrize("folder, firing", [("trace_filter", 2), ("trace_diff", 1)])
def test_exposed_communication_is_judged_on_every_rank_and_the_worst_speaks(folder, firing):
    facts = job_facts(folder)
    assert len(facts.traces) == 2
    with pytest.raises(ValueError, match="once per rank"):
        distributed.exposed_communication(facts)
    shares = {t.label: exposed_comm_share(t) for t in facts.traces}
    fired = {label: s for label, s in shares.items() if s >= distributed.COMM_MODERATE}
    assert len(fired) == firing  # the fixtures hold what the test is about
    worst = max(fired, key=lambda label: fired[label])
    f = merged(facts, "communication")
    assert f is not None
    assert f.evidence[0].value == round(fired[worst] * 100, 1) and f.evidence[0].source == f"trace {worst}"
    assert f.severity == ("high" if fired[worst] >= distributed.COMM_HIGH else "moderate")
    others = [e for e in f.evidence if e.name == "same cause on another rank"]
    assert sorted(e.source for e in others) == sorted(f"trace {label}" for label in fired if label != worst)
    assert all(f"{fired[e.source.removeprefix('trace ')]:.0%}" in str(e.value) for e in others)
    assert ("Seen on 2 ranks" in f.summary) == (firing == 2) and f.missing == []


def test_fp32_math_over_six_single_rank_traces_names_them_by_file():
    """Six traces of separate single-rank jobs (all rank 0, two with the same file name): each is judged on
    its own; the ranks without host ops are listed as not judged by the Python-overhead rule, by label."""
    facts = job_facts("critical_path")
    assert len(facts.traces) == 6 and len({t.rank for t in facts.traces}) == 1
    fired = {}
    for t in facts.traces:
        prec = t.kernels.precision_s
        gemm, total = sum(prec.values()), t.kernels.kernel_time_s
        if total and gemm and gemm / total >= precision.GEMM_SHARE and prec.get("fp32", 0.0) / gemm >= precision.FP32_SHARE:
            fired[id(t)] = (t.label, prec["fp32"] / gemm)
    assert len(fired) >= 2
    f = merged(facts, "precision")
    assert f is not None and f"Seen on {len(fired)} ranks" in f.summary
    assert f.evidence[0].value == round(100 * max(s for _, s in fired.values()), 1)
    named = [f.evidence[0].source] + [e.source for e in f.evidence if e.name == "same cause on another rank"]
    assert sorted(n.removeprefix("kernel names, trace ") for n in named) == sorted(label for label, _ in fired.values())

    with_ops = {h.trace for h in facts.host_ops}
    lacking = [t.label for i, t in enumerate(facts.traces) if i not in with_ops]
    assert 0 < len(lacking) < 6
    (m,) = [m for m in diagnose(facts)[1] if m.rule.startswith("Python / framework overhead")]
    assert m.rule.endswith(f"({len(lacking)} of 6 ranks)") and all(label in m.rule for label in lacking)


def test_a_rank_with_no_device_work_is_said_to_be_not_judged():
    """Two GPU ranks and HTA's CPU-only rank read as one job: exposed communication stands as judged on the
    GPU ranks, and the device rules say they could not look at rank 34."""
    paths = sorted((HTA / "trace_filter").glob("*.json.gz")) + sorted((HTA / "cpu_only").glob("*.json.gz"))
    inputs = read_inputs(paths)
    facts = build_facts(analyze_run(inputs.job, ranks=inputs.ranks, display=False))
    assert [t.device_span_s > 0 for t in facts.traces] == [True, True, False]
    f = merged(facts, "communication")
    assert f is not None and "Seen on 2 ranks" in f.summary
    assert f.missing and f.missing[0].startswith("not judged on rank 34 (1 of 3 ranks)")
    rules = [m.rule for m in diagnose(facts)[1]]
    assert "exposed communication, on rank 34 (1 of 3 ranks)" in rules
    assert "host-device synchronization, on rank 34 (1 of 3 ranks)" in rules
