"""The trace reader's answers, pinned: every Kineto trace under tests/fixtures, and damaged, re-laid-out and
re-compressed copies of a few, read into the same columns, tables, metadata and loss sentences as the reader
before issue 36 (its fast path: the backward boundary search, the decompressing thread, the column pass).

The digests in ``fixtures/reader_golden/digests.json`` were written by that reader (commit e383938) with
``PYTHONPATH=src python tests/test_trace_reader_golden.py --write``; a change that moves any of them changes
an answer and must say why."""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from gpusleuth.errors import InputError
from gpusleuth.sources.kineto import load_trace

FIX = Path(__file__).parent / "fixtures"
GOLDEN = FIX / "reader_golden" / "digests.json"
FOLDERS = ["hta", "traces", "field_traces", "tracelens", "straggler"]
# traces whose copies are damaged, re-laid-out and re-compressed (small, varied: NCCL, ROCm, shapes, CPU only)
VARIANT_SEEDS = ["traces/idle_causes.json", "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                 "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                 "tracelens/h100_qwen1.5_0.5b.json.gz", "hta/nccl_parser_config/nccl_data.json.gz"]


def trace_files() -> list[Path]:
    out = []
    for d in FOLDERS:
        out += [p for p in sorted((FIX / d).rglob("*")) if p.is_file() and p.name.endswith((".json", ".json.gz"))
                and p.name != "meta.json" and "trace" in p.as_posix().split(FIX.as_posix())[-1] + d]
    return out


def _text(p: Path) -> bytes:
    b = p.read_bytes()
    return gzip.decompress(b) if b[:2] == b"\x1f\x8b" else b


def variants(seed: Path) -> dict[str, bytes]:
    """Damaged, re-laid-out and re-compressed copies of ``seed`` (deterministic)."""
    text = _text(seed)
    doc = json.loads(text)
    out = {
        "compact": json.dumps(doc).encode(),
        "pretty": json.dumps(doc, indent=2).encode(),
        "oneline-tight": json.dumps(doc, separators=(",", ":")).encode(),
        "crlf": json.dumps(doc, indent=1).replace("\n", "\r\n").encode(),
    }
    for frac in (0.13, 0.5, 0.77, 0.999):
        out[f"cut-{frac}"] = text[: int(len(text) * frac)]
    mid = len(text) // 2
    out["flip"] = text[:mid] + b"#" + text[mid + 1:]
    out["hole"] = text[: len(text) // 3] + text[len(text) // 3 + 97:]
    out["nul-tail"] = text + b"\x00" * 4096
    return out


def compressed(text: bytes) -> dict[str, bytes]:
    import io

    z = io.BytesIO()
    with zipfile.ZipFile(z, "w", zipfile.ZIP_DEFLATED) as f:
        f.writestr("trace.json", text)
    g = gzip.compress(text)
    return {"gz": g, "gz-cut": g[: len(g) * 2 // 3], "gz-two-members": gzip.compress(text[:len(text) // 2])
            + gzip.compress(text[len(text) // 2:]), "bz2": bz2.compress(text), "xz": lzma.compress(text),
            "zip": z.getvalue()}


def digest(path: Path) -> dict:
    """Every answer the reader gives about ``path``: a hash of its columns and tables, its metadata and losses,
    or the sentence it refuses the file with."""
    try:
        run = load_trace(path)
    except InputError as exc:
        return {"error": str(exc).replace(str(path), "<path>")}
    t = run.trace
    h = hashlib.sha256()
    for k in sorted(t.events.keys() if hasattr(t.events, "keys") else t.events):
        col = np.ascontiguousarray(t.events[k])
        h.update(f"{k}:{col.dtype}:{len(col)}".encode())
        h.update(col.tobytes())
    for part in (t.names, t.cats, t.pids, t.tids, t.input_types, t.input_calls,
                 sorted(t.process_names.items(), key=repr), sorted(t.thread_names.items(), key=repr),
                 sorted(t.phase_counts.items()), sorted(t.dropped.items()), t.origin_ns):
        h.update(repr(part).encode())
    meta = dict(run.meta)
    meta["trace_path"] = meta["trace_path"].replace(str(path), "<path>")
    h.update(json.dumps([meta, t.meta], default=str, sort_keys=True).encode())
    return {"digest": h.hexdigest()[:32], "events": len(t.events),
            "losses": [x.replace(path.name, "<name>") for x in run.losses]}


def all_digests(tmp: Path) -> dict[str, dict]:
    out = {}
    for p in trace_files():
        out[p.relative_to(FIX).as_posix()] = digest(p)
    for rel in VARIANT_SEEDS:
        seed = FIX / rel
        for name, text in variants(seed).items():
            f = tmp / f"v.{name}.json"
            f.write_bytes(text)
            out[f"{rel}#{name}"] = digest(f)
        for name, data in compressed(_text(seed)).items():
            f = tmp / f"c.{name}"
            f.write_bytes(data)
            out[f"{rel}#{name}"] = digest(f)
    return out


@pytest.mark.slow  # 126 traces read twice: ~25 s a way on 2 busy cores, too long for the unit lane (the full suite runs it)
@pytest.mark.parametrize("thread", ["in line", "helper thread", "two processes"])
def test_reader_answers_are_the_pinned_ones(tmp_path, monkeypatch, thread):
    """Every way of reading: decompressing in line (small files), on the helper thread (big ones; forced here),
    and split between this process and a forked child (big files where a second CPU is usable; forced here,
    so each trace is read in two parts, or — damaged, cut off, too small to split — whole after all)."""
    from gpusleuth.sources.kineto import reader, split

    monkeypatch.setattr(reader, "AHEAD_MIN_BYTES", 1 << 60 if thread == "in line" else 0)
    monkeypatch.setattr(split, "SPLIT_MIN_TEXT", 0 if thread == "two processes" else 1 << 60)
    used: list[bool] = []
    if thread == "two processes":
        import gpusleuth.sources.kineto as K

        monkeypatch.setattr(split, "_usable_cpus", lambda: 2)
        real = K.read_split

        def counted(*a):
            res = real(*a)
            used.append(res is not None)
            return res

        monkeypatch.setattr(K, "read_split", counted)
    want = json.loads(GOLDEN.read_text())
    got = all_digests(tmp_path)
    assert sorted(got) == sorted(want)
    diff = [f"{k}:\n  got  {got[k]}\n  want {want[k]}" for k in sorted(want) if got[k] != want[k]]
    assert not diff, "\n".join(diff[:5]) + f"\n({len(diff)} differ)"
    if thread == "two processes":  # most were read in two parts; the rest (damaged, cut, tiny) whole after all
        assert sum(used) >= 60, f"{sum(used)} of {len(used)} traces split"


if __name__ == "__main__" and "--write" in sys.argv:
    import tempfile

    with tempfile.TemporaryDirectory() as td:
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        d = all_digests(Path(td))
        GOLDEN.write_text(json.dumps(d, indent=1, sort_keys=True) + "\n")
        print(f"{len(d)} digests written to {GOLDEN}")
