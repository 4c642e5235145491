"""``gpusleuth run [options] -- CMD ARGS…``: record a job, then print its report."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers
    from gpusleuth.recorder.launcher import LaunchResult
    from gpusleuth.render.live import LiveView


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "run",
        help="record a command (GPU, host, training steps) and report what it waited on",
        description=(
            "Launch CMD under the recorder: GPU telemetry through NVML, host and process telemetry, and — "
            "for PyTorch, with no code change — per-step timings (data wait, compute, optimizer, phases). "
            "Signals reach the job; gpusleuth exits with the job's exit code. The run directory is written "
            "as the job runs, so a crash loses at most about a second."
        ),
        epilog="Example: gpusleuth run --duration 60 -- python train.py --epochs 1",
    )
    p.add_argument("--out", type=Path, default=None,
                   help="run directory to write (default: a new folder under ./gpusleuth-runs/)")
    p.add_argument("--interval", type=float, default=0.1, metavar="S",
                   help="telemetry sampling interval in seconds (default 0.1 = 10 Hz)")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop the job gracefully after S seconds (SIGINT, then SIGTERM, then SIGKILL) and report")
    p.add_argument("--grace", type=float, default=10.0, metavar="S",
                   help="seconds between the escalating signals of --duration (default 10)")
    p.add_argument("--profile-steps", default=None, metavar="A-B",
                   help="take a torch.profiler trace of steps A..B (0-based) into the run directory")
    p.add_argument("--no-gpu", action="store_true", help="do not sample GPUs (host telemetry only)")
    p.add_argument("--label", default=None, help="a name for this run in reports")
    p.add_argument("--json", action="store_true",
                   help="print the report as JSON on stdout after the job; stdout then carries only that JSON "
                        "(the job's own stdout goes to stderr, and to output.log with --capture-output)")
    p.add_argument("--no-report", action="store_true", help="do not print a report at the end (--html still writes its page)")
    p.add_argument("--live", action="store_true",
                   help="show a live panel (step time, samples/s, data wait, GPU, power, CPU) while the job runs; "
                   "plain lines every 5 s when stderr is not a terminal")
    p.add_argument("--prometheus", default=None, metavar="[HOST:]PORT",
                   help="serve live Prometheus metrics (steps, step time, data wait, throughput, phases, GPU "
                   "utilization/activity, power, memory) on http://HOST:PORT/metrics while the job runs; "
                   "binds 127.0.0.1 unless HOST is given (0.0.0.0 for all interfaces). See docs/prometheus.md")
    p.add_argument("--html", type=Path, default=None, metavar="OUT",
                   help="also write the report as a self-contained HTML file with charts")
    p.add_argument("--capture-output", action="store_true",
                   help="also copy the job's stdout/stderr into the run directory (output.log), e.g. for "
                   "MLPerf ':::MLLOG' lines; the job then writes to a pipe instead of the terminal")
    p.add_argument("--stall-after", default="auto", metavar="S|auto|off",
                   help="watch every rank's progress: no step or phase boundary for S seconds is a stall, and "
                   "while the job is still stuck gpusleuth prints one line and saves every process's Python "
                   "stacks (all threads, DataLoader workers too; py-spy when installed, else faulthandler) "
                   "into RUN/stalls/. auto (default): max(10 s, 5x the recent step time), never inside a "
                   "phase (eval, checkpoint); off: no watch. See docs/hangs.md")
    p.add_argument("--on-stall", choices=("dump", "kill"), default="dump",
                   help="what a stall does after its stacks are saved: dump (default: keep going; a stall "
                   "that ends is reported as recovered) or kill (end the job as --duration does)")
    p.add_argument("--flight-recorder", nargs="?", type=_ring_size, const=2000, default=None, metavar="N",
                   help="turn on torch's Flight Recorder in the job (TORCH_FR_BUFFER_SIZE=N, default 2000 "
                   "collectives per process; NCCL's dump at a watchdog timeout left off as the job had it) unless "
                   "the job sets its own: at a stall the verdict then says which rank never entered which "
                   "collective (gloo and NCCL). See docs/hangs.md")
    p.add_argument("--no-flops", action="store_true",
                   help="do not measure FLOPs per step (the hook counts one step with FlopCounterMode for MFU)")
    from gpusleuth.cli.trackers import add_tracker_options
    from gpusleuth.cli.options import add_analysis_options

    add_tracker_options(p)
    add_analysis_options(p)
    p.add_argument("command", nargs=argparse.REMAINDER, help="the command to run, after --")
    p.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:
    from gpusleuth.errors import LaunchError
    from gpusleuth.recorder.launcher import LaunchOptions, launch

    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise LaunchError("gpusleuth run: no command given (usage: gpusleuth run [options] -- CMD ARGS…)")
    if args.interval <= 0 or args.interval > 60:
        raise LaunchError("gpusleuth run: --interval must be between 0 and 60 seconds")
    if args.profile_steps:
        _check_range(args.profile_steps)
    from gpusleuth.cli.options import analysis_options

    if args.target:
        from gpusleuth.analysis.quality import Target

        Target.parse(args.target)  # a typo should fail before the job runs, not after
    if args.prometheus:
        _check_listen(args.prometheus)
    from gpusleuth.cli.options import stall_after_value

    stall_after = stall_after_value(args.stall_after, "run")
    out, live = _live_view(args, command)
    result = launch(
        LaunchOptions(
            command=command, out=out, interval_s=args.interval, duration_s=args.duration,
            grace_s=args.grace, profile_steps=args.profile_steps, use_gpu=not args.no_gpu, label=args.label,
            capture_output=args.capture_output, on_tick=live.tick if live is not None else None,
            stdout_to_stderr=args.json,
            report_options=analysis_options(args).to_meta(),
            extra_env={"GPUSLEUTH_FLOPS": "0"} if args.no_flops else {},
            prometheus=args.prometheus, stall_after=stall_after, on_stall=args.on_stall,
            flight_recorder=args.flight_recorder,
        )
    )
    try:
        if live is not None:
            live.close()
        print(f"gpusleuth: run recorded in {result.run_dir}", file=sys.stderr)
        if args.no_report:
            _print_unsaved_notes(result)
        _report_after_run(args, result)
    except KeyboardInterrupt:  # Ctrl-C during the report stops the report, not the job's exit code
        print(f"gpusleuth: report interrupted; the run is saved in {result.run_dir}", file=sys.stderr)
    # The job is over and its code is ours to return: the rest of a Ctrl-C burst (pressed twice, or sent to
    # the whole group) must not turn the exit into death by SIGINT while the interpreter shuts down.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return result.exit_code


def _report_after_run(args: argparse.Namespace, result: LaunchResult) -> None:
    """The report of the run just recorded (unless --no-report), its HTML page and tracker logging."""
    if not args.no_report or args.html or args.mlflow or args.wandb:  # --no-report --html: the page alone
        from gpusleuth.cli.report import print_report
        from gpusleuth.cli.options import analysis_options
        from gpusleuth.sources.inputs import read_inputs

        try:
            report_run = read_inputs([result.run_dir]).job
            # what the launcher could not save into meta.json (a full disk) is said all the same
            report_run.losses.extend(n for n in result.notes if n not in report_run.losses)
            report = print_report(report_run, "json" if args.json else "text", to_stderr=True,
                                  options=analysis_options(args), quiet=args.no_report)
            from gpusleuth.cli.trackers import cache_summary

            cache_summary(report, report_run)  # the recorder's verb writes the run; `fleet` reads this
            if args.html:
                from gpusleuth.cli.output import emit
                from gpusleuth.render.formats import REPORT_FORMATS

                emit(REPORT_FORMATS, "html", report, out=args.html)
            from gpusleuth.cli.trackers import send_to_trackers

            send_to_trackers(report, report_run, args)
        except Exception as exc:  # noqa: BLE001 - the job's exit code must survive a report bug
            print(f"gpusleuth: could not build the report ({exc.__class__.__name__}: {exc}); "
                  f"the run is saved in {result.run_dir}", file=sys.stderr)


def _print_unsaved_notes(result: LaunchResult) -> None:
    """With no report to carry them, the launcher's notes that meta.json could not keep go to stderr."""
    for note in [] if result.notes_saved else result.notes:
        print(f"gpusleuth: {note}", file=sys.stderr)


