"""gpusleuth's in-process recorder: steps, phases, logs and facts of one Python process.

Runs inside the user's job (imported by our ``sitecustomize`` when ``GPUSLEUTH_RUN_DIR`` is set), so it
obeys three rules: standard library only and Python 3.8+ (the job may run another interpreter or venv);
never raise into the user's program and never print (each failure becomes one ``hook_error`` line in our
own file); cost a few microseconds per training step (no per-step syscalls except the periodic flush).

This module holds the process-level state machine and the writer; ``_gpusleuth_torch`` holds the patches
that feed it once torch is imported. The output is the event stream of docs/run-format.md: tab-separated
lines appended to ``$GPUSLEUTH_RUN_DIR/raw/events-<pid>.tsv``.

Step delimiting, in short (docs/run-format.md gives the contract):

* an outermost ``optimizer.step()`` ends a step. Its record is kept *pending* until the next fetch, phase
  or other optimizer: a second, different optimizer stepping before the next fetch (GAN generator and
  discriminator, Muon + AdamW parameter splits) extends the same step instead of doubling the step count;
* without any optimizer, ``backward()`` ends a step. Those steps are *held* until the process has shown
  for a second that it has no optimizer (gradient accumulation calls backward several times per optimizer
  step, and we must not count each one as a step). A process that has constructed an optimizer keeps
  holding them until that optimizer steps (or ``HELD_MAX`` pile up): a first iteration longer than a
  second — DataLoader workers starting, an evaluation at iteration 0, two slow micro-batches — is not
  evidence of a loop without one, and committing on time alone made extra steps of it;
* after the first explicit ``gpusleuth.step()`` only explicit calls delimit steps in this process.
"""
import atexit
import json
import os
import sys
import threading
import time
import types

from _gpusleuth_records import (  # noqa: F401 - _batch_size and _jsonable are used by _gpusleuth_torch too
    CPU, FETCHES, FNEW, FSAMPLES, FTOKENS, GAP, OPT, SAMPLES, SET, UNKNOWN, WAIT, _batch_size, _clean, _counters,
    _input_shape, _jsonable, _parse_range, _step_line,
)

_now = time.time_ns
try:
    _cpu = time.thread_time_ns
    _cpu()
except (AttributeError, OSError):  # platforms without a per-thread clock: process CPU is the next best
    _cpu = time.process_time_ns
_tid = threading.get_ident

FLUSH_NS = 500000000  # flush at a step boundary at most this long after the previous flush
UNWRITTEN_MAX = 64 << 20  # step events held in memory while the run's disk refuses them (~600k steps)
COMMIT_BACKWARD_NS = 1000000000  # hold backward-delimited steps this long before trusting there is no optimizer
HELD_MAX = 512  # ... or, once an optimizer exists, this many (more micro-batches than any accumulation runs)
GPU_PENDING_MAX = 4096

R = None  # the process's recorder once activated; the torch patches and gpusleuth.api read it
_T = None  # the _gpusleuth_torch module, once torch is imported (CUDA events, profiler)
_F = None  # the _gpusleuth_flops module, when one step's FLOPs are to be counted
_D = None  # the _gpusleuth_dist module, once torch is imported (collectives, DDP comm hook)


def _say(text):
    """One line on the job's stderr, never an exception (the job's own output must not break us)."""
    try:
        os.write(2, (text + "\n").encode("utf-8", "replace"))
    except BaseException:
        pass


def _drop_flops():
    """The FLOP count is taken: take the counter off the per-step path."""
    global _F
    _F = None


def activate():
    """Start recording this process (called by sitecustomize). Idempotent; never raises."""
    global R
    if R is not None:
        return R
    try:
        run_dir = os.environ.get("GPUSLEUTH_RUN_DIR")
        if not run_dir:
            return None
        R = Recorder(run_dir)
        _hide_our_frames_in_crashes()
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
        R.at_exit()


def _after_fork_in_child():
    if R is not None:
        try:
            R.reset_process(role="python", forked=True)
            if "_gpusleuth_serve" in sys.modules:
                sys.modules["_gpusleuth_serve"].after_fork()
        except BaseException:
            pass


