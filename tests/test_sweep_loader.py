"""A loader sweep on a real PyTorch job with a planted preprocessing stall.

The job's collate function burns ``STALL`` seconds of CPU per batch and each training step waits
``COMPUTE`` seconds (standing in for device time) around a real forward/backward. With ``num_workers=0``
a step costs STALL + COMPUTE; with one worker the loading overlaps the step, which then costs
max(STALL, COMPUTE). The sweep must find that the worker helps, by about that planted ratio, declare it
beyond the noise, prove the knob reached the unmodified script, and set the first configuration's
input-bound prediction next to the measured gain.
"""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import gpusleuth

STALL, COMPUTE = 0.030, 0.020
PLANTED = (STALL + COMPUTE) / max(STALL, COMPUTE)  # ×1.67

JOB = textwrap.dedent(f"""
    import time
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)

    class Items(Dataset):
        def __len__(self):
            return 100000
        def __getitem__(self, i):
            return torch.full((32,), float(i % 7)), i % 2

    def collate(items):  # the planted stall: CPU work per batch
        end = time.perf_counter() + {STALL}
        while time.perf_counter() < end:
            pass
        xs, ys = zip(*items)
        return torch.stack(xs), torch.tensor(ys)

    loader = DataLoader(Items(), batch_size=16, collate_fn=collate)   # the user's setting: no workers
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        time.sleep({COMPUTE})  # device time
        opt.step()
""")


@pytest.mark.slow
def test_loader_sweep_finds_the_planted_worker_gain(tmp_path, host_load):
    """The knob reached the unmodified script in every attempt and the prediction sits beside the measured
    gain, always. The gain itself needs a free core for the worker: where other processes took the cores
    the worker has none to run on, the sweep rightly finds no winner, and the test skips saying the load it
    measured; on a quiet host a missing or wrong gain fails. The first run's prediction is the product's
    answer to the load it saw: a worker count where a core was free, none (said so, beside the contention
    finding) where none was; and a prediction is judged only where both runs saw the same load."""
    job = tmp_path / "train.py"
    job.write_text(JOB)
    out = tmp_path / "sweep"
    res = gpusleuth("sweep", "--param", "num_workers=0,1", "--repeat", "2", "--steps", "20", "--warmup", "3",
                    "--out", out, "--json", "--", "python", job, cwd=tmp_path, timeout=170)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    c0, c1 = doc["configs"]
    assert [c0["label"], c1["label"]] == ["num_workers=0", "num_workers=1"]
    for c in (c0, c1):
        assert not c["crashed"] and len(c["attempts"]) == 2
        for a in c["attempts"]:
            m = a["measurement"]
            assert a["ok"] and m["steps"] == 20 and m["samples_per_step"] == 16
            assert m["knobs_applied"]["num_workers"] == int(c["config"]["num_workers"])  # reached the job
            assert m["dataloaders"][0]["num_workers"] == int(c["config"]["num_workers"])
    measured = c1["throughput"]["median"] / c0["throughput"]["median"]
    v = doc["verdict"]
    with host_load.quiet_or_skip("the planted worker gain"):
        assert measured == pytest.approx(PLANTED, rel=0.15), (measured, PLANTED)
        assert v["winner"] == "num_workers=1" and v["significant"], v
    # the first configuration's report predicted this gain; the sweep puts both side by side
    (pc,) = [p for p in doc["predictions"] if p["cause"].startswith("input.")]
    assert pc["measured_config"] == "num_workers=1"
    assert pc["measured_speedup"] == pytest.approx(measured)
    first_findings = c0["attempts"][0]["measurement"]["findings"]
    first = next(f for f in first_findings if f["cause"] == pc["cause"])
    assert pc["predicted_speedup"] == first["speedup"]
    assert "first configuration" in pc["baseline"]
    if "No core was free" in first["fix"]:
        # the product's honest answer where other processes held the cores: no worker count to try, said so
        # beside its contention finding — and the other load was there, measured by this test too. Where the
        # contention rule stayed quiet (its bar is the job slowed, not cores used: the full suite on 2 cores
        # read "1.0 used by others" and no contention once), this test's measure of the others decides:
        # crowded, skip saying so; quiet, the two rules disagree
        if not any(f["cause"] == "contention" for f in first_findings):
            host_load.skip_if_crowded("no core free for workers without a contention finding")
            pytest.fail(f"no core free for workers on a host this test measured quiet: {first_findings}")
        assert host_load.foreign_cores() > 0.1, host_load.foreign_cores()
        assert pc["predicted_setting"] == {} and not pc["exact"], pc
    else:
        assert pc["predicted_setting"] == {"num_workers": "1"} and pc["exact"], pc
    word = "prediction held" if abs(measured / pc["predicted_speedup"] - 1) <= 0.2 else "predicted"
    if word == "predicted" and pc.get("load_note"):  # the runs saw different host load: a miss is not judged
        word = "not checkable"
    assert word in pc["verdict"], pc["verdict"]
    # every run directory is a normal recorded run, and the job's output went to files beside it
    assert (out / "c1-r1" / "meta.json").exists() and (out / "c1-r1.stderr").exists()
    assert (out / "sweep.json").exists()
