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
