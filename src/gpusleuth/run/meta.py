"""``meta.json``: what ran, where, on what hardware, and how it ended."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

META_FILE = "meta.json"
FORMAT_VERSION = 1


def write_meta(run_dir: Path, meta: dict[str, Any]) -> None:
    """Write atomically so a crash never leaves a half-written meta.json."""
    path = Path(run_dir) / META_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_meta(run_dir: Path) -> dict[str, Any]:
    from gpusleuth.errors import InputError

    path = Path(run_dir) / META_FILE
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise InputError(run_dir, "not a gpusleuth run directory (no meta.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(path, f"meta.json is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise InputError(path, "meta.json must hold a JSON object")
    return meta
