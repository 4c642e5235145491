"""ProcessTreeSampler on real processes — no mocks.

The sampler exists to tell the job's main process and its DataLoader workers apart, so the tests build a
real tree (a Python parent with a CPU-burning child and a sleeping child) and check what a worker pool
analysis relies on: every member is found, CPU % is per process and right to within scheduler noise,
parents are right, and processes that vanish or whose PID changes hands never break a sample.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from gpusleuth.recorder.procs import ProcessTreeSampler
from gpusleuth.recorder.schemas import PROCS_SCHEMA, to_batch

pytestmark = [pytest.mark.process,  # starts child processes (tests/conftest.py: lanes)
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")]

# The root starts a burner and a sleeper, prints their PIDs, then starts one more sleeper for each line
# it reads on stdin (printing its PID) — so a test can make the tree grow on cue.
TREE = textwrap.dedent("""
    import subprocess, sys, time
    burn = subprocess.Popen([sys.executable, "-c",
                             "import time\\nend = time.monotonic() + 30\\nwhile time.monotonic() < end: pass"])
    sleep = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    print(burn.pid, sleep.pid, flush=True)
    for _ in sys.stdin:
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        print(p.pid, flush=True)
""")


class Tree:
    def __init__(self):
        self.root = subprocess.Popen([sys.executable, "-c", TREE], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.burn, self.sleep = map(int, self.root.stdout.readline().split())
        self.extra: list[int] = []

    def spawn(self) -> int:
        self.root.stdin.write("\n")
        self.root.stdin.flush()
        pid = int(self.root.stdout.readline())
        self.extra.append(pid)
        return pid

    def close(self):
        for pid in (self.burn, self.sleep, *self.extra):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.root.kill()
        self.root.wait()
        self.root.stdin.close()
        self.root.stdout.close()


@pytest.fixture
def tree():
    t = Tree()
    yield t
    t.close()


def wait_rescan(s: ProcessTreeSampler) -> None:
    """Sleep until the sampler's next tree rescan is due: even with ``rescan_ns=0`` it stretches the
    interval to ~200× the last scan's cost (its ≤0.5 %-of-a-core budget), i.e. tens of ms here."""
    time.sleep(s._rescan_ns / 1e9 + 0.01)


def by_pid(rows: list[dict]) -> dict[int, dict]:
    pids = [r["pid"] for r in rows]
    assert len(pids) == len(set(pids)), "a process reported twice"
    return {r["pid"]: r for r in rows}


def test_tree_members_cpu_parent_and_memory(tree):
    s = ProcessTreeSampler(tree.root.pid, rescan_ns=0)
    first = by_pid(s.sample(time.time_ns()))
    assert set(first) == {tree.root.pid, tree.burn, tree.sleep}
    assert all(math.isnan(r["cpu_pct"]) for r in first.values())  # no previous reading yet
    assert first[tree.root.pid]["ppid"] == os.getpid()
    assert first[tree.burn]["ppid"] == first[tree.sleep]["ppid"] == tree.root.pid
    for r in first.values():
        assert r["rss_bytes"] > 0 and r["num_threads"] >= 1
        assert r["name"].startswith("python")
        assert r["status"] in ("running", "sleeping", "disk-sleep", "waking")
        assert abs(r["start_ns"] - time.time_ns()) < 60e9  # started just now (boot time + start ticks)

    # The burner should show ~100 % of a core. The CI machine is shared (2 cores, other jobs): when it
    # is starved the kernel's own accounting (psutil, bracketing the same interval) says so, and the
    # sampler must agree with that; the 60–110 % range is required of the best of three windows.
    burner = psutil.Process(tree.burn)
    seen, ref = [], []
    for _ in range(3):
        c0, m0 = sum(burner.cpu_times()[:2]), time.monotonic()
        time.sleep(0.5)
        second = by_pid(s.sample(time.time_ns()))
        c1, m1 = sum(burner.cpu_times()[:2]), time.monotonic()
        seen.append(second[tree.burn]["cpu_pct"])
        ref.append(100.0 * (c1 - c0) / (m1 - m0))
        assert abs(seen[-1] - ref[-1]) < 12.0, (seen, ref)  # 10 ms ticks over 0.5 s, plus timing skew
        assert set(second) == set(first)
        assert 0.0 <= second[tree.sleep]["cpu_pct"] < 20.0
        assert 0.0 <= second[tree.root.pid]["cpu_pct"] < 20.0
        assert second[tree.burn]["start_ns"] == first[tree.burn]["start_ns"]  # identity is stable
        if 60.0 <= seen[-1] <= 110.0:
            break
    else:
        if max(ref) >= 60.0:  # the burner did get a core at some point, yet we never said so
            pytest.fail(f"burner cpu_pct {seen} outside 60–110 %, kernel accounting {ref}")
    s.close()


