"""Unmodified PyTorch training scripts under ``gpusleuth run``: the report names the data wait right."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from conftest import gpusleuth, report_json

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

pytest.importorskip("torch")

PLANTED = textwrap.dedent(
    """
    import json, sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    SLEEP = float(sys.argv[1])
    STEPS = 40
    torch.set_num_threads(1)

    class SlowStorage(Dataset):
        # One item per batch (batch_size=None): each fetch sleeps a known time, like slow storage.
        def __len__(self):
            return STEPS
        def __getitem__(self, i):
            time.sleep(SLEEP)
            return torch.randn(64, 256), torch.randint(0, 10, (64,))

    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(SlowStorage(), batch_size=None, num_workers=0)
    t0 = time.perf_counter()
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    loop = time.perf_counter() - t0
    json.dump({"loop_s": loop, "planted_wait_s": SLEEP * STEPS, "steps": STEPS}, open(sys.argv[2], "w"))
    print("trained", STEPS)
    """
)

HEALTHY = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(64 * 30, 512), torch.randint(0, 10, (64 * 30,)))
    model = nn.Sequential(nn.Linear(512, 2048), nn.ReLU(), nn.Linear(2048, 2048), nn.ReLU(), nn.Linear(2048, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)  # a cheap update: compute dominates each step
    for x, y in DataLoader(data, batch_size=64):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    """
)


def test_planted_data_wait_is_measured_within_ten_percent(tmp_path, host_load):
    """The measured data wait against the job's own clock (its loop time and its planted sleeps), within 10 %
    on any host. The verdict is HIGH where the job had the host to itself; where the report finds other
    processes took cores (measured here too) it is held at moderate, beside that contention finding."""
    script = tmp_path / "train.py"
    script.write_text(PLANTED)
    truth = tmp_path / "truth.json"
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", sys.executable, script, "0.03", truth)
    assert res.returncode == 0, res.stderr
    assert res.stdout == "trained 40\n"  # the job's output is unchanged
    t = json.loads(truth.read_text())
    rep = report_json(out)
    o = rep["outcomes"]
    assert o["steps"] == t["steps"]
    planted_share = t["planted_wait_s"] / t["loop_s"]
    measured_share = o["data_wait_share_of_steps"]
    assert abs(measured_share - planted_share) / planted_share < 0.10, (measured_share, planted_share)
    assert abs(o["data_wait_s"] - t["planted_wait_s"]) / t["planted_wait_s"] < 0.10
    assert o["samples"] == 64 * 40
    assert abs(sum(o["time_share"].values()) - 1.0) < 1e-9
    top = next(f for f in rep["findings"] if f["cause"] != "contention")
    assert top["cause"] == "input.io"  # sleeping is latency, not CPU work
    if any(f["cause"] == "contention" for f in rep["findings"]):  # the product's answer to a crowded host
        assert host_load.foreign_cores() > 0.1, host_load.foreign_cores()
        assert top["severity"] == "moderate", top
    else:
        assert top["severity"] == "high" and rep["findings"][0] is top, rep["findings"][:2]
    assert "num_workers" in top["fix"]
    # ... and the terminal report says so too
    assert "exposed data wait" in res.stderr and "input.io" in res.stderr


def test_healthy_job_has_no_input_finding(tmp_path, host_load):
    """A compute-bound job: no input finding on any host, and 'healthy' where it had the host to itself; where
    the report finds other processes took cores (measured here too) that is its one finding instead."""
    script = tmp_path / "train.py"
    script.write_text(HEALTHY)
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", sys.executable, script)
    assert res.returncode == 0, res.stderr
    rep = report_json(out)
    assert rep["outcomes"]["steps"] == 30
    causes = [f["cause"] for f in rep["findings"]]
    assert not any(c.startswith("input.") for c in causes), rep["findings"]
    if "contention" in causes:  # not 'healthy' on a crowded host: the other load is the finding
        assert host_load.foreign_cores() > 0.1, host_load.foreign_cores()
        assert causes == ["contention"], rep["findings"]
    else:
        assert causes == ["healthy"], rep["findings"]
    assert rep["outcomes"]["data_wait_share_of_steps"] < 0.05


