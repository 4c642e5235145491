"""``gpusleuth fleet --prometheus``: the GPU ledger from a real Prometheus holding a planted cluster.

History is written as OpenMetrics with dcgm-exporter's and kube-state-metrics' own series names and labels
(values from the real H100 scrapes in tests/fixtures/dcgm), backfilled with ``promtool tsdb
create-blocks-from openmetrics`` and served by Debian's ``prometheus`` on 127.0.0.1 (tests/prom_cluster.py;
.ci/run installs it; without it these tests skip and say so). The truth each test checks against is
computed here from the planted arrays, never from gpusleuth.
"""

from __future__ import annotations

import csv
import io
import json
import math
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import gpusleuth
from prom_cluster import PROMETHEUS, PROMTOOL, RunningPrometheus, backfill, free_port, legacy_cluster, \
    cap_cluster, energy_cluster, mig_cluster, mig_gr_cluster, missed_scrapes, planted_cluster, platform_cluster, sliced_cluster, \
    split_cluster, write_openmetrics

pytestmark = [pytest.mark.process,  # a real Prometheus, promtool and the CLI: not in the unit lane
              pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None,
                                 reason="no prometheus/promtool (apt-get install prometheus; .ci/run does)")]

PRICE = 2.5
DAY = 86400
T0 = (int(time.time()) // DAY - 3) * DAY  # three days back: whole, finished chunks
WINDOW = ["--start", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0)),
          "--end", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + DAY))]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The planted clusters backfilled into one data directory, and the planted GPUs for the truth."""
    root = tmp_path_factory.mktemp("prom")
    gpus, requests = planted_cluster(T0)
    om = root / "history.om"
    # scraped 7 s after each grid point, ± 2 s, as a real scrape loop off the query grid is
    write_openmetrics(om, {"main": (gpus, requests), "legacy": (legacy_cluster(T0), []), "mig": (mig_cluster(T0), []),
                           **{name: (g, []) for name, g in PLATFORM.items()}, "energy": (ENERGY[0], []),
                           "cap": (CAP[0], []), "split": (SPLIT[0], [])},
                      offset_s=7, jitter_s=2, tokens={"energy": ENERGY[1], "cap": CAP[1], "split": SPLIT[1]})
    backfill(om, root / "data")
    shutil.copytree(root / "data", root / "data-auth")  # the basic-auth server's own copy, made before any server runs
    return root, gpus


def _platform() -> dict[str, list]:
    """The clusters people run (issue 34), each under its own ``cluster`` label."""
    c15 = platform_cluster(T0, step=15, host="node-f")
    missed_scrapes(c15[2], every=40)  # a flaky exporter on the part-time job's GPU: single scrapes lost
    return {"c60": platform_cluster(T0, step=60),  # Prometheus' default scrape interval
            "c15": c15,
            # two GPUs scraped every 15 s, two every 60 s (two scrape jobs)
            "mixed": platform_cluster(T0, step=15, host="node-x")[:2] + platform_cluster(T0, step=60, host="node-y")[2:],
            "operator": platform_cluster(T0, step=30, style="operator", host="node-o"),
            "old": platform_cluster(T0, step=30, style="old", host="node-d"),
            "sliced": sliced_cluster(T0), "migx": mig_gr_cluster(T0)}


PLATFORM = _platform()
ENERGY = energy_cluster(T0)
CAP = cap_cluster(T0)
SPLIT = split_cluster(T0)


@pytest.fixture(scope="module")
def server(cluster):
    root, _ = cluster
    with RunningPrometheus(root / "data") as prom:
        yield prom


def _fleet(server, *args, env=None):
    return gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="main"', "--no-cache",
                     "--price-per-gpu-hour", PRICE, *args, env=env)


def _truth(gpus, step=30):
    """Per namespace, from the planted arrays alone: idle / low / busy GPU-hours."""
    idle: dict[str, float] = {}
    low: dict[str, float] = {}
    busy: dict[str, float] = {}
    for g in gpus:
        have = ~np.isnan(g.cols["util"])
        for oi, (ns, _pod, _c) in enumerate(g.owners):
            mine = (g.owner == oi) & have
            idle[ns] = idle.get(ns, 0.0) + float((mine & (g.cols["sm"] < 0.01)).sum()) * step / 3600
            busy[ns] = busy.get(ns, 0.0) + float((mine & (g.cols["sm"] >= 0.15)).sum()) * step / 3600
            low[ns] = low.get(ns, 0.0) + float((mine & (g.cols["sm"] >= 0.01) & (g.cols["sm"] < 0.15)).sum()) * step / 3600
    return idle, low, busy


@pytest.mark.process
def test_ledger_matches_the_planted_cluster(server, cluster):
    _, gpus = cluster
    res = _fleet(server, "--json")
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    idle, low, busy = _truth(gpus)
    by_ns = {n["namespace"]: n for n in d["namespaces"]}
    assert set(by_ns) == {"research", "training", "inference"}
    for ns, hours in idle.items():  # the must-show: per-namespace idle GPU-hours within 2 % of the truth
        got = by_ns[ns]["hours"]["allocated_idle"]
        assert got == pytest.approx(hours, rel=0.02, abs=0.05), (ns, got, hours)
        assert by_ns[ns]["usd"]["allocated_idle"] == pytest.approx(hours * PRICE, rel=0.02, abs=0.2)
        assert by_ns[ns]["hours"]["productive"] == pytest.approx(busy[ns], rel=0.02, abs=0.05)
        assert by_ns[ns]["hours"]["low_activity"] == pytest.approx(low[ns], rel=0.02, abs=0.05)
        assert by_ns[ns]["usd"]["low_activity"] == pytest.approx(low[ns] * PRICE, rel=0.02, abs=0.2)
    assert idle["training"] > 30 and idle["research"] > 11 and low["inference"] > 23  # the planted waste is there

    rows = {w["workload"]: w for w in d["workloads"]}
    assert rows["research/notebook-idle/jupyter"]["reason"] == "IDLE_ALLOCATED"
    assert rows["training/trainer-parttime/main"]["reason"] == "PART_TIME"
    assert rows["training/trainer-busy/main"]["reason"] == "PRODUCTIVE"
    assert rows["research/notebook-b/jupyter"]["reason"] == "PRODUCTIVE"
    assert rows["inference/embedder-low/svc"]["reason"] == "LOW_ACTIVITY"
    # the idle spans say when: the notebook's first 12 h; the part-time trainer's nights, per GPU
    # (each sample is counted at the first grid step after it was scraped: the window's first step has none)
    spans = rows["research/notebook-idle/jupyter"]["idle_spans"]
    assert len(spans) == 1 and spans[0]["hours"] == pytest.approx(12.0, abs=0.01)
    assert spans[0]["start"] in (WINDOW[1], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + 30)))
    part = sorted(s["hours"] for s in rows["training/trainer-parttime/main"]["idle_spans"])
    assert part == pytest.approx([7.0, 7.0, 9.0, 9.0], abs=0.01)

    # the oversized server: named with a MIG profile, its savings in dollars, never below p99 + headroom
    srv = rows["inference/server-small/vllm"]
    assert srv["reason"] == "OVERSIZED" and srv["sizing"] == "mig" and srv["sizing_target"] == "3g.40gb"
    planted = next(g for g in gpus if g.owners and g.owners[0][1] == "server-small")
    p99_gib = float(np.percentile(planted.cols["fb_used"], 99)) / 1024
    assert srv["mem_p99_gib"] == pytest.approx(p99_gib, rel=1e-3)
    assert srv["sizing_floor_gib"] == pytest.approx(p99_gib * 1.2, rel=1e-3)
    assert srv["sizing_offer_gib"] >= srv["sizing_floor_gib"]
    # 2g.20gb (19.6 GiB) would hold the p99 of 19.4 GiB but not the headroom: 3g.40gb it is, 4 of 7 slices freed
    assert srv["sizing_saved_usd"] == pytest.approx(24 * PRICE * 4 / 7, rel=0.01)
    emb = rows["inference/embedder-low/svc"]  # its memory too wants a 3g.40gb, though a 1g's SMs would do
    assert (emb["sizing"], emb["sizing_target"]) == ("mig", "3g.40gb")
    assert by_ns["inference"]["sizing_savings_usd"] == pytest.approx(2 * 24 * PRICE * 4 / 7, rel=0.01)
    # the GPU no pod held, and the gap in the busy trainer's data (neither idle nor busy)
    free = [w for w in d["workloads"] if w["reason"] == "UNALLOCATED"]
    assert len(free) == 1 and free[0]["unallocated_h"] == pytest.approx(24.0, abs=0.05)
    assert rows["training/trainer-busy/main"]["no_data_h"] == pytest.approx(2.0, abs=0.02)
    # kube-state-metrics' requests agree with what dcgm-exporter saw; the pod it never saw is named
    assert rows["training/trainer-parttime/main"]["requested_gpus"] == 2
    assert rows["training/trainer-parttime/main"]["requested_h"] == pytest.approx(48.0, abs=0.05)
    assert any("research/ghost requested 1 GPU(s) for 2.0 h" in n for n in d["notes"])
    gap_note = next(n for n in d["notes"] if "gaps in their samples" in n)
    assert "GPU-node-a-0003" in gap_note and "2.0 GPU-hours" in gap_note
    # top offenders first: the most dollars wasted leads
    wasted = [w["wasted_usd"] or 0 for w in d["workloads"]]
    assert wasted == sorted(wasted, reverse=True)


@pytest.mark.process
def test_mig_instances_are_their_share_of_the_gpu(server):
    """dcgm-exporter's MIG instances share their GPU's UUID: each is told apart by GPU_I_ID, counts its slices'
    share of the GPU-hour (3g = 3/7), and an oversized instance is offered a smaller profile of its card."""
    res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="mig"', "--no-cache",
                    "--json", "--price-per-gpu-hour", PRICE)
    assert res.returncode == 0, res.stderr
    d = json.loads(res.stdout)
    assert d["gpus"] == 3
    rows = {w["workload"]: w for w in d["workloads"]}
    big, idle = rows["mlteam/mig-oversized/main"], rows["mlteam/mig-idle/main"]
    assert big["productive_h"] == pytest.approx(24 * 3 / 7, abs=0.01)
    assert idle["reason"] == "IDLE_ALLOCATED" and idle["allocated_idle_h"] == pytest.approx(24 * 2 / 7, abs=0.01)
    free = [w for w in d["workloads"] if w["reason"] == "UNALLOCATED"]
    assert len(free) == 1 and free[0]["unallocated_h"] == pytest.approx(24 / 7, abs=0.01)
    # 6 GiB used of 39.5, 15–20 % of its 60 SMs: a 1g.10gb (16 SMs, 9.75 GiB) holds both with headroom
    assert (big["reason"], big["sizing_target"]) == ("OVERSIZED", "1g.10gb")
    assert big["card_gib"] == pytest.approx(40448 / 1024, rel=1e-3)
    assert big["sizing_saved_usd"] == pytest.approx(24 * 3 / 7 * (1 - 1 / 3) * PRICE, rel=0.01)


@pytest.mark.process
def test_console_csv_html_and_grafana_summary(server, tmp_path):
    html, prom = tmp_path / "fleet.html", tmp_path / "summary.prom"
    res = _fleet(server, "--html", html, "--grafana-summary", prom)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 120  # fits a screen
    head = next(i for i, x in enumerate(lines) if x.strip().startswith("workload"))
    assert "training/trainer-parttime/main" in lines[head + 2] and "PART_TIME" in lines[head + 2]
    assert any("3g.40gb" in x and "server-small" in x for x in lines)
    page = html.read_text()
    assert "trainer-parttime" in page and "3g.40gb" in page and "<script" in page

    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    samples = fams["gpusleuth_fleet_gpu_hours"].samples
    assert all(set(s.labels) == {"namespace", "class"} for s in samples)  # never a series per pod
    got = {(s.labels["namespace"], s.labels["class"]): s.value for s in samples}
    assert got[("training", "allocated_idle")] == pytest.approx(32.0, abs=0.05)

    res = _fleet(server, "--csv")
    rows = list(csv.DictReader(io.StringIO(res.stdout)))
    assert {r["workload"] for r in rows} >= {"inference/server-small/vllm", "research/notebook-idle/jupyter"}
    assert next(r for r in rows if r["pod"] == "server-small")["sizing_target"] == "3g.40gb"


def test_cache_makes_a_rerun_and_a_longer_window_incremental(server, tmp_path):
    from gpusleuth.ledger.analysis.model import Pricing
    from gpusleuth.ledger.pipeline import build_ledger_report

    cache = tmp_path / "cache.duckdb"

    def ledger(start, end):
        return build_ledger_report(server.url, start, end, selector='cluster="main"', cache_path=cache,
                                   pricing=Pricing(override=PRICE))

    first = ledger(T0 + 6 * 3600, T0 + DAY)  # 18 h: three 6-hour chunks
    assert first.queries > 0 and first.window.cache == "0 of 3 time chunk(s) from the cache"
    again = ledger(T0 + 6 * 3600, T0 + DAY)
    # a re-run asks only the survey (cadence, owner labels: a few small queries), no samples
    assert again.queries == again.survey_queries and again.window.cache == "3 of 3 time chunk(s) from the cache"
    assert again.to_dict()["namespaces"] == first.to_dict()["namespaces"]
    longer = ledger(T0, T0 + DAY)  # 6 h more history: only that chunk is asked for
    assert longer.window.cache == "3 of 4 time chunk(s) from the cache"
    assert 0 < longer.queries < first.queries
    fresh = build_ledger_report(server.url, T0, T0 + DAY, selector='cluster="main"', pricing=Pricing(override=PRICE))
    assert longer.to_dict()["namespaces"] == fresh.to_dict()["namespaces"]


@pytest.mark.process
def test_missing_metrics_and_labels_are_sentences(server):
    # the GPU no job label names: neither pod nor job labels
    res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="legacy",gpu="1"',
                    "--no-cache", "--json")
    assert res.returncode == 0, res.stderr
    notes = "\n".join(json.loads(res.stdout)["notes"])
    assert "DCGM_FI_PROF_SM_ACTIVE" in notes and "counters CSV" in notes  # the profiling metrics, and where to enable them
    assert "no GPU series carries Kubernetes labels" in notes and "--kubernetes" in notes
    assert "kube-state-metrics" in notes
    # the cluster's HPC job label (dcgm-exporter's Slurm job mapping) is read as it comes, no flag needed, and said;
    # --group-label hpc_job says the same: the job is a workload, 6 h busy then 6 h idle
    for flags in ([], ["--group-label", "hpc_job"]):
        res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="legacy"', "--no-cache",
                        *flags, "--json", "--price-per-gpu-hour", PRICE, "--parallel-queries", "1")
        d = json.loads(res.stdout)
        assert d["owner_labels"] == ["hpc_job"]
        assert sum("owners from hpc_job" in f for f in d["found"]) == 1
        job = next(w for w in d["workloads"] if w["workload"] == "job-17")
        assert job["reason"] == "PART_TIME" and job["activity_source"] == "util"
        assert (job["productive_h"], job["allocated_idle_h"]) == (pytest.approx(6.0, abs=0.02), pytest.approx(6.0, abs=0.02))
        assert job["idle_usd"] == pytest.approx(6.0 * PRICE, abs=0.1)
        assert not any("Kubernetes labels" in n for n in d["notes"])
    # no dcgm-exporter at all in the window: one sentence, no traceback
    res = gpusleuth("fleet", "--prometheus", server.url, "--start", "2001-01-01T00:00:00Z", "--end",
                    "2001-01-02T00:00:00Z", "--no-cache")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "no dcgm-exporter series (DCGM_FI_DEV_GPU_UTIL)" in res.stderr


@pytest.mark.process
def test_unreachable_server_is_a_sentence():
    port = free_port()  # nothing listens there
    res = gpusleuth("fleet", "--prometheus", f"http://127.0.0.1:{port}", "--since", "1d", "--no-cache")
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert f"http://127.0.0.1:{port}: cannot reach the Prometheus server" in res.stderr


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("no openssl to make the server's certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert, "-days",
                    "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"], check=True,
                   capture_output=True, timeout=120)
    return cert, key


@pytest.mark.process
def test_tls_is_verified_and_basic_auth_refused_then_accepted(cluster, tmp_path):
    """One real Prometheus with TLS and basic auth (its own --web.config.file): an unverified certificate, no
    credentials and wrong credentials are each a sentence; the CA and the right password give the ledger."""
    crypt = pytest.importorskip("crypt", reason="the crypt module (Python < 3.13) hashes the bcrypt password")
    root, _ = cluster
    cert, key = _self_signed(tmp_path)
    web = tmp_path / "web.yml"
    web.write_text(f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\nbasic_auth_users:\n"
                   f"  ledger: {crypt.crypt('s3cret', crypt.mksalt(crypt.METHOD_BLOWFISH, rounds=16))}\n")
    with RunningPrometheus(root / "data-auth", web_config=web, tls=True) as prom:
        res = _fleet(prom)
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert "TLS certificate could not be verified" in res.stderr and "--ca-file" in res.stderr
        res = _fleet(prom, "--ca-file", cert)
        assert res.returncode == 2 and "refused the request (HTTP 401) with no credentials" in res.stderr
        res = _fleet(prom, "--ca-file", cert, env={"GPUSLEUTH_PROMETHEUS_BASIC_AUTH": "ledger:wrong"})
        assert "refused the request (HTTP 401) with the credentials from $GPUSLEUTH_PROMETHEUS_BASIC_AUTH" in res.stderr
        secret = tmp_path / "auth"
        secret.write_text("ledger:s3cret\n")
        res = _fleet(prom, "--ca-file", cert, "--basic-auth-file", secret, "--json")
        assert res.returncode == 0, res.stderr
        assert math.isclose(json.loads(res.stdout)["totals"]["hours"]["allocated_idle"], 44.0, abs_tol=0.1)


def test_a_server_refusing_big_queries_gets_them_split(cluster, server):
    """A server with a small sample limit (Prometheus's --query.max-samples; Thanos and Mimir have theirs)
    refuses a batch's query as too many samples: it is split in time until it passes, and the ledger is
    the same as from a server without the limit."""
    root, _ = cluster
    with RunningPrometheus(root / "data-auth", max_samples=1500) as small:
        res = _fleet(small, "--json")
        assert res.returncode == 0, res.stderr
        limited = json.loads(res.stdout)
    full = json.loads(_fleet(server, "--json").stdout)
    assert limited["namespaces"] == full["namespaces"]
    assert limited["queries"] > full["queries"]
    # a server that refuses even the cadence survey (an hour of samples per device): a sentence, not a guessed step
    with RunningPrometheus(root / "data-auth", max_samples=200) as tiny:
        res = _fleet(tiny, "--json")
        assert res.returncode == 2 and "Traceback" not in res.stderr
        assert "refuses even the cadence survey" in res.stderr and "--step" in res.stderr


# --- the clusters people run (issue 34) ------------------------------------------------------------------------
def _planted_truth(gpus) -> dict:
    """From the planted arrays alone, each GPU at its own cadence: per namespace GPU-hours idle / low / busy, the
    hours no pod held a GPU, and per GPU the hours missing inside its life. A time-sliced GPU's copies (one per pod)
    are one device: each sample's time is split evenly between the pods on it; a MIG instance counts its slices / 7."""
    idle: dict[str, float] = {}
    low: dict[str, float] = {}
    busy: dict[str, float] = {}
    unalloc = 0.0
    missing: dict[str, float] = {}
    devices: dict[tuple, list] = {}
    for g in gpus:
        devices.setdefault((g.uuid, g.mig), []).append(g)
    for (uuid, mig), copies in devices.items():
        share = int(mig[0].split("g.")[0]) / 7 if mig else 1.0
        step = int(copies[0].t[1] - copies[0].t[0])
        h = step / 3600 * share
        sampled = [~np.isnan(np.vstack(list(c.cols.values()))).all(axis=0) for c in copies]
        have = np.any(sampled, axis=0)
        life = np.flatnonzero(have)
        missing[uuid] = missing.get(uuid, 0.0) + float((~have[life[0]:life[-1] + 1]).sum()) * h
        for k in np.flatnonzero(have):
            c = next(c for c, ok in zip(copies, sampled) if ok[k])
            sm, gr = c.cols["sm"][k], c.cols.get("gr", np.full(len(c.t), np.nan))[k]
            act = sm if not np.isnan(sm) else gr if not np.isnan(gr) else c.cols["util"][k] / 100
            pods = [c.owners[c.owner[k]] for c, ok in zip(copies, sampled) if ok[k] and c.owner[k] >= 0]
            if not pods:
                unalloc += h
            for ns, *_ in pods:
                into = idle if act < 0.01 else low if act < 0.15 else busy
                into[ns] = into.get(ns, 0.0) + h / len(pods)
    return {"idle": idle, "low": low, "busy": busy, "unallocated": unalloc, "missing": missing}


def _platform_ledger(server, cluster, *args):
    res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", f'cluster="{cluster}"', "--no-cache",
                    "--json", "--price-per-gpu-hour", PRICE, *args)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _matches_truth(d, truth):
    """The must-show: allocated-idle (and low, busy) GPU-hours per namespace within 2 % of the truth, unallocated
    hours too, and no data exactly where samples are missing."""
    by_ns = {n["namespace"]: n["hours"] for n in d["namespaces"]}
    assert set(by_ns) == set(truth["idle"]) | set(truth["low"]) | set(truth["busy"])
    for cls, key in (("allocated_idle", "idle"), ("low_activity", "low"), ("productive", "busy")):
        for ns, hours in by_ns.items():
            want = truth[key].get(ns, 0.0)
            assert hours[cls] == pytest.approx(want, rel=0.02, abs=0.05), (ns, cls, hours[cls], want)
    assert d["totals"]["hours"]["unallocated"] == pytest.approx(truth["unallocated"], rel=0.02, abs=0.05)
    gaps = {g["uuid"]: g["hours"] for g in d["gaps"]}
    assert set(gaps) == {u for u, h in truth["missing"].items() if h > 0}, gaps
    for uuid, hours in gaps.items():
        assert hours == pytest.approx(truth["missing"][uuid], rel=0.02, abs=0.02), uuid


