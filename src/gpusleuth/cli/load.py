"""``gpusleuth load URL --concurrency 1,4,16 [-- CMD …]``: drive a server through load levels and report.

With ``-- CMD`` the server is started under recording exactly as ``gpusleuth run`` starts a job
(``recorder/launcher.py``: the hook, the sampler, signals), the levels run in a thread beside the
launcher's supervision, and when they are done the launcher ends the server the way ``--duration`` does
(SIGINT, then SIGTERM, then SIGKILL). One run directory then holds the server's telemetry, its output
(``output.log``) and the load results (``load.parquet``), all on the wall clock.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpusleuth.errors import InputError, LaunchError

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpusleuth.cli.options import Subparsers
    from gpusleuth.serving.recorder.engine_scrape import EngineScraper
    from gpusleuth.serving.recorder.loadgen import LoadPlan, LoadResult, LoadThread


DEFAULT_LEVELS = "1,4,16,64"


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


def _levels(text: str, flag: str, integer: bool) -> list[float]:
    try:
        values = [int(x) if integer else float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or any(v <= 0 for v in values) or (integer and any(v > 100_000 for v in values)):
        kind = "positive whole numbers up to 100000" if integer else "positive numbers (requests per second)"
        raise LaunchError(f"gpusleuth load: {flag} wants {kind}, comma-separated; got {text!r}")
    return values


def _read_bodies(args: argparse.Namespace) -> list[bytes]:
    from gpusleuth.run.files import check_regular

    files: list[Path] = []
    if args.body_file is not None:
        files = [args.body_file]
    elif args.bodies is not None:
        if not args.bodies.is_dir():
            raise InputError(args.bodies, "--bodies wants a directory of request bodies")
        files = sorted(f for f in args.bodies.iterdir() if f.is_file())
        if not files:
            raise InputError(args.bodies, "holds no files to send as bodies")
    out = []
    for f in files:
        if not f.exists():
            raise InputError(f, "no such file")
        try:
            check_regular(f, "a request body")
            out.append(f.read_bytes())
        except OSError as exc:
            raise InputError(f, f"cannot be read ({exc.strerror or exc})") from None
    return out or [b""]


def _headers(args: argparse.Namespace, bodies: list[bytes]) -> list[tuple[str, str]]:
    headers = []
    for h in args.header:
        k, sep, v = h.partition(":")
        if not sep or not k.strip():
            raise LaunchError(f"gpusleuth load: --header wants NAME:VALUE, got {h!r}")
        headers.append((k.strip(), v.strip()))
    named = args.body_file.name if args.body_file else ""
    if bodies != [b""] and not any(k.lower() == "content-type" for k, _ in headers):
        json_body = named.endswith(".json") or (args.bodies and all(b.lstrip()[:1] in (b"{", b"[") for b in bodies))
        headers.append(("Content-Type", "application/json" if json_body else "application/octet-stream"))
    return headers


def plan_from_args(args: argparse.Namespace) -> LoadPlan:
    from gpusleuth.serving.recorder.http_client import safe_url
    from gpusleuth.serving.recorder.loadgen import LoadPlan

    if args.concurrency and args.rate:
        raise LaunchError("gpusleuth load: give --concurrency (closed loop) or --rate (open loop), not both")
    if args.rate:
        mode, levels = "open", _levels(args.rate, "--rate", integer=False)
    else:
        mode, levels = "closed", _levels(args.concurrency or DEFAULT_LEVELS, "--concurrency", integer=True)
    for flag, v in (("--duration", args.duration), ("--timeout", args.timeout)):
        if not v > 0:
            raise LaunchError(f"gpusleuth load: {flag} must be a positive number of seconds")
    if args.p95_budget_ms is not None and not 0 < args.p95_budget_ms < 1e6:
        raise LaunchError("gpusleuth load: --p95-budget-ms must be a positive number of milliseconds")
    if args.requests is not None and args.requests <= 0:
        raise LaunchError("gpusleuth load: --requests must be a positive number")
    api = args.api or _api_of(args.url)
    if api == "http" and args.prompts is not None:
        raise LaunchError("gpusleuth load: --prompts is for LLM endpoints (a URL ending in /v1/chat/completions or "
                          "/v1/completions, or --api chat|completions)")
    llm: dict[str, Any] = {}
    if api == "http":
        bodies = _read_bodies(args)
        method = (args.method or ("POST" if bodies != [b""] else "GET")).upper()
        headers = _headers(args, bodies)
    else:
        if args.body_file is not None or args.bodies is not None:
            raise LaunchError("gpusleuth load: an LLM endpoint's bodies are built from --prompts (or synthetic "
                              "prompts); --body-file/--bodies are for plain HTTP (--api http)")
        bodies, method = [b""], "POST"
        headers = _headers(args, bodies) + [("Content-Type", "application/json")]
        llm = _llm_plan(args)
    if args.cv is not None and (args.arrivals != "gamma" or not 0 < args.cv <= 20):
        raise LaunchError("gpusleuth load: --cv goes with --arrivals gamma, a number in (0, 20]")
    if args.arrivals != "constant" and not args.rate:
        raise LaunchError("gpusleuth load: --arrivals shapes an open loop; give --rate R[,R…] with it")
    slo = {}
    if args.slo:
        from gpusleuth.serving.analysis.tokens import parse_slo

        if api == "http":
            raise LaunchError("gpusleuth load: --slo holds an LLM endpoint's TTFT and inter-token gaps; for plain "
                              "HTTP give --p95-budget-ms")
        try:
            slo = parse_slo(args.slo)
        except ValueError as exc:
            raise LaunchError(f"gpusleuth load: {exc}") from None
    if not 0 <= args.warmup <= 10_000:
        raise LaunchError(f"gpusleuth load: --warmup wants a number of requests from 0 to 10000, got {args.warmup}")
    plan = LoadPlan(url=args.url, mode=mode, levels=levels, duration_s=args.duration, requests=args.requests,
                    timeout_s=args.timeout, method=method, headers=headers, bodies=bodies,
                    max_inflight=max(1, args.max_inflight), p95_budget_ms=args.p95_budget_ms,
                    insecure=args.insecure, arrivals=args.arrivals, cv=args.cv or 1.0, seed=args.seed, api=api,
                    slo=slo, warmup=0 if args.no_warmup else args.warmup, **llm)
    try:
        plan.target()
    except ValueError as exc:
        raise InputError(safe_url(args.url) if "://" in args.url else args.url, str(exc)) from None
    return plan


def _api_of(url: str) -> str:
    from urllib.parse import urlsplit

    from gpusleuth.serving.recorder.openai_api import endpoint_kind

    try:
        path = urlsplit(url).path
    except ValueError:
        return "http"
    return endpoint_kind(path) or "http"


def _llm_plan(args: argparse.Namespace) -> dict[str, Any]:
    """The LoadPlan fields of an OpenAI-compatible load: prompts, model, stream, extra body fields."""
    import json

    from gpusleuth.serving.recorder import prompts as P

    try:
        inputs = P.Lengths.parse(args.input_tokens, "--input-tokens")
        outputs = P.Lengths.parse(args.output_tokens, "--output-tokens") if args.output_tokens else None
    except ValueError as exc:
        raise LaunchError(f"gpusleuth load: {exc}") from None
    notes: list[str] = []
    prompts: list[P.Prompt] = []
    synthetic = None
    if args.prompts is None:
        synthetic = (inputs, outputs or P.Lengths(128))  # drawn afresh for every request of the run
    elif args.prompts.is_dir():
        prompts = P.from_folder(args.prompts, outputs, args.seed)
    elif args.prompts.exists():
        prompts, note = P.from_jsonl(args.prompts, outputs, args.seed)
        if note:
            notes.append(note)
            _say(note)
    else:
        raise InputError(args.prompts, "no such file or folder")
    extra: object = {}
    if args.extra_body:
        try:
            extra = json.loads(args.extra_body)
        except ValueError:
            extra = None
        if not isinstance(extra, dict):
            raise LaunchError(f"gpusleuth load: --extra-body wants a JSON object, got {args.extra_body[:60]!r}")
    if not 0 <= args.shared_prefix <= 100_000:
        raise LaunchError(f"gpusleuth load: --shared-prefix wants a number of tokens from 0 to 100000, got "
                          f"{args.shared_prefix}")
    return {"prompts": prompts, "synthetic": synthetic, "shared_prefix": args.shared_prefix, "model": args.model,
            "stream": not args.no_stream, "extra_body": extra, "notes": notes}


def _say(line: str) -> None:
    print(f"gpusleuth load: {line}", file=sys.stderr, flush=True)


def load_command(args: argparse.Namespace) -> int:
    command = list(args.command)
    plan = plan_from_args(args)
    run_dir: Path | None
    server: str | None
    if command:
        run_dir, result, server = _with_server(args, plan, command)
    else:
        run_dir, result, server = _url_only(args, plan)
    if result is None or result.not_ready:
        why = (result.not_ready if result is not None else None) or "the load generator did not run"
        if server:
            why = f"{why}; {server}"
        _say(why + (f"; the run is kept in {run_dir}" if run_dir else ""))
        return 1
    if not len(result.columns["level"]):
        _say("stopped during the warm-up: no level ran" if result.warmup is not None else "no request was sent")
        return 1
    if args.export_requests is not None:
        _export(args.export_requests, result)
    _report(args, run_dir, result, plan, full=bool(command))
    if server:  # it ended on its own before the levels were done: the measurement is incomplete
        _say(server)
        return 1
    return 0


def _export(path: Path, result: LoadResult) -> None:
    from gpusleuth.serving.run.load_jsonl import write_requests_jsonl
    from gpusleuth.run.model import Table

    try:
        n = write_requests_jsonl(Table(result.columns), path)
    except OSError as exc:
        _say(f"could not write {path} ({exc.strerror or exc}); the results are in the report below")
        return
    _say(f"{n:,} requests written to {path}")


def _url_only(args: argparse.Namespace, plan: LoadPlan) -> tuple[Path | None, LoadResult, None]:
    """No server to start: load the URL; with --out, a run directory with only the load results."""
    from gpusleuth.serving.recorder.loadgen import run_plan

    cancel = threading.Event()
    old = signal.signal(signal.SIGINT, lambda *_: cancel.set())  # Ctrl-C ends the levels, keeps the rows
    engine = _engine_scraper(args)
    try:
        ready = args.ready_timeout if args.ready_timeout is not None else 5.0
        result = run_plan(plan, cancel, ready, _say, on_ready=_baseline(plan, engine))
    finally:
        signal.signal(signal.SIGINT, old)
        engine.stop()
        _engine_problem(engine)
    run_dir = None
    if args.out is not None and result.not_ready is None:
        run_dir = _write_load_only(args, plan, result)
        _write_engine(engine, run_dir)
    return run_dir, result, None


def _engine_scraper(args: argparse.Namespace) -> EngineScraper:
    """An LLM engine's own /metrics, read once a second while the levels run (serving/recorder/engine_scrape.py)."""
    from gpusleuth.serving.recorder.engine_scrape import EngineScraper

    return EngineScraper(args.url, insecure=bool(getattr(args, "insecure", False))).start()


