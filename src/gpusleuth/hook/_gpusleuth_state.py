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

``Recorder`` is one object made of parts, one module each, by responsibility (docs/step-model.md gives the
contract they follow):

* ``_gpusleuth_steps`` — step records (take, merge back, emit) and the steps that ``backward()`` or an
  explicit ``gpusleuth.step()`` delimit;
* ``_gpusleuth_optim`` — the outermost ``optimizer.step()``, the optimizers' cycle, GradScaler's skipped updates;
* ``_gpusleuth_feed`` — what a step is fed: the one timed fetch, the first forward's gap and samples, micro-batches;
* ``_gpusleuth_nograd`` — passes with gradients off after a step: an evaluation or a teacher's forward;
* ``_gpusleuth_phases`` — explicit phases, the automatic ``eval`` and ``checkpoint`` phases;
* ``_gpusleuth_output`` — the header, logs, facts, errors and flushes.

Each part is a base class without slots of its own; the attributes are all declared here, once, and every
method runs on the one object: splitting the recorder added no attribute hop and no call to the per-step path
(measured in BENCHMARKS.md). This module holds the process's state: what it is, its reset in a forked child,
and what it writes at exit.
"""
import os

from _gpusleuth_device import Device
from _gpusleuth_feed import StepInput
from _gpusleuth_nograd import NoGradPasses
from _gpusleuth_optim import OptimizerCycle
from _gpusleuth_output import EventOutput
from _gpusleuth_phases import PhaseState
from _gpusleuth_records import _counters, _now, _parse_range, _tid
from _gpusleuth_records import exit_line  # the event-line formats
from _gpusleuth_steps import StepBoundaries
from _gpusleuth_writer import Writer

R = None  # the process's recorder once activated; the patch modules and the API read it


def start(run_dir):
    """The process's recorder (made at the first call)."""
    global R
    if R is None:
        R = Recorder(run_dir)
    return R


class Recorder(StepBoundaries, OptimizerCycle, StepInput, NoGradPasses, PhaseState, EventOutput):
    """All per-process recording state. One instance, ``R``; reset in a forked child."""

    __slots__ = (  # every part's state, declared once (the parts have none of their own)
        # the process
        "run_dir", "torch", "torch_ns", "patches", "flops", "exit_calls", "prof_range", "out", "dev", "pid",
        "role", "start_ns", "errors", "worker", "worker_id", "main_tid", "exited",
        # steps (_gpusleuth_steps)
        "auto", "mode", "emitted", "nb", "cur_start", "c", "bw_depth", "shape", "held", "prof_ahead",
        # the optimizer (_gpusleuth_optim)
        "opt_stack", "opt_t0", "opt_init", "pending", "opt_ref", "scaler_opt", "opt_made", "closure_ns",
        "closure_calls",
        # what a step is fed (_gpusleuth_feed)
        "in_fetch", "gap_t0", "gap_c0", "prev_in", "pp_microbatches", "dl_seen",
        # a pass with gradients off (_gpusleuth_nograd)
        "ng",
        # phases (_gpusleuth_phases)
        "open_phases", "auto_eval", "eval_mod", "trained", "train_depth", "ckpt_depth",
        # output (_gpusleuth_output)
        "framework_done",
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