@pytest.mark.process
@pytest.mark.parametrize("name,cadence", [("c60", 60), ("c15", 15)])
def test_the_historys_own_cadence_without_step(server, name, cadence):
    """Scraped every 60 s (Prometheus' default) or every 15 s, with no --step: the step is the cadence found in the
    samples, no data only where samples are missing (the 60 s history read at 30 s had half its hours as no data;
    the 15 s one hid its lost scrapes), and the cadence said once."""
    d = _platform_ledger(server, name)
    truth = _planted_truth(PLATFORM[name])
    assert d["step_s"] == cadence and d["step_from"] == "cadence" and d["cadence"] == {str(cadence): 4}
    said = [f for f in d["found"] if f.startswith("cadence:")]
    assert len(said) == 1 and f"samples every {cadence} s (4 devices)" in said[0]
    _matches_truth(d, truth)
    assert truth["idle"]["lab"] == pytest.approx(24.0, abs=1e-6) and truth["missing"][PLATFORM[name][1].uuid] == 2.0
    # the down-exporter sentence names the trainer's real gap; the flaky exporter's lost scrapes are there at 15 s
    gap_note = next(n for n in d["notes"] if "gaps in their samples" in n)
    assert PLATFORM[name][1].uuid in gap_note and "exporter down" in gap_note
    if cadence == 15:
        assert truth["missing"][PLATFORM[name][2].uuid] == pytest.approx(144 * 15 / 3600)
    # an explicit --step finer than the cadence is the user's, and a sentence says what it costs
    if cadence == 60:
        d = _platform_ledger(server, name, "--step", "30")
        assert d["step_from"] == "--step" and any("--step 30 is shorter than the 60 s" in n for n in d["notes"])


