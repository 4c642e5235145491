"""The recorder of one Python process: the step and phase state machine (standard library only, 3.8+).

Runs inside the user's job, so it obeys the hook's three rules: standard library only and Python 3.8+ (the
job may run another interpreter or venv); never raise into the user's program and never print (each
failure becomes one ``hook_error`` line in our own file); cost a few microseconds per training step (no
per-step syscalls except the periodic flush).

The patch modules (``_gpusleuth_torch``, ``_gpusleuth_dist``, ``_gpusleuth_serve`` with ``_gpusleuth_request`` and
``_gpusleuth_handoff``, ``_gpusleuth_knobs``) notice what the job does and call this recorder's methods; none of them sets its attributes
(tests/test_house_rules.py). Lines go out through its ``Writer`` (``_gpusleuth_writer``); what it asks of
torch — CUDA events, the profiler, the forward pre-hook — through its ``Device`` (``_gpusleuth_device``).
It imports no patch module: the activation (``_gpusleuth_autohook``) hands the torch patches in with
``torch_imported``, so the hook's imports form no circle.

Step delimiting, in short (docs/run-format.md gives the contract):

* an outermost ``optimizer.step()`` ends a step. Its record is kept *pending* until the next fetch or phase,
  or until the optimizers' own order decides (docs/step-model.md, "Several optimizers"): the optimizers that
  step between two fetches form one *cycle* — one iteration (GAN generator and discriminator, Muon + AdamW
  parameter splits, one optimizer per layer) — which is written as one step when its first optimizer steps
  again. An optimizer that steps again before those ahead of it in the cycle did, or one that was freed,
  shows that they were used one after another (a new optimizer per stage, per epoch or per step): each of
  theirs is a step of its own;
* without any optimizer, ``backward()`` ends a step. Those steps are *held* until the process has shown
  for a second that it has no optimizer (gradient accumulation calls backward several times per optimizer
  step, and we must not count each one as a step). A process that has constructed an optimizer keeps
  holding them until that optimizer steps (or ``HELD_MAX`` pile up): a first iteration longer than a
  second — DataLoader workers starting, an evaluation at iteration 0, two slow micro-batches — is not
  evidence of a loop without one, and committing on time alone made extra steps of it;
* after the first explicit ``gpusleuth.step()`` only explicit calls delimit steps in this process.

A step record is a tuple ``(start_ns, end_ns, counters, delimiter, cuda_end_event)``; the write buffer
holds such tuples and ready-made lines, in order.
"""
import json
import os
import sys
import weakref

from _gpusleuth_device import Device
from _gpusleuth_identity import identity
from _gpusleuth_records import (
    CPU, FETCHES, FNEW, FSAMPLES, FTOKENS, GAP, OPT, SAMPLES, SET, UNKNOWN, WAIT, _add_counts, _batch_size, _clean,
    _counters, _cpu, _input_shape, _jsonable, _now, _parse_range, _tid,
)
from _gpusleuth_writer import FLUSH_NS, Writer
from _gpusleuth_records import (  # the event-line formats
    exit_line, fact_line, header_line, log_line, phase_begin_line, phase_line)

COMMIT_BACKWARD_NS = 1000000000  # hold backward-delimited steps this long before trusting there is no optimizer
HELD_MAX = 512  # ... or, once an optimizer exists, this many (more micro-batches than any accumulation runs)

R = None  # the process's recorder once activated; the patch modules and the API read it


def start(run_dir):
    """The process's recorder (made at the first call)."""
    global R
    if R is None:
        R = Recorder(run_dir)
    return R


_FAILED = object()  # what a fetch that raised returned
_SEQ_FIRST = {}  # id(module) -> whether its recurrent layers take [seq, batch, …] (asked once per model)
STATE_INIT_FRAMES = 6  # how far up opt_pre looks for a state-initialising caller


def _lr_zero(opt):
    """The first parameter group's lr is 0 (or a tensor, not read here): the only steps worth ``_state_init_call``'s
    frame walk (0.8 µs) — a stateless optimizer would pay it every step otherwise."""
    try:
        lr = opt.param_groups[0].get("lr")
    except (AttributeError, IndexError, TypeError):
        return False
    return not isinstance(lr, (int, float)) or lr == 0


def _state_init_call():
    """Whether this optimizer step is torch.distributed.checkpoint's ``_init_optim_state``: a resumed job's
    ``get_state_dict``/``set_state_dict`` calls ``optim.step()`` once, with zero gradients and lr 0, to create
    the optimizer's state before loading into it. It is not a training step (counted, the FSDP2 example resumed
    from its checkpoint read 25 steps for 24). A few frame hops (under a microsecond), only at an outermost step."""
    f = sys._getframe(2)
    for _ in range(STATE_INIT_FRAMES):
        if f is None:
            return False
        code = f.f_code
        if code.co_name == "_init_optim_state" and "checkpoint" in code.co_filename:
            return True
        f = f.f_back
    return False


def _weak(x):
    """A weak reference to a tensor, or one that answers None (no tensor, or one refusing weak references)."""
    try:
        return weakref.ref(x) if x is not None else _NONE
    except TypeError:
        return _NONE


def _NONE():
    return None


def _same(ref, opt):
    """Whether an optimizer reference (``Recorder._opt_key``) is ``opt``."""
    return ref() is opt if ref.__class__ is weakref.ref else ref == id(opt)


def _alive(ref):
    """Whether the referenced optimizer still exists (an ``id`` cannot tell: taken as alive)."""
    return ref.__class__ is not weakref.ref or ref() is not None


