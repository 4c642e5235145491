"""llama.cpp's own HTTP server on CPU, from a pip wheel: ``python llama_server.py MODEL.gguf --port P
[--parallel N] [--ctx N] [--threads N] [--metrics] [--slots]`` (the flags are llama-server's).

``xllamacpp`` (PyPI, a prebuilt CPU wheel) embeds llama.cpp's C++ server — the same ``server_context``,
HTTP routes, continuous batching over ``--parallel`` slots, and ``/metrics`` (``llamacpp:*``) as the
``llama-server`` binary — in a Python extension, so no compiler and no binary download are needed. This
starts it on 127.0.0.1, prints ``listening http://…`` once it answers, and serves until SIGTERM or SIGINT
(then stops it cleanly, as ``llama-server`` does).
"""
from __future__ import annotations

import argparse
import signal
import sys


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("model")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--parallel", "-np", type=int, default=4)
    ap.add_argument("--ctx", "-c", type=int, default=2048)
    ap.add_argument("--threads", "-t", type=int, default=1)
    ap.add_argument("--metrics", action="store_true")
    ap.add_argument("--slots", action="store_true")
    a = ap.parse_args()

    # the server's own threads must not take the stop signals: this thread waits for them
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    import xllamacpp

    p = xllamacpp.CommonParams()
    p.model.path = a.model
    p.hostnames = [a.host]
    p.port = a.port
    p.n_parallel = a.parallel
    p.n_ctx = a.ctx
    p.cpuparams.n_threads = a.threads
    p.cpuparams_batch.n_threads = a.threads
    p.endpoint_metrics = a.metrics
    p.endpoint_slots = a.slots
    server = xllamacpp.Server(p)
    print("listening", server.listening_address, flush=True)
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    del server  # joins the server's loop and its HTTP threads
    sys.exit(0)


if __name__ == "__main__":
    main()
