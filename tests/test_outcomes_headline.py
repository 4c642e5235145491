"""Issue 5: goodput and badput, MFU, energy, cost, time to target, compare gates."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from conftest import gpusleuth, report_json
from gpusleuth.analysis.cost import DEFAULT_PRICES, Price, compute_cost, find_price, price_table
from gpusleuth.sources.prices import read_price_table
from gpusleuth.analysis.peaks import lookup_peak
from gpusleuth.analysis.quality import Target, TargetError, compute_time_to_target
from gpusleuth.errors import InputError
from gpusleuth.pipeline.build import build_report
from gpusleuth.analysis.options import AnalysisOptions
from gpusleuth.sources.mllog import parse_mllog_lines

PHASED = textwrap.dedent(
    """
    import sys, time
    import torch
    from torch import nn
    import gpusleuth

    torch.set_num_threads(1)
    model = nn.Linear(128, 10)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    data = [(torch.randn(32, 128), torch.randint(0, 10, (32,))) for _ in range(4)]
    acc = 0.5
    for step in range(30):
        x, y = data[step % 4]
        time.sleep(0.01)
        loss = nn.functional.cross_entropy(model(x), y)
        gpusleuth.log(samples=32)  # no DataLoader here: the job says how many samples a step has
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 10 == 9:
            with gpusleuth.phase("eval"):
                time.sleep(0.4)
                acc += 0.15
            gpusleuth.log(accuracy=acc)
            with gpusleuth.phase("checkpoint"):
                time.sleep(0.2)
    """
)


@pytest.mark.process
def test_goodput_categories_sum_to_wall_and_planted_phases_land_in_theirs(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(PHASED)
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--target", "accuracy>=0.9", "--price-per-gpu-hour", "3.6", "--",
                    sys.executable, script)
    assert res.returncode == 0, res.stderr
    rep = report_json(out)
    o = rep["outcomes"]
    g = o["goodput"]
    total = g["productive_s"] + sum(g["badput_s"].values())
    assert total == pytest.approx(g["wall_s"], rel=0.01)
    assert g["badput_s"]["eval"] == pytest.approx(3 * 0.4, rel=0.15)
    assert g["badput_s"]["checkpoint"] == pytest.approx(3 * 0.2, rel=0.2)
    assert 0 < g["goodput"] < 1
    # the evals are not slow steps: steady step time stays near the 10 ms sleep + compute
    assert o["throughput"]["step_time_p50_s"] < 0.05
    # headline keys lead the outcomes object
    assert list(o)[:4] == ["throughput", "goodput", "mfu", "energy"]
    assert o["mfu"]["mfu"] is None and "CPU" in o["mfu"]["why_not"] or o["mfu"]["flops_per_step"] is None
    # cost: $3.6 per hour = $0.001 per second of wall time
    assert o["cost"]["per_run"] == pytest.approx(o["wall_s"] * 0.001, rel=1e-6)
    assert o["cost"]["per_1k_samples"] == pytest.approx(o["cost"]["per_run"] / (30 * 32) * 1000, rel=1e-6)
    # time to accuracy>=0.9: the third evaluation (0.5 + 3·0.15 = 0.95), evaluation time on the clock
    t = o["time_to_target"]
    assert t["reached"] and t["stop_event"] == "accuracy=0.95" and t["evaluations"] == 3
    assert t["time_to_target_s"] > 3 * 0.4 + 2 * 0.2
    assert t["time_to_target_s"] < o["wall_s"]


def test_mllog_lines_in_their_real_format():
    lines = [
        ':::MLLOG {"namespace": "", "time_ms": 1700000000000, "event_type": "INTERVAL_START", "key": "init_start", '
        '"value": null, "metadata": {"file": "train.py", "lineno": 10}}',
        'INFO:root::::MLLOG {"namespace": "", "time_ms": 1700000060000, "event_type": "INTERVAL_START", '
        '"key": "run_start", "value": null, "metadata": {"file": "train.py", "lineno": 20}}',
        ':::MLLOG {"namespace": "", "time_ms": 1700000600000, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", '
        '"value": 0.70, "metadata": {"epoch_num": 1}}',
        "unrelated output line",
        ':::MLLOG {"time_ms": broken',
        ':::MLLOG {"namespace": "", "time_ms": 1700001200000, "event_type": "POINT_IN_TIME", "key": "eval_accuracy", '
        '"value": 0.76, "metadata": {"epoch_num": 2}}',
    ]
    log = parse_mllog_lines(lines)
    assert [e["key"] for e in log.events] == ["init_start", "run_start", "eval_accuracy", "eval_accuracy"]
    assert log.bad_lines == 1
    t = compute_time_to_target(Target.parse("eval_accuracy>=0.759"), [], log, first_data_touch_ns=None)
    assert t.reached and t.time_to_target_s == pytest.approx(1140.0)  # run_start → second eval
    assert t.init_s == pytest.approx(60.0) and t.clock_start == "MLLOG run_start" and t.source == "MLLOG"
    miss = compute_time_to_target(Target.parse("eval_accuracy>=0.8"), [], log, None)
    assert not miss.reached and miss.best == pytest.approx(0.76)
    with pytest.raises(TargetError):
        Target.parse("accuracy is high")


def test_cost_arithmetic_and_price_table(tmp_path):
    price = find_price("H100 SXM", None, DEFAULT_PRICES)
    assert price.per_gpu_hour == 4.00 and "2026" in price.source
    c = compute_cost(price, gpus=8, wall_s=1800, samples=1_000_000, samples_per_s_wall=1_000_000 / 1800,
                     samples_per_epoch=1_281_167)
    assert c.per_run == pytest.approx(4.00 * 8 * 0.5)
    assert c.per_1k_samples == pytest.approx(16.0 / 1000)
    assert c.per_epoch == pytest.approx(16.0 * 1_281_167 / 1_000_000)
    assert c.per_recoverable_second == pytest.approx(32.0 / 3600)
    assert find_price("H100 SXM", 2.5, DEFAULT_PRICES) == Price(2.5, "H100 SXM", "--price-per-gpu-hour")
    assert find_price("Mystery GPU", None, DEFAULT_PRICES) is None
    custom = tmp_path / "prices.json"
    custom.write_text('{"H100 SXM": 2.0}')
    assert price_table(read_price_table(custom))["H100 SXM"] == 2.0
    assert price_table(read_price_table(custom))["A100"] == DEFAULT_PRICES["A100"]
    custom.write_text("[1, 2]")
    with pytest.raises(InputError, match="JSON object"):
        read_price_table(custom)


def test_peaks_are_dense_and_variant_specific():
    assert lookup_peak("NVIDIA H100 80GB HBM3", "bf16").tflops == 989  # SXM, dense (1979 is sparse)
    assert lookup_peak("NVIDIA H100 PCIe", "bf16").tflops == 756
    assert lookup_peak("NVIDIA H100 NVL", "bf16").model == "H100 NVL"
    assert lookup_peak("NVIDIA A10G", "bf16").tflops == 70  # not the A10's 125
    assert lookup_peak("NVIDIA A10", "bf16").tflops == 125
    assert lookup_peak("NVIDIA GeForce RTX 4090", "bf16").tflops == 165.2  # fp32-accumulate rate
    assert lookup_peak("Tesla T4", "bf16") is None  # no bf16 hardware
    assert lookup_peak(None) is None


def test_energy_mfu_and_dollars_from_nvml_readings(tmp_path):
    from test_report_gpu import MAIN_PID, make_run

    run = make_run(tmp_path)
    run.infos.append({"kind": "flops", "flops": 2.0e13, "step": 3, "pid": MAIN_PID, "t_ns": 0})
    report = build_report(run, AnalysisOptions())
    h = report.headline
    # five 100 ms steps at a steady 512 W: 51.2 J per step, 0.8 J per sample (64 samples/step)
    assert h.energy.per_step_j == pytest.approx(51.2, rel=1e-6)
    assert h.energy.per_sample_j == pytest.approx(0.8, rel=1e-6)
    # 2e13 FLOPs in 100 ms = 200 TFLOP/s on an H100 SXM (989 dense bf16) = 20.2 % MFU
    assert h.mfu.achieved_tflops == pytest.approx(200.0, rel=1e-6)
    assert h.mfu.mfu == pytest.approx(200 / 989, rel=1e-6)
    assert "dense bf16" in h.mfu.convention and "989" in h.mfu.convention
    # cost from the dated table ($4/h for H100 SXM), and each finding's gain in dollars
    assert h.cost.price.per_gpu_hour == 4.0 and h.gpu_model == "H100 SXM"
    fp32 = build_report(run, AnalysisOptions(peak_dtype="fp32")).headline.mfu
    assert fp32.mfu == pytest.approx(200 / 67, rel=1e-6)


FAST_SLOW = textwrap.dedent(
    """
    import sys, time
    import torch
    from torch import nn
    torch.set_num_threads(1)
    delay = float(sys.argv[1])
    model = nn.Linear(64, 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    from torch.utils.data import DataLoader, TensorDataset
    data = TensorDataset(torch.randn(40 * 16, 64), torch.randint(0, 4, (40 * 16,)))
    for x, y in DataLoader(data, batch_size=16):
        time.sleep(delay)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    """
)


@pytest.mark.process
def test_compare_gates_pass_and_fail(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(FAST_SLOW)
    for name, delay in (("fast", "0.01"), ("slow", "0.03")):
        res = gpusleuth("run", "--no-report", "--out", tmp_path / name, "--", sys.executable, script, delay)
        assert res.returncode == 0, res.stderr
    # slow vs fast baseline: throughput dropped by about two thirds → the gate fails, exit 1
    res = gpusleuth("compare", tmp_path / "fast", tmp_path / "slow", "--fail-if", "throughput<-5%", "--json")
    assert res.returncode == 1, res.stderr
    out = json.loads(res.stdout)
    assert out["failed"] is True
    (gate,) = out["gates"]
    assert gate["failed"] and gate["value"] < -40 and gate["beyond_noise"] is True
    # fast vs slow baseline: throughput rose → passes; an absolute gate on goodput passes too
    res = gpusleuth("compare", tmp_path / "slow", tmp_path / "fast", "--fail-if", "throughput<-5%",
                    "--fail-if", "goodput<0.01")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "pass" in res.stdout and "samples/s" in res.stdout
    bad = gpusleuth("compare", tmp_path / "slow", tmp_path / "fast", "--fail-if", "speed<-5%")
    assert bad.returncode == 2 and "want METRIC OP VALUE" in bad.stderr and "Traceback" not in bad.stderr


LINEAR_STACK = textwrap.dedent(
    """
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset
    torch.set_num_threads(1)
    B, D, H, O = 32, 256, 512, 10
    model = nn.Sequential(nn.Linear(D, H), nn.ReLU(), nn.Linear(H, H), nn.ReLU(), nn.Linear(H, O))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = TensorDataset(torch.randn(B * 12, D), torch.randint(0, O, (B * 12,)))
    for x, y in DataLoader(data, batch_size=B):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
    """
)


@pytest.mark.process
def test_flops_of_a_real_step_match_the_hand_count(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(LINEAR_STACK)
    out = tmp_path / "run"
    res = gpusleuth("run", "--out", out, "--peak-tflops", "0.1", "--price-per-gpu-hour", "1", "--",
                    sys.executable, script)
    assert res.returncode == 0, res.stderr
    B, D, H, O = 32, 256, 512, 10
    forward = 2 * B * (D * H + H * H + H * O)  # 2 FLOPs per multiply-add
    weight_grads = forward
    input_grads = 2 * B * (H * H + H * O)  # the first layer's input needs no gradient
    rep = report_json(out)
    m = rep["outcomes"]["mfu"]
    assert m["flops_per_step"] == forward + weight_grads + input_grads == 68_091_904
    assert "FlopCounterMode" in m["flops_source"]
    assert m["peak"]["source"] == "given by the user (--peak-tflops)"  # remembered from `run`
    assert 0 < m["mfu"] < 1
    w = rep["outcomes"]["throughput"]["warmup_steps"]
    # the counted step (index 3) is left out of the steady steps, unless warm-up already dropped it
    assert rep["outcomes"]["throughput"]["steady_steps"] == 12 - w - (1 if w <= 3 else 0)
    assert rep["outcomes"]["cost"]["per_epoch"] is not None  # dataset length 384 → cost per epoch
    res = gpusleuth("run", "--no-report", "--no-flops", "--out", tmp_path / "off", "--", sys.executable, script)
    assert res.returncode == 0
    assert report_json(tmp_path / "off")["outcomes"]["mfu"]["flops_per_step"] is None
