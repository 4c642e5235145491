"""`gpusleuth demo` — the first thing a user runs — on a busy host and on a quiet one (issue 27, defect 5).

On a host where other processes used 1.0–1.6 of 2 cores the demo printed "measured speedup 1.03× /
predicted 1.64×" with no word on why: the input finding assumed a free core for its loader worker. Now the
prediction is bounded by the cores that were free while the planted run ran, and the demo judges it only
where the two runs can: with real CPU burners on 1.5 of 2 cores, no core is free, the planted run's finding
predicts no gain from more workers, and the demo says so and why. On a quiet host the prediction must hold
within 25 % — that test skips, saying the load it saw, when the host is not quiet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import gpusleuth, host_busy_now

pytest.importorskip("torch")

BURN = "import time\nwhile True:\n    t = time.perf_counter()\n    while time.perf_counter() - t < {on}: pass\n    time.sleep({off})\n"


def _burners(cores: float) -> list[subprocess.Popen]:
    """Real CPU-burning processes using ``cores`` cores in all: whole burners, then one on a duty cycle."""
    procs, left = [], cores
    while left > 1e-9:
        share = min(left, 1.0)
        on, off = 0.05 * share, 0.05 * (1 - share)
        code = BURN.format(on=on, off=off) if share < 1 else "while True: pass\n"
        procs.append(subprocess.Popen([sys.executable, "-c", code]))
        left -= share
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.kill()
    for p in procs:
        p.wait(timeout=10)


def _demo(tmp_path, steps: int = 24) -> tuple[str, dict, dict]:
    res = gpusleuth("demo", "--steps", str(steps), "--out", str(tmp_path / "demo"), timeout=400)
    assert res.returncode == 0, res.stderr[-2000:]
    reports = {}
    for mode in ("planted", "fixed"):
        r = gpusleuth("report", str(tmp_path / "demo" / mode), "--json")
        assert r.returncode == 0, r.stderr
        reports[mode] = json.loads(r.stdout)
    return res.stdout, reports["planted"], reports["fixed"]


@pytest.mark.slow
def test_busy_host_demo_says_why_instead_of_a_failed_prediction(tmp_path):
    cores = os.cpu_count() or 2
    burners = _burners(0.75 * cores)  # 1.5 of 2 cores
    try:
        time.sleep(0.5)
        out, planted, _ = _demo(tmp_path)
    finally:
        _stop(burners)
    (inp,) = [f for f in planted["findings"] if f["cause"].startswith("input.")][:1]
    free = [e["value"] for e in inp["evidence"] if e["name"] == "cores free for loader workers"]
    if planted["host"] and planted["host"].get("main_cpu_demand") is not None:
        # the loader is a CPU transform: starved by the burners it still wants a CPU, never reads as storage
        assert inp["cause"] == "input.preprocessing", inp
    if inp["cause"] == "input.preprocessing":
        assert free and free[0] < 0.25, inp["evidence"]  # the burners' cores are not free
        assert "num_workers=" not in inp["fix"]  # no worker count that no core can run
        assert "No core was free" in inp["fix"]
    result = " ".join(out[out.index("demo: result"):].split())  # the console wraps long lines at its width
    assert "prediction missed" not in result
    assert "processes outside the demo used" in result, result  # says what it saw
    # no core free: no gain predicted from workers; else a miss is not judged, or a match held — each says so
    assert any(s in result for s in ("predicted: no gain from more loader workers", "not a test of the prediction",
                                     "prediction held")), result


@pytest.mark.slow
def test_quiet_host_demo_prediction_holds_within_25_percent(tmp_path):
    why = host_busy_now()
    if why:
        pytest.skip(why + " (the prediction can only be checked where the cores it assumes are free)")
    out, _, _ = _demo(tmp_path, steps=80)
    assert "prediction held" in " ".join(out[out.index("demo: result"):].split()), out[-3000:]
