"""``gpusleuth load`` against a hostile server (issue 23 case 6, issue 26 deliverable 9): every fault is a row
with a sentence, never an exception that loses the level; bodies are never held whole (the client's peak RSS,
measured by the kernel for its process alone, stays bounded whatever the server sends).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import free_port, gpusleuth
from test_serving import _wait_ready

pytestmark = pytest.mark.process  # starts child processes (tests/conftest.py: lanes)

SERVERS = Path(__file__).parent / "servers"


@pytest.fixture(scope="module")
def hostile():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS / "hostile_http.py"), str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _load_with_peak_rss(*args, timeout=120) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``gpusleuth load ARGS`` as the only child of a small wrapper that prints the child's peak RSS (MB,
    ``getrusage(RUSAGE_CHILDREN)``) on its last stderr line."""
    wrapper = ("import resource, subprocess, sys\n"
               "r = subprocess.run(sys.argv[1:])\n"
               "print('PEAK', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)\n"
               "sys.exit(r.returncode)\n")
    res = subprocess.run([sys.executable, "-c", wrapper, sys.executable, "-m", "gpusleuth", "load", *map(str, args)],
                         capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    peak = [ln for ln in res.stderr.splitlines() if ln.startswith("PEAK ")]
    return res, int(peak[-1].split()[1]) / 1024


def _baseline_rss(hostile) -> float:
    res, peak = _load_with_peak_rss(hostile + "/", "--concurrency", "8", "--requests", "40", "--json")
    assert res.returncode == 0, res.stderr
    return peak


def test_a_30_digit_status_is_a_protocol_error_and_other_results_are_kept(hostile, tmp_path):
    res = gpusleuth("load", hostile + "/status30", "--concurrency", "2", "--requests", "10", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    serving = json.loads(res.stdout)["serving"]
    lv = serving["levels"][0]
    assert lv["requests"] == 10 and lv["errors_by"] == {"protocol": 10}
    assert any("10 answers were not HTTP" in n and "is not three digits" in n for n in serving["notes"])


def test_failures_are_broken_down_by_status(hostile, tmp_path):
    """500, 429 and 302 from three levels of one run: each level's failures by status."""
    levels = []
    for code in ("500", "429", "302"):
        res = gpusleuth("load", f"{hostile}/s{code}", "--concurrency", "2", "--requests", "6", "--json")
        assert res.returncode == 0, res.stderr
        lv = json.loads(res.stdout)["serving"]["levels"][0]
        levels.append(lv)
        assert lv["errors_by"] == {code: 6} and lv["errors"] == 6 and lv["ok"] == 0
    res = gpusleuth("load", f"{hostile}/s429", "--concurrency", "1", "--requests", "3")
    assert "failed by status or cause — 1: 429×3" in res.stdout


def test_100_mb_bodies_at_concurrency_8_and_a_10_gb_content_length_keep_memory_bounded(hostile):
    base = _baseline_rss(hostile)
    res, big = _load_with_peak_rss(hostile + "/big", "--concurrency", "8", "--requests", "16", "--timeout", "60",
                                   "--duration", "6", "--json", timeout=240)
    assert res.returncode == 0, res.stderr
    lv = json.loads(res.stdout)["serving"]["levels"][0]
    assert lv["ok"] == lv["requests"] >= 8  # 8 in flight at once, 100 MB each, read and dropped
    # held whole, 8 bodies in flight were 800 MB (954 MB RSS before the fix); read in 64 KiB pieces, ~nothing
    assert big < base + 60, (base, big)
    res, huge = _load_with_peak_rss(hostile + "/huge", "--concurrency", "2", "--duration", "2", "--timeout", "3",
                                    "--json", timeout=120)
    assert res.returncode == 0, res.stderr
    lv = json.loads(res.stdout)["serving"]["levels"][0]
    assert lv["timeouts"] == lv["requests"] >= 2
    assert huge < base + 60, (base, huge)


def test_an_html_server_is_not_openai_compatible_in_a_sentence(hostile):
    res = gpusleuth("load", hostile + "/html/v1/chat/completions", "--model", "m", "--concurrency", "2",
                    "--requests", "6", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    serving = json.loads(res.stdout)["serving"]
    assert serving["levels"][0]["errors_by"] == {"api": 6}
    notes = " ".join(serving["notes"])
    assert "does not look OpenAI-compatible" in notes and "text/html" in notes


def test_a_malformed_event_and_a_stream_that_never_ends_are_sentences(hostile):
    res = gpusleuth("load", hostile + "/malformed/v1/chat/completions", "--model", "m", "--concurrency", "1",
                    "--requests", "3", "--json")
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
    serving = json.loads(res.stdout)["serving"]
    assert serving["levels"][0]["errors_by"] == {"stream": 3}
    assert any("malformed event-stream event (not JSON): '{this is not json'" in n for n in serving["notes"])
    res = gpusleuth("load", hostile + "/forever/v1/chat/completions", "--model", "m", "--concurrency", "2",
                    "--duration", "0.5", "--timeout", "1", "--json")
    assert res.returncode == 0, res.stderr
    serving = json.loads(res.stdout)["serving"]
    lv = serving["levels"][0]
    assert lv["timeouts"] == lv["requests"] >= 2
    assert any("timed out" in n and "token event(s) had come, the stream had not ended" in n for n in serving["notes"])


def test_a_dataset_line_that_is_not_json_is_skipped_and_said(hostile, tmp_path):
    data = tmp_path / "sharegpt.jsonl"
    good = {"conversations": [{"from": "human", "value": "hi there"}, {"from": "gpt", "value": "x" * 40}]}
    data.write_text(json.dumps(good) + "\n{broken\n" + json.dumps({"id": 3}) + "\n" + json.dumps(good) + "\n")
    res = gpusleuth("load", hostile + "/v1/chat/completions", "--prompts", data, "--model", "m", "--concurrency", "1",
                    "--requests", "2", "--json")
    assert "Traceback" not in res.stderr
    assert "sharegpt.jsonl: 2 line(s) skipped (1 not JSON, 1 without a prompt; first: line 2 is not JSON); 2 prompts used" \
        in res.stderr
    empty = tmp_path / "bad.jsonl"
    empty.write_text("not json\n")
    res = gpusleuth("load", hostile + "/v1/chat/completions", "--prompts", empty, "--concurrency", "1")
    assert res.returncode == 2 and "bad.jsonl" in res.stderr and "holds no usable prompt" in res.stderr
    assert "Traceback" not in res.stderr


def test_ctrl_c_with_hung_requests_says_what_was_sent_and_cut(hostile, tmp_path):
    body = tmp_path / "req.json"
    body.write_text('{"x": 1}')
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "load", hostile + "/hang", "--body-file", str(body),
                             "--concurrency", "3", "--duration", "30", "--timeout", "60", "--out", str(tmp_path / "r"),
                             "--no-warmup"],  # the levels' own requests in flight (a hung warm-up: the next test)
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    time.sleep(4)  # started, probed, 3 POSTs hanging
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "no request was sent" not in err, err
    assert "3 of the 3 requests sent were in flight when the load was stopped and were cut unanswered" in out
    rep = json.loads(gpusleuth("report", tmp_path / "r", "--json").stdout)["serving"]
    assert rep["levels"][0]["cut"] == 3 and rep["levels"][0]["errors"] == 0


def test_ctrl_c_during_a_hung_warm_up_says_no_level_ran(hostile, tmp_path):
    body = tmp_path / "req.json"
    body.write_text('{"x": 1}')
    proc = subprocess.Popen([sys.executable, "-m", "gpusleuth", "load", hostile + "/hang", "--body-file", str(body),
                             "--concurrency", "3", "--duration", "30", "--timeout", "60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    time.sleep(4)  # started, probed, the 4 warm-up POSTs hanging
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "warm-up: 4 request(s)" in err and "cancelled×4" in err
    assert "stopped during the warm-up: no level ran" in err, err


def test_a_report_that_cannot_be_built_still_prints_the_levels_table(tmp_path, monkeypatch, capsys):
    """Issue 32 item 1: the per-level table needs nothing from the server's side. When the recorded server's report
    cannot be built (here its run directory cannot be read back), the client's table is printed all the same, with
    one sentence naming what failed and where the run is kept — no traceback, and the levels' exit code."""
    import gpusleuth.sources.rundir as rundir
    from gpusleuth.cli.main import main

    def unreadable(path, *a, **k):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(rundir, "load_run", unreadable)
    port = free_port()
    rc = main(["load", f"http://127.0.0.1:{port}/", "--concurrency", "1,2", "--duration", "1", "--out",
               str(tmp_path / "run"), "--", sys.executable, str(SERVERS / "http_infer.py"), str(port),
               str(tmp_path / "truth.json"), "plain"])
    out, err = capsys.readouterr()
    assert rc == 0, err[-2000:]
    assert "Traceback" not in out + err
    rows = [line.split() for line in out.splitlines()]
    assert {"1", "2"} <= {r[2] if r[1:2] == ["→"] else r[0] for r in rows if len(r) > 3}, out  # "knee → 2 …"
    said = "the report of the recorded server could not be built (PermissionError"
    assert said in err and said in out and str(tmp_path / "run") in err
    assert "the server was not recorded" not in out and "the recorded server's report could not be built" in out
    assert (tmp_path / "run" / "load.parquet").exists()


def test_a_metrics_endpoint_answering_a_broken_status_line_is_one_sentence(tmp_path):
    """Issue 32 item 8: the engine-metrics reader died with a traceback (``http.client.BadStatusLine``, not an
    OSError) when ``/metrics`` answered a status line that is not HTTP; the load went on, the user saw a traceback.
    Now it is one sentence, quoted, and the levels' table as always."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVERS / "hostile_http.py"), str(port), "bad-metrics"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_ready(port, proc)
        res = gpusleuth("load", f"http://127.0.0.1:{port}/v1/chat/completions", "--model", "m", "--concurrency", "1",
                        "--duration", "2.5", timeout=120)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert "Traceback" not in res.stderr + res.stdout, res.stderr[-3000:]
    said = [line for line in res.stderr.splitlines() if "/metrics answered something that is not HTTP" in line]
    assert len(said) == 1 and "BadStatusLine" in said[0] and "2OO" in said[0], res.stderr[-2000:]
    assert "Serving under load" in res.stdout
