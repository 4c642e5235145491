"""Distributed jobs under `gpusleuth run`: every rank's identity and collectives recorded with no code
change, the collectives matched across ranks, and the straggler named as the rank the others wait for.

Real child processes: torchrun and mp.spawn starting 2 gloo ranks on CPU, real DDP. The planted
straggler's extra time is known, so the measured wait is checked against it."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import FIXTURES, TRACES, free_port, gpusleuth, report_json, run_multirank

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

pytest.importorskip("torch")

DIST = FIXTURES / "distributed"


def _record(tmp_path, name, *cmd, env=None):
    outs = [tmp_path / (name if k == 0 else f"{name}-{k}") for k in range(3)]
    res = run_multirank(lambda k: gpusleuth("run", "--out", outs[k], "--no-report", "--", *map(str, cmd),
                                            timeout=240, env=env))
    assert res.returncode == 0, res.stderr[-3000:]
    out = next(o for o in reversed(outs) if o.exists())
    return out, res



def _torchrun(tmp_path, name, slow_rank, extra, base, steps, *, nproc=2, hidden=192):
    return _record(tmp_path, name, sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", nproc,
                   "--master_addr", "127.0.0.1", "--master_port", free_port(), DIST / "ddp_torchrun.py",
                   slow_rank, extra, base, steps, hidden)


@pytest.mark.slow
def test_torchrun_planted_straggler_is_named_and_priced(tmp_path, host_load):
    """The must-show: rank 1's storage takes 20 ms more per batch; rank 0 waits for it in the all-reduce.

    Named first and HIGH on a host the job has to itself. Where the report finds other processes took cores
    (and this test measured them too) the product's honest answer is the one asserted: rank 1 still named,
    held at moderate with low confidence, saying to measure again on a quiet host. The price (rank 0's
    wait within 25 % of the planted 20 ms) is asserted where it holds; a miss skips with the measured load
    only where others took cores."""
    extra, steps = 0.02, 40
    run, _ = _torchrun(tmp_path, "straggler", 1, extra, 0.0, steps)
    rep = report_json(run)
    comm = rep["communication"]
    ranks = {r["rank"]: r for r in comm["ranks"]}
    assert set(ranks) == {0, 1} and comm["world_size"] == 2
    assert all(r["steps"] >= steps - 2 for r in ranks.values())  # both ranks' steps counted (first left out)
    (top,) = [f for f in rep["findings"] if f["cause"] == "straggler"]
    assert "Rank 1" in top["title"] and comm["slow_rank"] == 1, rep["findings"][:2]
    crowded = [f for f in rep["findings"] if f["cause"] == "contention" and f["title"].startswith("Other processes")]
    if crowded:  # the report saw other load: it must be there (measured here too), and the verdict held back
        assert host_load.foreign_cores() > 0.1, (crowded[0]["title"], host_load.foreign_cores())
        assert top["severity"] == "moderate" and top["confidence"] == "low" and "quiet host" in top["summary"], top
    else:
        assert rep["findings"][0] is top, rep["findings"][:2]
        assert top["severity"] == "high", rep["findings"][:2]
    # what the slow rank does with the time: its input pipeline, where its main thread sleeps (not host work)
    assert "input pipeline" in top["summary"] and "waited" in top["summary"]
    busy = next(e["value"] for e in top["evidence"] if e["name"].startswith("its main thread on a CPU"))
    assert busy < 5, busy
    with host_load.quiet_or_skip("the straggler's price"):
        # the time rank 0 loses waiting, within 25 % of the planted extra work
        assert abs(comm["lost_per_step_s"] - extra) <= 0.25 * extra, comm["lost_per_step_s"]
        assert abs(comm["lost_s"] - extra * (steps - 1)) <= 0.25 * extra * (steps - 1), comm["lost_s"]
        assert ranks[0]["wait_s"] > 10 * max(ranks[1]["wait_s"], 1e-4), ranks
        assert comm["slow_extra"]["data_wait_s"] == pytest.approx(extra, rel=0.25), comm["slow_extra"]
    assert comm["comm_gpu_hours"] > comm["wait_gpu_hours"] > 0
    # the HTML report carries the same cross-rank table and what the collectives cost
    page = run.parent / "report.html"
    assert gpusleuth("report", run, "--html", page).returncode == 0
    html = page.read_text()
    assert "Communication across 2 ranks" in html and "process-h in collectives" in html


@pytest.mark.slow
def test_a_one_millisecond_straggler_on_short_steps_is_named(tmp_path, host_load):
    """Rank 1's storage takes 1 ms more per batch, in steps of ~2 ms: a wait of the size host scheduling
    alone makes on a shared box (a balanced job's ranks taking turns on the cores: 0.75 ms of a 2.1 ms step,
    tests/test_straggler_turns.py). The rule prices only the slow rank's own extra time outside collectives,
    so it must still name this one: rank 1, for its input pipeline. HIGH on a host the job has to itself;
    beside other load, moderate with low confidence (the crowded-host answer). Its own extra time is the
    planted millisecond within 30 % where it holds (measured 1.03-1.17 ms at load 3). Where other processes
    took cores the steps stretch (a 1 ms wait was 7.7 % of one at load 4): a miss then skips saying the load
    it measured; on a quiet host it fails."""
    extra, steps = 0.001, 60
    run, _ = _torchrun(tmp_path, "short", 1, extra, 0.0, steps)
    rep = report_json(run)
    comm = rep["communication"]
    (top,) = [f for f in rep["findings"] if f["cause"] == "straggler"]
    with host_load.quiet_or_skip("naming a 1 ms straggler"):
        assert top["title"].startswith("Rank 1 is a straggler") and comm["slow_rank"] == 1, top
    assert "input pipeline" in top["summary"], top["summary"]
    assert 0 < comm["owned_per_step_s"] <= comm["lost_per_step_s"]
    crowded = [f for f in rep["findings"] if f["cause"] == "contention" and f["title"].startswith("Other processes")]
    if crowded:
        assert top["severity"] == "moderate" and top["confidence"] == "low", top
    else:
        assert top["severity"] == "high", top
    with host_load.quiet_or_skip("the 1 ms straggler's own extra time"):
        assert comm["owned_per_step_s"] == pytest.approx(extra, rel=0.3), comm["slow_extra"]


@pytest.mark.slow
def test_torchrun_balanced_job_stays_quiet(tmp_path):
    """Both ranks do the same 20 ms of work per step: no straggler above 'none', whoever jitters last. On a
    host crowded by other processes one rank can really fall behind (they deschedule it more): then the
    finding is at most moderate, with low confidence, and the other load is named — never HIGH."""
    run, _ = _torchrun(tmp_path, "balanced", 1, 0.0, 0.02, 40)
    rep = report_json(run)
    assert rep["communication"] is not None and len(rep["communication"]["ranks"]) == 2
    loud = [f for f in rep["findings"] if f["cause"] == "straggler" and f["severity"] != "none"]
    crowded = [f for f in rep["findings"] if f["cause"] == "contention" and f["title"].startswith("Other processes")]
    if crowded:
        assert all(f["severity"] == "moderate" and f["confidence"] == "low" and "quiet host" in f["summary"]
                   for f in loud), loud
    else:
        assert not loud, loud
        assert any(f["cause"] == "straggler" and "balanced" in f["title"] for f in rep["findings"])


@pytest.mark.slow
def test_straggler_on_a_crowded_host_is_moderate_and_says_so(tmp_path):
    """The planted 20 ms straggler with processes outside the job spinning every core: still named, but a
    wait whose cause may be the other load is not a HIGH verdict on the rank's code."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        run, _ = _torchrun(tmp_path, "crowded", 1, 0.02, 0.0, 40)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    rep = report_json(run)
    assert any(f["cause"] == "contention" and f["title"].startswith("Other processes") for f in rep["findings"])
    (f,) = [f for f in rep["findings"] if f["cause"] == "straggler"]
    assert "Rank 1" in f["title"] and f["severity"] == "moderate" and f["confidence"] == "low"
    assert "quiet host" in f["summary"]


