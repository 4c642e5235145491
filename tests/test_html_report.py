"""The HTML report: display data computed in the report stage, one self-contained page, large runs kept
light. Real inputs: a recorded torch CPU job and the HTA traces. (tests/test_browser.py opens the pages
in a real chromium.)"""

from __future__ import annotations

import json
import re
import sys
import time
from html import escape

import numpy as np
import pytest

from conftest import TRACES, gpusleuth
from gpusleuth.analysis.timeseries import MAX_POINTS, build_display, minmax_downsample
from gpusleuth.run.model import Run, Table

DF = TRACES / "df_index_resolver" / "df_index_resolver.json.gz"


def figures(html: str) -> dict:
    m = re.search(r'<script type="application/json" id="gs-figures">(.*?)</script>', html, re.S)
    assert m, "figure data block missing"
    return json.loads(m.group(1))


def assert_offline(html: str) -> None:
    """Nothing is fetched: no external scripts, styles, images or fonts."""
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)\s*=", html, re.I)
    assert "default-src 'none'" in html


def test_minmax_downsample_keeps_extremes_and_order():
    t = np.arange(200_000) * 0.1
    y = np.full(len(t), 90.0)
    y[123_457] = 0.0  # a single 100 ms dip in a 5.5-hour series
    y[150_000] = 100.0
    y[10_000:10_500] = np.nan  # a recorder gap
    td, yd = minmax_downsample(t, y, 2000)
    assert len(td) <= 2000
    assert np.nanmin(yd) == 0.0 and np.nanmax(yd) == 100.0
    assert td[np.nanargmin(yd)] == pytest.approx(t[123_457])
    assert (np.diff(td) >= 0).all()
    assert np.isnan(yd).any()  # the hole stays a hole
    t2, y2 = minmax_downsample(t[:50], y[:50], 2000)  # short series untouched
    assert len(t2) == 50


def _big_run(hours: float = 2.0, cores: int = 16, workers: int = 12) -> Run:
    """Hours at 10 Hz, thousands of steps, many cores and workers — the tables a long recording loads."""
    n = int(hours * 3600 * 10)
    t0 = 1_700_000_000_000_000_000
    t = t0 + np.arange(n, dtype=np.int64) * 100_000_000
    rng = np.random.default_rng(0)
    per_core = np.empty(n, object)
    cores_m = rng.uniform(0, 100, (n, cores))
    for i in range(n):
        per_core[i] = cores_m[i]
    host = Table({"t_ns": t, "cpu_pct": cores_m.mean(1), "cpu_per_core": per_core, "iowait_pct": rng.uniform(0, 5, n),
                  "disk_read_bytes": np.cumsum(rng.integers(0, 10**6, n)).astype(float),
                  "disk_write_bytes": np.cumsum(rng.integers(0, 10**5, n)).astype(float)})
    gpu = Table({"t_ns": t, "gpu": np.zeros(n, np.int64), "util_gpu": rng.uniform(0, 100, n),
                 "util_mem": rng.uniform(0, 60, n), "power_w": rng.uniform(80, 700, n),
                 "sm_clock_mhz": rng.uniform(1200, 1980, n), "mem_used": np.full(n, 40 * 2**30),
                 "mem_total": np.full(n, 80 * 2**30),
                 "clock_event_reasons": np.where(rng.uniform(size=n) < 0.01, 0x4, 0).astype(float)})
    pids = [1000] + [2000 + k for k in range(workers)]
    procs = Table({"t_ns": np.repeat(t[::10], len(pids)), "pid": np.tile(pids, len(t[::10])),
                   "ppid": np.tile([1] + [1000] * workers, len(t[::10])),
                   "name": np.array(["python"] * (len(t[::10]) * len(pids)), object),
                   "cpu_pct": rng.uniform(0, 100, len(t[::10]) * len(pids))})
    ns = 20_000
    ends = t0 + np.cumsum(rng.integers(300, 400, ns)) * 1_000_000
    steps = Table({"step": np.arange(ns), "pid": np.full(ns, 1000), "start_ns": np.r_[t0, ends[:-1]], "end_ns": ends,
                   "data_wait_ns": rng.integers(0, 50_000_000, ns), "data_cpu_ns": np.zeros(ns, np.int64),
                   "samples": np.full(ns, 64), "optimizer_ns": np.zeros(ns, np.int64), "fetches": np.ones(ns, np.int64),
                   "delimiter": np.array(["optimizer"] * ns, object), "gpu_ns": np.full(ns, -1)})
    phases = Table({"name": np.array(["eval", "checkpoint"], object), "pid": np.array([1000, 1000]),
                    "start_ns": np.array([t0 + 600 * 10**9, t0 + 3000 * 10**9]),
                    "end_ns": np.array([t0 + 660 * 10**9, t0 + 3030 * 10**9]), "source": np.array(["api", "api"], object)})
    return Run(meta={"start_ns": int(t0), "end_ns": int(t[-1]), "source": "recorder", "command": ["python", "train.py"]},
               host=host, gpu=gpu, procs=procs, steps=steps, phases=phases,
               # the loader the hook saw: forked children of the main process are its workers only then
               infos=[{"kind": "dataloader", "pid": 1000, "num_workers": workers, "batch_size": 64}])


