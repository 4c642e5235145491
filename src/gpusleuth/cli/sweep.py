"""``gpusleuth sweep [--param name=v1,v2]… -- CMD``: measure which setting the job should use."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpusleuth.cli.options import Subparsers
    from gpusleuth.experiments.maxbatch import MaxBatchResult, Try
    from gpusleuth.experiments.runner import SweepOptions


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "sweep",
        help="run a job once per configuration (workers, batch, precision, your own flags) and say which wins",
        description=(
            "Run CMD under the recorder once per configuration and repeat, for a bounded number of steps, and "
            "report throughput, step time, exposed data wait, GPU/CPU use, peak memory, energy and cost per "
            "configuration — then the winner, only if it beats the runner-up beyond the noise band. "
            "A parameter reaches the job as {name} in CMD if it appears there, else as a built-in knob the hook "
            "applies inside an unmodified PyTorch script (num_workers, pin_memory, prefetch_factor, "
            "persistent_workers, batch_size, accum, autocast, tf32), else as an environment variable NAME."
        ),
        epilog=(
            "Examples:\n"
            "  gpusleuth sweep --param num_workers=0,2,4 -- python train.py\n"
            "  gpusleuth sweep --param batch_size=32,64,128,256 --param accum=keep -- python train.py\n"
            "  gpusleuth sweep --param autocast=off,bf16 --steps 50 -- python train.py\n"
            "  gpusleuth sweep --param lr=0.1,0.01 -- python train.py --lr {lr}\n"
            "  gpusleuth sweep --max-batch --batch-range 8:4096 -- python train.py\n"
            "  gpusleuth sweep --param num_workers=0,3 --baseline gpusleuth-runs/<run> -- python train.py"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2",
                   help="a parameter and its values; repeat for a grid (Cartesian product)")
    p.add_argument("--repeat", type=int, default=2, metavar="R",
                   help="runs per configuration, interleaved; the noise band is their min–max (default 2)")
    p.add_argument("--steps", type=int, default=30, metavar="N",
                   help="measured optimizer steps per run after the warm-up; the job is ended cleanly after "
                        "them (PyTorch jobs; default 30; 0 = run to completion or --duration)")
    p.add_argument("--warmup", type=int, default=3, metavar="K", help="steps excluded from the measurement (default 3)")
    p.add_argument("--duration", type=float, default=None, metavar="S", help="stop each run after S seconds at most")
    p.add_argument("--max-batch", action="store_true",
                   help="find the largest batch that fits in memory (doubling, then bisection on out-of-memory)")
    p.add_argument("--batch-param", default="batch_size", metavar="NAME",
                   help="the batch parameter for --max-batch (default batch_size: the built-in knob, or {batch_size} in CMD)")
    p.add_argument("--batch-range", default="1:4096", metavar="LO:HI", help="--max-batch search range (default 1:4096)")
    p.add_argument("--max-batch-steps", type=int, default=3, metavar="N",
                   help="optimizer steps per --max-batch try (default 3: the optimizer state exists after the first)")
    p.add_argument("--baseline", type=Path, default=None, metavar="RUN_DIR",
                   help="an earlier recorded run whose findings' predicted gains are checked against the sweep "
                        "(default: the first configuration)")
    p.add_argument("--price-per-hour", type=float, default=None, metavar="USD",
                   help="price of the machine per hour, for cost per 1k samples")
    p.add_argument("--mem-limit", default=None, metavar="SIZE",
                   help="configurations whose peak memory exceeds this are not eligible for the knee (e.g. 70GiB)")
    p.add_argument("--noise-floor", type=float, default=0.03, metavar="F",
                   help="a noise band is at least ±F of its median (default 0.03)")
    p.add_argument("--out", type=Path, default=None, help="sweep directory (default: under ./gpusleuth-runs/)")
    p.add_argument("--interval", type=float, default=0.1, metavar="S", help="telemetry sampling interval (default 0.1)")
    p.add_argument("--no-gpu", action="store_true", help="do not sample GPUs")
    p.add_argument("--show-output", action="store_true", help="let the job print to this terminal (default: to files)")
    p.add_argument("--json", action="store_true", help="print the result as JSON on stdout")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    p.set_defaults(func=sweep_command)


def parse_size(text: str | None) -> float | None:
    from gpusleuth.errors import LaunchError

    if text is None:
        return None
    t = text.strip().lower().replace(" ", "")
    for suffix, scale in (("gib", 2**30), ("mib", 2**20), ("kib", 2**10), ("gb", 1e9), ("mb", 1e6), ("kb", 1e3),
                          ("g", 2**30), ("m", 2**20), ("k", 2**10), ("b", 1)):
        if t.endswith(suffix):
            t, mult = t[: -len(suffix)], scale
            break
    else:
        mult = 1
    try:
        return float(t) * mult
    except ValueError:
        raise LaunchError(f"gpusleuth: {text!r} is not a size (e.g. 8GiB, 500MB)") from None


def _range(text: str) -> tuple[int, int]:
    from gpusleuth.errors import LaunchError

    try:
        lo, hi = (int(x) for x in text.split(":", 1))
        if lo < 1 or hi < lo:
            raise ValueError
    except ValueError:
        raise LaunchError(f"gpusleuth sweep: --batch-range wants LO:HI with 1 <= LO <= HI, got {text!r}") from None
    return lo, hi


def sweep_command(args: argparse.Namespace) -> int:
    from gpusleuth.render.text import SafeConsole

    from gpusleuth.errors import LaunchError
    from gpusleuth.experiments import grid as g
    from gpusleuth.experiments.runner import SweepOptions, default_out_dir, run_sweep, clean

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise LaunchError("gpusleuth sweep: no command given (usage: gpusleuth sweep --param NAME=V1,V2 -- CMD ARGS…)")
    if args.repeat < 1:
        raise LaunchError("gpusleuth sweep: --repeat must be at least 1")
    if not args.param and not args.max_batch:
        raise LaunchError("gpusleuth sweep: nothing to vary: give --param NAME=V1,V2 (or --max-batch)")
    try:
        params = [g.parse_param(t) for t in args.param]
        g.expand(params)
        for config in g.expand(params):
            g.job_spec(config, command)
        if args.max_batch:
            g.route(args.batch_param, command)
    except g.GridError as exc:
        raise LaunchError(f"gpusleuth sweep: {exc}") from None
    out = args.out or default_out_dir(command)
    opts = SweepOptions(
        command=command, params=params, out_dir=out, repeat=args.repeat, steps=args.steps or None,
        warmup=args.warmup, duration_s=args.duration, interval_s=args.interval, use_gpu=not args.no_gpu,
        price_per_hour=args.price_per_hour, mem_limit_bytes=parse_size(args.mem_limit), baseline=args.baseline,
        noise_floor=args.noise_floor, show_output=args.show_output,
    )
    from gpusleuth.run.layout import RunDir

    if args.baseline is not None and not RunDir(args.baseline).meta_file.exists():
        raise LaunchError(f"gpusleuth sweep: --baseline {args.baseline}: not a recorded run directory (no meta.json)")
    err = SafeConsole(stderr=True, highlight=False)
    say = (lambda msg: err.print(msg, markup=False, highlight=False))
    mb = None
    if args.max_batch:
        mb = _max_batch(args, command, params, opts, out, say)
    result = None
    if params:
        result = run_sweep(opts, progress=say)
        result.max_batch = mb
    if args.json:
        from gpusleuth.experiments.runner import _jsonable

        doc = result.to_dict() if result else {"schema": "gpusleuth.sweep/1", "max_batch": mb.to_dict() if mb else None}
        sys.stdout.write(json.dumps(clean(doc), indent=1, default=_jsonable) + "\n")
    else:
        from gpusleuth.render.sweep_console import render_max_batch, render_sweep

        console = SafeConsole(highlight=False, width=None if sys.stdout.isatty() else 140)
        if result:
            render_sweep(result, console)
        elif mb is not None:
            render_max_batch(mb, console)
    if result is not None and result.configs and all(c.crashed for c in result.configs):
        return 1
    return 0


def _max_batch(args: argparse.Namespace, command: list[str], params: list[tuple[str, list[str]]], opts: SweepOptions,
               out: Path, say: Callable[[str], None]) -> MaxBatchResult:
    from gpusleuth.experiments.maxbatch import search
    from gpusleuth.experiments.runner import job_try

    lo, hi = _range(args.batch_range)
    base = {name: values[0] for name, values in params if name != args.batch_param}
    out.mkdir(parents=True, exist_ok=True)
    probe = job_try(command, args.batch_param, base, opts, out, args.max_batch_steps)

    def logged(b: int) -> Try:
        t = probe(b)
        say(f"max-batch: {args.batch_param}={b}: " + ("fits" if t.fits else ("out of memory" if t.oom else
                                                                             f"failed ({t.detail})")))
        return t

    return search(logged, lo, hi)
