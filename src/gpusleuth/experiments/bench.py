"""Inference benchmark: throughput and latency percentiles per batch size, the knee within a p95 budget,
and the under-/over-batched signs stated with their numbers.

The target is what a serving engineer already has: a callable, or an object split into ``preprocess`` /
``infer`` / ``postprocess`` (then each stage is timed, so "the GPU waits on tokenization" is a number). An
optional ``make_batch(b)`` builds the input outside the timing. On a GPU every call ends with a
synchronize, so a latency is the time the result is really ready, not the time the kernels were queued.

Latency here is the *service time of one batch* (all its requests arrive together). Queueing delay under a
real arrival rate comes on top: that is why the knee is chosen inside a p95 budget, not at peak throughput.
"""

from __future__ import annotations

import importlib
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from gpusleuth.experiments.bench_result import BatchResult, BenchResult
from gpusleuth.experiments.memory import PeakMemory, device_total_bytes
from gpusleuth.experiments.stats import knee
from gpusleuth.experiments.signs import batching_signs

if TYPE_CHECKING:
    from gpusleuth.recorder.nvml import NvmlSampler

STAGES = ("preprocess", "infer", "postprocess")
STEEP = 1.5  # throughput ratio per batch doubling that counts as "rising steeply"
FLAT = 1.10  # … and as "flattening"


def load_target(spec: str, cwd: Path | None = None) -> tuple[Any, str]:
    """``module:factory`` → (the object ``factory()`` returns, a name). Clear errors for bad specs."""
    from gpusleuth.errors import InputError

    mod_name, sep, attr = spec.partition(":")
    if not sep or not mod_name or not attr:
        raise InputError(spec, "expected MODULE:FACTORY (e.g. myserving:make_model)")
    root = str(cwd or Path.cwd())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(mod_name)
    except ImportError as exc:
        raise InputError(spec, f"cannot import {mod_name}: {exc}") from None
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise InputError(spec, f"{mod_name} has no attribute {attr}")
        obj = getattr(obj, part)
    if not callable(obj):
        raise InputError(spec, f"{attr} is not callable: it must build and return the thing to benchmark")
    return obj(), spec


class _Runner:
    """Calls the target once for a batch, timing each stage; synchronizes CUDA when it is in use.

    The target and its batches are the user's objects, whatever their types: ``Any`` on purpose."""

    def __init__(self, target: Any):
        self.target = target
        self.staged = all(callable(getattr(target, s, None)) for s in STAGES)
        if not self.staged and not callable(target):
            raise TypeError("the benchmark target must be callable or have preprocess/infer/postprocess methods")
        make = getattr(target, "make_batch", None)
        self.make: Callable[[int], Any] | None = make if callable(make) else None

    def inputs(self, b: int) -> Any:
        return self.make(b) if self.make else b

    def call(self, x: Any) -> tuple[float, tuple[float, float, float] | None]:
        sync = _sync_fn()
        if not self.staged:
            t0 = time.perf_counter()
            self.target(x)
            sync()
            return time.perf_counter() - t0, None
        t = self.target
        t0 = time.perf_counter()
        y = t.preprocess(x)
        sync()
        t1 = time.perf_counter()
        y = t.infer(y)
        sync()
        t2 = time.perf_counter()
        t.postprocess(y)
        sync()
        t3 = time.perf_counter()
        return t3 - t0, (t1 - t0, t2 - t1, t3 - t2)


def _sync_fn() -> Callable[[], None]:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available() and torch.cuda.is_initialized():
                sync: Callable[[], None] = torch.cuda.synchronize
                return sync
        except Exception:  # noqa: BLE001
            pass
    return lambda: None


class _Util:
    """Mean GPU utilization over a window, sampled by NVML in a thread (only when CUDA is in use)."""

    def __init__(self) -> None:
        self.sampler: NvmlSampler | None = None
        self.values: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if _sync_fn().__name__ == "<lambda>":
            return
        from gpusleuth.recorder.nvml import NvmlSampler

        self.sampler, _why = NvmlSampler.open()
        if self.sampler is None:
            return
        self.values, self._stop = [], threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(self.sampler,), daemon=True)
        self._thread.start()

    def _loop(self, sampler: NvmlSampler) -> None:
        while not self._stop.wait(0.05):
            try:
                for row in sampler.sample(time.time_ns()):
                    if row.get("util_gpu") is not None:
                        self.values.append(float(row["util_gpu"]))
            except Exception:  # noqa: BLE001
                return

    def stop(self) -> float | None:
        if self._thread is None:
            return None
        self._stop.set()
        self._thread.join()
        self._thread = None
        try:
            if self.sampler is not None:
                self.sampler.close()
        except Exception:  # noqa: BLE001
            pass
        return float(np.mean(self.values)) if self.values else None


