"""``gpusleuth load``'s flags → the :class:`~gpusleuth.serving.recorder.load_plan.LoadPlan` it runs: the levels,
the bodies (files, fresh prompts), the headers, the API the URL speaks and an LLM endpoint's generation settings.

Apart from ``cli/load.py`` (the parser and the verb): reading flags into a plan is the verb's biggest job,
and it is pure — a plan from a namespace, a sentence (``InputError``) for a flag it cannot use.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpusleuth.errors import InputError, LaunchError

if TYPE_CHECKING:
    from gpusleuth.serving.recorder.load_plan import LoadPlan


DEFAULT_LEVELS = "1,4,16,64"


def _say(line: str) -> None:
    from gpusleuth.pipeline.load import say

    say(line)


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
    from gpusleuth.serving.recorder.load_plan import LoadPlan

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
    from gpusleuth.cli.options import stall_after_value

    stall_after = stall_after_value(args.stall_after, "load") if args.stall_after is not None else None
    plan = LoadPlan(url=args.url, mode=mode, levels=levels, duration_s=args.duration, requests=args.requests,
                    timeout_s=args.timeout, method=method, headers=headers, bodies=bodies,
                    max_inflight=max(1, args.max_inflight), p95_budget_ms=args.p95_budget_ms,
                    insecure=args.insecure, arrivals=args.arrivals, cv=args.cv or 1.0, seed=args.seed, api=api,
                    slo=slo, warmup=0 if args.no_warmup else args.warmup, stall_after=stall_after, **llm)
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
