#!/usr/bin/env python
"""Exercise gpusleuth's real NVML path on an NVIDIA GPU machine, in one command.

    python scripts/gpu_check.py [--out DIR]          # default DIR: ./gpu_check_out

Why this exists: the NVML sampler is unit-tested on machines without a GPU through a pynvml stand-in fed
with *synthetic* values (``tests/fixtures/nvml/``). This script is the other half — run it once on a real
GPU (H100/H200 usually) and it

0. checks CUDA is usable from torch (a kernel runs and its result comes back): without it nothing below
   proves the GPU path, so it FAILS (exit 1), never skips;
1. opens ``NvmlSampler.open()`` and prints what the card is, and NVML's return code for every field id
   the sampler asks for (drivers before R575 answer INVALID_ARGUMENT / NOT_SUPPORTED for 269–271);
2. times every NVML call the sampler makes (median/p95 µs over ~200 calls), because NVML calls take the
   driver's lock and the sampler's design (one field batch per tick, processes only every few seconds)
   rests on their cost (``shared/reference/telemetry.md`` §1.3, §8: none of it was measured by us);
3. measures how often power, instant power, energy and utilization really change (Zeus's method: read
   back to back, look at the intervals between changes), which bounds the useful sampling rate;
4. with torch + CUDA, runs a ~5 s bf16 matmul load in a child process while sampling at 10 Hz through
   ``NvmlSampler.sample``, so utilization, power and GPM values are non-trivial, and checks the child's
   PID shows up in the per-process GPU memory;
5. runs ``gpusleuth run --out DIR/gpu_run -- python -m gpusleuth.demo.job --planted --steps 40`` and
   checks the run directory has ``gpu`` rows;
6. writes the RAW NVML answers of step 4, in the fixture format of ``tests/fixtures/nvml/README.md``,
   to ``DIR/<gpu>_<driver>.json.gz`` (copy it into ``tests/fixtures/nvml/`` to replace the synthetic
   ones), replays it through the tests' stand-in and checks the replay gives the rows seen live;
7. a profiler probe: one short trace per case (bf16, fp16, fp32 with TF32 off and on, fp8 where the card
   has it, ``.item()``, pageable and pinned H2D, a tiny-kernel loop), each kernel and launch printed with
   gpusleuth's classification and checked against what the case did; the traces are kept under
   ``DIR/fixtures/traces/`` — copy them to ``tests/fixtures/gpu_check/traces/`` and
   ``tests/test_gpu_check_script.py`` re-judges them on every change;
8. the planted GPU scenarios (``scenarios/gpu_*.py``) recorded with ``gpusleuth run``: each must get its
   planted cause as the top finding and a prediction no larger than its fixed twin's measured speed-up
   (both twins are kept under ``DIR/scenarios``; ``tests/test_gpu_recorded_runs.py`` holds the H200 ones), and their runs must have per-step CUDA event times, the hook's FLOP
   count, an MFU, energy and (Hopper+) GPM columns, and no hook error;
9. prints a PASS/FAIL summary (also ``DIR/gpu_check.json``). Budget: under 10 minutes on one GPU.

Exit status: 0 all checks passed, 1 a check failed, 2 no GPU here (one line says why).

The raw values are captured by handing the sampler a *recording proxy* of ``pynvml`` instead of the module:
the fixture then holds exactly the calls the sampler made, with the same arguments, in the same order —
which is what the stand-in must replay.
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

REPO = Path(__file__).resolve().parents[1]
if (REPO / "src" / "gpusleuth").is_dir() and str(REPO / "src") not in sys.path:
    sys.path.insert(0, str(REPO / "src"))  # works from a checkout even before `pip install -e .`

from gpusleuth.recorder.nvml import NvmlSampler  # noqa: E402
from gpusleuth.recorder.nvml_codes import FIELDS, GPM_METRICS  # noqa: E402

FORMAT = "gpusleuth-nvml-fixture/1"
PERMANENT = {2: "InvalidArgument", 3: "NotSupported", 4: "NoPermission", 13: "FunctionNotFound"}  # nvml.py's
MS = 1_000_000

# per-tick NVML calls → how their answer is stored in a fixture tick (see tests/fixtures/nvml/README.md)
TICK_KEYS = ("util", "memory", "power_mw", "temp_c", "clock", "clock_event_reasons", "fields")

LOAD = """
import sys, time
import torch
if not torch.cuda.is_available():
    print("nocuda", flush=True)
    sys.exit(3)
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
(a @ b)
torch.cuda.synchronize()
print("ready", flush=True)
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    for _ in range(16):
        c = a @ b
    torch.cuda.synchronize()
"""


# --------------------------------------------------------------------------- CUDA usable
CUDA_PROBE = """
import json, sys
try:
    import torch
except ImportError:
    print(json.dumps({"ok": False, "why": "torch is not installed"})); sys.exit(0)
if not torch.cuda.is_available():
    print(json.dumps({"ok": False, "why": f"torch {torch.__version__} has no usable CUDA "
                      f"(built for CUDA {torch.version.cuda})"})); sys.exit(0)
x = torch.arange(1024, device="cuda", dtype=torch.float32)
got = float((x * 2).sum().item())
p = torch.cuda.get_device_properties(0)
print(json.dumps({"ok": got == 1023 * 1024, "why": f"kernel result {got}", "name": p.name,
                  "cc": [p.major, p.minor], "torch": torch.__version__, "cuda": torch.version.cuda}))
"""


def cuda_usable(timeout_s: float = 180) -> dict:
    """Whether torch can run a kernel on the GPU and read its result back (in a child: a broken CUDA
    install can hang or abort the interpreter)."""
    try:
        res = subprocess.run([sys.executable, "-c", CUDA_PROBE], capture_output=True, text=True,
                             timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"ok": False, "why": f"CUDA initialisation did not finish in {timeout_s:.0f} s"}
    line = (res.stdout.strip().splitlines() or [""])[-1]
    try:
        return json.loads(line)
    except ValueError:
        return {"ok": False, "why": f"the CUDA probe died (exit {res.returncode}): {res.stderr.strip()[-300:]}"}


# --------------------------------------------------------------------------- NVML field return codes
def field_returns(nv: Any, handles: list[tuple[int, Any]]) -> dict[str, dict[str, str]]:
    """NVML's answer for every field id the sampler asks for, per GPU: SUCCESS or the error's name. This is
    what tells an R535–R570 driver (no 269–271, no 197/198 before R555) from a current one."""
    names = {1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION", 6: "NOT_FOUND",
             9: "DRIVER_NOT_LOADED", 10: "TIMEOUT", 12: "LIBRARY_NOT_FOUND", 13: "FUNCTION_NOT_FOUND",
             15: "GPU_IS_LOST", 999: "UNKNOWN"}  # nvmlReturn_t (nvml.h)
    ids = sorted(set(FIELDS.values()))
    out: dict[str, dict[str, str]] = {}
    for index, h in handles:
        try:
            vals = nv.nvmlDeviceGetFieldValues(h, ids)
            out[str(index)] = {str(fid): ("SUCCESS" if v.nvmlReturn == 0 else names.get(v.nvmlReturn, str(v.nvmlReturn)))
                               for fid, v in zip(ids, vals)}
        except Exception as e:  # noqa: BLE001 - reported, the check goes on
            out[str(index)] = {"*": f"{type(e).__name__}: {e}"}
    return out


# --------------------------------------------------------------------------- profiler probe
PROBE = """
import gzip, json, os, shutil, sys
import torch
from torch.profiler import ProfilerActivity, profile
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
dev = "cuda"
cc = torch.cuda.get_device_capability(0)
N = 2048

