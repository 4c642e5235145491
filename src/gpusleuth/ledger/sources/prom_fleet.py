"""dcgm-exporter and kube-state-metrics series from a Prometheus server → the GPU ledger's typed input.

Bounded memory, however long the window and however many GPUs: time is cut into epoch-aligned chunks
(``chunk_s``) and GPUs into batches (``gpus_per_query``, a regex on the UUID label, POSTed), so one
response holds at most ``gpus_per_query × chunk_s / step_s`` points per metric; each block goes straight
into the DuckDB cache (``ledger/sources/fleet_cache.py``) and the ledger reads GPUs back a batch at a time.
Chunks already cached are not fetched again (a re-run, or a longer history, is incremental).

Exactly one sample per grid step: every metric is asked as ``last_over_time(M[step - 1ms])``, so a step
takes the last sample scraped in the step before it, or none. Plain ``M`` would repeat a series' last value
for the server's lookback (5 min by default) after it ends: a pod's series would overlap its successor's
on the same GPU, and a dead exporter would look alive for 5 minutes. (``M and timestamp(M) > time() - step``
says the same but cost the server 10× more per query.) The step must therefore be at least the scrape
interval: :func:`survey` finds each device's from its samples per hour, and the default step is the coarsest
of them (a history scraped every 60 s read at 30 s would have no sample in every other step).

Who holds a GPU comes from dcgm-exporter's Kubernetes labels (``namespace``, ``pod``, ``container``;
``exported_*`` when Prometheus renamed them because the scrape target had its own — then ``namespace``/``pod``
are the exporter's own pod), or its HPC job label; several pods on one device at one step share a time-sliced
GPU (the cache stores them as one holder). A pod's request from
``kube_pod_container_resource_requests{resource="nvidia_com_gpu"}``. What is missing is said as a
sentence naming the exporter or flag that provides it.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.ledger.run.fleet_usage import COLUMN_DTYPE, SAMPLE_COLUMNS, FleetWindow, GpuSeries, Owner, PodRequest
from gpusleuth.ledger.sources.fleet_cache import FleetCache
from gpusleuth.ledger.sources.prom_client import PrometheusClient, PromSeries, TooManySamples

# sample column → dcgm-exporter's default counter name (etc/default-counters.csv)
DCGM_METRICS = {
    "util": "DCGM_FI_DEV_GPU_UTIL",
    "sm_active": "DCGM_FI_PROF_SM_ACTIVE",
    "tensor_active": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "fb_used_mib": "DCGM_FI_DEV_FB_USED",
    "fb_free_mib": "DCGM_FI_DEV_FB_FREE",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "gr_active": "DCGM_FI_PROF_GR_ENGINE_ACTIVE",  # a MIG instance's activity (no GPU_UTIL there)
    "energy_mj": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",  # a counter since boot; resets when the driver reloads
    "sm_clock_mhz": "DCGM_FI_DEV_SM_CLOCK",  # how power follows the clock: the power-cap what-if
}
# inference engines' token counters (by model_name, on the engine pod's namespace/pod target labels)
TOKEN_COUNTERS = {"generated": "vllm:generation_tokens_total", "prompt": "vllm:prompt_tokens_total"}
assert tuple(DCGM_METRICS) == SAMPLE_COLUMNS
KUBE_REQUESTS = "kube_pod_container_resource_requests"
ID_LABELS = ("UUID", "uuid")
# the owner label forms dcgm-exporter's series come in: (convention, namespace, pod, container labels), plain last
OWNER_FORMS = (("exported", "exported_namespace", "exported_pod", "exported_container"),  # a target with its own pod
               ("old", "pod_namespace", "pod_name", "container_name"),  # dcgm-exporter --use-old-namespace
               ("pod", "namespace", "pod", "container"))
HPC_LABEL = "hpc_job"  # dcgm-exporter --hpc-job-mapping-dir: the Slurm (or other HPC) job holding the GPU
# the series every device has one of (a MIG instance has no GPU_UTIL): their count per hour is the cadence
CADENCE_METRICS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "DCGM_FI_DEV_FB_USED")
NICE_S = (1, 2, 5, 10, 15, 20, 30, 60, 120, 300, 600, 900, 1800, 3600)  # scrape intervals people configure
MIN_STEP_S = 15  # a finer cadence is read at this step (the last sample of each step): the ledger needs no more
CADENCE_PROBES = 48  # hours of the window counted, spread over it
FALLBACK_STEP_S = 60  # the step when no device was seen at the hours counted
READ_SAMPLES = 1_000_000  # grid cells (GPU × step) the ledger holds at once: ~40 MB of columns  # dcgm-exporter; `uuid` with --use-old-namespace


@dataclass
class FleetQuery:
    url: str
    start_s: int
    end_s: int
    step_s: int = 30
    chunk_s: int = 6 * 3600
    gpus_per_query: int = 200
    parallel: int = 3  # queries in flight at once
    selector: str = ""  # extra label matchers for every series, e.g. 'cluster="prod"'
    group_label: str | None = None  # a job/user label to group by besides namespace/pod
    renamed_jobs: frozenset[str] = frozenset()  # scrape jobs whose pod labels arrive renamed (OWNER_FORMS)


@dataclass
class Survey:
    """What a window's series say before any sample is fetched: how often each device was sampled, and
    which owner labels they carry."""

    cadence: dict[int, int]  # seconds between a device's samples → devices sampled so
    renamed: dict[str, frozenset[str]]  # owner form (OWNER_FORMS) → jobs whose series carry its pod label
    pod_labels: bool  # some series carries a pod label of the workload
    hpc_jobs: bool  # some series carries dcgm-exporter's HPC job label
    queries: int
    refused: bool = False  # the server refused the cadence query as too many samples

    def step(self, chunk_s: int) -> int:
        """The step the cadence asks for: the coarsest device's interval (every live device has a sample in every
        step), at least MIN_STEP_S, rounded up to divide the chunk. No device seen at the hours counted: 60 s,
        Prometheus' default scrape interval (no cadence up to it reads as missing data)."""
        step = max([MIN_STEP_S, *self.cadence]) if self.cadence else FALLBACK_STEP_S
        while chunk_s % step:
            step += 1
        return step

    @property
    def conventions(self) -> list[str]:
        return [form for form, jobs in self.renamed.items() if jobs] + (["pod"] if self.pod_labels else []) + (
            [HPC_LABEL] if self.hpc_jobs else [])

    @property
    def renamed_jobs(self) -> frozenset[str]:
        """Jobs whose namespace/pod/container labels are the exporter's own pod (the workload's come renamed)."""
        return frozenset().union(*self.renamed.values())


