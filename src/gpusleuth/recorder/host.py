"""Host sampler: CPU (total, per core, iowait), memory, disk and network bytes, cgroup CPU throttling
and memory, pressure-stall counters — one ``host`` row per call.

Why it reads ``/proc`` itself rather than calling psutil per tick: at 10 Hz the sampler runs beside the
job it measures, so its own cost must stay far below a millisecond. Each source file is opened once and
re-read with ``pread(fd, …, 0)`` (the kernel regenerates a ``/proc`` file on every read from offset 0),
which is 2–5× cheaper than open/read/close. psutil is used only for the one-off facts in
:meth:`HostSampler.hardware` and as a fallback where ``/proc`` is absent (non-Linux).

Percentages come from jiffy deltas between consecutive calls (the first call's baseline is taken in
``__init__``), so their resolution is one tick (1/USER_HZ, usually 10 ms) per core per interval: at
10 Hz a single core's % moves in steps of 10. Byte counters are cumulative and raw; the analysis
differences them.

Cgroups: the CPU limit that matters is the nearest cgroup, from this process's own up to the mount root,
that has a quota (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``); its ``cpu.stat`` gives nr_periods,
nr_throttled and throttled time. Outside a CPU-limited cgroup those columns are null, as documented.
"""

from __future__ import annotations

import math
import os
import platform
from typing import Any

from gpusleuth.recorder.schemas import HOST_SCHEMA, empty_row

NAN = math.nan
_READ = 1 << 16
_ROW_TEMPLATE = empty_row(HOST_SCHEMA)


class _File:
    """A file kept open and re-read from offset 0; ``read()`` returns None once it can't be read."""

    __slots__ = ("path", "fd")

    def __init__(self, path: str):
        self.path = path
        try:
            self.fd: int | None = os.open(path, os.O_RDONLY)
        except OSError:
            self.fd = None

    def read(self) -> bytes | None:
        if self.fd is None:
            return None
        try:
            data = os.pread(self.fd, _READ, 0)
            while len(data) % _READ == 0 and data:  # rare: larger than one read (many cores/disks)
                more = os.pread(self.fd, _READ, len(data))
                if not more:
                    break
                data += more
            return data
        except OSError:
            return None

    def close(self) -> None:
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None


def _kv_ints(data: bytes | None) -> dict[bytes, int]:
    """``key value`` lines (cpu.stat, memory files) → dict."""
    out = {}
    if data:
        for line in data.split(b"\n"):
            parts = line.split()
            if len(parts) >= 2:
                try:
                    out[parts[0]] = int(parts[1])
                except ValueError:
                    pass
    return out


def _psi_totals(data: bytes | None) -> tuple[int | None, int | None]:
    """``/proc/pressure/*`` → (some total µs, full total µs)."""
    some = full = None
    if data:
        for line in data.split(b"\n"):
            if not line:
                continue
            total = int(line.rsplit(b"total=", 1)[1])
            if line.startswith(b"some"):
                some = total
            elif line.startswith(b"full"):
                full = total
    return some, full


# --------------------------------------------------------------------------- cgroups
def _own_cgroup_paths(proc_root: str) -> dict[str, str]:
    """controller ("" for v2 unified) → this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        with open(f"{proc_root}/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                if not ctrls:
                    out[""] = path
                for c in ctrls.split(","):
                    if c:
                        out[c] = path
    except OSError:
        pass
    return out


def _ancestors(mount: str, path: str) -> list[str]:
    """Candidate directories from the own cgroup up to the mount root (which a cgroup namespace may be)."""
    dirs = []
    p = path.strip("/")
    while p:
        d = os.path.join(mount, p)
        if os.path.isdir(d):
            dirs.append(d)
        p = p.rpartition("/")[0]
    dirs.append(mount)
    return dirs


def _read_text(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


class CgroupInfo:
    """Where this process's CPU and memory limits live, and what they are (found once)."""

    def __init__(self, root: str = "/sys/fs/cgroup", proc_root: str = "/proc"):
        self.version: int | None = None
        self.cpu_dir: str | None = None  # the limiting cgroup whose cpu.stat to read
        self.cpu_limit_cores: float | None = None
        self.mem_dir: str | None = None
        self.mem_limit: int | None = None
        own = _own_cgroup_paths(proc_root)
        if os.path.exists(os.path.join(root, "cgroup.controllers")):
            self.version = 2
            for d in _ancestors(root, own.get("", "/")):
                if self.cpu_dir is None:
                    q = (_read_text(os.path.join(d, "cpu.max")) or "max").split()
                    if q and q[0] != "max" and len(q) == 2:
                        self.cpu_dir, self.cpu_limit_cores = d, int(q[0]) / int(q[1])
                if self.mem_dir is None:
                    m = _read_text(os.path.join(d, "memory.max"))
                    if m and m != "max":
                        self.mem_dir, self.mem_limit = d, int(m)
        else:
            cpu_mount = next((os.path.join(root, n) for n in ("cpu,cpuacct", "cpu", "cpuacct,cpu")
                              if os.path.exists(os.path.join(root, n, "cpu.cfs_quota_us"))), None)
            mem_mount = os.path.join(root, "memory")
            if cpu_mount or os.path.isdir(mem_mount):
                self.version = 1
            if cpu_mount:
                for d in _ancestors(cpu_mount, own.get("cpu", "/")):
                    quota = _read_text(os.path.join(d, "cpu.cfs_quota_us"))
                    per = _read_text(os.path.join(d, "cpu.cfs_period_us"))
                    if quota and per and int(quota) > 0:
                        self.cpu_dir, self.cpu_limit_cores = d, int(quota) / int(per)
                        break
            if os.path.isdir(mem_mount):
                for d in _ancestors(mem_mount, own.get("memory", "/")):
                    m = _read_text(os.path.join(d, "memory.limit_in_bytes"))
                    if m and int(m) < (1 << 62):  # "unlimited" is a page-rounded 2**63-1
                        self.mem_dir, self.mem_limit = d, int(m)
                        break


