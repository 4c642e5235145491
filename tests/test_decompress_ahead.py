"""The decompressing thread (``text_blocks_ahead``) gives what ``text_blocks`` gives — the same blocks, the
container's losses at the same point, the same refusal — and never outlives the read."""

from __future__ import annotations

import gzip
import threading
import time

import pytest

from gpusleuth.errors import InputError
from gpusleuth.sources.kineto import decompress
from gpusleuth.sources.kineto.decompress import StreamLosses, text_blocks, text_blocks_ahead

pytestmark = pytest.mark.unit


def _helpers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "gpusleuth-inflate"]


def _wait_gone(timeout: float = 2.0) -> bool:
    end = time.monotonic() + timeout
    while _helpers() and time.monotonic() < end:
        time.sleep(0.01)
    return not _helpers()


def test_same_blocks_and_losses_as_the_plain_reader(tmp_path):
    text = b"".join(b'{"ph": "X", "name": "k%d", "ts": %d},\n' % (i, i) for i in range(200_000))
    data = gzip.compress(text)
    for name, raw in {"whole": data, "cut": data[: len(data) * 2 // 3],
                      "two-members": data + gzip.compress(b"tail")}.items():
        f = tmp_path / f"{name}.gz"
        f.write_bytes(raw)
        a, b = StreamLosses(), StreamLosses()
        plain = b"".join(text_blocks(f, None, a))
        seen = []
        ahead = b"".join(text_blocks_ahead(f, lambda d, t: seen.append((d, t)), b))
        assert ahead == plain and (a.truncated, a.notes) == (b.truncated, b.notes), name
        assert seen and seen[-1][0] <= f.stat().st_size
    assert _wait_gone()


def test_losses_arrive_when_the_stream_ends_not_before(tmp_path):
    f = tmp_path / "cut.gz"
    data = gzip.compress(b"x" * 5_000_000)
    f.write_bytes(data[: len(data) // 2])
    res = StreamLosses()
    gen = text_blocks_ahead(f, None, res)
    next(gen)
    time.sleep(0.2)  # the helper has reached the cut by now; the caller has not
    assert res.notes == [] and not res.truncated
    list(gen)
    assert res.truncated and res.notes


def test_refusals_are_raised_in_the_caller(tmp_path):
    f = tmp_path / "empty.json"
    f.write_bytes(b"")
    with pytest.raises(InputError, match="empty"):
        list(text_blocks_ahead(f))
    with pytest.raises(FileNotFoundError):  # as text_blocks (the reader's callers check the path first)
        list(text_blocks_ahead(tmp_path / "missing.json"))
    assert _wait_gone()


def test_a_caller_that_stops_early_stops_the_helper(tmp_path):
    f = tmp_path / "big.gz"
    f.write_bytes(gzip.compress(b"y" * 50_000_000, compresslevel=1))
    gen = text_blocks_ahead(f)
    next(gen)
    gen.close()
    assert _wait_gone()


def test_a_refused_trace_leaves_no_helper_behind(tmp_path, monkeypatch):
    """The reader closes the stream when it refuses a file, while the traceback still holds its frame."""
    from gpusleuth.sources.kineto import load_trace, reader

    monkeypatch.setattr(reader, "AHEAD_MIN_BYTES", 0)  # this small file on the helper thread too
    started = []
    monkeypatch.setattr(reader, "text_blocks_ahead", lambda *a: started.append(1) or text_blocks_ahead(*a))

    f = tmp_path / "not-a-trace.json.gz"
    f.write_bytes(gzip.compress(b"hello " * 5_000_000))  # refused at its first block
    with pytest.raises(InputError) as caught:
        load_trace(f)
    assert started and _wait_gone(0.5), caught.value


def test_zlib_ng_salvages_a_damaged_gzip_exactly_as_zlib_does(tmp_path, monkeypatch):
    """The trace text is inflated by zlib-ng (faster) where it is installed; a damaged stream must still give back
    the very bytes, and the very sentence, that the standard zlib's salvage gives — the reader's counts of kept
    and lost events rest on them. A real trace, compressed, then one bit flipped at 40 places in turn."""
    import random
    import zlib

    from pathlib import Path

    field = Path(__file__).parent / "fixtures" / "field_traces"
    zlib_ng = pytest.importorskip("zlib_ng.zlib_ng")
    assert decompress._inflate is zlib_ng  # installed with gpusleuth: the fast inflate is the one in use
    raw = gzip.open(field / "imagenet_resnet18.pt.trace.json.gz").read()[:1_500_000]
    packed = gzip.compress(raw, 6)
    rng = random.Random(7)
    damaged = 0
    for _ in range(40):
        data = bytearray(packed)
        data[rng.randrange(20, len(data) - 8)] ^= 1 << rng.randrange(8)
        path = tmp_path / "t.json.gz"
        path.write_bytes(bytes(data))
        got = []
        for inflate in (zlib, zlib_ng):
            monkeypatch.setattr(decompress, "_inflate", inflate)
            losses = decompress.StreamLosses()
            got.append((b"".join(decompress.text_blocks(path, None, losses)), losses.truncated, losses.notes))
        assert got[0] == got[1]
        damaged += got[0][1]
    assert damaged >= 30  # the flips really damaged the stream (a few land where deflate cannot tell)
