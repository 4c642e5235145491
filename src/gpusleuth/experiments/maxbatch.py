"""The largest batch that fits: grow by doubling until out-of-memory, then bisect to the exact boundary.

Doubling finds the failing order of magnitude in log2(N) tries; bisection pins the boundary in another
log2(N). Every try starts from the same state — in a sweep each try is a fresh process; in-process
(:func:`find_max_batch`) the model/optimizer state is snapshotted once and loaded back after every try, and
the allocator's cache is emptied after an OOM, so a failed try cannot leak memory into (and shrink) the next.
A failure that is *not* out-of-memory stops the search: it would otherwise be mistaken for the boundary.
"""

from __future__ import annotations

import copy
import gc
import time
import traceback
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Callable, Protocol, Sequence

@dataclass
class Try:
    batch: int
    fits: bool
    oom: bool
    seconds: float
    detail: str = ""
    peak_mem_bytes: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class MaxBatchResult:
    max_batch: int | None  # largest batch that fitted (None: not even the smallest)
    first_oom: int | None  # smallest batch seen to run out of memory (None: hit the upper bound)
    lo: int
    hi: int
    tries: list[Try] = field(default_factory=list)
    stopped: str | None = None  # a non-OOM failure that ended the search early
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["tries"] = [t.to_dict() for t in self.tries]
        return d


def search(try_batch: Callable[[int], Try], lo: int = 1, hi: int = 65536) -> MaxBatchResult:
    """Largest ``b`` in [lo, hi] with ``try_batch(b).fits``, assuming fitting is monotone in ``b``."""
    if lo < 1 or hi < lo:
        raise ValueError(f"max-batch range must satisfy 1 <= lo <= hi, got {lo}..{hi}")
    res = MaxBatchResult(None, None, lo, hi)

    def attempt(b: int) -> bool | None:
        t = try_batch(b)
        res.tries.append(t)
        if t.fits:
            return True
        if t.oom:
            return False
        res.stopped = f"batch {b} failed for another reason than memory: {t.detail}"
        return None

    ok = attempt(lo)
    if ok is None or ok is False:
        if ok is False:
            res.first_oom = lo
        res.text = _text(res)
        return res
    good, bad = lo, None
    while good < hi:  # grow
        b = min(good * 2, hi)
        ok = attempt(b)
        if ok is None:
            res.max_batch = good
            res.text = _text(res)
            return res
        if ok:
            good = b
        else:
            bad = b
            break
    while bad is not None and bad - good > 1:  # bisect
        mid = (good + bad) // 2
        ok = attempt(mid)
        if ok is None:
            break
        if ok:
            good = mid
        else:
            bad = mid
    res.max_batch, res.first_oom = good, bad
    res.text = _text(res)
    return res


def _text(res: MaxBatchResult) -> str:
    n = len(res.tries)
    if res.max_batch is None:
        if res.stopped:
            return f"could not search: {res.stopped}"
        return f"even batch {res.lo} runs out of memory"
    if res.stopped:
        return (f"largest batch that fitted so far: {res.max_batch} (search stopped after {n} tries: {res.stopped})")
    if res.first_oom is None:
        return f"batch {res.max_batch} fits: the upper bound of the search ({res.hi}) was reached in {n} tries"
    return (f"largest batch that fits: {res.max_batch} (batch {res.first_oom} runs out of memory; {n} tries). "
            "Leave headroom for longer inputs and memory fragmentation: the batch to use is usually a little lower")


# ------------------------------------------------------------------------------------------ in process
class Stateful(Protocol):
    """What ``find_max_batch`` restores after every try: a model, an optimizer, a grad scaler."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


def find_max_batch(step: Callable[[int], object], lo: int = 1, hi: int = 65536, state: Sequence[Stateful] = (),
                   restore: Callable[[], None] | None = None) -> MaxBatchResult:
    """Search in this process: ``step(b)`` runs one training (or inference) step with batch ``b``.

    ``state``: objects with ``state_dict``/``load_state_dict`` (model, optimizer, scaler) restored after
    every try, so the optimizer state a failed step half-created does not count against the next try.
    ``restore``: anything else to reset. Out-of-memory is recognised by :func:`oom.is_oom_exception`.
    """
    from gpusleuth.experiments.oom import is_oom_exception

    snapshots = [copy.deepcopy(obj.state_dict()) for obj in state]

    def try_batch(b: int) -> Try:
        _reset_peak()
        t0 = time.perf_counter()
        fits, oom, detail = True, False, ""
        try:
            step(b)
            _sync()
        except BaseException as exc:  # noqa: BLE001 - an OOM is an answer, anything else stops the search
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            fits, oom = False, is_oom_exception(exc)
            detail = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
            if not oom:
                detail += " | " + "".join(traceback.format_exception_only(type(exc), exc)).strip()[-300:]
            del exc  # the traceback holds the failed step's tensors: drop it before freeing memory
        seconds = time.perf_counter() - t0
        peak = _peak()
        for obj, snap in zip(state, snapshots):
            obj.load_state_dict(copy.deepcopy(snap))
            if hasattr(obj, "zero_grad") and hasattr(obj, "parameters"):
                obj.zero_grad(set_to_none=True)
        if restore is not None:
            restore()
        if not fits:
            _free()
        return Try(b, fits, oom, seconds, detail, peak)

    return search(try_batch, lo, hi)


def _cuda() -> ModuleType | None:
    from gpusleuth.experiments.memory import _torch_cuda

    return _torch_cuda()


def _sync() -> None:
    t = _cuda()
    if t is not None:
        t.cuda.synchronize()


def _reset_peak() -> None:
    t = _cuda()
    if t is not None:
        t.cuda.reset_peak_memory_stats()


def _peak() -> float | None:
    t = _cuda()
    return float(t.cuda.max_memory_allocated()) if t is not None else None


def _free() -> None:
    """After a failed try: collect young reference cycles (a full collection costs ~0.15 s with torch loaded,
    and the failed step's tensors are freed by reference counting once its traceback is dropped), then give
    the CUDA caching allocator's blocks back so fragmentation from the failure cannot shrink the next try."""
    gc.collect(1)
    t = _cuda()
    if t is not None:
        t.cuda.empty_cache()
