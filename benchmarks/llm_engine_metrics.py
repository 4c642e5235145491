"""llama.cpp's live ``/metrics`` beside what ``gpusleuth load`` measured of the same requests (issue 26).

``gpusleuth load URL … -- python tests/servers/llama_server.py tiny.gguf --metrics --parallel N`` (llama.cpp's
C++ server from the xllamacpp wheel, a tiny GGUF from ``tests/servers/tiny_gguf.py``), then per level the
engine's numbers from the report's ``engine_metrics`` next to the client's, and over the whole load the
engine's counters (first scrape → last) against the sums of gpusleuth's own rows:

    python benchmarks/llm_engine_metrics.py --concurrency 1,2,4,8 --parallel 4 --seconds 4
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

import llm_proxy_clock as P  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--concurrency", default="1,2,4,8")
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--tokens", type=int, default=32)
    a = ap.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    from gpusleuth.serving.sources.engine_metrics import read_engine_scrapes

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        gguf = P.build_gguf(work / "tiny.gguf")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        run = work / "run"
        env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
        load_avg = os.getloadavg()[0]
        res = subprocess.run(
            [sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/v1/completions", "--concurrency",
             a.concurrency, "--duration", str(a.seconds), "--input-tokens", str(a.tokens), "--output-tokens",
             str(a.tokens), "--no-gpu", "--out", str(run), "--json", "--", sys.executable,
             str(REPO / "tests" / "servers" / "llama_server.py"), str(gguf), "--port", str(port), "--parallel",
             str(a.parallel), "--metrics"], env=env, capture_output=True, text=True, timeout=600)
        if res.returncode:
            raise SystemExit(res.stderr[-3000:])
        rep = json.loads(res.stdout)
        samples, _ = read_engine_scrapes(run)
        rows = P.gpusleuth_rows(run)
    print(f"load average {load_avg:.1f} → {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; --parallel "
          f"{a.parallel}, {a.seconds:g} s a level, {a.tokens} prompt / output tokens a request")
    print("| concurrency | scrapes | running mean / max | deferred mean / max | mean batch | engine gen tok/s | "
          "client out tok/s | engine ms/token | client ITL p50 ms | client TTFT p50 ms |")
    print("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|")
    for lv, mine in zip(rep["engine_metrics"]["levels"], rep["serving"]["levels"]):
        t = mine["tokens"]
        print(f"| {lv['concurrency']} | {lv['scrapes']} | {lv['running_mean']:.2f} / {lv['running_max']:.0f} | "
              f"{lv['waiting_mean']:.2f} / {lv['waiting_max']:.0f} | {lv['batch_mean']:.2f} | "
              f"{lv['generation_tokens_per_s']:.0f} | {t['output_tokens_per_s']:.0f} | "
              f"{lv['decode_ms_per_token']:.2f} | {t['itl_ms']['p50']:.2f} | {t['ttft_ms']['p50']:.2f} |")
    f, last = samples[0].values, samples[-1].values
    out = sum(r["output_tokens"] for r in rows)
    inp = sum(r["input_tokens"] for r in rows)
    span = sum((r["token_ns"][-1] - r["token_ns"][0]) / 1e9 for r in rows)
    print(f"whole load, {len(rows)} requests, {len(samples)} scrapes: generated tokens engine "
          f"{last['generation_tokens'] - f['generation_tokens']:.0f} / client {out}; prompt tokens (computed + "
          f"cached) engine {last['prompt_tokens'] + last['prompt_tokens_cached'] - f['prompt_tokens'] - f['prompt_tokens_cached']:.0f}"
          f" / client {inp}; generating seconds engine {last['decode_seconds'] - f['decode_seconds']:.3f} / "
          f"client first-to-last-token spans {span:.3f}")


if __name__ == "__main__":
    main()