def mm(dtype, tf32=None):
    def run():
        if tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = tf32
        a = torch.randn(N, N, device=dev, dtype=dtype)
        b = torch.randn(N, N, device=dev, dtype=dtype)
        for _ in range(4):
            a @ b
    return run

def fp8():
    a = torch.randn(N, N, device=dev).to(torch.float8_e4m3fn)
    b = torch.randn(N, N, device=dev).to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device=dev)
    for _ in range(4):
        torch._scaled_mm(a, b.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

def item():
    x = torch.randn(1 << 20, device=dev)
    for _ in range(8):
        float(x.sum().item())

def h2d(pinned):
    def run():
        t = torch.randn(1 << 22)
        if pinned:
            t = t.pin_memory()
        for _ in range(4):
            t.to(dev, non_blocking=pinned)
        torch.cuda.synchronize()
    return run

def tiny():
    x = torch.zeros(16, device=dev)
    for _ in range(300):
        x.add_(1)

cases = {"bf16": mm(torch.bfloat16), "fp16": mm(torch.float16), "fp32_tf32_off": mm(torch.float32, False),
         "fp32_tf32_on": mm(torch.float32, True), "item": item, "h2d_pageable": h2d(False),
         "h2d_pinned": h2d(True), "tiny_kernels": tiny}
if cc >= (8, 9) and hasattr(torch, "float8_e4m3fn"):
    cases["fp8"] = fp8
done = {}
for name, fn in cases.items():
    try:
        fn(); torch.cuda.synchronize()  # warm-up: cuBLAS handles, allocator
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True) as prof:
            fn()
            torch.cuda.synchronize()
        path = os.path.join(out, name + ".json")
        prof.export_chrome_trace(path)
        with open(path, "rb") as f, gzip.open(path + ".gz", "wb") as g:
            shutil.copyfileobj(f, g)
        os.remove(path)
        done[name] = path + ".gz"
    except Exception as e:
        done[name] = f"error: {type(e).__name__}: {e}"
torch.backends.cuda.matmul.allow_tf32 = False
print(json.dumps({"cases": done, "cc": list(cc), "name": torch.cuda.get_device_name(0)}))
"""

#: what each probe case must show: (the GEMM precision with most time, or a check on the trace's rows)
PROBE_EXPECT = {"bf16": "bf16", "fp16": "fp16", "fp32_tf32_off": "fp32", "fp32_tf32_on": "tf32", "fp8": "fp8"}


def probe_table(path: Path) -> dict:
    """One probe trace through gpusleuth: each distinct kernel with its launch call and classification,
    each memcpy with its category, the sync calls, the GEMM precision split and the short-kernel share."""
    from gpusleuth.analysis.trace import classify as C
    from gpusleuth.analysis.trace.kernels import breakdown
    from gpusleuth.analysis.trace.prep import prepare
    from gpusleuth.sources.kineto import load_trace
    from gpusleuth.sources.kineto.model import KERNEL, MEMCPY, RUNTIME

    tr = load_trace(path).trace
    p = prepare(tr)
    k = breakdown(p)
    ev = tr.events
    names = tr.names
    rows: dict[tuple[str, str, str], int] = {}
    for i in range(p.n):
        launch = names[ev["name"][p.launch[i]]] if p.launch[i] >= 0 else "(no launch in trace)"
        name = names[p.name[i]]
        if p.kind[i] == KERNEL:
            prec = C.precision(name)
            what = ("gemm " + (prec or "?") + (" tensor-core" if C.is_tensor_core(name) else " cuda-core")
                    if C.is_gemm(name) else "comm" if C.is_comm_kernel(name) else "other")
        elif p.kind[i] == MEMCPY:
            what = C.memcpy_category(name)
        else:
            what = "memset"
        key = (name, launch, what)
        rows[key] = rows.get(key, 0) + 1
    runtime = [names[c] for c in ev["name"][ev["kind"] == RUNTIME]]
    launches = sorted({names[ev["name"][r]] for r in p.launch[p.launch >= 0]})
    return {
        "rows": [{"kernel": n, "launch": lname, "class": w, "count": c} for (n, lname, w), c in sorted(rows.items())],
        "launch_calls": launches,
        "launch_calls_not_known": [n for n in launches if not C.is_launch(n)],
        "sync_calls": sorted({n for n in runtime if C.is_sync(n)} | {names[c] for c in ev["name"] if C.is_sync(names[c])}),
        "precision_s": k.precision_s,
        "precision_from_op_share": k.precision_from_op_share,
        "short_kernel_share": k.short_kernels.count_share if k.short_kernels is not None else None,
        "memcpy": sorted({names[p.name[i]] for i in range(p.n) if p.kind[i] == MEMCPY}),
    }


def judge_probe(case: str, t: dict) -> tuple[bool, str]:
    """Did gpusleuth read the case the way it was made?"""
    if t["launch_calls_not_known"]:
        return False, f"launch calls not counted as launches: {t['launch_calls_not_known']}"
    prec = t["precision_s"]
    if case in PROBE_EXPECT:
        top = max(prec, key=prec.get) if prec else None
        return top == PROBE_EXPECT[case], f"GEMM time by precision {prec} (expected mostly {PROBE_EXPECT[case]})"
    if case == "item":
        return bool(t["sync_calls"]), f"sync calls seen: {t['sync_calls']}"
    if case.startswith("h2d_"):
        want = "memcpy_h2d_pinned" if case == "h2d_pinned" else "memcpy_h2d_pageable"
        got = sorted({r["class"] for r in t["rows"] if r["class"].startswith("memcpy")})
        return want in got, f"copies classified {got} (expected {want})"
    if case == "tiny_kernels":
        share = t["short_kernel_share"] or 0.0
        return share > 0.9, f"{share:.0%} of kernels shorter than 10 µs"
    return True, ""


def run_probe(out: Path, checks: "Checks", timeout_s: float = 240) -> dict:
    """Record the probe traces in a child and judge each with gpusleuth's own reading."""
    tdir = out / "fixtures" / "traces"
    try:
        res = subprocess.run([sys.executable, "-c", PROBE, str(tdir)], capture_output=True, text=True,
                             timeout=timeout_s)
        info = json.loads((res.stdout.strip().splitlines() or ["{}"])[-1])
    except (subprocess.TimeoutExpired, ValueError) as e:
        checks.add("FAIL", "profiler probe", f"{type(e).__name__}: {e}")
        return {}
    report: dict[str, Any] = {"device": info.get("name"), "cc": info.get("cc"), "cases": {}}
    for case, path in (info.get("cases") or {}).items():
        if str(path).startswith("error"):
            checks.add("FAIL", f"probe {case}", str(path))
            continue
        t = probe_table(Path(path))
        report["cases"][case] = t
        print(f"  -- {case}: GEMM precision {t['precision_s']}, from ops {t['precision_from_op_share']}")
        for r in t["rows"]:
            print(f"     {r['count']:4d}× {r['class']:28s} via {r['launch']:24s} {r['kernel'][:90]}")
        ok, detail = judge_probe(case, t)
        checks.check(ok, f"probe {case}", detail)
    if "fp8" not in report["cases"]:
        checks.add("SKIP", "probe fp8", f"compute capability {info.get('cc')} has no fp8 tensor cores")
    return report


