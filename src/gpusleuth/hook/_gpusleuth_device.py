"""What the recorder asks of torch once the job imported it: CUDA events, the profiler, the forward hook.

One ``Device`` per process, made by the recorder (``_gpusleuth_state``) when torch is imported and again in
a forked child (no events, profiler or armed hook of the parent's). It owns its own state and talks back
only through the recorder's methods (``line``, ``info``, ``error``, ``trace_path``). Standard library only
(torch is handed in), Python 3.8+, never raises into the job.

* CUDA events: the device time of every step, on the device the job's memory is on, from events recorded
  on its current stream — never a synchronize; completed events are read with ``query()`` and written as
  ``G`` lines.
* The profiler: ``--profile-steps A-B`` (``GPUSLEUTH_PROFILE_STEPS``) runs ``torch.profiler`` over those
  steps, stepped at each step boundary, and exports a gzipped Chrome trace.
* The forward pre-hook: ``register_module_forward_pre_hook`` armed at each step's end and removed by the
  next forward (any global module hook takes every module call off torch's fast path).
"""
import os
import warnings
from _gpusleuth_records import device_time_line  # the event-line formats

GPU_PENDING_MAX = 4096


class Device:
    __slots__ = ("torch", "rec", "hook", "register", "fwd_handle", "on", "index", "prev", "q", "pool", "prof",
                 "prof_range", "prof_done")

    def __init__(self, torch, rec, prof_range=None, on_forward=None):
        self.torch = torch
        self.rec = rec
        self.hook = on_forward  # called with (module, args) by the first forward after ``arm``
        try:
            self.register = torch.nn.modules.module.register_module_forward_pre_hook
        except AttributeError:
            self.register = None
        self.fwd_handle = None
        self.on = False  # CUDA is in use: the program initialized it (we never do)
        self.index = None  # the device the job's memory is on: events are recorded on its stream
        self.prev = None  # the previous step's end event: the next step's start
        self.q = []  # (step, start event, end event) not yet completed
        self.pool = []  # events already resolved, recorded again instead of created anew
        self.prof = None
        self.prof_range = prof_range  # (A, B) steps to profile, or None
        self.prof_done = prof_range is None

    # ----------------------------------------------------------------- the forward pre-hook
    def arm(self):
        """A step just ended: catch the next forward's start. Registered per step and removed by the first
        forward, because any global module hook takes every module call off torch's fast path."""
        if self.fwd_handle is None and self.register is not None and self.hook is not None \
                and not self.rec.worker:
            try:
                self.fwd_handle = self.register(self.hook)
            except Exception as exc:  # Ctrl-C is the user's: let it through
                self.rec.error("forward_arm", exc)

    def disarm(self):
        h, self.fwd_handle = self.fwd_handle, None
        if h is not None:
            h.remove()

    # ----------------------------------------------------------------- CUDA events
    def check(self):
        """CUDA is 'in use' once the program initialized it; we never initialize it ourselves. Asked at the
        first step and at each flush, not per step: missing the device time of a step or two is fine."""
        if self.on or self.torch is None or self.rec.worker:
            return self.on
        try:
            self.on = bool(self.torch.cuda.is_initialized())
        except Exception:
            self.on = False
        return self.on

    def device(self):
        """The device the job works on: the one its memory is on (a model moved with ``.to("cuda:1")``
        without ``set_device`` leaves the *current* device at 0, and an event there would time device 0 and
        could create a context on it). Decided once memory is held, then kept; recorded with its UUID, so
        the analysis can tell the job's GPUs (NVML names them by the same UUID). None until the job holds
        device memory."""
        dev = self.index
        if dev is not None:
            return dev
        cuda = self.torch.cuda
        held = [i for i in range(cuda.device_count()) if cuda.memory_reserved(i) > 0]
        if not held:
            return None
        cur = cuda.current_device()
        dev = cur if cur in held else held[0]
        self.index = dev
        try:
            for i in held:
                props = cuda.get_device_properties(i)
                self.rec.info({"kind": "cuda_device", "index": i, "uuid": str(getattr(props, "uuid", "") or ""),
                               "name": str(props.name), "timed": i == dev,
                               "sm_count": int(props.multi_processor_count)})
        except Exception as exc:
            self.rec.error("cuda_device", exc)
        return dev

    def mark(self):
        """An event recorded on the job's device's current stream (never a synchronize), or None where
        recording one is not allowed (CUDA-graph capture) or the job holds no device memory yet."""
        try:
            cuda = self.torch.cuda
            dev = self.device()
            if dev is None:
                return None
            if cuda.current_device() == dev:  # the usual case: no device switch per step
                if cuda.is_current_stream_capturing():
                    return None
                stream = cuda.current_stream()
            else:
                with cuda.device(dev):  # it holds the job's memory: its context exists already
                    if cuda.is_current_stream_capturing():
                        return None
                    stream = cuda.current_stream()
            pool = self.pool
            ev = pool.pop() if pool else cuda.Event(enable_timing=True)
            ev.record(stream)
            return ev
        except Exception as exc:
            self.rec.error("cuda_event", exc)
            return None

    def first_step(self):
        """The job's first step begins: the profiler starts (slow, so before its timestamp is taken) and,
        with CUDA in use, the event the first step's device time starts at."""
        self.profile_from_here()
        if self.check():
            self.prev = self.mark()

    def step(self, idx, end_ev):
        """Queue step ``idx``'s (start, end) events; the start is the previous step's end event."""
        start_ev = self.prev
        self.prev = end_ev
        q = self.q
        if start_ev is not None and end_ev is not None:
            q.append((idx, start_ev, end_ev))
            if len(q) > GPU_PENDING_MAX:
                del q[0]
        self.poll()

    def poll(self):
        """Emit ``G`` for every queued step whose events have completed: ``query()``, never a wait. Events
        on one stream complete in order, so we stop at the first one still pending."""
        q = self.q
        try:
            while q:
                idx, s, e = q[0]
                if not (e.query() and s.query()):
                    break
                del q[0]
                self.rec.line(device_time_line(idx, int(s.elapsed_time(e) * 1e6)))
                if len(self.pool) < 64:  # s ended step idx-1, whose entry is gone: nobody refers to it now
                    self.pool.append(s)
        except Exception as exc:
            del q[:]
            self.rec.error("cuda_poll", exc)

    # ----------------------------------------------------------------- profiler
    def profile_from_here(self):
        """Start the profiler, when steps are to be profiled and it has not run yet."""
        if self.prof_range is None or self.prof is not None or self.prof_done:
            return
        try:
            self.prof = self._start_profiler()
        except Exception as exc:
            self.rec.error("profiler_start", exc)
            self.prof = None
        if self.prof is None:
            self.prof_done = True

    def no_profile(self):
        """A DataLoader worker: it never profiles."""
        self.prof_done = True

    def prof_step(self):
        """Step the profiler at a step boundary; stop it once its window has been exported. True when this
        step ended the window (the export just happened: our own cost, not the job's)."""
        was_done = self.prof_done
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.prof.step()
                if self.prof_done:
                    self.prof.stop()
                    self.prof = None
        except Exception as exc:
            self.rec.error("profiler_step", exc)
            self.prof = None
            self.prof_done = True
        return self.prof_done and not was_done

    def prof_stop(self):
        """At exit: export the steps captured so far (through ``on_trace_ready``)."""
        if self.prof is None:
            return
        prof, self.prof = self.prof, None
        self.prof_done = True
        try:
            prof.stop()
        except BaseException as exc:
            self.rec.error("profiler_stop", exc)

    def _start_profiler(self):
        """A ``torch.profiler.profile`` whose schedule captures steps A..B of this process (0-based, as we
        count them), stepped at every step boundary, exporting a gzipped Chrome trace when the window ends."""
        torch, rec = self.torch, self.rec
        lo, hi = self.prof_range
        prof_mod = torch.profiler
        activities = [prof_mod.ProfilerActivity.CPU]
        try:
            if torch.cuda.is_available():
                activities.append(prof_mod.ProfilerActivity.CUDA)
        except Exception:
            pass
        warmup = 1 if lo >= 1 else 0

        def ready(prof):
            self.prof_done = True
            path = rec.trace_path()
            try:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                prof.export_chrome_trace(path)
                rec.info({"kind": "profiler_trace", "path": path, "steps": [lo, hi]})
            except Exception as exc:
                rec.error("profiler_export", exc)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "won't be using warmup" and friends must not reach the user
            prof = prof_mod.profile(
                activities=activities,
                schedule=prof_mod.schedule(wait=lo - warmup, warmup=warmup, active=hi - lo + 1, repeat=1),
                on_trace_ready=ready,
                record_shapes=False,
                with_stack=False,
            )
            prof.start()
        return prof
