"""Hangs and pauses caught live (issue 33): the recorder's stall watch under `gpusleuth run -- torchrun …`.

Real 2-rank gloo jobs on CPU (tests/fixtures/hangs/hang_job.py, ~45 ms steps, so the threshold is its 10 s
floor): rank 1 waits on a lock before the all-reduce while rank 0 waits inside it. Checked: the stall is said on
the terminal while the job is stuck, within the threshold (+ the 1 s check and the hook's 0.5 s flush) of the
last progress; the culprit is rank 1 at the lock's file:line and rank 0 waits in all_reduce; every process's
stacks (both ranks and torchrun's agent) are in the run directory — through py-spy, and through the hook's
faulthandler signal with py-spy switched off; the Prometheus gauges read the stall while it lasts; a pause that
ends is reported as recovered with its length; a healthy job with a 13 s evaluation raises nothing, nor one
with a 13 s evaluation and a 13 s checkpoint on a host loaded on every core.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import FIXTURES, free_port, gpusleuth, run_multirank

JOB = FIXTURES / "hangs" / "hang_job.py"
HANG_LINE = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if "# HANG:" in line)
WORKER_LINE = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if "# WORKER:" in line)
LOOP_LINE = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if "# LOOP:" in line)
MISMATCH_LINE = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if "# MISMATCH:" in line)
ALL_REDUCE_LINE = next(i for i, line in enumerate(JOB.read_text().splitlines(), 1) if "dist.all_reduce(" in line)
THRESHOLD_S = 10.0
SLACK_S = 3.0  # the watch checks once a second; the hook flushes step lines every 0.5 s; a busy 2-core host


def _cmd(out: Path, *job: str, flags: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "gpusleuth", "run", "--out", str(out), "--no-report", "--no-gpu", *flags, "--",
            sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), str(JOB), *job]


def _records(run: Path) -> list[dict]:
    path = run / "stalls" / "stalls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _report(run: Path) -> dict:
    """The report's JSON, built in this process (the CLI's `report --json` costs an interpreter a test)."""
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.rundir import load_run

    return build_report(load_run(run), display=False).to_dict()


def _hang_finding(run: Path) -> dict:
    rep = _report(run)
    found = [f for f in rep["findings"] if f["cause"] == "hang"]
    assert len(found) == 1, [f["title"] for f in rep["findings"]]
    return found[0]


def _check_stacks(run: Path, rec: dict, via: str) -> None:
    """Every rank's stacks (and the agent's), taken ``via``; rank 1's at the lock, rank 0's in all_reduce."""
    ranks = {p["rank"]: p["pid"] for p in rec["processes"]}
    assert set(ranks) == {0, 1}, rec["processes"]
    taken = {s["pid"]: s for s in rec["stacks"]}
    assert set(ranks.values()) < set(taken), (ranks, taken)  # both ranks + torchrun's agent
    assert all(s["via"] == via and s["path"] and not s["error"] for s in taken.values()), taken
    r1 = (run / taken[ranks[1]]["path"]).read_text()
    r0 = (run / taken[ranks[0]]["path"]).read_text()
    assert f"hang_job.py:{HANG_LINE}" in r1 or f'hang_job.py", line {HANG_LINE}' in r1, r1
    assert "all_reduce" in r0 and ("distributed_c10d.py" in r0), r0


@pytest.mark.process
@pytest.mark.slow
def test_rank_blocked_before_all_reduce_is_named_live_and_killed_on_request(tmp_path):
    """py-spy path, --on-stall kill: rank 1 holds for 120 s; the job is ended once the stacks are saved."""
    if not shutil.which("py-spy"):
        pytest.skip("py-spy is not installed (pip install 'gpusleuth[stacks]')")
    run = tmp_path / "blocked"
    port = free_port()
    proc = subprocess.Popen(_cmd(run, "block", "40", "120", flags=("--on-stall", "kill", "--grace", "3",
                                                                     "--prometheus", str(port))),
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    said = threading.Event()
    scraped: dict[str, str] = {}

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "STALL 1" in line and not said.is_set():
                said.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert said.wait(90), "".join(lines)[-3000:]
        said_at = time.time_ns()
        try:  # the gauges while the job is stuck (the kill follows within --grace)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                scraped["text"] = r.read().decode()
        except OSError as exc:
            scraped["error"] = str(exc)
        proc.wait(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(5)
    stall = next(line for line in lines if "STALL 1" in line)
    assert re.search(rf"rank 1 is in \S*hang_job\.py:{HANG_LINE}, outside any collective", stall), stall
    assert f"rank 0 waits in all_reduce at " in stall and f"hang_job.py:{ALL_REDUCE_LINE}" in stall, stall
    assert "Flight Recorder" not in stall, stall  # the job kept no ring
    (rec,) = [r for r in _records(run) if r["kind"] == "stall"]
    assert rec["flight"] == [], rec["flight"]
    latency = (rec["seen_ns"] - rec["since_ns"]) / 1e9
    assert THRESHOLD_S <= latency <= THRESHOLD_S + SLACK_S, latency
    assert rec["threshold_s"] == THRESHOLD_S
    assert said_at < rec["since_ns"] + 60e9  # said while the job was still stuck (it holds 120 s)
    _check_stacks(run, rec, "py-spy")
    assert "error" not in scraped, scraped
    text = scraped["text"]
    assert re.search(r'gpusleuth_stalled\{[^}]*rank="1"[^}]*\} 1\.0', text), text[-2000:]
    stall_s = float(re.search(r"gpusleuth_stall_seconds\{[^}]*\} (\S+)", text).group(1))
    assert stall_s >= THRESHOLD_S, stall_s
    assert re.search(r"gpusleuth_stalls_total\{[^}]*\} 1\.0", text)
    meta = json.loads((run / "meta.json").read_text())
    assert meta["stopped_by"] == "--on-stall kill", meta.get("stopped_by")
    assert [r["kind"] for r in _records(run)] == ["stall", "ended"]
    f = _hang_finding(run)
    assert f["severity"] == "high" and f["confidence"] == "high", f
    assert f"hang_job.py:{HANG_LINE}" in f["title"] and "rank 1" in f["title"], f["title"]
    assert "until the job ended, still stuck" in f["title"] and "--on-stall kill" in f["title"]
    ev = {e["name"]: e["value"] for e in f["evidence"]}
    assert ev["processes whose stacks were taken"] >= 3
    assert ev["rank 0 waits in all_reduce at"].endswith(f"hang_job.py:{ALL_REDUCE_LINE}")
    # both ranks stopped from their last step to the end: process-hours ≈ 2 × the stall's length
    assert ev["process-hours lost"] == pytest.approx(2 * ev["longest stall"] / 3600, rel=0.15)
    # priced against the run's wall time (the hang lies after the last step: the loop's span would make it ×1000)
    gain = f["estimated_gain"]
    assert gain["seconds_per_run"] == pytest.approx(ev["longest stall"], rel=0.05) and gain["speedup"] < 10, gain


@pytest.mark.process
@pytest.mark.slow
def test_pause_that_ends_is_recovered_with_faulthandler_stacks(tmp_path):
    """py-spy switched off: the hook's faulthandler signal gives the stacks; rank 1's 15 s hold ends, the
    stall is reported as recovered with its length, and the job's exit is untouched."""
    run = tmp_path / "paused"
    # the job keeps torch's Flight Recorder (its own environment): the watch reads every rank's ring at the stall
    env = dict(os.environ, GPUSLEUTH_PYSPY="0", TORCH_FR_BUFFER_SIZE="64")
    res = subprocess.run(_cmd(run, "block", "30", "15"), capture_output=True, text=True, timeout=150, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert re.search(rf"STALL 1: .*rank 1 is in \S*hang_job\.py:{HANG_LINE}, outside any collective",
                     res.stderr), res.stderr[-3000:]
    # 10 steps of 2 parameters' all-reduces: rank 0 is in #21, rank 1 stopped after #20
    assert ("Flight Recorder: rank 1 never entered all_reduce #21 (rank 1's last: all_reduce #20); rank 0 "
            "entered it and wait") in res.stderr, res.stderr[-3000:]
    assert "stall 1 recovered" in res.stderr
    recs = _records(run)
    assert [r["kind"] for r in recs] == ["stall", "resumed"]
    rec, resumed = recs
    _check_stacks(run, rec, "faulthandler")
    assert len(rec["flight"]) == 2 and all(f["path"] and not f["error"] for f in rec["flight"]), rec["flight"]
    assert rec["flight_s"] < 3, rec["flight_s"]
    length = (resumed["t_ns"] - rec["since_ns"]) / 1e9
    assert 15 <= length <= 15 + SLACK_S, length
    rep = _report(run)
    (f,) = [x for x in rep["findings"] if x["cause"] == "hang"]
    assert f["severity"] == "moderate", f
    # the pause is the hang finding's, not 15 s of straggling averaged into the ranks' waits (it read 1415 %
    # of a step before the collectives that sat through a stall were left out of the matching)
    # and not a 15 s outlier in the steady step time: it is badput of its own, "stalled"
    assert rep["outcomes"]["throughput"]["step_time_cv"] < 1, rep["outcomes"]["throughput"]
    assert rep["outcomes"]["goodput"]["badput_s"]["stalled"] == pytest.approx(length, abs=1.5)
    for s in (x for x in rep["findings"] if x["cause"] == "straggler"):
        waits = [e["value"] for e in s["evidence"] if e["name"] in ("wait for the slowest rank",
                                                                    "of their step")]
        assert waits and max(waits) < 50, s
    assert "recovered" in f["title"] and f"hang_job.py:{HANG_LINE}" in f["title"], f["title"]
    assert {e["name"]: e["value"] for e in f["evidence"]}["longest stall"] == pytest.approx(length, abs=0.2)
    assert {e["name"]: e["value"] for e in f["evidence"]}["flight recorder"].startswith(
        "rank 1 never entered all_reduce #21"), f["evidence"]


@pytest.mark.process
@pytest.mark.slow
def test_dataloader_worker_stuck_on_a_lock_is_found_through_its_rank(tmp_path):
    """Rank 1's DataLoader worker waits on a lock for 13 s: rank 1 waits for its batch (outside any collective),
    rank 0 in the all-reduce; the worker's own stack (py-spy reads it like any process) names its line."""
    if not shutil.which("py-spy"):
        pytest.skip("py-spy is not installed (pip install 'gpusleuth[stacks]')")
    run = tmp_path / "loader"
    res = subprocess.run(_cmd(run, "loader", "30", "13"), capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr[-3000:]
    rec = _records(run)[0]
    workers = [s for s in rec["stacks"] if s["role"] == "dataloader_worker"]
    ranks = {p["rank"]: p["pid"] for p in rec["processes"]}
    assert {w["ppid"] for w in workers} == set(ranks.values()), (workers, ranks)  # one worker per rank
    assert all(w["via"] == "py-spy" for w in workers), workers
    stuck = next(w for w in workers if w["ppid"] == ranks[1])
    assert f"hang_job.py:{WORKER_LINE}" in (run / stuck["path"]).read_text()
    f = _hang_finding(run)
    assert f"rank 1 is in " in f["title"] and f"hang_job.py:{LOOP_LINE}, outside any collective" in f["title"], f
    assert f"waiting for its DataLoader worker(s) at " in f["title"] and f"hang_job.py:{WORKER_LINE}" in f["title"]
    assert "recovered" in f["title"]


@pytest.mark.process
@pytest.mark.slow
def test_mismatched_collective_is_named_as_one(tmp_path):
    """At step 10 rank 1 broadcasts where rank 0 all-reduces: gloo hangs both. Each rank waits inside a
    collective, not the same one: the verdict says so with both lines (faulthandler; --on-stall kill ends it)."""
    run = tmp_path / "mismatch"
    env = dict(os.environ, GPUSLEUTH_PYSPY="0")
    res = subprocess.run(_cmd(run, "mismatch", "30", flags=("--on-stall", "kill", "--grace", "3")),
                         capture_output=True, text=True, timeout=150, env=env)
    assert "STALL 1" in res.stderr, res.stderr[-3000:]
    assert re.search(rf"mismatched collectives: rank 0 in all_reduce at \S*hang_job\.py:{ALL_REDUCE_LINE}; "
                     rf"rank 1 in broadcast at \S*hang_job\.py:{MISMATCH_LINE}", res.stderr), res.stderr[-3000:]
    assert [r["kind"] for r in _records(run)] == ["stall", "ended"]
    f = _hang_finding(run)
    assert f["severity"] == "high" and "mismatched collectives" in f["title"] and "broadcast" in f["title"], f


@pytest.mark.process
@pytest.mark.slow
def test_one_run_directory_per_rank_merges_into_one_verdict(tmp_path):
    """One `gpusleuth run` per rank, as srun/mpirun start a job across nodes: each recorder sees only its own
    rank — rank 0's only a rank waiting in all_reduce, rank 1's a rank outside any collective — and
    `gpusleuth report node0 node1` makes the one verdict: rank 1 at the lock, rank 0 in all_reduce."""
    port = str(free_port())
    procs, outs = [], []
    for rank in (0, 1):
        out = tmp_path / f"node{rank}"
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port, OMP_NUM_THREADS="1", GPUSLEUTH_PYSPY="0")
        procs.append(subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--out", str(out), "--no-report",
                                       "--no-gpu", "--", sys.executable, str(JOB), "block", "30", "13"],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        outs.append(out)
    errs = [p.communicate(timeout=150)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert "rank 0 waits in all_reduce" in errs[0] and "not among the processes recorded here" in errs[0], errs[0]
    assert re.search(rf"rank 1 is in \S*hang_job\.py:{HANG_LINE}, outside any collective", errs[1]), errs[1]
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.jobdirs import load_job  # what `gpusleuth report node0 node1` reads them with

    rep = build_report(load_job(outs), display=False).to_dict()
    (f,) = [x for x in rep["findings"] if x["cause"] == "hang"]
    assert re.search(rf"rank 1 is in \S*hang_job\.py:{HANG_LINE}, outside any collective", f["title"]), f["title"]
    assert "rank 0 waits in all_reduce at" in f["summary"] and "recovered" in f["title"], f


@pytest.mark.process
@pytest.mark.slow
def test_long_evaluation_is_not_a_stall(tmp_path):
    """13 s of evaluation (model.eval() … model.train(): the hook's eval phase), above the 10 s threshold: no
    alarm. After the loop the job works 13 s outside any phase and exits 0: that one is seen live (it cannot be
    told from a hang then), and the report says it was work after the loop, severity none — not a hang."""
    run = tmp_path / "eval"
    res = subprocess.run(_cmd(run, "eval", "30", "13"), capture_output=True, text=True, timeout=150)
    assert res.returncode == 0, res.stderr[-3000:]
    loop_done = int(next(line.split()[1] for line in res.stdout.splitlines() if line.startswith("LOOP_DONE")))
    recs = _records(run)
    assert [r["kind"] for r in recs] == ["stall", "ended"], recs
    assert recs[0]["since_ns"] >= loop_done - 1e9, "a stall seen during the evaluation"  # the tail's, not eval's
    assert res.stderr.count("STALL") == 1
    f = _hang_finding(run)
    assert f["severity"] == "none" and "ended normally" in f["title"], f
    rep = _report(run)
    assert not [x for x in rep["findings"] if x["severity"] == "high" and x["cause"] == "hang"]
    status = json.loads((run / "recorder.json").read_text())["stall_watch"]
    assert status["stalls"] == 1 and status["after_s"] is None


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        utime, stime = f.read().rsplit(")", 1)[1].split()[11:13]
    return (int(utime) + int(stime)) / os.sysconf("SC_CLK_TCK")


@pytest.mark.process
@pytest.mark.slow
def test_healthy_job_on_a_loaded_host_raises_no_stall(tmp_path):
    """The host deliberately loaded — one busy-looping process per core, started here at normal priority, for
    the whole run — and a healthy 2-rank job with a 13 s evaluation at step 10 and a 13 s checkpoint to a slow
    store (``torch.save``) at step 20, both above the 10 s threshold: the watch raises nothing, the job's exit
    is untouched and the report has no ``hang`` finding. The burners are checked to have taken CPU (the load was
    real), and the job's phases to have been recorded (they are why nothing was raised)."""
    cores = os.cpu_count() or 2
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(cores)]
    try:
        t0 = time.monotonic()
        run = run_multirank(lambda k: subprocess.run(_cmd(tmp_path / f"busy{k}", "healthy", "30", "13"),
                                                     capture_output=True, text=True, timeout=300))
        wall = time.monotonic() - t0
        burned = sum(_cpu_s(b.pid) for b in burners)
    finally:
        for b in burners:
            b.kill()
        for b in burners:
            b.wait()
    assert run.returncode == 0, run.stderr[-3000:]
    out = next(o for o in sorted(tmp_path.iterdir(), reverse=True) if o.name.startswith("busy"))
    # the burners had a real share of the host: together at least a third of a core for the run's length
    assert burned >= wall / 3, (burned, wall)
    assert "STALL" not in run.stderr, run.stderr[-3000:]
    assert _records(out) == []
    status = json.loads((out / "recorder.json").read_text())["stall_watch"]
    assert status["stalls"] == 0 and status["after_s"] is None, status
    from gpusleuth.sources.rundir import load_run

    names = set(load_run(out).phases["name"].tolist())
    assert {"eval", "checkpoint"} <= names, names
    rep = _report(out)
    assert not [f for f in rep["findings"] if f["cause"] == "hang"], [f["title"] for f in rep["findings"]]


@pytest.mark.process
def test_the_job_keeps_its_own_handler_for_the_stack_signal(tmp_path):
    """The hook's stack buffer is an in-memory file the recorder finds in /proc (nothing in the run directory);
    a job that sets its own handler for the stack signal gets it: the hook lets go and closes the buffer, so
    the recorder never sends that process the signal."""
    code = ("import os, signal, time\n"
            "sig = signal.SIGRTMIN + 6\n"
            "def buffers():\n"
            "    out = []\n"
            "    for n in os.listdir('/proc/self/fd'):\n"
            "        try:\n"
            "            link = os.readlink('/proc/self/fd/' + n)\n"
            "        except OSError:\n"
            "            continue  # the listing's own descriptor, closed already\n"
            "        out += [link] if link.startswith('/memfd:gpusleuth-stacks-sig%d' % sig) else []\n"
            "    return out\n"
            "print('armed', len(buffers()))\n"
            "os.kill(os.getpid(), sig); time.sleep(0.1)\n"
            "print('survived the signal')\n"
            "got = []\n"
            "signal.signal(sig, lambda s, f: got.append(s))\n"
            "print('after', len(buffers()))\n"
            "os.kill(os.getpid(), sig); time.sleep(0.1)\n"
            "print('handled', got == [sig])\n"
            "pid = os.fork()\n"
            "if pid == 0:\n"  # a forked child keeps the job's handler, and gets no buffer of ours
            "    os.kill(os.getpid(), sig); time.sleep(0.1)\n"
            "    print('child handled', got == [sig, sig], len(buffers()), flush=True)\n"
            "    os._exit(0)\n"
            "os.waitpid(pid, 0)\n")
    run = tmp_path / "own"
    res = gpusleuth("run", "--out", run, "--no-report", "--no-gpu", "--", sys.executable, "-c", code)
    assert res.returncode == 0, res.stderr
    for said in ("armed 1", "survived the signal", "after 0", "handled True", "child handled True 0"):
        assert said in res.stdout, res.stdout
    assert "Current thread" not in res.stdout + res.stderr


@pytest.mark.process
def test_stall_after_is_checked_before_the_job_starts(tmp_path):
    for bad in ("0", "-3", "soon", "inf", "nan"):
        res = gpusleuth("run", "--out", tmp_path / f"bad-{bad}", "--stall-after", bad, "--", sys.executable, "-c",
                        "open('started', 'w')", cwd=tmp_path)
        assert res.returncode != 0 and "--stall-after wants seconds above 0, auto or off" in res.stderr, res.stderr
        assert not (tmp_path / "started").exists()
    res = gpusleuth("run", "--out", tmp_path / "off", "--no-report", "--no-gpu", "--stall-after", "off", "--",
                    sys.executable, "-c", "pass")
    assert res.returncode == 0, res.stderr
    assert "stall_watch" not in json.loads((tmp_path / "off" / "recorder.json").read_text())


@pytest.mark.process
def test_a_dump_torch_wrote_is_read(tmp_path):
    """A real Flight Recorder dump (torch's own pickle, stack traces included, as its watchdog writes one): a
    1-rank gloo group with TORCH_FR_BUFFER_SIZE set runs 3 all-reduces and a barrier and dumps its ring; the
    reader takes the ops and sequence numbers from it with its plain-values unpickler."""
    from gpusleuth.sources.flight_recorder import read_dump_file

    dump = tmp_path / "fr_trace_rank_0"
    code = ("import sys, torch, torch.distributed as dist\n"
            "import torch._C._distributed_c10d as c10d\n"
            f"dist.init_process_group('gloo', init_method='tcp://127.0.0.1:{free_port()}', rank=0, world_size=1)\n"
            "t = torch.ones(4)\n"
            "for _ in range(3):\n"
            "    dist.all_reduce(t)\n"
            "dist.barrier()\n"
            "open(sys.argv[1], 'wb').write(c10d._dump_fr_trace())\n"
            "dist.destroy_process_group()\n")
    env = dict(os.environ, TORCH_FR_BUFFER_SIZE="16")
    res = subprocess.run([sys.executable, "-c", code, str(dump)], capture_output=True, text=True, timeout=120,
                         env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    ring = read_dump_file(dump)
    ops = [(e.seq, e.op) for e in ring.entries if e.group == "0"]
    assert ops[-4:] == [(1, "all_reduce"), (2, "all_reduce"), (3, "all_reduce"), (4, "barrier")], ops
    assert ring.groups["0"][0] == 4, ring.groups


SERVER = FIXTURES / "hangs" / "stuck_server.py"
STUCK_LINE = next(i for i, line in enumerate(SERVER.read_text().splitlines(), 1) if "# STUCK:" in line)
LOCK_LINE = next(i for i, line in enumerate(SERVER.read_text().splitlines(), 1) if "# LOCK:" in line)
MODEL_LINE = next(i for i, line in enumerate(SERVER.read_text().splitlines(), 1) if "# MODEL:" in line)
ACCEPT_LINE = next(i for i, line in enumerate(SERVER.read_text().splitlines(), 1) if "# ACCEPT:" in line)


@pytest.mark.process
@pytest.mark.slow
def test_a_server_that_stops_answering_under_load_is_a_stall(tmp_path):
    """`gpusleuth load -- server`: the server's model lock is held 14 s at its 40th request; the requests
    outstanding get nothing back. The stall is said while it lasts, the server's stacks (the hook's
    faulthandler signal) name the stuck line, its end is a recovery, and the report's hang finding has it."""
    port = free_port()
    out = tmp_path / "load"
    env = dict(os.environ, GPUSLEUTH_PYSPY="0")
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/", "--concurrency",
                          "2", "--duration", "22", "--timeout", "30", "--out", str(out), "--no-gpu", "--",
                          sys.executable, str(SERVER), str(port), "14"],
                         capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    said = next((line for line in res.stderr.splitlines() if "STALL 1" in line), None)
    assert said is not None, res.stderr[-3000:]
    assert "the server made no progress on 2 outstanding request(s)" in said, said
    # where the requests are: the handler holding the lock and the one waiting on it, not the accept loop
    # (a handler per connection: the generator's two, and any other client's, such as the engine-metrics probe)
    m = re.search(r"Request handlers at (.*?)\. (?:Other threads|Stacks of)", said)
    handlers = m.group(1) if m else ""
    assert re.search(rf"stuck_server\.py:{STUCK_LINE} \(1 thread\)", handlers), said
    assert re.search(rf"stuck_server\.py:{LOCK_LINE} \(\d+ threads?\)", handlers), said
    assert f"stuck_server.py:{ACCEPT_LINE}" not in handlers, said
    assert "stall 1 recovered" in res.stderr
    recs = _records(out)
    assert [r["kind"] for r in recs] == ["stall", "resumed"], recs
    rec, resumed = recs
    assert THRESHOLD_S <= (rec["seen_ns"] - rec["since_ns"]) / 1e9 <= THRESHOLD_S + SLACK_S, rec
    assert 14 - 1 <= (resumed["t_ns"] - rec["since_ns"]) / 1e9 <= 14 + SLACK_S, (rec, resumed)
    assert rec["stacks"] and all(s["via"] == "faulthandler" and not s["error"] for s in rec["stacks"]), rec["stacks"]
    assert any(f'stuck_server.py", line {STUCK_LINE}' in (out / st["path"]).read_text() for st in rec["stacks"])
    f = _hang_finding(out)
    assert "recovered" in f["title"] and f["severity"] == "moderate", f["title"]
    assert f"stuck_server.py:{STUCK_LINE}" in f["title"] and f"stuck_server.py:{ACCEPT_LINE}" not in f["title"], f


@pytest.mark.process
@pytest.mark.slow
def test_a_server_stall_names_its_handlers_place_not_its_accept_loop(tmp_path):
    """`gpusleuth load -- server`: a model thread takes the server's lock at the 40th request and holds it 9 s;
    every handler (concurrency 2, and any other client's) waits on the lock. The verdict — live and in the report —
    is where the handlers stand (the lock's line), not the main thread's accept loop; the model thread is named beside it."""
    port = free_port()
    out = tmp_path / "load"
    env = dict(os.environ, GPUSLEUTH_PYSPY="0")
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/", "--concurrency",
                          "2", "--duration", "14", "--timeout", "30", "--stall-after", "3", "--no-warmup", "--out",
                          str(out), "--no-gpu", "--", sys.executable, str(SERVER), str(port), "9", "model"],
                         capture_output=True, text=True, timeout=180, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    said = next((line for line in res.stderr.splitlines() if "STALL 1" in line), None)
    assert said is not None, res.stderr[-3000:]
    assert re.search(rf"Request handlers at \S*stuck_server\.py:{LOCK_LINE} \(\d+ threads\)\. ", said), said
    assert re.search(rf"Other threads in its own code: .*stuck_server\.py:{MODEL_LINE} \(1 thread\)", said), said
    f = _hang_finding(out)
    assert re.search(rf"The server paused: pid \d+: request handler\(s\) at \S*stuck_server\.py:{LOCK_LINE} "
                     r"\(\d+ threads\) — stopped for \d+ s and recovered", f["title"]), f["title"]
    assert f"stuck_server.py:{ACCEPT_LINE}" not in f["title"] + f["summary"], f
    ev = {e["name"]: e["value"] for e in f["evidence"]}
    culprit = next(v for k, v in ev.items() if k.endswith("(culprit) at"))
    assert culprit.endswith(f"stuck_server.py:{LOCK_LINE}"), ev
    assert f["confidence"] == "high", f