@pytest.mark.process
def test_mixed_cadences_read_at_the_coarsest(server):
    """Two GPUs scraped every 15 s and two every 60 s: each device's cadence is found, the step is the coarsest, and
    neither kind shows no data it does not have."""
    d = _platform_ledger(server, "mixed")
    assert d["cadence"] == {"15": 2, "60": 2} and d["step_s"] == 60
    _matches_truth(d, _planted_truth(PLATFORM["mixed"]))
    assert sum("cadence:" in f and "the coarsest" in f for f in d["found"]) == 1
    # the notebook handed its 15 s GPU to another at 12:00:30: both are in the 60 s step of the handover, which is not
    # time-slicing (that step is split between them, and no GPU is said to be shared)
    assert not any(f.startswith("time-sliced") for f in d["found"])
    assert {w["workload"]: w["shared_h"] for w in d["workloads"]}["lab/notebook/jupyter"] == 0


@pytest.mark.process
@pytest.mark.parametrize("name,form,said", [
    ("operator", "exported", "owners from exported_namespace/exported_pod/exported_container"),
    ("old", "old", "owners from pod_namespace/pod_name/container_name (dcgm-exporter --use-old-namespace")])
def test_renamed_owner_labels(server, name, form, said):
    """gpu-operator's ServiceMonitor (no honorLabels): pods arrive as exported_namespace/exported_pod/exported_container;
    dcgm-exporter --use-old-namespace: as pod_namespace/pod_name/container_name (and a lower-case uuid). Either
    way namespace/pod name the exporter's own pod on every series: the free GPU is unallocated, not the exporter's."""
    d = _platform_ledger(server, name)
    _matches_truth(d, _planted_truth(PLATFORM[name]))
    assert {n["namespace"] for n in d["namespaces"]} == {"lab", "training"}
    assert not any("dcgm-exporter" in w["pod"] for w in d["workloads"])
    assert d["owner_labels"] == [form]
    assert sum(said in f for f in d["found"]) == 1
    rows = {w["workload"]: w for w in d["workloads"]}
    assert rows["lab/notebook/jupyter"]["reason"] == "IDLE_ALLOCATED"
    assert rows["lab/notebook-2/jupyter"]["allocated_idle_h"] == pytest.approx(12.0, abs=0.02)


