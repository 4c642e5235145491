"""The stall verdict on records alone (analysis/stalls.py, sources/stalls.py): in-process, no job.

The stack texts are the two real formats (py-spy 0.4 ``dump --full-filenames``, CPython's faulthandler), cut
from dumps of tests/fixtures/hangs/hang_job.py."""

from __future__ import annotations

import json
import re

from gpusleuth.analysis.stalls import judge
from gpusleuth.recorder.stallwatch import safe
from gpusleuth.run.stalls import ProcessStacks, StalledProcess, StallRecord
from gpusleuth.sources.stalls import parse_faulthandler, parse_pyspy, read_stalls

PYSPY_R0 = """Process 101: python -u train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 101 (idle): "MainThread"
    all_reduce (/usr/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py:3252)
    wrapper (/usr/lib/python3.11/site-packages/torch/distributed/c10d_logger.py:83)
    <module> (/job/train.py:45)
Thread 105 (idle): "pin_memory"
    wait (/usr/lib/python3.11/threading.py:331)
"""
PYSPY_R1 = """Process 102: python -u train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 102 (idle): "MainThread"
    load (/job/data.py:12)
    <module> (/job/train.py:31)
"""
FH_R1 = """Thread 0x00007fc71646c000 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 331 in wait

Current thread 0x00007fc71646bb80 (most recent call first):
  File "/job/data.py", line 12 in load
  File "/job/train.py", line 31 in <module>
"""


def _rec(stacks, steps=(5, 5), ranks=(0, 1)):
    procs = [StalledProcess(pid=101 + i, rank=r, role="main", steps=s, last_progress_ns=1_000_000_000, stalled=True)
             for i, (r, s) in enumerate(zip(ranks, steps))]
    return StallRecord(id=1, seen_ns=12_000_000_000, since_ns=1_000_000_000, threshold_s=10.0, processes=procs,
                       stacks=stacks, resumed_ns=31_000_000_000)


def test_the_rank_outside_the_collective_is_the_culprit():
    r0 = ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0))
    r1 = ProcessStacks(102, "faulthandler", parse_faulthandler(FH_R1))
    assert r0.threads[0].main and r0.threads[0].frames[0].function == "all_reduce"
    assert r1.threads[-1].main and r1.threads[-1].frames[0].line == 12
    v = judge(_rec([r0, r1]))
    assert v.how == "stacks" and [c.rank for c in v.culprits] == [1] and [w.rank for w in v.waiting] == [0]
    assert v.culprits[0].where == "/job/data.py:12" and v.waiting[0].collective == "all_reduce"
    assert v.waiting[0].where == "/job/train.py:45"  # the job's own frame, not torch's
    assert v.recovered and v.duration_s == 30.0
    assert abs(v.process_hours - 2 * 30 / 3600) < 1e-9
    assert v.sentence == ("rank 1 is in /job/data.py:12, outside any collective; rank 0 waits in all_reduce at "
                          "/job/train.py:45")


def test_without_telling_stacks_the_rank_behind_in_steps_is_named():
    both = [ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0)), ProcessStacks(102, "py-spy", parse_pyspy(PYSPY_R0))]
    v = judge(_rec(both, steps=(7, 6)))
    assert v.how == "steps" and [c.rank for c in v.culprits] == [1], v
    v = judge(_rec(both, steps=(7, 7)))
    assert v.how is None and not v.culprits and "the rank they wait for is not among" in v.sentence
    v = judge(_rec([], steps=(7, 7)))  # no stack at all
    assert v.stacks_taken == 0 and v.sentence == "no single culprit: no stack taken"


