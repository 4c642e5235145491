"""The GPU rules' CPU side reads the job's processes, not the main process alone (issue 35).

``low_gpu_low_cpu`` says "the GPU is idle while the CPU is idle too: synchronization or code" and
``sizing_vs_stall`` says "the job is too small for the card: no host saturation". Both read the training process's
CPU — wrong for a job whose work runs in other processes: an RL loop whose environment steps in worker processes,
a loop that hands its pre- or post-processing to a process pool. Its main process waits on a pipe (a few % of a
core) while the workers burn the host's cores; the old rules called that "CPU idle" and "a sizing problem".

A real run: ``gpusleuth run`` around a loop that hands each step to 8 worker processes burning 30 ms of CPU each
(by their own CPU clock) and waits for them. The CPU side is what changes, so the run is CPU-only and the card
is a stand-in summary (20 % busy, 10 % of its memory) — the quadrant and sizing rules' GPU side."""

from __future__ import annotations

import sys

import pytest

from gpusleuth.diagnosis.gather import build_facts
from gpusleuth.diagnosis.rules import gpu as gpu_rules
from gpusleuth.diagnosis.rules import sizing
from gpusleuth.pipeline.build import analyze_run
from gpusleuth.sources.rundir import load_run
from test_rules_gpu import gpu

HANDS_OFF = """
import multiprocessing as mp, time, torch, torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
def environment(conn):
    while conn.recv() is not None:
        t = time.process_time()
        while time.process_time() - t < 0.03:
            pass
        conn.send(1)
if __name__ == "__main__":
    torch.set_num_threads(1)
    ctx = mp.get_context("fork")
    pool = []
    for _ in range(8):
        here, there = ctx.Pipe()
        p = ctx.Process(target=environment, args=(there,), daemon=True)
        p.start()
        pool.append((here, p))
    time.sleep(1.0)  # the process sampler finds new children within 0.5 s
    model = nn.Linear(16, 1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    for x, y in DataLoader(TensorDataset(torch.randn(8 * 40, 16), torch.randn(8 * 40, 1)), batch_size=8):
        for here, _ in pool:
            here.send(0)
        for here, _ in pool:
            here.recv()
        loss = ((model(x) - y) ** 2).mean(); opt.zero_grad(); loss.backward(); opt.step()
    for here, p in pool:
        here.send(None); p.join()
"""


@pytest.mark.process
def test_a_loop_whose_work_runs_in_worker_processes_is_neither_cpu_idle_nor_a_sizing_problem(tmp_path):
    from conftest import gpusleuth

    script = tmp_path / "hands_off.py"
    script.write_text(HANDS_OFF)
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--no-report", "--", sys.executable, script, timeout=180)
    assert res.returncode == 0, res.stderr[-3000:]
    facts = build_facts(analyze_run(load_run(out)))
    h, s = facts.host, facts.outcomes.steps
    assert h is not None and h.main_cpu_pct_mean is not None and h.job_cores_steps is not None
    assert s.steps >= 30 and s.data_wait_share_of_steps < 0.05, s
    main, job = h.main_cpu_pct_mean, h.job_cores_steps * 100
    # the main process waits on its pipes, the workers burn: the job used far more CPU than its main process
    assert main < gpu_rules.LOW_CPU and job > main + 20, (main, job, [p.cpu_pct for p in h.processes])
    facts.gpus = [gpu(util=20.0, mem=0.1)]
    # How much of the host the workers got depends on its load (here, with other tests on both cores, 0.5 of a
    # core where an idle host gives them both): each rule judges the job's CPU against its threshold, and says it.
    quadrant = gpu_rules.low_gpu_low_cpu(facts)
    assert bool(quadrant) == (job < gpu_rules.LOW_CPU), (job, quadrant)  # main's 7 %: "the CPU is idle too"
    small = sizing.sizing_vs_stall(facts)
    assert isinstance(small, list) and bool(small) == (job < sizing.HOST_BUSY), (job, small)
    for finding in [*quadrant, *small]:
        said = {e.name: e for e in finding.evidence}
        assert "job CPU (mean)" in said, (finding.title, list(said))  # was the training process's
        cpu = said["job CPU (mean)"]
        assert cpu.value == round(job, 1) and "the job's 9 processes" in cpu.source, cpu
