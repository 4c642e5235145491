"""What reading one trace file produced besides its events: metadata and losses (a leaf module, so the
reader and the salvage both use it without importing each other)."""

from __future__ import annotations

from dataclasses import dataclass

from .decompress import StreamLosses
from .schema import Head, Tail


@dataclass
class ReadResult(StreamLosses):
    """Metadata and bookkeeping of one streamed file (the events themselves go to the sink); the
    container's losses (``truncated``, ``notes``) come from :class:`StreamLosses`."""

    head: Head | None = None
    tail: Tail | None = None
    lost_bytes: int = 0
    lost_events_estimate: int = 0
    total_text_bytes: int = 0
    bad_utf8: int = 0