def _baseline(plan: LoadPlan, engine: EngineScraper) -> Callable[[], None] | None:
    """The engine's scrape right before the first level, for an LLM endpoint (the engines gpusleuth reads all
    serve one). A plain HTTP server gets none: a GET /metrics it answers 404 just before the load is a request
    its own records would hold beside the load's."""
    return engine.baseline if plan.api != "http" else None


def _levels_done(driver: LoadThread, engine: EngineScraper) -> str | None:
    """The launcher's stop condition: the levels are done. The engine's last scrape is taken first, while the
    server still runs (its counters grow as requests end: without it the last second's requests are lost)."""
    if not driver.done():
        return None
    engine.stop()
    return "gpusleuth load (levels done)"


def _engine_problem(engine: EngineScraper) -> None:
    """What the engine-metrics reader met and could not read (a status line that is not HTTP), in one sentence."""
    if engine.problem:
        _say(engine.problem)


def _write_engine(engine: EngineScraper, run_dir: Path) -> None:
    try:
        engine.write(run_dir)
    except OSError as exc:
        _say(f"could not write the engine's metrics into {run_dir} ({exc.strerror or exc})")


def _write_load_only(args: argparse.Namespace, plan: LoadPlan, result: LoadResult) -> Path:
    from gpusleuth._version import __version__
    from gpusleuth.recorder.launcher import prepare_run_dir
    from gpusleuth.serving.recorder.loadgen import write_load
    from gpusleuth.run.layout import RunDir
    from gpusleuth.run.meta import FORMAT_VERSION

    run_dir = prepare_run_dir(args.out)
    layout = RunDir(run_dir)
    layout.raw.rmdir()  # nothing records steps here
    meta = {"format": FORMAT_VERSION, "gpusleuth_version": __version__, "source": "load", "label": args.label,
            "command": None, "hostname": __import__("os").uname().nodename, "start_ns": result.start_ns,
            "end_ns": result.end_ns, "load": result.meta(plan)}
    try:
        write_load(run_dir, result)
        layout.write_meta(meta)
    except OSError as exc:
        raise LaunchError(f"gpusleuth load: cannot write the run directory {run_dir}: {exc.strerror or exc}") from None
    return run_dir