def test_large_run_is_downsampled_in_the_report_stage_and_renders_fast(tmp_path):
    from gpusleuth.render.html import write_html
    from gpusleuth.pipeline.build import build_report

    run = _big_run()
    t = time.perf_counter()
    from gpusleuth.analysis.steps import step_view
    from gpusleuth.analysis.host_telemetry import assign_roles

    view = step_view(run)
    d = build_display(run, [], view, assign_roles(run, view.pid))
    display_s = time.perf_counter() - t
    assert {p.key for p in d.panels} >= {"gpu_util", "gpu_power", "gpu_clocks", "steps", "procs", "cpu", "cores", "io"}
    for s in d.series:
        assert len(s.t) <= MAX_POINTS, s.name
    assert max(s.points for s in d.series) == 72_000
    assert any(s.name == "12 loader workers (sum)" for s in d.series)  # 12 workers: one summed line
    assert [b.label for b in d.bands if b.kind == "phase"] == ["eval", "checkpoint"]
    assert any(b.kind == "throttle" and "sw_power_cap" in b.label for b in d.bands)
    assert len(d.heatmaps[0].rows) == 16 and len(d.heatmaps[0].t) <= 800
    t = time.perf_counter()
    report = build_report(run)
    out = tmp_path / "big.html"
    size = write_html(report, out)
    total_s = time.perf_counter() - t
    print(f"\n2 h at 10 Hz (72,000 samples/series, 20,000 steps, 16 cores, 12 workers): display data "
          f"{display_s:.2f} s; report + HTML {total_s:.2f} s; page {size / 2**20:.2f} MiB")
    assert size < 8 * 2**20  # plotly.js (~4.6 MiB) + downsampled data, not 72,000-point series
    assert total_s < 30


@pytest.mark.process
def test_html_for_a_recorded_torch_job(tmp_path):
    out = tmp_path / "report.html"
    res = gpusleuth("run", "--out", tmp_path / "run", "--html", out, "--", sys.executable, "-m", "gpusleuth.demo.job",
                    "--planted", "--steps", "30", "--transform-rounds", "4", timeout=300)
    assert res.returncode == 0, res.stderr
    assert f"HTML report written to {out}" in res.stderr
    html = out.read_text()
    assert_offline(html)
    assert "Where the wall time went" in html and "Fix first:" in html
    # the planted slow loading is what to fix first; which input cause names it depends on the host: on a loaded
    # one (load 18 of 2 cores) the starved loader used little CPU and read as input.io with contention, on a
    # quiet one input.preprocessing (test_end_to_end) — the page shows the report's own top finding either way
    top = json.loads(gpusleuth("report", tmp_path / "run", "--json").stdout)["findings"][0]
    assert top["cause"].startswith("input.") and top["cause"] in html, top["cause"]
    assert f"<b>Fix first:</b> {escape(top['title'])}" in html, top["title"]
    figs = figures(html)
    timeline = next(f for f in figs.values() if f["layout"].get("xaxis", {}).get("anchor", "").startswith("y")
                    and len([k for k in f["layout"] if k.startswith("yaxis")]) >= 3)
    names = {t.get("name") for t in timeline["data"]}
    assert {"step time", "data wait", "training process", "all cores"} <= names
    assert any(t["type"] == "heatmap" for t in timeline["data"])
    # the same run re-rendered from its directory gives the same page structure
    res = gpusleuth("report", tmp_path / "run", "--html", tmp_path / "again.html")
    assert res.returncode == 0, res.stderr
    assert len(figures((tmp_path / "again.html").read_text())) == len(figs)