def test_new_child_found_and_vanished_ones_skipped(tree):
    s = ProcessTreeSampler(tree.root.pid, rescan_ns=0)
    s.sample(time.time_ns())
    late = tree.spawn()
    wait_rescan(s)
    rows = by_pid(s.sample(time.time_ns()))
    assert late in rows and rows[late]["ppid"] == tree.root.pid and math.isnan(rows[late]["cpu_pct"])

    # killed but not reaped by its parent: a zombie is not a live member of the tree
    os.kill(tree.sleep, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        with open(f"/proc/{tree.sleep}/stat", "rb") as f:
            if f.read().rpartition(b")")[2].split()[0] == b"Z":
                break
        time.sleep(0.01)
    rows = by_pid(s.sample(time.time_ns()))
    assert tree.sleep not in rows and {tree.root.pid, tree.burn, late} <= set(rows)


def test_reaped_process_between_samples_is_skipped_silently():
    """A tracked process that is gone entirely (its kept-open /proc fd answers ESRCH) just drops out."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        s = ProcessTreeSampler(os.getpid(), rescan_ns=10**12)  # one scan only: the fd path, not discovery
        assert child.pid in by_pid(s.sample(time.time_ns()))
        child.kill()
        child.wait()
        assert not os.path.exists(f"/proc/{child.pid}")
        rows = by_pid(s.sample(time.time_ns()))
        assert child.pid not in rows and os.getpid() in rows
        assert child.pid not in s._procs  # and its fds are closed, not retried every tick
    finally:
        child.kill()
        child.wait()


def test_pid_reuse_while_tracked_starts_over(tree):
    """A tracked PID whose start time changed is another process: dropped, then found anew (NaN CPU).

    Real PID reuse can't be forced in a test; a changed start time is exactly what the sampler would see.
    """
    s = ProcessTreeSampler(tree.root.pid, rescan_ns=0)
    s.sample(time.time_ns())
    time.sleep(0.05)
    assert not math.isnan(by_pid(s.sample(time.time_ns()))[tree.burn]["cpu_pct"])
    s._procs[tree.burn].start_ticks -= 1  # as if the PID now belonged to a younger process
    rows = by_pid(s.sample(time.time_ns()))
    # dropped for this tick or already re-found by the same tick's rescan — never a CPU delta across owners
    assert tree.burn not in rows or math.isnan(rows[tree.burn]["cpu_pct"])
    wait_rescan(s)
    rows = by_pid(s.sample(time.time_ns()))
    assert tree.burn in rows  # the new owner is in the tree, so it is tracked again


def test_reused_pid_of_an_unrelated_process_joins_the_tree(tree):
    """A PID that belonged to a process outside the tree at the last scan and now to a new child of the
    job must be found: the sampler keys its parent map by (PID, /proc inode), not PID alone."""
    s = ProcessTreeSampler(tree.root.pid, rescan_ns=0)
    s.sample(time.time_ns())
    late = tree.spawn()
    # pretend the last scan saw `late` as an unrelated process (other inode, parent init)
    s._ppid[late] = (-1, 1)
    wait_rescan(s)
    assert late in by_pid(s.sample(time.time_ns()))


def test_rows_build_a_record_batch(tree):
    s = ProcessTreeSampler(tree.root.pid, rescan_ns=0)
    rows = s.sample(time.time_ns())
    time.sleep(0.1)
    rows += s.sample(time.time_ns())
    batch = to_batch(rows, PROCS_SCHEMA)
    assert batch.schema == PROCS_SCHEMA and batch.num_rows == 6
    assert sorted(set(batch.column("pid").to_pylist())) == sorted({tree.root.pid, tree.burn, tree.sleep})
    assert all(v is None or v >= 0 for v in batch.column("read_bytes").to_pylist())


def test_schedstat_clocks_say_how_much_a_thread_wanted_a_cpu(tree):
    """The burner wants a CPU all along — it runs, or waits runnable when the host is busy — and the sleeper
    never does: (run + run delay) over the window tells them apart on any host, where the CPU share alone
    reads a starved burner like a sleeper. Cross-checked with the kernel's own per-task clocks via psutil."""
    from gpusleuth.analysis.host_telemetry import cpu_demand
    from gpusleuth.run.model import Table
    import numpy as np

    time.sleep(1.0)  # past the children's interpreter start-up (CPU the sleeper spends before it sleeps)
    s = ProcessTreeSampler(tree.root.pid, rescan_ns=0)
    rows = []
    for _ in range(6):
        rows.extend(s.sample(time.time_ns()))
        time.sleep(0.1)
    burner_cpu = sum(psutil.Process(tree.burn).cpu_times()[:2])
    rows.extend(s.sample(time.time_ns()))
    for pid, lo, hi in ((tree.burn, 0.9, 1.0), (tree.sleep, 0.0, 0.1)):
        mine = [r for r in rows if r["pid"] == pid]
        assert all(r["thread_cpu_ns"] is not None and r["run_delay_ns"] is not None for r in mine)
        table = Table({k: np.array([r[k] for r in mine]) for k in ("t_ns", "thread_cpu_ns", "run_delay_ns")})
        demand, delay = cpu_demand(table)
        assert lo <= demand <= hi and 0.0 <= delay <= demand, (pid, demand, delay)
    last = [r for r in rows if r["pid"] == tree.burn][-1]
    assert abs(last["thread_cpu_ns"] / 1e9 - burner_cpu) < 0.1  # the same clock as the kernel's utime + stime
