"""The HTML report in a real headless chromium (Debian's chromium + chromedriver, driven by selenium):
the page loads with no JavaScript error, every chart is drawn, a screenshot is kept, and names planted
with script payloads in a trace and in a command line run nothing.

CI installs chromium (.ci/run); without it these tests skip and say why.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import REPO, TRACES, gpusleuth

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
ARTIFACTS = REPO / "artifacts" / "browser"
PAYLOADS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "<script>window.__gs_pwned=1</script>",
    "<img src=x onerror=\"window.__gs_pwned=2\">",
    "</script><script>window.__gs_pwned=3</script>",
    "\"><svg onload=window.__gs_pwned=4>",
]


def _why_no_browser() -> str | None:
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[test]')"
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        return "chromium/chromedriver not installed (apt-get install -y chromium chromium-driver; CI does this)"
    return None


pytestmark = [pytest.mark.process,  # starts child processes (tests/conftest.py: lanes)
              pytest.mark.skipif(_why_no_browser() is not None, reason=_why_no_browser() or "")]


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    profile = tempfile.mkdtemp(prefix="gs-chromium-")
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--disable-dev-shm-usage", "--window-size=1400,1000", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path: Path, shot: str) -> dict:
    """Load the page, wait for every figure, screenshot the whole page; returns what was observed."""
    from selenium.common.exceptions import NoAlertPresentException

    t0 = time.perf_counter()
    driver.get(path.resolve().as_uri())
    rendered = None
    for _ in range(300):
        try:
            driver.switch_to.alert.accept()  # an alert would block the page: record and fail below
            return {"alert": True}
        except NoAlertPresentException:
            pass
        rendered = driver.execute_script("return document.body && document.body.getAttribute('data-gs-rendered')")
        if rendered is not None:
            break
        time.sleep(0.1)
    load_s = time.perf_counter() - t0
    alert = False
    try:
        driver.switch_to.alert
        alert = True
    except NoAlertPresentException:
        pass
    info = driver.execute_script("""
        return {figures: Object.keys(JSON.parse(document.getElementById('gs-figures').textContent)).length,
                svgs: document.querySelectorAll('.js-plotly-plot .main-svg').length,
                plots: document.querySelectorAll('.js-plotly-plot').length,
                traces: document.querySelectorAll('.js-plotly-plot .trace').length,
                scripts: document.scripts.length,
                imgs: document.querySelectorAll('img').length,
                svg_onload: document.querySelectorAll('svg[onload]').length,
                pwned: window.__gs_pwned === undefined ? null : window.__gs_pwned,
                text: document.body.textContent,
                height: document.body.scrollHeight};""")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.set_window_size(1400, min(info["height"] + 120, 16000))
    time.sleep(0.3)
    out = ARTIFACTS / f"{shot}.png"
    driver.save_screenshot(str(out))
    driver.set_window_size(1400, 1000)
    print(f"\nscreenshot: {out} (page ready in {load_s:.2f} s)")
    logs = driver.get_log("browser")
    info.update(rendered=rendered, alert=alert, logs=logs, load_s=load_s, screenshot=out)
    return info


def assert_clean(info: dict) -> None:
    assert not info.get("alert"), "a JavaScript alert fired"
    errors = [entry for entry in info["logs"] if entry["level"] in ("SEVERE", "ERROR")]
    assert not errors, errors
    assert info["rendered"] == str(info["figures"]) and info["figures"] > 0
    assert info["plots"] == info["figures"]  # every figure became a plotly plot
    assert info["svgs"] >= info["figures"] and info["traces"] > 0


def test_recorded_run_page_renders(browser, tmp_path):
    out = tmp_path / "run.html"
    res = gpusleuth("run", "--out", tmp_path / "run", "--html", out, "--", sys.executable, "-m", "gpusleuth.demo.job",
                    "--planted", "--steps", "30", "--transform-rounds", "4", timeout=300)
    assert res.returncode == 0, res.stderr
    info = open_page(browser, out, "recorded-run")
    assert_clean(info)
    assert "Where the wall time went" in info["text"] and "Fix first:" in info["text"]


def test_trace_page_renders(browser, tmp_path):
    out = tmp_path / "trace.html"
    res = gpusleuth("report", TRACES / "df_index_resolver" / "df_index_resolver.json.gz",
                    TRACES / "ns_resolution_trace" / "rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "--html", out)
    assert res.returncode == 0, res.stderr
    info = open_page(browser, out, "traces")
    assert_clean(info)
    assert info["figures"] == 6  # per rank: step bars, gap histogram, kernels


def _poisoned_trace(tmp_path: Path) -> Path:
    """A real trace whose kernel, op and annotation names carry script payloads."""
    doc = json.load(gzip.open(TRACES / "trace_compare" / "base" / "base.json.gz"))
    k = 0
    for ev in doc["traceEvents"]:
        if ev.get("cat") in ("kernel", "cpu_op", "user_annotation", "cuda_runtime") and "ProfilerStep" not in ev.get("name", ""):
            ev["name"] = PAYLOADS[k % len(PAYLOADS)] + ev["name"]
            k += 1
    doc.setdefault("deviceProperties", [{"id": 0, "name": PAYLOADS[1]}])
    path = tmp_path / "poisoned<img src=x onerror=window.__gs_pwned=5>.json.gz"  # the file name too
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    return path


def test_payloads_in_trace_names_and_command_line_run_nothing(browser, tmp_path):
    trace = _poisoned_trace(tmp_path)
    out = tmp_path / "poisoned-trace.html"
    res = gpusleuth("report", trace, "--html", out)
    assert res.returncode == 0, res.stderr
    html = out.read_text()
    for p in PAYLOADS:
        assert p not in html  # never raw in the page source
    info = open_page(browser, out, "poisoned-trace")
    assert_clean(info)
    assert info["pwned"] is None and info["imgs"] == 0 and info["svg_onload"] == 0
    assert info["scripts"] == 3  # data block, plotly.js, our boot script: nothing injected
    assert "<img src=x onerror=alert(1)>" in info["text"]  # shown as text, literally

    # a command line with the payloads, through a real recording
    run_dir = tmp_path / "run"
    res = gpusleuth("run", "--no-report", "--out", run_dir, "--label", PAYLOADS[3], "--", sys.executable, "-c",
                    "import sys", *PAYLOADS)
    assert res.returncode == 0, res.stderr
    out = tmp_path / "poisoned-run.html"
    res = gpusleuth("report", run_dir, "--html", out)
    assert res.returncode == 0, res.stderr
    info = open_page(browser, out, "poisoned-command")
    assert_clean(info) if info.get("figures") else None
    assert not info.get("alert") and info["pwned"] is None and info["imgs"] == 0 and info["svg_onload"] == 0
    assert "<script>window.__gs_pwned=1</script>" in info["text"]


def test_compare_page_renders_and_stays_inert(browser, tmp_path):
    """`gpusleuth compare --html`: every chart drawn, a planted cause's bar gone in the fixed run, and a run
    label carrying a payload shown literally."""
    for name, mode, label in (("planted", "--planted", PAYLOADS[2]), ("fixed", "--fixed", "fixed")):
        res = gpusleuth("run", "--no-report", "--out", tmp_path / name, "--label", label, "--", sys.executable,
                        "-m", "gpusleuth.demo.job", mode, "--steps", "40", "--transform-rounds", "4", timeout=300)
        assert res.returncode == 0, res.stderr
    out = tmp_path / "compare.html"
    res = gpusleuth("compare", tmp_path / "planted", tmp_path / "fixed", "--html", out, "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    # the planted slow loading ranks first: input.preprocessing on a quiet host; on a loaded one (2 cores at
    # load 10+) its starved loader uses little CPU and reads as input.io with contention (issue 22 item 8)
    top = doc["runs"][0]["findings"][0]["cause"]
    assert top in ("input.preprocessing", "input.io"), top
    html = out.read_text()
    assert PAYLOADS[2] not in html
    info = open_page(browser, out, "compare")
    assert_clean(info)
    assert info["pwned"] is None and info["imgs"] == 0 and info["scripts"] == 3
    # deltas, throughput, step spread, step series, wall split, findings per run
    assert info["figures"] == 6
    text = info["text"]
    assert "What changed against the baseline" in text and "Findings per run" in text
    assert PAYLOADS[2] in text  # the label, as text


def test_fleet_page_renders_and_stays_inert(browser, tmp_path):
    pytest.importorskip("duckdb")
    sys.path.insert(0, str(REPO / "benchmarks"))
    from fleet_scale import make_runs

    base = make_runs(tmp_path, 40)
    for i, payload in enumerate(PAYLOADS):  # labels and finding titles come from users' command lines
        path = base / f"run-{i:05d}" / "summary.json"
        rec = json.loads(path.read_text())
        rec.update(label=payload, top_finding=payload)
        path.write_text(json.dumps(rec))
    out = tmp_path / "fleet.html"
    res = gpusleuth("fleet", base, "--html", out, "--no-analyse")
    assert res.returncode == 0, res.stderr
    info = open_page(browser, out, "fleet")
    assert_clean(info)
    assert info["pwned"] is None and info["imgs"] == 0 and info["svg_onload"] == 0
    assert "Cost of waste by cause" in info["text"] and PAYLOADS[0] in info["text"]  # shown as text


def test_serving_page_renders_its_charts(browser, tmp_path):
    """``gpusleuth load -- server``: the level table, latency against throughput, requests/s per level and
    the request-stage bars (per level, alone, all) are drawn with no JavaScript error."""
    from conftest import free_port

    port = free_port()
    body = tmp_path / "body.txt"
    body.write_text("The quick brown fox jumps over the lazy dog 12345 times; " * 100)
    out = tmp_path / "serve.html"
    res = gpusleuth("load", f"http://127.0.0.1:{port}/", "--concurrency", "1,4", "--duration", "2",
                    "--body-file", body, "--out", tmp_path / "run", "--html", out, "--",
                    sys.executable, REPO / "tests" / "servers" / "http_infer.py", port, tmp_path / "truth.json",
                    timeout=300)
    assert res.returncode == 0, res.stderr
    info = open_page(browser, out, "serving")
    assert_clean(info)
    assert info["figures"] >= 3
    for heading in ("Serving under load", "Latency against throughput", "Requests per second per level",
                    "Where each request's time went", "concurrency 4"):
        assert heading in info["text"], heading
