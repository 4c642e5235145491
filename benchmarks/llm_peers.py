"""TTFT and inter-token agreement with a streaming server's own clock: gpusleuth beside aiperf and guidellm
(issue 26, 8).

Starts ``tests/servers/openai_stream.py`` (its own clock per request: kernel receive stamp → first token
write, every gap between token writes), then, interleaved and repeated, the same load from each client —
concurrency C, N requests, ~300-token prompts asking for 16 tokens — and compares each client's TTFT p50
and inter-token p50 with the server's for the requests that client sent (the server's records between the
two runs' boundaries). aiperf runs from its own venv (``--aiperf``), with a tokenizer trained here
(``tests/servers/tiny_llama.py``) as ``--tokenizer``; its ``inter_token_latency`` divides decode time by
the output tokens *its* tokenizer counts in the text, its ``inter_chunk_latency`` is the gap between
stream events: both are shown. guidellm (``--guidellm``, its own venv too; 0.8's ``run`` with a synthetic
300/16-token dataset and the same tokenizer) reports per request the *mean* gap, (end − first token) ÷
(tokens − 1): its row's inter-token p50 is held to the server's median of per-request mean gaps, the same
definition, where the others' are held to the median of all gaps.

    python benchmarks/llm_peers.py --aiperf /work/venvs/i26a-aiperf/bin/aiperf \
        --guidellm /work/venvs/i26a-guidellm/bin/guidellm --concurrency 2 --requests 24 --repeats 2
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))


def main() -> None:
    from llm_engine import build_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--aiperf", help="the aiperf executable (its own venv)")
    ap.add_argument("--guidellm", help="the guidellm executable (its own venv)")
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--requests", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--port", type=int, default=18781)
    a = ap.parse_args()
    url = f"http://127.0.0.1:{a.port}"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tokenizer = build_model(work / "tok")
        truth = work / "truth.jsonl"
        srv = subprocess.Popen([sys.executable, "openai_stream.py", str(a.port), str(truth), "--layers", "4",
                                "--width", "192"], cwd=REPO / "tests" / "servers", stdout=subprocess.DEVNULL)

        def records() -> list[dict]:
            return [json.loads(x) for x in truth.read_text().splitlines()]

        def server(rows: list[dict]) -> tuple[float, float]:
            return (float(np.median([r["ttft_s"] * 1e3 for r in rows])),
                    float(np.median(np.concatenate([r["gaps_s"] for r in rows]))) * 1e3)

        def server_per_request(rows: list[dict]) -> tuple[float, float]:
            """TTFT p50 and the median of each request's mean gap (guidellm's definition)."""
            return (float(np.median([r["ttft_s"] * 1e3 for r in rows])),
                    float(np.median([np.mean(r["gaps_s"]) for r in rows if r["gaps_s"]])) * 1e3)

        rows = []
        try:
            time.sleep(6)
            for _ in range(a.repeats):
                n0 = len(records())
                out = subprocess.run([sys.executable, "-m", "gpusleuth", "load", url + "/v1/chat/completions", "--model",
                                      "tiny-gpt", "--concurrency", str(a.concurrency), "--requests", str(a.requests),
                                      "--duration", "600", "--input-tokens", "300", "--output-tokens", "16", "--json"],
                                     capture_output=True, text=True, env=env, check=True)
                t = json.loads(out.stdout)["serving"]["levels"][0]["tokens"]
                time.sleep(1)
                s = server(records()[n0:])
                rows.append(("gpusleuth", t["ttft_ms"]["p50"], t["itl_ms"]["p50"], *s))
                if a.guidellm:
                    n0 = len(records())
                    out_json = work / "guidellm.json"
                    subprocess.run([a.guidellm, "run", "--backend", f"kind=openai_http,target={url}",
                                    "--profile", f"kind=concurrent,streams={a.concurrency}",
                                    "--constraint", f"kind=max_requests,count={a.requests}",
                                    "--data", "kind=synthetic_text,prompt_tokens=300,output_tokens=16",
                                    "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
                                    "--output", f"kind=json,path={out_json}", "--disable-console"],
                                   capture_output=True, text=True, check=True)
                    m = json.loads(out_json.read_text())["benchmarks"][0]["metrics"]
                    time.sleep(1)
                    s = server_per_request(records()[n0:])
                    rows.append(("guidellm (per-request mean gap)",
                                 m["time_to_first_token_ms"]["successful"]["percentiles"]["p50"],
                                 m["inter_token_latency_ms"]["successful"]["percentiles"]["p50"], *s))
                if not a.aiperf:
                    continue
                n0 = len(records())
                art = work / "aiperf"
                shutil.rmtree(art, ignore_errors=True)
                subprocess.run([a.aiperf, "profile", "--model", "tiny-gpt", "--url", url, "--endpoint-type", "chat",
                                "--streaming", "--concurrency", str(a.concurrency), "--request-count", str(a.requests),
                                "--isl", "300", "--osl", "16", "--tokenizer", str(tokenizer), "--artifact-dir", str(art),
                                "--no-server-metrics", "--no-gpu-telemetry", "--ui-type", "none"],
                               capture_output=True, text=True, check=True)
                d = json.loads((art / "profile_export_aiperf.json").read_text())
                time.sleep(1)
                s = server(records()[n0:])
                ttft = d["time_to_first_token"]["p50"]
                rows.append(("aiperf inter_token_latency", ttft, d["inter_token_latency"]["p50"], *s))
                rows.append(("aiperf inter_chunk_latency", ttft, d["inter_chunk_latency"]["p50"], *s))
        finally:
            srv.terminate()
            srv.wait()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; concurrency {a.concurrency}, "
          f"{a.requests} requests a run")
    print("| client | TTFT p50 client / server ms | ratio | inter-token p50 client / server ms | ratio |")
    print("|---|---|---:|---|---:|")
    for who, ct, ci, st, si in rows:
        print(f"| {who} | {ct:.1f} / {st:.1f} | {ct / st:.3f} | {ci:.2f} / {si:.2f} | {ci / si:.3f} |")


if __name__ == "__main__":
    main()