@pytest.mark.slow
def test_mp_spawn_ranks_collectives_and_unchanged_results(tmp_path):
    """mp.spawn sets no RANK variable: the rank comes from init_process_group. DDP's buckets and explicit
    collectives are all recorded, and the timed comm hook leaves the trained weights bit for bit equal."""
    from gpusleuth.sources.rundir import load_run

    hooked, _ = _record(tmp_path, "hooked", sys.executable, DIST / "ddp_spawn.py", tmp_path / "a.json", 29613, 12)
    plain, _ = _record(tmp_path, "plain", sys.executable, DIST / "ddp_spawn.py", tmp_path / "b.json", 29614, 12,
                       env={"GPUSLEUTH_DDP_HOOK": "0"})
    a, b = (json.loads((tmp_path / n).read_text()) for n in ("a.json", "b.json"))
    assert a["params"] == b["params"] and a["reduced"] == 1.0

    run = load_run(hooked)
    ranked = {p.rank: p for p in run.processes.values() if p.rank is not None}
    assert set(ranked) == {0, 1} and all(p.world_size == 2 for p in ranked.values())
    comm = run.comm
    for rank, proc in ranked.items():
        mine = comm.filter(comm["pid"] == proc.pid)
        ops = mine["op"].tolist()
        # 12 DDP buckets (one per step: a small model is one bucket), then the explicit calls in order
        assert ops.count("all_reduce") == 13 and ops[-2:] == ["broadcast", "barrier"], ops
        assert (mine["seq"] == np.arange(len(mine))).all()
        assert (mine["end_ns"] >= mine["start_ns"]).all()
        assert mine["bytes"][ops.index("broadcast")] == 4000
    # without the timed hook DDP reduces in C++: only the explicit collectives are seen
    assert load_run(plain).comm["op"].tolist().count("all_reduce") == 2
    # ... all after the loop, so no step holds one: the ranks' waiting is unmeasured, and the report says so
    # instead of calling them balanced
    rep = report_json(plain)
    assert not [f for f in rep["findings"] if f["cause"] == "straggler"], rep["findings"]
    missing = [m for m in rep["not_evaluated"] if m["rule"] == "stragglers"]
    assert missing and "collectives inside the training steps" in missing[0]["needs"]