# --------------------------------------------------------------------------- the sampler
class HostSampler:
    """One ``host`` row per :meth:`sample`; cheap enough for 10 Hz (see the module docstring)."""

    def __init__(self, proc_root: str = "/proc", sys_root: str = "/sys", cgroup_root: str | None = None):
        self._proc = proc_root
        self._stat = _File(f"{proc_root}/stat")
        self._meminfo = _File(f"{proc_root}/meminfo")
        self._diskstats = _File(f"{proc_root}/diskstats")
        self._netdev = _File(f"{proc_root}/net/dev")
        self._psi = {k: _File(f"{proc_root}/pressure/{k}") for k in ("cpu", "io", "memory")}
        self._disks = self._physical_disks(sys_root)
        self.cgroup = CgroupInfo(cgroup_root or f"{sys_root}/fs/cgroup", proc_root)
        cg = self.cgroup
        v2 = cg.version == 2
        self._cg_cpu = _File(os.path.join(cg.cpu_dir, "cpu.stat")) if cg.cpu_dir else None
        self._cg_mem = (_File(os.path.join(cg.mem_dir, "memory.current" if v2 else "memory.usage_in_bytes"))
                        if cg.mem_dir else None)
        self._cg_v2 = v2
        self._linux = self._stat.fd is not None
        self._prev_total: list[int] | None = None
        self._prev_cores: dict[bytes, tuple[int, int]] = {}
        self._prev_psutil = None
        self._hardware: dict[str, Any] | None = None
        self._cpu(update_only=True)  # baseline, so the first sample already has a delta

    @staticmethod
    def _physical_disks(sys_root: str) -> set[bytes] | None:
        """Whole disks backed by hardware (have a ``device`` link): loop, zram, dm and md are left out so
        that a device-mapper volume and the disk under it are not counted twice."""
        try:
            names = os.listdir(f"{sys_root}/block")
        except OSError:
            return None
        return {n.encode() for n in names if os.path.exists(f"{sys_root}/block/{n}/device")}

    # ------------------------------------------------------------------ facts
    def hardware(self) -> dict[str, Any]:
        """Static facts for ``meta.json`` (computed once: callers may ask every second)."""
        if self._hardware is None:
            self._hardware = self._read_hardware()
        return dict(self._hardware)

    def _read_hardware(self) -> dict[str, Any]:
        import psutil

        model = None
        try:
            with open(f"{self._proc}/cpuinfo") as f:
                for line in f:
                    if line.startswith(("model name", "Model", "cpu model")):
                        model = line.split(":", 1)[1].strip()
                        break
        except OSError:
            pass
        try:
            affinity = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            affinity = None
        return {
            "cpu_model": model or platform.processor() or None,
            "logical_cores": psutil.cpu_count(logical=True),
            "physical_cores": psutil.cpu_count(logical=False),
            "cpu_affinity_cores": affinity,
            "mem_total": psutil.virtual_memory().total,
            "cgroup_version": self.cgroup.version,
            "cgroup_cpu_limit_cores": self.cgroup.cpu_limit_cores,
            "cgroup_mem_limit": self.cgroup.mem_limit,
            "os": platform.system(),
            "kernel": platform.release(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        }

    # ------------------------------------------------------------------ sampling
    def sample(self, t_ns: int) -> dict[str, Any]:
        """One host row; a source that can't be read leaves its columns NaN/null."""
        row = dict(_ROW_TEMPLATE)
        row["t_ns"] = t_ns
        if self._linux:
            self._cpu(row)
            self._mem(row)
            self._disk(row)
            self._net(row)
            self._pressure(row)
        else:
            self._psutil_fallback(row)
        self._cgroup(row)
        return row

    def _cpu(self, row: dict[str, Any] | None = None, update_only: bool = False) -> None:
        data = self._stat.read()
        if not data:
            return
        per_core = []
        prev_cores = self._prev_cores
        cores: dict[bytes, tuple[int, int]] = {}
        for line in data.split(b"\n"):
            if not line.startswith(b"cpu"):
                break  # cpu lines come first
            f = line.split()
            vals = [int(x) for x in f[1:9]]  # user nice system idle iowait irq softirq steal
            total = sum(vals)
            if f[0] == b"cpu":
                prev = self._prev_total
                self._prev_total = vals
                if row is not None and prev is not None:
                    dt = total - sum(prev)
                    if dt > 0:
                        idle = vals[3] - prev[3]
                        iow = vals[4] - prev[4]
                        row["cpu_pct"] = 100.0 * (dt - idle - iow) / dt
                        row["iowait_pct"] = 100.0 * iow / dt
                    else:
                        row["cpu_pct"] = row["iowait_pct"] = NAN
            else:
                busy = total - vals[3] - vals[4]
                cores[f[0]] = (busy, total)
                p = prev_cores.get(f[0])
                if p is not None and total > p[1]:
                    per_core.append(100.0 * (busy - p[0]) / (total - p[1]))
                else:
                    per_core.append(NAN)
        self._prev_cores = cores
        if row is not None and not update_only:
            row["cpu_per_core"] = per_core

    def _mem(self, row: dict[str, Any]) -> None:
        data = self._meminfo.read()
        if not data:
            return
        total = avail = None
        for line in data.split(b"\n"):
            if line.startswith(b"MemTotal:"):
                total = int(line.split()[1]) * 1024
            elif line.startswith(b"MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
        row["mem_total"] = total
        row["mem_used"] = total - avail if total is not None and avail is not None else None

    def _disk(self, row: dict[str, Any]) -> None:
        data = self._diskstats.read()
        if not data or self._disks is None:
            return
        rd = wr = 0
        disks = self._disks
        for line in data.split(b"\n"):
            f = line.split()
            if len(f) > 9 and f[2] in disks:
                rd += int(f[5])
                wr += int(f[9])
        row["disk_read_bytes"] = rd * 512  # /proc/diskstats counts 512-byte sectors whatever the disk
        row["disk_write_bytes"] = wr * 512

    def _net(self, row: dict[str, Any]) -> None:
        data = self._netdev.read()
        if not data:
            return
        rx = tx = 0
        for line in data.split(b"\n")[2:]:
            name, _, rest = line.partition(b":")
            if not rest or name.strip() == b"lo":
                continue
            f = rest.split()
            rx += int(f[0])
            tx += int(f[8])
        row["net_rx_bytes"] = rx
        row["net_tx_bytes"] = tx

    def _pressure(self, row: dict[str, Any]) -> None:
        row["psi_cpu_some_us"] = _psi_totals(self._psi["cpu"].read())[0]
        row["psi_io_some_us"], row["psi_io_full_us"] = _psi_totals(self._psi["io"].read())
        row["psi_mem_some_us"] = _psi_totals(self._psi["memory"].read())[0]

    def _cgroup(self, row: dict[str, Any]) -> None:
        if self._cg_cpu is not None:
            st = _kv_ints(self._cg_cpu.read())
            row["cg_nr_periods"] = st.get(b"nr_periods")
            row["cg_nr_throttled"] = st.get(b"nr_throttled")
            if self._cg_v2:
                row["cg_throttled_usec"] = st.get(b"throttled_usec")
            else:
                ns = st.get(b"throttled_time")
                row["cg_throttled_usec"] = ns // 1000 if ns is not None else None
        if self._cg_mem is not None:
            data = self._cg_mem.read()
            row["cg_mem_used"] = int(data) if data else None
            row["cg_mem_limit"] = self.cgroup.mem_limit

    def _psutil_fallback(self, row: dict[str, Any]) -> None:
        """Non-Linux: the same columns from psutil (slower, fine for a fallback)."""
        import psutil

        cur = psutil.cpu_times(percpu=True)
        prev, self._prev_psutil = self._prev_psutil, cur
        if prev is not None:
            pcts = []
            for a, b in zip(prev, cur):
                ta, tb = sum(a), sum(b)
                # psutil's times are float seconds: an idle core's busy delta can come out as -1e-10,
                # so clamp to the documented 0–100
                pcts.append(min(100.0, max(0.0, 100.0 * ((tb - b.idle) - (ta - a.idle)) / (tb - ta)))
                            if tb > ta else NAN)
            row["cpu_per_core"] = pcts
            ok = [p for p in pcts if p == p]
            row["cpu_pct"] = sum(ok) / len(ok) if ok else NAN
        vm = psutil.virtual_memory()
        row["mem_total"], row["mem_used"] = vm.total, vm.total - vm.available
        d = psutil.disk_io_counters()
        if d is not None:
            row["disk_read_bytes"], row["disk_write_bytes"] = d.read_bytes, d.write_bytes
        n = psutil.net_io_counters()
        if n is not None:
            row["net_rx_bytes"], row["net_tx_bytes"] = n.bytes_recv, n.bytes_sent

    def close(self) -> None:
        """Close the kept-open files (also done when the sampler is garbage-collected)."""
        for f in (self._stat, self._meminfo, self._diskstats, self._netdev, *self._psi.values(),
                  self._cg_cpu, self._cg_mem):
            if f is not None:
                f.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