@pytest.mark.process
def test_time_sliced_gpu_counted_once_and_split(server):
    """dcgm-exporter repeats a time-sliced GPU's series once per pod (NVIDIA/dcgm-exporter#587): the GPU is counted
    once (24 GPU-hours a day, not 60) and its hours split between the pods sharing it, the split said."""
    d = _platform_ledger(server, "sliced")
    truth = _planted_truth(PLATFORM["sliced"])
    _matches_truth(d, truth)
    assert d["gpus"] == 2
    assert sum(v or 0 for v in d["totals"]["hours"].values()) == pytest.approx(48.0, abs=0.05)
    rows = {w["workload"]: w for w in d["workloads"]}
    a, b, c = rows["alpha/share-a/main"], rows["beta/share-b/main"], rows["beta/share-c/main"]
    assert a["allocated_h"] == pytest.approx(12 / 2 + 12 / 3, abs=0.02) and c["allocated_h"] == pytest.approx(4.0, abs=0.02)
    assert (a["shared_with"], c["shared_with"]) == (3, 3) and a["shared_h"] == pytest.approx(a["allocated_h"], abs=0.02)
    assert rows["alpha/alone/main"]["shared_h"] == 0 and rows["alpha/alone/main"]["allocated_h"] == pytest.approx(24, abs=0.05)
    assert b["productive_h"] == pytest.approx(3.0, abs=0.02)  # busy 00–06, half of it hers
    said = [f for f in d["found"] if f.startswith("time-sliced:")]
    assert len(said) == 1 and "1 GPU(s)" in said[0] and "3 pods" in said[0] and "24.0 shared GPU-hours" in said[0]


