"""msgspec schemas for Kineto Chrome-trace JSON.

Why typed Structs: msgspec skips every field a Struct does not name without building a Python object for
it, so the dozens of per-event ``args`` we never use ("Input Dims", "Ev Idx", grid/block sizes…) cost
a scan, not an allocation. Measured on the real traces this is the fastest decoder we have (see
docs/trace-analysis.md, "Decoder choice").

``gc=False``: these structs never form reference cycles, so they need no GC tracking (cheaper to
allocate and free by the million). Fields whose JSON type varies between Kineto versions and vendors (``pid`` is ``"Spans"`` on the
profiler's own span row, ``stream`` is ``"0x0"`` in ROCm runtime rows, ids may be strings) are typed
``Any`` so an odd value never fails a whole chunk; the column builder coerces them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence, Union

import msgspec

from .textdecode import Text


class Args(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The few ``args`` keys the analyses need (all optional)."""

    correlation: Any = None
    stream: Any = None
    device: Any = None
    name: Any = None  # process_name / thread_name metadata rows
    # an op's argument dtypes (traces recorded with ``record_shapes``); interned once per distinct
    # signature (a msgspec.Raw would pin the in-place decode buffer)
    input_type: Any = msgspec.field(default=None, name="Input type")
    # an op's argument shapes and scalar values (``record_shapes``): what tells a model's layers (the same
    # call with the same arguments each time) from a loop over rows (an index that walks), analysis/host_ops.
    # The column builder re-encodes them to bytes to intern (C speed; turning each into tuples in Python
    # doubled a shape-heavy trace's load time) and the analysis parses the few it reads. Cost: HTA's
    # mtia_rank_0 (3 MB, 10,724 signatures) 0.75 -> 0.89 s, Qwen's 0.035 -> 0.040 s; none without shapes
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    concrete_inputs: Any = msgspec.field(default=None, name="Concrete Inputs")


class _Complete(msgspec.Struct, forbid_unknown_fields=False, gc=False):
    """The fields of a complete (``X``) event that the column builder reads; ``ts``/``dur`` are µs
    (floats in ns-resolution traces)."""

    cat: Any = ""
    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    ts: Any = None
    dur: Any = None
    args: Args | None = None


class Event(_Complete):
    """One ``traceEvents`` entry of any phase (the loose decoder, when the tagged one cannot be used)."""

    ph: Any = ""


class XEvent(_Complete, tag_field="ph", tag="X"):
    """A complete event, selected by its ``ph`` tag (the rows we keep)."""


class MEvent(msgspec.Struct, tag_field="ph", tag="M", forbid_unknown_fields=False, gc=False):
    """Metadata (process/thread names)."""

    name: Any = ""
    pid: Any = 0
    tid: Any = 0
    args: Args | None = None


# Every other Chrome-trace phase decodes to a field-less struct: msgspec skips its fields without
# building anything (flow arrows alone are ~40 % of a Kineto trace's events).
_SKIPPED = [msgspec.defstruct(f"Phase{ord(ph)}", [], tag_field="ph", tag=ph, gc=False)
            for ph in "BEiICbnestfPNODVvRc()"]
if TYPE_CHECKING:
    # What the type check sees of a decoded event (the loose part of the schema of untrusted JSON): one of the
    # structs above, or a field-less struct of a skipped phase (made at run time, so a checker cannot name them);
    # the column builder tells them apart by ``type(e)``. A chunk is a list of them, from either decoder.
    FastEvent = Union[XEvent, MEvent, msgspec.Struct]
    DecodedEvent = Union[Event, XEvent, MEvent, msgspec.Struct]
    Chunk = Sequence[DecodedEvent]
    LooseEvents = Chunk
    FastEvents = Chunk
else:
    FastEvent = Union[tuple([XEvent, MEvent, *_SKIPPED])]
    LooseEvents = list[Event]
    FastEvents = list[FastEvent]


class Tail(msgspec.Struct, forbid_unknown_fields=False):
    """The last events plus whatever metadata follows ``traceEvents`` (newer Kineto puts
    ``displayTimeUnit`` and ``baseTimeNanoseconds`` after the array)."""

    traceEvents: LooseEvents = []
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None
    distributedInfo: Any = None
    deviceProperties: Any = None


class Head(msgspec.Struct, forbid_unknown_fields=False):
    """Metadata before ``traceEvents`` (decoded from the header with an empty array spliced in)."""

    schemaVersion: Any = None
    deviceProperties: Any = None
    distributedInfo: Any = None
    displayTimeUnit: Any = None
    baseTimeNanoseconds: Any = None
    traceName: Any = None


class FastTail(Tail):
    traceEvents: FastEvents = []


_EVENTS_FAST = msgspec.json.Decoder(list[FastEvent])
_EVENTS_LOOSE = msgspec.json.Decoder(list[Event])
_TAIL_FAST = msgspec.json.Decoder(FastTail)
_TAIL_LOOSE = msgspec.json.Decoder(Tail)
HEAD_DECODER = msgspec.json.Decoder(Head)


def decode_events(buf: Text) -> Chunk:
    """Decode a JSON array of events: tagged by ``ph`` (fast), or — when an event has no or an unknown
    ``ph`` — with the permissive schema. Syntax errors propagate (the caller handles cuts and damage)."""
    try:
        return _EVENTS_FAST.decode(buf)
    except msgspec.ValidationError:
        return _EVENTS_LOOSE.decode(buf)


def decode_tail(buf: Text) -> Tail:
    """Decode ``{"traceEvents": [...last events...], ...trailing metadata}``."""
    try:
        return _TAIL_FAST.decode(buf)
    except msgspec.ValidationError:
        return _TAIL_LOOSE.decode(buf)