def _serve(port: int, hold: float) -> subprocess.Popen:
    """``stuck_server.py`` on ``port``, once it accepts connections."""
    import socket

    proc = subprocess.Popen([sys.executable, str(SERVER), str(port), str(hold)])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the test server did not start")


@pytest.mark.process
def test_load_stall_after_flag_sets_the_threshold_over_the_environment(tmp_path):
    """`gpusleuth load --stall-after S` fixes the server watch's threshold (like `gpusleuth run`'s flag) and wins
    over GPUSLEUTH_LOAD_STALL_AFTER: with the environment saying off, --stall-after 2 sees the server's 5 s hold
    as a stall after 2 s; with the environment saying 2, --stall-after off sees none. A bad value is refused
    before a request is sent."""
    bad = gpusleuth("load", "http://127.0.0.1:9/", "--stall-after", "0", "--no-warmup")
    assert bad.returncode != 0 and "gpusleuth load: --stall-after wants seconds above 0, auto or off" in bad.stderr, \
        bad.stderr
    said = {}
    for flag, env in (("2", "off"), ("off", "2")):
        port = free_port()
        server = _serve(port, 5)
        try:
            res = gpusleuth("load", f"http://127.0.0.1:{port}/", "--concurrency", "2", "--duration", "8", "--timeout",
                            "20", "--no-warmup", "--stall-after", flag, env={"GPUSLEUTH_LOAD_STALL_AFTER": env},
                            timeout=90)
        finally:
            server.kill()
            server.wait()
        assert res.returncode == 0, res.stderr[-3000:]
        said[flag] = res.stderr
    line = next((x for x in said["2"].splitlines() if "STALL 1" in x), None)
    assert line is not None and "threshold 2 s" in line, said["2"][-3000:]
    assert re.search(r"outstanding request\(s\) since \S+ \([23] s,", line), line  # seen 2 s after, not 10
    assert "stall 1 recovered" in said["2"]
    assert "STALL" not in said["off"], said["off"][-3000:]


