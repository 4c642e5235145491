"""The hook's cost on a ``queue.Queue`` (issue 26): ``python benchmarks/queue_handoff_overhead.py``.

The batching-server attribution wraps ``queue.Queue.put``/``get`` in every recorded process (docs/serving.md,
"Batching servers"). This times ``N`` put + get pairs outside any request, unwrapped and wrapped, in
separate child processes interleaved over ``ROUNDS`` rounds, and prints the median µs per pair of each and
their ratio. Shared machines are noisy: read the load average it prints with the numbers.
"""
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HOOK = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"
N, ROUNDS = 200000, 5
CHILD = r"""
import os, queue, sys, time
if sys.argv[1] == "wrapped":
    sys.path.insert(0, sys.argv[2])
    import _gpusleuth_autohook as core
    core.activate()
    import _gpusleuth_serve as serve
    serve.patch("queue", queue)
q = queue.Queue()
n = int(sys.argv[3])
t = time.perf_counter()
for i in range(n):
    q.put(i)
    q.get()
print((time.perf_counter() - t) / n * 1e6)
"""


def main() -> None:
    run_dir = tempfile.mkdtemp(prefix="gpusleuth-bench-")
    env = {**os.environ, "GPUSLEUTH_RUN_DIR": run_dir}
    times: dict[str, list[float]] = {"plain": [], "wrapped": []}
    for _ in range(ROUNDS):
        for mode in times:
            out = subprocess.run([sys.executable, "-c", CHILD, mode, str(HOOK), str(N)], env=env,
                                 capture_output=True, text=True, check=True)
            times[mode].append(float(out.stdout.strip()))
    plain, wrapped = (statistics.median(times[m]) for m in ("plain", "wrapped"))
    print(f"queue.Queue put+get: {plain:.2f} µs plain, {wrapped:.2f} µs wrapped, ratio {wrapped / plain:.2f} "
          f"(median of {ROUNDS} interleaved rounds of {N:,}; load average {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
