"""The sweep engine: run a command once per configuration and repeat, under the recorder, and measure each.

Repeats are interleaved (all configurations once, then all again) so that slow drift of the machine — thermal
state, a noisy neighbour, page cache — spreads over every configuration instead of favouring one. A
configuration that crashes is recorded with its exit code and the last lines of its stderr; the sweep goes on.
The job's own stdout/stderr go to files beside its run directory, so the sweep's output stays readable.
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from gpusleuth.recorder.launcher import default_run_dir
from gpusleuth.experiments import grid as g
from gpusleuth.experiments.knobs import KNOBS, MAX_STEPS_ENV
from gpusleuth.experiments.measure import measure_run
from gpusleuth.experiments.oom import is_oom_exit
from gpusleuth.run.model import Run
from gpusleuth.sources.inputs import read_inputs
from gpusleuth.analysis.noise import repeats_floor
from gpusleuth.experiments.maxbatch import Try
from gpusleuth.experiments.stats import band, knee, verdict
from gpusleuth.experiments.sweep_result import Attempt, BatchKnee, ConfigResult, SweepResult

BATCH_NAMES = ("batch_size", "batch", "bs")
STDERR_TAIL_LINES = 12


@dataclass
class SweepOptions:
    command: list[str]
    params: list[tuple[str, list[str]]]
    out_dir: Path | None = None
    repeat: int = 2
    steps: int | None = 30
    warmup: int = 3
    duration_s: float | None = None
    interval_s: float = 0.1
    use_gpu: bool = True
    price_per_hour: float | None = None
    mem_limit_bytes: float | None = None
    baseline: Path | None = None
    noise_floor: float = 0.03
    show_output: bool = False
    extra_env: dict[str, str] = field(default_factory=dict)


def default_out_dir(command: list[str]) -> Path:
    return default_run_dir(command, kind="sweep")


@contextmanager
def captured(stdout_path: Path, stderr_path: Path, enabled: bool = True) -> Iterator[None]:
    """Send this process's fds 1 and 2 (inherited by the job) to files while the job runs."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    try:
        with open(stdout_path, "wb") as out, open(stderr_path, "wb") as err:
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            try:
                yield
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os.dup2(saved[0], 1)
                os.dup2(saved[1], 2)
    finally:
        os.close(saved[0])
        os.close(saved[1])


