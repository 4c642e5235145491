"""Shared helpers: run the real ``gpusleuth`` CLI in a child process; the test lanes.

Lanes (README): ``pytest -m unit`` is every test that is neither ``slow`` nor ``process`` — in-process tests
of real data files, no child process, minutes in all. In that lane a test that starts a child process (a
job, a server, the CLI, a worker pool) fails at once with a sentence saying to mark it ``process``, so the
lane stays what its name says. ``pytest`` with no ``-m`` runs everything (what CI runs).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# A suite started in the background of a shell without job control (`pytest … &` in a script) inherits SIGINT
# ignored, and so does every job a test starts: Python then installs no KeyboardInterrupt handler, and each test
# that stops a job or a server with SIGINT (Ctrl-C, `--duration`, `gpusleuth load`) waits out the grace and
# sees SIGTERM's 143 — six such failures in one background run. Restore the default here, as an interactive
# shell would have it: a Python handler is reset to SIG_DFL in the jobs exec'd from this process.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
TRACES = FIXTURES / "hta"  # HTA's real Kineto traces (MIT), MANIFEST.md beside them

def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("slow") is None and item.get_closest_marker("process") is None:
            item.add_marker(pytest.mark.unit)


def _refuse_child(*_args, **_kw):
    raise AssertionError("a unit-lane test started a child process: mark it @pytest.mark.process "
                         "(or @pytest.mark.slow), so `pytest -m unit` stays in-process")


@pytest.fixture(autouse=True)
def _unit_lane_starts_no_process(request, monkeypatch):
    """Only when the unit lane is selected (``-m unit``): every way of starting a process refuses."""
    if "unit" not in (request.config.option.markexpr or "") or request.node.get_closest_marker("unit") is None:
        yield
        return
    import multiprocessing.util

    monkeypatch.setattr(subprocess.Popen, "_execute_child", _refuse_child)
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, _refuse_child)
    monkeypatch.setattr(multiprocessing.util, "spawnv_passfds", _refuse_child)
    yield


# --- how busy the host is: tests whose numbers need free cores measure it and say so when they skip -------

QUIET_BUSY_PCT = 15  # CPU busy over all cores that still counts as a quiet host (an idle box reads 0–5 %)
FOREIGN_CORES = 0.25  # cores that processes outside a test may use while it runs before it is not on a quiet host


def host_busy_now(interval: float = 2.0) -> str | None:
    """None on a quiet host, else what makes it busy: the CPU over ``interval`` seconds now (the load
    average trails by a minute, so right after another test's jobs it reads busy on an idle host)."""
    import psutil

    busy = psutil.cpu_percent(interval=interval)
    if busy > QUIET_BUSY_PCT:
        return (f"host not quiet: CPU {busy:.0f}% busy on {os.cpu_count() or 1} cores "
                f"(load average {os.getloadavg()[0]:.2f})")
    return None


def _own_and_host_cpu_s() -> tuple[float, float]:
    """(CPU seconds of this process, its reaped children and its live descendants; busy CPU seconds of the
    host) — both clocks only grow, so a difference of two readings is what each used in between."""
    import psutil

    me = psutil.Process()
    own = sum(me.cpu_times()[:4])  # user, system, children_user, children_system (reaped descendants)
    for child in me.children(recursive=True):
        try:
            own += sum(child.cpu_times()[:4])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass  # gone between the listing and the read: its time is in its parent's children_* once reaped
    t = psutil.cpu_times()
    host = t.user + t.nice + t.system + getattr(t, "irq", 0) + getattr(t, "softirq", 0) + getattr(t, "steal", 0)
    return own, host


class HostLoad:
    """What processes outside this test did to the host while it ran: the host's busy CPU less this test's own
    (pytest, its threads, every job it started). A test whose number needs free cores asserts it; when the
    number is off and this says other processes took cores, it skips saying so (measured, not assumed);
    on a quiet host the same miss fails."""

    def __init__(self) -> None:
        self._t0 = time.monotonic()
        self._own0, self._host0 = _own_and_host_cpu_s()

    def foreign_cores(self) -> float:
        own, host = _own_and_host_cpu_s()
        wall = max(time.monotonic() - self._t0, 1e-3)
        return max(0.0, (host - self._host0) - (own - self._own0)) / wall

    def crowded(self) -> str | None:
        """None where the test had the host to itself, else the measured sentence saying it did not."""
        foreign = self.foreign_cores()
        if foreign <= FOREIGN_CORES:
            return None
        return (f"processes outside this test used {foreign:.2f} of {os.cpu_count() or 1} cores while it ran "
                f"(load average {os.getloadavg()[0]:.2f})")

    def skip_if_crowded(self, what_was_off: str) -> None:
        """Skip, saying what was off and the load that explains it, when others took cores; else return (the
        caller's assert then fails on a quiet host)."""
        why = self.crowded()
        if why:
            pytest.skip(f"{what_was_off}, but {why}: this needs a quiet host")

    @contextlib.contextmanager
    def quiet_or_skip(self, what: str):
        """Asserts inside hold, or the test skips where other processes took cores (saying what missed and the
        load measured); on a quiet host a miss fails as it is. For numbers that only a quiet host makes."""
        try:
            yield
        except AssertionError as exc:
            first = (str(exc).splitlines() or [""])[0][:300]
            self.skip_if_crowded(f"{what} missed ({first})")
            raise


@pytest.fixture
def host_load() -> HostLoad:
    """Measures, from the test's start, the CPU that processes outside it use (``HostLoad``)."""
    return HostLoad()


def gpusleuth(*args, timeout=180, env=None, **kw) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "gpusleuth", *map(str, args)],
        capture_output=True, text=True, timeout=timeout, env=full_env, **kw,
    )


