"""``summary.json`` in a recorded run's directory: the flat record ``gpusleuth fleet`` tabulates, left by the
verbs that record runs (``gpusleuth run``, ``load``) once their report is built. Written here, with the rest of
the run directory; read by ``sources/summaries.py``; made by ``report/summary.summarize``."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from gpusleuth.run.layout import RunDir


def write_summary(run_dir: Path, record: dict[str, Any]) -> bool:
    """Leave the summary in the run directory; a read-only directory is fine (False: not written)."""
    path = RunDir(run_dir).summary
    tmp = path.with_suffix(".json.tmp")
    try:
        tmp.write_text(json.dumps(record, default=str) + "\n")
        os.replace(tmp, path)
    except OSError:
        return False
    return True
