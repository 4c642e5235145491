"""nvidia-smi --query-gpu CSV and dmon logs: every variant read into the recorder's gpu table, and the
telemetry-only report (idle GPU called out, quiet on a loaded capture, gaps stated as losses).

Variants are derived at test time from the real plato log (beam11221/plato, Apache-2.0): every value is
a real nvidia-smi sample; only the layout (header, units, GPUs interleaved, gaps) is rearranged.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from conftest import gpusleuth
from gpusleuth.errors import InputError
from gpusleuth.sources.detect import ImportOptions, load_file, sniff
from gpusleuth.sources.dmon import read_dmon
from gpusleuth.sources.nvsmi import read_nvsmi_csv

FIX = Path(__file__).parent / "fixtures" / "nvidia-smi"
PLATO = FIX / "plato_gpu_log_noheader.csv"
H100 = FIX / "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H200_MIG = FIX / "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
HEADER = "timestamp, utilization.gpu [%], utilization.memory [%], memory.used [MiB], memory.total [MiB], " \
         "temperature.gpu, power.draw [W]"
MIB = 2**20


def plato_rows() -> list[list[str]]:
    return [[c.strip() for c in ln.split(",")] for ln in PLATO.read_text().splitlines() if ln.strip()]


def write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_noheader_with_units_infers_fields_and_reads_every_row():
    rows = plato_rows()
    run = read_nvsmi_csv(PLATO, tz="UTC")
    g = run.gpu
    assert len(g) == len(rows) == 1923
    assert set(np.unique(g["gpu"])) == {0}
    assert g["mem_total"][0] == 20146 * MIB
    assert g["mem_used"][0] == float(rows[0][3].split()[0]) * MIB
    assert g["power_w"][0] == pytest.approx(float(rows[0][6].split()[0]))
    assert "temp_c" not in g  # a bare number is not guessed
    assert any("inferred from the values" in x for x in run.losses)
    # 2026/04/25 16:06:06.780 read as UTC
    assert g["t_ns"][0] == 1777133166780 * 1_000_000


def test_header_nounits_and_fields_option_agree(tmp_path):
    rows = plato_rows()[:50]
    strip = lambda c: c.split()[0] if c[:1].isdigit() and "/" not in c else c  # noqa: E731
    nounits = write(tmp_path, "nounits.csv", [HEADER] + [", ".join(strip(c) for c in r) for r in rows])
    units = write(tmp_path, "units.csv", [HEADER] + [", ".join(r) for r in rows])
    a = read_nvsmi_csv(nounits, tz="UTC").gpu
    b = read_nvsmi_csv(units, tz="UTC").gpu
    c = read_nvsmi_csv(PLATO, fields=["timestamp", "utilization.gpu", "utilization.memory", "memory.used",
                                      "memory.total", "temperature.gpu", "power.draw"], tz="UTC").gpu
    for col in ("t_ns", "util_gpu", "mem_used", "mem_total", "power_w", "temp_c"):
        np.testing.assert_array_equal(a[col], b[col])
        np.testing.assert_array_equal(a[col], c[col][:50])


def test_several_gpus_interleaved_with_index_na_and_repeated_headers(tmp_path):
    rows = plato_rows()[:120]
    lines = ["+-----------------------------------------------------------------------------+",
             "| NVIDIA-SMI 535.54.03   Driver Version: 535.54.03   CUDA Version: 12.2       |",
             "some text a user redirected before the CSV, with, commas"]
    for i, r in enumerate(rows):
        if i % 40 == 0:
            lines.append("timestamp, index, " + HEADER.split(", ", 1)[1])  # a shell loop re-printing the header
        for gpu in range(3):
            cells = list(r)
            if gpu == 2:
                cells[1] = "[N/A]"
                cells[6] = "[Not Supported]"
            lines.append(", ".join([cells[0], str(gpu)] + cells[1:]))
    run = read_nvsmi_csv(write(tmp_path, "multi.csv", lines), tz="UTC")
    g = run.gpu
    assert len(g) == 360
    for gpu in range(3):
        assert (g["gpu"] == gpu).sum() == 120
    assert np.isnan(g["util_gpu"][g["gpu"] == 2]).all()
    assert np.isnan(g["power_w"][g["gpu"] == 2]).all()
    assert np.isfinite(g["util_gpu"][g["gpu"] == 0]).all()
    assert not any("not samples" in x for x in run.losses)  # repeated headers are headers, not bad lines


def test_no_index_column_numbers_gpus_by_position_in_each_burst(tmp_path):
    # the dst915/llama.cpp shape: noheader,nounits, 4 GPUs per tick 1 ms apart, no index column
    rows = plato_rows()[:30]
    lines = [HEADER]
    for r in rows:
        base = r[0][:-3]
        ms = int(r[0][-3:])
        for gpu in range(4):
            lines.append(", ".join([f"{base}{(ms + gpu) % 1000:03d}"] + r[1:]))
    run = read_nvsmi_csv(write(tmp_path, "burst.csv", lines), tz="UTC")
    assert sorted(np.unique(run.gpu["gpu"]).tolist()) == [0, 1, 2, 3]
    assert (run.gpu["gpu"] == 3).sum() == 30
    assert any("position in each sampling burst" in x for x in run.losses)


def test_a_sampler_stall_inside_a_burst_does_not_shift_gpus(tmp_path):
    """Held-out 8×H100 log (`-lms 100`, no index column): 95 ticks were split by a stall — GPU 0's row on
    time, GPUs 1-7 hundreds of ms later. Numbering rows by their place in each burst gave GPU 0 160 extra
    samples and GPU 1's values; the rows are nvidia-smi's GPU order, so each GPU keeps its own series."""
    rows = plato_rows()[:60]
    lines = [HEADER]
    written = {g: [] for g in range(8)}
    for i, r in enumerate(rows):
        tick = datetime.strptime(r[0], "%Y/%m/%d %H:%M:%S.%f")
        for gpu in range(8):
            v = rows[(i + 7 * gpu) % len(rows)]  # each GPU its own real samples
            late = 600 if i % 10 == 3 and gpu > 0 else 0  # the stall: GPUs 1-7 come 0.6 s late
            stamp = tick + timedelta(milliseconds=gpu + late)
            lines.append(", ".join([stamp.strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]] + v[1:]))
            written[gpu].append(float(v[1].split()[0]))
    run = read_nvsmi_csv(write(tmp_path, "stall.csv", lines), tz="UTC")
    for gpu in range(8):
        assert run.gpu["util_gpu"][run.gpu["gpu"] == gpu].tolist() == written[gpu]
    assert any("split or short" in x for x in run.losses)


def test_a_log_cut_while_written_ends_in_nul_bytes(tmp_path):
    """A held-out real log (killed 2-GPU run) ends in 2,533 NUL bytes, which read as one malformed line: the
    loss now says what they are, and every sample before them is kept."""
    rows = plato_rows()[:50]
    p = write(tmp_path, "cut.csv", [HEADER] + [", ".join(r) for r in rows])
    p.write_bytes(p.read_bytes() + b"\0" * 2533)
    run = read_nvsmi_csv(p, tz="UTC")
    assert len(run.gpu["t_ns"]) == 50
    assert any("ends in 2,533 NUL bytes" in x for x in run.losses)
    assert not any("different number of fields" in x for x in run.losses)


@pytest.mark.process
def test_power_only_log_says_why_no_idle_check(tmp_path):
    """A held-out `timestamp, power.draw` log (-lms 50, 3.6 s) got no finding and no word why: the idle
    check now says what it needs."""
    rows = plato_rows()[:40]
    lines = ["timestamp, power.draw [W]"] + [f"{r[0]}, {r[6]}" for r in rows]
    res = gpusleuth("report", write(tmp_path, "power.csv", lines), "--json", "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert any("idle GPUs" in x["rules"] for x in doc["not_evaluated_summary"]), doc["not_evaluated_summary"]


def test_lms_subsecond_and_sampler_gaps_are_losses(tmp_path):
    rows = plato_rows()[:400]
    lines = [HEADER]
    for i, r in enumerate(rows):
        t_ms = i * 50 + (4000 if i >= 200 else 0)  # 20 Hz, then a 4 s stall of the sampler
        s, ms = divmod(t_ms, 1000)
        lines.append(", ".join([f"2026/04/25 16:{s // 60:02d}:{s % 60:02d}.{ms:03d}"] + r[1:]))
    run = read_nvsmi_csv(write(tmp_path, "lms.csv", lines), tz="UTC")
    assert len(run.gpu) == 400
    assert np.median(np.diff(run.gpu["t_ns"])) == 50_000_000
    gap = [x for x in run.losses if "sampler gap" in x]
    assert gap and "1 sampler gap" in gap[0] and "4.0 s without samples" in gap[0]


def test_capture_with_text_before_reads_idle_and_load_rows():
    run = read_nvsmi_csv(H100, tz="UTC")
    g = run.gpu
    assert len(g) == 2
    assert g["util_gpu"].tolist() == [0.0, 100.0]
    assert g["power_w"][1] == pytest.approx(631.95)
    assert run.meta["recorder"]["gpu"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert run.meta["recorder"]["gpu"][0]["power_limit_w"] == pytest.approx(700.0)
    assert any("line 2102" in x for x in run.losses)  # the '# $ nvidia-smi --query-gpu=…' line, named


def test_mig_capture_utilization_not_available_is_null():
    g = read_nvsmi_csv(H200_MIG, tz="UTC").gpu
    assert np.isnan(g["util_gpu"]).all()
    assert np.isfinite(g["power_w"]).all()


def test_dmon_section_with_dashes(tmp_path):
    text = H200_MIG.read_text()
    start = text.index("# gpu    pwr", text.index("# load :: dmon"))
    p = write(tmp_path, "dmon.log", text[start:].splitlines()[:7])
    assert sniff(p) == "dmon"
    run = read_dmon(p, start_ns=1_700_000_000_000_000_000)
    g = run.gpu
    assert len(g) == 5
    assert g["power_w"].tolist() == [295, 295, 295, 295, 294]
    assert np.isnan(g["util_gpu"]).all()  # '-' on a MIG parent
    assert g["sm_clock_mhz"][0] == 1980
    assert np.diff(g["t_ns"]).tolist() == [1_000_000_000] * 4
    assert any("no timestamps" in x for x in run.losses)


def test_dmon_with_date_time_and_pcie_rates(tmp_path):
    lines = ["#Date       Time        gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk  rxpci  txpci",
             "#YYYYMMDD   HH:MM:SS    Idx      W      C      C      %      %      %      %    MHz    MHz   MB/s   MB/s"]
    for s in range(10):
        for gpu in (0, 1):
            lines.append(f" 20260501   10:00:{s:02d}     {gpu}    {300 + gpu}     60     55    {99 if gpu == 0 else 3}"
                         f"     40      0      0   2619   1980    100     50")
    lines.append("dmon was stopped do to receiving a signal")
    run = read_dmon(write(tmp_path, "dmon_dt.log", lines))
    g = run.gpu
    assert len(g) == 20
    assert g["t_ns"][0] == 1777629600 * 10**9
    assert g["pcie_rx_bytes"][g["gpu"] == 0][-1] == pytest.approx(9 * 100e6)
    assert any("do not match the dmon header" in x for x in run.losses)


def test_headerless_nounits_asks_for_fields(tmp_path):
    p = write(tmp_path, "bare.csv", ["2026/04/25 16:06:06.780, 0, 0, 2, 20146, 27, 11.64"] * 3)
    with pytest.raises(InputError, match="--fields"):
        read_nvsmi_csv(p)


def test_pmon_gets_a_sentence(tmp_path):
    text = H100.read_text()
    start = text.index("# gpu         pid", text.index("# load :: pmon"))
    p = write(tmp_path, "pmon.log", text[start:].splitlines()[:10])
    with pytest.raises(InputError, match="pmon"):
        load_file(p, ImportOptions())


@pytest.mark.process
def test_report_cli_calls_out_the_idle_gpu(tmp_path):
    """The real plato log: the card idled ~96 % of 2.7 h — a high finding priced at the given rate."""
    res = gpusleuth("report", PLATO, "--json", "--tz", "UTC", "--price-per-gpu-hour", "2")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    idle = [f for f in doc["findings"] if "sat idle" in f["title"]]
    assert idle and idle[0]["severity"] == "high"
    ev = {e["name"]: e["value"] for e in idle[0]["evidence"]}
    assert ev["idle share (utilization ≤ 5%)"] > 90
    assert idle[0]["estimated_gain"]["dollars_per_run"] == pytest.approx(ev["idle GPU-hours"] * 2, rel=0.01)
    assert doc["gpu"][0]["samples"] == 1923


@pytest.mark.process
def test_loaded_multi_gpu_capture_stays_quiet(tmp_path):
    """Two GPUs at the real H100 capture's load values for 10 minutes: no idle/bursty/imbalance finding."""
    text = H100.read_text()
    start = text.index("# load :: query-gpu")
    csv = [ln for ln in text[start:].splitlines() if ln.startswith(("timestamp,", "2026/"))][:2]
    header, row = csv
    head = header.split(", ")
    cells = row.split(", ")
    ix = head.index("index")
    lines = [header]
    for s in range(600):
        for gpu in (0, 1):
            c = list(cells)
            c[0] = f"2026/07/14 09:{s // 60:02d}:{s % 60:02d}.000"
            c[ix] = str(gpu)
            lines.append(", ".join(c))
    p = write(tmp_path, "loaded.csv", lines)
    res = gpusleuth("report", p, "--json", "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    titles = [f["title"] for f in doc["findings"]]
    assert not [t for t in titles if "idle" in t or "bursts" in t or "unevenly" in t], titles
    assert len(doc["gpu"]) == 2


@pytest.mark.process
def test_bursty_gpu_is_a_stall_not_idle(tmp_path):
    """GPU 0 alternates 65 s busy / 15 s idle (real load and idle rows), GPU 1 steady at load: a stall on
    GPU 0, named once; not an idle GPU (under 20 %) nor an imbalance (19 points apart)."""
    lines = h100_log(1200, 2, lambda gpu, s: gpu == 0 and s % 80 >= 65)
    res = gpusleuth("report", write(tmp_path, "bursty.csv", lines), "--json", "--tz", "UTC")
    assert res.returncode == 0, res.stderr
    findings = json.loads(res.stdout)["findings"]
    f = [x for x in findings if "bursts" in x["title"]]
    assert len(f) == 1 and f[0]["title"].startswith("GPU 0") and f[0]["severity"] == "moderate"
    assert not [x for x in findings if "sat idle" in x["title"] or "unevenly" in x["title"]]


@pytest.mark.process
def test_several_idle_gpus_are_one_finding_priced_together(tmp_path):
    """8 GPUs for 10 minutes (real H100 idle and load rows): GPUs 2, 5 and 7 idle the whole time, GPU 6 idle
    the last half. One finding names them all (an 8-GPU log gave one near-copy per card) and prices their
    idle GPU-hours together; the loaded cards are not in it."""
    lines = h100_log(600, 8, lambda gpu, s: gpu in (2, 5, 7) or (gpu == 6 and s >= 300))
    res = gpusleuth("report", write(tmp_path, "eight.csv", lines), "--json", "--tz", "UTC",
                    "--price-per-gpu-hour", "3")
    assert res.returncode == 0, res.stderr
    findings = json.loads(res.stdout)["findings"]
    # a card that ran nothing has no batch to enlarge (it was told "room for a 2x larger batch", once per card);
    # the half-idle GPU 6 is the one card it may speak of, once
    headroom = [f for f in findings if f["cause"] == "batch.too_small"]
    assert [f["title"].split()[1] for f in headroom] in ([], ["6"]), [f["title"] for f in headroom]
    assert len({f["cause"] for f in findings}) == len(findings), [f["title"] for f in findings]
    idle = [f for f in findings if "sat idle" in f["title"]]
    assert len(idle) == 1, [f["title"] for f in idle]
    f = idle[0]
    assert f["severity"] == "high" and f["title"].startswith("4 of 8 GPUs sat idle")
    assert "GPUs 2, 5, 6, 7" in f["title"]
    per_gpu = {e["name"]: e["value"] for e in f["evidence"]}
    assert set(k.split()[1] for k in per_gpu if k.startswith("GPU ")) == {"2", "5", "6", "7"}
    assert per_gpu["GPU 6 idle (utilization ≤ 5%)"] == pytest.approx(50, abs=1)
    hours = per_gpu["idle GPU-hours"]
    assert hours == pytest.approx(3.5 * 600 / 3600, rel=0.02)  # three whole cards and half of one
    assert f["estimated_gain"]["dollars_per_run"] == pytest.approx(hours * 3, rel=0.01)


def h100_log(seconds: int, gpus: int, idle) -> list[str]:
    """A 1 Hz --query-gpu log of ``gpus`` cards built from the real H100 capture's idle and load rows:
    card ``gpu`` at second ``s`` is idle where ``idle(gpu, s)``."""
    text = H100.read_text()
    header = next(ln for ln in text.splitlines() if ln.startswith("timestamp,"))
    idle_row, load_row = [ln for ln in text.splitlines()
                          if ln.startswith("2026/") and ln.count(",") == header.count(",")]
    ix = header.split(", ").index("index")
    lines = [header]
    for s in range(seconds):
        for gpu in range(gpus):
            c = (idle_row if idle(gpu, s) else load_row).split(", ")
            c[0] = f"2026/07/14 {9 + s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}.000"
            c[ix] = str(gpu)
            lines.append(", ".join(c))
    return lines
