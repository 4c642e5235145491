"""How ``gpusleuth fleet --prometheus`` scales with GPUs × days of history (issue 25).

For each size (GPUs × days at a 30 s step): writes the history of a planted cluster as OpenMetrics (all six
dcgm-exporter series per GPU plus kube-state-metrics' requests; values from the real H100 scrapes, the
mix of tests/prom_cluster.py: busy, part-time, idle, oversized and unowned GPUs), backfills it with
``promtool tsdb create-blocks-from openmetrics``, serves it with a real ``prometheus`` on 127.0.0.1 and
times the real CLI in a child process (start-up included), its peak RSS from ``wait4`` (that child alone):

1. cold: ``--no-cache`` (every chunk fetched, a temporary DuckDB file);
2. fill: ``--cache FILE`` on an empty cache;
3. warm: the same command again (every chunk from the cache: the incremental path).

Prints one line per size and run, and the load average before and after (the machine is shared).

    python benchmarks/fleet_prometheus_scale.py --sizes 50x1,200x1,1000x1
    python benchmarks/fleet_prometheus_scale.py --sizes 1000x7 --energy --repeats 3 --keep /work/b34w
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from prom_cluster import DCGM_NAMES, ENERGY, MODEL, RunningPrometheus, backfill, h100_scrape  # noqa: E402

STEP = 30


def write_history(path: Path, gpus: int, days: int, t0: int, seed: int = 0, energy: bool = False,
                  first_day: int = 0) -> int:
    """The planted mix over ``gpus`` GPUs (8 per node), one metric family at a time; returns samples. ``energy``
    adds dcgm-exporter's energy counter on every GPU and vLLM's two token counters on every oversized
    (inference) pod (issue 34). ``first_day``: write days ``first_day … first_day + days - 1`` of the history
    that starts at ``t0`` (the counters carry on from the days before: a week is written and backfilled a day
    at a time, so neither the OpenMetrics file nor promtool's memory holds the week)."""
    kinds = np.array(["busy", "parttime", "idle", "oversized", "free"])[
        np.random.default_rng(seed).choice(5, gpus, p=[.4, .2, .15, .15, .1])]
    rng = np.random.default_rng([seed, first_day])
    idle, load = h100_scrape("idle"), h100_scrape("load")
    k0 = first_day * 86400 // STEP  # steps written before this file
    t = t0 + STEP * (k0 + np.arange(days * 86400 // STEP))
    hour = ((t - t0) % 86400) / 3600
    ts = [f" {int(x)}\n" for x in t]
    n = 0
    with open(path, "w") as f:
        for col, name in DCGM_NAMES.items():
            f.write(f"# TYPE {name} gauge\n")
            for i, kind in enumerate(kinds):
                busy = {"busy": np.ones(len(t), bool), "parttime": (hour >= 9) & (hour < 17), "oversized": np.ones(len(t), bool)
                        }.get(kind, np.zeros(len(t), bool))
                sm = np.where(busy, rng.uniform(0.15, 0.25, len(t)) if kind == "oversized" else rng.uniform(0.5, 0.95, len(t)), 0.0)
                held = kind != "free"
                vals = {"util": np.where(busy, load["util"], idle["util"]), "sm": sm, "tensor": sm / 2,
                        "fb_used": np.full(len(t), load["fb_used"] if held else idle["fb_used"]),
                        "fb_free": np.full(len(t), load["fb_free"] if held else idle["fb_free"]),
                        "power": np.where(busy, load["power"], idle["power"])}[col]
                node, gpu = f"node-{i // 8:04d}", i % 8
                ns, pod = (f"team-{i % 23:02d}", f"{kind}-{i:05d}") if held else ("", "")
                prefix = (f'{name}{{gpu="{gpu}",UUID="GPU-{i:08d}",pci_bus_id="00000000:{gpu:02X}:00.0",device="nvidia{gpu}",'
                          f'modelName="{MODEL}",Hostname="{node}",container="{"main" if held else ""}",namespace="{ns}",'
                          f'pod="{pod}",job="dcgm-exporter",instance="{node}:9400"}} ')
                strs = np.char.mod("%.4g", vals).tolist()
                f.write("".join(prefix + v + s for v, s in zip(strs, ts)))
                n += len(t)
        if energy:
            busy_power = {"busy": load["power"], "oversized": load["power"]}
            f.write(f"# TYPE {ENERGY} gauge\n")
            for i, kind in enumerate(kinds):
                busy = (hour >= 9) & (hour < 17) if kind == "parttime" else np.full(len(t), kind in busy_power)
                # the days before: full days at the same pattern (a part-time GPU busy 8 h of each 24)
                day_mj = (idle["power"] * 86400 if kind not in busy_power and kind != "parttime" else
                          load["power"] * 86400 if kind in busy_power else
                          (load["power"] * 8 + idle["power"] * 16) * 3600) * 1000
                mj = np.cumsum(np.where(busy, load["power"], idle["power"]) * STEP * 1000) + 4e11 + first_day * day_mj
                node, gpu = f"node-{i // 8:04d}", i % 8
                held = kind != "free"
                ns, pod = (f"team-{i % 23:02d}", f"{kind}-{i:05d}") if held else ("", "")
                prefix = (f'{ENERGY}{{gpu="{gpu}",UUID="GPU-{i:08d}",modelName="{MODEL}",Hostname="{node}",'
                          f'container="{"main" if held else ""}",namespace="{ns}",pod="{pod}",job="dcgm-exporter",'
                          f'instance="{node}:9400"}} ')
                f.write("".join(prefix + v + s for v, s in zip(np.char.mod("%.17g", mj).tolist(), ts)))
                n += len(t)
            for name, rate in (("vllm:generation_tokens_total", 800), ("vllm:prompt_tokens_total", 1600)):
                f.write(f"# TYPE {name} gauge\n")
                for i, kind in enumerate(kinds):
                    if kind != "oversized":
                        continue
                    prefix = (f'{name}{{namespace="team-{i % 23:02d}",pod="{kind}-{i:05d}",model_name="model-{i % 5}",'
                              f'job="vllm",instance="10.0.{i // 250}.{i % 250}:8000"}} ')
                    f.write("".join(prefix + str(rate * STEP * (k0 + k + 1)) + s for k, s in enumerate(ts)))
                    n += len(t)
        f.write("# TYPE kube_pod_container_resource_requests gauge\n")
        for i, kind in enumerate(kinds):
            if kind == "free":
                continue
            prefix = (f'kube_pod_container_resource_requests{{namespace="team-{i % 23:02d}",pod="{kind}-{i:05d}",'
                      f'uid="u{i}",container="main",node="node-{i // 8:04d}",resource="nvidia_com_gpu",unit="integer",'
                      f'job="kube-state-metrics",instance="ksm:8080"}} 1')
            f.write("".join(prefix + s for s in ts))
            n += len(t)
        f.write("# EOF\n")
    return n


def timed_cli(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB of that child alone, exit code)."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    t = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "fleet", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    err = proc.stderr.read().decode() if proc.stderr else ""
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        print(err[-2000:], file=sys.stderr)
    return wall, usage.ru_maxrss / 1024, proc.returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="50x1,200x1,1000x1", help="GPUSxDAYS,… (default 50x1,200x1,1000x1)")
    ap.add_argument("--keep", type=Path, default=None, help="scratch folder to keep (default: a temporary one)")
    ap.add_argument("--reuse", action="store_true", help="with --keep: time again over data backfilled before")
    ap.add_argument("--energy", action="store_true",
                    help="add the energy counter (every GPU) and vLLM's token counters (inference pods)")
    ap.add_argument("--repeats", type=int, default=1, help="cold/fill/warm this many times, interleaved (medians)")
    a = ap.parse_args()
    print(f"load average before: {os.getloadavg()}", flush=True)
    root = a.keep or Path(tempfile.mkdtemp(prefix="gpusleuth-ledger-bench-"))
    for size in a.sizes.split(","):
        gpus, days = (int(x) for x in size.split("x"))
        t0 = (int(time.time()) // 86400 - days - 2) * 86400
        d = root / size
        if a.reuse and (d / "data").is_dir():
            t0 = int((d / "t0").read_text())
            (d / "c.duckdb").unlink(missing_ok=True)
            print(f"{gpus} GPUs × {days} d: backfilled before", flush=True)
        else:
            d.mkdir(parents=True, exist_ok=True)
            (d / "t0").write_text(str(t0))
            samples, t_write, t_fill = 0, 0.0, 0.0
            for day in range(days):  # a day at a time: a week is 44 GB of OpenMetrics and promtool maps it all
                t = time.perf_counter()
                samples += write_history(d / "history.om", gpus, 1, t0, energy=a.energy, first_day=day)
                t_write += time.perf_counter() - t
                t = time.perf_counter()
                backfill(d / "history.om", d / "data", block_hours=24)
                t_fill += time.perf_counter() - t
                (d / "history.om").unlink()
            print(f"{gpus} GPUs × {days} d: {samples:,} samples; OpenMetrics written in {t_write:.0f} s, "
                  f"promtool backfill {t_fill:.0f} s", flush=True)
        window = ["--start", str(t0), "--end", str(t0 + days * 86400), "--json", "--price-per-gpu-hour", "2.5"]
        runs: dict[str, list[tuple[float, float, float]]] = {}
        with RunningPrometheus(d / "data") as prom:
            base = ["--prometheus", prom.url, *window]
            for rep in range(a.repeats):  # cold, fill, warm, then again: interleaved, so a busy minute hits all three
                (d / "c.duckdb").unlink(missing_ok=True)
                for what, extra in (("cold --no-cache", ["--no-cache"]), ("fill --cache", ["--cache", str(d / "c.duckdb")]),
                                    ("warm --cache", ["--cache", str(d / "c.duckdb")])):
                    wall, rss, rc = timed_cli(base + extra)
                    load1 = os.getloadavg()[0]
                    runs.setdefault(what, []).append((wall, rss, load1))
                    print(f"  {what:16s} wall {wall:7.1f} s  peak RSS {rss:6.0f} MiB  rc {rc}  load {load1:.1f}", flush=True)
        if a.repeats > 1:
            for what, rs in runs.items():
                walls, rsss = [r[0] for r in rs], [r[1] for r in rs]
                print(f"  median of {len(rs)} {what:16s} wall {float(np.median(walls)):7.1f} s "
                      f"({min(walls):.1f}–{max(walls):.1f})  peak RSS {float(np.median(rsss)):6.0f} MiB "
                      f"({min(rsss):.0f}–{max(rsss):.0f})  load {min(r[2] for r in rs):.1f}–{max(r[2] for r in rs):.1f}",
                      flush=True)
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