# --------------------------------------------------------------------------- planted GPU scenarios
def run_scenarios(out: Path, checks: "Checks") -> dict:
    """The planted GPU scenarios under ``gpusleuth run``: the top finding must be the planted cause, and each
    run must carry the GPU columns the analysis needs."""
    sys.path.insert(0, str(REPO / "scenarios"))
    try:
        import run_all  # scenarios/run_all.py
    except ImportError as e:
        checks.add("FAIL", "planted GPU scenarios", f"scenarios/run_all.py: {e}")
        return {}
    from gpusleuth.sources.rundir import load_run

    results: dict[str, Any] = {}
    base = out / "scenarios"
    base.mkdir(parents=True, exist_ok=True)
    for spec in (s for s in run_all.SPECS if s.gpu):
        t0 = time.monotonic()
        try:
            planted = run_all.run_one(spec, "planted", base)
        except Exception as e:  # noqa: BLE001
            checks.add("FAIL", f"scenario {spec.name}", f"{type(e).__name__}: {e}")
            continue
        rep = planted["report"]
        top = rep.findings[0] if rep.findings else None
        results[spec.name] = {"expected": spec.cause, "top": top.cause if top else None,
                              "seconds": round(time.monotonic() - t0, 1)}
        checks.check(top is not None and top.cause == spec.cause, f"scenario {spec.name}: top finding",
                     f"expected {spec.cause}, got {top.cause if top else None} ({top.title if top else ''})")
        # the fix applied: the fixed twin's own loop clock against the planted one's; the prediction must not
        # promise more than that (10 % for the spread of a sub-second loop)
        try:
            fixed = run_all.run_one(spec, "fixed", base)
            cmp = run_all.compare(spec, planted, fixed)
            results[spec.name]["predicted_speedup"] = round(cmp["predicted_speedup"], 3)
            results[spec.name]["measured_speedup"] = round(cmp["measured_speedup"], 3)
            checks.check(cmp["predicted_speedup"] <= cmp["measured_speedup"] * 1.10 and not cmp["fixed_high"],
                         f"scenario {spec.name}: prediction within the fix's measured gain",
                         f"predicted ×{cmp['predicted_speedup']:.2f}, measured ×{cmp['measured_speedup']:.2f}; "
                         f"fixed twin's high findings {cmp['fixed_high']}")
        except Exception as e:  # noqa: BLE001
            checks.add("FAIL", f"scenario {spec.name}: fixed twin", f"{type(e).__name__}: {e}")
        d = rep.to_dict()
        o = d.get("outcomes") or {}
        mfu = o.get("mfu") or {}
        gpu = (d.get("gpu") or [{}])[0]
        run = load_run(planted["run_dir"])
        hook_errors = [i for i in run.infos if i.get("kind") == "hook_error"]
        gpm_why = str((gpu.get("empty") or {}).get("gpm") or "")
        cols = {"per-step CUDA events": o.get("gpu_time_s"), "FLOPs per step": mfu.get("flops_per_step"),
                "MFU": mfu.get("mfu"), "energy": (o.get("energy") or {}).get("run_j"),
                # GPM needs Hopper or newer: elsewhere the empty column must say so
                "GPM sm_active": gpu.get("sm_active") or (gpm_why if "not supported" in gpm_why.lower() else None)}
        results[spec.name]["columns"] = cols
        results[spec.name]["hook_errors"] = hook_errors
        missing = [k for k, v in cols.items() if v is None]
        checks.check(not missing and not hook_errors, f"scenario {spec.name}: columns filled, no hook error",
                     f"missing {missing}; hook errors {hook_errors}; MFU why-not: {mfu.get('why_not')}")
    return results


STALL_JOB = r"""
import sys, time, torch
mode = sys.argv[1]
x = torch.randn(8192, 8192, device="cuda")
w = torch.nn.Parameter(torch.randn(8192, 8192, device="cuda") * 0.01)
opt = torch.optim.SGD([w], lr=1e-6)
steps = 6 if mode == "spin" else 8
for i in range(steps):
    for _ in range(1 if mode == "spin" else 12):   # "gemm": ~1-3 s steps of real matmuls at high power
        (x @ w).square().mean().backward()
    opt.step(); opt.zero_grad(); torch.cuda.synchronize()
if mode == "spin":
    print("SPINNING", flush=True)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 40:               # a rank spinning in a collective: kernels resident, no work
        torch.cuda._sleep(1_000_000_000)             # ~0.5-1 s of GPU cycles per call
        torch.cuda.synchronize()
"""


