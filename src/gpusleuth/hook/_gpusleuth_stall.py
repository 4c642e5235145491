"""Every process the hook enters can be asked for its Python stacks from outside, without its GIL (stdlib only).

When ``gpusleuth run``'s recorder sees the job stop making progress and py-spy is not installed (or is switched
off), it sends each of the job's processes one signal; the handler registered here is ``faulthandler``'s, which
runs in C: it writes every thread's Python stack even while the main thread sits in a C call (a collective, a
lock, a read) — no Python code of the stuck process runs, so it cannot deadlock on the GIL or on torch's
symbolizer. Registered at activation, and again in a forked child (a DataLoader worker) with its own buffer; a
spawned process runs ``sitecustomize`` and registers itself.

It writes into an anonymous in-memory file (``memfd_create``) named ``gpusleuth-stacks-sig<N>``: nothing is
created in the run directory (a program that records nothing leaves nothing), and the recorder finds the
buffer and the signal number in ``/proc/<pid>/fd`` and reads what the handler wrote there. The signal is a
real-time one by default (``SIGRTMIN+6``, which jobs seldom use; ``GPUSLEUTH_STACK_SIGNAL`` names another by
number or name, ``0``/``off`` switches this off). The buffer exists only while the handler is ours: a job that
installs its own handler for that signal with ``signal.signal`` gets it (faulthandler lets go, the buffer is
closed), so the recorder never sends that process the signal. A job that inherited the signal ignored or handled
is left alone.

**Flight Recorder.** When the job runs with torch's Flight Recorder on (``TORCH_FR_BUFFER_SIZE`` or
``TORCH_NCCL_TRACE_BUFFER_SIZE`` above 0 in its environment: torch keeps a ring of its last collectives per
process, on gloo as on NCCL), ``arm`` also starts one daemon thread that waits on an abstract Unix socket
``gpusleuth-fr-<pid>`` (nothing on disk). The recorder connects when it sees a stall; the thread (same user only,
checked by ``SO_PEERCRED``) asks torch for the ring *without stack traces* (torch's symbolizer is what can
deadlock a stuck process) and sends back the entries as JSON: collective sequence numbers, op names, states, and
each group's last enqueued/completed collective. It needs the GIL, which a rank waiting in a collective, a lock or
a read has released; a rank spinning in Python answers late or not at all, and the recorder waits 2 s, no more.
The thread costs nothing per step: it sleeps in ``accept``.
"""
import faulthandler
import os
import signal
import sys

ENV = "GPUSLEUTH_STACK_SIGNAL"
NAME = "gpusleuth-stacks-sig%d"  # the buffer's name, as /proc/<pid>/fd shows it: "/memfd:<NAME> (deleted)"

FR_ENVS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")  # torch's order: the first one set wins
FR_SOCKET = "gpusleuth-fr-%d"  # abstract socket name (pid)
FR_KEYS = ("pg_id", "process_group", "collective_seq_id", "p2p_seq_id", "op_id", "profiling_name", "state",
           "time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns", "is_p2p", "retired",
           "input_sizes", "timeout_ms", "thread_name")

_armed = {"signum": None, "fd": None}
_fr = {"sock": None}
_real_signal = signal.signal


def _signum():
    raw = (os.environ.get(ENV) or "").strip()
    if raw.lower() in ("0", "off", "no", "false"):
        return None
    if raw:
        if raw.isdigit():
            return int(raw)
        sig = getattr(signal, raw.upper() if raw.upper().startswith("SIG") else "SIG" + raw.upper(), None)
        return int(sig) if sig is not None else None
    rtmin = getattr(signal, "SIGRTMIN", None)
    return int(rtmin) + 6 if rtmin is not None else int(signal.SIGUSR2)


def _release():
    """Let go of the signal: the job wants it (or this process is not ours to dump any more)."""
    signum, fd = _armed["signum"], _armed["fd"]
    _armed["signum"] = _armed["fd"] = None
    if signum is None:
        return
    try:
        faulthandler.unregister(signum)
    except BaseException:
        pass
    try:
        os.close(fd)
    except BaseException:
        pass


