"""gpusleuth's activation inside a job's Python process (standard library only, Python 3.8+).

Imported by our ``sitecustomize`` when ``GPUSLEUTH_RUN_DIR`` is set. ``activate()`` starts the process's
recorder (``_gpusleuth_state``), keeps the hook's frames out of the job's crash tracebacks, gives a forked
child its own recorder state, and puts an import watcher on ``sys.meta_path`` that hands torch and the
server modules to their patches (``_gpusleuth_torch`` with ``_gpusleuth_flops`` and ``_gpusleuth_knobs``,
``_gpusleuth_serve`` on ``_gpusleuth_request`` and ``_gpusleuth_handoff``) right after they are imported. The top
of the hook's import graph: it imports the others, none imports it.

``gpusleuth.api`` looks this module up in ``sys.modules``: ``R`` (the recorder once active) and the
``api_*`` entry points (``_gpusleuth_api``, re-exported here) are its contract with the hook. The output is
the event stream of docs/run-format.md: tab-separated lines appended to
``$GPUSLEUTH_RUN_DIR/raw/events-<pid>.tsv``.
"""
import atexit
import os
import sys
import types

import _gpusleuth_stall as _stall
import _gpusleuth_state as _state
from _gpusleuth_api import (  # noqa: F401 - gpusleuth.api calls them here
    Watched, api_log, api_phase_begin, api_phase_end, api_stage_begin, api_stage_end, api_step, api_watch,
)

R = None  # the process's recorder once activated (the same object as _gpusleuth_state.R)


def activate():
    """Start recording this process (called by sitecustomize). Idempotent; never raises."""
    global R
    if R is not None:
        return R
    try:
        run_dir = os.environ.get("GPUSLEUTH_RUN_DIR")
        if not run_dir:
            return None
        R = _state.start(run_dir)
        _hide_our_frames_in_crashes()
        _stall.arm()  # its stacks on a signal, for the recorder's stall watch
        atexit.register(_at_exit)
        if hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
        sys.meta_path.insert(0, _ImportWatcher())
        for name in SERVER_MODULES:  # imported before we were (rare: sitecustomize runs first)
            if name in sys.modules:
                _on_import(name, sys.modules[name])
    except BaseException as exc:
        if R is not None:
            R.error("activate", exc)
    return R


_HOOK_DIR = os.path.dirname(os.path.abspath(__file__))


def _without_our_frames(tb):
    """``tb`` less the hook's own frames. A patched function (``autograd.backward``, kept for loops that
    accumulate micro-batches) sits between the job's call and torch's raise, so an uncaught error would print
    a line the job's traceback lacks without gpusleuth."""
    kept = []
    while tb is not None:
        if os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) != _HOOK_DIR:
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for t in reversed(kept):
        out = types.TracebackType(out, t.tb_frame, t.tb_lasti, t.tb_lineno)
    return out


def _hide_our_frames_in_crashes():
    """The job's crash prints exactly what it prints without gpusleuth: the interpreter's excepthook (or the
    one already set) gets the exception, its causes and contexts with the hook's frames taken out."""
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        try:
            seen, todo = set(), [value]
            while todo:
                exc = todo.pop()
                if exc is None or id(exc) in seen:
                    continue
                seen.add(id(exc))
                exc.__traceback__ = _without_our_frames(exc.__traceback__)
                todo += [exc.__cause__, exc.__context__]
            tb = value.__traceback__ if value is not None else tb
        except BaseException:
            pass
        previous(kind, value, tb)

    sys.excepthook = excepthook


def _at_exit():
    if R is not None:
        if "_gpusleuth_request" in sys.modules:  # answered requests whose handler the exit interrupts
            sys.modules["_gpusleuth_request"].at_exit()
        R.at_exit()


def _exit_with_forked_processes():
    """A ``multiprocessing`` child started by fork (Hogwild trainers, ``mp.Process`` workers of every kind)
    leaves through ``os._exit``: no ``atexit`` handler runs, and every step it buffered since its last flush
    was lost (a trainer of 150 steps in 0.2 s wrote 1). Its last act before that is
    ``multiprocessing.util._exit_function()``, looked up by name at the call: ours runs the hook's exit
    first. The parent's own ``atexit`` entry holds the original function and is untouched."""
    util = sys.modules.get("multiprocessing.util")
    real = getattr(util, "_exit_function", None) if util is not None else None
    if real is None or getattr(real, "__module__", None) == __name__:
        return

    def _exit_function(*args, **kwargs):
        try:
            _at_exit()
        except BaseException:
            pass
        return real(*args, **kwargs)

    _exit_function.__wrapped__ = real
    util._exit_function = _exit_function