@pytest.mark.process
def test_mig_instances_without_gpu_util(server):
    """MIG as dcgm-exporter reports it without SM metrics: DCGM_FI_PROF_GR_ENGINE_ACTIVE per instance and no
    DCGM_FI_DEV_GPU_UTIL. Activity is the instance's graphics engine, each instance its slices' share of the card."""
    d = _platform_ledger(server, "migx")
    _matches_truth(d, _planted_truth(PLATFORM["migx"]))
    rows = {w["workload"]: w for w in d["workloads"]}
    half, idle, low = rows["vision/mig-half/main"], rows["vision/mig-idle/main"], rows["speech/mig-low/main"]
    assert (half["productive_h"], half["allocated_idle_h"]) == (pytest.approx(12 * 3 / 7, abs=0.01),) * 2
    assert idle["allocated_idle_h"] == pytest.approx(24 * 2 / 7, abs=0.01) and low["low_activity_h"] == pytest.approx(24 / 7, abs=0.01)
    assert {half["activity_source"], idle["activity_source"], low["activity_source"]} == {"gr_active"}
    assert not any("DCGM_FI_DEV_GPU_UTIL (any kernel running)" in n for n in d["notes"])


@pytest.mark.process
def test_energy_and_dollars_per_token(server):
    """dcgm-exporter's energy counter (with a driver reload: a restart from zero) and vLLM's token counters (with an
    engine restart): per model the energy its GPUs drew while its pod held them ÷ its output tokens, dollars per
    million output tokens on the GPU-hours used, and the energy at steps it generated nothing shown apart."""
    d = _platform_ledger(server, "energy")
    gpus, series = ENERGY
    step = 30
    _matches_truth(d, _planted_truth(gpus))  # the hours too: idle per namespace, unallocated, no data nowhere
    models = {m["model"]: m for m in d["models"]}
    assert set(models) == {"llama-3-8b", "qwen-7b"}
    for tok in series:
        joules = float(tok["power"].sum()) * step  # the truth: the planted power over the day, not the counters
        idle_j = float(tok["power"][tok["gen_increments"] == 0].sum()) * step
        out, inp = float(tok["gen_increments"].sum()), float(tok["prompt_increments"].sum())
        m = models[tok["model"]]
        assert m["tokens_out"] == pytest.approx(out, rel=0.02) and m["tokens_in"] == pytest.approx(inp, rel=0.02)
        assert m["energy_j"] == pytest.approx(joules, rel=0.02), tok["model"]
        assert m["j_per_token_out"] == pytest.approx(joules / out, rel=0.02)
        assert m["usd_per_mtok_out"] == pytest.approx(24 * PRICE / out * 1e6, rel=0.02)
        assert m["idle_energy_j"] == pytest.approx(idle_j, rel=0.02, abs=joules * 0.002)
        row = next(w for w in d["workloads"] if w["pod"] == tok["pod"])
        assert row["j_per_token_out"] == pytest.approx(m["j_per_token_out"], rel=1e-3)
    # idle energy is the llama pod's 12 idle hours at ~70 W; qwen generated all day
    assert models["llama-3-8b"]["idle_energy_j"] == pytest.approx(12 * 3600 * 70, rel=0.02)
    serve = next(n for n in d["namespaces"] if n["namespace"] == "serve")
    want = sum(float(t["power"].sum()) * step for t in series) / sum(float(t["gen_increments"].sum()) for t in series)
    assert serve["j_per_token_out"] == pytest.approx(want, rel=0.02)
    # the whole cluster's energy includes the GPU no pod held
    every = sum(float(g.cols["power"].sum()) * step for g in gpus)
    assert d["totals"]["energy_j"] == pytest.approx(every, rel=0.02)
    note = next(n for n in d["notes"] if n.startswith("energy from"))
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" in note and "1 counter reset(s)" in note