def run_stall_checks(out: Path, checks: "Checks") -> dict:
    """Issue 33's GPU part: under ``gpusleuth run`` a spin kernel after a few steps (utilization ~100 % at low
    power, no progress) must be named a stall with the busy-waiting signature; a job of long GEMM steps at high
    power must raise no stall."""
    job = out / "stall_job.py"
    job.write_text(STALL_JOB)
    results: dict[str, Any] = {}
    for mode in ("spin", "gemm"):
        run_dir = out / f"stall_{mode}"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "gpusleuth", "run", "--out", str(run_dir), "--stall-after", "auto",
               "--on-stall", "kill", "--json", "--", sys.executable, str(job), mode]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
            rep = json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}
        except (subprocess.TimeoutExpired, ValueError) as e:
            checks.add("FAIL", f"stall job ({mode})", f"{type(e).__name__}: {e}")
            continue
        hangs = [f for f in rep.get("findings", []) if f.get("cause") == "hang"]
        from gpusleuth.analysis.stalls import judge_run  # noqa: PLC0415 - only with a GPU
        from gpusleuth.sources.rundir import load_run  # noqa: PLC0415

        try:
            verdicts = judge_run(load_run(run_dir))
        except Exception as e:  # noqa: BLE001
            verdicts = []
            checks.add("WARN", f"stall verdicts ({mode})", f"{type(e).__name__}: {e}")
        sigs = [getattr(v, "gpu_signature", None) for v in verdicts]
        results[mode] = {"exit": res.returncode, "hang_findings": [f.get("title") for f in hangs],
                         "signatures": sigs, "util": [getattr(v, "gpu_util_pct", None) for v in verdicts],
                         "power_share": [getattr(v, "gpu_power_share", None) for v in verdicts],
                         "stderr_tail": res.stderr.splitlines()[-10:]}
        print("  " + json.dumps(results[mode], default=str)[:600])
        if mode == "spin":
            checks.check(bool(hangs) and "busy-waiting" in sigs, "spin kernel: a stall with the busy-waiting signature",
                         f"findings {[f.get('title') for f in hangs]}, signatures {sigs}")
        else:
            checks.check(not hangs and not verdicts, "long GEMM steps at high power: no stall",
                         f"findings {[f.get('title') for f in hangs]}")
    return results


# --------------------------------------------------------------------------- recording proxy
def _suffix(exc: BaseException) -> str:
    """``NVMLError_NotSupported`` → ``NotSupported`` (the stand-in raises ``pynvml.NVMLError_<suffix>``)."""
    name = type(exc).__name__
    return name[len("NVMLError_"):] if name.startswith("NVMLError_") else "Unknown"


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)


class RecordingNvml:
    """Stands in for the ``pynvml`` module in front of the sampler and notes every answer, raw.

    Constants, classes and anything not starting with ``nvml`` pass straight through. Calls are passed
    on unchanged; their results (or errors) are stored per device: static facts in ``static``, per-tick
    readings in the tick opened by :meth:`tick`, permanent errors in ``errors``. Handles are mapped to
    device indices when ``nvmlDeviceGetHandleByIndex`` hands them out.
    """

    def __init__(self, nvml: Any):
        self._nvml = nvml
        self._by_handle: dict[int, int] = {}
        self._gpm_dev: int | None = None  # device of the latest GPM sample (MetricsGet takes no handle)
        self.init_error: str | None = None
        self.system: dict[str, Any] = {"driver_version": None, "cuda_driver_version": None}
        self.devices: dict[int, dict] = {}
        self.transient: dict[str, int] = {}  # "gpu<i>:<fn>:<error>" → count (not representable per tick)
        self.recording = False

    def _dev(self, i: int) -> dict:
        if i not in self.devices:
            self.devices[i] = {
                "static": {"name": None, "uuid": None, "pci_bus_id": None, "power_limit_mw": None,
                           "max_clock": {}, "compute_capability": None, "mig_mode": None,
                           "gpm_supported": None},
                "errors": {}, "ticks": [], "processes": []}
        return self.devices[i]

    def tick(self, t_ns: int) -> None:
        """Open a new tick on every device: the sampler's next ``sample`` call fills it."""
        self.recording = True
        for d in self.devices.values():
            d["ticks"].append({"t_ns": t_ns, "gpm": None})

    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            return getattr(self._nvml, name)
        try:
            fn = getattr(self._nvml, name)
        except AttributeError:  # an old nvidia-ml-py: the stand-in will raise FunctionNotFound instead
            for d in self.devices.values():
                d["errors"].setdefault(name, "FunctionNotFound")
            raise

        def call(*args: Any) -> Any:
            dev = self._by_handle.get(id(args[0])) if args else None
            try:
                out = fn(*args)
            except getattr(self._nvml, "NVMLError", Exception) as e:
                self._error(name, dev, e)
                raise
            self._note(name, dev, args, out)
            return out

        return call

    def _error(self, name: str, dev: int | None, e: BaseException) -> None:
        if name == "nvmlInit":
            self.init_error = _suffix(e)
            return
        if name == "nvmlGpmMetricsGet":
            dev = self._gpm_dev
        code = getattr(e, "value", None)
        targets = [dev] if dev is not None else list(self.devices)
        for i in targets:
            if code in PERMANENT or not self.recording:
                self._dev(i)["errors"].setdefault(name, _suffix(e))
            else:
                key = f"gpu{i}:{name}:{_suffix(e)}"
                self.transient[key] = self.transient.get(key, 0) + 1

    def _note(self, name: str, dev: int | None, args: tuple, out: Any) -> None:
        if name == "nvmlDeviceGetHandleByIndex":
            self._by_handle[id(out)] = int(args[0])
            self._dev(int(args[0]))
            return
        if name == "nvmlSystemGetDriverVersion":
            self.system["driver_version"] = _text(out)
            return
        if name == "nvmlSystemGetCudaDriverVersion":
            self.system["cuda_driver_version"] = int(out)
            return
        if name == "nvmlGpmMetricsGet":
            if self._gpm_dev is not None and self.recording:
                tick = self._dev(self._gpm_dev)["ticks"][-1]
                tick["gpm"] = {str(m.metricId): float(m.value)
                               for m in list(out.metrics)[: out.numMetrics] if m.nvmlReturn == 0}
            return
        if dev is None:
            return
        d = self._dev(dev)
        st = d["static"]
        if name == "nvmlDeviceGetName":
            st["name"] = _text(out)
        elif name == "nvmlDeviceGetUUID":
            st["uuid"] = _text(out)
        elif name == "nvmlDeviceGetPciInfo":
            st["pci_bus_id"] = _text(out.busId)
        elif name == "nvmlDeviceGetEnforcedPowerLimit":
            st["power_limit_mw"] = int(out)
        elif name == "nvmlDeviceGetMaxClockInfo":
            st["max_clock"][str(args[1])] = int(out)
        elif name == "nvmlDeviceGetCudaComputeCapability":
            st["compute_capability"] = [int(out[0]), int(out[1])]
        elif name == "nvmlDeviceGetMigMode":
            st["mig_mode"] = [int(out[0]), int(out[1])]
        elif name == "nvmlGpmQueryDeviceSupport":
            st["gpm_supported"] = bool(getattr(out, "isSupportedDevice", 0))
        elif name == "nvmlGpmSampleGet":
            self._gpm_dev = dev
        elif name == "nvmlDeviceGetComputeRunningProcesses":
            d["processes"] = [[int(p.pid), None if getattr(p, "usedGpuMemory", None) is None
                               else int(p.usedGpuMemory)] for p in out]
        elif self.recording and d["ticks"]:
            self._note_tick(d["ticks"][-1], name, args, out)

    @staticmethod
    def _note_tick(t: dict, name: str, args: tuple, out: Any) -> None:
        if name == "nvmlDeviceGetUtilizationRates":
            t["util"] = [int(out.gpu), int(out.memory)]
        elif name == "nvmlDeviceGetMemoryInfo":
            t["memory"] = [int(out.total), int(out.used), int(out.free)]
        elif name == "nvmlDeviceGetPowerUsage":
            t["power_mw"] = int(out)
        elif name == "nvmlDeviceGetTemperature":
            t["temp_c"] = int(out)
        elif name == "nvmlDeviceGetClockInfo":
            t.setdefault("clock", {})[str(args[1])] = int(out)
        elif name in ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"):
            t["clock_event_reasons"] = int(out)
        elif name == "nvmlDeviceGetFieldValues":
            members = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
            fields = t.setdefault("fields", {})
            for fid, v in zip(args[1], out):
                fid = fid[0] if isinstance(fid, tuple) else fid
                vt, ret = int(v.valueType), int(v.nvmlReturn)
                val = getattr(v.value, members.get(vt, "ullVal")) if ret == 0 else 0
                fields[str(fid)] = [ret, vt if ret == 0 else 0, val, int(v.latencyUsec)]

    # ------------------------------------------------------------------ the fixture
    def fixture(self, *, note: str, timings: dict | None = None, recorded_with: dict | None = None) -> dict:
        """The recording in ``gpusleuth-nvml-fixture/1`` form.

        A per-tick reading missing because of a transient error (NVML's format has no per-tick error) is
        copied from the nearest tick that has it, and counted in ``recorded_with.transient_errors``.
        """
        devices = []
        for i in sorted(self.devices):
            d = json.loads(json.dumps(self.devices[i]))  # a deep, JSON-clean copy
            ticks = d["ticks"]
            for key in TICK_KEYS:
                have = [j for j, t in enumerate(ticks) if key in t]
                if not have:
                    continue  # never asked (MIG utilization, a disabled call): the stand-in won't be either
                for j, t in enumerate(ticks):
                    if key not in t:
                        t[key] = ticks[min(have, key=lambda k: (abs(k - j), k))][key]
            devices.append(d)
        out = {"format": FORMAT, "synthetic": False, "note": note, "init_error": self.init_error,
               "system": dict(self.system), "devices": devices}
        if timings is not None:
            out["timings"] = timings
        rw = dict(recorded_with or {})
        rw["transient_errors"] = dict(self.transient)
        out["recorded_with"] = rw
        return out