def _after_fork_in_child():
    if R is not None:
        try:
            R.reset_process(role="python", forked=True)
            _stall.arm(forked=True)
            if "_gpusleuth_request" in sys.modules:
                sys.modules["_gpusleuth_request"].after_fork()
            if "_gpusleuth_dist" in sys.modules:
                sys.modules["_gpusleuth_dist"].after_fork()
        except BaseException:
            pass


# Server modules whose request handling the hook times (see _gpusleuth_serve): patched right after import.
SERVER_MODULES = ("socketserver", "http.server", "wsgiref.handlers", "flask.app", "starlette.applications",
                  "uvicorn.protocols.http.h11_impl", "uvicorn.protocols.http.httptools_impl", "uvicorn.server", "queue",
                  "asyncio.queues", "multiprocessing.queues", "multiprocessing.connection", "multiprocessing.managers",
                  "litserve.loops.base", "ray.serve._private.replica", "ray.serve.batching",
                  "bentoml._internal.marshal.dispatcher",
                  "transformers.generation.continuous_batching.continuous_api")
# Where a job says that ranks share a batch (tensor and pipeline parallelism): patched right after import
# (_gpusleuth_dist).
PARALLEL_MODULES = ("torch.distributed.tensor.parallel", "torch.distributed.pipelining.schedules")
_WATCHED = set(("torch",) + SERVER_MODULES + PARALLEL_MODULES)


def _on_import(name, module):
    """A watched module finished importing: torch gets its patches, a server module its request timing."""
    _WATCHED.discard(name)
    if R is None:
        return
    if name == "torch":
        _torch_imported(module)
        return
    if name in PARALLEL_MODULES:
        try:
            import _gpusleuth_dist

            if name == "torch.distributed.pipelining.schedules":
                _gpusleuth_dist.patch_pipeline_schedules(module)
            else:
                _gpusleuth_dist.patch_tensor_parallel(sys.modules)
        except BaseException as exc:
            R.error("model_parallel", exc)
        return
    try:
        import _gpusleuth_serve

        _gpusleuth_serve.patch(name, module)
    except BaseException as exc:
        R.error("serve", exc)


def _torch_imported(torch):
    """``import torch`` finished: its patches go in (``_gpusleuth_torch``), then the FLOP count of one step
    (on unless ``GPUSLEUTH_FLOPS=0``, ``gpusleuth run --no-flops``) and a sweep's knobs (only when a
    ``GPUSLEUTH_KNOB_*`` variable is set)."""
    try:
        import _gpusleuth_torch

        R.torch_imported(torch, _gpusleuth_torch)
        atexit.register(_at_exit)  # again, so that we run before torch's own exit handlers (LIFO)
    except BaseException as exc:
        R.error("torch_imported", exc)
    try:
        _exit_with_forked_processes()
    except BaseException as exc:
        R.error("mp_exit", exc)
    try:
        if os.environ.get("GPUSLEUTH_FLOPS", "1") != "0" and R.role == "main":
            import _gpusleuth_flops

            R.count_flops(_gpusleuth_flops)
    except BaseException as exc:
        R.error("flops", exc)
    try:
        if any(k.startswith("GPUSLEUTH_KNOB_") for k in os.environ):
            import _gpusleuth_knobs

            _gpusleuth_knobs.install(torch, R)
    except BaseException as exc:
        R.error("knobs", exc)


class _ImportWatcher:
    """A ``sys.meta_path`` finder that notices the import of ``torch`` and of a few server modules
    (``SERVER_MODULES``) without importing anything itself.

    For every other module it returns None at once (one set lookup per import). For a watched one it asks
    the remaining finders for the real spec and wraps that loader's ``exec_module`` so that the patches go
    in right after the module has run — for torch, torch.optim, torch.utils.data and friends are imported
    by then. The finder removes itself once every watched module is imported.
    """

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED:
            return None
        try:
            spec = None
            for finder in sys.meta_path:
                if finder is self:
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
                return spec
            loader = spec.loader
            real_exec = loader.exec_module
            finder = self

            def exec_module(module):
                try:
                    real_exec(module)
                finally:
                    try:
                        del loader.exec_module  # back to the class's method: the loader is untouched
                    except AttributeError:
                        pass
                if fullname in _WATCHED:
                    _on_import(fullname, module)
                if not _WATCHED:
                    try:
                        sys.meta_path.remove(finder)
                    except ValueError:
                        pass

            loader.exec_module = exec_module
            return spec
        except BaseException as exc:
            if R is not None:
                R.error("find_spec", exc)
            return None
