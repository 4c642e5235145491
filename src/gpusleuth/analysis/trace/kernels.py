"""Kernel breakdown: where device time went, by kernel name and by family.

Per name: count, total, mean, median, min, max of *individual launches* (HTA's table re-aggregates
per-name totals, so its max/min/std stop meaning anything once there are more than ten names). Families
— communication (NCCL/RCCL, old and new names), Triton, CUDA-graph launched, tensor-core GEMM/conv and
their math precision — are read once per distinct name, then summed with ``bincount``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpusleuth.sources.kineto.model import KERNEL

from . import classify as C
from .op_dtype import DTYPES, launch_op_dtypes
from .prep import COMM, Prepared

SHORT_KERNEL_NS = 10_000
TOP_N = 15


@dataclass(frozen=True)
class KernelRow:
    """One kernel name's launches: statistics of individual launches, not of per-name totals."""

    name: str
    count: int
    total_s: float
    share: float  # of all kernel time
    mean_us: float
    median_us: float
    min_us: float
    max_us: float
    family: str  # "communication", "triton", "tensor-core bf16", "gemm fp32", "other", …


@dataclass(frozen=True)
class FamilyShare:
    count: int
    time_s: float
    share: float  # of all kernel time


@dataclass(frozen=True)
class KernelFamilies:
    communication: FamilyShare
    tensor_core: FamilyShare
    triton: FamilyShare
    cuda_graph: FamilyShare
    driver_api: FamilyShare  # other kernels launched with cuLaunchKernel (CuPy, Numba, nvFuser, offload)


@dataclass(frozen=True)
class ShortKernels:
    threshold_us: float
    count: int
    count_share: float  # of kernels
    time_share: float  # of kernel time


@dataclass(frozen=True)
class KernelBreakdown:
    """Where device time went, by kernel name and family: the ``kernels`` entry of a rank's JSON."""

    kernels: int
    distinct_names: int
    kernel_time_s: float
    top: list[KernelRow]  # the TOP_N names by total time
    families: KernelFamilies
    short_kernels: ShortKernels | None  # None without kernels
    precision_s: dict[str, float]  # GEMM/conv/attention seconds per math precision, largest first
    precision_share_of_gemm: dict[str, float]  # empty without GEMM time
    tensor_core_share: float | None  # of kernel time; None without kernel time
    precision_from_op_share: float | None  # GEMM time whose precision came from its op's dtype; None without GEMMs


_NO_FAMILY = FamilyShare(count=0, time_s=0.0, share=0.0)
NO_KERNELS = KernelBreakdown(
    kernels=0, distinct_names=0, kernel_time_s=0.0, top=[],
    families=KernelFamilies(*[_NO_FAMILY] * 5),
    short_kernels=None,
    precision_s={}, precision_share_of_gemm={}, tensor_core_share=None, precision_from_op_share=None)


def median_by_group(codes: np.ndarray, values: np.ndarray, ngroups: int) -> np.ndarray:
    """Median of ``values`` per group code, vectorized: sort by (code, value), pick the middle(s). The same
    float64 as ``np.median`` of each group (the mean of its two middle values, or its middle one); NaN for
    a code with no values."""
    order = np.lexsort((values, codes))
    v = values[order].astype(np.float64)
    counts = np.bincount(codes, minlength=ngroups)
    first = np.r_[0, np.cumsum(counts)[:-1]]
    lo = first + (counts - 1) // 2
    hi = first + counts // 2
    med = np.full(ngroups, np.nan)
    ok = counts > 0
    med[ok] = (v[lo[ok]] + v[hi[ok]]) / 2
    return med


