"""The explicit API: a cheap no-op outside ``gpusleuth run``; the only step delimiter once used inside it."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

import gpusleuth
from test_hook import header, infos, main_events, records, run_script, steps


@pytest.mark.process
def test_api_is_a_no_op_when_not_recording():
    # not recording: no hook module, or one imported by another test's module (test_hook_cuda_device imports
    # the hook's torch patches to test them) that was never activated
    assert getattr(sys.modules.get("_gpusleuth_autohook"), "R", None) is None
    data = [1, 2, 3]
    assert gpusleuth.watch(data) is data
    assert gpusleuth.step() is None and gpusleuth.step(samples=4) is None
    assert gpusleuth.log(samples=3, tokens=9, loss=0.5) is None
    with gpusleuth.phase("eval") as ph:
        assert repr(ph) == "gpusleuth.phase('eval')"

    @gpusleuth.phase("eval")
    def double(x):
        """Doc."""
        return 2 * x

    @gpusleuth.phase("eval")
    async def triple(x):
        return 3 * x

    assert double(4) == 8 and double.__doc__ == "Doc." and double.__name__ == "double"
    assert asyncio.run(triple(2)) == 6
    try:
        with gpusleuth.phase("x"):
            raise KeyError("passes through")
    except KeyError as exc:
        assert exc.args == ("passes through",)


def test_api_not_recording_costs_well_under_a_microsecond():
    import time

    n = 100_000
    t0 = time.perf_counter()
    for _ in range(n):
        gpusleuth.step()
    per_call = (time.perf_counter() - t0) / n
    assert per_call < 2e-6, per_call


EXPLICIT = """
import time, torch, gpusleuth
model = torch.nn.Linear(8, 1); opt = torch.optim.SGD(model.parameters(), lr=0.01)

def batches():                      # a hand-rolled input pipeline, 20 ms per batch of 3
    for i in range(5):
        time.sleep(0.02)
        yield {"x": torch.randn(3, 8), "id": list(range(3))}

@gpusleuth.phase("eval")
def evaluate():
    time.sleep(0.01)
    return "evaluated"

for batch in gpusleuth.watch(batches()):
    loss = model(batch["x"]).sum(); opt.zero_grad(); loss.backward(); opt.step()
    gpusleuth.log(tokens=24, loss=loss.detach(), lr=0.01, note="tab\\there")
    gpusleuth.step()
print(evaluate())
with gpusleuth.phase("logging"):
    with gpusleuth.phase("nested"):
        pass
gpusleuth.log(samples=5)
gpusleuth.log(samples=2)
gpusleuth.step()                    # samples from log(): 5 + 2
gpusleuth.step(samples=11)
"""


@pytest.mark.slow
def test_explicit_api_delimits_steps_phases_and_logs(tmp_path):
    res, run_dir = run_script(tmp_path, EXPLICIT)
    assert res.returncode == 0, res.stderr.decode()
    assert res.stdout == b"evaluated\n" and res.stderr == b""
    lines = main_events(run_dir)
    assert header(lines)["role"] == "main"
    rows = steps(lines)
    assert [r["delimiter"] for r in rows] == ["explicit"] * 7, "optimizer.step() no longer delimits"
    assert [r["samples"] for r in rows] == [3] * 5 + [7, 11]
    assert [r["fetches"] for r in rows] == [1] * 5 + [0, 0]
    assert all(20e6 <= r["data_wait_ns"] <= 30e6 for r in rows[:5])
    assert all(r["optimizer_ns"] > 0 for r in rows[:5])
    phases = [(p[1], p[4]) for p in records(lines, "P") if not p[1].startswith("gpusleuth_")]  # ours apart
    assert phases == [("eval", "api"), ("nested", "api"), ("logging", "api")]
    logs = [json.loads(f[2]) for f in records(lines, "L")]
    assert len(logs) == 7
    assert logs[0]["tokens"] == 24 and logs[0]["lr"] == 0.01 and isinstance(logs[0]["loss"], float)
    assert logs[0]["note"] == "tab\there"
    assert logs[-2:] == [{"samples": 5}, {"samples": 2}]
    assert infos(lines, "hook_error") == []


def test_top_level_sweep_and_bench_are_the_experiment_apis():
    import time

    import gpusleuth

    res = gpusleuth.sweep(lambda batch_size: time.sleep(0.002 * int(batch_size)), {"batch_size": [1, 2]}, repeat=1)
    assert [c.config for c in res.configs] == [{"batch_size": "1"}, {"batch_size": "2"}]
    assert callable(gpusleuth.bench)
    # a type checker reads these as the experiments' own functions (tests/test_types.py): a call their signature
    # takes, such as repeat given by position, is one the forwarder takes too
    res = gpusleuth.sweep(lambda batch_size: None, {"batch_size": [1]}, 1)
    assert res.repeat == 1 and [len(c.attempts) for c in res.configs] == [1]
