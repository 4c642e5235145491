"""A planted GPU cluster in a real Prometheus: history written as OpenMetrics, backfilled with
``promtool tsdb create-blocks-from openmetrics``, served by Debian's ``prometheus`` on 127.0.0.1.

Series are named and labelled exactly as dcgm-exporter (Kubernetes mode) and kube-state-metrics publish
them; idle and busy values are the real H100 scrapes in tests/fixtures/dcgm (nvidia_gpu_exporter on an
H100 80GB HBM3, idle and under load), converted to DCGM's units (MiB, %, W). Used by tests/test_fleet_prometheus.py
and benchmarks/fleet_prometheus_scale.py.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "dcgm"
PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
MODEL = "NVIDIA H100 80GB HBM3"
COLUMNS = ("util", "sm", "tensor", "fb_used", "fb_free", "power")
DCGM_NAMES = {"util": "DCGM_FI_DEV_GPU_UTIL", "sm": "DCGM_FI_PROF_SM_ACTIVE", "tensor": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
              "fb_used": "DCGM_FI_DEV_FB_USED", "fb_free": "DCGM_FI_DEV_FB_FREE", "power": "DCGM_FI_DEV_POWER_USAGE"}
GR_ENGINE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # a MIG instance's activity (it has no DCGM_FI_DEV_GPU_UTIL)
ENERGY = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"  # mJ since boot, a counter (written as a gauge: OpenMetrics wants
# a counter's samples to end in _total; the TSDB keeps no type)


def h100_scrape(state: str) -> dict[str, float]:
    """The real H100 scrape (idle or load) in DCGM units: util %, FB used/free MiB, power W."""
    from prometheus_client.parser import text_string_to_metric_families

    text = (FIXTURES / f"linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01__{state}.metrics").read_text()
    v = {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples if not s.labels.get("index")}
    mib = 2.0**20
    used = v["nvidia_smi_memory_used_bytes"] / mib
    return {"util": v["nvidia_smi_utilization_gpu_ratio"] * 100, "fb_used": round(used),
            "fb_free": round((v["nvidia_smi_memory_total_bytes"] - v["nvidia_smi_memory_reserved_bytes"]) / mib - used),
            "power": v["nvidia_smi_power_draw_watts"]}


@dataclass
class PlantedGpu:
    host: str
    gpu: int
    uuid: str
    t: np.ndarray  # epoch seconds
    cols: dict[str, np.ndarray]  # COLUMNS → values, NaN = no sample (a gap)
    owner: np.ndarray  # index into owners, -1 = no pod
    owners: list[tuple[str, ...]] = field(default_factory=list)  # (namespace, pod, container[, hpc_job])
    mig: tuple[str, str] | None = None  # (GPU_I_PROFILE, GPU_I_ID): a MIG instance; uuid is then its GPU's
    # "pod": dcgm-exporter's own namespace/pod/container labels (honorLabels, or a plain scrape job);
    # "operator": gpu-operator's ServiceMonitor without honorLabels — the pod's labels as exported_*, and
    # namespace/pod/container naming the exporter's own pod on every series; "old": dcgm-exporter
    # --use-old-namespace (pod_name, pod_namespace, container_name and a lower-case uuid), the target's
    # namespace/pod naming the exporter's pod
    style: str = "pod"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fmt(x: float) -> str:
    return repr(float(x))


def write_openmetrics(path: Path, clusters: dict[str, tuple[list[PlantedGpu], list[dict]]],
                      offset_s: float = 0.0, jitter_s: float = 0.0, seed: int = 1,
                      tokens: dict[str, list[dict]] | None = None) -> int:
    """Each cluster's series with a ``cluster`` label, one metric family after another (OpenMetrics forbids
    interleaving them); returns the samples written. ``offset_s`` and ``jitter_s`` scrape each planted
    sample that much after its grid time (± jitter, in ms), as a real scraper off the query grid does."""
    rng = np.random.default_rng(seed)
    n = 0

    def stamp(t: np.ndarray) -> list[str]:
        if not offset_s and not jitter_s:
            return [str(int(x)) for x in t]
        return [f"{x:.3f}" for x in t + offset_s + rng.uniform(-jitter_s, jitter_s, len(t))]

    with open(path, "w") as f:
        for col, name in {**DCGM_NAMES, "gr": GR_ENGINE, "energy": ENERGY, "clock": "DCGM_FI_DEV_SM_CLOCK"}.items():
            f.write(f"# TYPE {name} gauge\n")
            for cluster, g in ((c, g) for c, (gs, _) in clusters.items() for g in gs):
                if col not in g.cols:
                    continue
                vals = g.cols[col]
                # a series per owner (dcgm-exporter's pod labels change when the GPU changes hands)
                for oi in np.unique(g.owner):
                    ns, pod, cont, *job = g.owners[oi] if oi >= 0 else ("", "", "")
                    if g.style == "operator":
                        who = (f'container="nvidia-dcgm-exporter",namespace="gpu-operator",'
                               f'pod="nvidia-dcgm-exporter-{g.host}",job="nvidia-dcgm-exporter",'
                               f'service="nvidia-dcgm-exporter",endpoint="gpu-metrics"'
                               + (f',exported_container="{cont}",exported_namespace="{ns}",exported_pod="{pod}"'
                                  if pod else ""))
                    elif g.style == "old":  # dcgm-exporter --use-old-namespace, scraped by a plain ServiceMonitor
                        who = (f'container="nvidia-dcgm-exporter",namespace="monitoring",'
                               f'pod="dcgm-exporter-{g.host}",job="dcgm-exporter-old"'
                               + (f',container_name="{cont}",pod_namespace="{ns}",pod_name="{pod}"' if pod else ""))
                    else:
                        who = f'container="{cont}",namespace="{ns}",pod="{pod}",job="dcgm-exporter"'
                    uuid_label = "uuid" if g.style == "old" else "UUID"
                    labels = (f'cluster="{cluster}",gpu="{g.gpu}",{uuid_label}="{g.uuid}",pci_bus_id="00000000:{g.gpu:02X}:00.0",'
                              f'device="nvidia{g.gpu}",modelName="{MODEL}",Hostname="{g.host}",{who},'
                              f'instance="{g.host}:9400"' + (f',hpc_job="{job[0]}"' if job else "")
                              + (f',GPU_I_PROFILE="{g.mig[0]}",GPU_I_ID="{g.mig[1]}"' if g.mig else ""))
                    sel = (g.owner == oi) & ~np.isnan(vals)
                    if not sel.any():
                        continue
                    prefix = f"{name}{{{labels}}} "
                    f.write("".join(f"{prefix}{_fmt(v)} {t}\n" for v, t in zip(vals[sel], stamp(g.t[sel]))))
                    n += int(sel.sum())
        name = "kube_pod_container_resource_requests"
        f.write(f"# TYPE {name} gauge\n")
        for cluster, r in ((c, r) for c, (_, rs) in clusters.items() for r in rs):
            labels = (f'cluster="{cluster}",namespace="{r["namespace"]}",pod="{r["pod"]}",uid="{r["pod"]}-uid",container="{r["container"]}",'
                      f'node="{r["node"]}",resource="nvidia_com_gpu",unit="integer",job="kube-state-metrics",'
                      f'instance="ksm:8080"')
            prefix = f"{name}{{{labels}}} "
            f.write("".join(f"{prefix}{_fmt(r['gpus'])} {t}\n" for t in stamp(r["t"])))
            n += len(r["t"])
        # vLLM's token counters, scraped from the engine's pod (its namespace/pod are the target's labels)
        for col, name in (("generated", "vllm:generation_tokens_total"), ("prompt", "vllm:prompt_tokens_total")):
            f.write(f"# TYPE {name} gauge\n")
            for cluster, r in ((c, r) for c, rs in (tokens or {}).items() for r in rs):
                labels = (f'cluster="{cluster}",namespace="{r["namespace"]}",pod="{r["pod"]}",'
                          f'model_name="{r["model"]}",job="vllm",instance="{r["pod"]}:8000"')
                prefix = f"{name}{{{labels}}} "
                f.write("".join(f"{prefix}{_fmt(v)} {t}\n" for v, t in zip(r[col], stamp(r["t"]))))
                n += len(r["t"])
        f.write("# EOF\n")
    return n


def backfill(om: Path, data: Path, block_hours: int = 24) -> None:
    data.mkdir(parents=True, exist_ok=True)
    subprocess.run([PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", f"--max-block-duration={block_hours}h",
                    str(om), str(data)], check=True, capture_output=True, timeout=1800)


class RunningPrometheus:
    """``prometheus`` over a data directory on 127.0.0.1 (a free port); stopped and waited for on exit."""

    def __init__(self, data: Path, web_config: Path | None = None, tls: bool = False, max_samples: int = 50_000_000):
        self.data, self.web_config, self.max_samples = data, web_config, max_samples
        self.port = free_port()
        self.url = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"

    def __enter__(self) -> "RunningPrometheus":
        cfg = self.data.parent / f"prometheus-{self.port}.yml"
        cfg.write_text("global:\n  scrape_interval: 1h\nscrape_configs: []\n")
        cmd = [PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={self.data}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--storage.tsdb.retention.time=100y",
               f"--query.max-samples={self.max_samples}"]
        if self.web_config is not None:
            cmd.append(f"--web.config.file={self.web_config}")
        self.log = self.data.parent / f"prometheus-{self.port}.log"
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log, "wb"))
        deadline = time.monotonic() + 120
        import ssl

        unverified = ssl._create_unverified_context()  # only to see that it is up; the tests verify
        while True:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                urllib.request.urlopen(f"{self.url}/-/ready", timeout=2, context=unverified).read()
                break
            except OSError as exc:
                if "401" in str(exc):  # basic auth on: up, but refusing us
                    break
                assert time.monotonic() < deadline, self.log.read_text()[-3000:]
                time.sleep(0.3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# --- the planted cluster of the tests --------------------------------------------------------------------
def _gpu(out: list[PlantedGpu], t: np.ndarray, host: str, i: int, owners: list[tuple[str, ...]],
         owner: np.ndarray, busy: np.ndarray, sm_busy: np.ndarray, profiling: bool = True) -> PlantedGpu:
    idle, load = h100_scrape("idle"), h100_scrape("load")
    held = owner >= 0
    cols = {
        "util": np.where(busy, load["util"], idle["util"]).astype(float),
        "sm": np.where(busy, sm_busy, 0.0) if profiling else np.full(len(t), np.nan),
        "tensor": np.where(busy, sm_busy * 0.5, 0.0) if profiling else np.full(len(t), np.nan),
        # a pod that loaded its model keeps its memory while idle; a free GPU holds none
        "fb_used": np.where(held, load["fb_used"], idle["fb_used"]).astype(float),
        "fb_free": np.where(held, load["fb_free"], idle["fb_free"]).astype(float),
        "power": np.where(busy, load["power"], idle["power"]),
    }
    g = PlantedGpu(host, i, f"GPU-{host}-{i:04d}", t, cols, owner.astype(np.int32), owners)
    out.append(g)
    return g


def planted_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 0):
    """Seven H100s: an idle notebook (12 h) then a busy one on the same GPU, a part-time trainer on 2 GPUs
    (busy 09–17), a busy trainer whose exporter was down 04–06, an oversized inference server (SM 15–25 %),
    a low-activity embedder (SM 2–10 %) and a GPU no pod holds. Returns (gpus, kube requests)."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n, hour = len(t), (t - t0) / 3600
    full = np.zeros(n, np.int32)
    gpus: list[PlantedGpu] = []
    _gpu(gpus, t, "node-a", 0, [("research", "notebook-idle", "jupyter"), ("research", "notebook-b", "jupyter")],
         np.where(hour < 12, 0, 1), hour >= 12, rng.uniform(0.5, 0.9, n))
    for i in (1, 2):
        _gpu(gpus, t, "node-a", i, [("training", "trainer-parttime", "main")], full, (hour >= 9) & (hour < 17),
             rng.uniform(0.6, 0.95, n))
    g = _gpu(gpus, t, "node-a", 3, [("training", "trainer-busy", "main")], full, np.ones(n, bool),
             rng.uniform(0.6, 0.95, n))
    for c in g.cols.values():
        c[(hour >= 4) & (hour < 6)] = np.nan
    _gpu(gpus, t, "node-b", 0, [("inference", "server-small", "vllm")], full, np.ones(n, bool),
         rng.uniform(0.15, 0.25, n))
    _gpu(gpus, t, "node-b", 1, [], np.full(n, -1), np.zeros(n, bool), np.zeros(n))
    _gpu(gpus, t, "node-b", 2, [("inference", "embedder-low", "svc")], full, np.ones(n, bool),
         rng.uniform(0.02, 0.10, n))
    every = np.ones(n, bool)
    requests = [
        {"namespace": "research", "pod": "notebook-idle", "container": "jupyter", "node": "node-a", "gpus": 1, "t": t[hour < 12]},
        {"namespace": "research", "pod": "notebook-b", "container": "jupyter", "node": "node-a", "gpus": 1, "t": t[hour >= 12]},
        {"namespace": "training", "pod": "trainer-parttime", "container": "main", "node": "node-a", "gpus": 2, "t": t[every]},
        {"namespace": "training", "pod": "trainer-busy", "container": "main", "node": "node-a", "gpus": 1, "t": t[every]},
        {"namespace": "inference", "pod": "server-small", "container": "vllm", "node": "node-b", "gpus": 1, "t": t[every]},
        {"namespace": "inference", "pod": "embedder-low", "container": "svc", "node": "node-b", "gpus": 1, "t": t[every]},
        # requested, but the GPU it was given never shows this pod (the exporter's pod mapping missed it)
        {"namespace": "research", "pod": "ghost", "container": "main", "node": "node-c", "gpus": 1, "t": t[hour < 2]},
    ]
    return gpus, requests