def test_flight_recorder_flag_sets_the_ring_unless_the_job_has_one(tmp_path):
    """`--flight-recorder[=N]` puts TORCH_FR_BUFFER_SIZE in the job's environment, and keeps NCCL's watchdog from
    writing dump files it did not write before (TORCH_NCCL_DUMP_ON_TIMEOUT=0); a job that sets its own ring, or
    its own dump setting, keeps it. Without the flag nothing of torch's is set."""
    from gpusleuth.recorder.launcher import LaunchOptions, child_env

    with pytest.MonkeyPatch.context() as mp:
        for k in os.environ:
            if k.startswith("TORCH_"):
                mp.delenv(k)
        env = child_env(LaunchOptions(command=["x"], flight_recorder=64), tmp_path)
        assert env["TORCH_FR_BUFFER_SIZE"] == "64" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
        assert not any(k.startswith("TORCH_") for k in child_env(LaunchOptions(command=["x"]), tmp_path))
        mp.setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        env = child_env(LaunchOptions(command=["x"], flight_recorder=2000), tmp_path)
        assert env["TORCH_FR_BUFFER_SIZE"] == "2000" and env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "1"
        mp.setenv("TORCH_NCCL_TRACE_BUFFER_SIZE", "100")  # the job's own ring (torch's older name)
        env = child_env(LaunchOptions(command=["x"], flight_recorder=2000), tmp_path)
        assert "TORCH_FR_BUFFER_SIZE" not in env and env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == "100"
    from gpusleuth.cli.main import build_parser

    parse = build_parser().parse_args
    assert parse(["run", "--flight-recorder"]).flight_recorder == 2000
    assert parse(["run", "--flight-recorder=64"]).flight_recorder == 64
    assert parse(["run"]).flight_recorder is None
    with pytest.raises(SystemExit):
        parse(["run", "--flight-recorder=0"])


