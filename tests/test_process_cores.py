"""The cores a set of the job's processes used over a window: one derivation (analysis.host_telemetry.
cores_by_process), read by the Host line's job cores, a server's cores per load level and per request level, and
the sentence about a model that ran in another process. These pin the two places where the four former copies
differed and were wrong."""

from __future__ import annotations

import numpy as np
import pytest

from gpusleuth.analysis.host_telemetry import cores_by_process, summarize_host
from gpusleuth.run.model import Run, Table
from gpusleuth.serving.analysis.requests import _server_cpu


def _procs(rows: list[tuple[int, int, float]]) -> Table:
    return Table({"t_ns": np.asarray([r[0] for r in rows], np.int64), "pid": np.asarray([r[1] for r in rows], np.int64),
                  "cpu_pct": np.asarray([r[2] for r in rows], np.float64)})


def test_processes_that_ran_one_after_the_other_are_not_counted_side_by_side():
    """A DataLoader without persistent workers starts new workers each epoch: epoch 1's worker (pid 2) at a full
    core, then epoch 2's (pid 3), the main process at 20 % all along. The job used 1.2 cores at every sampling time;
    summing each process's own mean read 2.2 — a foreign-load figure short by a core."""
    ticks = list(range(100, 1100, 100))
    rows = [(t, 1, 20.0) for t in ticks] + [(t, 2, 100.0) for t in ticks[:5]] + [(t, 3, 100.0) for t in ticks[5:]]
    run = Run(meta={}, procs=_procs(rows))
    host = summarize_host(run, 1, {1: "main", 2: "dataloader_worker", 3: "dataloader_worker"}, (100, 1000))
    assert host is not None and host.job_cores_steps == pytest.approx(1.2)
    got = cores_by_process(run.procs, (100, 1000), [2, 3])
    assert got is not None and got.mean == pytest.approx(1.0) and got.per_process == pytest.approx({2: 0.5, 3: 0.5})


def test_a_load_level_between_two_sampling_times_is_measured_by_the_times_around_it():
    """A request level of 0.15 s between the 1 s ticks of the process sampler: the server's cores come from the
    ticks on either side (the window widened, as for a short training loop) — not "no CPU measured", which the
    request table printed as a blank beside a server that used 1.5 cores."""
    ticks = [0, 1_000_000_000, 2_000_000_000, 3_000_000_000]
    run = Run(meta={}, procs=_procs([(t, 7, 150.0) for t in ticks] + [(t, 8, 0.0) for t in ticks]))
    mean, p90 = _server_cpu(run, [7], 1_400_000_000, 1_550_000_000)
    assert mean == pytest.approx(1.5) and p90 == pytest.approx(1.5)


def test_the_busiest_process_never_exceeds_the_whole_set():
    """A server whose one busy process did all the work: its cores and the set's are the same number, and the set's
    must not read one rounding step under it (CI saw 0.01820567409100712 > 0.018205674091007117 when the mean was
    taken over the sampling times and the busiest over the process's own sum). Five samples a busy process took,
    an idle sibling beside it, in the order that once rounded the wrong way."""
    ticks = [100, 200, 300, 400, 500]
    rows = [(t, 1, c) for t, c in zip(ticks, [17.57, 54.15, 42.27, 12.43, 64.72])] + [(t, 2, 0.0) for t in ticks]
    got = cores_by_process(_procs(rows), None)
    assert got is not None and got.busiest == got.per_process[1]
    assert got.busiest <= got.mean and got.mean == pytest.approx(sum([17.57, 54.15, 42.27, 12.43, 64.72]) / 500)


def _two_directories(second_host: str) -> Run:
    """A job read from two directories (one rank each), each recorder sampling at its own times (the second 50 ns
    later): rank 0's process at 1.5 cores, rank 1's at 0.75; the host samples (the first directory's) 3 of 4
    cores busy."""
    ticks = np.arange(100, 1100, 100)
    rows = [(t, 10, 150.0) for t in ticks] + [(t + 50, 20, 75.0) for t in ticks]
    procs = _procs(rows)
    procs = Table({**procs.columns, "node": np.asarray([0] * 10 + [1] * 10, np.int32)})
    host = Table({"t_ns": ticks, "cpu_pct": np.full(10, 75.0)})
    meta = {"recorder": {"host": {"logical_cores": 4}},
            "nodes": [{"path": "a", "clock_offset_ns": 0, "clock": "reference clock", "ranks": [0], "hostname": "a"},
                      {"path": "b", "clock_offset_ns": 0, "clock": "aligned", "ranks": [1], "hostname": second_host}]}
    return Run(meta=meta, procs=procs, host=host)


def test_two_recorders_interleaved_times_are_added_not_pooled():
    """Pooled, the 20 interleaved sampling times each held one rank's process: the job read (1.5 + 0.75) / 2."""
    run = _two_directories("a")
    got = cores_by_process(run.procs, None)
    assert got is not None and got.mean == pytest.approx(2.25)
    assert got.per_process == pytest.approx({10: 1.5, 20: 0.75})
    # between the two recorders' first and last samples, every time holds both
    inside = (got.times >= 150) & (got.times <= 1000)
    assert got.per_time[inside] == pytest.approx(np.full(inside.sum(), 2.25))
    pooled = cores_by_process(Table({k: v for k, v in run.procs.columns.items() if k != "node"}), None)
    assert pooled is not None and pooled.mean == pytest.approx(1.125)


def test_the_host_samples_are_set_against_that_machines_processes_only():
    """The first directory's host was 3 cores busy. On one machine both ranks used 2.25 of them: 0.75 foreign. On
    two machines only rank 0's 1.5 cores ran there: 1.5 foreign — every node's CPU subtracted read 0.75, and the job's
    CPU per rank is that machine's rank's own."""
    from gpusleuth.diagnosis.rules._common import job_cpu_pct

    one = summarize_host(_two_directories("a"), 10, {10: "main", 20: "main"}, None)
    assert one is not None and one.job_cores_steps == pytest.approx(2.25)
    assert one.foreign_cores_steps == pytest.approx(0.75) and one.host_ranks == [0, 1]
    two = summarize_host(_two_directories("b"), 10, {10: "main", 20: "main"}, None)
    assert two is not None and two.job_cores_steps == pytest.approx(1.5)
    assert two.foreign_cores_steps == pytest.approx(1.5) and two.host_ranks == [0] and two.job_processes == 1

    class Facts:  # job_cpu_pct reads the host summary and the steps' workers
        class outcomes:
            class steps:
                workers, ranks = "ranks", [0, 1]
    for h, want in ((one, 2.25 * 100 / 2), (two, 150.0)):
        Facts.host = h
        pct, what = job_cpu_pct(Facts)  # type: ignore[arg-type]
        assert pct == pytest.approx(want), what
