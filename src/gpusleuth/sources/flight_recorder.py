"""torch's Flight Recorder, read: a process's ring of its last collectives (``run/stalls.FlightRing``).

Two inputs, one shape:

* the snapshot ``gpusleuth run``'s stall watch takes from a stuck process through the hook
  (hook/_gpusleuth_stall.py: JSON, ``{"fr": {...}, "nccl": {...}}``, one torch dump per ring, stack traces left
  out), saved as ``stalls/<id>/flight-<pid>.json``;
* a dump file torch wrote itself (NCCL's watchdog on timeout, ``TORCH_FR_DUMP_TEMP_FILE``, or
  ``torch._C._distributed_c10d._dump_fr_trace()``): a pickle of a dict with ``entries``, ``pg_status`` and
  ``pg_config``. A pickle can run code when loaded, so it is read with an unpickler that builds only plain
  values (dicts, lists, tuples, strings, numbers) and refuses anything else.

Fields used (torch ≥ 2.5, dump version 2.x): each entry's ``pg_id``/``process_group``, ``collective_seq_id``,
``p2p_seq_id``, ``is_p2p``, ``profiling_name`` ("gloo:all_reduce", "nccl:all_reduce"), ``state``; each group's
``pg_status`` ``last_enqueued_collective``/``last_completed_collective``. Everything else is left alone.
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

from gpusleuth.run.stalls import FlightEntry, FlightRing

MAX_BYTES = 64 << 20


class _PlainUnpickler(pickle.Unpickler):
    """Plain values only: any class or function a pickle names is refused (a dump file is not trusted)."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused {module}.{name}: a Flight Recorder dump holds plain values only")


def load_dump(data: bytes) -> dict[str, Any]:
    """torch's pickled dump, as plain values."""
    obj = _PlainUnpickler(io.BytesIO(data)).load()
    if not isinstance(obj, dict):
        raise ValueError("not a Flight Recorder dump (not a dict)")
    return obj


def _int(v: Any) -> int | None:
    try:
        return int(v) if v is not None and not isinstance(v, bool) else None
    except (TypeError, ValueError):
        return None


def _group(e: dict[str, Any]) -> str:
    pg = e.get("pg_id")
    if pg is None and isinstance(e.get("process_group"), (list, tuple)) and e["process_group"]:
        pg = e["process_group"][0]
    return str(pg) if pg is not None else "?"


def _op(name: Any) -> str:
    text = str(name or "?")
    return text.split(":", 1)[1] if ":" in text else text


def ring_from_dump(pid: int, dump: dict[str, Any], ring: FlightRing | None = None) -> FlightRing:
    """One torch dump (``entries``, ``pg_status``) into ``ring`` (a process can hold two: gloo's and NCCL's)."""
    ring = ring if ring is not None else FlightRing(pid=pid)
    for e in dump.get("entries") or []:
        if not isinstance(e, dict):
            continue
        p2p = bool(e.get("is_p2p"))
        seq = _int(e.get("p2p_seq_id" if p2p else "collective_seq_id"))
        if seq is None:
            continue
        ring.entries.append(FlightEntry(group=_group(e), seq=seq, op=_op(e.get("profiling_name")),
                                        state=str(e["state"]) if e.get("state") is not None else None, p2p=p2p))
    status = dump.get("pg_status")
    if isinstance(status, dict):
        for pg, st in status.items():
            if isinstance(st, dict):
                enq, done = _int(st.get("last_enqueued_collective")), _int(st.get("last_completed_collective"))
                ring.groups[str(pg)] = (enq if enq is None or enq >= 0 else None,
                                        done if done is None or done >= 0 else None)
    # a dump without pg_status (older torch): the ring's own highest collective per group is the last entered
    for e in ring.entries:
        if not e.p2p and e.group not in ring.groups:
            ring.groups[e.group] = (max(x.seq for x in ring.entries if x.group == e.group and not x.p2p), None)
    return ring


def ring_from_snapshot(pid: int, text: str) -> FlightRing:
    """The hook's JSON snapshot (``{"fr": dump, "nccl": dump}``, or one dump) into a ring."""
    obj = json.loads(text)
    ring = FlightRing(pid=pid)
    if not isinstance(obj, dict):
        ring.error = "not a Flight Recorder snapshot"
        return ring
    dumps = [obj] if "entries" in obj else [v for v in obj.values() if isinstance(v, dict)]
    errors = [str(d["error"]) for d in dumps if "error" in d and "entries" not in d]
    if "error" in obj and not dumps:
        errors.append(str(obj["error"]))
    for d in dumps:
        if "entries" in d:
            ring_from_dump(pid, d, ring)
    if not ring.entries and not ring.groups:
        ring.error = "; ".join(errors) or "the ring was empty"
    return ring


def read_dump_file(path: Path, pid: int = 0) -> FlightRing:
    """A dump file torch wrote (pickle), or a snapshot gpusleuth saved (JSON)."""
    with open(path, "rb") as f:
        data = f.read(MAX_BYTES)
    if data[:1] in (b"{", b"["):
        return ring_from_snapshot(pid, data.decode("utf-8", "replace"))
    return ring_from_dump(pid, load_dump(data))