def test_stall_records_are_read_back_and_stay_inside_the_run(tmp_path):
    stalls = tmp_path / "stalls"
    (stalls / "1").mkdir(parents=True)
    (stalls / "1" / "stacks-102.txt").write_text(PYSPY_R1)
    (tmp_path / "secret.txt").write_text(PYSPY_R1)
    rec = {"kind": "stall", "id": 1, "seen_ns": 12, "since_ns": 1, "threshold_s": 10.0, "action": "dump",
           "processes": [{"pid": 102, "rank": 1, "steps": 3, "last_progress_ns": 1, "stalled": True}],
           "stacks": [{"pid": 102, "via": "py-spy", "path": "stalls/1/stacks-102.txt"},
                      {"pid": 103, "via": "py-spy", "path": "../" + tmp_path.name + "/../secret.txt"}]}
    lines = [json.dumps(rec), "not json", json.dumps({"kind": "ended", "id": 1, "t_ns": 40})]
    (stalls / "stalls.jsonl").write_text("\n".join(lines) + "\n")
    losses: list[str] = []
    (got,) = read_stalls(tmp_path, losses)
    assert got.ended_ns == 40 and got.resumed_ns is None
    assert [s.pid for s in got.stacks] == [102]
    assert got.stacks[0].threads[0].frames[1].file == "/job/train.py"
    assert any("outside the run directory" in x for x in losses) and any("1 unreadable" in x for x in losses)
    v = judge(got)
    assert v.ended_stuck and not v.recovered


def test_job_text_is_escaped_for_the_terminal():
    hostile = "train\x1b[2J\u202e.py:3"
    assert safe(hostile) == "train\\x1b[2J\\u202e.py:3"


def test_the_live_view_shows_the_stall_going_on_and_then_its_end(tmp_path):
    import time

    from gpusleuth.render.live import fields, plain_line
    from gpusleuth.report.live import LiveTail

    stalls = tmp_path / "stalls"
    (stalls / "1").mkdir(parents=True)
    (stalls / "1" / "stacks-102.txt").write_text(PYSPY_R1.replace("/job/data.py", "/job/d\x1b[2Jata.py"))
    (stalls / "1" / "stacks-101.txt").write_text(PYSPY_R0)
    since = time.time_ns() - 42_000_000_000
    rec = {"kind": "stall", "id": 1, "seen_ns": since + 10**10, "since_ns": since, "threshold_s": 10.0,
           "processes": [{"pid": 101, "rank": 0, "steps": 3, "last_progress_ns": since, "stalled": True},
                         {"pid": 102, "rank": 1, "steps": 3, "last_progress_ns": since, "stalled": True}],
           "stacks": [{"pid": 101, "via": "py-spy", "path": "stalls/1/stacks-101.txt"},
                      {"pid": 102, "via": "py-spy", "path": "stalls/1/stacks-102.txt"}]}
    (stalls / "stalls.jsonl").write_text(json.dumps(rec) + "\n")
    tail = LiveTail(tmp_path)
    s = tail.poll()
    assert s.stalls == 1 and 41 <= s.stall_s <= 60, s.stall_s
    line = plain_line(s)
    assert re.search(r"stall \d+ s: rank 1 is in /job/d\\x1b\[2Jata\.py:12, outside any collective", line), line
    assert "\x1b" not in line
    with open(stalls / "stalls.jsonl", "a") as f:
        f.write(json.dumps({"kind": "resumed", "id": 1, "t_ns": since + 50 * 10**9}) + "\n")
    s = tail.poll()
    assert s.stall_s is None and dict(fields(s))["stall"] == "none (1 so far)"