@pytest.mark.process
@pytest.mark.slow
def test_flight_recorder_turned_on_at_launch_names_who_never_entered(tmp_path):
    """The job keeps no Flight Recorder of its own; `gpusleuth run --flight-recorder` turns torch's on at launch,
    and at rank 1's stall before the all-reduce the verdict says, from every rank's ring, that rank 1 never entered
    all_reduce #21 — what the job-enabled case says (test_pause_that_ends_is_recovered_with_faulthandler_stacks)."""
    run = tmp_path / "fr"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FR") and k != "TORCH_NCCL_TRACE_BUFFER_SIZE"}
    env["GPUSLEUTH_PYSPY"] = "0"
    res = subprocess.run(_cmd(run, "block", "30", "10", flags=("--flight-recorder", "--stall-after", "4")),
                         capture_output=True, text=True, timeout=150, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert ("Flight Recorder: rank 1 never entered all_reduce #21 (rank 1's last: all_reduce #20); rank 0 "
            "entered it and wait") in res.stderr, res.stderr[-3000:]
    rec = _records(run)[0]
    assert len(rec["flight"]) == 2 and all(f["path"] and not f["error"] for f in rec["flight"]), rec["flight"]
    f = _hang_finding(run)
    assert {e["name"]: e["value"] for e in f["evidence"]}["flight recorder"].startswith(
        "rank 1 never entered all_reduce #21"), f["evidence"]
