"""Joins of a server's requests to the forwards its batcher ran outside them, fuzzed (issue 32, "Nothing lost to
one bad join").

Random ``R`` and ``F`` lines — requests with no forward and no hand-off, hand-offs taken before or after they were
put, answers before the take, forwards no request overlaps, one request spanning many forwards, requests that ran
their own forwards beside batched ones, several server processes — go through the real event parser, then the
join (``serving/analysis/batching.py``), the request analysis and its split by load level (``serving/analysis/requests.py``).
None may raise; the numbers they give must add up: each joined request's parts are its service time, a forward's
batch size is the number of requests joined to it, and a level's requests are the ones that started in it.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def r_line(start: int, end: int, *, own: int = 0, handoff: int = -1, claimed: int = -1, delivered: int = -1,
           received: int = -1, gets: int = 0, rid: str = "-1", pre: int = -1, infer: int = 0, post: int = -1) -> str:
    batch = 4 if own else -1
    f1 = infer // max(own, 1) if own else -1
    return (f"R\t{start}\t{end}\t-1\t{pre}\t{infer}\t{post}\t200\tasgi\t{own}\t{batch}\t{{}}\t{handoff}\t{claimed}\t"
            f"{delivered}\t{rid}\t{f1}\t{received}\t{gets}\n")


def f_line(start: int, end: int, rows: int = -1, tid: int = 1) -> str:
    return f"F\t{start}\t{end}\t{rows}\t-1\t{tid}\n"


def parse(tmp_path, files: dict[int, list[str]]):
    """Event files (pid → lines) through the hook's own parser: the requests and batches tables of a Run."""
    from gpusleuth.run.model import Run
    from gpusleuth.sources.events import parse_event_files

    raw = tmp_path / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for pid, lines in files.items():
        (raw / f"events-{pid}.tsv").write_text(f'H\t{{"pid": {pid}, "role": "main"}}\n' + "".join(lines))
    ev = parse_event_files(tmp_path, None)
    return Run(meta={"start_ns": T0 - 10**9, "end_ns": T0 + 3 * 10**9, "source": "recorder"}, requests=ev.requests,
               batches=ev.batches)


def levels(n: int = 2, span: int = 2 * 10**9) -> list[SimpleNamespace]:
    cut = np.linspace(T0, T0 + span, n + 1).astype(np.int64)
    return [SimpleNamespace(level=i, concurrency=2 ** i, rate=0.0, start_ns=int(cut[i]), end_ns=int(cut[i + 1]))
            for i in range(n)]


def random_lines(rng: np.random.Generator) -> dict[int, list[str]]:
    files: dict[int, list[str]] = {7: [], 8: []}
    for _ in range(int(rng.integers(0, 40))):
        pid = int(rng.choice([7, 8]))
        start = T0 + int(rng.integers(0, 10**9))
        service = int(rng.integers(0, 50 * MS))
        end = start + service
        kind = rng.random()
        if kind < 0.2:  # it ran its own forwards (the model inside the request; a lazily started batcher's first)
            own = int(rng.integers(1, 4))
            pre = int(rng.integers(0, service + 1))
            infer = int(rng.integers(0, service - pre + 1))
            files[pid].append(r_line(start, end, own=own, pre=pre, infer=infer, post=service - pre - infer))
            continue
        if kind < 0.35:  # no forward, no hand-off: a health check, or work handed over through a deque
            files[pid].append(r_line(start, end, rid=str(int(rng.integers(0, 99)))))
            continue
        handoff = start + int(rng.integers(-MS, service + MS))  # even before its start: clocks of two threads
        claimed = -1 if rng.random() < 0.3 else handoff + int(rng.integers(-2 * MS, 20 * MS))
        delivered = -1 if rng.random() < 0.3 else handoff + int(rng.integers(-MS, 60 * MS))
        received = -1 if rng.random() < 0.6 else handoff + int(rng.integers(0, 80 * MS))
        files[pid].append(r_line(start, end, handoff=max(handoff, 0), claimed=max(claimed, -1),
                                 delivered=max(delivered, -1), received=received, gets=int(rng.integers(0, 10)),
                                 rid=str(int(rng.integers(0, 10**6)))))
    for _ in range(int(rng.integers(0, 60))):
        pid = int(rng.choice([7, 8, 9]))  # 9: a process with forwards and no request at all
        start = T0 + int(rng.integers(0, 10**9))
        files.setdefault(pid, []).append(f_line(start, start + int(rng.integers(0, 5 * MS)),
                                                int(rng.integers(-1, 17)), int(rng.integers(1, 3))))
    return files