def test_ranks_in_different_collectives_are_a_mismatch():
    bcast = PYSPY_R0.replace("all_reduce (", "broadcast (").replace("/job/train.py:45", "/job/train.py:50")
    stacks = [ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0)), ProcessStacks(102, "py-spy", parse_pyspy(bcast))]
    v = judge(_rec(stacks))
    assert v.how == "mismatch" and {c.rank for c in v.culprits} == {0, 1} and not v.waiting
    assert v.sentence == ("mismatched collectives: rank 0 in all_reduce at /job/train.py:45; rank 1 in broadcast "
                          "at /job/train.py:50")
    # three ranks, one odd: it is named, the two others wait
    stacks.append(ProcessStacks(103, "py-spy", parse_pyspy(PYSPY_R0)))
    v = judge(_rec(stacks, steps=(5, 5, 5), ranks=(0, 1, 2)))
    assert v.how == "mismatch" and [c.rank for c in v.culprits] == [1] and [w.rank for w in v.waiting] == [0, 2]
    # all in the same collective at the same line: no culprit from the stacks
    same = [ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0)), ProcessStacks(102, "py-spy", parse_pyspy(PYSPY_R0))]
    assert judge(_rec(same)).how is None


def test_per_node_stalls_are_merged_into_one_verdict():
    """Node 0's recorder saw rank 0 waiting in all_reduce (no culprit it could see), node 1's saw rank 1 outside
    any collective: overlapping in time, they are one stall of the job, and the verdict names rank 1."""
    from gpusleuth.sources.jobdirs import merge_stalls

    def node(pid, rank, text, since, end):
        return StallRecord(id=1, seen_ns=since + 10 * 10**9, since_ns=since, threshold_s=10.0,
                           processes=[StalledProcess(pid, rank, "main", 5, since, True)],
                           stacks=[ProcessStacks(pid, "py-spy", parse_pyspy(text), path=f"stalls/1/stacks-{pid}.txt")],
                           resumed_ns=end)

    s = 10**9
    alone = judge(node(101, 0, PYSPY_R0, 5 * s, 40 * s))
    assert not alone.culprits and [w.rank for w in alone.waiting] == [0]  # what node 0 saw: a rank waiting
    assert alone.sentence == ("rank 0 waits in all_reduce at /job/train.py:45, all in the same one: the rank they "
                              "wait for is not among the processes recorded here (another node's run directory?)")
    later = node(101, 0, PYSPY_R0, 100 * s, 130 * s)  # a second, separate stall on node 0 only
    merged = merge_stalls([("node0", node(101, 0, PYSPY_R0, 5 * s, 40 * s)), ("node0", later),
                           ("node1", node(102, 1, PYSPY_R1, 5 * s + 3 * 10**8, 39 * s))])
    assert [m.id for m in merged] == [1, 2]
    first = merged[0]
    assert {p.rank for p in first.processes} == {0, 1} and first.resumed_ns == 40 * s and first.since_ns == 5 * s
    assert [x.path for x in first.stacks] == ["node0/stalls/1/stacks-101.txt", "node1/stalls/1/stacks-102.txt"]
    v = judge(first)
    assert [c.rank for c in v.culprits] == [1] and [w.rank for w in v.waiting] == [0] and v.how == "stacks"
    assert {p.rank for p in merged[1].processes} == {0}


def test_the_hang_rule_grades_what_the_verdict_says():
    """Severity from the stall's end: a short pause that recovered is moderate, a minute or more high, a job that
    ended stuck high, a stall followed by a normal exit none (work after the loop); the worst is the one named."""
    from gpusleuth.diagnosis.facts import Facts
    from gpusleuth.diagnosis.rules.hangs import hangs

    def verdict(resumed=None, ended=None, length=30, ended_normally=False):
        stacks = [ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0)), ProcessStacks(102, "py-spy", parse_pyspy(PYSPY_R1))]
        rec = _rec(stacks)
        rec.resumed_ns = rec.since_ns + length * 10**9 if resumed else None
        rec.ended_ns = rec.since_ns + length * 10**9 if ended else None
        v = judge(rec)
        v.ended_normally = ended_normally
        return v

    def grade(*vs):
        (f,) = hangs(Facts(outcomes=None, gpus=[], host=None, gpu_note=None, stalls=list(vs)))  # type: ignore[arg-type]
        return f

    assert hangs(Facts(outcomes=None, gpus=[], host=None, gpu_note=None)) == []  # type: ignore[arg-type]
    f = grade(verdict(resumed=True, length=20))
    assert f.severity == "moderate" and "recovered" in f.title and "rank 1 is in /job/data.py:12" in f.title
    assert grade(verdict(resumed=True, length=75)).severity == "high"
    f = grade(verdict(ended=True, length=20))
    assert f.severity == "high" and "still stuck" in f.title and f.confidence == "high"
    f = grade(verdict(ended=True, length=20, ended_normally=True))
    assert f.severity == "none" and "ended normally" in f.title
    # a real hang outranks a tail before a normal exit, and a short pause, in the one finding
    f = grade(verdict(resumed=True, length=20), verdict(ended=True, length=12))
    assert f.severity == "high" and "stall 1" in {e.name for e in f.evidence}


