"""The client's ``X-Request-Id`` as a join key between the client's rows and the server's, whatever it is.

``gpusleuth load`` sends a plain integer; other clients, gateways and replayed production traffic send
UUIDs, prefixed strings (``cmpl-…``, ``req_…``) or anything else a header can hold. The join compares the
**text** the client sent with the text the server saw, exactly: ``"00123"`` joins ``"00123"``, not
``"123"``. The text is untrusted: it is kept bounded (``REQUEST_ID_MAX`` characters; a longer one is cut,
and an id that then repeats is left out of the join like any repeated id) and characters that are not
printable are replaced, so a header cannot smuggle a control sequence to whoever reads the rows; where an
id is shown it still goes through the renderers' escaping (render/text.py).

Older runs and ``gpusleuth load``'s own column hold int64 ids with −1 for "none": ``request_keys`` reads
both kinds of column into one array of text keys (``""``: no id).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

REQUEST_ID_MAX = 128  # characters of an id kept: a UUID is 36, vLLM's "cmpl-" + 32 hex 37


def clean_request_id(text: str) -> str:
    """One id as read from a record: ``""`` for none (``-1``, empty), at most ``REQUEST_ID_MAX`` characters,
    characters that are not printable replaced by U+FFFD."""
    text = text.strip()
    if not text or text == "-1":
        return ""
    text = text[:REQUEST_ID_MAX]
    return text if text.isprintable() else "".join(ch if ch.isprintable() else "\ufffd" for ch in text)


def request_keys(values: Iterable[object]) -> np.ndarray:
    """A column of ids (int64 with −1 for none, or text) → an object array of text keys (``""``: none)."""
    arr = np.asarray(values if isinstance(values, np.ndarray) else list(values))
    if arr.dtype.kind in "iu":
        return np.asarray([str(v) if v >= 0 else "" for v in arr.tolist()], dtype=object)
    return np.asarray([clean_request_id(str(v)) if v is not None else "" for v in arr.tolist()], dtype=object)


def join_on_ids(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (into ``left``, into ``right``) of the ids each side holds exactly once: an id sent twice
    (a client that reuses ids, a fixed ``--header X-Request-Id``) says nothing about which answer is which."""
    def once(keys: np.ndarray) -> dict[str, int]:
        seen: dict[str, int] = {}
        for i, k in enumerate(keys.tolist()):
            if k:
                seen[k] = -1 if k in seen else i
        return {k: i for k, i in seen.items() if i >= 0}

    a, b = once(request_keys(left)), once(request_keys(right))
    common = [k for k in a if k in b]
    return (np.asarray([a[k] for k in common], dtype=np.int64), np.asarray([b[k] for k in common], dtype=np.int64))


__all__ = ["REQUEST_ID_MAX", "clean_request_id", "join_on_ids", "request_keys"]