def _ring_size(text: str) -> int:
    """``--flight-recorder=N``: entries per process, 1 to 1,000,000."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 1_000_000:
        raise argparse.ArgumentTypeError(f"wants a number of collectives from 1 to 1000000, got {text!r}")
    return n


def _check_range(text: str) -> None:
    from gpusleuth.errors import LaunchError

    try:
        a, b = (int(x) for x in text.split("-", 1))
        if a < 0 or b < a:
            raise ValueError
    except ValueError:
        raise LaunchError(f"gpusleuth run: --profile-steps wants A-B with 0 <= A <= B, got {text!r}") from None


def _check_listen(text: str) -> None:
    """A bad or taken --prometheus address should stop us before the job starts, not be found later."""
    import socket

    from gpusleuth.errors import LaunchError
    from gpusleuth.recorder.exporter import parse_listen

    try:
        host, port = parse_listen(text)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
        if port:  # port 0: the recorder picks one and writes it to recorder.json ("prometheus")
            shown = f"[{host}]" if ":" in host else host
            print(f"gpusleuth: live metrics on http://{shown}:{port}/metrics", file=sys.stderr)
    except ValueError as exc:
        raise LaunchError(f"gpusleuth run: {exc}") from None
    except OSError as exc:
        raise LaunchError(f"gpusleuth run: cannot serve Prometheus metrics on {text}: {exc.strerror or exc}") from None


def _live_view(args: argparse.Namespace, command: list[str]) -> tuple[Path | None, LiveView | None]:
    """The run directory (chosen here so the live view can tail it) and the --live view, or None."""
    if not args.live:
        return args.out, None
    import atexit

    from gpusleuth.recorder.launcher import default_run_dir
    from gpusleuth.render.live import LiveView

    out = args.out or default_run_dir(command)
    view = LiveView(out, sys.stderr)
    atexit.register(view.close)  # the terminal gets its scroll region back whatever happens
    return out, view