EVAL_ROOT_CALLS = 3  # a pass with gradients off that calls its model this often on new inputs is an evaluation
PASS_INPUTS_KEPT = 4  # the root calls' inputs remembered (weakly) to tell a teacher's forward by its input


class _NoGradPass:
    """A pass with gradients off after a training step: an evaluation without ``model.eval()``, or a teacher's
    forward inside the step, told apart by what follows (``Recorder._ng_fetch``, ``Recorder._ng_close``).

    ``root`` is the first module it called (the model: a module's pre-hook fires before its children's);
    ``calls`` counts the root's calls and ``inputs`` keeps the first few inputs it took. An evaluation is
    confirmed by a fetch (``by_loader``) or by ``EVAL_ROOT_CALLS`` calls of its model on new inputs with no
    training forward between (an evaluation over tensors in memory, no DataLoader)."""

    __slots__ = ("start", "tok", "snap", "fetch_t0", "book", "inputs", "last_t", "root", "calls", "by_loader")

    def __init__(self, start, snap, book, module, x, t):
        self.start = start  # where an evaluation would begin (the step boundary, or its first forward)
        self.tok = None  # the eval phase's token once confirmed
        self.snap = snap  # (steps, step start, counters) at the start: rolled back to when the phase ends
        self.fetch_t0 = 0  # the start of the last fetch inside the pass (0: none since its last forward)
        self.book = book  # its first forward's record, the step's own if it turns out a teacher's
        self.inputs = [_weak(x)]
        self.last_t = t  # the last module call inside it
        self.root = _weak(module)
        self.calls = 1
        self.by_loader = False

    def root_call(self, module, args, t):
        """Another module call with gradients off: a call of the pass's model on a new input counts (the
        input kept while there is room)."""
        self.last_t = t
        if self.root() is not module:
            return
        x = next((a for a in args if getattr(a, "shape", None) is not None), None)
        if self.fed(x):
            return  # the same batch again (several heads, a second look): not another one
        self.calls += 1
        if len(self.inputs) < PASS_INPUTS_KEPT:
            self.inputs.append(_weak(x))

    def fed(self, x):
        """The training forward's input ``x`` was one this pass's model took: a teacher's forward, the step's own."""
        return x is not None and any(x is r() for r in self.inputs)


