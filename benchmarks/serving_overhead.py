"""The hook's cost per served request (issue 16): ``python benchmarks/serving_overhead.py``.

In one process with the hook active (a throw-away run directory), time ``N`` calls of a small model's
forward wrapped in what the hook does per request — open the request (arms the two global module hooks),
time the forward's modules, close it and format its ``R`` line — against the same forwards with no request
open (the hooks are not armed then: a training job's modules keep torch's fast path). Prints µs/request
for the bookkeeping alone and for a 3-module and a 13-module model (minimum of 5 rounds each: shared
machines are noisy). Inner modules pay one context-variable look-up in the wrapped ``Module.__call__``.
"""
import os
import sys
import tempfile
import time
from pathlib import Path

HOOK = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"


def main(n: int = 20000) -> None:
    os.environ["GPUSLEUTH_RUN_DIR"] = tempfile.mkdtemp(prefix="gpusleuth-bench-")
    sys.path.insert(0, str(HOOK))
    import _gpusleuth_autohook

    _gpusleuth_autohook.activate()
    import torch  # noqa: E402 - after activation, so the hook patches it

    import _gpusleuth_request as serve

    torch.set_num_threads(1)
    book = 1e9
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(n):
            serve.end(serve.begin("http.server"))
        book = min(book, (time.perf_counter() - t) / n * 1e6)
    print(f"open + close a request (no forward): {book:.1f} µs/request")
    x = torch.randn(1, 16)
    for depth in (1, 6):
        model = torch.nn.Sequential(*[m for _ in range(depth) for m in (torch.nn.Linear(16, 16), torch.nn.ReLU())])
        modules = sum(1 for _ in model.modules())
        with torch.no_grad():
            for _ in range(200):
                model(x)
            best = {}
            for label in ("bare", "request") * 5:
                t = time.perf_counter()
                for _ in range(n):
                    if label == "request":
                        req = serve.begin("http.server")
                        model(x)
                        serve.end(req)
                    else:
                        model(x)
                best[label] = min(best.get(label, 1e9), (time.perf_counter() - t) / n * 1e6)
        print(f"{modules:2d} modules: forward {best['bare']:.1f} µs, with a request open "
              f"{best['request']:.1f} µs → hook {best['request'] - best['bare']:.1f} µs/request")


if __name__ == "__main__":
    main()
