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
"""
import faulthandler
import os
import signal

ENV = "GPUSLEUTH_STACK_SIGNAL"
NAME = "gpusleuth-stacks-sig%d"  # the buffer's name, as /proc/<pid>/fd shows it: "/memfd:<NAME> (deleted)"

_armed = {"signum": None, "fd": None}
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


def arm(forked=False):
    """Register the stack dump of this process (at activation; ``forked``: in a fork's child, whose parent's
    registration and buffer it inherited). Never raises."""
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
