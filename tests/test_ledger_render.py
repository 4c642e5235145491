"""The ledger's renderers with names a cluster controls: nothing reaches a terminal, a spreadsheet, a page
or a Prometheus scrape as anything but text. In-process (the ledger folded from GpuSeries built here);
the same renderers on a real server are tests/test_fleet_prometheus.py."""

from __future__ import annotations

import csv
import io

import numpy as np

from gpusleuth.ledger.analysis.ledger import LedgerBuilder
from gpusleuth.ledger.analysis.model import Pricing
from gpusleuth.ledger.render.html import render_ledger_html
from gpusleuth.ledger.render.console import render_ledger_console
from gpusleuth.ledger.render.csv_out import render_ledger_csv
from gpusleuth.ledger.render.grafana import render_ledger_grafana
from gpusleuth.ledger.report import LedgerReport
from gpusleuth.ledger.run.fleet_usage import SAMPLE_COLUMNS, FleetWindow, GpuSeries, Owner
from gpusleuth.render.text import SafeConsole

HOSTILE = '=HYPERLINK("http://x")\x1b[31m<script>alert(1)</script>"\\\n'


def _report() -> LedgerReport:
    n = 2880
    cols = {c: np.zeros(n, np.float32) for c in SAMPLE_COLUMNS}
    cols["fb_used_mib"][:] = 1000
    cols["fb_free_mib"][:] = 80000
    series = GpuSeries(uuid="GPU-1", host=HOSTILE, gpu="0", model="NVIDIA H100 80GB HBM3", start_s=0, step_s=30,
                       columns=cols, owner=np.zeros(n, np.int32), owners=[Owner(HOSTILE, HOSTILE, "c", HOSTILE)])
    window = FleetWindow(server="http://127.0.0.1:9", start_s=0, end_s=n * 30, step_s=30, gpus=1,
                         metrics=["DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"],
                         has_kube_requests=True, group_label="hpc_job")
    b = LedgerBuilder(window, Pricing(override=2.0))
    b.add([series])
    return LedgerReport(ledger=b.finish(), elapsed_s=0.1, queries=1)


def test_hostile_names_stay_text_everywhere():
    report = _report()
    row = report.rows()[0]
    assert row["reason"] == "IDLE_ALLOCATED" and row["idle_usd"] == 24 * 2.0  # it was folded, not skipped

    buf = io.StringIO()
    render_ledger_console(report, SafeConsole(file=buf, width=120, force_terminal=True))
    assert "=HYPERLINK" in buf.getvalue() and "\x1b[31m" not in buf.getvalue()  # shown, its escape defused

    cells = next(csv.DictReader(io.StringIO(render_ledger_csv(report))))
    assert cells["namespace"].startswith("'=HYPERLINK")  # a spreadsheet shows it, never runs it

    page = render_ledger_html(report)
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)" in page

    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(render_ledger_grafana(report))}
    (sample,) = [s for s in fams["gpusleuth_fleet_gpu_hours"].samples if s.labels["class"] == "allocated_idle"]
    assert sample.labels["namespace"] == HOSTILE and sample.value == 24.0