def _with_server(args: argparse.Namespace, plan: LoadPlan, command: list[str]
                 ) -> tuple[Path, LoadResult | None, str | None]:
    """Start the server under recording, load it once it answers, stop it; one run directory for all."""
    from gpusleuth.recorder.launcher import LaunchOptions, default_run_dir, launch
    from gpusleuth.serving.recorder.loadgen import LoadThread, write_load
    from gpusleuth.cli.options import analysis_options
    from gpusleuth.run.layout import RunDir

    if not 0 < args.interval <= 60:
        raise LaunchError("gpusleuth load: --interval must be between 0 and 60 seconds")
    ready = args.ready_timeout if args.ready_timeout is not None else 60.0
    engine = _engine_scraper(args)
    driver = LoadThread(plan, ready, _say, on_ready=_baseline(plan, engine))
    started = time.monotonic()
    launched = launch(LaunchOptions(
        command=command, out=args.out or default_run_dir(command, "load"), interval_s=args.interval, grace_s=args.grace, use_gpu=not args.no_gpu,
        label=args.label, capture_output=True, stdout_to_stderr=True, on_tick=driver.tick,
        stop_when=lambda: _levels_done(driver, engine),
        report_options=analysis_options(args).to_meta(),
    ))
    result = driver.finish()
    engine.stop()
    _engine_problem(engine)
    run_dir = launched.run_dir
    _write_engine(engine, run_dir)
    server = None
    layout = RunDir(run_dir)
    meta = layout.read_meta([])
    if meta.get("stopped_by") is None:  # it ended on its own, before the levels were done
        server = (f"the server ({' '.join(command)[:80]}) exited with code {launched.exit_code} after "
                  f"{time.monotonic() - started:.1f} s; its output is in {layout.output_log}")
    if result is not None:
        meta["load"] = result.meta(plan)
        if server:
            meta.setdefault("losses", []).append(f"the load was cut short: {server}")
        try:
            write_load(run_dir, result)
            layout.write_meta(meta)
        except OSError as exc:
            _say(f"could not write the load results into {run_dir} ({exc.strerror or exc})")
    _say(f"run recorded in {run_dir}")
    return run_dir, result, server