def test_demo_finds_and_fixes_the_planted_stall(tmp_path, host_load):
    """The demo records both runs and names an input cause first in the planted one (after the other load,
    when the host had any), always. That the cause is preprocessing (CPU work) and that the fix pays need
    the cores the demo assumes: a loader starved by other processes uses little CPU and reads as input.io,
    and the fixed run's worker has no core to run on. Where other processes took the cores and those miss,
    the test skips saying the load it measured (the busy-host demo is test_demo_verdict's, with real
    burners); on a quiet host a miss fails."""
    res = gpusleuth("demo", "--steps", "60", "--out", tmp_path, timeout=300)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "measured speedup" in out and "planted transform sized to this machine" in out
    planted = report_json(tmp_path / "planted")
    fixed = report_json(tmp_path / "fixed")
    own = [f for f in planted["findings"] if f["cause"] != "contention"]  # what the job itself waits on
    assert own[0]["cause"].startswith("input."), planted["findings"][:2]
    with host_load.quiet_or_skip("the planted preprocessing stall and its fix"):
        assert planted["findings"][0]["cause"] == "input.preprocessing", planted["findings"][0]["cause"]
        assert "input.preprocessing" in out
        assert not any(f["severity"] == "high" for f in fixed["findings"]), fixed["findings"][:2]
        # 1.6× on an idle 2-core machine; the fixed run's worker needs the second core, so keep a margin
        speedup = fixed["outcomes"]["samples_per_s"] / planted["outcomes"]["samples_per_s"]
        assert speedup > 1.05, f"speedup {speedup:.2f}"


WORKERS = textwrap.dedent(
    """
    import sys, time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    MODE = sys.argv[1]
    torch.set_num_threads(1)

    class Items(Dataset):
        def __len__(self):
            return 30
        def __getitem__(self, i):
            t = time.perf_counter()
            if MODE == "cpu":       # a CPU-heavy transform: the worker is saturated
                while time.perf_counter() - t < 0.08:
                    sum(range(2000))
            else:                   # remote storage: the worker mostly waits
                time.sleep(0.08)
            return torch.randn(32, 64), torch.randint(0, 4, (32,))

    model = nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(Items(), batch_size=None, num_workers=1):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    """
)


@pytest.mark.parametrize("mode, cause", [("cpu", "input.preprocessing"), ("sleep", "input.io")])
def test_loader_workers_busy_or_waiting_decide_the_cause(tmp_path, mode, cause):
    script = tmp_path / "train.py"
    script.write_text(WORKERS)
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--", sys.executable, script, mode)
    assert res.returncode == 0, res.stderr
    rep = report_json(out)
    assert rep["host"]["workers"] == 1
    top = rep["findings"][0]
    assert top["cause"] == cause, (top, rep["host"]["worker_cpu_pct_mean"])
    evidence = {e["name"]: e["value"] for e in top["evidence"]}
    assert evidence["DataLoader num_workers"] == 1
    assert "loader worker CPU (mean)" in evidence


@pytest.mark.parametrize("value", ["abc", "0", "-3"])
def test_demo_rounds_that_are_not_a_count_get_a_sentence(tmp_path, value):
    """``GPUSLEUTH_DEMO_ROUNDS`` replaces the demo's calibration: a value that is not a count of rounds stops the
    demo with a sentence naming it, before anything is recorded, never a traceback."""
    res = gpusleuth("demo", "--steps", "2", "--out", tmp_path, env={"GPUSLEUTH_DEMO_ROUNDS": value}, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "GPUSLEUTH_DEMO_ROUNDS must be a whole number" in res.stderr and repr(value) in res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "planted").exists()


def test_demo_steps_that_are_not_a_count_get_a_sentence(tmp_path):
    """``demo --steps 0`` recorded a planted job that trained nothing and died on its last line (no loss to
    print), then said "the demo job (planted) failed". The count is refused before anything is recorded."""
    res = gpusleuth("demo", "--steps", "0", "--out", tmp_path, env={"GPUSLEUTH_DEMO_ROUNDS": "1"}, timeout=120)
    assert res.returncode == 2, res.stderr
    assert "--steps: must be 1 or more" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "planted").exists()