@pytest.mark.process
def test_html_for_trace_inputs(tmp_path):
    from gpusleuth.analysis.trace import IDLE_CATS

    out = tmp_path / "trace.html"
    res = gpusleuth("report", DF, "--html", out)
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    assert_offline(html)
    figs = list(figures(html).values())
    bars, hist, kern = figs[0], figs[1], figs[2]
    assert bars["layout"]["barmode"] == "stack" and bars["data"][0]["x"] == ["#2", "#3", "#4", "#5", "#6"]
    # stacked categories add up to each step's time (exact numbers in the report JSON)
    rep = json.loads(gpusleuth("report", DF, "--json").stdout)["ranks"][0]
    for i, s in enumerate(rep["steps"]):
        assert sum(t["y"][i] for t in bars["data"]) == pytest.approx(s["duration_s"] * 1e3, abs=1e-3)
    # the gap histogram holds all of the device's idle time (whole trace window), by cause
    idle_ms = sum(sum(t["y"]) for t in hist["data"])
    assert idle_ms == pytest.approx(sum(v for k, v in rep["trace_partition"].items() if k in IDLE_CATS) * 1e3, rel=1e-6)
    assert kern["data"][0]["orientation"] == "h"
    assert "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)" in html  # exact table


def test_missing_plotly_is_one_sentence(monkeypatch, tmp_path):
    from gpusleuth.render import html as H

    monkeypatch.setitem(sys.modules, "plotly", None)
    with pytest.raises(H.HtmlUnavailable, match="pip install 'plotly"):
        H.plotly_js()


def test_script_json_cannot_close_the_data_block():
    from gpusleuth.render.html import script_json

    text = script_json({"k": "</script><script>alert(1)</script>\u2028&"})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text)["k"] == "</script><script>alert(1)</script>\u2028&"


TWO_SPEEDS = """
import sys, time, torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
torch.set_num_threads(1)
delay = float(sys.argv[1])
class Slow(Dataset):
    def __len__(self): return 40 * 8
    def __getitem__(self, i):
        time.sleep(delay)  # storage-like latency per sample
        return torch.randn(32), i % 4
model = nn.Linear(32, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in DataLoader(Slow(), batch_size=8):
    time.sleep(0.01)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
"""


@pytest.mark.process
def test_compare_html_charts_carry_the_comparisons_numbers(tmp_path):
    """The compare page draws exactly the numbers `compare --json` reports: deltas, spreads, step series."""
    script = tmp_path / "train.py"
    script.write_text(TWO_SPEEDS)
    for name, delay in (("slow", "0.004"), ("fast", "0")):
        res = gpusleuth("run", "--no-report", "--out", tmp_path / name, "--", sys.executable, script, delay)
        assert res.returncode == 0, res.stderr
    out = tmp_path / "cmp.html"
    res = gpusleuth("compare", tmp_path / "slow", tmp_path / "fast", "--json", "--html", out)
    assert res.returncode == 0, res.stderr
    assert f"comparison page written to {out}" in res.stderr
    doc = json.loads(res.stdout)
    html = out.read_text()
    assert_offline(html)
    figs = list(figures(html).values())
    deltas = next(f for f in figs if "% change against the baseline" in str(f["layout"].get("xaxis")))
    row = deltas["data"][0]["y"].index("samples/s (steady)")
    assert deltas["data"][0]["x"][row] == pytest.approx(doc["deltas"][1]["throughput"] * 100, abs=1e-3)
    assert doc["deltas"][1]["throughput"] > 0.3  # the fast run is faster, well beyond any noise
    boxes = [t for f in figs for t in f["data"] if t["type"] == "box"]
    assert [b["median"][0] for b in boxes] == [r["step_spread_ms"]["p50"] for r in doc["runs"]]
    lines = [t for f in figs for t in f["data"] if t["type"] in ("scatter", "scattergl") and t.get("mode") == "lines"]
    assert len(lines) == 2 and all(len(t["x"]) == 40 for t in lines)  # 40 steps each, nothing dropped
    # the slow run's latency finding is gone in the fast one; the findings chart shows both runs
    assert doc["runs"][0]["findings"][0]["cause"] == "input.io"
    assert "input.io" not in [f["cause"] for f in doc["runs"][1]["findings"] if f["severity"] == "high"]
    assert "Findings per run" in html and "What changed against the baseline" in html


@pytest.mark.process
def test_run_no_report_with_html_writes_only_the_page(tmp_path):
    out = tmp_path / "page.html"
    res = gpusleuth("run", "--no-report", "--html", out, "--out", tmp_path / "run", "--", sys.executable, "-c",
                    "import time; time.sleep(0.3)")
    assert res.returncode == 0, res.stderr
    assert out.exists() and f"HTML report written to {out}" in res.stderr
    assert "Outcomes" not in res.stderr and "Outcomes" not in res.stdout  # no printed report