def tail(path: Path, lines: int = STDERR_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [ln.rstrip() for ln in text.splitlines() if ln.strip()][-lines:]


def run_job(spec: g.JobSpec, run_dir: Path, opts: SweepOptions, steps: int | None, label: str,
            repeat: int = 1) -> Attempt:
    """Run one configuration once under the recorder; never raises for a failing job."""
    from gpusleuth.errors import GpusleuthError
    from gpusleuth.recorder.launcher import LaunchOptions, launch

    env = dict(opts.extra_env)
    env.update(spec.env)
    if steps:
        env[MAX_STEPS_ENV] = str(steps)
    out_log = run_dir.with_name(run_dir.name + ".stdout")
    err_log = run_dir.with_name(run_dir.name + ".stderr")
    t0 = time.monotonic()
    try:
        with captured(out_log, err_log, enabled=not opts.show_output):
            res = launch(LaunchOptions(command=spec.command, out=run_dir, interval_s=opts.interval_s,
                                       duration_s=opts.duration_s, grace_s=5.0, use_gpu=opts.use_gpu,
                                       label=label, extra_env=env))
    except GpusleuthError as exc:
        return Attempt(repeat, str(run_dir), getattr(exc, "exit_code", None), False, time.monotonic() - t0,
                       error=str(exc), stderr_tail=tail(err_log))
    wall = time.monotonic() - t0
    try:  # the run as every verb reads it (sources/inputs.read_inputs): its meta and its measurement
        run: Run | None = read_inputs([run_dir]).job
        unreadable = None
    except Exception as exc:  # noqa: BLE001 - a damaged run is one failed attempt, not a failed sweep
        run, unreadable = None, f"could not read the run: {type(exc).__name__}: {exc}"
    meta = run.meta if run is not None else {}
    stopped_by = res.stopped_by  # the launcher's own word, whether or not the run can be read
    err_tail = tail(err_log)
    ok = res.exit_code == 0 or bool(stopped_by and stopped_by.startswith("--duration"))
    att = Attempt(repeat, str(run_dir), res.exit_code, ok, wall, stopped_by=stopped_by, stderr_tail=err_tail)
    if not ok:
        att.oom, why = is_oom_exit(res.exit_code, "\n".join(err_tail))
        att.error = why or f"exited with code {res.exit_code}" + (f" ({meta['signal']})" if meta.get("signal") else "")
    try:
        if run is None:
            raise ValueError(unreadable)
        att.measurement = measure_run(run, warmup=opts.warmup, price_per_hour=opts.price_per_hour,
                                      steps=opts.steps or None)
    except Exception as exc:  # noqa: BLE001 - a damaged run is one failed attempt, not a failed sweep
        why = unreadable or f"could not read the run: {type(exc).__name__}: {exc}"
        att.error = (att.error + "; " if att.error else "") + why
        att.ok = False
    return att


def run_sweep(opts: SweepOptions, progress: Callable[[str], None] | None = None) -> SweepResult:
    say = progress or (lambda _msg: None)
    configs = g.expand(opts.params)
    specs = [g.job_spec(c, opts.command) for c in configs]  # validate every configuration before running any
    out = Path(opts.out_dir) if opts.out_dir else default_out_dir(opts.command)
    out.mkdir(parents=True, exist_ok=True)
    width = len(str(len(configs)))
    results = [ConfigResult(id=f"c{i + 1:0{width}d}", label=g.config_label(c), config=c, routes=s.routes)
               for i, (c, s) in enumerate(zip(configs, specs))]
    sweep = SweepResult(command=opts.command, params=opts.params, out_dir=str(out), repeat=opts.repeat,
                        steps=opts.steps, warmup=opts.warmup, duration_s=opts.duration_s, configs=results)
    t0 = time.monotonic()
    total = len(results) * opts.repeat
    n = 0
    for r in range(1, opts.repeat + 1):
        for res, spec in zip(results, specs):
            n += 1
            # one step more than asked for: the one gpusleuth's FLOP counter slows is left out of the
            # measurement, which then keeps exactly opts.steps (``measure_run(steps=…)``)
            steps = opts.warmup + opts.steps + 1 if opts.steps else None
            att = run_job(spec, out / f"{res.id}-r{r}", opts, steps, res.label, repeat=r)
            res.attempts.append(att)
            say(_progress_line(n, total, res, att))
            _save(out, sweep)
    finish(sweep, opts)
    sweep.wall_s = time.monotonic() - t0
    _save(out, sweep)
    return sweep


def _progress_line(n: int, total: int, res: ConfigResult, att: Attempt) -> str:
    if not att.ok:
        return f"[{n}/{total}] {res.label}: FAILED ({att.error}) in {att.wall_s:.1f}s"
    m = att.measurement
    if m and m.samples_per_s:
        return f"[{n}/{total}] {res.label}: {m.samples_per_s:,.1f} samples/s over {m.steps} steps ({att.wall_s:.1f}s)"
    if m and m.steps_per_s:
        return f"[{n}/{total}] {res.label}: {m.steps_per_s:,.2f} steps/s over {m.steps} steps ({att.wall_s:.1f}s)"
    return f"[{n}/{total}] {res.label}: finished, no steps measured ({att.wall_s:.1f}s)"


def finish(sweep: SweepResult, opts: SweepOptions) -> None:
    """Bands, the verdict, knees, caveats and the prediction check, from the attempts."""
    use_samples = all(m.samples_per_s is not None for c in sweep.configs for m in c.measurements)
    unit = "samples/s" if use_samples else "steps/s"
    for c in sweep.configs:
        c.unit = unit
        ms = c.measurements
        # analysis/noise.py, as compare: --noise-floor bounds a band of repeats; a single repeat measured no
        # run-to-run spread, so it gets at least the run-to-run floor of identical runs
        floor = opts.noise_floor if len(ms) > 1 else max(opts.noise_floor, repeats_floor(1))
        c.throughput = band([m.samples_per_s if use_samples else m.steps_per_s for m in ms], floor)
        c.step_p50 = band([m.step_p50_s for m in ms], floor)
    sweep.verdict = verdict({c.label: c.throughput for c in sweep.configs if c.throughput}, True, "throughput")
    sweep.knees = batch_knees(sweep, opts.mem_limit_bytes)
    names = {n for n, _ in sweep.params}
    sweep.caveats = [f"{n}: {KNOBS[n].caveat}" for n in KNOBS if n in names and KNOBS[n].caveat]
    if names & set(BATCH_NAMES) and "accum" not in names and "batch_size" in names:
        pass  # the batch_size caveat above already says it
    for c in sweep.configs:
        for m in c.measurements:
            for note in m.knob_notes:
                line = f"{c.label}: {note}"
                if line not in sweep.caveats:
                    sweep.caveats.append(line)
    from gpusleuth.experiments.predict import check_predictions

    sweep.predictions = check_predictions(sweep, opts.baseline, opts.warmup)


def batch_knees(sweep: SweepResult, mem_limit: float | None) -> list[BatchKnee]:
    """Throughput curve and knee over the batch parameter, one per combination of the other parameters."""
    names = [n for n, _ in sweep.params]
    bname = next((n for n in names if n in BATCH_NAMES), None)
    if bname is None:
        return []
    groups: dict[tuple[tuple[str, str], ...], list[ConfigResult]] = {}
    for c in sweep.configs:
        key = tuple((k, v) for k, v in c.config.items() if k != bname)
        groups.setdefault(key, []).append(c)
    out: list[BatchKnee] = []
    for key, members in groups.items():
        points: list[tuple[float, float | None, bool, str]] = []
        for c in members:
            try:
                x = float(c.config[bname])
            except ValueError:
                continue
            y = c.throughput.median if c.throughput else None
            mem = c.median("peak_mem_bytes")
            if c.crashed:
                oom = any(a.oom for a in c.attempts)
                points.append((x, None, False, "out of memory" if oom else "crashed"))
            elif mem_limit is not None and mem is not None and mem > mem_limit:
                points.append((x, y, False, f"peak memory {mem / 2**30:.1f} GiB over the limit"))
            else:
                points.append((x, y, True, ""))
        if len(points) < 2:
            continue
        k = knee(points, unit=members[0].unit)
        out.append({"group": " ".join(f"{a}={b}" for a, b in key) or "all", "param": bname, "knee": k,
                    "curve": [[x, y] for x, y, _, _ in sorted(points, key=lambda p: p[0])]})
    return out


def _save(out: Path, sweep: SweepResult) -> None:
    tmp = out / "sweep.json.tmp"
    tmp.write_text(json.dumps(clean(sweep.to_dict()), indent=1, default=_jsonable))
    os.replace(tmp, out / "sweep.json")


def clean(o: Any) -> Any:
    """NaN and infinity become null: the JSON must load anywhere (docs/experiments.md)."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {k: clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [clean(v) for v in o]
    return o


def _jsonable(o: Any) -> Any:
    if isinstance(o, float):
        return o
    if hasattr(o, "to_dict"):
        return o.to_dict()
    return str(o)


# ------------------------------------------------------------------------------- one process per try
def job_try(command: list[str], param: str, base_config: dict[str, str], opts: SweepOptions, out_dir: Path,
            steps: int) -> Callable[[int], Try]:
    """For ``maxbatch.search``: a ``try_batch`` that runs the job (fresh process: fresh state) with ``param`` = b
    for a few steps. Here, not in maxbatch.py, so that the search stays a leaf the runner imports."""

    def try_batch(b: int) -> Try:
        config = dict(base_config)
        config[param] = str(b)
        spec = g.job_spec(config, command)
        att = run_job(spec, Path(out_dir) / f"maxbatch-{b}", opts, steps, f"{param}={b}")
        m = att.measurement
        detail = att.error or ""
        if att.stderr_tail and not att.ok:
            detail += " | " + att.stderr_tail[-1][-200:]
        return Try(b, att.ok, att.oom, att.wall_s, detail, m.peak_mem_bytes if m else None)

    return try_batch
