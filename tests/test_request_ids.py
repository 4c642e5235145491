"""The client's X-Request-Id joins the client's rows to the server's whatever the client sent (issue 26):
UUIDs, prefixed strings, integers from older runs — compared as text, bounded, never trusted."""

from __future__ import annotations

import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gpusleuth.serving.run.request_ids import REQUEST_ID_MAX, clean_request_id, join_on_ids, request_keys


def test_ids_are_text_compared_exactly_bounded_and_cleaned():
    assert request_keys(np.asarray([12, -1, 7], dtype=np.int64)).tolist() == ["12", "", "7"]
    u = str(uuid.UUID(int=5))
    assert request_keys(np.asarray([u, "-1", "", "00123"], dtype=object)).tolist() == [u, "", "", "00123"]
    assert clean_request_id("a\x1b[31mb") == "a\ufffd[31mb"  # an escape sequence cannot reach a terminal whole
    assert len(clean_request_id("x" * 100_000)) == REQUEST_ID_MAX
    # "00123" is not "123"; an id either side holds twice joins nothing
    left = np.asarray(["00123", "a", "dup", "dup", "b"], dtype=object)
    right = np.asarray(["b", "123", "dup", "a"], dtype=object)
    li, ri = join_on_ids(left, right)
    assert sorted(zip(left[li].tolist(), right[ri].tolist())) == [("a", "a"), ("b", "b")]
    # an old run's int64 column joins the text the server saw
    li, ri = join_on_ids(np.asarray([41, 42], dtype=np.int64), np.asarray(["42", "41"], dtype=object))
    assert li.tolist() == [0, 1] and ri.tolist() == [1, 0]


def _uuid_run(tmp_path: Path, n: int = 40):
    """A recorded server's R lines carrying UUID request ids (the header as it came) and the client's rows of
    the same requests: one level at concurrency 1 (each request alone) and one at 8, where every answer also
    spent ``outside`` ns before the server's handler started it."""
    from gpusleuth.run.model import Run, Table
    from gpusleuth.sources.events import parse_event_files

    t0 = 1_700_000_000_000_000_000
    raw = tmp_path / "raw"
    raw.mkdir()
    lines = ['H\t{"pid": 7, "role": "main"}\n']
    cols: dict[str, list] = {k: [] for k in ("level", "concurrency", "rate", "start_ns", "end_ns", "status", "error",
                                             "request_id", "first_token_ns", "output_tokens", "lag_ns")}
    ids = [str(uuid.UUID(int=(i + 1) * 7919)) for i in range(2 * n)]
    for i, rid in enumerate(ids):
        level = i // n
        outside = 2_000_000 if level == 0 else 30_000_000
        c0 = t0 + level * 10**10 + (i % n) * 50_000_000
        s0 = c0 + outside // 2  # the server's handler starts half the outside time later
        s1 = s0 + 10_000_000  # 10 ms inside: 2 pre, 6 infer, 2 post
        lines.append(f"R\t{s0}\t{s1}\t-1\t2000000\t6000000\t2000000\t200\thttp.server\t1\t1\t{{}}\t-1\t-1\t-1\t{rid}"
                     f"\t6000000\t-1\t0\n")
        for k, v in (("level", level), ("concurrency", 1 if level == 0 else 8), ("rate", 0.0), ("start_ns", c0),
                     ("end_ns", s1 + outside // 2), ("status", 200), ("error", ""), ("request_id", rid),
                     ("first_token_ns", s0 + 8_000_000), ("output_tokens", 16), ("lag_ns", 0)):
            cols[k].append(v)
    (raw / "events-7.tsv").write_text("".join(lines))
    ev = parse_event_files(tmp_path, None)
    run = Run(meta={"start_ns": t0, "end_ns": t0 + 3 * 10**10, "source": "recorder"}, requests=ev.requests,
              load=Table({k: np.asarray(v, dtype=object if k in ("error", "request_id") else None)
                          for k, v in cols.items()}))
    levels = [SimpleNamespace(level=lv, concurrency=1 if lv == 0 else 8, rate=0.0, start_ns=t0 + lv * 10**10,
                              end_ns=t0 + (lv + 1) * 10**10) for lv in (0, 1)]
    return run, levels, ids


def test_uuid_request_ids_join_the_client_to_the_server(tmp_path):
    """The client's time outside the server, per request, and the SLO misses' parts join on UUIDs as they did
    on integers: every request joined, the planted 30 ms outside the server found at concurrency 8."""
    from gpusleuth.serving.analysis.requests import analyze_requests, split_by_levels
    from gpusleuth.serving.analysis.slo_miss import explain_misses

    run, levels, ids = _uuid_run(tmp_path)
    assert run.requests["request_id"].tolist() == ids  # read as the text the header carried
    ra = analyze_requests(run)
    ra.levels = split_by_levels(ra, run, levels)
    lv1, lv8 = ra.levels
    assert (lv1.outside_joined, lv8.outside_joined) == (40, 40)
    assert lv1.outside_p50_ms == pytest.approx(2.0) and lv8.outside_p50_ms == pytest.approx(30.0)
    load = SimpleNamespace(slo={"e2e_ms": 20.0}, levels=levels)
    (miss,) = explain_misses(run, load, ra)
    assert (miss.concurrency, miss.missed, miss.joined, miss.dominant) == (8, 40, 40, "outside")
    assert miss.excess_ms["outside"] == pytest.approx(28.0)


@pytest.mark.process
@pytest.mark.parametrize("script", ["http_infer.py", "wsgi_infer.py", "asgi_infer.py"])
def test_the_hook_records_the_id_each_client_sent_as_text(tmp_path, script):
    """A real server under ``gpusleuth run`` (the stdlib's http.server, a WSGI app, FastAPI on uvicorn — the
    header reaches the hook as str, from a WSGI environ, and as ASGI bytes): the ids the clients
    sent — UUIDs, a vLLM-style ``cmpl-…``, leading zeros, one with a tab that would split the record line, one
    of 300 characters — are the server's rows' ids, as text, bounded and cleaned the way the reader cleans
    them; a request without one has none."""
    import http.client
    import signal
    import subprocess
    import sys

    from conftest import free_port
    from gpusleuth.sources.rundir import load_run
    from test_serving import BODY, SERVERS, _env, _wait_ready

    port = free_port()
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                             sys.executable, str(SERVERS / script), str(port), str(tmp_path / "truth.json")],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sent = [str(uuid.UUID(int=(i + 3) * 104729)) for i in range(12)]
    sent += ["cmpl-" + "ab12" * 8, "00123", "tab\there", "z" * 300, None]
    try:
        _wait_ready(port, proc)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        for rid in sent:
            conn.request("POST", "/", body=BODY, headers={} if rid is None else {"X-Request-Id": rid})
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    r = load_run(out).requests
    model = r.filter(r["forwards"] > 0)  # the readiness probes have no forward
    got = model["request_id"].tolist()
    want = [clean_request_id(x) if x is not None else "" for x in sent]
    assert got == want, got
    assert want[-3] == "tab\ufffdhere" and len(want[-2]) == REQUEST_ID_MAX  # what the cleaning is for