def check(run) -> None:
    """Join, analyse and split: nothing raises, and the numbers add up."""
    from gpusleuth.serving.analysis.batching import join_batches
    from gpusleuth.serving.analysis.requests import analyze_requests, split_by_levels

    r, b = run.requests, run.batches
    join = join_batches(r, b)
    if join is not None:
        own = np.asarray(r["forwards"], dtype=np.int64) > 0
        idx = join.index
        assert len(set(idx.tolist())) == len(idx) and not own[idx].any()
        service = (np.asarray(r["end_ns"], dtype=np.int64) - np.asarray(r["start_ns"], dtype=np.int64))[idx]
        p = join.parts
        parts = p["pre_ns"] + p["wait_ns"] + p["infer_ns"] + p["post_ns"]
        assert (parts == service).all() and (p["forwards"] >= 1).all()
        for k in ("pre_ns", "wait_ns", "post_ns", "own_ns"):
            assert (p[k] >= 0).all(), k
        assert int(join.members.sum()) == int(p["forwards"].sum())
        assert (p["batch"] >= 1).all() and (p["batch"] <= join.members.max()).all()
        assert 0 <= join.unattributed <= int((~own).sum()) - len(idx)
        assert join.outside == len(b)
    ra = analyze_requests(run)
    if ra is None:
        assert not len(r)
        return
    lv = levels()
    split = split_by_levels(ra, run, lv)
    if not ra.count:
        assert split == []
        return
    assert [s.level for s in split] == [0, 1]
    starts = ra._rows["start_ns"]
    assert sum(s.requests for s in split) == int(((starts >= lv[0].start_ns) & (starts < lv[-1].end_ns)).sum())
    assert len(set(map(len, ra._rows.values()))) == 1  # one length: every column has a value for every request
    for s in split:
        assert all(np.isfinite(v) and 0 <= v <= 1 + 1e-9 for v in s.shares.values()), s.shares
        if s.batch_queued_share is not None:
            assert s.batch_queued_share >= 0


@pytest.mark.parametrize("seed", range(60))
def test_random_requests_and_forwards_join_without_raising_and_add_up(tmp_path, seed):
    check(parse(tmp_path, random_lines(np.random.default_rng(seed))))


def test_a_batcher_started_by_its_first_request_through_a_deque(tmp_path):
    """BentoML's shape at unit size: the first request ran the dispatcher's first forward itself (its task was
    created inside the request), the others handed their work over through a deque the hook cannot see, and
    the dispatcher's later forwards ran outside any request. The split by level raised ``KeyError: 'batched'``."""
    from gpusleuth.serving.analysis.requests import analyze_requests, split_by_levels

    lines = [r_line(T0, T0 + 6 * MS, own=1, pre=MS, infer=4 * MS, post=MS)]
    for k in range(1, 20):
        s = T0 + k * 10 * MS
        lines.append(r_line(s, s + 6 * MS, rid=str(k)))
        lines.append(f_line(s + 2 * MS, s + 5 * MS, rows=1))
    run = parse(tmp_path, {7: lines})
    ra = analyze_requests(run)
    assert ra is not None and ra.count == 1 and ra.batching is None
    assert ra.note is not None and ra.note.startswith("19 of 19 requests") and "not attributed" in ra.note
    split = split_by_levels(ra, run, levels(2, 200 * MS))
    assert [s.requests for s in split] == [1, 0]
    assert split[0].batch_forwards == 0  # the forwards served no request the join could name