def legacy_cluster(t0: int, hours: int = 24, step: int = 30):
    """Two GPUs of an HPC cluster whose dcgm-exporter runs without profiling metrics and without Kubernetes
    (no pod labels; its HPC job mapping labels GPU 0 ``hpc_job="job-17"`` for 12 h, busy the first 6), and
    no kube-state-metrics: the bad-input sentences' case, and ``--group-label``'s."""
    t = t0 + step * np.arange(hours * 3600 // step)
    hour = (t - t0) / 3600
    gpus: list[PlantedGpu] = []
    _gpu(gpus, t, "old-1", 0, [("", "", "", "job-17")], np.where(hour < 12, 0, -1), hour < 6, np.full(len(t), 0.7),
         profiling=False)
    _gpu(gpus, t, "old-1", 1, [], np.full(len(t), -1), np.zeros(len(t), bool), np.zeros(len(t)), profiling=False)
    return gpus


def mig_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 2) -> list[PlantedGpu]:
    """One H100 in MIG mode (dcgm-exporter gives each instance its GPU's UUID plus GPU_I_PROFILE/GPU_I_ID;
    FB and SM activity are the instance's own): a 3g.40gb busy at 15–20 % of its SMs with 6 GiB used (a
    1g.10gb would do), an idle 2g.20gb, and a 1g.10gb no pod holds."""
    rng = np.random.default_rng(seed)
    load = h100_scrape("load")
    t = t0 + step * np.arange(hours * 3600 // step)
    n = len(t)
    out = []
    for gi, (profile, total, owner, busy, used) in enumerate([
            ("3g.40gb", 40448, ("mlteam", "mig-oversized", "main"), True, 6 * 1024),
            ("2g.20gb", 20096, ("mlteam", "mig-idle", "main"), False, 1024),
            ("1g.10gb", 9984, None, False, 0)], start=1):
        sm = rng.uniform(0.15, 0.20, n) if busy else np.zeros(n)
        cols = {"util": np.full(n, load["util"] if busy else 0.0), "sm": sm, "tensor": sm / 2,
                "fb_used": np.full(n, float(used)), "fb_free": np.full(n, float(total - used)),
                "power": np.full(n, load["power"])}
        out.append(PlantedGpu("node-m", 0, "GPU-node-m-0000", t, cols,
                              np.full(n, 0 if owner else -1, np.int32), [owner] if owner else [], mig=(profile, str(gi))))
    return out


# --- the clusters people run (issue 34): other cadences, gpu-operator's labels, time-slicing, MIG without GPU_UTIL ----
def platform_cluster(t0: int, hours: int = 24, step: int = 60, style: str = "pod", seed: int = 3,
                     host: str = "node-p") -> list[PlantedGpu]:
    """Four H100s sampled every ``step`` s (Prometheus' default scrape interval is 60 s; many scrape at 15 s): an idle
    notebook (namespace lab) handed to another idle notebook at 12:00:30, a trainer busy all day whose exporter was down 03–05 (training), a part-time job
    busy 08–16 (training), and a GPU no pod holds. ``style`` is how the pod labels arrive (PlantedGpu.style)."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n, hour = len(t), (t - t0) / 3600
    full = np.zeros(n, np.int32)
    gpus: list[PlantedGpu] = []
    _gpu(gpus, t, host, 0, [("lab", "notebook", "jupyter"), ("lab", "notebook-2", "jupyter")], np.where(t - t0 < 12 * 3600 + 30, 0, 1),
         np.zeros(n, bool), np.zeros(n))
    g = _gpu(gpus, t, host, 1, [("training", "trainer", "main")], full, np.ones(n, bool), rng.uniform(0.6, 0.95, n))
    for c in g.cols.values():
        c[(hour >= 3) & (hour < 5)] = np.nan
    _gpu(gpus, t, host, 2, [("training", "job-parttime", "main")], full, (hour >= 8) & (hour < 16),
         rng.uniform(0.6, 0.95, n))
    _gpu(gpus, t, host, 3, [], np.full(n, -1), np.zeros(n, bool), np.zeros(n))
    for g in gpus:
        g.style = style
    return gpus


def missed_scrapes(g: PlantedGpu, every: int) -> int:
    """Drop every ``every``-th scrape of one GPU (a flaky exporter): gaps of one sample each; returns how many."""
    drop = np.zeros(len(g.t), bool)
    drop[every // 2::every] = True
    for c in g.cols.values():
        c[drop] = np.nan
    return int(drop.sum())


def sliced_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 4) -> list[PlantedGpu]:
    """Time-slicing (the device plugin's sharing.timeSlicing): dcgm-exporter repeats the shared GPU's series once per
    pod on it (NVIDIA/dcgm-exporter#587), same UUID, same values. GPU 0 is shared all day by pods in namespaces
    alpha and beta, a third (beta) joins from 12:00; it is busy 00–06 and idle after. GPU 1 is one alpha pod's
    alone, idle all day. Each sharing pod is planted as its own copy of the GPU, as the exporter writes it."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n, hour = len(t), (t - t0) / 3600
    busy, sm = hour < 6, rng.uniform(0.6, 0.95, n)
    gpus: list[PlantedGpu] = []
    for pod, present in ((("alpha", "share-a", "main"), np.ones(n, bool)), (("beta", "share-b", "main"), np.ones(n, bool)),
                         (("beta", "share-c", "main"), hour >= 12)):
        _gpu(gpus, t, "node-s", 0, [pod], np.where(present, 0, -1), busy, sm)
    for g in gpus[1:]:  # the same device: the copies' values are the first's, only the pod labels differ
        g.cols = {k: v.copy() for k, v in gpus[0].cols.items()}
        g.owner = np.where(g.owner >= 0, 0, -1).astype(np.int32)
    # where the third pod is absent its copy has no series: its samples are not written
    for c in gpus[2].cols.values():
        c[hour < 12] = np.nan
    gpus[2].owner[hour < 12] = 0
    _gpu(gpus, t, "node-s", 1, [("alpha", "alone", "main")], np.zeros(n, np.int32), np.zeros(n, bool), np.zeros(n))
    return gpus


def mig_gr_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 5) -> list[PlantedGpu]:
    """One H100 in MIG mode as dcgm-exporter reports it without the SM metrics in its counters CSV: per instance
    DCGM_FI_PROF_GR_ENGINE_ACTIVE and framebuffer, no DCGM_FI_DEV_GPU_UTIL (MIG has none) and no SM activity.
    A 3g.40gb busy 00–12 then idle, a 2g.20gb idle, a 1g.10gb busy at 5 % (low), and a 1g.10gb no pod holds."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n, hour = len(t), (t - t0) / 3600
    none = np.full(n, np.nan)
    out = []
    for gi, (profile, total, owner, gr, used) in enumerate([
            ("3g.40gb", 40448, ("vision", "mig-half", "main"), np.where(hour < 12, rng.uniform(0.4, 0.9, n), 0.0), 20480),
            ("2g.20gb", 20096, ("vision", "mig-idle", "main"), np.zeros(n), 1024),
            ("1g.10gb", 9984, ("speech", "mig-low", "main"), rng.uniform(0.03, 0.08, n), 4096),
            ("1g.10gb", 9984, None, np.zeros(n), 0)], start=1):
        cols = {"util": none, "sm": none, "tensor": none, "gr": gr,
                "fb_used": np.full(n, float(used)), "fb_free": np.full(n, float(total - used)),
                "power": np.full(n, 300.0)}
        out.append(PlantedGpu("node-g", 0, "GPU-node-g-0000", t, cols, np.full(n, 0 if owner else -1, np.int32),
                              [owner] if owner else [], mig=(profile, str(gi))))
    return out


def _counter(increments: np.ndarray, start: float, restarts: np.ndarray) -> np.ndarray:
    """A counter from its per-sample increments: from ``start``, restarting from zero where ``restarts`` (the
    sample after a restart holds only what accrued since)."""
    out = np.empty(len(increments))
    total = start
    for i, (inc, r) in enumerate(zip(increments, restarts)):
        total = inc if r else total + inc
        out[i] = total
    return out


def energy_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 6) -> tuple[list[PlantedGpu], list[dict]]:
    """Three H100s serving with vLLM, with dcgm-exporter's energy counter and vLLM's token counters. GPU 0: pod
    serve/vllm-llama (model llama-3-8b) generates 00–12 at ~420 W, idles at ~70 W after; its driver reloaded at
    10:00 (the energy counter restarts from zero). GPU 1: serve/vllm-qwen (qwen-7b) generates all day at ~300 W;
    its engine restarted at 15:00 (its token counters restart). GPU 2: no pod, ~60 W. Returns (gpus, token series:
    per pod the counters and their true increments)."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n, hour = len(t), (t - t0) / 3600
    gpus: list[PlantedGpu] = []
    plan = [("vllm-llama", "llama-3-8b", hour < 12, 420.0, 1500.0, hour == 10),
            ("vllm-qwen", "qwen-7b", np.ones(n, bool), 300.0, 800.0, np.zeros(n, bool)),
            (None, None, np.zeros(n, bool), 60.0, 0.0, np.zeros(n, bool))]
    tokens = []
    for i, (pod, model, busy, watts, rate, reload) in enumerate(plan):
        owners = [("serve", pod, "vllm")] if pod else []
        g = _gpu(gpus, t, "node-e", i, owners, np.zeros(n, np.int32) if pod else np.full(n, -1), busy,
                 rng.uniform(0.5, 0.9, n))
        power = np.where(busy, watts + rng.normal(0, 10, n), 70.0 if pod else watts)
        g.cols["power"] = power
        g.cols["energy"] = _counter(power * step * 1000, 4.2e11 + i * 1e10, reload)  # mJ
        if pod:
            gen = np.where(busy, rng.poisson(rate * step, n), 0).astype(float)
            prompt = np.where(busy, rng.poisson(2 * rate * step, n), 0).astype(float)
            restart = (hour == 15) if pod == "vllm-qwen" else np.zeros(n, bool)
            tokens.append({"namespace": "serve", "pod": pod, "model": model, "t": t,
                           "generated": _counter(gen, 1e6, restart), "prompt": _counter(prompt, 2e6, restart),
                           "gen_increments": gen, "prompt_increments": prompt, "power": power})
    return gpus, tokens


def cap_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 7) -> tuple[list[PlantedGpu], list[dict], dict]:
    """The power-cap what-if's two cases. GPU 0: serve/decode (model decode-8b, with vLLM's counters) decodes at
    150–300 W with its SM clock at 1.98 GHz: a 400 W cap never engages. GPU 1: train/trainer runs all day with its
    SM clock wandering 1.4–1.98 GHz and its power following P = 120 W + k·f³ (k: 700 W at 1.98 GHz) ± 5 W. Returns
    (gpus, token series, the trainer's true power law {"a", "k"})."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n = len(t)
    gpus: list[PlantedGpu] = []
    dec = _gpu(gpus, t, "node-c", 0, [("serve", "decode", "vllm")], np.zeros(n, np.int32), np.ones(n, bool),
               rng.uniform(0.3, 0.6, n))
    dec.cols["power"] = rng.uniform(150, 300, n)
    dec.cols["clock"] = np.full(n, 1980.0)
    law = {"a": 120.0, "k": 580.0 / 1.98**3}
    tr = _gpu(gpus, t, "node-c", 1, [("train", "trainer", "main")], np.zeros(n, np.int32), np.ones(n, bool),
              rng.uniform(0.6, 0.95, n))
    f = rng.uniform(1.4, 1.98, n)
    tr.cols["clock"] = f * 1000
    tr.cols["power"] = law["a"] + law["k"] * f**3 + rng.normal(0, 5, n)
    gen = rng.poisson(1000 * step, n).astype(float)
    tokens = [{"namespace": "serve", "pod": "decode", "model": "decode-8b", "t": t, "generated": np.cumsum(gen),
               "prompt": np.cumsum(gen * 2)}]
    return gpus, tokens, law


def split_cluster(t0: int, hours: int = 24, step: int = 30, seed: int = 8) -> tuple[list[PlantedGpu], list[dict], dict]:
    """Prefill and decode that can be told apart (issue 34, item 4): one H100, pod serve/vllm-mix (model mix-13b),
    whose prompt and generation token rates wander independently over the day (long-prompt RAG hours, chatty
    hours); its power is idle 70 W plus ``a`` J per prompt token and ``b`` J per generated token in the step, ± 10 W.
    And pod serve/vllm-same (model same-7b) on a second H100, whose prompts are always twice its generations: the
    same power law, but prefill and decode rise and fall together and cannot be told apart. Returns (gpus, token
    series, the true {"a", "b", "idle_w"})."""
    rng = np.random.default_rng(seed)
    t = t0 + step * np.arange(hours * 3600 // step)
    n = len(t)
    law = {"a": 0.05, "b": 0.30, "idle_w": 70.0}
    gpus: list[PlantedGpu] = []
    tokens = []
    for i, (pod, model) in enumerate((("vllm-mix", "mix-13b"), ("vllm-same", "same-7b"))):
        g = _gpu(gpus, t, "node-s", i, [("serve", pod, "vllm")], np.zeros(n, np.int32), np.ones(n, bool),
                 rng.uniform(0.3, 0.8, n))
        if pod == "vllm-mix":
            prompt_rate = 1100 + 900 * np.sin(2 * np.pi * (t - t0) / (5 * 3600))  # tokens/s, 200–2,000, 5 h waves
            gen_rate = 100 + rng.uniform(0, 900, n)  # tokens/s, 100–1,000, independent of the prompts
        else:
            gen_rate = 100 + rng.uniform(0, 900, n)
            prompt_rate = 2 * gen_rate
        prompt = rng.poisson(prompt_rate * step).astype(float)
        gen = rng.poisson(gen_rate * step).astype(float)
        power = law["idle_w"] + (law["a"] * prompt + law["b"] * gen) / step + rng.normal(0, 10, n)
        g.cols["power"] = power
        g.cols["energy"] = _counter(power * step * 1000, 3.9e11 + i * 1e10, np.zeros(n, bool))  # mJ
        tokens.append({"namespace": "serve", "pod": pod, "model": model, "t": t,
                       "generated": _counter(gen, 5e6, np.zeros(n, bool)),
                       "prompt": _counter(prompt, 9e6, np.zeros(n, bool)), "gen_increments": gen,
                       "prompt_increments": prompt, "power": power})
    return gpus, tokens, law