# torch's Flight Recorder: dumps shaped as torch 2.13 writes them on gloo (`_dump_fr_trace`: version 2.10, gloo
# leaves entries "scheduled" and keeps its progress in pg_status), cut to the fields read
def _dump(seqs: list[tuple[int, str]], enqueued: int, completed: int, pg: str = "0") -> dict:
    return {"version": "2.10", "pg_config": {"": {"name": "", "desc": "", "ranks": "[0, 1]"}},
            "pg_status": {pg: {"last_enqueued_collective": str(enqueued), "last_started_collective": "-1",
                               "last_completed_collective": str(completed)}},
            "entries": [{"record_id": i, "pg_id": int(pg), "process_group": (pg, "default_pg"),
                         "collective_seq_id": seq, "p2p_seq_id": 0, "op_id": seq, "profiling_name": f"gloo:{op}",
                         "state": "scheduled", "is_p2p": False, "retired": False} for i, (seq, op) in enumerate(seqs)]}


def test_the_flight_recorder_names_the_rank_that_never_entered_the_collective():
    from gpusleuth.sources.flight_recorder import ring_from_dump, ring_from_snapshot

    r0 = ring_from_dump(101, _dump([(20, "all_reduce"), (21, "all_reduce")], 21, 20))
    r1 = ring_from_snapshot(102, json.dumps({"fr": _dump([(19, "all_reduce"), (20, "all_reduce")], 20, 20)}))
    both = [ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0)), ProcessStacks(102, "py-spy", parse_pyspy(PYSPY_R0))]
    rec = _rec(both, steps=(7, 7))
    rec.flight = [r0, r1]
    v = judge(rec)
    # the stacks alone could not tell (both in all_reduce, same line, same steps): the rings do
    assert v.how == "flight" and [c.rank for c in v.culprits] == [1] and [w.rank for w in v.waiting] == [0]
    assert v.flight == ("Flight Recorder: rank 1 never entered all_reduce #21 (rank 1's last: all_reduce #20); "
                        "rank 0 entered it and wait"), v.flight
    # with stacks that tell, the stacks' verdict stands and the rings are said beside it
    rec = _rec([ProcessStacks(101, "py-spy", parse_pyspy(PYSPY_R0)), ProcessStacks(102, "py-spy", parse_pyspy(PYSPY_R1))])
    rec.flight = [r0, r1]
    v = judge(rec)
    assert v.how == "stacks" and v.flight and v.flight_behind == [102]


def test_the_flight_recorder_says_a_mismatch_and_a_stall_outside_collectives():
    from gpusleuth.sources.flight_recorder import ring_from_dump

    rec = _rec([])
    rec.flight = [ring_from_dump(101, _dump([(21, "all_reduce")], 21, 20)),
                  ring_from_dump(102, _dump([(21, "broadcast")], 21, 20))]
    assert judge(rec).flight == "Flight Recorder: collective #21 is all_reduce on rank 0, broadcast on rank 1: mismatched"
    rec.flight = [ring_from_dump(101, _dump([(21, "all_reduce")], 21, 21)),
                  ring_from_dump(102, _dump([(21, "all_reduce")], 21, 21))]
    v = judge(rec)
    assert v.flight is not None and "completed its last collective (all_reduce #21)" in v.flight and not v.flight_behind
    rec.flight = []  # the job kept no ring
    assert judge(rec).flight is None