def test_requests_with_no_forward_and_forwards_with_no_request(tmp_path):
    """Health checks while a batcher ran for a process with no request at all: nothing joined, nothing lost,
    and nobody counted as a request the batcher served."""
    from gpusleuth.serving.analysis.batching import join_batches

    lines7 = [r_line(T0 + k * MS, T0 + k * MS + 100_000) for k in range(5)]
    lines9 = [f_line(T0 + k * MS, T0 + k * MS + 500_000, rows=8) for k in range(5)]
    run = parse(tmp_path, {7: lines7, 9: lines9})
    join = join_batches(run.requests, run.batches)
    assert join is not None and len(join.index) == 0 and join.unattributed == 0
    check(run)


def test_one_request_and_many_forwards(tmp_path):
    """A generation: one hand-off, one take, an answer after 50 steps — joined to all 50, prefill the first."""
    from gpusleuth.serving.analysis.batching import join_batches

    steps = [f_line(T0 + 2 * MS + k * MS, T0 + 2 * MS + k * MS + 800_000, rows=1) for k in range(50)]
    run = parse(tmp_path, {7: [r_line(T0, T0 + 60 * MS, handoff=T0 + MS, claimed=T0 + 1_500_000,
                                      delivered=T0 + 55 * MS, rid="1")] + steps})
    join = join_batches(run.requests, run.batches)
    assert join is not None and join.index.tolist() == [0]
    assert join.parts["forwards"].tolist() == [50] and join.parts["prefill_ns"].tolist() == [800_000]
    assert join.parts["decode_ns"].tolist() == [49 * 800_000] and join.members.tolist() == [1] * 50
    check(run)


def test_a_join_that_raises_leaves_the_requests_with_a_sentence(tmp_path, monkeypatch):
    """Whatever a join meets that it was not written for, the requests that ran their own forwards are kept, and
    the ones it would have attributed are said in one sentence with their count and the error."""
    import gpusleuth.serving.analysis.requests as R

    lines = [r_line(T0, T0 + 6 * MS, own=1, pre=MS, infer=4 * MS, post=MS),
             r_line(T0 + 10 * MS, T0 + 16 * MS, handoff=T0 + 11 * MS, claimed=T0 + 11 * MS, delivered=T0 + 15 * MS),
             f_line(T0 + 12 * MS, T0 + 14 * MS, rows=1)]
    run = parse(tmp_path, {7: lines})

    def broken(requests, batches):
        raise IndexError("index 3 is out of bounds for axis 0 with size 2")

    monkeypatch.setattr(R, "join_batches", broken)
    ra = R.analyze_requests(run)
    assert ra is not None and ra.count == 1 and ra.batching is None
    assert ra.note is not None and ra.note.startswith("joining the 1 requests without a model forward")
    assert "IndexError" in ra.note and "not attributed" in ra.note
    assert [s.requests for s in R.split_by_levels(ra, run, levels(2, 40 * MS))] == [2 - 1, 0]


def test_the_warm_ups_requests_are_left_out_of_the_servers_analysis(tmp_path):
    """``gpusleuth load``'s warm-up (meta ``load.warmup``: its window) is reported apart from every level; the
    recorded server's requests inside that window — a cold start's 1.5 s ones — weigh in none of its shares."""
    from gpusleuth.serving.analysis.requests import analyze_requests

    lines = [r_line(T0 + k * MS, T0 + k * MS + 1500 * MS, own=1, pre=MS, infer=1498 * MS, post=MS) for k in range(4)]
    lines += [r_line(T0 + 2000 * MS + k * 10 * MS, T0 + 2000 * MS + k * 10 * MS + 6 * MS, own=1, pre=3 * MS,
                     infer=2 * MS, post=MS) for k in range(20)]
    run = parse(tmp_path, {7: lines})
    every = analyze_requests(run)
    assert every is not None and every.count == 24
    run.meta["load"] = {"warmup": {"requests": 4, "start_ns": T0 - MS, "end_ns": T0 + 1510 * MS}}
    ra = analyze_requests(run)
    assert ra is not None and ra.count == 20 and ra.latency_p95_ms == pytest.approx(6.0)
    assert ra.shares["pre"] == pytest.approx(0.5) and every.shares["infer"] > 0.9