def bench(target: Any, batches: list[int], warmup: int = 3, min_calls: int = 20, max_calls: int = 2000,
          seconds: float = 1.0, p95_budget_ms: float | None = None, mem_limit_bytes: float | None = None,
          name: str | None = None, progress: Callable[[str], None] | None = None) -> BenchResult:
    """Benchmark ``target`` at each batch size: ``warmup`` untimed calls, then at least ``min_calls`` and
    until ``seconds`` have passed (at most ``max_calls``)."""
    if min_calls < 1 or max_calls < min_calls:
        # every batch size needs a timed call: a row without one has no throughput and no latency to judge
        raise ValueError(f"need 1 <= min_calls <= max_calls, got min_calls={min_calls}, max_calls={max_calls}")
    runner = _Runner(target)
    results = []
    for b in batches:
        results.append(_one(runner, b, warmup, min_calls, max_calls, seconds))
        if progress:
            progress(f"batch {b}: " + _progress_text(results[-1]))
    device = "cuda" if _sync_fn().__name__ != "<lambda>" else "cpu"
    if mem_limit_bytes is None:
        total = device_total_bytes()
        mem_limit_bytes = 0.9 * total if total else None
    res = BenchResult(target=name or str(getattr(target, "__qualname__", type(target).__name__)), device=device,
                      p95_budget_ms=p95_budget_ms, mem_limit_bytes=mem_limit_bytes, batches=results)
    _admissible(res)
    res.knee = knee([(r.batch, r.items_per_s, r.admissible, r.why_not) for r in results], unit="items/s")
    res.signs = batching_signs(res)
    if any(r.calls < 100 for r in results if not r.error):
        res.notes.append("p99 from fewer than 100 calls is close to the maximum: raise --seconds for a stable tail")
    if device == "cpu":
        res.notes.append("CPU run: memory is the process's peak RSS, device utilization is not measured")
    return res


def _progress_text(r: BatchResult) -> str:
    if r.error:
        return r.error
    if r.items_per_s is None or r.latency_ms is None:
        return "no timed call"
    return f"{r.items_per_s:,.1f} items/s, p95 {r.latency_ms['p95']:.2f} ms"


def _one(runner: _Runner, b: int, warmup: int, min_calls: int, max_calls: int, seconds: float) -> BatchResult:
    r = BatchResult(batch=b)
    try:
        x = runner.inputs(b)
        for _ in range(warmup):
            runner.call(x)
    except Exception as exc:  # noqa: BLE001 - one failing batch size (OOM…) is a row, not the end
        r.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        return r
    mem, util = PeakMemory(), _Util()
    lat = np.empty(max_calls)
    stages = np.empty((max_calls, 3)) if runner.staged else None
    mem.reset()
    util.start()
    c0 = time.process_time()
    t_end = time.perf_counter() + seconds
    n = 0
    try:
        while n < max_calls and (n < min_calls or time.perf_counter() < t_end):
            dt, st = runner.call(x)
            lat[n] = dt
            if stages is not None:
                stages[n] = st
            n += 1
            mem.sample()
    except Exception as exc:  # noqa: BLE001
        r.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    cpu = time.process_time() - c0
    r.device_util_mean = util.stop()
    r.peak_mem_bytes, r.mem_source = mem.peak(), mem.source
    if n == 0:
        return r
    lat = lat[:n]
    r.calls = n
    r.items_per_s = b * n / float(lat.sum())
    r.latency_ms = {k: float(v) * 1e3 for k, v in (
        ("p50", np.percentile(lat, 50)), ("p95", np.percentile(lat, 95)), ("p99", np.percentile(lat, 99)),
        ("mean", lat.mean()), ("min", lat.min()), ("max", lat.max()))}
    r.cpu_ms_per_item = cpu * 1e3 / (b * n)
    if stages is not None:
        per_stage = stages[:n]
        total = float(lat.sum())
        r.stages_ms = {name: {"p50": float(np.percentile(per_stage[:, i], 50)) * 1e3,
                              "p95": float(np.percentile(per_stage[:, i], 95)) * 1e3,
                              "mean": float(per_stage[:, i].mean()) * 1e3,
                              "share": float(per_stage[:, i].sum()) / total if total else 0.0}
                       for i, name in enumerate(STAGES)}
    return r


def _admissible(res: BenchResult) -> None:
    for r in res.batches:
        if r.error:
            r.admissible, r.why_not = False, r.error
        elif res.p95_budget_ms is not None and r.latency_ms and r.latency_ms["p95"] > res.p95_budget_ms:
            r.admissible, r.why_not = False, f"p95 {r.latency_ms['p95']:.1f} ms > budget {res.p95_budget_ms:g} ms"
        elif res.mem_limit_bytes is not None and r.peak_mem_bytes is not None and r.peak_mem_bytes > res.mem_limit_bytes:
            r.admissible, r.why_not = False, (f"peak memory {r.peak_mem_bytes / 2**20:,.0f} MiB > limit "
                                              f"{res.mem_limit_bytes / 2**20:,.0f} MiB")
