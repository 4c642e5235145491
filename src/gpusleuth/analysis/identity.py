"""What run this is (its label, command, exit, clock span, hardware, nodes), read off the Run once so that
nothing after the analysis needs the Run to say it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # typing's from Python 3.11; the package runs on 3.10 (annotations are never evaluated)
    from typing import NotRequired

from gpusleuth.run.meta import NodeMeta
from gpusleuth.run.model import Run
from gpusleuth.run.records import GpuHardware, HostHardware


class Hardware(TypedDict):
    """The report's ``run.hardware`` (docs/report-json.md): each device and the host as their source described
    them, and the device a trace names."""

    gpus: list[GpuHardware]
    host: HostHardware
    device: NotRequired[str]


@dataclass
class RunInfo:
    label: str
    path: str | None
    source: str
    command: list[str] | None
    exit_code: int | None
    signal: str | None
    stopped_by: str | None
    wall_s: float | None
    start_ns: int | None
    end_ns: int | None
    hardware: Hardware
    # Several run directories of one job (sources/jobdirs.py): per directory its path, ranks, clock offset
    # onto the first directory's clock and how it was found. Empty for one directory.
    nodes: list[NodeMeta] = field(default_factory=list)


def run_info(run: Run, recorded: bool) -> RunInfo:
    """The Run's identity; a trace set read alone (no recording) is labelled by its number of traces."""
    m = run.meta
    rec = m.get("recorder") or {}
    hardware: Hardware = {"gpus": rec.get("gpu") or [], "host": rec.get("host") or {}}
    device = m.get("device")
    if device:
        hardware["device"] = device
    label = run.label
    if run.trace is None and len(run.profiles) > 1 and not recorded:
        label = f"{len(run.profiles)} traces"
    return RunInfo(
        label=label,
        path=str(run.path) if run.path else m.get("trace_path"),
        source=str(m.get("source") or "recorder"),
        command=m.get("command"),
        exit_code=m.get("exit_code"),
        signal=m.get("signal"),
        stopped_by=m.get("stopped_by"),
        wall_s=run.wall_s,
        start_ns=run.start_ns,
        end_ns=run.end_ns,
        hardware=hardware,
        nodes=list(m.get("nodes") or []),
    )
