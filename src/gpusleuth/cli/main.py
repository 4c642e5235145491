"""``gpusleuth`` command line: one module per verb (run, report, demo); this file only dispatches."""

from __future__ import annotations

import argparse
import sys

from gpusleuth._version import __version__
from gpusleuth.errors import GpusleuthError

TAKES_COMMAND_AFTER_DASHES = ("load",)  # verbs whose `-- CMD ARGS…` is split off before parsing
VERBS = ("run", "report", "import_", "compare", "fleet", "finalize", "demo", "sweep", "bench", "load")  # module names (import_ → `import`)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpusleuth",
        description="Prove what a GPU job is waiting on, what it costs, and what fixing it is worth.",
        epilog="Examples:\n"
        "  gpusleuth run -- python train.py          record a job and print its report\n"
        "  gpusleuth report gpusleuth-runs/<run>     report on a recorded run\n"
        "  gpusleuth report trace.json.gz --json     analyse a PyTorch profiler trace\n"
        "  gpusleuth report gpu_log.csv              what an nvidia-smi / dmon / DCGM log or nsys export shows\n"
        "  gpusleuth import gpu_log.csv --out runs/x store it as a run directory (compare, DuckDB)\n"
        "  gpusleuth fleet gpusleuth-runs/ --since 7d   GPU-hours and dollars lost by cause, per run\n"
        "  gpusleuth demo                            see a planted input stall found and fixed\n"
        "  gpusleuth sweep --param num_workers=0,2,4 -- python train.py   measure which setting wins\n"
        "  gpusleuth bench mymodel:make --batch 1,8,32 --p95-budget-ms 50  serving batch size from a budget\n"
        "  gpusleuth load http://127.0.0.1:8000/ --concurrency 1,4,16 -- python server.py   a server under load",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"gpusleuth {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="COMMAND")
    for verb in VERBS:
        module = __import__(f"gpusleuth.cli.{verb}", fromlist=["add_parser"])
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    command = None
    if argv[:1] and argv[0] in TAKES_COMMAND_AFTER_DASHES and "--" in argv:
        cut = argv.index("--")  # a positional (load's URL) before `-- CMD` defeats argparse.REMAINDER
        argv, command = argv[:cut], argv[cut + 1:]
    args = parser.parse_args(argv)
    if command is not None:
        args.command = command
    if not args.verb:
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except GpusleuthError as exc:
        from gpusleuth.render.text import inert  # paths and trace keys in the message are untrusted

        message = f"gpusleuth: error: {exc}" if not str(exc).startswith("gpusleuth") else str(exc)
        print(inert(message).replace("\n", "\\n"), file=sys.stderr)  # one line, even for a name with a newline
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
