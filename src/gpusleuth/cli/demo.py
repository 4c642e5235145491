"""``gpusleuth demo``: record a small PyTorch training job twice — with a planted input-pipeline stall and
fixed — print both reports and the measured speedup. Works on CPU; uses a GPU when present."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers
    from gpusleuth.render.text import SafeConsole


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "demo",
        help="record a built-in training job with a planted input stall, then fixed, and compare",
        description=(
            "Runs a small PyTorch training job (needs the 'torch' extra) twice under `gpusleuth run`: first "
            "with num_workers=0 and a costly per-sample transform, then with the fix gpusleuth recommends "
            "(loader workers, pinned memory, persistent workers). Prints both reports and the measured speedup. "
            "The transform is first sized to this machine (a few seconds, outside the recordings) so that each "
            "fixed-run worker needs about 60 % of a training step for its batch: the planted run then waits on "
            "data for a third of its step or more, and the fixed one has room to spare, on a laptop as on a GPU "
            "node. GPUSLEUTH_DEMO_ROUNDS=N sets the transform's rounds instead."
        ),
    )
    p.add_argument("--out", type=Path, default=None, help="keep the two run directories here (default: a temp dir)")
    from gpusleuth.cli.options import _positive_int

    # 0 steps recorded a job that trained nothing and crashed on its last line (no loss to print)
    p.add_argument("--steps", type=_positive_int, default=120, help="training steps per run (default 120)")
    p.set_defaults(func=demo_command)


def demo_command(args: argparse.Namespace) -> int:
    from gpusleuth.errors import LaunchError
    from gpusleuth.recorder.launcher import LaunchOptions, launch
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.sources.inputs import read_inputs

    try:
        import torch  # noqa: F401
    except ImportError:
        raise LaunchError("gpusleuth demo needs PyTorch: pip install 'gpusleuth[torch]'") from None
    from rich.markup import escape

    from gpusleuth.cli.output import emit, make_console
    from gpusleuth.render.formats import REPORT_FORMATS, RenderOptions

    console = make_console()
    base = args.out or Path(tempfile.mkdtemp(prefix="gpusleuth-demo-"))
    base.mkdir(parents=True, exist_ok=True)
    rounds = _transform_rounds(console)
    reports = {}
    for mode in ("planted", "fixed"):
        console.rule(f"[bold]demo: {mode} run[/]")
        cmd = [sys.executable, "-m", "gpusleuth.demo.job", f"--{mode}", "--steps", str(args.steps),
               "--transform-rounds", str(rounds)]
        result = launch(LaunchOptions(command=cmd, out=base / mode, label=f"demo ({mode})"))
        if result.exit_code != 0:
            raise LaunchError(f"the demo job ({mode}) failed with exit code {result.exit_code}; see {base / mode}")
        report = build_report(read_inputs([result.run_dir]).job)
        emit(REPORT_FORMATS, "text", report, RenderOptions(console=console))
        reports[mode] = report
    from gpusleuth.demo.verdict import judge

    planted, fixed = reports["planted"].outcomes, reports["fixed"].outcomes
    if planted is None or fixed is None:
        raise LaunchError(f"the demo jobs recorded no outcomes; see {base}")
    a, b = planted.steps, fixed.steps
    console.rule("[bold]demo: result[/]")
    if a.samples_per_s and b.samples_per_s:
        console.print(f"planted: {a.samples_per_s:,.0f} samples/s, step p50 {(a.step_time_p50_s or 0) * 1e3:.1f} ms")
        console.print(f"fixed:   {b.samples_per_s:,.0f} samples/s, step p50 {(b.step_time_p50_s or 0) * 1e3:.1f} ms")
    verdict = judge(reports["planted"], reports["fixed"])
    for i, line in enumerate(verdict.lines):
        console.print(f"[bold]{escape(line)}[/]" if i == 0 else escape(line))
    console.print(f"run directories: {base}")
    return 0


def _transform_rounds(console: SafeConsole) -> int:
    """The planted transform sized to this machine (``gpusleuth.demo.job --calibrate``, outside any recording):
    both runs get the same count, so they differ by the fix alone. ``GPUSLEUTH_DEMO_ROUNDS`` sets it instead."""
    import json
    import os
    import subprocess

    from gpusleuth.errors import LaunchError

    given = os.environ.get("GPUSLEUTH_DEMO_ROUNDS")
    if given:
        if not given.strip().isdigit() or int(given) < 1:
            raise LaunchError(f"GPUSLEUTH_DEMO_ROUNDS must be a whole number of transform rounds ≥ 1, not {given!r}")
        return int(given)
    res = subprocess.run([sys.executable, "-m", "gpusleuth.demo.job", "--calibrate"], capture_output=True, text=True,
                         timeout=300)
    if res.returncode != 0:
        last = (res.stderr.strip().splitlines() or ["no output"])[-1]
        raise LaunchError(f"the demo job's calibration failed with exit code {res.returncode}: {last}")
    cal = json.loads(res.stdout.strip().splitlines()[-1])
    console.print(f"planted transform sized to this machine: {cal['rounds']} blur rounds, about "
                  f"{cal['base_ms'] + cal['rounds'] * cal['round_ms']:.1f} ms a batch against a {cal['step_ms']:.1f} ms training step; "
                  f"the fixed run's {cal['workers']} loader worker(s) each need ~{cal['worker_share']:.0%} of a step for theirs")
    return int(cal["rounds"])
