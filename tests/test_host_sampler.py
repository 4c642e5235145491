"""HostSampler on this machine's real ``/proc`` — no mocks.

Why real sampling: the sampler's value is in parsing the kernel's files correctly (field positions,
units, which lines to skip); a stand-in would only test our own idea of those files. The assertions are
therefore properties that hold on any Linux machine, busy or idle (the CI VM is shared, 2 cores):
ranges, counter monotonicity, and that a CPU burner's own CPU time shows up in the host's busy time.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time

import psutil
import pyarrow as pa
import pytest

from gpusleuth.recorder.host import HostSampler
from gpusleuth.recorder.schemas import HOST_SCHEMA, to_batch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux /proc")

CUMULATIVE = ("disk_read_bytes", "disk_write_bytes", "net_rx_bytes", "net_tx_bytes",
              "cg_nr_periods", "cg_nr_throttled", "cg_throttled_usec",
              "psi_cpu_some_us", "psi_io_some_us", "psi_io_full_us", "psi_mem_some_us")


@pytest.fixture
def sampler():
    s = HostSampler()
    yield s
    s.close()


def two_samples(s: HostSampler, gap_s: float = 0.3) -> tuple[dict, dict]:
    a = s.sample(time.time_ns())
    time.sleep(gap_s)  # ≥ a few 10 ms jiffies per core, so percentages are not one-tick noise
    b = s.sample(time.time_ns())
    return a, b


def test_values_in_range_and_counters_monotonic(sampler):
    a, b = two_samples(sampler)
    # a sample right after __init__ may see no jiffy elapsed yet: NaN ("not available"), never garbage
    assert math.isnan(a["cpu_pct"]) or 0.0 <= a["cpu_pct"] <= 100.0
    assert 0.0 <= b["cpu_pct"] <= 100.0 and 0.0 <= b["iowait_pct"] <= 100.0
    for r in (a, b):
        assert set(r) == set(HOST_SCHEMA.names)
        assert len(r["cpu_per_core"]) == psutil.cpu_count(logical=True)
        assert all(0.0 <= c <= 100.0 for c in r["cpu_per_core"] if not math.isnan(c))
        assert math.isnan(r["iowait_pct"]) or r["iowait_pct"] >= 0.0
        assert 0 < r["mem_used"] <= r["mem_total"]
        assert r["mem_total"] == psutil.virtual_memory().total
        for col in CUMULATIVE:
            assert r[col] is None or (isinstance(r[col], int) and r[col] >= 0), col
    # 0.3 s after the previous sample every core has ticked: no NaN left
    assert not any(math.isnan(c) for c in b["cpu_per_core"])
    for col in CUMULATIVE:
        if a[col] is not None:
            assert b[col] >= a[col], f"{col} went backwards: {a[col]} → {b[col]}"
    assert a["net_rx_bytes"] is not None and a["disk_read_bytes"] is not None  # sources found on Linux
    if os.path.exists("/proc/pressure/cpu"):
        assert a["psi_cpu_some_us"] is not None


@pytest.mark.process
def test_cpu_burner_shows_in_host_cpu(sampler):
    """The burner's own CPU seconds (from the kernel's rusage) must appear in the host busy time.

    Comparing against an "idle" baseline would be flaky on a shared machine that may already be busy;
    this accounting identity holds however busy it is: host busy core-seconds ≥ the burner's.
    """
    sampler.sample(time.time_ns())
    t0 = time.monotonic()
    burner = subprocess.Popen([sys.executable, "-c",
                               "import time\nend = time.monotonic() + 0.8\nwhile time.monotonic() < end: pass"])
    _, _, usage = os.wait4(burner.pid, 0)
    burner.returncode = 0
    row = sampler.sample(time.time_ns())
    wall = time.monotonic() - t0
    burned = usage.ru_utime + usage.ru_stime
    assert burned > 0.2, f"the burner hardly ran ({burned:.2f} s CPU): machine too overloaded"
    host_busy = row["cpu_pct"] / 100.0 * len(row["cpu_per_core"]) * wall
    assert host_busy >= 0.8 * burned, (host_busy, burned)  # 0.8: jiffy rounding and the short interval
    assert row["cpu_pct"] >= 0.5 * 100.0 * burned / wall / len(row["cpu_per_core"])
    assert max(row["cpu_per_core"]) >= 50.0


@pytest.mark.process
def test_hardware_facts(sampler):
    hw = sampler.hardware()
    assert hw["logical_cores"] == os.cpu_count()
    assert hw["physical_cores"] is None or 1 <= hw["physical_cores"] <= hw["logical_cores"]
    assert 1 <= hw["cpu_affinity_cores"] <= hw["logical_cores"]
    assert hw["mem_total"] == psutil.virtual_memory().total
    assert hw["cgroup_version"] in (None, 1, 2)
    assert hw["cgroup_cpu_limit_cores"] is None or hw["cgroup_cpu_limit_cores"] > 0
    assert hw["cgroup_mem_limit"] is None or hw["cgroup_mem_limit"] > 0
    assert hw["os"] == "Linux" and hw["kernel"] == platform.release()
    assert hw["python"] == platform.python_version()
    assert hw["cpu_model"] is None or (isinstance(hw["cpu_model"], str) and hw["cpu_model"])
    hw["logical_cores"] = -1
    assert sampler.hardware()["logical_cores"] == os.cpu_count()  # a copy: callers can't corrupt the cache


def test_rows_build_a_record_batch(sampler):
    rows = []
    for _ in range(5):
        rows.append(sampler.sample(time.time_ns()))
        time.sleep(0.02)
    batch = to_batch(rows, HOST_SCHEMA)
    assert batch.schema == HOST_SCHEMA and batch.num_rows == 5
    per_core = batch.column("cpu_per_core")
    assert pa.types.is_list(per_core.type)
    assert all(len(v) == psutil.cpu_count(logical=True) for v in per_core.to_pylist())
    t = batch.column("t_ns").to_pylist()
    assert t == sorted(t)


def test_without_proc_falls_back_to_psutil():
    """Off Linux (simulated by a /proc root that doesn't exist) the same columns come from psutil."""
    s = HostSampler(proc_root="/nonexistent-proc", sys_root="/nonexistent-sys")
    a, b = two_samples(s, 0.1)
    assert a["cpu_per_core"] is None  # psutil has no baseline before the first call
    assert 0.0 <= b["cpu_pct"] <= 100.0 and len(b["cpu_per_core"]) == psutil.cpu_count(logical=True)
    assert 0 < b["mem_used"] <= b["mem_total"]
    to_batch([a, b], HOST_SCHEMA)
    s.close()


@pytest.mark.process
def test_recorder_keeps_pandas_out_and_still_writes(tmp_path):
    """In the recorder's process pandas must not load (pyarrow would import it at the first flush: ~0.4 s
    of CPU beside a starting job), and the streams must still write and convert — the first attempt at
    this (None in sys.modules) broke pyarrow and lost host.parquet, which test_launcher caught."""
    script = f"""
import sys
from gpusleuth.lean_imports import keep_pandas_out
keep_pandas_out()
import pyarrow.parquet as pq
from gpusleuth.recorder.host import HostSampler
from gpusleuth.recorder.schemas import HOST_SCHEMA
from gpusleuth.run.streams import TableStreamWriter, read_stream
w = TableStreamWriter({str(tmp_path / 'host.arrows')!r}, HOST_SCHEMA)
s = HostSampler()
import time
for _ in range(3):
    w.append(s.sample(time.time_ns())); time.sleep(0.05)
w.close()
table, loss = read_stream({str(tmp_path / 'host.arrows')!r})
pq.write_table(table, {str(tmp_path / 'host.parquet')!r})
print(table.num_rows, loss, 'pandas' in sys.modules)
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["3", "None", "False"]
    assert pq_rows(tmp_path / "host.parquet") == 3
    import importlib.util

    if importlib.util.find_spec("pandas") is not None:
        # the control: without the guard, building one batch does import pandas (else the test proves nothing)
        control = ("import sys, pyarrow as pa; pa.array([1]); print('pandas' in sys.modules)")
        res = subprocess.run([sys.executable, "-c", control], capture_output=True, text=True, timeout=60)
        assert res.stdout.split() == ["True"], res.stderr


def pq_rows(path) -> int:
    import pyarrow.parquet as pq

    return pq.read_metadata(path).num_rows