def replay(fixture: dict, fake_cls: Any) -> tuple[list[dict], list[dict]]:
    """Rows the sampler gives when the tests' stand-in (``fake_cls``) replays ``fixture`` tick by tick,
    at the recorded timestamps (so GPM pairs fall where they fell live: the sampler times its GPM pairs by
    its clock, here the recorded tick times)."""
    fake = fake_cls(json.loads(json.dumps(fixture)))
    now = [0]
    sampler, reason = NvmlSampler.open(fake, clock=lambda: now[0])
    if sampler is None:
        raise RuntimeError(f"replay could not open the fixture: {reason}")
    sampler.hardware()
    rows = []
    for k, t in enumerate(fixture["devices"][0]["ticks"]):
        fake.tick = k
        now[0] = t["t_ns"]
        rows.extend(sampler.sample(t["t_ns"]))
    procs = sampler.sample_processes(0)
    sampler.close()
    return rows, procs


def same_rows(live: list[dict], replayed: list[dict]) -> list[str]:
    """Differences between live and replayed rows, ignoring our own timing column ``sample_us``."""
    diffs = []
    if len(live) != len(replayed):
        return [f"{len(live)} live rows vs {len(replayed)} replayed"]
    for k, (a, b) in enumerate(zip(live, replayed)):
        for col in a:
            if col == "sample_us":
                continue
            x, y = a[col], b.get(col)
            both_nan = isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y)
            if not both_nan and x != y:
                diffs.append(f"row {k} {col}: live {x!r} replay {y!r}")
    return diffs


