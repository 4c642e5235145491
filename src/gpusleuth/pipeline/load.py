"""``gpusleuth load``'s flow, apart from its flags (``cli/load.py``): load a URL alone, or start the server under
recording (``recorder/launcher.py``, as ``gpusleuth run`` does) and load it once it answers, with the engine's
``/metrics`` read beside the levels; then the run directory (``load.parquet``, ``engine_metrics.jsonl``,
``meta.json``) and the report built from it (``build_load_report``).

Why here and not in the verb: the verb parses flags and prints; recording, finalizing and reading back a run
are the pipeline's, as they are for ``run`` (issue 35: thin verbs).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gpusleuth.errors import LaunchError

if TYPE_CHECKING:
    from collections.abc import Callable

    from gpusleuth.analysis.options import AnalysisOptions
    from gpusleuth.report.model import Report
    from gpusleuth.run.model import Run
    from gpusleuth.serving.recorder.engine_scrape import EngineScraper
    from gpusleuth.serving.recorder.load_plan import LoadPlan
    from gpusleuth.serving.recorder.loadgen import LoadResult, LoadThread


def say(line: str) -> None:
    """One line of ``gpusleuth load``'s own on stderr (the server's output goes there too, teed)."""
    print(f"gpusleuth load: {line}", file=sys.stderr, flush=True)


_say = say


def export_requests(path: Path, result: LoadResult) -> None:
    from gpusleuth.serving.run.load_jsonl import write_requests_jsonl
    from gpusleuth.run.model import Table

    try:
        n = write_requests_jsonl(Table(result.columns), path)
    except OSError as exc:
        _say(f"could not write {path} ({exc.strerror or exc}); the results are in the report below")
        return
    _say(f"{n:,} requests written to {path}")


def load_url(args: argparse.Namespace, plan: LoadPlan) -> tuple[Path | None, LoadResult, None]:
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


@dataclass
class _Ended:
    """What the load left when the server ended: its result, and why it was cut short if it was."""

    result: LoadResult | None = None
    server: str | None = None


def load_with_server(args: argparse.Namespace, plan: LoadPlan, command: list[str], options: AnalysisOptions
                     ) -> tuple[Path, LoadResult | None, str | None]:
    """Start the server under recording, load it once it answers, stop it; one run directory for all."""
    from gpusleuth.recorder.launcher import LaunchOptions, default_run_dir, launch
    from gpusleuth.serving.recorder.loadgen import LoadThread, write_load
    from gpusleuth.run.layout import RunDir

    if not 0 < args.interval <= 60:
        raise LaunchError("gpusleuth load: --interval must be between 0 and 60 seconds")
    ready = args.ready_timeout if args.ready_timeout is not None else 60.0
    engine = _engine_scraper(args)
    driver = LoadThread(plan, ready, _say, on_ready=_baseline(plan, engine))
    started = time.monotonic()
    out = args.out or default_run_dir(command, "load")
    ended = _Ended()

    def final_meta(stopped_by: str | None, exit_code: int) -> tuple[dict[str, object], list[str]]:
        """The load's part of meta.json, handed to the launcher for its last write once the server ended."""
        result = driver.finish()
        engine.stop()
        server = None
        if stopped_by is None:  # it ended on its own, before the levels were done
            server = (f"the server ({' '.join(command)[:80]}) exited with code {exit_code} after "
                      f"{time.monotonic() - started:.1f} s; its output is in {RunDir(out).output_log}")
        ended.result, ended.server = result, server
        if result is None:
            return {}, []
        return {"load": result.meta(plan)}, ([f"the load was cut short: {server}"] if server else [])

    launched = launch(LaunchOptions(
        command=command, out=out, interval_s=args.interval, grace_s=args.grace, use_gpu=not args.no_gpu,
        label=args.label, capture_output=True, stdout_to_stderr=True, on_tick=driver.tick,
        stop_when=lambda: _levels_done(driver, engine),
        report_options=options.to_meta(), final_meta=final_meta,
    ))
    result, server = ended.result, ended.server
    _engine_problem(engine)
    run_dir = launched.run_dir
    _write_engine(engine, run_dir)
    if result is not None:
        try:
            write_load(run_dir, result)
        except OSError as exc:
            _say(f"could not write the load results into {run_dir} ({exc.strerror or exc})")
    _say(f"run recorded in {run_dir}")
    return run_dir, result, server


def build_load_report(options: AnalysisOptions, label: str | None, run_dir: Path | None, result: LoadResult,
                      plan: LoadPlan, full: bool) -> tuple[Report, Run | None, bool]:
    """The report of a load: of the recorded run (``run_dir``: the server's side too), else of the client's
    rows alone. ``load.parquet`` is written already, so a server side that cannot be read falls back to the
    client's per-level table, said in ``losses`` (and ``full`` is then False). Returns (report, the run read
    back or None, full)."""
    from gpusleuth.pipeline.build import build_report
    from gpusleuth.run.model import Run, Table

    client = Run(meta={"source": "load", "label": label, "start_ns": result.start_ns, "end_ns": result.end_ns,
                       "load": result.meta(plan)}, load=Table(result.columns))
    if run_dir is None:
        return build_report(client, options), None, full
    from gpusleuth.sources.inputs import read_inputs

    try:
        run = read_inputs([run_dir]).job
        return build_report(run, options), run, full
    except Exception as exc:  # noqa: BLE001 - the levels' table needs nothing from the server's side
        # load.parquet is written already; what the client measured is printed whatever the server's side did
        why = (f"the report of the recorded server could not be built ({exc.__class__.__name__}: "
               f"{str(exc)[:160]}); below is the client's per-level table alone; the run is kept in {run_dir}")
        say(why)
        client.meta["server_run"] = str(run_dir)
        report = build_report(client, options)
        report.losses.append(why)
        return report, None, False