@pytest.mark.slow
def test_a_rank_that_computes_is_told_from_one_that_sleeps(tmp_path):
    """The slow rank's extra 30 ms per batch is CPU work in its (main-process) loader: the straggler is
    named, its wait measured, and what it does with the time is host work, not storage."""
    extra, steps = 0.03, 40
    run, _ = _record(tmp_path, "compute", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", 2,
                     "--master_addr", "127.0.0.1", "--master_port", free_port(), DIST / "ddp_torchrun.py",
                     1, extra, 0.0, steps, 192, "compute")
    rep = report_json(run)
    top = rep["findings"][0]
    assert top["cause"] == "straggler" and top["title"].startswith("Rank 1 "), rep["findings"][:2]
    assert abs(rep["communication"]["lost_per_step_s"] - extra) <= 0.25 * extra
    assert "host work in its loop" in top["summary"] and "before each forward" in top["fix"]
    busy = next(e["value"] for e in top["evidence"] if e["name"].startswith("its main thread on a CPU"))
    assert busy >= 15, busy


@pytest.mark.slow
def test_fsdp2_gathers_and_scatters_are_timed_and_the_straggler_named(tmp_path, host_load):
    """FSDP2 on gloo/CPU: its per-layer all-gathers and reduce-scatters go through torch.distributed (under
    the names torch ≥ 2.10 gives them: all_gather_single, reduce_scatter_single), so the straggler sleeping
    20 ms per step is named and the other rank's wait measured within 25 %."""
    if not hasattr(pytest.importorskip("torch.distributed.fsdp"), "fully_shard"):
        pytest.skip("this torch has no FSDP2 (fully_shard)")
    from gpusleuth.sources.rundir import load_run

    extra, steps = 0.02, 30
    run, _ = _record(tmp_path, "fsdp", sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", 2,
                     "--master_addr", "127.0.0.1", "--master_port", free_port(), DIST / "fsdp_torchrun.py",
                     1, extra, steps)
    comm = load_run(run).comm
    ops = comm["op"].tolist()
    gathers = sum(ops.count(n) for n in ("all_gather_single", "all_gather_into_tensor", "_all_gather_base"))
    scatters = sum(ops.count(n) for n in ("reduce_scatter_single", "reduce_scatter_tensor", "_reduce_scatter_base"))
    assert gathers >= 2 * 3 * steps and scatters >= 2 * 3 * steps, sorted(set(ops))  # 2 ranks × 3 layers
    assert (comm["bytes"][comm["op"] != "barrier"] > 0).all()  # FSDP2 passes its tensors by keyword too
    rep = report_json(run)
    top = rep["findings"][0]
    assert top["cause"] == "straggler" and top["title"].startswith("Rank 1 "), rep["findings"][:2]
    assert rep["communication"]["step_coverage"] == 1.0
    # the wait is the planted 20 ms plus whatever the host adds: within 25 % where the ranks had the cores
    # (failed once at load 4 while other test runs shared the 2 cores)
    with host_load.quiet_or_skip("the other rank's wait within 25 % of the planted 20 ms"):
        assert abs(rep["communication"]["lost_per_step_s"] - extra) <= 0.25 * extra, rep["communication"]