def without_dac(cmd: list[str]) -> list[str]:
    """``cmd`` as a user that permissions apply to: root loses the capabilities that bypass them."""
    if os.geteuid() != 0:
        return cmd
    import shutil

    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: permissions cannot be made to apply")
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *cmd]


# torch's own shutdown race in gloo jobs: a rank that finished its work aborts at interpreter exit when Gloo
# work objects free Python-owned tensors during finalization (pytorch/pytorch PR 179291 describes it). Seen
# in 1 of 15 runs of tests/fixtures/distributed/ddp_spawn.py with plain `python`, no gpusleuth anywhere.
TORCH_EXIT_RACE = "terminate called without an active exception"


def torch_exit_race(res_or_stderr) -> bool:
    """Did a multi-rank job die of torch's gloo exit race (not of anything the test checks)?"""
    text = res_or_stderr if isinstance(res_or_stderr, str) else (res_or_stderr.stderr or "") + (res_or_stderr.stdout or "")
    code = None if isinstance(res_or_stderr, str) else res_or_stderr.returncode
    return code != 0 and TORCH_EXIT_RACE in text


def run_multirank(record, attempts: int = 3):
    """``record(attempt) -> CompletedProcess`` of a gloo job under ``gpusleuth run``, repeated (into a new
    directory: ``attempt`` tells which) only while it died of torch's exit race, at most ``attempts`` times.
    gpusleuth passing that abort on as the job's exit code is right; the test is about the rest."""
    for attempt in range(attempts):
        res = record(attempt)
        if not torch_exit_race(res) or attempt == attempts - 1:
            return res
        print(f"torch's gloo exit race (attempt {attempt + 1}); running the job again", file=sys.stderr)
    return res


def free_port() -> int:
    """A free loopback port (torchrun's ``--master_port 0`` hangs torch's static rendezvous)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def report_json(run_dir: Path) -> dict:
    res = gpusleuth("report", run_dir, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.fixture
def run_cli():
    return gpusleuth


@pytest.fixture(autouse=True, scope="session")
def _summary_cache_in_tmp(tmp_path_factory):
    """`gpusleuth fleet` caches summaries outside run directories (~/.cache/gpusleuth): tests keep theirs
    in a temporary folder, never in the home directory of whoever runs them."""
    os.environ.setdefault("GPUSLEUTH_CACHE_DIR", str(tmp_path_factory.mktemp("gpusleuth-cache")))


@pytest.fixture(autouse=True)
def _pandas_guard_stays_in_its_test():
    """A test that runs a verb in-process (``cli.main.main([...])``) installs the verb's pandas guard
    (lean_imports.keep_pandas_out) in the pytest process; left there, it makes every later
    ``importlib.util.find_spec("pandas")`` raise — torch._dynamo's import, test_host_sampler's control — and
    those tests failed only in the full suite. Each test gets the process as it found it."""
    yield
    from gpusleuth.lean_imports import let_pandas_in

    let_pandas_in()