def breakdown(p: Prepared) -> KernelBreakdown:
    names = p.trace.names
    km = p.kind == KERNEL
    if not km.any():
        return NO_KERNELS
    code = p.name[km]
    dur = p.dur[km]
    cat = p.cat[km]
    # name codes are dense small ints: group by them directly (no hashing/sorting of the rows)
    present = np.bincount(code, minlength=len(names)) > 0
    uniq = np.flatnonzero(present)
    remap = np.full(len(names) + 1, -1, np.int64)
    remap[uniq] = np.arange(len(uniq))
    inv = remap[code]
    ng = len(uniq)
    count = np.bincount(inv, minlength=ng)
    tot = np.bincount(inv, weights=dur.astype(np.float64), minlength=ng)
    mn = np.full(ng, np.iinfo(np.int64).max)
    mx = np.zeros(ng, np.int64)
    np.minimum.at(mn, inv, dur)
    np.maximum.at(mx, inv, dur)
    med = median_by_group(inv, dur, ng)
    total = float(dur.sum())
    # families, per distinct name
    uname = [names[c] for c in uniq]
    g = _gemm_rows(p, np.flatnonzero(km), inv, uname)
    tc_rows = g.tensor_core
    triton = np.array([C.is_triton(n) for n in uname], bool)
    comm_name = np.bincount(inv, weights=(cat == COMM).astype(np.float64), minlength=ng) > 0
    # launch-API families: CUDA graphs and driver-API (Triton) launches, from the launching call's name
    launch_rows = p.launch[km]
    lname = np.where(launch_rows >= 0, p.trace.events["name"][np.maximum(launch_rows, 0)], -1)
    graph_tab = np.append(C.lookup(names, lambda n: n in ("cudaGraphLaunch", "cuGraphLaunch", "hipGraphLaunch")),
                          False)
    drv_tab = np.append(C.lookup(names, lambda n: n.startswith("cuLaunchKernel")), False)
    by_graph = graph_tab[lname]
    # Triton by name only: cuLaunchKernel also launches CuPy, Numba, nvFuser and every OpenMP/OpenACC
    # offload kernel (held-out Nsight exports of nvc-compiled solvers showed "triton 100%"); those are
    # counted apart as driver-API launches.
    by_triton = triton[inv]
    by_driver = drv_tab[lname] & ~by_triton

    def share(mask_rows: np.ndarray) -> FamilyShare:
        t = float(dur[mask_rows].sum())
        return FamilyShare(count=int(mask_rows.sum()), time_s=t / 1e9, share=t / total if total else 0.0)

    prec_time: dict[str, float] = {}
    for pr, t in g.by_precision.items():
        prec_time[pr] = prec_time.get(pr, 0.0) + float(dur[t].sum())
    gemm_time = sum(prec_time.values())
    # how much of the GEMM time had its op's dtype (record_shapes) rather than the kernel name alone
    from_op = float(dur[g.from_op].sum()) / gemm_time if gemm_time else None
    top = np.argsort(-tot, kind="stable")[:TOP_N]
    short = dur < SHORT_KERNEL_NS
    return KernelBreakdown(
        kernels=int(len(dur)),
        distinct_names=ng,
        kernel_time_s=total / 1e9,
        top=[KernelRow(
            name=uname[i],
            count=int(count[i]),
            total_s=float(tot[i]) / 1e9,
            share=float(tot[i]) / total if total else 0.0,
            mean_us=float(tot[i]) / int(count[i]) / 1e3,
            median_us=float(med[i]) / 1e3,
            min_us=int(mn[i]) / 1e3,
            max_us=int(mx[i]) / 1e3,
            family=_family(bool(comm_name[i]), bool(triton[i]), *g.by_name.get(int(i), (False, None))),
        ) for i in top.tolist()],
        families=KernelFamilies(
            communication=share(cat == COMM),
            tensor_core=share(tc_rows),
            triton=share(by_triton),
            cuda_graph=share(by_graph),
            driver_api=share(by_driver),
        ),
        short_kernels=ShortKernels(threshold_us=SHORT_KERNEL_NS / 1e3, count=int(short.sum()),
                                   count_share=float(short.mean()),
                                   time_share=float(dur[short].sum() / total) if total else 0.0),
        precision_s={k: v / 1e9 for k, v in sorted(prec_time.items(), key=lambda kv: -kv[1])},
        precision_share_of_gemm={k: v / gemm_time for k, v in prec_time.items()} if gemm_time else {},
        tensor_core_share=float(dur[tc_rows].sum() / total) if total else None,
        precision_from_op_share=from_op,
    )


def _family(comm: bool, triton: bool, tc: bool, prec: str | None) -> str:
    if comm:
        return "communication"
    if triton:
        return "triton"
    if tc:
        return f"tensor-core {prec}" if prec else "tensor-core"
    if prec:
        return f"gemm {prec}"
    return "other"


@dataclass
class _GemmRows:
    by_precision: dict[str, np.ndarray]  # kernel-row indices per precision
    tensor_core: np.ndarray  # row mask
    by_name: dict[int, tuple[bool, str | None]]  # name index → (tensor core, precision of most of its time)
    from_op: np.ndarray  # GEMM rows whose launching op's dtype was known


def _gemm_rows(p: Prepared, krows: np.ndarray, inv: np.ndarray, uname: list[str]) -> _GemmRows:
    """Each kernel row's GEMM precision from its launching op's dtype and the kernel's name
    (``classify.kernel_precision``), evaluated once per distinct (name, op dtype) pair."""
    gemm_name = np.array([C.is_gemm(n) for n in uname] + [False], bool)
    gidx = np.flatnonzero(gemm_name[inv])
    dt = launch_op_dtypes(p, krows[gidx])
    key = inv[gidx].astype(np.int64) * (len(DTYPES) + 1) + (dt.astype(np.int64) + 1)
    ukey, kinv = np.unique(key, return_inverse=True)
    by_prec: dict[str, list[np.ndarray]] = {}
    tc_rows = np.zeros(len(inv), bool)
    best: dict[int, tuple[float, bool, str | None]] = {}
    durs = p.dur[krows]
    for j, k in enumerate(ukey.tolist()):
        ni, dcode = divmod(k, len(DTYPES) + 1)
        pr = C.kernel_precision(uname[ni], DTYPES[dcode - 1] if dcode else None)
        rows = gidx[kinv == j]
        tc = pr in C.TENSOR_CORE_PRECISIONS if pr else C.is_tensor_core(uname[ni])
        tc_rows[rows] = tc
        if pr:
            by_prec.setdefault(pr, []).append(rows)
        t = float(durs[rows].sum())
        if t >= best.get(ni, (-1.0, False, None))[0]:
            best[ni] = (t, tc, pr)
    return _GemmRows(by_precision={k: np.concatenate(v) for k, v in by_prec.items()}, tensor_core=tc_rows,
                     by_name={i: (b[1], b[2]) for i, b in best.items()}, from_op=gidx[dt >= 0])
