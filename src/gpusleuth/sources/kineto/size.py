"""How much JSON a trace file holds, without reading it: what a worker planning its memory needs to know."""

from __future__ import annotations

import os
import struct
from pathlib import Path

from .reader import open_regular

#: assumed expansion of a compressed trace whose size the file does not state (bzip2, xz, zstd, zip)
COMPRESSED_RATIO = 10


def json_size(path: Path) -> int:
    """The trace's uncompressed JSON size: a gzip file says it in its trailer (mod 4 GiB), other compressed
    formats are assumed to expand ``COMPRESSED_RATIO`` times, a plain file is its size."""
    size = path.stat().st_size
    with open_regular(path) as f:
        head = f.read(6)
        if head[:2] == b"\x1f\x8b" and size >= 18:
            f.seek(-4, os.SEEK_END)
            stated: int = struct.unpack("<I", f.read(4))[0]
            # the trailer wraps at 4 GiB: take the first value at or above the compressed size
            while stated < size:
                stated += 2**32
            return stated
        if head[:3] in (b"BZh", b"\xfd7zX", b"PK\x03") or head[:4] == b"\x28\xb5\x2f\xfd":
            return size * COMPRESSED_RATIO
    return size