@pytest.mark.process
def test_joules_per_input_token_where_prefill_and_decode_can_be_told_apart(server, tmp_path):
    """vllm-mix's prompt and generation rates wander apart over the day: prefill's joules per input token and
    decode's per output token are the planted ones (the fit over the steps); vllm-same's prompts are always twice
    its generations: the ledger says they cannot be told apart and gives no number. The all-in joules per output
    token stay what they were (all the energy ÷ the output tokens)."""
    d = _platform_ledger(server, "split")
    gpus, series, law = SPLIT
    _matches_truth(d, _planted_truth(gpus))
    models = {m["model"]: m for m in d["models"]}
    mix, same = models["mix-13b"], models["same-7b"]
    assert mix["j_per_token_in"] == pytest.approx(law["a"], rel=0.02)
    assert mix["j_per_token_out_decode"] == pytest.approx(law["b"], rel=0.02)
    assert mix["prefill_note"] is None
    tok = next(t for t in series if t["model"] == "mix-13b")
    assert mix["j_per_token_out"] == pytest.approx(float(tok["power"].sum()) * 30 / tok["gen_increments"].sum(), rel=0.02)
    assert same["j_per_token_in"] is None and same["j_per_token_out_decode"] is None
    assert "cannot be told apart" in same["prefill_note"] and "moved together" in same["prefill_note"]
    res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="split"', "--no-cache",
                    "--price-per-gpu-hour", PRICE, "--html", tmp_path / "l.html")
    assert res.returncode == 0, res.stderr
    text = " ".join(res.stdout.split())
    assert f"prefill, mix-13b: {mix['j_per_token_in']:,.4g} J per input token" in text
    assert "per input token, same-7b: prefill and decode energy cannot be told apart" in text
    assert "J / input token (prefill)" in (tmp_path / "l.html").read_text()


