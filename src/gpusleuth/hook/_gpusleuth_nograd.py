"""The recorder's passes with gradients off after a step: an evaluation or a teacher's forward (stdlib only, 3.8+).

Part of ``Recorder`` (``_gpusleuth_state``; see ``_gpusleuth_steps`` for how a part shares its state). A pass
is opened by ``first_forward`` (``_gpusleuth_feed``) and told apart by what follows: a fetch or enough calls of
its model on new inputs confirm an evaluation (an ``eval`` phase from the pass's start); a training forward on
an input the pass's model took makes it a teacher's forward, the step's own.
"""
import weakref

from _gpusleuth_records import FETCHES, _counters
from _gpusleuth_records import phase_begin_line  # the event-line formats


def _weak(x):
    """A weak reference to a tensor, or one that answers None (no tensor, or one refusing weak references)."""
    try:
        return weakref.ref(x) if x is not None else _NONE
    except TypeError:
        return _NONE


def _NONE():
    return None


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


class NoGradPasses:
    """Opening, confirming and closing a pass with gradients off (a part of ``Recorder``)."""

    __slots__ = ()

    def _ng_open(self, module, x, t, book):
        """A forward with gradients off after a training step opens a pass (``first_forward``); ``book`` is its
        first forward's record, kept aside until the pass is told apart."""
        c = self.c
        self.ng = _NoGradPass(self.cur_start if c[FETCHES] else t,
                              (self.nb, self.cur_start, _counters() if c[FETCHES] else list(c)), book, module, x, t)

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