def test_two_rank_traces_get_a_cross_rank_verdict():
    """HTA's 2-rank trace_filter traces (real H100 runs): the ranks compared by collective time."""
    files = sorted((TRACES / "trace_filter").glob("*.json.gz"))
    res = gpusleuth("report", *files, "--json")
    assert res.returncode == 0, res.stderr
    rep = json.loads(res.stdout)
    comm = rep["communication"]
    assert [r["rank"] for r in comm["ranks"]] == [0, 1]
    # rank 1 computes longer, so rank 0 spends longer in its collectives, waiting for it
    assert comm["slow_rank"] == 1 and comm["ranks"][0]["wait_s"] > 0 == comm["ranks"][1]["wait_s"]
    verdict = [f for f in rep["findings"] if f["cause"] == "straggler"]
    assert len(verdict) == 1 and verdict[0]["severity"] == "none", verdict
    text = gpusleuth("report", *files)
    assert "Communication across 2 ranks" in text.stderr + text.stdout


def _scaling(tmp_path, base_s, hidden):
    """1 rank vs 2 ranks of one job, compared: the scaling row of `compare --json`."""
    one, _ = _torchrun(tmp_path, f"one-{hidden}", 1, 0.0, base_s, 40, nproc=1, hidden=hidden)
    two, _ = _torchrun(tmp_path, f"two-{hidden}", 1, 0.0, base_s, 40, nproc=2, hidden=hidden)
    res = gpusleuth("compare", one, two, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    text = gpusleuth("compare", one, two)
    scaling = json.loads(res.stdout)["scaling"]
    assert len(scaling) == 1 and scaling[0]["from"] == 1 and scaling[0]["to"] == 2
    return scaling[0], text.stdout


@pytest.mark.slow
def test_scaling_that_costs_more_than_it_saves_gets_the_verdict(tmp_path, host_load):
    """A wide MLP on gloo with no other per-rank work: the second rank adds an all-reduce of 3 MB a step on
    a 2-core host, so the job gets little or no faster while it holds twice the processes — the cost per
    sample rises faster than the time falls, and compare says so.

    The cost and the verdict follow from the measured speedup whatever it is — 2 processes' cost per sample
    (2/speedup − 1) outpaces the time saved (1 − 1/speedup) exactly below ×1.5 — asserted always, and so is
    compare printing that verdict once. That this job's speedup is under ×1.5 needs both sizes timed on free
    cores; where other processes took cores (×1.88 seen at load 3) a miss skips saying the load it
    measured; on a quiet host it fails."""
    s, text = _scaling(tmp_path, 0.0, 8192)
    assert s["cost_change"] == pytest.approx(2 / s["speedup"] - 1, rel=1e-6)  # unpriced: processes ÷ throughput
    assert s["time_change"] == pytest.approx(1 / s["speedup"] - 1, rel=1e-6)
    assert s["cost_outpaces_time"] is (s["speedup"] < 1.5), s
    assert s["per_1k_unit"] == "process-seconds per 1k samples"
    if s["cost_outpaces_time"]:
        assert "cost faster than they cut time" in s["verdict"] or "stay at 1" in s["verdict"], s["verdict"]
    else:
        assert "time falls faster than cost rises" in s["verdict"], s["verdict"]
    with host_load.quiet_or_skip("the 1-to-2-rank speedup of a communication-bound job"):
        assert s["speedup"] < 1.5, s
    assert "process-seconds per 1k samples" in " ".join(text.split())
    assert " ".join(text.split()).count(" ".join(s["verdict"].split()[:6])) == 1
    page = tmp_path / "cmp.html"
    assert gpusleuth("compare", tmp_path / "one-8192", tmp_path / "two-8192", "--html", page).returncode == 0
    assert "<h2>Scaling</h2>" in page.read_text() and s["verdict"].split(":")[0] in page.read_text()


@pytest.mark.slow
def test_scaling_that_pays_stays_quiet(tmp_path):
    """Every rank waits 50 ms a step for its own input (the work that scales out): 2 ranks run nearly twice
    as fast for nearly the same cost per sample — no verdict against scaling."""
    s, text = _scaling(tmp_path, 0.05, 192)
    assert s["speedup"] > 1.6, s
    assert s["cost_outpaces_time"] is False
    assert s["efficiency"] == pytest.approx(s["speedup"] / 2, rel=1e-6)
    assert "time falls faster than cost rises" in " ".join(text.split())

    # Priced at $3.60 an hour for the machine (a CPU run's price is its machine's): both sizes ran on this
    # one machine, so $ per 1k samples is 1000 s ÷ 1000 ÷ steady throughput at each size — the start-up
    # each run also paid for stays out of the scaling verdict.
    one, two = tmp_path / "one-192", tmp_path / "two-192"
    res = gpusleuth("compare", one, two, "--json", "--price-per-gpu-hour", "3.6")
    priced = json.loads(res.stdout)
    thr = [r["metrics"]["throughput"] for r in priced["runs"]]
    p = priced["scaling"][0]
    assert p["per_1k_unit"] == "$ per 1k samples"
    assert p["per_1k"] == pytest.approx([1 / thr[0], 1 / thr[1]], rel=1e-6)
    assert p["cost_change"] == pytest.approx(p["time_change"], rel=1e-6) and p["cost_outpaces_time"] is False
    # the distributed run's report prices its communication in process-hours, each rank half the machine
    res = gpusleuth("report", two, "--json", "--price-per-gpu-hour", "3.6")
    comm = json.loads(res.stdout)["communication"]
    assert comm["hours_unit"] == "process-hours" and comm["comm_gpu_hours"] > 0
    assert comm["comm_dollars"] == pytest.approx(comm["comm_gpu_hours"] * 1.8, rel=1e-6)
    assert "process-h in collectives" in " ".join(gpusleuth("report", two).stdout.split())


# what each launcher sets for rank r of 2, one per node: torch's own variables, Slurm's (srun), Open MPI's
LAUNCHER_VARS = {
    "torch": lambda r: {"RANK": r, "WORLD_SIZE": 2, "LOCAL_RANK": 0},
    "slurm": lambda r: {"SLURM_PROCID": r, "SLURM_NTASKS": 2, "SLURM_LOCALID": 0, "SLURM_NODEID": r,
                        "SLURM_JOB_ID": 4242},
    "ompi": lambda r: {"OMPI_COMM_WORLD_RANK": r, "OMPI_COMM_WORLD_SIZE": 2, "OMPI_COMM_WORLD_LOCAL_RANK": 0,
                       "OMPI_COMM_WORLD_NODE_RANK": r},
}
_ANY_RANK_VAR = [v for f in LAUNCHER_VARS.values() for v in f(0)] + ["GROUP_RANK", "TORCHELASTIC_RUN_ID"]


def _per_rank_runs(tmp_path, slow_rank, extra, base, steps, launcher="torch"):
    """One `gpusleuth run` per rank, as `srun`/`mpirun` start a job: each rank its own run directory."""
    port = free_port()
    procs, outs = [], []
    for rank in (0, 1):
        out = tmp_path / f"node{rank}"
        env = {k: v for k, v in os.environ.items() if k not in _ANY_RANK_VAR}
        env.update({k: str(v) for k, v in LAUNCHER_VARS[launcher](rank).items()},
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--out", str(out), "--no-report",
                                       "--", sys.executable, str(DIST / "ddp_torchrun.py"), str(slow_rank),
                                       str(extra), str(base), str(steps)],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    for p in procs:
        _, err = p.communicate(timeout=240)
        assert p.returncode == 0, err[-3000:]
    return outs


@pytest.mark.slow
def test_one_run_directory_per_rank_is_reported_as_one_job(tmp_path):
    """Two directories (one per rank, started like a scheduler does) reported together: both ranks' steps,
    the planted straggler named with the other rank's wait within 25 % of the planted 20 ms; clocks aligned
    on the shared gloo collectives — and still aligned when one directory's clock is skewed by 250 ms."""
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.jobdirs import merge_runs
    from gpusleuth.sources.rundir import load_run

    outs = _per_rank_runs(tmp_path, 1, 0.02, 0.01, 60)
    rep = report_json_multi(*outs)
    assert rep["outcomes"]["world_size"] == 2
    assert sorted(r["steps"] for r in rep["outcomes"]["ranks"]) == [60, 60]
    top = [f for f in rep["findings"] if f["severity"] != "none"][0]
    assert top["cause"] == "straggler" and top["title"].startswith("Rank 1 ")
    lost_ms = next(e["value"] for e in top["evidence"] if e["name"] == "other ranks' wait for it")
    assert lost_ms == pytest.approx(20.0, rel=0.25)

    # A node whose clock runs 250 ms ahead: every one of its timestamps moves, the measured offset undoes it.
    runs = [load_run(o) for o in outs]
    skew = 250_000_000
    for name in ("steps", "comm", "procs"):
        t = getattr(runs[1], name)
        for c in ("start_ns", "end_ns", "t_ns"):
            if c in t:
                t.columns[c] = np.where(t[c] > 0, t[c] + skew, t[c])
    job = merge_runs(runs)
    node = job.meta["nodes"][1]
    assert node["clock"].startswith("aligned")
    assert abs(node["clock_offset_ns"] - skew) < 2_000_000  # NTP-grade: within 2 ms
    f = [f for f in build_report(job).findings if f.cause == "straggler"][0]
    assert f.title.startswith("Rank 1 ") and f.severity != "none"

    # The job's CPU set against the host samples (the first directory's): both directories ran on this machine,
    # so both ranks' processes — each recorder averaged over its own sampling times; pooled, their interleaved
    # times halved it. Named as two machines, only the first directory's rank ran where the host was sampled.
    from gpusleuth.analysis.bundle import analyze

    alone = [analyze(load_run(o), display=False).host.job_cores_steps for o in outs]
    both = analyze(merge_runs([load_run(o) for o in outs]), display=False).host
    assert both.host_ranks == [0, 1] and both.job_processes >= 2
    assert both.job_cores_steps == pytest.approx(sum(alone), rel=0.2), (both.job_cores_steps, alone)
    apart = [load_run(o) for o in outs]
    apart[1].meta["hostname"] = "another-node"
    assert not any("host samples" in x for x in merge_runs([load_run(o) for o in outs]).losses)  # one machine's
    assert any("host samples" in x for x in merge_runs(apart).losses)
    first = analyze(merge_runs(apart), display=False).host
    assert first.host_ranks == [0]
    assert first.job_cores_steps == pytest.approx(alone[0], rel=0.2), (first.job_cores_steps, alone)

    # The same rank in two directories is not one job: a sentence naming the directory, no merge.
    import shutil

    shutil.copytree(outs[0], tmp_path / "again")
    res = gpusleuth("report", outs[0], tmp_path / "again")
    assert res.returncode != 0 and "Traceback" not in res.stderr
    assert "holds rank 0" in res.stderr and "not the nodes of one job" in " ".join(res.stderr.split())


@pytest.mark.slow
@pytest.mark.parametrize("launcher", ["slurm", "ompi"])
def test_scheduler_variables_give_each_rank_its_identity(tmp_path, launcher):
    """Ranks started by srun or mpirun (their variables only, the script passes the rank to torch): each
    run directory knows its rank, local rank, node and world size, and the two report as one job."""
    from gpusleuth.sources.rundir import load_run

    outs = _per_rank_runs(tmp_path, 1, 0.02, 0.01, 30, launcher=launcher)
    for node, out in enumerate(outs):
        ranked = [p for p in load_run(out).processes.values() if p.rank is not None]
        assert [(p.rank, p.local_rank, p.node_rank, p.world_size) for p in ranked] == [(node, 0, node, 2)]
        assert ranked[0].job_id == ("4242" if launcher == "slurm" else None)
    rep = report_json_multi(*outs)
    top = [f for f in rep["findings"] if f["severity"] != "none"][0]
    assert top["cause"] == "straggler" and top["title"].startswith("Rank 1 ")
    assert abs(rep["communication"]["lost_per_step_s"] - 0.02) <= 0.25 * 0.02


def report_json_multi(*dirs):
    res = gpusleuth("report", *dirs, "--json")
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout)