class Recorder:
    """All per-process recording state. One instance, ``R``; reset in a forked child."""

    __slots__ = (
        "pp_microbatches",
        "run_dir", "torch", "torch_ns", "patches", "flops", "exit_calls", "prof_range", "out", "dev", "pid",
        "role", "start_ns", "errors", "worker", "worker_id", "main_tid", "auto", "mode", "emitted", "nb",
        "cur_start", "c", "in_fetch", "opt_stack", "opt_t0", "bw_depth", "pending", "opt_ref", "shape", "scaler_opt", "ng", "closure_calls", "held",
        "opt_made", "closure_ns", "gap_t0", "gap_c0", "prev_in", "framework_done", "open_phases", "auto_eval",
        "eval_mod", "trained", "train_depth", "ckpt_depth", "dl_seen", "prof_ahead", "exited", "opt_init",
    )

    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.torch = None
        self.torch_ns = None
        self.patches = None  # _gpusleuth_torch once torch is imported (release_backward, patch_late_writers)
        self.flops = None  # _gpusleuth_flops while one step's FLOPs are to be counted
        self.exit_calls = []  # a patch module's own last writes at exit (dist: completed collectives)
        self.prof_range = _parse_range(os.environ.get("GPUSLEUTH_PROFILE_STEPS"))
        self.out = None
        self.dev = None
        self.reset_process(role="main", forked=False)

    # ----------------------------------------------------------------- process state
    def reset_process(self, role, forked):
        """Fresh state for this process: at activation, and in a forked child (its own file and header,
        none of the parent's buffered lines, steps, CUDA events or profiler)."""
        if forked and self.out is not None:
            self.out.close()
        self.pid = os.getpid()
        self.role = role
        self.start_ns = _now()
        self.out = Writer(self.run_dir, self.pid, self._header, self.start_ns)
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
        self.opt_init = False  # the outermost optimizer step running now only initialises state (see opt_pre)
        self.bw_depth = 0
        self.pending = None  # the optimizer steps of the open cycle: [(optimizer reference, record), …] or None
        self.opt_ref = None  # the last optimizer's reference (one weakref per optimizer, not per step)
        self.scaler_opt = None  # the optimizer a GradScaler is deciding whether to step (see scaler_begin)
        self.shape = {}  # what the step model had to decide, for the structure check (the ``step_model`` fact)
        self.held = []
        self.opt_made = False  # an optimizer was constructed in this process (see backward_end)
        self.closure_ns = 0  # time inside optimizer.step(closure)'s closure: forward/backward, not optimizer
        self.closure_calls = 0  # how often the running optimizer step called its closure (LBFGS: many times)
        # pre-forward gap: from a step's end to the next step's first forward (zero-code input wait)
        self.gap_t0 = None
        self.gap_c0 = None  # thread CPU clock at gap_t0 (busy gap = preprocessing, idle = I/O); None: not read
        self.framework_done = forked
        self.prev_in = None  # weakref to the previous step's first forward input
        # phases
        self.open_phases = []
        self.ng = None  # a pass with gradients off after a step (_NoGradPass)
        self.pp_microbatches = 0  # inside a pipeline schedule's step: its micro-batches (_gpusleuth_dist)
        self.auto_eval = None
        self.eval_mod = None
        self.trained = None  # WeakSet of modules put in training by an outermost .train(True)
        self.train_depth = 0
        self.ckpt_depth = 0
        self.dl_seen = set()
        self.prof_ahead = 0  # held steps the profiler was already stepped for (see backward_end)
        self.exited = False
        # CUDA events, profiler, forward hook: a forked child never profiles
        if self.torch is not None:
            self.dev = Device(self.torch, self, None if forked else self.prof_range, self.first_forward)

    def torch_imported(self, torch, patches):
        """``import torch`` finished: install ``patches`` (``_gpusleuth_torch``, handed in by the activation
        so that this module imports no patch module) and arm the job's first forward — its input is what
        step 1's input is compared with."""
        self.torch = torch
        self.torch_ns = _now()
        self.patches = patches
        self.dev = Device(torch, self, self.prof_range if self.role == "main" else None, self.first_forward)
        patches.install(torch, self)
        self.dev.arm()

    def count_flops(self, flops):
        """Count one step's FLOPs with ``flops`` (``_gpusleuth_flops``): it is told of every step written until
        it says it is done."""
        self.flops = flops

    def before_exit(self, call):
        """``call(recorder)`` runs at exit before the last flush (a patch module's pending lines)."""
        self.exit_calls.append(call)

    def become_worker(self, worker_id):
        """This process is a DataLoader worker: it records no steps; write its header now, because
        workers leave through os._exit and never run atexit."""
        self.worker = True
        self.worker_id = worker_id
        self.role = "dataloader_worker"
        if self.dev is not None:
            self.dev.no_profile()
        self.flush(force=True)

    def here(self):
        """Whether a call on this thread is the job's own to time: the main thread, not a DataLoader
        worker, not inside a fetch already being timed."""
        return not (self.in_fetch or self.worker or _tid() != self.main_tid)

    def cuda_on(self):
        """CUDA is in use in this process (the program initialized it)."""
        dev = self.dev
        return dev is not None and dev.on

    def cuda_event(self):
        """An event on the job's device's current stream, or None (see ``Device.mark``)."""
        dev = self.dev
        return dev.mark() if dev is not None else None

    # ----------------------------------------------------------------- steps
    def first_activity(self):
        """The first step starts here (first fetch, backward, optimizer step…). Starting the profiler is
        slow, so it happens before the timestamp is taken."""
        if self.dev is not None:
            self.dev.first_step()
        t = _now()
        self.cur_start = t
        return t

    def _arm(self):
        dev = self.dev
        if dev is not None:
            dev.arm()

    def _take(self, end, delim):
        """Close the running step's counters into a record; the next step starts at ``end``."""
        start = self.cur_start
        if start is None:
            start = self.torch_ns or self.start_ns
        dev = self.dev
        rec = (start, end, self.c, delim, dev.mark() if dev is not None and dev.on else None)
        self.c = _counters()
        self.cur_start = end
        self.nb += 1
        self.gap_t0 = end
        if dev is not None:
            # the gap's CPU is evidence only for loops without a loader: no CPU-clock syscall otherwise
            self.gap_c0 = None if rec[2][FETCHES] else _cpu()
            dev.arm()
        return rec

    def _merge_back(self, recs, micro=False):
        """Reopen records that turned out not to end a step: their counters go back into the running one.
        ``micro``: the records are micro-batches of one optimizer step (held backward records), so their
        forward inputs add up; otherwise (a second optimizer of the same iteration) the earliest one counts."""
        c = self.c
        c_seen = c[GAP] >= 0
        fwd = [(x[FSAMPLES], x[FTOKENS]) for x in [rec[2] for rec in recs] + [c] if x[GAP] >= 0]
        for rec in recs:
            _add_counts(c, rec[2])
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
        out = self.out
        out.buf.append(rec)
        if not self.framework_done:
            self.framework_done = True
            self._framework_fact()
            if self.patches is not None:
                try:
                    self.patches.patch_late_writers(self)
                except BaseException as exc:
                    self.error("late_writers", exc)
        dev = self.dev
        if dev is not None:
            if rec[4] is not None or dev.q:
                dev.step(idx, rec[4])
            if self.prof_ahead:
                self.prof_ahead -= 1  # stepped when its boundary happened
            elif dev.prof is not None:
                self._prof_boundary()
        if self.flops is not None and self.flops.on_emit(self, idx):  # one step's FLOPs for MFU
            self.flops = None  # the count is taken: off the per-step path
        if rec[1] - out.last_flush >= FLUSH_NS:
            self.flush()

    def _prof_boundary(self):
        """Step the profiler: one step of this process ended."""
        t0 = _now()
        if self.dev.prof_step():
            # the window just ended and the trace was written: our own cost, not the job's — a phase,
            # so it is carved out of the next step instead of inflating it (can take seconds)
            self.out.buf.append(phase_line("gpusleuth_profiler", t0, _now(), "gpusleuth"))

    def commit(self):
        """Write the pending optimizer cycle as one step: a fetch, a phase or the exit ended the iteration."""
        cycle = self.pending
        if cycle is not None:
            self.pending = None
            self._emit(self._joined(cycle))

    def _joined(self, cycle):
        """The records of one cycle's optimizer steps as one step record: counters summed, the earliest
        forward's input, the last step's end and CUDA event."""
        if len(cycle) == 1:
            return cycle[0][1]
        recs = [rec for _, rec in cycle]
        c = list(recs[0][2])
        for rec in recs[1:]:
            old = rec[2]
            _add_counts(c, old)
            if c[GAP] < 0 <= old[GAP]:
                c[GAP], c[FSAMPLES], c[FTOKENS], c[FNEW] = old[GAP], old[FSAMPLES], old[FTOKENS], old[FNEW]
        self._count("joined")
        if not c[FETCHES]:
            self._count("joined_unfetched")  # no fetch inside: only the optimizers' order says it is one
        last = recs[-1]
        return (recs[0][0], last[1], c, last[3], last[4])

    def _count(self, what, n=1):
        shape = self.shape
        shape[what] = shape.get(what, 0) + n

    def _opt_key(self, opt):
        """A reference to ``opt`` that does not keep it alive (its state can be gigabytes) and that a new
        optimizer reusing a freed one's ``id`` cannot match; ``id`` where the object refuses weak references."""
        ref = self.opt_ref
        if ref is not None and _same(ref, opt):
            return ref
        try:
            ref = weakref.ref(opt)
        except TypeError:
            ref = id(opt)
        self.opt_ref = ref
        return ref

    def _resolve_cycle(self, opt, cycle):
        """``opt`` begins a step while the cycle's optimizer steps are pending (no fetch or phase since)."""
        if _same(cycle[0][0], opt):  # the cycle came round: one iteration (also the one-optimizer loop)
            self.pending = None
            self._emit(self._joined(cycle))
            return
        k = next((i for i, (ref, _) in enumerate(cycle) if _same(ref, opt)), -1)
        if k > 0:
            # ``opt`` steps again before the optimizers ahead of it came round: those were used one after
            # another (a stage, a layer trained in turn), not in one iteration — each of theirs was a step
            self.pending = None
            self._count("split")
            for _, rec in cycle[:k]:
                self._emit(rec)
            self._emit(self._joined(cycle[k:]))
            return
        dead = max((i for i, (ref, _) in enumerate(cycle) if not _alive(ref)), default=-1)
        if dead >= 0:  # a freed optimizer never steps again: its steps ended (a new optimizer per step/epoch)
            self._count("retired")
            rest = cycle[dead + 1:]
            self.pending = rest or None
            for _, rec in cycle[:dead + 1]:
                self._emit(rec)
        # otherwise another optimizer of the same iteration, as far as anything says yet: the cycle goes on

    def fetch(self, fetch, it, counts=True):
        """``fetch(it)`` timed as data wait: the one timed fetch of the hook — a DataLoader iterator's
        ``__next__``, a ``gpusleuth.watch``-ed iterable's, and (``counts=False``: wait, not a batch) a loader
        starting its worker processes. A fetch ends the pending optimizer step for sure; the job's first
        fetch starts its first step. The batch's samples are its first tensor's first dimension.

        The hottest path of the hook (once per batch): kept inline, see BENCHMARKS.md. Bookkeeping errors
        are recorded, never raised; the fetch's own exception (StopIteration at the end of an epoch) passes
        through, its time counted as waiting too; Ctrl-C is the user's and goes through."""
        if self.in_fetch or self.worker or _tid() != self.main_tid:
            return fetch(it)
        try:
            if self.pending is not None:
                self.commit()
            if self.cur_start is None:
                self.first_activity()
            self.in_fetch = True
            t0 = _now()
            if self.ng is not None:
                self._ng_fetch(t0)
            c0 = _cpu()
        except Exception as exc:
            self.in_fetch = False
            self.error("fetch_enter", exc)
            return fetch(it)
        batch = _FAILED
        try:
            batch = fetch(it)
            return batch
        finally:  # also when the fetch raised: StopIteration at the end of an epoch is waiting too
            try:
                c1 = _cpu()
                t1 = _now()
                self.in_fetch = False
                c = self.c
                c[WAIT] += t1 - t0
                c[CPU] += c1 - c0
                if counts and batch is not _FAILED:
                    c[FETCHES] += 1
                    first = batch
                    if first.__class__ is tuple or first.__class__ is list:
                        first = first[0] if first else None
                    shape = getattr(first, "shape", None)
                    if shape:  # a tensor (or array) first: the common case
                        c[SAMPLES] += shape[0]
                    else:
                        n = _batch_size(batch)
                        if n < 0:
                            c[UNKNOWN] = True
                        else:
                            c[SAMPLES] += n
            except Exception as exc:
                self.in_fetch = False
                self.error("fetch_exit", exc)

    def loader_fact(self, fact):
        """One ``I`` record per distinct DataLoader configuration: what the input-pipeline rules reason about."""
        key = tuple(sorted((k, str(v)) for k, v in fact.items()))
        if key not in self.dl_seen:
            self.dl_seen.add(key)
            self.info(fact)

    def optimizer_made(self):
        """An optimizer exists: it will end the steps, backward() must not (see backward_end)."""
        self.opt_made = True

    def opt_pre(self, opt, args, kwargs):
        """torch's global optimizer-step pre-hook. A stack keeps only the outermost step (wrappers such as
        ZeroRedundancyOptimizer or Lookahead call an inner optimizer's step). Returns new (args, kwargs)
        when the step has a closure to time, else None."""
        if self.worker:
            return None
        try:
            self.scaler_opt = None  # the scaler's optimizer did step
            stack = self.opt_stack
            if stack:
                if any(o is opt for o in stack):  # an earlier step raised before its post-hook: start over
                    del stack[:]
                else:
                    stack.append(opt)
                    return None
            stack.append(opt)
            if not opt.state and _lr_zero(opt) and _state_init_call():
                self.opt_init = True
                return None
            self.opt_begin(opt)
            return self._time_closure(args, kwargs)
        except Exception as exc:  # Ctrl-C is the user's: let it through
            self.error("optimizer_pre", exc)
        return None

    def opt_post(self, opt):
        """torch's global optimizer-step post-hook: the outermost step returned."""
        if self.worker:
            return
        try:
            stack = self.opt_stack
            if stack and stack[-1] is opt:
                stack.pop()
                if stack:
                    return
                if self.opt_init:
                    self.opt_init = False
                else:
                    self.opt_end(opt)
        except Exception as exc:
            self.error("optimizer_post", exc)

    def scaler_begin(self, opt):
        """A GradScaler decides whether ``opt`` steps; returns a token for ``scaler_end``."""
        if self.worker or not self.here() or self.opt_stack:
            return None
        self.scaler_opt = opt
        return opt

    def scaler_end(self, token):
        """The scaler returned: if the optimizer's step did not run, the iteration ended with a skipped
        update (inf/NaN gradients) — a step of its own, written with the delimiter ``skipped``."""
        if token is None or self.scaler_opt is not token:
            return
        self.scaler_opt = None
        try:
            if self.cur_start is None:
                self.first_activity()
            self.opt_begin(token)
            self.opt_end(token, "skipped")
            self._count("skipped")
        except Exception as exc:
            self.error("scaler_skip", exc)

    def _time_closure(self, args, kwargs):
        """``step(closure)``: hand the optimizer a closure that adds its own duration to ``closure_ns``, so
        that ``opt_end`` can bill the optimizer only for its own work. None (no change) without a closure.
        ``args[0]`` is the optimizer itself (torch passes ``self`` first)."""
        closure = kwargs.get("closure") if kwargs else None
        positional = closure is None and len(args) > 1 and callable(args[1])
        if positional:
            closure = args[1]
        if closure is None or not callable(closure):
            return None

        def timed_closure(*a, **k):
            t0 = _now()
            self.closure_calls += 1
            try:
                return closure(*a, **k)
            finally:
                self.closure_ns += _now() - t0

        if positional:
            return (args[0], timed_closure) + tuple(args[2:]), kwargs
        kwargs = dict(kwargs)
        kwargs["closure"] = timed_closure
        return args, kwargs

    def opt_begin(self, opt):
        if self.ng is not None:
            self._ng_close(_now())
        if self.cur_start is None:
            self.first_activity()
        if self.auto:
            if self.mode != "optimizer":
                if self.held:
                    self.prof_ahead = max(self.prof_ahead - len(self.held), 0)  # never written: not ahead
                    self._merge_back(self.held, micro=True)
                    self.held = []
                self.mode = "optimizer"
                if self.c[FETCHES] and self.patches is not None:  # without a loader, backward marks micro-batches
                    self.patches.release_backward(self)
            cycle = self.pending
            if cycle is not None:
                self._resolve_cycle(opt, cycle)
        if self.auto_eval is not None:
            self.phase_end(self.auto_eval)
        self.closure_ns = 0
        self.closure_calls = 0
        self.opt_t0 = _now()

    def opt_end(self, opt, delim="optimizer"):
        """The outermost optimizer step returned. Its own time excludes its closure's (Lightning and
        LBFGS run forward and backward inside ``step(closure)``: that is not the optimizer's work)."""
        t = _now()
        c = self.c
        c[OPT] += max(t - self.opt_t0 - self.closure_ns, 0)
        self.closure_ns = 0
        if self.closure_calls > 1:  # the optimizer evaluated the loss several times (LBFGS' line search)
            self._count("reevaluated")
        if self.auto and self.mode == "optimizer":  # _take(), inlined: this runs every step
            start = self.cur_start
            dev = self.dev
            entry = (self._opt_key(opt), (start if start is not None else t, t, c, delim,
                                          dev.mark() if dev.on else None))
            cycle = self.pending
            if cycle is None:
                self.pending = [entry]
            else:
                cycle.append(entry)
            self.c = _counters()
            self.cur_start = t
            self.nb += 1
            self.gap_t0 = t
            self.gap_c0 = None if c[FETCHES] else _cpu()  # see _take
            dev.arm()

    def backward(self, real, args, kwargs):
        """``torch.autograd.backward`` (what ``Tensor.backward`` calls) through the hook: the end of a step in
        a loop without an optimizer; inside an optimizer-delimited step without a DataLoader, the mark of
        a micro-batch. ``real`` runs exactly once; its result or exception passes through."""
        if self.bw_depth or self.worker or (self.cur_start is not None and not self.auto):
            return real(*args, **kwargs)  # nothing to do: backward does not delimit steps here
        if self.cur_start is not None and self.mode == "optimizer":
            self.bw_depth += 1  # a backward inside it (reentrant checkpointing's) is not the loop's
            try:
                result = real(*args, **kwargs)  # kept only for loops without a DataLoader:
            finally:
                self.bw_depth -= 1
            try:
                self.micro_backward()  # the next forward may be another micro-batch of this step
            except Exception as exc:
                self.error("backward", exc)
            return result
        try:
            if self.cur_start is None:
                self.first_activity()
        except Exception as exc:
            self.error("backward", exc)
        self.bw_depth += 1
        try:
            result = real(*args, **kwargs)
        finally:
            self.bw_depth -= 1
        try:
            self.backward_end(_now())
        except Exception as exc:
            self.error("backward", exc)
        return result

    def micro_backward(self):
        """A backward inside an optimizer-delimited step of a loop without a DataLoader: catch the next
        forward, which under gradient accumulation is the next micro-batch (see ``first_forward``)."""
        c = self.c
        if not c[FETCHES] and c[GAP] >= 0:
            self._arm()

    def backward_end(self, t):
        if not self.auto or self.mode == "optimizer" or self.opt_stack:
            return
        rec = self._take(t, "backward")
        if self.mode == "backward":
            self._emit(rec)
            return
        self.held.append(rec)
        if self.dev is not None and self.dev.prof is not None and not self.opt_made:
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
        if self.ng is not None:
            self._ng_close(t)
        if self.auto:
            self.auto = False
            if self.patches is not None and self.cur_start is not None:
                self.patches.release_backward(self)
            if self.pending is not None:
                self._merge_back([rec for _, rec in self.pending])
                self.pending = None
            if self.held:
                self.prof_ahead = max(self.prof_ahead - len(self.held), 0)
                self._merge_back(self.held)
                self.held = []
        if self.cur_start is None and self.dev is not None:
            self.dev.profile_from_here()
        if samples is not None:
            self.c[SET] = int(samples)
        self._emit(self._take(t, "explicit"))

    # ----------------------------------------------------------------- the first forward of a step
    def first_forward(self, module, args):
        """torch's global forward pre-hook, armed at each step's end (``Device.arm``): the first module call
        since then ends the pre-forward gap. Its first tensor argument gives the batch's samples (and
        tokens, for 2-D integer ids), and whether it is a new tensor (input was fetched) or the previous
        step's own (the gap was other host work)."""
        if self.worker or self.in_fetch or self.bw_depth or _tid() != self.main_tid:
            return None  # a forward inside backward() is recomputation (activation checkpointing), not the loop's
        try:
            grad = self.torch.is_grad_enabled()
            ng = self.ng
            if ng is not None:
                if not grad:
                    if ng.by_loader:
                        self.dev.disarm()  # an evaluation reading a loader: its next fetch arms again
                        ng.fetch_t0 = 0  # that fetch was the evaluation's
                        return None
                    # armed until a fetch or a forward that trains; enough calls of its model: an evaluation
                    ng.root_call(module, args, _now())
                    if ng.tok is None and ng.calls >= EVAL_ROOT_CALLS:
                        self._ng_confirm(ng)
                    return None
                self._ng_close(_now(), forward_args=args)
                if self.c[GAP] >= 0:  # the no-grad forward was this step's own (a teacher's): counted already
                    self.dev.disarm()
                    return None
            nb = self.nb
            if any(p[3][0] == nb for p in self.open_phases):
                return None  # an eval/checkpoint between steps: its forwards are not the next step's
            c = self.c
            if not grad and c[GAP] >= 0 and self.gap_t0 is not None:
                # a forward with gradients off inside the step (a teacher's, before each micro-batch of a loop
                # without a DataLoader): not a micro-batch, and its input is not the step's; stay armed for the
                # forward that trains next (distillation with accumulation counted its first micro-batch only)
                return None
            t = _now()
            self.dev.disarm()
            x = next((a for a in args if getattr(a, "shape", None) is not None), None)
            had = self.prev_in is not None  # a dead reference still says: the previous input is gone, this one is new
            prev = self.prev_in() if had else None
            if not grad and nb and self.mode is not None and not self.open_phases and not self.bw_depth \
                    and c[GAP] < 0 and self.gap_t0 is not None:
                # a forward with gradients off after a training step: an evaluation without model.eval(), or a
                # teacher's forward inside the step — told apart by what follows (see _ng_fetch, _ng_close). Its
                # input is not the step's until that is known: its first-forward record is kept aside
                book = self._first_input(c, module, args, t, x, had, prev)
                self.ng = _NoGradPass(self.cur_start if c[FETCHES] else t,
                                      (nb, self.cur_start, _counters() if c[FETCHES] else list(c)), book, module, x, t)
                self._arm()
                return None
            try:
                self.prev_in = weakref.ref(x) if x is not None else None
            except TypeError:
                self.prev_in = None
            if self.gap_t0 is None:
                return None  # the first forward of the job (armed at import): remember its input only
            if c[GAP] >= 0:  # a later forward of the step, armed by its backward: another micro-batch?
                self._micro_batch(c, module, args, x, prev)
                return None
            self._record_first(c, self._first_input(c, module, args, t, x, had, prev))
        except Exception as exc:  # Ctrl-C is the user's: let it through
            self.error("first_forward", exc)
        return None

    def _first_input(self, c, module, args, t, x, had, prev):
        """The first forward's record (gap ns, the gap's thread CPU ns, samples, tokens, new-input flag)."""
        cpu = max(_cpu() - self.gap_c0, 0) if not c[FETCHES] and self.gap_c0 is not None else 0
        samples, tokens = _input_shape(args, self._seq_first(module))
        new = (0 if prev is x else 1) if x is not None and had else -1
        if getattr(x, "grad_fn", None) is not None:
            # the input already carries autograd history: the model's forward began before this module call
            # (``self.forward(x)``, functional layers first), so the gap holds the model's own work
            new = 2
        return (max(t - self.gap_t0, 0), cpu, samples, tokens, new)

    def _record_first(self, c, book):
        """Write a first forward's record into the step's counters. Without a loader the gap's thread CPU is
        the input's evidence."""
        c[GAP], cpu, c[FSAMPLES], c[FTOKENS], c[FNEW] = book
        c[CPU] += cpu
        k = self.pp_microbatches
        if k > 1:  # a pipeline stage's first forward took one micro-batch of the schedule's k
            c[FSAMPLES] = c[FSAMPLES] * k if c[FSAMPLES] >= 0 else -1
            c[FTOKENS] = c[FTOKENS] * k if c[FTOKENS] >= 0 else -1

    def _ng_fetch(self, t0):
        """A fetch while a pass with gradients off is open: the pass reads a loader, so it is an evaluation
        (the first such fetch confirms it as an ``eval`` phase from the pass's start). The counters start
        afresh with this fetch: if a forward that trains comes next, the fetch was that step's."""
        ng = self.ng
        if ng.tok is None:
            self._ng_confirm(ng)
        ng.by_loader = True
        ng.fetch_t0 = t0
        self.c = _counters()
        self._arm()

    def _ng_confirm(self, ng):
        """The pass ``ng`` is an evaluation: its ``eval`` phase begins at the pass's start (written now, so that
        the live view and the stall watch know the phase while it runs)."""
        tok = ["eval", ng.start, "no_grad", ng.snap]
        self.open_phases.append(tok)
        self.out.buf.append(phase_begin_line("eval", ng.start, "no_grad"))
        ng.tok = tok
        self._count("eval_no_grad")

    def _ng_close(self, t, forward_args=None):
        """The pass with gradients off is over: a forward that trains (``forward_args``: its arguments), an
        optimizer step, a phase, the exit.

        Not confirmed, a training forward on an input the pass's model took makes it a teacher's and student's
        pair: the no-grad forward was the step's first (its record is written). A pass that called its model
        on two new inputs and fed no optimizer step is an evaluation after all: its ``eval`` phase ends at its
        last module call. Otherwise (one call, feeding no optimizer step: a prediction between updates, a
        monitor) its record is dropped, the gap before the step's first training forward restarts after its
        last module call, and the hook stays armed for that forward — inside ``optimizer.step(closure)`` for
        LBFGS (time_sequence_prediction's 3-row test prediction was read as 3 more training samples a step).

        Confirmed, its ``eval`` phase ends — where the fetch that fed the training forward began, if one did
        (that fetch's counters are kept as the new step's), else at its last module call (an evaluation over
        tensors in memory), else now (the evaluation's counters are rolled back)."""
        ng, self.ng = self.ng, None
        x = next((a for a in forward_args if getattr(a, "shape", None) is not None), None) if forward_args \
            else None
        if ng.tok is None:
            if ng.fed(x):
                self._record_first(self.c, ng.book)
                try:
                    self.prev_in = weakref.ref(x)
                except TypeError:
                    self.prev_in = None
                return
            if ng.calls >= 2:
                self._ng_confirm(ng)
            elif self.gap_t0 is not None:
                self.gap_t0 = max(self.gap_t0, ng.last_t)
                return
            else:
                return
        tok = ng.tok
        if tok not in self.open_phases:
            return
        if forward_args is not None and ng.fetch_t0:
            keep = self.c
            self.phase_end(tok, ng.fetch_t0)
            self.c = keep
            self.gap_t0 = ng.fetch_t0
        elif not ng.by_loader:
            self.phase_end(tok, ng.last_t)  # over tensors in memory: it ends with its last module call
        else:
            self.phase_end(tok, t)

    def _micro_batch(self, c, module, args, x, prev):
        """A loop without a DataLoader takes its samples from the forward's input; under gradient accumulation
        one optimizer step runs several forwards (nanoGPT's ``for micro_step in range(...)``), and counting
        only the first halved tokens/s. A forward after the step's backward that trains (grad enabled,
        module in training mode) on a new input tensor is one more micro-batch: its samples and tokens add up."""
        if c[FETCHES] or c[FSAMPLES] < 0 or x is None or x is prev or not module.training \
                or not self.torch.is_grad_enabled() or self.pp_microbatches:
            return  # (a pipeline schedule's later micro-batches: counted with its first)
        n, tokens = _input_shape(args, self._seq_first(module))
        c[FSAMPLES] = c[FSAMPLES] + n if n >= 0 else -1
        if c[FTOKENS] >= 0:
            c[FTOKENS] = c[FTOKENS] + tokens if tokens >= 0 else -1

    def pipeline_step(self, microbatches):
        """Inside a pipeline schedule's ``step`` (its micro-batch count), or out of it (0): see ``_record_first``."""
        self.pp_microbatches = microbatches

    def _seq_first(self, module):
        """A model whose RNN/LSTM/GRU layers all run with ``batch_first=False`` is fed ``[seq, batch]``: its
        batch is the input's second dimension. Walked once per model, not per step."""
        key = id(module)
        got = _SEQ_FIRST.get(key)
        if got is None:
            got = False
            try:
                rnn = self.torch.nn.RNNBase if self.torch is not None else None
                if rnn is not None:
                    layers = [m for m in module.modules() if isinstance(m, rnn)]
                    got = bool(layers) and not any(getattr(m, "batch_first", False) for m in layers)
            except Exception:  # Ctrl-C is the user's: let it through
                got = False
            if len(_SEQ_FIRST) < 1024:
                _SEQ_FIRST[key] = got
        return got

    # ----------------------------------------------------------------- phases, logs, facts
    def phase_begin(self, name, source):
        if self.worker:
            return None
        if self.ng is not None:
            self._ng_close(_now())
        if self.pending is not None:
            self.commit()
        t = _now()
        name = _clean(name)
        snap = (self.nb, self.cur_start, list(self.c))
        tok = [name, t, source, snap]
        self.open_phases.append(tok)
        self.out.buf.append(phase_begin_line(name, t, source))
        self.flush()
        return tok

    def phase_end(self, tok, t=None):
        """End a phase (at ``t``, else now). If no step boundary fell inside it (an eval loop, a checkpoint
        between steps), the data it fetched belongs to the phase, not to the surrounding training step: roll
        it back."""
        if tok is None:
            return
        if t is None:
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
        self.out.buf.append(phase_line(name, start, t, source))
        self.flush()

    def in_phase(self, name):
        return any(p[0] == name for p in self.open_phases)

    def module_train(self, real, mod, mode):
        """``nn.Module.train`` (``eval()`` calls it) through the hook: the automatic ``eval`` phase."""
        if self.worker or self.train_depth:
            return real(mod, mode)
        try:
            was_training = bool(getattr(mod, "training", False))
        except Exception:
            was_training = False
        self.train_depth += 1
        try:
            result = real(mod, mode)
        finally:
            self.train_depth -= 1
        try:
            self._on_train(mod, bool(mode), was_training)
        except Exception as exc:
            self.error("module_train", exc)
        return result

    def _on_train(self, mod, mode, was_training):
        if self.ng is not None:
            self._ng_close(_now())
        self._on_train_mode(mod, mode, was_training)

    def _on_train_mode(self, mod, mode, was_training):
        """Automatic ``eval`` phase: from an outermost ``model.eval()`` to ``model.train()``.

        "Model" means a module the program put in training with an outermost ``.train()`` — not a submodule
        frozen with ``.eval()`` (batch-norm freezing, a distillation teacher). Before any such call, any
        module that was training counts. Only after the first step, so inference scripts are not all eval.
        """
        if self.trained is None:
            self.trained = weakref.WeakSet()
        trained = self.trained
        if mode:
            if self.auto_eval is not None:
                em = self.eval_mod() if self.eval_mod is not None else None
                if not (em is None or em is mod or mod in trained):
                    return  # a part of the model toggled during evaluation: not the end of it
                self.phase_end(self.auto_eval)
            trained.add(mod)
            return
        if self.auto_eval is not None or self.nb == 0 or self.in_phase("eval"):
            return  # already in an eval phase (ours, or the program's own gpusleuth.phase("eval"))
        if mod in trained or (len(trained) == 0 and was_training):
            self.auto_eval = self.phase_begin("eval", "auto")
            self.eval_mod = weakref.ref(mod)

    def checkpoint(self, real, args, kwargs):
        """A function that writes tensors (``torch.save``, safetensors' ``save_file``, a library's checkpoint
        entry point) through the hook: the outermost call is a ``checkpoint`` phase, whatever it writes to.
        A checkpoint begins where an automatic eval phase still open ends."""
        if self.worker or self.ckpt_depth:
            return real(*args, **kwargs)
        tok = None
        try:
            if not self.in_phase("checkpoint"):
                if self.auto_eval is not None:  # saving after validation: the evaluation is over
                    self.phase_end(self.auto_eval)
                tok = self.phase_begin("checkpoint", "auto")
        except Exception as exc:
            self.error("save", exc)
        self.ckpt_depth += 1
        try:
            return real(*args, **kwargs)
        finally:
            self.ckpt_depth -= 1
            if tok is not None:
                try:
                    self.phase_end(tok)
                except Exception as exc:
                    self.error("save", exc)

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
        self.out.buf.append(log_line(t, json.dumps(rec, default=_jsonable)))
        if t - self.out.last_flush >= FLUSH_NS:
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
        self.out.buf.append(fact_line(_now(), json.dumps(fact, default=str)))

    def line(self, text):
        """A finished event line from a patch module (``C``, ``R``, ``F``, ``G``), written at the next flush."""
        self.out.buf.append(text)

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
            head.update(identity())  # rank, local rank, world size, node, host
        except BaseException as exc:
            self.error("identity", exc)
        if self.worker_id is not None:
            head["worker_id"] = self.worker_id
        return header_line(json.dumps(head, default=str))

    def flush(self, force=False):
        """Write the buffered lines now (``Writer.flush``); once written, ask whether the job has started
        using CUDA (``Device.check``: at each flush, not per step)."""
        if self.out.flush(force) and self.dev is not None:
            self.dev.check()

    def flush_if_due(self, t, now=False):
        """Flush when the last flush is ``FLUSH_NS`` old at ``t`` (or ``now``)."""
        if now or t - self.out.last_flush >= FLUSH_NS:
            self.flush()

    def writing(self):
        """Whether this process's events still reach its file (not given up on a disk that refused them)."""
        return not self.out.broken

    def at_exit(self):
        """Process exit (normal, sys.exit, an exception or Ctrl-C unwinding): write what we know."""
        try:
            if self.exited:
                self.flush()
                self.out.spill()
                return
            self.exited = True
            if self.ng is not None:
                self._ng_close(_now())
            if self.auto_eval is not None:
                self.phase_end(self.auto_eval)
            self.commit()
            if self.held:
                self._commit_backward()
            if self.shape:
                self.info(dict(self.shape, kind="step_model"))
            if self.flops is not None and not self.worker:  # a worker forked mid-count: not its count
                self.flops.at_exit(self)
            dev = self.dev
            if dev is not None and dev.q:
                dev.poll()
            for call in self.exit_calls:
                call(self)
            if dev is not None:
                dev.prof_stop()  # exports the steps captured so far through on_trace_ready
            out = self.out
            if out.header_done or out.buf:
                out.buf.append(exit_line(_now()))  # the exit mark: everything this process saw is written
            self.flush(force=self.torch is not None)
            out.spill()
        except BaseException:
            pass