@pytest.mark.process
def test_energy_per_token_in_console_and_html(server, tmp_path):
    """The per-model table is in the terminal (fits 120 columns) and on the HTML page, as the JSON has it."""
    html = tmp_path / "ledger.html"
    res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="energy"', "--no-cache",
                    "--price-per-gpu-hour", PRICE, "--html", html)
    assert res.returncode == 0, res.stderr
    d = _platform_ledger(server, "energy")
    lines = res.stdout.splitlines()
    assert max(len(x) for x in lines) <= 120
    head = next(i for i, x in enumerate(lines) if x.strip().startswith("model"))
    for m in d["models"]:
        row = next(x for x in lines[head:] if x.strip().startswith(m["model"]))
        assert f"{m['j_per_token_out']:,.3f}" in row and f"{m['tokens_out']:,.0f}" in row
    page = html.read_text()
    assert "By served model" in page and all(m["model"] in page for m in d["models"])


@pytest.mark.process
def test_power_cap_what_if(server):
    """--power-cap: inert where the power never reaches the cap (LLM decode at 150–300 W under 400 W); where it does,
    the saving and the slowdown predicted from the workload's own power and SM-clock samples, with a range."""
    d = _platform_ledger(server, "cap", "--power-cap", "400")
    dec = next(m for m in d["models"] if m["model"] == "decode-8b")["power_cap"]
    assert dec["state"] == "inert" and dec["saved_j"] is None and dec["max_w"] < 400
    assert "is inert" in dec["text"]
    d = _platform_ledger(server, "cap", "--power-cap", "500")
    tr = next(w for w in d["workloads"] if w["pod"] == "trainer")["power_cap"]
    gpus, _, law = CAP
    g = gpus[1]
    p, f, dt = g.cols["power"], g.cols["clock"] / 1000, 30.0
    f_cap = ((500 - law["a"]) / law["k"]) ** (1 / 3)  # the truth: the planted law, not the fit
    up = p > 500
    saved = float((p[up] * dt).sum() - 500 * (f[up] * dt).sum() / f_cap)
    added = float((f[up] * dt).sum() / f_cap - dt * up.sum())
    assert tr["state"] == "engaged" and tr["bound_j"] == pytest.approx(float(((p[up] - 500) * dt).sum()), rel=0.02)
    assert tr["saved_j"] == pytest.approx(saved, rel=0.02) and tr["added_s"] == pytest.approx(added, rel=0.02)
    lo, hi = tr["saved_j_range"]
    assert lo <= saved <= hi and (hi - lo) < 0.1 * saved  # the range holds the truth, and 5 W noise keeps it narrow
    assert "power and SM-clock samples" in tr["fit"]
    res = gpusleuth("fleet", "--prometheus", server.url, *WINDOW, "--selector", 'cluster="cap"', "--no-cache",
                    "--power-cap", "-3")
    assert res.returncode == 2 and "Traceback" not in res.stderr and "--power-cap" in res.stderr
