"""Count the model FLOPs of one real training step, once, for MFU.

Why inside the job: the FLOPs of a step depend on the model, the batch and the shapes actually run, and
torch's own ``FlopCounterMode`` counts them exactly at the aten level (matmuls, convolutions, attention;
2 FLOPs per multiply-add; backward and any recomputation included). Doing it once costs one slower step,
which the analysis leaves out of the step-time statistics; ``GPUSLEUTH_FLOPS=0`` (``gpusleuth run
--no-flops``) turns it off.

The counter is entered at a step boundary and left at the next one, on the same thread, so it covers
exactly one step from its first data fetch to its optimizer step. Standard library only at import time:
torch is handed in by the hook.

The count is gpusleuth's cost, not the job's: FlopCounterMode dispatches every aten op through Python, which
made the counted step 3-6x a normal one on CPU jobs of small ops (an LBFGS job: +6 to +12 s of a 35 s run),
billed to the job's compute and goodput. Its excess over the step before it is written as a
``gpusleuth_flops`` phase at the step's end (carved out of the step like the profiler's export), and a step
already longer than the limit is not counted at all (a ``flops_skipped`` fact says why): several times a
step that long is too much to pay for one number the user can give (``--flops-per-step``). The limit is
lower without CUDA, where the slow-down was measured (the dispatch cost is per op, and a CPU job's ops are
many and small); on a GPU a long step is a large model's, whose ops amortize it.
"""

import threading
from _gpusleuth_records import phase_line  # the event-line formats

COUNT_STEP = 3  # which step to measure (0-based): late enough to be past warm-up and lazy init
SKIP_AFTER_NS = {False: 5 * 10**8, True: 10 * 10**9}  # by CUDA in use: a step this long is not counted

_state = {"mode": None, "tid": None, "done": False, "before_ns": 0}


def _last_step(rec):
    """(start, end) of the step the hook has just written (the last record in its write buffer), or None."""
    buf = rec.out.buf
    last = buf[-1] if buf else None
    return (last[0], last[1]) if last.__class__ is tuple else None


def on_emit(rec, idx):
    """Called by the hook as step ``idx`` of this process is written (at the start of step idx + 1).
    Returns True once the measurement is over, so the hook can stop calling it."""
    if _state["done"]:
        return True
    if rec.torch is None:
        return False
    try:
        if _state["mode"] is None and idx == COUNT_STEP - 1:
            span = _last_step(rec)
            before = span[1] - span[0] if span else 0
            if before > SKIP_AFTER_NS[bool(rec.cuda_on())]:
                _state["done"] = True
                rec.info({"kind": "flops_skipped", "step_ns": before,
                          "why": "a step takes %.1f s; counting its FLOPs would slow one several-fold"
                                 % (before / 1e9)})
                return True
            from torch.utils.flop_counter import FlopCounterMode

            mode = FlopCounterMode(display=False)
            mode.__enter__()
            _state["mode"], _state["tid"], _state["before_ns"] = mode, threading.get_ident(), before
        elif _state["mode"] is not None and idx == COUNT_STEP:
            mode = _state["mode"]
            _state["mode"], _state["done"] = None, True
            if threading.get_ident() != _state["tid"]:
                return True  # a mode must be left on the thread that entered it; give up quietly
            mode.__exit__(None, None, None)
            span = _last_step(rec)  # before any line of ours goes into the buffer
            total = int(mode.get_total_flops())
            rec.info({"kind": "flops", "step": idx, "flops": total,
                      "method": "torch.utils.flop_counter.FlopCounterMode over one whole step"})
            if span is not None and _state["before_ns"]:
                # the counter's own cost: the counted step's excess over the one before, at the step's end
                excess = max(span[1] - span[0] - _state["before_ns"], 0)
                if excess:
                    rec.line(phase_line("gpusleuth_flops", span[1] - excess, span[1], "gpusleuth"))
    except Exception as exc:  # never let the measurement disturb the job; the error is recorded
        _state["mode"], _state["done"] = None, True
        rec.error("flops", exc)
    return _state["done"]


def at_exit(rec):
    """The job ended mid-measurement: leave the mode so nothing lingers, record nothing."""
    mode = _state["mode"]
    if mode is not None and threading.get_ident() == _state["tid"]:
        _state["mode"], _state["done"] = None, True
        try:
            mode.__exit__(None, None, None)
        except Exception:
            pass