def _signal(signalnum, handler):
    """``signal.signal`` as the job knows it; setting our signal's handler takes it back from us first."""
    try:
        if _armed["signum"] is not None and int(signalnum) == _armed["signum"]:
            _release()
    except BaseException:
        pass
    return _real_signal(signalnum, handler)


def flight_recorder_size(environ=None):
    """The Flight Recorder ring size the job's torch will use (0: off), as torch reads its environment."""
    env = os.environ if environ is None else environ
    for key in FR_ENVS:
        raw = (env.get(key) or "").strip()
        if raw:
            try:
                return max(int(raw), 0)
            except ValueError:
                return 0
    return 0


def _fr_snapshot():
    """This process's Flight Recorder ring(s), stack traces left out, as JSON-ready dicts."""
    import pickle

    out = {}
    c10d = sys.modules.get("torch._C._distributed_c10d")
    if c10d is None:
        return {"error": "torch.distributed not imported"}
    for name, fn in (("fr", "_dump_fr_trace"), ("nccl", "_dump_nccl_trace")):
        dump = getattr(c10d, fn, None)
        if dump is None:
            continue
        try:
            raw = pickle.loads(dump(includeCollectives=True, includeStackTraces=False, onlyActive=False))
        except BaseException as exc:  # noqa: BLE001 - a ring torch could not give is said, never raised
            out[name] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        if not isinstance(raw, dict):
            continue
        entries = [{k: e.get(k) for k in FR_KEYS} for e in raw.get("entries") or [] if isinstance(e, dict)]
        out[name] = {"version": raw.get("version"), "pg_status": raw.get("pg_status"),
                     "pg_config": raw.get("pg_config"), "entries": entries}
    return out


def _fr_serve(sock):
    import json
    import socket
    import struct

    creds = struct.calcsize("3i")
    while True:
        try:
            conn, _ = sock.accept()
        except BaseException:
            return
        try:
            with conn:
                _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, creds))
                if uid != os.getuid() and os.getuid() != 0:
                    continue
                conn.sendall(json.dumps(_fr_snapshot(), default=str).encode())
        except BaseException:
            continue


def _fr_arm():
    """The Flight Recorder socket and its thread, when the job's torch keeps a ring."""
    if _fr["sock"] is not None or flight_recorder_size() <= 0:
        return False
    import socket
    import threading

    if not hasattr(socket, "SO_PEERCRED"):
        return False
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind("\0" + FR_SOCKET % os.getpid())
        sock.listen(4)
    except OSError:
        return False
    _fr["sock"] = sock
    threading.Thread(target=_fr_serve, args=(sock,), name="gpusleuth-flight-recorder", daemon=True).start()
    return True


def arm(forked=False):
    """Register the stack dump of this process (at activation; ``forked``: in a fork's child, whose parent's
    registration and buffer it inherited). Never raises."""
    if forked and _fr["sock"] is not None:  # the parent's socket (its thread did not come along): not ours
        try:
            _fr["sock"].close()
        except BaseException:
            pass
        _fr["sock"] = None
    elif not forked:
        try:
            _fr_arm()
        except BaseException:
            pass
    try:
        if forked:
            if _armed["fd"] is None:
                return False  # the parent was not armed (or gave the signal to the job, whose handler we keep)
            try:
                os.close(_armed["fd"])  # the parent's buffer: this child writes its own
            except OSError:
                pass
            _armed["signum"] = _armed["fd"] = None
        signum = _signum()
        if signum is None or not hasattr(os, "memfd_create"):
            return False
        if not forked and signal.getsignal(signum) not in (signal.SIG_DFL, None):
            return False  # the job's environment already does something with it: not ours
        fd = os.memfd_create(NAME % signum, getattr(os, "MFD_CLOEXEC", 1))
        faulthandler.register(signum, file=fd, all_threads=True, chain=False)
        _armed["signum"], _armed["fd"] = signum, fd
        if signal.signal is not _signal:
            signal.signal = _signal
        return True
    except BaseException:
        return False
