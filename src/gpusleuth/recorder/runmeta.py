"""What the launcher writes into ``meta.json`` (the schema is ``run/meta.py``): the job's command, host and
environment at the start, its end, exit and the recorder's status at the end — and what a person calls the job."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from gpusleuth._version import __version__
from gpusleuth.run.layout import RunDir
from gpusleuth.run.meta import FORMAT_VERSION

# Environment variables worth keeping in meta.json: they change how a job performs.
ENV_KEEP = re.compile(
    r"^(CUDA_|NCCL_|TORCH|PYTORCH_|OMP_|MKL_|WORLD_SIZE$|RANK$|LOCAL_RANK$|MASTER_|SLURM_JOB|"
    r"NVIDIA_VISIBLE_DEVICES$|KMP_|TF32|GPUSLEUTH_)"
)


def start_meta(command: list[str], label: str | None, interval_s: float, duration_s: float | None,
               profile_steps: str | None, report_options: dict[str, Any]) -> dict[str, Any]:
    """meta.json as the run starts: its end, exit code and signal are filled in when the job ends."""
    return {
        "format": FORMAT_VERSION,
        "gpusleuth_version": __version__,
        "source": "recorder",
        "label": label,
        "command": command,
        "cwd": os.getcwd(),
        "env": {k: v for k, v in os.environ.items() if ENV_KEEP.match(k)},
        "python": sys.version.split()[0],
        "hostname": os.uname().nodename,
        "interval_s": interval_s,
        "duration_limit_s": duration_s,
        "profile_steps": profile_steps,
        "start_ns": time.time_ns(),
        "end_ns": None,
        "exit_code": None,
        "signal": None,
        "stopped_by": None,
        "report_options": report_options,
    }


def save_meta(run_dir: Path, meta: dict[str, Any], notes: list[str]) -> bool:
    try:
        RunDir(run_dir).write_meta(meta)
        return True
    except OSError as exc:
        notes.append(f"could not write meta.json ({exc.strerror or exc}): the run's end and exit code "
                     f"(exit code {meta.get('exit_code')}) are not saved; `gpusleuth report` takes the end "
                     "from the last sample")
        return False


def job_name(command: list[str]) -> str:
    """What a person calls this job: the script or module a Python command (or a launcher such as torchrun,
    accelerate launch, deepspeed) runs, else the program."""
    program = Path(command[0]).name
    scripts = [Path(a).name for a in command[1:] if a.endswith(".py")]
    if program.startswith("python"):
        args = command[1:]
        for i, a in enumerate(args):
            if a == "-m" and i + 1 < len(args):
                return scripts[0] if args[i + 1] in LAUNCHERS and scripts else args[i + 1]
            if not a.startswith("-"):
                return Path(a).name
    elif program in LAUNCHERS and scripts:
        return scripts[0]
    return program


LAUNCHERS = ("torchrun", "torch.distributed.run", "torch.distributed.launch", "accelerate", "deepspeed",
             "lightning", "composer")
