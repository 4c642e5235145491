"""A big trace read by two processes (``sources/kineto/split.py``) gives the answer one process gives: the
parts meet at a true event boundary, the child's columns and string tables are re-coded into the parent's,
and anything irregular (a false boundary at the split point, damage in either part, a child that dies or
fails) makes the parent read the whole file itself. tests/test_trace_reader_golden.py pins every fixture's
answer through this path too."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from gpusleuth.sources.kineto import load_trace, split

sys.path.insert(0, str(Path(__file__).parent))
from test_trace_reader_golden import digest  # noqa: E402

pytestmark = pytest.mark.process  # each split read forks a child

FIX = Path(__file__).parent / "fixtures"
NCCL = FIX / "hta" / "nccl_parser_config" / "nccl_data.json.gz"  # 9.8 MB of JSON: several chunks a part


@pytest.fixture
def forced(monkeypatch):
    """Split every file (a test file is small), and count the reads that really were split."""
    import gpusleuth.sources.kineto as K

    monkeypatch.setattr(split, "SPLIT_MIN_TEXT", 0)
    monkeypatch.setattr(split, "_usable_cpus", lambda: 2)
    used: list[bool] = []
    real = K.read_split

    def counted(*a, **k):
        res = real(*a, **k)
        used.append(res is not None)
        return res

    monkeypatch.setattr(K, "read_split", counted)
    return used


def whole(path: Path, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        m.setattr(split, "SPLIT_MIN_TEXT", 1 << 60)
        return digest(path)


@pytest.mark.parametrize("cpus", [2, 4])
def test_split_read_gives_the_whole_read_answer(forced, monkeypatch, cpus):
    """Two CPUs: both parts decompress in line; four: each on its own helper thread."""
    from gpusleuth.sources.kineto import reader

    monkeypatch.setattr(split, "_usable_cpus", lambda: cpus)
    want = whole(NCCL, monkeypatch)
    threads: list[int] = []
    real = reader.text_blocks_ahead
    monkeypatch.setattr(reader, "text_blocks_ahead", lambda *a: threads.append(1) or real(*a))
    assert digest(NCCL) == want
    assert forced == [True]  # really read in two parts
    assert len(threads) == (cpus >= 3)  # this process's part (the child's thread is the child's)


@pytest.mark.parametrize("share", [0.1, 0.5, 0.9])
def test_any_split_point_meets_at_an_event_boundary(forced, monkeypatch, tmp_path, share):
    """Pretty and one-line layouts, the split point early, in the middle and late."""
    doc = json.loads(gzip.decompress(NCCL.read_bytes()))
    monkeypatch.setattr(split, "FIRST_SHARE", share)
    for layout, text in (("pretty", json.dumps(doc, indent=2)), ("oneline", json.dumps(doc))):
        f = tmp_path / f"{layout}.json"
        f.write_text(text)
        assert digest(f) == whole(f, monkeypatch), layout
    assert forced == [True, True]


def _trace(n: int, name: str) -> bytes:
    evs = [{"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": 1000 + 10 * i, "dur": 5,
            "args": {"correlation": i, "stream": 7, "device": 0}} for i in range(n)]
    evs.insert(0, {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}})
    return json.dumps({"schemaVersion": 1, "traceEvents": evs, "baseTimeNanoseconds": 17}).encode()


@pytest.mark.parametrize("at", ["in the name", "after the name"])
def test_a_false_boundary_in_a_name_at_the_split_point(forced, monkeypatch, tmp_path, at):
    """Every name holds ``}, {``. With the split point just before one, the first match after it sits inside
    a string, where the parent's last piece cannot decode: the file is read whole. Just after the name, the
    next match is a true boundary and the read is split. The same answer both ways."""
    text = _trace(40_000, 'k}, {"ph": "X"} , {x')
    f = tmp_path / "odd.json"
    f.write_bytes(text)
    pos = text.find(b"k}, {", len(text) // 2)
    if at == "after the name":
        pos = text.find(b'{x"', pos) + 3
    monkeypatch.setattr(split, "FIRST_SHARE", (pos + 0.5) / len(text))
    assert split.split_point(f) == pos
    assert digest(f) == whole(f, monkeypatch)
    assert forced == [at == "after the name"]


@pytest.mark.parametrize("where", [0.3, 0.8])
def test_damage_in_either_part_is_read_whole(forced, monkeypatch, tmp_path, where):
    text = gzip.decompress(NCCL.read_bytes())
    at = text.find(b'"ph"', int(len(text) * where))  # a key's quote: the event cannot decode
    f = tmp_path / "flip.json"
    f.write_bytes(text[:at] + b"#" + text[at + 1:])
    got = digest(f)
    assert got == whole(f, monkeypatch)
    assert any("cut off or damaged" in x for x in got["losses"])
    assert forced == [False]


def test_a_cut_off_gzip_is_read_whole(forced, monkeypatch, tmp_path):
    data = NCCL.read_bytes()
    f = tmp_path / "cut.json.gz"
    f.write_bytes(data[: len(data) * 9 // 10])
    got = digest(f)
    assert got == whole(f, monkeypatch) and got["losses"]
    assert forced == [False]


@pytest.mark.parametrize("how", ["dies", "raises", "says no"])
def test_a_child_that_fails_leaves_the_answer_whole(forced, monkeypatch, how):
    def child(path, at, w, ahead):
        if how == "dies":
            os._exit(9)
        if how == "raises":
            raise RuntimeError("boom")
        split._send(w, None)
        return 0

    monkeypatch.setattr(split, "_child", child)
    assert digest(NCCL) == whole(NCCL, monkeypatch)
    assert forced == [False]


def test_names_and_codes_from_both_parts(forced, monkeypatch, tmp_path):
    """Names first seen in the child's part get codes after the parent's; a thread name given in both parts
    ends as the later one, as one reader would leave it."""
    evs = [{"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "early"}}]
    evs += [{"ph": "X", "cat": "cpu_op", "name": f"op{i % 50}" if i < 20_000 else f"late{i % 7}", "pid": 0,
             "tid": 1, "ts": 5 + i, "dur": 1} for i in range(40_000)]
    evs.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": 1, "args": {"name": "late"}})
    f = tmp_path / "names.json"
    f.write_text(json.dumps({"traceEvents": evs}, indent=1))
    monkeypatch.setattr(split, "FIRST_SHARE", 0.5)
    run = load_trace(f)
    assert forced == [True]
    assert run.trace.thread_names == {(0, 1): "late"}
    assert {f"late{i}" for i in range(7)} <= set(run.trace.names)
    assert digest(f) == whole(f, monkeypatch)


def test_not_split_inside_a_pool_worker_or_for_small_files(monkeypatch):
    """A trace set's worker processes already fill the cores; small traces stay in one process."""
    monkeypatch.setattr(split, "_usable_cpus", lambda: 2)
    assert split.split_point(NCCL) is None  # 9.8 MB: below SPLIT_MIN_TEXT
    monkeypatch.setattr(split, "SPLIT_MIN_TEXT", 0)
    assert split.split_point(NCCL) == int(split.json_size(NCCL) * split.FIRST_SHARE)
    with multiprocessing.get_context("fork").Pool(1) as pool:
        assert pool.apply(split.split_point, (NCCL,)) is None
    monkeypatch.setattr(split, "_usable_cpus", lambda: 1)
    assert split.split_point(NCCL) is None


def test_a_trace_sets_workers_read_each_rank_alone(forced):
    """A pool's or Ray's worker reads its rank in one process, asked explicitly (a Ray worker is no
    multiprocessing child); read rank by rank in this process, a big rank is split."""
    from gpusleuth.pipeline.trace_set import RankResult, analyse_rank_file, analyse_rank_in_worker

    assert isinstance(analyse_rank_in_worker(str(NCCL)), RankResult)
    assert forced == []
    assert isinstance(analyse_rank_file(str(NCCL)), RankResult)
    assert forced == [True]


def test_no_process_to_spare_reads_in_one(forced, monkeypatch):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(split.os, "fork", no_fork)
    assert digest(NCCL) == whole(NCCL, monkeypatch)
    assert forced == [False]


def test_a_gzip_trailer_claiming_too_much_is_not_believed(tmp_path, monkeypatch):
    """A cut or damaged gzip's last four bytes are anything: a small file claiming 4 GB of JSON is read
    whole, not read twice (the fuzz suite's cut copies did this)."""
    monkeypatch.setattr(split, "_usable_cpus", lambda: 2)
    data = bytearray(NCCL.read_bytes())
    data[-4:] = (0xFFFFFFF0).to_bytes(4, "little")
    f = tmp_path / "claims.json.gz"
    f.write_bytes(bytes(data))
    assert split.json_size(f) > split.SPLIT_MIN_TEXT
    assert split.split_point(f) is None
    big = tmp_path / "big.json"  # the same claim from a plain file of that size is believed
    with open(big, "wb") as out:
        out.truncate(split.SPLIT_MIN_TEXT)
    assert split.split_point(big) is None  # (sparse zeros: no "{" or "[" at the start — not a plain trace)
    big.write_bytes(b"{" + b" " * (split.SPLIT_MIN_TEXT - 1))
    assert split.split_point(big) == int(split.SPLIT_MIN_TEXT * split.FIRST_SHARE)
