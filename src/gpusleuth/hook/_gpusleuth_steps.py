"""The recorder's step records: where a step begins and ends, and what is written for it (stdlib only, 3.8+).

Part of ``Recorder`` (``_gpusleuth_state``), which runs every part's methods on one object: its attributes are
the recorder's ``__slots__``, so a part adds no attribute hop and no call on the hook's per-step path (each part
is a base class with no slots of its own; BENCHMARKS.md, "the Recorder split").

A step record is a tuple ``(start_ns, end_ns, counters, delimiter, cuda_end_event)``; the write buffer holds
such tuples and ready-made lines, in order. This part closes the running step's counters into a record
(``_take``), reopens records that turned out not to end a step (``_merge_back``), writes one (``_emit``: the
profiler's step, the FLOP count, the periodic flush), and delimits the steps that are not an optimizer's:

* without any optimizer, ``backward()`` ends a step. Those steps are *held* until the process has shown
  for a second that it has no optimizer (gradient accumulation calls backward several times per optimizer
  step, and we must not count each one as a step). A process that has constructed an optimizer keeps
  holding them until that optimizer steps (or ``HELD_MAX`` pile up): a first iteration longer than a
  second — DataLoader workers starting, an evaluation at iteration 0, two slow micro-batches — is not
  evidence of a loop without one, and committing on time alone made extra steps of it;
* after the first explicit ``gpusleuth.step()`` only explicit calls delimit steps in this process.

The optimizer's steps and their cycle are ``_gpusleuth_optim``'s.
"""
from _gpusleuth_records import FETCHES, FNEW, FSAMPLES, FTOKENS, GAP, SET, _add_counts, _counters, _cpu, _now
from _gpusleuth_records import phase_line  # the event-line formats
from _gpusleuth_writer import FLUSH_NS

COMMIT_BACKWARD_NS = 1000000000  # hold backward-delimited steps this long before trusting there is no optimizer
HELD_MAX = 512  # ... or, once an optimizer exists, this many (more micro-batches than any accumulation runs)


class StepBoundaries:
    """The recorder's step records and the backward-delimited and explicit steps (a part of ``Recorder``)."""

    __slots__ = ()

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

    def _count(self, what, n=1):
        shape = self.shape
        shape[what] = shape.get(what, 0) + n

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
