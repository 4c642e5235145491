"""MLPerf ``:::MLLOG {json}`` lines: the events time-to-train is measured from.

Lines come from the job's captured output (``gpusleuth run --capture-output``) or a log file the user
gives (``--mllog``). Each line is ``:::MLLOG`` followed by a JSON object with ``time_ms``, ``event_type``,
``key``, ``value`` and ``metadata``; anything else on the line before the marker (a logger prefix) is
ignored. Lines that are not valid JSON are counted, never fatal.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable

from gpusleuth.errors import InputError
from gpusleuth.run.mllog import MlLog

__all__ = ["MlLog", "parse_mllog_lines", "read_mllog"]

MARKER = ":::MLLOG"


def parse_mllog_lines(lines: Iterable[str]) -> MlLog:
    out = MlLog()
    for line in lines:
        i = line.find(MARKER)
        if i < 0:
            continue
        try:
            rec = json.loads(line[i + len(MARKER):].strip())
            out.events.append({
                "t_ns": int(float(rec["time_ms"]) * 1e6),
                "key": str(rec["key"]),
                "value": rec.get("value"),
                "event_type": rec.get("event_type"),
                "metadata": rec.get("metadata") or {},
            })
        except (ValueError, KeyError, TypeError):
            out.bad_lines += 1
    out.events.sort(key=lambda e: e["t_ns"])
    return out


def read_mllog(path: str | Path) -> MlLog:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return parse_mllog_lines(f)
    except OSError as exc:
        raise InputError(path, f"cannot read the MLLOG file ({exc.strerror})") from None
