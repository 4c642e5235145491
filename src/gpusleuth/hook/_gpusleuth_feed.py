"""The recorder's view of what a step is fed: the timed fetch, the first forward, micro-batches (stdlib only, 3.8+).

Part of ``Recorder`` (``_gpusleuth_state``; see ``_gpusleuth_steps`` for how a part shares its state).

``fetch`` is **the one timed fetch** of the hook — a DataLoader iterator's ``__next__``, a ``gpusleuth.watch``-ed
iterable's, a loader starting its workers — and counts the batch's samples. Without a loader, the first forward
of a step (``first_forward``, torch's global forward pre-hook armed at each step's end) ends the pre-forward gap
and gives the step's samples and tokens; under gradient accumulation each later training forward on a new input
is one more micro-batch. A forward with gradients off after a training step opens a no-grad pass
(``_gpusleuth_nograd``).
"""
import weakref

from _gpusleuth_records import (
    CPU, FETCHES, FNEW, FSAMPLES, FTOKENS, GAP, SAMPLES, UNKNOWN, WAIT, _batch_size, _cpu, _input_shape, _now, _tid)
from _gpusleuth_nograd import EVAL_ROOT_CALLS

_FAILED = object()  # what a fetch that raised returned
_SEQ_FIRST = {}  # id(module) -> whether its recurrent layers take [seq, batch, …] (asked once per model)


class StepInput:
    """The timed fetch and the first forward of a step (a part of ``Recorder``)."""

    __slots__ = ()

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
                self._ng_open(module, x, t, self._first_input(c, module, args, t, x, had, prev))
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
