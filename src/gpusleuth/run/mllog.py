"""MLPerf ``:::MLLOG`` events as a part of the Run (``Run.mllog``): what time-to-train is measured from.

``sources/mllog.py`` parses them — from the run's captured output when the run is read, or from a file the
user names with ``--mllog``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpusleuth.run.meta import JsonObject


@dataclass
class MlLog:
    """The events in time order, each ``t_ns``, ``key``, ``value``, ``event_type``, ``metadata``; lines that
    carried the marker but no readable record are counted, never fatal."""

    events: list[JsonObject] = field(default_factory=list)
    bad_lines: int = 0