def load_fake_nvml() -> Any | None:
    """The tests' pynvml stand-in, if this is a checkout with tests and pytest installed."""
    path = REPO / "tests" / "test_nvml_sampler.py"
    if not path.exists():
        return None
    try:
        spec = importlib.util.spec_from_file_location("_gpusleuth_test_nvml_sampler", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod.FakeNvml
    except Exception:  # noqa: BLE001 - no pytest here: the self-check is skipped, said so
        return None


# --------------------------------------------------------------------------- measurements
def stats_us(ns: list[int], cpu_ns: list[int] | None = None) -> dict:
    us = sorted(x / 1000 for x in ns)
    out = {"n": len(us), "median_us": round(statistics.median(us), 2),
           "p95_us": round(us[min(len(us) - 1, int(0.95 * len(us)))], 2), "max_us": round(us[-1], 2)}
    if cpu_ns:  # the calling thread's CPU time: tells a call that burns a core from one that waits on the driver
        out["cpu_median_us"] = round(statistics.median(cpu_ns) / 1000, 2)
    return out


def time_call(fn: Callable[[], Any], n: int, budget_s: float = 3.0) -> dict:
    """Median/p95 of ``n`` calls (fewer if they exceed ``budget_s``); the error name if it fails."""
    ns, cpu = [], []
    end = time.monotonic() + budget_s
    for _ in range(n):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - NVMLError_* or AttributeError (old binding)
            return {"error": _suffix(e) if type(e).__name__.startswith("NVMLError") else type(e).__name__}
        ns.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
        if time.monotonic() > end:
            break
    return stats_us(ns, cpu)


def time_calls(nv: Any, h: Any, n: int) -> dict:
    """Per-call latency of every NVML call the sampler uses (telemetry.md §8 microbenchmark, part 1)."""
    field_ids = list(FIELDS.values())
    calls: dict[str, Callable[[], Any]] = {
        "utilization (nvmlDeviceGetUtilizationRates)": lambda: nv.nvmlDeviceGetUtilizationRates(h),
        "memory (nvmlDeviceGetMemoryInfo)": lambda: nv.nvmlDeviceGetMemoryInfo(h),
        "power (nvmlDeviceGetPowerUsage)": lambda: nv.nvmlDeviceGetPowerUsage(h),
        "energy (nvmlDeviceGetTotalEnergyConsumption)": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "temperature (nvmlDeviceGetTemperature)": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "sm clock (nvmlDeviceGetClockInfo SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "mem clock (nvmlDeviceGetClockInfo MEM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
        "clock-event reasons (nvmlDeviceGetCurrentClocksEventReasons)":
            lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
        f"field-values batch ({len(field_ids)} fields, nvmlDeviceGetFieldValues)":
            lambda: nv.nvmlDeviceGetFieldValues(h, field_ids),
    }
    # each field alone, so a slow batch names the field that makes it slow (energy, on some drivers)
    for name, fid in FIELDS.items():
        calls[f"field {fid} alone ({name})"] = (lambda f=fid: nv.nvmlDeviceGetFieldValues(h, [f]))
    out = {name: time_call(fn, n, budget_s=2.0) for name, fn in calls.items()}
    # GPM: one sample, and the metrics between a pair ≥100 ms apart
    try:
        if nv.nvmlGpmQueryDeviceSupport(h).isSupportedDevice:
            s1, s2 = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
            try:
                out["gpm sample (nvmlGpmSampleGet)"] = time_call(lambda: nv.nvmlGpmSampleGet(h, s1), n)
                time.sleep(0.12)
                nv.nvmlGpmSampleGet(h, s2)

                def metrics():
                    mg = nv.c_nvmlGpmMetricsGet_t()
                    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = \
                        nv.NVML_GPM_METRICS_GET_VERSION, len(GPM_METRICS), s1, s2
                    for i, mid in enumerate(GPM_METRICS.values()):
                        mg.metrics[i].metricId = mid
                    return nv.nvmlGpmMetricsGet(mg)

                out[f"gpm metrics ({len(GPM_METRICS)} metrics, nvmlGpmMetricsGet)"] = time_call(metrics, n)
            finally:
                nv.nvmlGpmSampleFree(s1)
                nv.nvmlGpmSampleFree(s2)
        else:
            out["gpm"] = {"error": "NotSupported (isSupportedDevice=0)"}
    except Exception as e:  # noqa: BLE001
        out["gpm"] = {"error": _suffix(e)}
    out["compute-running-processes (nvmlDeviceGetComputeRunningProcesses)"] = time_call(
        lambda: nv.nvmlDeviceGetComputeRunningProcesses(h), n, budget_s=5.0)
    return out


def update_periods(nv: Any, h: Any, seconds: float) -> dict:
    """How often each counter really changes (telemetry.md §1.3/§8, Zeus's method): read them round-robin
    back to back for ``seconds`` and look at the intervals between changes. The sampler can't see
    anything faster than this, so it bounds the useful sampling rate."""
    readers: dict[str, Callable[[], Any]] = {
        "power_mw (nvmlDeviceGetPowerUsage)": lambda: nv.nvmlDeviceGetPowerUsage(h),
        "energy_mj (nvmlDeviceGetTotalEnergyConsumption)": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
        "energy_mj (field 83)": lambda: _field(nv, h, 83),
        "power_instant_mw (field 186)": lambda: _field(nv, h, 186),
        "util_gpu (nvmlDeviceGetUtilizationRates)": lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu,
    }
    alive = dict(readers)
    last: dict[str, Any] = {}
    changes: dict[str, list[int]] = {k: [] for k in readers}
    reads = dict.fromkeys(readers, 0)
    errors: dict[str, str] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end and alive:
        for name, fn in list(alive.items()):
            try:
                v = fn()
            except Exception as e:  # noqa: BLE001
                errors[name] = _suffix(e)
                del alive[name]
                continue
            t = time.perf_counter_ns()
            reads[name] += 1
            if name in last and v != last[name]:
                changes[name].append(t)
            last[name] = v
    out = {}
    for name in readers:
        if name in errors:
            out[name] = {"error": errors[name]}
            continue
        iv = [(b - a) / MS for a, b in zip(changes[name], changes[name][1:])]
        out[name] = {"reads": reads[name], "changes": len(changes[name]),
                     "read_interval_ms": round(seconds * 1000 / max(reads[name], 1), 3),
                     "median_change_interval_ms": round(statistics.median(iv), 2) if iv else None,
                     "min_change_interval_ms": round(min(iv), 2) if iv else None}
    return out


def _field(nv: Any, h: Any, fid: int) -> Any:
    v = nv.nvmlDeviceGetFieldValues(h, [fid])[0]
    if v.nvmlReturn != 0:
        raise nv.NVMLError(v.nvmlReturn)
    return v.value.ullVal if v.valueType == 3 else v.value.uiVal


# --------------------------------------------------------------------------- the run
class Checks:
    """PASS/FAIL/SKIP/WARN lines; a phase that raises is a FAIL with its error, and the rest goes on
    (a GPU session is scarce: get everything that can be got)."""

    def __init__(self):
        self.items: list[tuple[str, str, str]] = []

    def add(self, status: str, name: str, detail: str = "") -> None:
        self.items.append((status, name, detail))
        print(f"  [{status}] {name}" + (f": {detail}" if detail else ""), flush=True)

    def check(self, ok: bool, name: str, detail: str = "") -> bool:
        self.add("PASS" if ok else "FAIL", name, detail)
        return ok

    @property
    def failed(self) -> bool:
        return any(s == "FAIL" for s, _, _ in self.items)


def phase(title: str) -> None:
    print(f"\n== {title}", flush=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Exercise gpusleuth's real NVML path on an NVIDIA GPU machine.")
    ap.add_argument("--out", type=Path, default=Path("gpu_check_out"), help="output directory (default ./gpu_check_out)")
    ap.add_argument("--calls", type=int, default=200, help="calls per NVML latency measurement (default 200)")
    ap.add_argument("--load-seconds", type=float, default=5.0, help="matmul load / 10 Hz sampling time (default 5)")
    ap.add_argument("--periods-seconds", type=float, default=3.0, help="counter update-period measurement time")
    ap.add_argument("--skip-run", action="store_true", help="skip the `gpusleuth run` of the demo job")
    ap.add_argument("--skip-probe", action="store_true", help="skip the profiler probe")
    ap.add_argument("--skip-scenarios", action="store_true", help="skip the planted GPU scenarios")
    ap.add_argument("--skip-stalls", action="store_true", help="skip the stall-watch checks (spin kernel, long GEMMs)")
    args = ap.parse_args(argv)

    try:
        import pynvml
    except ImportError:
        print("gpu_check: no GPU check possible: nvidia-ml-py is not installed (pip install nvidia-ml-py)",
              file=sys.stderr)
        return 2
    rec = RecordingNvml(pynvml)
    sampler, reason = NvmlSampler.open(rec)
    if sampler is None:
        print(f"gpu_check: no GPU to check here: {reason}", file=sys.stderr)
        return 2

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    checks = Checks()
    report: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
                              "python": platform.python_version(),
                              "nvidia_ml_py": getattr(pynvml, "__version__", None)}
    live_rows: list[dict] = []
    live_procs: list[dict] = []
    load_pid: int | None = None
    try:
        # ---------------------------------------------------------------- 0. CUDA
        phase("0. CUDA usable from torch (a kernel runs, its result comes back)")
        cu = cuda_usable()
        report["cuda"] = cu
        print("  " + json.dumps(cu))
        cuda_ok = checks.check(bool(cu.get("ok")), "CUDA usable from torch", str(cu.get("why")))

        # ---------------------------------------------------------------- 1. hardware
        phase("1. NvmlSampler.open() and hardware(); NVML's answer per field id")
        hw = sampler.hardware()
        report["hardware"] = hw
        for d in hw:
            print("  " + ", ".join(f"{k}={v}" for k, v in d.items()))
        checks.check(bool(hw) and all(d["name"] and d["memory_total"] for d in hw), "hardware facts",
                     f"{len(hw)} GPU(s): {', '.join(str(d['name']) for d in hw)}")
        h = pynvml.nvmlDeviceGetHandleByIndex(hw[0]["index"])
        whole = [(d["index"], pynvml.nvmlDeviceGetHandleByIndex(d["index"])) for d in hw if d.get("parent") is None]
        report["field_returns"] = returns = field_returns(pynvml, whole)
        for index, codes in returns.items():
            print(f"  GPU {index} fields: " + ", ".join(f"{k}={v}" for k, v in codes.items()))
        report["diagnostics"] = sampler.diagnostics()

        # ---------------------------------------------------------------- 2. call latency
        phase(f"2. NVML call latency on GPU {hw[0]['index']} (idle, {args.calls} calls each)")
        try:
            timings = time_calls(pynvml, h, args.calls)
            report["call_latency"] = timings
            for name, st in timings.items():
                print(f"  {name:72s} " + (f"median {st['median_us']:9.1f} µs  p95 {st['p95_us']:9.1f} µs"
                                          f"  cpu {st.get('cpu_median_us', float('nan')):9.1f} µs"
                                          if "median_us" in st else f"error {st['error']}"))
            fv = next(v for k, v in timings.items() if k.startswith("field-values"))
            checks.check("median_us" in fv, "field-values batch works", json.dumps(fv))
            # the whole per-tick cost of the real sampler, without the recording proxy in front of it
            plain, why = NvmlSampler.open()  # NVML init is reference-counted: safe beside the other one
            if plain is not None:
                try:
                    ns = []
                    for _ in range(args.calls):
                        t0 = time.perf_counter_ns()
                        plain.sample(time.time_ns())
                        ns.append(time.perf_counter_ns() - t0)
                finally:
                    plain.close()
                report["sampler_sample_cost"] = st = stats_us(ns)
                print(f"  {'NvmlSampler.sample, all GPUs (GPM at most every 100 ms)':72s} "
                      f"median {st['median_us']:9.1f} µs  p95 {st['p95_us']:9.1f} µs")
                checks.check(st["median_us"] < 5000, "NvmlSampler.sample cost per tick", json.dumps(st))
            else:
                checks.add("FAIL", "second NvmlSampler.open()", str(why))
        except Exception:  # noqa: BLE001
            checks.add("FAIL", "call latency", traceback.format_exc(limit=3).strip().splitlines()[-1])

        # ---------------------------------------------------------------- 3/4. load, update periods, 10 Hz
        phase("3. load (bf16 matmul in a child process), counter update periods, 10 Hz sampling")
        load = None
        if not cuda_ok:
            checks.add("FAIL", "matmul load", f"CUDA is not usable: {cu.get('why')}")
        else:
            load = subprocess.Popen([sys.executable, "-c", LOAD,
                                     str(args.load_seconds + args.periods_seconds + 3)],
                                    stdout=subprocess.PIPE, text=True)
            watchdog = threading.Timer(300, load.kill)  # a CUDA init that hangs must not hang the check
            watchdog.daemon = True
            watchdog.start()
            line = (load.stdout.readline() or "").strip()
            if line == "ready":
                load_pid = load.pid
                checks.add("PASS", "matmul load started", f"pid {load.pid}")
                time.sleep(1.0)  # let power/clocks ramp
            else:
                checks.add("SKIP" if line == "nocuda" else "FAIL", "matmul load",
                           "torch has no CUDA here" if line == "nocuda" else f"child said {line!r}")
                load.kill()
                load.wait()
                load = None
        try:
            periods = update_periods(pynvml, h, args.periods_seconds)
            report["update_periods"] = periods
            for name, st in periods.items():
                print(f"  {name:50s} " + (
                    f"{st['changes']:5d} changes in {st['reads']:6d} reads; change every "
                    f"{st['median_change_interval_ms']} ms (min {st['min_change_interval_ms']} ms)"
                    if "reads" in st else f"error {st['error']}"))
            e = periods.get("energy_mj (field 83)", {})
            checks.check(e.get("changes", 0) > 0, "energy counter moves", json.dumps(e))
        except Exception:  # noqa: BLE001
            checks.add("FAIL", "update periods", traceback.format_exc(limit=3).strip().splitlines()[-1])

        n_ticks = max(10, int(args.load_seconds * 10))
        last = time.monotonic() - 1
        for _ in range(n_ticks):  # >100 ms apart, so every tick can have a GPM pair as in the fixtures
            delay = 0.101 - (time.monotonic() - last)  # 1 ms spare: t_ns is wall time, the pause monotonic
            if delay > 0:
                time.sleep(delay)
            last = time.monotonic()
            t_ns = time.time_ns()
            rec.tick(t_ns)
            live_rows.extend(sampler.sample(t_ns))
        live_procs = sampler.sample_processes(time.time_ns())
        if load is not None:
            load.kill()
            load.wait()
        g0 = [r for r in live_rows if r["gpu"] == hw[0]["index"]]

        def col(c):
            return [r[c] for r in g0 if r[c] is not None and r[c] == r[c]]

        summary = {c: (round(min(col(c)), 3), round(statistics.median(col(c)), 3), round(max(col(c)), 3))
                   if col(c) else None
                   for c in ("util_gpu", "util_mem", "power_w", "power_instant_w", "temp_c", "sm_clock_mhz",
                             "sm_active", "sm_occupancy", "tensor_active", "dram_active", "fv_latency_us",
                             "sample_us")}
        report["sampled"] = {"ticks": n_ticks, "min_median_max": summary, "disabled": sampler.disabled,
                             "failures": {f"{k[0]}:{k[1]}": v for k, v in sampler.failures.items()}}
        for c, v in summary.items():
            print(f"  {c:18s} min/median/max {v}")
        print(f"  disabled calls: {sampler.disabled}")
        checks.check(len(live_rows) == n_ticks * len(hw), "one row per GPU per tick", f"{len(live_rows)} rows")
        energy = col("energy_j")
        checks.check(len(energy) > 1 and energy == sorted(energy) and energy[-1] > energy[0],
                     "energy_j rises monotonically", f"{energy[:1]} → {energy[-1:]}")
        checks.check(bool(col("power_w")) and 0 < max(col("power_w")) < 2000, "power_w sane")
        if load_pid is not None:
            checks.check(bool(col("util_gpu")) and max(col("util_gpu")) >= 50, "util_gpu high under load",
                         str(summary["util_gpu"]))
            if hw[0]["gpm_supported"]:
                checks.check(bool(col("sm_active")) and max(col("sm_active")) > 10,
                             "GPM sm_active non-trivial under load", str(summary["sm_active"]))
                checks.check(bool(col("tensor_active")) and max(col("tensor_active")) > 1,
                             "GPM tensor_active non-trivial under bf16 matmul", str(summary["tensor_active"]))
            pids = {p["pid"] for p in live_procs}
            if load_pid in pids:
                checks.add("PASS", "load's PID in per-process GPU memory", str(live_procs))
            else:  # a container without --pid=host sees other PIDs (telemetry.md §1.2): worth knowing
                checks.add("WARN", "load's PID not in NVML's process list (PID namespace?)",
                           f"load pid {load_pid}, NVML: {sorted(pids)}")
        else:
            checks.check(bool(col("util_gpu")), "util_gpu read", str(summary["util_gpu"]))

        # ---------------------------------------------------------------- 5. the fixture
        phase("4. raw NVML recording → fixture, and replay through the tests' stand-in")
        try:
            d0 = hw[0]
            slug = re.sub(r"[^a-z0-9.]+", "_", str(d0["name"]).lower().replace("nvidia", "")).strip("_")
            fx_path = out / f"{slug}_{d0['driver_version']}.json.gz"
            fx = rec.fixture(
                note=f"RECORDED with scripts/gpu_check.py on {d0['name']} (driver {d0['driver_version']}), "
                     f"{n_ticks} ticks at 10 Hz" + (" under a bf16 matmul load" if load_pid else ", idle GPU"),
                timings={"call_latency": report.get("call_latency"),
                         "update_periods": report.get("update_periods")},
                recorded_with={"script": "scripts/gpu_check.py", "host": platform.node(),
                               "nvidia_ml_py": report["nvidia_ml_py"], "python": platform.python_version(),
                               "date": report["started"], "load": bool(load_pid)})
            with gzip.open(fx_path, "wt") as f:
                json.dump(fx, f)
            report["fixture"] = str(fx_path)
            checks.add("PASS", "fixture written", f"{fx_path} ({fx_path.stat().st_size} bytes)")
            fake = load_fake_nvml()
            if fake is None:
                checks.add("SKIP", "fixture replay", "tests/test_nvml_sampler.py or pytest not available")
            else:
                rows, procs = replay(fx, fake)
                diffs = same_rows(live_rows, rows)
                if rec.transient and diffs:
                    checks.add("WARN", "fixture replay", f"transient NVML errors {rec.transient}; "
                                                         f"{len(diffs)} differences, e.g. {diffs[:3]}")
                else:
                    checks.check(not diffs, "fixture replay gives the live rows", "; ".join(diffs[:5]))
                checks.check(procs == [dict(p, t_ns=0) for p in live_procs], "fixture replay: processes")
        except Exception:  # noqa: BLE001
            checks.add("FAIL", "fixture", traceback.format_exc(limit=3).strip().splitlines()[-1])
    finally:
        sampler.close()

    # -------------------------------------------------------------------- 7. profiler probe
    if args.skip_probe:
        checks.add("SKIP", "profiler probe", "--skip-probe")
    elif not cuda_ok:
        checks.add("FAIL", "profiler probe", "CUDA is not usable")
    else:
        phase("7. profiler probe: each kernel and launch with gpusleuth's classification")
        report["probe"] = run_probe(out, checks)

    # -------------------------------------------------------------------- 8. planted GPU scenarios
    if args.skip_scenarios:
        checks.add("SKIP", "planted GPU scenarios", "--skip-scenarios")
    elif not cuda_ok:
        checks.add("FAIL", "planted GPU scenarios", "CUDA is not usable")
    else:
        phase("8. planted GPU scenarios under gpusleuth run (top finding, per-step CUDA events, FLOPs, MFU, "
              "energy, GPM)")
        report["scenarios"] = run_scenarios(out, checks)

    # -------------------------------------------------------------------- 9. stalls on the GPU
    if args.skip_stalls:
        checks.add("SKIP", "stall signature on the GPU", "--skip-stalls")
    elif not cuda_ok:
        checks.add("FAIL", "stall signature on the GPU", "CUDA is not usable")
    else:
        phase("9. stall watch on the GPU: a spin kernel (busy at low power, no progress) is a busy-waiting stall; "
              "long real GEMM steps at high power are never one")
        report["stalls"] = run_stall_checks(out, checks)

    # -------------------------------------------------------------------- 6. gpusleuth run
    if args.skip_run:
        checks.add("SKIP", "gpusleuth run of the demo job", "--skip-run")
    else:
        phase("5. gpusleuth run --out OUT/gpu_run -- python -m gpusleuth.demo.job --planted --steps 40")
        run_dir = out / "gpu_run"
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [sys.executable, "-m", "gpusleuth", "run", "--out", str(run_dir), "--",
               sys.executable, "-m", "gpusleuth.demo.job", "--planted", "--steps", "40"]
        try:
            t0 = time.monotonic()
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            print("\n".join("  | " + ln for ln in (res.stdout + res.stderr).splitlines()[-40:]))
            checks.check(res.returncode == 0, "gpusleuth run exit code", f"{res.returncode} in {time.monotonic() - t0:.0f} s")
            gp = run_dir / "gpu.parquet"
            if checks.check(gp.exists(), "run directory has gpu.parquet"):
                import pyarrow.parquet as pq

                t = pq.read_table(gp)
                power = [p for p in t.column("power_w").to_pylist() if p is not None and p == p]
                checks.check(t.num_rows > 0 and bool(power), "gpu.parquet has rows with power",
                             f"{t.num_rows} rows, {len(power)} with power_w")
                report["gpu_run"] = {"dir": str(run_dir), "gpu_rows": t.num_rows}
        except Exception:  # noqa: BLE001
            checks.add("FAIL", "gpusleuth run", traceback.format_exc(limit=3).strip().splitlines()[-1])

    # -------------------------------------------------------------------- summary
    report["checks"] = [{"status": s, "name": n, "detail": d} for s, n, d in checks.items]
    (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
    n_fail = sum(s == "FAIL" for s, _, _ in checks.items)
    print(f"\n== summary ({out / 'gpu_check.json'})")
    for s, n, _ in checks.items:
        print(f"  {s:4s} {n}")
    print(f"\ngpu_check: {'FAIL' if n_fail else 'PASS'} ({n_fail} failed, "
          f"{sum(s == 'PASS' for s, _, _ in checks.items)} passed)")
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