def _report(args: argparse.Namespace, run_dir: Path | None, result: LoadResult, plan: LoadPlan, full: bool) -> None:
    from gpusleuth.cli.output import make_console, write_html_report
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.cli.options import analysis_options
    from gpusleuth.run.model import Run, Table

    client = Run(meta={"source": "load", "label": args.label, "start_ns": result.start_ns, "end_ns": result.end_ns,
                       "load": result.meta(plan)}, load=Table(result.columns))
    if run_dir is None:
        report = build_report(client, analysis_options(args))
    else:
        from gpusleuth.sources.rundir import load_run

        try:
            run = load_run(run_dir)
            report = build_report(run, analysis_options(args))
            from gpusleuth.cli.trackers import cache_summary

            cache_summary(report, run)
        except Exception as exc:  # noqa: BLE001 - the levels' table needs nothing from the server's side
            # load.parquet is written already; what the client measured is printed whatever the server's side did
            why = (f"the report of the recorded server could not be built ({exc.__class__.__name__}: "
                   f"{str(exc)[:160]}); below is the client's per-level table alone; the run is kept in {run_dir}")
            _say(why)
            client.meta["server_run"] = str(run_dir)
            report = build_report(client, analysis_options(args))
            report.losses.append(why)
            full = False
    if args.json:
        from gpusleuth.render.json_report import render_json

        sys.stdout.write(render_json(report) + "\n")
    elif full:
        from gpusleuth.render.console import render_console

        render_console(report, make_console())
    else:
        from gpusleuth.serving.render.console import render_serving

        console = make_console()
        render_serving(report, console)
        for msg in report.losses:
            console.print(f"  • {msg}", markup=False)
    if args.html:
        write_html_report(report, args.html)
