"""``gpusleuth load URL --concurrency 1,4,16 [-- CMD …]``: drive a server through load levels and report.

With ``-- CMD`` the server is started under recording exactly as ``gpusleuth run`` starts a job
(``recorder/launcher.py``: the hook, the sampler, signals), the levels run in a thread beside the
launcher's supervision, and when they are done the launcher ends the server the way ``--duration`` does
(SIGINT, then SIGTERM, then SIGKILL). One run directory then holds the server's telemetry, its output
(``output.log``) and the load results (``load.parquet``), all on the wall clock.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from gpusleuth.cli.load_plan import DEFAULT_LEVELS, plan_from_args
from gpusleuth.pipeline.load import build_load_report, export_requests, load_url, load_with_server, say

if TYPE_CHECKING:
    from gpusleuth.cli.options import Subparsers
    from gpusleuth.serving.recorder.load_plan import LoadPlan
    from gpusleuth.serving.recorder.loadgen import LoadResult


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "load",
        usage="gpusleuth load URL [options] [-- CMD ARGS…]",
        help="load an HTTP server at several concurrencies or rates: req/s, p50/p95/p99, errors, the knee",
        description=(
            "Send requests to URL level by level and report, per level, requests/s, latency p50/p95/p99/max,\n"
            "errors and timeouts, and the knee: the smallest level within 5 % of the best throughput whose p95\n"
            "meets --p95-budget-ms.\n\n"
            "  closed loop (--concurrency): N workers, each sending its next request when the previous is answered\n"
            "  open loop (--rate): requests start on a schedule, whatever the answers (dropped past --max-inflight)\n\n"
            "With -- CMD the server is started under recording (as `gpusleuth run` starts a job), loaded once it\n"
            "answers, then stopped (SIGINT, SIGTERM); one run directory keeps its telemetry, its output\n"
            "(output.log) and the load results (load.parquet), and the full report follows: $ per 1M requests\n"
            "and p95 at the knee, accelerator busy share, energy per request. See docs/serving.md."
        ),
        epilog="Examples:\n"
        "  gpusleuth load http://127.0.0.1:8000/predict --concurrency 1,4,16 -- python server.py 8000\n"
        "  gpusleuth load http://127.0.0.1:8000/ --rate 50,100,200 --duration 20 --p95-budget-ms 100\n"
        "  gpusleuth load http://host:8000/v1/infer --body-file req.json --concurrency 8 --out runs/load1",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("url", help="the URL to send requests to (http:// or https://)")
    g = p.add_argument_group("load levels")
    g.add_argument("--concurrency", default=None, metavar="N[,N…]",
                   help=f"closed loop: workers per level (default {DEFAULT_LEVELS})")
    g.add_argument("--rate", default=None, metavar="R[,R…]",
                   help="open loop instead: requests per second started per level, whatever the answers")
    g.add_argument("--duration", type=float, default=10.0, metavar="S", help="seconds per level (default 10)")
    g.add_argument("--requests", type=int, default=None, metavar="N",
                   help="at most N requests per level (the level ends at whichever of N and --duration comes first)")
    g.add_argument("--timeout", type=float, default=10.0, metavar="S",
                   help="a request not answered in S seconds counts as a timeout (default 10)")
    g.add_argument("--max-inflight", type=int, default=1024, metavar="N",
                   help="open loop: requests outstanding before new ones are dropped (default 1024)")
    g.add_argument("--p95-budget-ms", type=float, default=None, metavar="MS",
                   help="latency budget: the knee is the smallest level near the best throughput whose p95 meets it")
    g.add_argument("--arrivals", choices=("constant", "poisson", "gamma"), default="constant",
                   help="open loop: when requests start — every 1/R s (constant, the default), Poisson (exponential "
                   "gaps, as independent users arrive), or gamma (burstier with --cv above 1)")
    g.add_argument("--cv", type=float, default=None, metavar="X",
                   help="--arrivals gamma: the coefficient of variation of the gaps (1 = Poisson; 2 = bursty)")
    g.add_argument("--stall-after", default=None, metavar="S|auto|off",
                   help="watch the server's progress: requests outstanding and no answer or token for S seconds "
                   "is a stall, said while it lasts (with -- CMD the server's stacks go into RUN/stalls/). auto: "
                   "max(10 s, 5x the recent requests' longest silence); off: no watch. Default: "
                   "$GPUSLEUTH_LOAD_STALL_AFTER, else auto. See docs/hangs.md")
    g.add_argument("--warmup", type=int, default=4, metavar="N",
                   help="send N requests together once the server answers, before the first level, and report them "
                   "apart from every level (a cold server's compiling or first batch is not the first level's "
                   "latency); default 4")
    g.add_argument("--no-warmup", action="store_true", help="no warm-up: the first level meets the server as it is")
    g.add_argument("--seed", type=int, default=0, help="seed of the arrivals and synthetic prompts (default 0)")
    g.add_argument("--slo", default=None, metavar="ttft=…,itl=…,e2e=…",
                   help="LLM budgets per request, e.g. ttft=500ms,itl=50ms,e2e=5s[,attainment=90%%]: goodput "
                   "(requests/s and tokens/s meeting every budget), attainment per level, the highest level meeting it")
    llm = p.add_argument_group("LLM servers (OpenAI-compatible: /v1/chat/completions, /v1/completions)")
    llm.add_argument("--api", choices=("http", "chat", "completions"), default=None,
                     help="what URL is: plain HTTP, or an OpenAI chat/completions endpoint (default: from the URL's "
                     "path — one ending in /v1/chat/completions or /v1/completions is an LLM endpoint)")
    llm.add_argument("--model", default=None, help="the model field of each request (default: the first of /v1/models)")
    llm.add_argument("--no-stream", action="store_true",
                     help="ask for whole answers instead of a token stream (no TTFT or inter-token gaps then)")
    llm.add_argument("--prompts", type=Path, default=None, metavar="DIR|FILE.jsonl",
                     help="a folder of text files (one prompt each) or a JSONL dataset (ShareGPT conversations, "
                     "{\"prompt\": …} or {\"messages\": […]} lines), sent in order once each over the whole run (resent from the "
                     "start, and said, when the run asks for more); default: a fresh synthetic prompt for every request")
    llm.add_argument("--input-tokens", default="128", metavar="MEAN[:SD]",
                     help="synthetic prompts: their length in tokens, normal MEAN ± SD (default 128)")
    llm.add_argument("--output-tokens", default=None, metavar="MEAN[:SD]",
                     help="max_tokens of each request, normal MEAN ± SD (default: 128 for synthetic prompts, the "
                     "dataset's reply lengths for ShareGPT, else the server's default)")
    llm.add_argument("--shared-prefix", type=int, default=0, metavar="TOKENS",
                     help="start every prompt with the same TOKENS words, on purpose (a shared system prompt: what an "
                     "engine's prefix cache serves); default 0: every request of the run gets a prompt of its own, "
                     "never one an earlier level sent")
    llm.add_argument("--extra-body", default=None, metavar="JSON",
                     help="fields merged into every request body, e.g. '{\"ignore_eos\": true, \"temperature\": 0}'")
    r = p.add_argument_group("requests")
    r.add_argument("--method", default=None, help="HTTP method (default GET, or POST with a body)")
    r.add_argument("--header", action="append", default=[], metavar="K:V", help="a request header (repeatable)")
    r.add_argument("--insecure", action="store_true",
                   help="https: do not check the server's certificate (a self-signed internal server)")
    bodies = r.add_mutually_exclusive_group()
    bodies.add_argument("--body-file", type=Path, default=None, metavar="F", help="send this file as every body")
    bodies.add_argument("--bodies", type=Path, default=None, metavar="DIR",
                        help="send the files of DIR as bodies, in name order, round robin")
    s = p.add_argument_group("the server (with -- CMD)")
    s.add_argument("--ready-timeout", type=float, default=None, metavar="S",
                   help="wait at most S seconds for URL's route to answer before the first level, through 404, 502, "
                   "503 and 504 (a proxy before its app is deployed, a model loading); default 60 with -- CMD, 5 "
                   "without")
    s.add_argument("--grace", type=float, default=10.0, metavar="S",
                   help="seconds between SIGINT, SIGTERM and SIGKILL when stopping the server (default 10)")
    s.add_argument("--interval", type=float, default=0.1, metavar="S", help="telemetry sampling interval (default 0.1)")
    s.add_argument("--no-gpu", action="store_true", help="do not sample GPUs")
    s.add_argument("--label", default=None, help="a name for this run in reports")
    o = p.add_argument_group("output")
    o.add_argument("--out", type=Path, default=None,
                   help="run directory to write (with -- CMD default: a new folder under ./gpusleuth-runs/; "
                   "without, nothing is written unless --out is given)")
    o.add_argument("--json", action="store_true", help="print the report as JSON on stdout (docs/report-json.md)")
    o.add_argument("--export-requests", type=Path, default=None, metavar="F.jsonl",
                   help="write every request as one JSON line: level, times, status, TTFT, every inter-token gap, tokens")
    o.add_argument("--html", type=Path, default=None, metavar="F",
                   help="also write the report as a self-contained HTML page (latency vs throughput chart)")
    from gpusleuth.cli.options import add_analysis_options

    add_analysis_options(p)
    p.set_defaults(func=load_command, command=[])  # `-- CMD ARGS…` is split off by cli/main.py


def load_command(args: argparse.Namespace) -> int:
    command = list(args.command)
    plan = plan_from_args(args)
    run_dir: Path | None
    server: str | None
    if command:
        from gpusleuth.cli.options import analysis_options

        run_dir, result, server = load_with_server(args, plan, command, analysis_options(args))
    else:
        run_dir, result, server = load_url(args, plan)
    if result is None or result.not_ready:
        why = (result.not_ready if result is not None else None) or "the load generator did not run"
        if server:
            why = f"{why}; {server}"
        say(why + (f"; the run is kept in {run_dir}" if run_dir else ""))
        return 1
    if not len(result.columns["level"]):
        say("stopped during the warm-up: no level ran" if result.warmup is not None else "no request was sent")
        return 1
    if args.export_requests is not None:
        export_requests(args.export_requests, result)
    _report(args, run_dir, result, plan, full=bool(command))
    if server:  # it ended on its own before the levels were done: the measurement is incomplete
        say(server)
        return 1
    return 0


def _report(args: argparse.Namespace, run_dir: Path | None, result: LoadResult, plan: LoadPlan, full: bool) -> None:
    from gpusleuth.cli.options import analysis_options
    from gpusleuth.cli.output import emit
    from gpusleuth.render.formats import REPORT_FORMATS

    report, run, full = build_load_report(analysis_options(args), args.label, run_dir, result, plan, full)
    if run is not None:
        from gpusleuth.cli.trackers import cache_summary

        cache_summary(report, run)
    # a server loaded by URL alone has no run to report: its serving section
    emit(REPORT_FORMATS, "json" if args.json else "text" if full else "serving", report)
    if args.html:
        emit(REPORT_FORMATS, "html", report, out=args.html)
