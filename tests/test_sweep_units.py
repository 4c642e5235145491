"""Pure parts of the sweep: grid expansion and routing, noise bands and the winner rule, the knee, the knob
catalogue agreeing with the hook, and the in-process ``sweep(fn, grid)`` API."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from gpusleuth.experiments import grid as g
from gpusleuth.experiments import sweep
from gpusleuth.experiments.knobs import KNOBS
from gpusleuth.experiments.stats import band, knee, verdict

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "hook"))
import _gpusleuth_knobs  # noqa: E402


def test_grid_is_the_cartesian_product_and_routes_are_explicit():
    params = [g.parse_param("num_workers=0,2"), g.parse_param("lr=0.1,0.01"), g.parse_param("OMP_NUM_THREADS=1")]
    configs = g.expand(params)
    assert len(configs) == 4 and configs[1] == {"num_workers": "0", "lr": "0.01", "OMP_NUM_THREADS": "1"}
    spec = g.job_spec(configs[1], ["python", "train.py", "--lr={lr}"])
    assert spec.command == ["python", "train.py", "--lr=0.01"]
    assert spec.env == {"GPUSLEUTH_KNOB_NUM_WORKERS": "0", "OMP_NUM_THREADS": "1"}
    assert spec.routes == {"num_workers": "knob", "lr": "command", "OMP_NUM_THREADS": "env"}
    # a knob name used as {name} in the command is the user's own flag: substituted, not applied by the hook
    spec = g.job_spec({"batch_size": "64"}, ["python", "t.py", "--bs", "{batch_size}"])
    assert spec.command[-1] == "64" and spec.env == {}
    with pytest.raises(g.GridError):
        g.expand([("a", ["1"]), ("a", ["2"])])
    with pytest.raises(g.GridError):
        g.parse_param("x=1,1")


def test_knob_catalogue_matches_what_the_hook_parses():
    sample = {"int": lambda k: "2", "bool": lambda k: "true", "choice": lambda k: k.choices[-1]}
    env = {k.env: sample[k.kind](k) for k in KNOBS.values()}
    parsed = _gpusleuth_knobs.requested(env)
    assert set(parsed) == set(KNOBS)
    for name, knob in KNOBS.items():
        assert _gpusleuth_knobs.requested({knob.env: knob.normalize(env[knob.env])})[name] == parsed[name]


def test_bands_and_the_winner_rule():
    a = band([100.0, 104.0, 102.0])
    assert (a.median, a.lo, a.hi) == (102.0, pytest.approx(98.94), pytest.approx(105.06))  # widened to ±3 %
    a = band([90.0, 100.0, 120.0])
    assert (a.lo, a.hi, a.assumed) == (90.0, 120.0, False)  # real spread wider than the floor: kept
    one = band([50.0])  # one repeat measures no run-to-run spread: the run-to-run floor (analysis/noise.py)
    assert one.assumed and one.lo == pytest.approx(42.5) and one.hi == pytest.approx(57.5)
    v = verdict({"fast": band([150.0, 152.0]), "slow": band([100.0, 101.0])})
    assert v.winner == "fast" and v.significant and v.ratio == pytest.approx(151 / 100.5)
    v = verdict({"a": band([100.0, 110.0]), "b": band([104.0, 108.0])})
    assert v.winner is None and not v.significant and "no significant difference" in v.text
    v = verdict({"a": band([0.05, 0.05]), "b": band([0.06, 0.06])}, higher_is_better=False, what="step time")
    assert v.winner == "a"


def test_knee_is_the_smallest_setting_within_tolerance_of_the_best_admissible():
    pts = [(8, 100.0, True, ""), (16, 190.0, True, ""), (32, 300.0, True, ""), (64, 310.0, True, ""),
           (128, 400.0, False, "p95 over budget")]
    k = knee(pts)
    assert k.value == 32 and k.best_value == 64 and "128 (p95 over budget)" in k.text
    assert knee([(8, None, False, "crashed")]).value is None


def test_in_process_sweep_ranks_reports_noise_and_survives_a_failure():
    def fn(batch, mode):
        if mode == "broken":
            raise ValueError("planted")
        time.sleep(0.01)
        return batch  # samples processed: throughput = batch / call time

    res = sweep(fn, {"batch": [8, 32], "mode": ["fine", "broken"]}, repeat=3)
    labels = {c.label: c for c in res.configs}
    assert [c.label for c in res.configs] == ["batch=8 mode=fine", "batch=8 mode=broken", "batch=32 mode=fine",
                                              "batch=32 mode=broken"]
    broken = labels["batch=8 mode=broken"]
    assert broken.crashed and "ValueError: planted" in broken.attempts[0].error
    assert any("raise ValueError" in line for line in broken.attempts[0].stderr_tail)
    for a in labels["batch=32 mode=fine"].attempts:
        assert a.measurement.samples_per_s == pytest.approx(32 / a.wall_s)
    assert res.verdict.winner == "batch=32 mode=fine" and res.verdict.significant  # ×4 throughput
    res = sweep(lambda n: time.sleep(0.002 * n), {"n": [1, 3]}, repeat=2)
    assert res.configs[0].unit == "calls/s" and res.verdict.best == "n=1"


def _fake_sweep(throughputs: dict[str, float], findings: list[dict]):
    from gpusleuth.experiments.measure import Measurement
    from gpusleuth.experiments.sweep_result import Attempt, ConfigResult, SweepResult

    configs = []
    for i, (label, tp) in enumerate(throughputs.items()):
        name, value = label.split("=")
        m = Measurement(steps=10, samples_per_s=tp, findings=findings if i == 0 else [])
        c = ConfigResult(id=f"c{i}", label=label, config={name: value}, routes={name: "knob"},
                         attempts=[Attempt(1, "", 0, True, 1.0, measurement=m)])
        c.throughput = band([tp])
        configs.append(c)
    return SweepResult(command=["x"], params=[(name, [l.split("=")[1] for l in throughputs])], out_dir="",
                       repeat=1, steps=10, warmup=0, duration_s=None, configs=configs)


@pytest.mark.parametrize("measured, word", [(1.9, "prediction held"), (1.2, "over-predicted"), (3.0, "under-predicted")])
def test_prediction_check_sets_predicted_against_measured(measured, word):
    from gpusleuth.experiments.predict import check_predictions

    finding = {"cause": "input.preprocessing", "speedup": 2.0,
               "fix": "DataLoader(..., num_workers=3, pin_memory=True, persistent_workers=True)"}
    sweep_ = _fake_sweep({"num_workers=0": 100.0, "num_workers=3": 100.0 * measured, "num_workers=6": 50.0}, [finding])
    (pc,) = check_predictions(sweep_, None, 0)
    assert pc.exact and pc.measured_config == "num_workers=3" and pc.predicted_setting == {"num_workers": "3"}
    assert pc.measured_speedup == pytest.approx(measured) and pc.verdict.startswith(word)
    # a finding about something the sweep did not vary is not "checked"
    other = {"cause": "precision", "speedup": 1.5, "fix": "autocast(bf16)"}
    assert check_predictions(_fake_sweep({"num_workers=0": 1.0, "num_workers=1": 2.0}, [other]), None, 0) == []


def test_prediction_against_a_baseline_under_other_host_load_is_not_judged_a_miss():
    """Issue 27: `sweep --baseline RUN` against a run recorded under other load printed "under-predicted:
    measured ×1.57" beside "no significant difference (±20 %)". A baseline whose host load differs is named
    as such, a miss is not called one, and a predicted gain inside the noise is not checked."""
    from gpusleuth.experiments.predict import check_predictions

    finding = {"cause": "input.preprocessing", "speedup": 1.3,
               "fix": "DataLoader(..., num_workers=1, pin_memory=True, persistent_workers=True)"}
    sweep_ = _fake_sweep({"num_workers=0": 100.0, "num_workers=1": 157.0}, [finding])
    base, pick = (c.attempts[0].measurement for c in sweep_.configs)
    base.cpu_attained, pick.cpu_attained = 0.4, 0.95  # the baseline's loop got a CPU 40 % of its ready time
    (pc,) = check_predictions(sweep_, None, 0)
    assert pc.load_note and "different host load" in pc.load_note and "40%" in pc.load_note
    assert pc.verdict.startswith("not checkable here") and "under-predicted" not in pc.verdict
    # the same load: a real miss is still called one
    from gpusleuth.experiments.stats import band

    base.cpu_attained = 0.9
    sweep_.configs[1].throughput = band([180.0])
    (pc,) = check_predictions(sweep_, None, 0)
    assert pc.load_note is None and pc.verdict.startswith("under-predicted")
    # a predicted gain smaller than the noise one run per side resolves (±21 %) is not checked
    finding["speedup"] = 1.1
    (pc,) = check_predictions(sweep_, None, 0)
    assert pc.verdict.startswith("not checkable here: the predicted ×1.10 is inside the noise")