def test_a_dump_file_is_read_with_plain_values_only(tmp_path):
    """torch's dump files are pickles: one that names any class or function is refused, never run."""
    import collections
    import pickle

    import pytest

    from gpusleuth.sources.flight_recorder import read_dump_file

    good = tmp_path / "nccl_trace_rank_1"
    good.write_bytes(pickle.dumps(_dump([(4, "all_reduce"), (5, "barrier")], 5, 4)))
    ring = read_dump_file(good, pid=7)
    assert ring.groups == {"0": (5, 4)} and [(e.seq, e.op) for e in ring.entries] == [(4, "all_reduce"), (5, "barrier")]
    bad = tmp_path / "evil"
    bad.write_bytes(pickle.dumps({"entries": collections.OrderedDict()}))
    with pytest.raises(pickle.UnpicklingError, match="plain values only"):
        read_dump_file(bad)


# a Flask app under werkzeug's threaded server, as faulthandler writes it: a handler in the app's view waiting on a
# lock, a handler idle on its keep-alive connection (no app code inside the dispatch), a model thread, and the main
# thread in the accept loop
FH_SERVER = """Thread 0x00007f0000000004 (most recent call first):
  File "/srv/app.py", line 30 in worker
  File "/usr/lib/python3.11/threading.py", line 975 in run

Thread 0x00007f0000000003 (most recent call first):
  File "/usr/lib/python3.11/socket.py", line 706 in readinto
  File "/usr/lib/python3.11/http/server.py", line 410 in handle_one_request
  File "/usr/lib/python3.11/site-packages/werkzeug/serving.py", line 398 in handle
  File "/usr/lib/python3.11/socketserver.py", line 361 in finish_request

Thread 0x00007f0000000002 (most recent call first):
  File "/srv/app.py", line 18 in predict
  File "/usr/lib/python3.11/site-packages/flask/app.py", line 880 in full_dispatch_request
  File "/usr/lib/python3.11/site-packages/flask/app.py", line 1511 in wsgi_app
  File "/usr/lib/python3.11/site-packages/werkzeug/serving.py", line 322 in run_wsgi
  File "/usr/lib/python3.11/socketserver.py", line 361 in finish_request

Current thread 0x00007f0000000001 (most recent call first):
  File "/usr/lib/python3.11/selectors.py", line 415 in select
  File "/usr/lib/python3.11/socketserver.py", line 232 in serve_forever
  File "/srv/app.py", line 40 in <module>
"""


def test_a_server_is_placed_where_its_request_handlers_stand():
    """A server's verdict is its request handlers' place (the app's line inside the dispatch), not its main
    thread's accept loop; a handler idle on a keep-alive connection counts for nothing; the model thread is
    among its other threads."""
    from gpusleuth.analysis.stalls import handler_places

    stacks = ProcessStacks(201, "faulthandler", parse_faulthandler(FH_SERVER), role="server")
    assert handler_places(stacks) == ([("/srv/app.py:18", 1)], [("/srv/app.py:30", 1), ("/srv/app.py:40", 1)])
    rec = StallRecord(id=1, seen_ns=12_000_000_000, since_ns=1_000_000_000, threshold_s=10.0, stacks=[stacks],
                      processes=[StalledProcess(pid=201, rank=None, role="server", steps=0,
                                                last_progress_ns=1_000_000_000, stalled=True)])
    v = judge(rec, now_ns=20_000_000_000)
    assert v.how == "handlers" and v.culprits[0].where == "/srv/app.py:18", v
    assert v.sentence == "pid 201: request handler(s) at /srv/app.py:18 (1 thread)"