# Server modules whose request handling the hook times (see _gpusleuth_serve): patched right after import.
SERVER_MODULES = ("socketserver", "http.server", "wsgiref.handlers", "flask.app", "starlette.applications",
                  "uvicorn.protocols.http.h11_impl", "uvicorn.protocols.http.httptools_impl", "queue",
                  "asyncio.queues")
_WATCHED = set(("torch",) + SERVER_MODULES)


def _on_import(name, module):
    """A watched module finished importing: torch gets its patches, a server module its request timing."""
    _WATCHED.discard(name)
    if R is None:
        return
    if name == "torch":
        R.torch_imported(module)
        return
    try:
        import _gpusleuth_serve

        _gpusleuth_serve.patch(name, module)
    except BaseException as exc:
        R.error("serve", exc)


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


class Recorder:
    """All per-process recording state. One instance, ``R``; reset in a forked child.

    A step record is a tuple ``(start_ns, end_ns, counters, delimiter, cuda_end_event)``; the write
    buffer holds such tuples and ready-made lines, in order.
    """

    __slots__ = (
        "run_dir", "torch", "torch_ns", "prof_range", "fd", "broken", "pid", "role", "start_ns",
        "header_done", "buf", "last_flush", "errors", "worker", "worker_id", "main_tid", "auto", "mode",
        "emitted", "nb", "cur_start", "c", "in_fetch", "opt_stack", "opt_t0", "bw_depth", "pending",
        "pending_opts", "held", "opt_made", "open_phases", "auto_eval", "eval_mod", "trained", "train_depth",
        "ckpt_depth", "dl_seen", "cuda_on", "cuda_dev", "cuda_prev", "gpu_q", "ev_pool", "prof", "prof_done",
        "prof_ahead", "exited",
        "closure_ns", "gap_t0", "gap_c0", "fwd_handle", "prev_in", "framework_done", "lock", "unwritten",
    )

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.torch = None
        self.torch_ns = None
        self.prof_range = _parse_range(os.environ.get("GPUSLEUTH_PROFILE_STEPS"))
        self.fd = None
        self.reset_process(role="main", forked=False)

    # ----------------------------------------------------------------- process state
    def reset_process(self, role, forked):
        """Fresh state for this process: at activation, and in a forked child (its own file and header,
        none of the parent's buffered lines, steps, CUDA events or profiler)."""
        if forked and self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
        self.fd = None
        self.broken = False
        self.unwritten = b""  # bytes a write refused (disk full): retried at every flush, spilled at exit
        self.pid = os.getpid()
        self.role = role
        self.start_ns = _now()
        self.header_done = False
        self.buf = []
        self.lock = threading.RLock()  # flushes from several threads (a server's request threads)
        self.last_flush = self.start_ns
        self.errors = set()
        self.worker = False
        self.worker_id = None
        self.main_tid = _tid()
        # steps
        self.auto = True  # automatic delimiting (off after the first explicit gpusleuth.step())
        self.mode = None  # None until known, then "optimizer" or "backward"
        self.emitted = 0  # S records written: the index of the next step
        self.nb = 0  # step boundaries seen (emitted, pending or held)
        self.cur_start = None
        self.c = _counters()
        self.in_fetch = False
        self.opt_stack = []
        self.opt_t0 = 0
        self.bw_depth = 0
        self.pending = None
        self.pending_opts = []
        self.held = []
        self.opt_made = False  # an optimizer was constructed in this process (see backward_end)
        self.closure_ns = 0  # time inside optimizer.step(closure)'s closure: forward/backward, not optimizer
        # pre-forward gap: from a step's end to the next step's first forward (zero-code input wait)
        self.gap_t0 = None
        self.gap_c0 = None  # thread CPU clock at gap_t0 (busy gap = preprocessing, idle = I/O); None: not read
        self.framework_done = forked
        self.fwd_handle = None  # the armed global forward pre-hook's handle (see _gpusleuth_torch.arm_forward)
        self.prev_in = None  # weakref to the previous step's first forward input
        # phases
        self.open_phases = []
        self.auto_eval = None
        self.eval_mod = None
        self.trained = None  # WeakSet of modules put in training by an outermost .train(True)
        self.train_depth = 0
        self.ckpt_depth = 0
        self.dl_seen = set()
        # CUDA events and profiler
        self.cuda_on = False
        self.cuda_dev = None  # the device the job's memory is on: events are recorded on its stream
        self.cuda_prev = None
        self.gpu_q = []
        self.ev_pool = []  # CUDA events already resolved, recorded again instead of created anew
        self.prof = None
        self.prof_done = forked  # a forked child never profiles
        self.prof_ahead = 0  # held steps the profiler was already stepped for (see backward_end)
        self.exited = False

    def torch_imported(self, torch):
        """Called once ``import torch`` finished: install the patches (see _gpusleuth_torch)."""
        global _T
        try:
            self.torch = torch
            self.torch_ns = _now()
            import _gpusleuth_torch

            _T = _gpusleuth_torch
            _gpusleuth_torch.install(torch, self)
            atexit.register(_at_exit)  # again, so that we run before torch's own exit handlers (LIFO)
        except BaseException as exc:
            self.error("torch_imported", exc)
        # --- FLOPs of one step for MFU: on unless GPUSLEUTH_FLOPS=0 (gpusleuth run --no-flops) ---
        global _F
        try:
            if os.environ.get("GPUSLEUTH_FLOPS", "1") != "0" and self.role == "main":
                import _gpusleuth_flops

                _F = _gpusleuth_flops
        except BaseException as exc:
            self.error("flops", exc)
        # --- gpusleuth sweep knobs (experiments): only when a GPUSLEUTH_KNOB_* variable is set ---
        try:
            if any(k.startswith("GPUSLEUTH_KNOB_") for k in os.environ):
                import _gpusleuth_knobs

                _gpusleuth_knobs.install(torch, self)
        except BaseException as exc:
            self.error("knobs", exc)

    def become_worker(self, worker_id):
        """This process is a DataLoader worker: it records no steps; write its header now, because
        workers leave through os._exit and never run atexit."""
        self.worker = True
        self.worker_id = worker_id
        self.role = "dataloader_worker"
        self.prof_done = True
        self.flush(force=True)

    # ----------------------------------------------------------------- steps
    def first_activity(self):
        """The first step starts here (first fetch, backward, optimizer step…). Starting the profiler is
        slow, so it happens before the timestamp is taken."""
        if _T is not None:
            if self.prof_range is not None and self.prof is None and not self.prof_done:
                _T.prof_start(self)
            if _T.cuda_check(self):
                self.cuda_prev = _T.cuda_mark(self)
        t = _now()
        self.cur_start = t
        return t

    def _take(self, end, delim):
        """Close the running step's counters into a record; the next step starts at ``end``."""
        start = self.cur_start
        if start is None:
            start = self.torch_ns or self.start_ns
        rec = (start, end, self.c, delim, _T.cuda_mark(self) if self.cuda_on else None)
        self.c = _counters()
        self.cur_start = end
        self.nb += 1
        self.gap_t0 = end
        if _T is not None:
            # the gap's CPU is evidence only for loops without a loader: no CPU-clock syscall otherwise
            self.gap_c0 = None if rec[2][FETCHES] else _cpu()
            _T.arm_forward(self)
        return rec

    def _merge_back(self, recs, micro=False):
        """Reopen records that turned out not to end a step: their counters go back into the running one.
        ``micro``: the records are micro-batches of one optimizer step (held backward records), so their
        forward inputs add up; otherwise (a second optimizer of the same iteration) the earliest one counts."""
        c = self.c
        c_seen = c[GAP] >= 0
        fwd = [(x[FSAMPLES], x[FTOKENS]) for x in [rec[2] for rec in recs] + [c] if x[GAP] >= 0]
        for rec in recs:
            old = rec[2]
            for i in (WAIT, CPU, SAMPLES, OPT, FETCHES):
                c[i] += old[i]
            c[UNKNOWN] = c[UNKNOWN] or old[UNKNOWN]
            if old[SET] is not None:
                c[SET] = old[SET] + (c[SET] or 0)
        for rec in reversed(recs):  # the reopened step's first forward is the earliest one seen
            old = rec[2]
            if old[GAP] >= 0:
                c[GAP], c[FSAMPLES], c[FTOKENS], c[FNEW] = old[GAP], old[FSAMPLES], old[FTOKENS], old[FNEW]
        if micro and len(recs) + c_seen > 1:
            # every micro-batch's input counts; one whose forward went unseen (the job's very first) or whose
            # input had no readable shape leaves the step's count unknown rather than short
            whole = len(fwd) == len(recs) + c_seen
            for k, i in enumerate((FSAMPLES, FTOKENS)):
                c[i] = sum(x[k] for x in fwd) if whole and all(x[k] >= 0 for x in fwd) else -1
        self.cur_start = recs[0][0]

    def _emit(self, rec):
        idx = self.emitted
        self.emitted = idx + 1
        self.buf.append(rec)
        if not self.framework_done:
            self.framework_done = True
            self._framework_fact()
            if _T is not None:
                try:
                    _T.patch_late_writers(self)
                except BaseException as exc:
                    self.error("late_writers", exc)
        if rec[4] is not None or self.gpu_q:
            _T.gpu_step(self, idx, rec[4])
        if self.prof_ahead:
            self.prof_ahead -= 1  # stepped when its boundary happened
        elif self.prof is not None:
            self._prof_boundary()
        if _F is not None and _F.on_emit(self, idx):  # one step's FLOPs for MFU (see _gpusleuth_flops)
            _drop_flops()
        if rec[1] - self.last_flush >= FLUSH_NS:
            self.flush()

    def _prof_boundary(self):
        """Step the profiler: one step of this process ended."""
        was_done, t0 = self.prof_done, _now()
        _T.prof_step(self)
        if self.prof_done and not was_done:
            # the window just ended and the trace was written: our own cost, not the job's — a phase,
            # so it is carved out of the next step instead of inflating it (can take seconds)
            self.buf.append("P\tgpusleuth_profiler\t%d\t%d\tgpusleuth\n" % (t0, _now()))

    def commit(self):
        """Write the pending optimizer-delimited step: something other than a second optimizer happened."""
        rec = self.pending
        if rec is not None:
            self.pending = None
            self._emit(rec)

    def fetch_enter(self):
        """A fetch begins: the pending step is over for sure; the first fetch starts the first step."""
        if self.pending is not None:
            self.commit()
        if self.cur_start is None:
            self.first_activity()
        self.in_fetch = True

    def fetch_exit(self, t0, c0, batch, ok):
        c1 = _cpu()
        t1 = _now()
        self.in_fetch = False
        c = self.c
        c[WAIT] += t1 - t0
        c[CPU] += c1 - c0
        if ok:
            c[FETCHES] += 1
            n = _batch_size(batch)
            if n < 0:
                c[UNKNOWN] = True
            else:
                c[SAMPLES] += n

    def opt_begin(self, opt):
        if self.cur_start is None:
            self.first_activity()
        if self.auto:
            if self.mode != "optimizer":
                if self.held:
                    self.prof_ahead = max(self.prof_ahead - len(self.held), 0)  # never written: not ahead
                    self._merge_back(self.held, micro=True)
                    self.held = []
                self.mode = "optimizer"
                if self.c[FETCHES]:  # without a loader, backward marks micro-batches (micro_backward)
                    _T.release_backward(self)
            rec = self.pending
            if rec is None:
                self.pending_opts = [id(opt)]
            elif id(opt) in self.pending_opts:
                self.pending = None
                self._emit(rec)
                self.pending_opts = [id(opt)]
            else:  # another optimizer of the same iteration: the step goes on
                self.pending = None
                self._merge_back([rec])
                self.pending_opts.append(id(opt))
        if self.auto_eval is not None:
            self.phase_end(self.auto_eval)
        self.closure_ns = 0
        self.opt_t0 = _now()

    def opt_end(self):
        """The outermost optimizer step returned. Its own time excludes its closure's (Lightning and
        LBFGS run forward and backward inside ``step(closure)``: that is not the optimizer's work)."""
        t = _now()
        c = self.c
        c[OPT] += max(t - self.opt_t0 - self.closure_ns, 0)
        self.closure_ns = 0
        if self.auto and self.mode == "optimizer":  # _take(), inlined: this runs every step
            start = self.cur_start
            self.pending = (start if start is not None else t, t, c, "optimizer",
                            _T.cuda_mark(self) if self.cuda_on else None)
            self.c = _counters()
            self.cur_start = t
            self.nb += 1
            self.gap_t0 = t
            self.gap_c0 = None if c[FETCHES] else _cpu()  # see _take
            _T.arm_forward(self)

    def micro_backward(self):
        """A backward inside an optimizer-delimited step of a loop without a DataLoader: catch the next
        forward, which under gradient accumulation is the next micro-batch (see _gpusleuth_torch)."""
        c = self.c
        if not c[FETCHES] and c[GAP] >= 0 and _T is not None:
            _T.arm_forward(self)

    def backward_end(self, t):
        if not self.auto or self.mode == "optimizer" or self.opt_stack:
            return
        rec = self._take(t, "backward")
        if self.mode == "backward":
            self._emit(rec)
            return
        self.held.append(rec)
        if self.prof is not None and not self.opt_made:
            # a loop with no optimizer: its held steps are written a second late, all at once, and stepping
            # the profiler then would put its window on whatever step runs at that moment (asked 6-7, traced
            # 18-20). Step it now, at the boundary itself; _emit skips the steps stepped here.
            self._prof_boundary()
            self.prof_ahead += 1
        if t - self.held[0][0] >= COMMIT_BACKWARD_NS and (not self.opt_made or len(self.held) >= HELD_MAX):
            self._commit_backward()

    def _commit_backward(self):
        self.mode = "backward"
        held, self.held = self.held, []
        for rec in held:
            self._emit(rec)

    def api_step(self, samples):
        if self.worker:
            return
        t = _now()
        if self.auto:
            self.auto = False
            if _T is not None and self.cur_start is not None:
                _T.release_backward(self)
            if self.pending is not None:
                self._merge_back([self.pending])
                self.pending = None
            if self.held:
                self.prof_ahead = max(self.prof_ahead - len(self.held), 0)
                self._merge_back(self.held)
                self.held = []
        if self.cur_start is None and self.prof_range is not None and not self.prof_done and _T is not None:
            _T.prof_start(self)
        if samples is not None:
            self.c[SET] = int(samples)
        self._emit(self._take(t, "explicit"))

    # ----------------------------------------------------------------- phases, logs, facts
    def phase_begin(self, name, source):
        if self.worker:
            return None
        if self.pending is not None:
            self.commit()
        t = _now()
        name = _clean(name)
        snap = (self.nb, self.cur_start, list(self.c))
        tok = [name, t, source, snap]
        self.open_phases.append(tok)
        self.buf.append("B\t%s\t%d\t%s\n" % (name, t, source))
        self.flush()
        return tok

    def phase_end(self, tok):
        """End a phase. If no step boundary fell inside it (an eval loop, a checkpoint between steps),
        the data it fetched belongs to the phase, not to the surrounding training step: roll it back."""
        if tok is None:
            return
        t = _now()
        try:
            self.open_phases.remove(tok)
        except ValueError:
            return  # ended already (e.g. at exit)
        if tok is self.auto_eval:
            self.auto_eval = None
            self.eval_mod = None
        name, start, source, snap = tok
        if snap[0] == self.nb:
            self.cur_start = snap[1]
            c = list(snap[2])
            c[OPT] = self.c[OPT]  # optimizer time is not the phase's data
            self.c = c
            if c[GAP] < 0 and self.gap_t0 is not None:
                self.gap_t0 += t - start  # the phase is not the wait before the next forward
        self.buf.append("P\t%s\t%d\t%d\t%s\n" % (name, start, t, source))
        self.flush()

    def log(self, samples, tokens, metrics):
        if self.worker:
            return
        t = _now()
        rec = {}
        if samples is not None:
            rec["samples"] = samples
            self.c[SET] = int(samples) + (self.c[SET] or 0)
        if tokens is not None:
            rec["tokens"] = tokens
        rec.update(metrics)
        self.buf.append("L\t%d\t%s\n" % (t, json.dumps(rec, default=_jsonable)))
        if t - self.last_flush >= FLUSH_NS:
            self.flush()

    def _framework_fact(self):
        """Which training framework drives the loop (its modules are imported by the first step), so
        that fixes can name the framework's own knob (``val_check_interval``, ``eval_steps``…)."""
        mods = sys.modules
        for name, module in (("lightning", "lightning.pytorch"), ("lightning", "pytorch_lightning"),
                             ("transformers", "transformers.trainer"), ("accelerate", "accelerate"),
                             ("deepspeed", "deepspeed")):
            if module in mods:
                mod = mods.get(name) or mods.get(module)
                self.info({"kind": "framework", "name": name,
                           "version": str(getattr(mod, "__version__", "") or "") or None})
                return

    def info(self, fact):
        self.buf.append("I\t%d\t%s\n" % (_now(), json.dumps(fact, default=str)))

    def error(self, where, exc):
        """One diagnostic line per failure site; the user's program carries on untouched."""
        try:
            if where in self.errors:
                return
            self.errors.add(where)
            self.info({"kind": "hook_error", "where": where, "error": "%s: %s" % (type(exc).__name__, exc)})
            self.flush()
        except BaseException:
            pass

    def trace_path(self):
        rank = os.environ.get("RANK", "0")
        return os.path.join(self.run_dir, "trace", "rank%s-pid%d.pt.trace.json.gz" % (_clean(rank), self.pid))

    # ----------------------------------------------------------------- writing
    def _header(self):
        torch = self.torch or sys.modules.get("torch")
        head = {
            "pid": self.pid,
            "ppid": os.getppid(),
            "role": self.role,
            "argv": list(getattr(sys, "argv", []) or []),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "torch": str(getattr(torch, "__version__", "")) or None if torch is not None else None,
            "t_ns": self.start_ns,
        }
        try:
            import _gpusleuth_dist  # rank, local rank, world size, node, host: stdlib only

            head.update(_gpusleuth_dist.identity())
        except BaseException as exc:
            self.error("identity", exc)
        if self.worker_id is not None:
            head["worker_id"] = self.worker_id
        return "H\t%s\n" % json.dumps(head, default=str)

    def flush(self, force=False):
        """Append the buffered lines with one write; the file (and its header) appear at the first one.
        Other threads may append while we write (a server's requests): the lines taken are cut off the
        front of the buffer, never the buffer swapped, and one flush writes at a time."""
        with self.lock:
            self._flush(force)

    def _flush(self, force):
        """A write the disk refuses (full, quota) loses nothing: the bytes not written stay in
        ``unwritten`` (up to UNWRITTEN_MAX) and go first at the next flush, so the file continues exactly
        where it stopped; at exit what still could not be written is spilled (``_spill``)."""
        if self.broken:
            self.buf = []
            return
        if not self.buf and not self.unwritten and not (force and not self.header_done):
            return
        n = len(self.buf)
        buf = self.buf[:n]
        del self.buf[:n]
        data = self.unwritten
        self.unwritten = b""
        try:
            if not self.header_done:
                buf.insert(0, self._header())
                self.header_done = True
            data += "".join([x if x.__class__ is str else _step_line(x) for x in buf]).encode("utf-8", "replace")
            if self.fd is None:
                raw = os.path.join(self.run_dir, "raw")
                os.makedirs(raw, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
                self.fd = os.open(os.path.join(raw, "events-%d.tsv" % self.pid), flags, 0o644)
            while data:
                n = os.write(self.fd, data)
                data = data[n:]
        except OSError:
            if len(data) > UNWRITTEN_MAX:
                self.broken = True  # a disk that stays full for this long: stop holding the job's memory
                _say("gpusleuth: the run's disk refused %d bytes of step events; recording of steps stopped"
                     % len(data))
            else:
                self.unwritten = data
        except BaseException:
            self.broken = True  # nowhere to write: stop trying rather than slow the job down
        self.last_flush = _now()
        if _T is not None:
            _T.cuda_check(self)

    def _spill(self):
        """At exit, events the run's disk never took go to ``$GPUSLEUTH_SPILL_DIR`` (another filesystem,
        chosen by the launcher), which appends them to this process's events file once it has space."""
        data, self.unwritten = self.unwritten, b""
        spill = os.environ.get("GPUSLEUTH_SPILL_DIR")
        if not data:
            return
        try:
            if not spill:
                raise OSError("no spill directory")
            fd = os.open(os.path.join(spill, "events-%d.tsv" % self.pid), os.O_WRONLY | os.O_CREAT | os.O_APPEND,
                         0o600)
            try:
                while data:
                    data = data[os.write(fd, data):]
            finally:
                os.close(fd)
        except OSError:
            _say("gpusleuth: %d step event line(s) of process %d could not be written (the run's disk is full)"
                 % (data.count(b"\n"), self.pid))

    def at_exit(self):
        """Process exit (normal, sys.exit, an exception or Ctrl-C unwinding): write what we know."""
        try:
            if self.exited:
                self.flush()
                self._spill()
                return
            self.exited = True
            if self.auto_eval is not None:
                self.phase_end(self.auto_eval)
            self.commit()
            if self.held:
                self._commit_backward()
            if _F is not None:
                _F.at_exit(self)
            if self.gpu_q:
                _T.gpu_poll(self)
            if _D is not None:
                _D.at_exit(self)
            if self.prof is not None:
                prof, self.prof = self.prof, None
                self.prof_done = True
                try:
                    prof.stop()  # exports the steps captured so far through on_trace_ready
                except BaseException as exc:
                    self.error("profiler_stop", exc)
            if self.header_done or self.buf:
                self.buf.append("X\t%d\n" % _now())  # the exit mark: everything this process saw is written
            self.flush(force=self.torch is not None)
            self._spill()
        except BaseException:
            pass


# ----------------------------------------------------------------------------- explicit API entry points
# gpusleuth.api calls these when this module is active in the process. Each swallows its own failures.

def api_step(samples=None):
    try:
        if R is not None:
            R.api_step(samples)
    except BaseException as exc:
        R.error("api_step", exc)


def api_phase_begin(name, source="api"):
    try:
        if R is not None:
            return R.phase_begin(name, source)
    except BaseException as exc:
        R.error("api_phase", exc)
    return None


def api_phase_end(tok):
    try:
        if R is not None and tok is not None:
            R.phase_end(tok)
    except BaseException as exc:
        R.error("api_phase", exc)


def api_stage_begin(name):
    """``gpusleuth.stage(name)`` entered: a token when a request is open in this thread/task, else None."""
    try:
        if R is not None and "_gpusleuth_serve" in sys.modules:
            return sys.modules["_gpusleuth_serve"].stage_begin(name)
    except BaseException as exc:
        R.error("api_stage", exc)
    return None


def api_stage_end(tok):
    try:
        if R is not None and tok is not None:
            sys.modules["_gpusleuth_serve"].stage_end(tok)
    except BaseException as exc:
        R.error("api_stage", exc)


def api_log(samples=None, tokens=None, metrics=None):
    try:
        if R is not None:
            R.log(samples, tokens, metrics or {})
    except BaseException as exc:
        R.error("api_log", exc)


def api_watch(iterable):
    if R is None:
        return iterable
    return Watched(iterable)


class Watched:
    """An iterable whose ``__next__`` time counts as data wait, exactly like a DataLoader fetch."""

    def __init__(self, iterable):
        self._src = iterable
        self._it = None

    def __iter__(self):
        it = iter(self._src)
        if it is self._src:  # an iterator: we are its single pass
            self._it = it
            return self
        w = Watched(self._src)
        w._it = it
        return w

    def __len__(self):
        return len(self._src)

    def __next__(self):
        it = self._it
        if it is None:
            it = self._it = iter(self._src)
        r = R
        if r is None or r.in_fetch or r.worker or _tid() != r.main_tid:
            return next(it)
        try:
            r.fetch_enter()
            t0 = _now()
            c0 = _cpu()
        except BaseException as exc:
            r.error("watch", exc)
            return next(it)
        try:
            item = next(it)
        except BaseException:
            try:
                r.fetch_exit(t0, c0, None, False)
            except BaseException as exc:
                r.error("watch", exc)
            raise
        try:
            r.fetch_exit(t0, c0, item, True)
        except BaseException as exc:
            r.error("watch", exc)
        return item
