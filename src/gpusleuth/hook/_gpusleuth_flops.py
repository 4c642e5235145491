"""Count the model FLOPs of one real training step, once, for MFU.

Why inside the job: the FLOPs of a step depend on the model, the batch and the shapes actually run, and
torch's own ``FlopCounterMode`` counts them exactly at the aten level (matmuls, convolutions, attention;
2 FLOPs per multiply-add; backward and any recomputation included). Doing it once costs one slower step,
which the analysis leaves out of the step-time statistics; ``GPUSLEUTH_FLOPS=0`` (``gpusleuth run
--no-flops``) turns it off.

The counter is entered at a step boundary and left at the next one, on the same thread, so it covers
exactly one step from its first data fetch to its optimizer step. Standard library only at import time:
torch is handed in by the hook.
"""

import threading

COUNT_STEP = 3  # which step to measure (0-based): late enough to be past warm-up and lazy init

_state = {"mode": None, "tid": None, "done": False}


def on_emit(rec, idx):
    """Called by the hook as step ``idx`` of this process is written (at the start of step idx + 1).
    Returns True once the measurement is over, so the hook can stop calling it."""
    if _state["done"]:
        return True
    if rec.torch is None:
        return False
    try:
        if _state["mode"] is None and idx == COUNT_STEP - 1:
            from torch.utils.flop_counter import FlopCounterMode

            mode = FlopCounterMode(display=False)
            mode.__enter__()
            _state["mode"], _state["tid"] = mode, threading.get_ident()
        elif _state["mode"] is not None and idx == COUNT_STEP:
            mode = _state["mode"]
            _state["mode"], _state["done"] = None, True
            if threading.get_ident() != _state["tid"]:
                return True  # a mode must be left on the thread that entered it; give up quietly
            mode.__exit__(None, None, None)
            total = int(mode.get_total_flops())
            rec.info({"kind": "flops", "step": idx, "flops": total,
                      "method": "torch.utils.flop_counter.FlopCounterMode over one whole step"})
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
