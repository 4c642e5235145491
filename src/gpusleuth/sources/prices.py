"""A user's JSON price table (``--prices FILE``); ``analysis/cost.py`` merges it over its dated defaults."""

from __future__ import annotations

import json
from pathlib import Path

from gpusleuth.errors import InputError


def read_price_table(path: str | Path | None) -> dict[str, float]:
    """USD per GPU-hour by model name, as the user wrote them; {} without a file."""
    if path is None:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise InputError(path, f"cannot read the price file ({exc.strerror})") from None
    except json.JSONDecodeError as exc:
        raise InputError(path, f"price file is not JSON ({exc})") from None
    if not isinstance(data, dict) or not all(isinstance(v, (int, float)) for v in data.values()):
        raise InputError(path, 'price file must be a JSON object like {"H100 SXM": 4.0, "A100": 2.0}')
    return {str(k): float(v) for k, v in data.items()}
