"""``gpusleuth.sweep(fn, grid)``: the same sweep, for code that wants to vary things inside one process.

``fn(**config)`` runs one configuration and returns what it did: a number (samples processed — we time the
call), a dict (``samples``, or ``samples_per_s``/``step_time_s`` measured by the caller), or None (we rank by
calls per second). Repeats are interleaved, bands and the verdict are the ones of the command-line sweep, and
a configuration that raises is reported with its exception, not fatal.
"""

from __future__ import annotations

import time
import traceback
from typing import Any, Callable

from gpusleuth.experiments import grid as g
from gpusleuth.experiments.measure import Measurement
from gpusleuth.experiments.oom import is_oom_exception
from gpusleuth.experiments.runner import SweepOptions, finish
from gpusleuth.experiments.sweep_result import Attempt, ConfigResult, SweepResult


def sweep(fn: Callable[..., Any], grid: dict[str, list[Any]], repeat: int = 2, warmup: int = 0,
          noise_floor: float = 0.03, mem_limit_bytes: float | None = None,
          progress: Callable[[str], None] | None = None) -> SweepResult:
    """Run ``fn`` for every combination in ``grid`` (``{"batch_size": [8, 16]}``), ``repeat`` times each."""
    params = [(name, [str(v) for v in values]) for name, values in grid.items()]
    combos = g.expand([(name, list(values)) for name, values in grid.items()])
    results = [ConfigResult(id=f"c{i + 1}", label=g.config_label({k: str(v) for k, v in c.items()}),
                            config={k: str(v) for k, v in c.items()}, routes={k: "call" for k in c})
               for i, c in enumerate(combos)]
    opts = SweepOptions(command=[getattr(fn, "__qualname__", str(fn))], params=params, repeat=repeat,
                        steps=None, warmup=0, noise_floor=noise_floor, mem_limit_bytes=mem_limit_bytes)
    res = SweepResult(command=opts.command, params=params, out_dir="", repeat=repeat, steps=None, warmup=warmup,
                      duration_s=None, configs=results)
    t_start = time.monotonic()
    for combo, cr in zip(combos, results):
        for _ in range(warmup):
            try:
                fn(**combo)
            except BaseException as exc:  # noqa: BLE001 - reported by the measured calls below
                if isinstance(exc, KeyboardInterrupt):
                    raise
    for r in range(1, repeat + 1):
        for combo, cr in zip(combos, results):
            att = _call(fn, combo, r)
            cr.attempts.append(att)
            if progress:
                progress(f"[{r}/{repeat}] {cr.label}: " + (att.error or "ok"))
    finish(res, opts)
    if not all(m.samples_per_s for c in results for m in c.measurements):
        for c in results:
            c.unit = "calls/s"
    res.wall_s = time.monotonic() - t_start
    return res


def _call(fn: Callable[..., Any], combo: dict[str, Any], repeat: int) -> Attempt:
    t0 = time.perf_counter()
    try:
        out = fn(**combo)
    except BaseException as exc:  # noqa: BLE001 - one failed configuration must not end the sweep
        if isinstance(exc, KeyboardInterrupt):
            raise
        lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
        return Attempt(repeat, "", None, False, time.perf_counter() - t0, oom=is_oom_exception(exc),
                       error=f"{type(exc).__name__}: {exc}", stderr_tail=lines[-8:])
    dt = time.perf_counter() - t0
    m = Measurement(steps=1)
    m.steps_per_s = 1.0 / dt if dt > 0 else None
    m.step_p50_s = m.step_p95_s = dt
    if isinstance(out, dict):
        if out.get("samples_per_s") is not None:
            m.samples_per_s = float(out["samples_per_s"])
        elif out.get("samples") is not None and dt > 0:
            m.samples_per_s = float(out["samples"]) / dt
        if out.get("step_time_s") is not None:
            m.step_p50_s = m.step_p95_s = float(out["step_time_s"])
        if out.get("peak_mem_bytes") is not None:
            m.peak_mem_bytes, m.peak_mem_source = float(out["peak_mem_bytes"]), "reported by fn"
    elif isinstance(out, (int, float)) and not isinstance(out, bool) and dt > 0:
        m.samples_per_s = float(out) / dt
    return Attempt(repeat, "", 0, True, dt, measurement=m)
