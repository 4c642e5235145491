"""Joules and dollars per output token from a ``gpusleuth load`` recording (issue 34, item 5).

One real CPU run: ``gpusleuth load …/v1/completions -- python openai_engine.py`` (the continuous-batching test
engine, tokens counted from the server's usage). On this CPU-only run the report says, in one sentence, that it
cannot give joules per token, and gives dollars per million output tokens from the price.

Then the GPU side of the same recording: two H100s sampled by the recorder's real ``NvmlSampler`` through the
``pynvml`` stand-in of ``tests/test_nvml_sampler.py`` over the run's own window, at its 10 Hz. Their power
is planted from the real H100 scrapes (``tests/fixtures/dcgm``, idle and under load) and follows the load: a GPU
draws idle power plus its load share times the requests in flight (up to 4); NVML's energy counter (field 83,
mJ since driver load) is that power integrated on a 1 ms grid, and GPU 1's driver reloads in the middle of
the second level (its counter restarts near zero). The truth — each level's energy on the 1 ms grid over its
span ÷ the output tokens of its answered requests in ``load.parquet`` — is computed here, not by gpusleuth.
The counter is read every 100 ms, so a level's ends are interpolated within a reading: 6 s levels keep that
under 2 %.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import free_port

REPO = Path(__file__).resolve().parent.parent
SERVERS = REPO / "tests" / "servers"
MS = 1_000_000
PRICE = 2.5  # $ per GPU-hour


def _env() -> dict:
    import os

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO / "src") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _report(run: Path) -> dict:
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(run), "--json", "--price-per-gpu-hour",
                          str(PRICE)], env=_env(), capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    return json.loads(rep.stdout)


def _console(run: Path) -> str:
    rep = subprocess.run([sys.executable, "-m", "gpusleuth", "report", str(run), "--price-per-gpu-hour", str(PRICE)],
                         env={**_env(), "COLUMNS": "200"}, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-3000:]
    return rep.stdout


@pytest.fixture(scope="module")
def cpu_run(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("load_energy")
    port = free_port()
    out = tmp / "run"
    res = subprocess.run([sys.executable, "-m", "gpusleuth", "load", f"http://127.0.0.1:{port}/v1/completions",
                          "--concurrency", "1,4", "--duration", "6", "--input-tokens", "8:2", "--output-tokens", "32:12",
                          "--no-warmup", "--out", str(out), "--", sys.executable, str(SERVERS / "openai_engine.py"),
                          str(port), str(tmp / "truth.jsonl")],
                         env=_env(), capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _levels(run: Path) -> dict[str, np.ndarray]:
    import pyarrow.parquet as pq

    return {k: np.asarray(v) for k, v in pq.read_table(run / "load.parquet").to_pydict().items()
            if k in ("level", "start_ns", "end_ns", "status", "error", "output_tokens")}


@pytest.mark.process
def test_cpu_only_run_says_it_cannot_and_prices_the_tokens(cpu_run):
    rep = _report(cpu_run)
    o = rep["serving"]["outcomes"]
    assert o["j_per_output_token"] is None and o["energy_source"] is None
    note = o["token_energy_note"]
    assert note.count(". ") == 0 and "no GPU was recorded" in note and "CPU-only" in note, note
    # $ per 1M output tokens at the knee: the price of the level's span over its answered output tokens
    ld = _levels(cpu_run)
    at = rep["serving"]["at"]
    m = ld["level"] == rep["serving"]["levels"][at]["level"]
    ok = m & (ld["status"] >= 200) & (ld["status"] < 300) & (ld["error"] == "") & (ld["output_tokens"] >= 0)
    span = (ld["end_ns"][m].max() - ld["start_ns"][m].min()) / 1e9
    truth = PRICE / 3600 * span / ld["output_tokens"][ok].sum() * 1e6
    assert o["dollars_per_million_output_tokens"] == pytest.approx(truth, rel=0.02)
    assert "joules per token not measured: no GPU was recorded" in " ".join(_console(cpu_run).split())


def _planted_power(ld: dict[str, np.ndarray], grid_ns: np.ndarray, idle_w: float, load_w: float) -> np.ndarray:
    """Idle power plus the load share per request in flight (4 in flight: the real loaded H100's power)."""
    ok = ld["error"] != "dropped"
    starts, ends = np.sort(ld["start_ns"][ok]), np.sort(ld["end_ns"][ok])
    inflight = np.searchsorted(starts, grid_ns, side="right") - np.searchsorted(ends, grid_ns, side="right")
    return idle_w + (load_w - idle_w) * np.minimum(inflight, 4) / 4


def _record_gpus(cpu_run: Path, dst: Path) -> tuple[Path, dict[int, float]]:
    """The recording with two H100s sampled over its window; returns it and the planted energy per level."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq
    from prom_cluster import h100_scrape
    from test_nvml_sampler import FakeNvml, load

    from gpusleuth.recorder.nvml import NvmlSampler
    from gpusleuth.recorder.schemas import GPU_SCHEMA, to_batch

    run = dst / "run"
    shutil.copytree(cpu_run, run)
    meta = json.loads((run / "meta.json").read_text())
    ld = _levels(run)
    idle_w, load_w = h100_scrape("idle")["power"], h100_scrape("load")["power"]
    t0, t1 = int(meta["start_ns"]), int(meta["end_ns"])
    grid = np.arange(t0, t1 + MS, MS)  # the planted truth: power on a 1 ms grid
    power = [_planted_power(ld, grid, idle_w, load_w), np.full(len(grid), idle_w)]
    power[1] = power[1] + (power[0] - idle_w) / 2  # the second GPU takes half the load
    energy_mj = [np.r_[0.0, np.cumsum(p[:-1])] for p in power]  # W × 1 ms = mJ, integrated from t0
    lv1 = ld["level"] == 1
    reset_at = int((ld["start_ns"][lv1].min() + ld["end_ns"][lv1].max()) // 2)
    ticks_t = np.arange(t0, t1, 100 * MS)
    fx = copy.deepcopy(load("h100_synthetic.json"))
    base = fx["devices"][0]
    fx["devices"] = []
    for gi in range(2):
        dev = copy.deepcopy(base)
        dev["static"]["uuid"] = f"GPU-00000000-0000-0000-0000-00000000000{gi}"
        dev["static"]["pci_bus_id"] = f"00000000:{0x18 + gi:02X}:00.0"
        tick0 = base["ticks"][1]
        ticks = []
        for t in ticks_t:
            k = int((t - t0) // MS)
            counter = 4.1e9 + energy_mj[gi][k]  # mJ since the driver loaded
            if gi == 1 and t >= reset_at:  # the driver reloaded: the counter restarts from what it drew since
                counter = energy_mj[gi][k] - energy_mj[gi][int((reset_at - t0) // MS)]
            tick = copy.deepcopy(tick0)
            tick["t_ns"] = int(t)
            tick["power_mw"] = int(round(power[gi][k] * 1000))
            tick["util"] = [int(100 * (power[gi][k] - idle_w) / (load_w - idle_w)), 30]
            tick["fields"]["83"] = [0, 3, int(round(counter)), 14]
            tick["gpm"] = None
            ticks.append(tick)
        dev["ticks"] = ticks
        fx["devices"].append(dev)
    fake = FakeNvml(fx)
    sampler, reason = NvmlSampler.open(fake, clock=lambda: fake.now_ns)
    assert reason is None and sampler is not None
    rows = []
    for i, t in enumerate(ticks_t):
        fake.tick, fake.now_ns = i, int(t)
        rows.extend(sampler.sample(int(t)))
    pq.write_table(pa.Table.from_batches([to_batch(rows, GPU_SCHEMA)]), run / "gpu.parquet")
    meta["recorder"]["gpu"] = sampler.hardware()
    meta["recorder"]["gpu_note"] = None
    (run / "meta.json").write_text(json.dumps(meta))
    truth = {}
    for lv in np.unique(ld["level"]):
        m = ld["level"] == lv
        lo, hi = int(ld["start_ns"][m].min()), int(ld["end_ns"][m].max())
        sel = (grid >= lo) & (grid < hi)
        truth[int(lv)] = float(sum(p[sel].sum() for p in power)) / 1000.0  # J
    return run, truth


@pytest.mark.process
def test_joules_and_dollars_per_output_token_from_nvmls_energy_counter(cpu_run, tmp_path):
    run, planted = _record_gpus(cpu_run, tmp_path)
    rep = _report(run)
    s = rep["serving"]
    assert s["energy_source"] == "NVML energy counter" and s["token_energy_note"] is None
    assert "prefill and decode" in s["input_token_note"]
    ld = _levels(run)
    for lv in s["levels"]:
        m = ld["level"] == lv["level"]
        ok = m & (ld["status"] >= 200) & (ld["status"] < 300) & (ld["error"] == "") & (ld["output_tokens"] >= 0)
        tokens = int(ld["output_tokens"][ok].sum())
        span = (ld["end_ns"][m].max() - ld["start_ns"][m].min()) / 1e9
        assert tokens > 100
        # the GPU reset in level 1 is skipped, not counted as a negative (or 4 GJ) step
        assert lv["energy_j"] == pytest.approx(planted[lv["level"]], rel=0.02), (lv["level"], lv["energy_j"])
        assert lv["j_per_output_token"] == pytest.approx(planted[lv["level"]] / tokens, rel=0.02)
        assert lv["dollars_per_million_output_tokens"] == pytest.approx(2 * PRICE / 3600 * span / tokens * 1e6, rel=0.02)
    o = s["outcomes"]
    at = s["levels"][s["at"]]
    assert o["j_per_output_token"] == at["j_per_output_token"] and o["energy_source"] == "NVML energy counter"
    text = " ".join(_console(run).split())
    assert f"{o['j_per_output_token']:,.3g} J per output token (NVML energy counter" in text, text[:3000]
    assert f"${o['dollars_per_million_output_tokens']:,.2f} per 1M output tokens" in text