@pytest.mark.process
def test_a_request_answered_just_before_ctrl_c_keeps_its_record(tmp_path):
    """Ctrl-C right after a server answered: its handler thread had written the response but not returned
    (here it keeps working 30 s after the answer, the widest form of a race that lost the last request's ``R``
    line now and then under load), and daemon handler threads stop where they are at exit. The request is
    still recorded, ended at its last write — the client had its answer."""
    import http.client
    import signal
    import subprocess
    import sys
    import time

    from conftest import free_port
    from gpusleuth.sources.rundir import load_run
    from test_serving import BODY, SERVERS, _env, _wait_ready

    port = free_port()
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "run", "--no-report", "--out", str(out), "--",
                             sys.executable, str(SERVERS / "http_infer.py"), str(port), str(tmp_path / "truth.json"),
                             "plain", "30"],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, proc)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        t0 = time.time_ns()
        conn.request("POST", "/", body=BODY, headers={"X-Request-Id": "answered-then-ctrl-c"})
        resp = conn.getresponse()
        resp.read()
        t1 = time.time_ns()
        assert resp.status == 200
        time.sleep(1.0)  # the handler works on (30 s): a request ended at exit would end a second after its answer
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    r = load_run(out).requests
    mine = r.filter(r["request_id"] == "answered-then-ctrl-c")
    assert len(mine) == 1, r["request_id"].tolist()
    start, end = int(mine["start_ns"][0]), int(mine["end_ns"][0])
    # Ended at its answer, not at exit. The handler reads its clock once its write has returned, and the client can
    # have read the bytes before that (CI: 0.14 ms earlier), so the bound is the answer plus a scheduling delay.
    assert t0 <= start <= end < t1 + 300_000_000, (t0, start, end, t1)
    assert int(mine["forwards"][0]) == 1 and int(mine["status"][0]) == 200