def survey(client: PrometheusClient, start_s: int, end_s: int, selector: str = "") -> Survey:
    """Each device's cadence from its samples per hour, and the label conventions, in four small queries.

    ``count_over_time`` over an hour, at up to CADENCE_PROBES hours spread over the window, the most any of its
    series had (a time-sliced GPU's repeats are not added up; a pod change inside an hour only lowers that hour):
    a device present for a whole hour had 3600 / interval samples. Gaps only lower a count, so the largest
    is the device's cadence, snapped to the intervals people configure when within 10 %."""
    sel = f",{selector}" if selector else ""
    span = max(1, end_s - start_s)
    rng = min(3600, span)
    every = max(rng, -(-(span - rng) // CADENCE_PROBES)) if span > rng else rng
    # one metric after another (``or``): count_over_time drops the name, so a regex on names would collide
    counts = " or ".join(f"count_over_time({m}{{{selector}}}[{rng}s])" for m in CADENCE_METRICS)
    expr = f"max by (UUID, uuid, GPU_I_ID) ({counts})"
    most: dict[tuple[str, str, str], float] = {}
    try:
        counted = client.query_range(expr, start_s + rng, end_s, every)
    except TooManySamples:
        counted, refused = [], True
    else:
        refused = False
    for series in counted:
        _t, v = series.points()
        if len(v):
            m = series.metric
            key = (m.get("UUID", ""), m.get("uuid", ""), m.get("GPU_I_ID", ""))
            most[key] = max(most.get(key, 0.0), float(v.max()))
    cadence: dict[int, int] = {}
    for n in most.values():
        raw = rng / n if n >= 2 else float(rng)
        near = min(NICE_S, key=lambda x: abs(x - raw))
        sec = near if abs(near - raw) <= 0.1 * near else max(1, int(round(raw)))
        cadence[sec] = cadence.get(sec, 0) + 1
    dcgm = "|".join(DCGM_METRICS.values())
    renamed = {form: frozenset(client.label_values("job", f'{{__name__=~"{dcgm}",{pod}!=""{sel}}}', start_s, end_s))
               for form, _ns, pod, _c in OWNER_FORMS[:-1]}
    unrenamed = "".join(f',{pod}=""' for _f, _ns, pod, _c in OWNER_FORMS[:-1])
    jobs = frozenset().union(*renamed.values())
    # pod labels on the series of a job that renames the workload's are the exporter's own pod: not counted
    not_renamed = f',job!~"{"|".join(_regex_escape(j) for j in sorted(jobs))}"' if jobs else ""
    pods = client.label_values("pod", f'{{__name__=~"{dcgm}"{unrenamed},pod!=""{not_renamed}{sel}}}', start_s, end_s)
    hpc = client.label_values(HPC_LABEL, f'{{__name__=~"{dcgm}"{sel}}}', start_s, end_s)
    return Survey(cadence=dict(sorted(cadence.items())), renamed=renamed, pod_labels=bool(pods),
                  hpc_jobs=bool(hpc), queries=3 + len(renamed), refused=refused)


def _owner_of(labels: dict[str, str], group_label: str | None, renamed_jobs: frozenset[str] = frozenset()) -> Owner | None:
    """Who held the GPU, from the series' labels, in whichever of OWNER_FORMS they come. Where the workload's labels
    come renamed (gpu-operator's ServiceMonitor without honorLabels: ``exported_*``; dcgm-exporter
    --use-old-namespace: ``pod_name``…), ``namespace``/``pod`` name the exporter's own pod, so on such a job's
    series a GPU without the renamed pod label is held by no pod."""
    form = next((f for f in OWNER_FORMS[:-1] if labels.get(f[2])), None)
    if form is None and labels.get("job", "") in renamed_jobs:
        ns = pod = cont = ""
    else:
        ns, pod, cont = (labels.get(k, "") for k in (form or OWNER_FORMS[-1])[1:])
    group = labels.get(group_label, "") if group_label else ""
    if not pod and not group:
        return None
    return Owner(namespace=ns, pod=pod, container=cont, group=group)


def _device(labels: dict[str, str], id_label: str | None) -> str:
    """A GPU's UUID, or ``UUID/GPU_I_ID`` for a MIG instance (dcgm-exporter gives its instances the parent's UUID)."""
    uid = labels.get(id_label or "UUID", "")
    gi = labels.get("GPU_I_ID", "")
    return f"{uid}/{gi}" if uid and gi else uid


def _fresh(expr: str, step_s: int) -> str:
    """The last sample scraped in the step before each grid point, none if there was none (not the lookback's)."""
    return f"last_over_time({expr}[{int(step_s) * 1000 - 1}ms])"


def _regex_escape(s: str) -> str:
    out = []
    for ch in s:
        if ch in ".^$*+?()[]{}|\\":
            out.append("\\\\" + ch)
        elif ch == '"':
            out.append('\\"')
        else:
            out.append(ch)
    return "".join(out)


class PrometheusFleet:
    """Fetches what the cache lacks, then hands the ledger its window and GPUs a batch at a time."""

    def __init__(self, client: PrometheusClient, query: FleetQuery, cache: FleetCache,
                 progress: Callable[[int, int], None] | None = None):
        if query.step_s <= 0 or query.chunk_s % query.step_s:
            raise InputError(client.url, f"the chunk ({query.chunk_s} s) must be a multiple of the step ({query.step_s} s)")
        self.client, self.q, self.cache, self.progress = client, query, cache, progress
        self.start = query.start_s - query.start_s % query.step_s
        self.end = query.end_s - query.end_s % query.step_s
        if self.end <= self.start:
            raise InputError(client.url, "the time window is empty: --start must be before --end")
        self.queries = 0  # HTTP queries made (the cache test counts them)
        self._count = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, query.parallel), thread_name_prefix="gpusleuth-prom")

    # --- the whole fetch ------------------------------------------------------------------------------
    def open(self) -> FleetWindow:
        q = self.q
        first = self.start - self.start % q.chunk_s
        starts = list(range(first, self.end, q.chunk_s))
        done = self.cache.complete_chunks()
        todo = [s for s in starts if s not in done]
        notes: list[str] = []
        id_label = None
        try:
            for i, s in enumerate(todo, 1):
                id_label = self._fetch_chunk(s, s + q.chunk_s, id_label, notes) or id_label
                if self.progress:
                    self.progress(i, len(todo))
        finally:
            self._pool.shutdown(cancel_futures=True)
        metrics = self.cache.metrics_seen(starts)
        window = FleetWindow(server=self.client.url, start_s=self.start, end_s=self.end, step_s=q.step_s,
                             metrics=sorted(m for m in metrics if m != KUBE_REQUESTS),
                             has_kube_requests=KUBE_REQUESTS in metrics, group_label=q.group_label, notes=notes)
        window.cache = f"{len(starts) - len(todo)} of {len(starts)} time chunk(s) from the cache"
        self._gpu_ids = self.cache.gpu_ids(self.start, self.end)
        window.gpus = len(self._gpu_ids)
        if not self._gpu_ids:
            sel = f"{{{q.selector}}}" if q.selector else ""
            raise InputError(self.client.url, f"no dcgm-exporter series ({DCGM_METRICS['util']}{sel}) between "
                             f"{_iso(self.start)} and {_iso(self.end)}: is dcgm-exporter scraped by this server "
                             "(its ServiceMonitor / scrape job), and is the window right?")
        window.requests = self.cache.requests(self.start, self.end)
        window.tokens = self.cache.tokens(self.start, self.end)
        return window

    def batches(self, size: int | None = None) -> Iterator[list[GpuSeries]]:
        """GPUs a batch at a time, at most READ_SAMPLES grid cells per batch however long the window."""
        steps = max(1, (self.end - self.start) // self.q.step_s)
        size = size or max(1, min(self.q.gpus_per_query, READ_SAMPLES // steps))
        for i in range(0, len(self._gpu_ids), size):
            yield list(self.cache.series(self._gpu_ids[i:i + size], self.start, self.end))

    # --- one chunk ------------------------------------------------------------------------------------
    def _fetch_chunk(self, c0: int, c1: int, id_label: str | None, notes: list[str]) -> str | None:
        q, cache = self.q, self.cache
        sel = q.selector
        cache.begin_chunk(c0, c1)
        names = "|".join(DCGM_METRICS.values())
        found = self._call(self.client.series, f'{{__name__=~"{names}"{"," + sel if sel else ""}}}', c0, c1 - 1)
        gpus: dict[str, dict[str, str]] = {}
        parent: dict[str, str] = {}  # device key → the GPU's UUID (a MIG instance's series carry its GPU's)
        present: set[str] = set()
        for labels in found:
            id_label = id_label or next((k for k in ID_LABELS if labels.get(k)), None)
            uid = _device(labels, id_label)
            if not uid:
                continue
            present.add(labels.get("__name__", ""))
            parent[uid] = labels.get(id_label or "UUID", "")
            gpus.setdefault(uid, {"host": labels.get("Hostname") or labels.get("hostname") or labels.get("instance", ""),
                                  "gpu": labels.get("gpu", ""), "model": labels.get("modelName", ""),
                                  "mig_profile": labels.get("GPU_I_PROFILE", "")})
        cache.add_gpus(gpus)
        uuids = sorted(gpus)
        n = (c1 - c0) // q.step_s
        for b in range(0, len(uuids), q.gpus_per_query):
            batch = uuids[b:b + q.gpus_per_query]
            where = {u: i for i, u in enumerate(batch)}
            cols = {c: np.full((len(batch), n), np.nan, COLUMN_DTYPE[c]) for c in SAMPLE_COLUMNS}
            owner = np.full((len(batch), n), -1, np.int32)
            wanted = sorted({parent[u] for u in batch})
            matcher = f'{id_label}=~"{"|".join(_regex_escape(u) for u in wanted)}"' + (f",{sel}" if sel else "")
            # the batch's metrics are asked together: the server evaluates the next while this process parses one
            asked = {col: self._pool.submit(self._range, _fresh(f"{name}{{{matcher}}}", q.step_s), c0, c1 - q.step_s)
                     for col, name in DCGM_METRICS.items() if name in present}
            for col, answer in asked.items():
                for series in answer.result():
                    g = where.get(_device(series.metric, id_label))
                    if g is None:
                        continue
                    t, vals = series.points()
                    if not len(t):
                        continue
                    k = np.rint((t - c0) / q.step_s).astype(np.int64)
                    ok = (k >= 0) & (k < n)
                    cols[col][g, k[ok]] = np.where(vals >= 2.0**47, np.nan, vals)[ok]  # DCGM blank sentinels
                    o = _owner_of(series.metric, q.group_label, q.renamed_jobs)
                    if o is not None:
                        # a time-sliced GPU has a series per pod sharing it at the same steps: they hold it together
                        oid, kk = cache.owner_id(o), k[ok]
                        cur = owner[g, kk]
                        clash = (cur >= 0) & (cur != oid)
                        owner[g, kk[~clash]] = oid
                        for other in np.unique(cur[clash]):
                            owner[g, kk[clash & (cur == other)]] = cache.holder_id(cache.members(int(other)) | {oid})
            cache.add_samples(batch, c0, cols, owner)
        reqs = self._requests(c0, c1)
        if reqs is not None:
            present.add(KUBE_REQUESTS)
            cache.add_requests(c0, reqs)
        if self._tokens(c0, c1):
            present.add(TOKEN_COUNTERS["generated"])
        cache.end_chunk(c0, c1, sorted(present))
        return id_label

    def _requests(self, c0: int, c1: int) -> list[PodRequest] | None:
        """kube-state-metrics' GPU requests in one chunk, as presence segments per pod (None: no such series)."""
        sel = f',{self.q.selector}' if self.q.selector else ""
        base = f'{KUBE_REQUESTS}{{resource="nvidia_com_gpu"{sel}}}'
        expr = f"max by (namespace, pod, container, node) ({_fresh(base, self.q.step_s)})"
        out: list[PodRequest] = []
        got_any = False
        for series in self._range(expr, c0, c1 - self.q.step_s):
            got_any = True
            tf, g = series.points()
            if not len(tf):
                continue
            t = tf.astype(np.int64)
            cut = np.flatnonzero((np.diff(t) != self.q.step_s) | (np.diff(g) != 0)) + 1
            m = series.metric
            for a, b in zip(np.r_[0, cut], np.r_[cut, len(t)]):
                out.append(PodRequest(namespace=m.get("namespace", ""), pod=m.get("pod", ""),
                                      container=m.get("container", ""), node=m.get("node", ""), gpus=float(g[a]),
                                      samples=int(b - a), first_s=int(t[a]), last_s=int(t[b - 1])))
        return out if got_any else None

    def _tokens(self, c0: int, c1: int) -> bool:
        """The engines' token counters in one chunk, one value per step per (namespace, pod, model), into the cache."""
        sel = f",{self.q.selector}" if self.q.selector else ""
        n = (c1 - c0) // self.q.step_s
        rows: dict[tuple[str, str, str], dict[str, np.ndarray]] = {}
        for col, name in TOKEN_COUNTERS.items():
            expr = f"sum by (namespace, pod, model_name) ({_fresh(f'{name}{{{sel[1:]}}}', self.q.step_s)})"
            for series in self._range(expr, c0, c1 - self.q.step_s):
                t, v = series.points()
                if not len(t):
                    continue
                m = series.metric
                key = (m.get("namespace", ""), m.get("pod", ""), m.get("model_name", ""))
                cols = rows.setdefault(key, {c: np.full(n, np.nan) for c in TOKEN_COUNTERS})
                k = np.rint((t - c0) / self.q.step_s).astype(np.int64)
                ok = (k >= 0) & (k < n)
                cols[col][k[ok]] = v[ok]
        if rows:
            self.cache.add_tokens(c0, rows)
        return bool(rows)

    # --- queries, split when the server says they are too big -------------------------------------------
    def _range(self, expr: str, start: int, end: int) -> list[PromSeries]:
        try:
            with self._count:
                self.queries += 1
            return self.client.query_range(expr, start, end, self.q.step_s)
        except TooManySamples:
            if end - start < 2 * self.q.step_s:
                raise InputError(self.client.url, "the server refuses even one step of this query as too many "
                                 "samples: lower --gpus-per-query") from None
            mid = start + ((end - start) // 2 // self.q.step_s) * self.q.step_s
            return self._range(expr, start, mid) + self._range(expr, mid + self.q.step_s, end)

    def _call(self, fn: Callable[..., list[dict[str, str]]], *args: object) -> list[dict[str, str]]:
        self.queries += 1
        return fn(*args)


def _iso(t: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
