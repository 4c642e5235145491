"""Read an LLM engine's ``/metrics`` while ``gpusleuth load`` loads it (docs/serving.md, "The engine's own
metrics").

A thread beside the load generator GETs ``<scheme>://<host:port>/metrics`` of the loaded URL once a second
and keeps, with the wall-clock time of each scrape, only the lines of the metrics gpusleuth reads
(``serving/sources/engine_metrics.py``: running and waiting requests, KV-cache usage, preemptions, token counters,
the TTFT / queue / prefill / decode histograms of vLLM, SGLang, TGI and llama.cpp's server) — a few KB a
scrape. A server that answers ``/metrics`` with none of those names (or not at all) is left alone after a
few tries; nothing is written for it. Two scrapes are taken outside the once-a-second loop: one right
before the first level of an LLM endpoint's load (the server answered; with ``-- CMD`` it may have come up
between two ticks; a plain HTTP server is not sent it, cli/load.py) and one
when the levels are done (before a server started with ``-- CMD`` is stopped). An engine's counters grow when
a request ends (llama.cpp's, vLLM's), so these two bracket every request the load sent: without them the
first and last second's requests would be missing from the first and last level's tokens. At the end the
scrapes go to ``engine_metrics.jsonl`` in the run directory, one ``{"t_ns": …, "text": …}`` line each.
"""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from gpusleuth.run.layout import ENGINE_METRICS_FILE as FILE
from gpusleuth.serving.sources.engine_metrics import COUNTERS, ENGINE_PREFIXES, GAUGES, HISTOGRAMS

INTERVAL_S = 1.0
TIMEOUT_S = 2.0
MAX_BYTES = 8 << 20  # an engine's /metrics is tens of KB; a server answering gigabytes is not one
GIVE_UP = 5  # answers without an engine's names before the scraper stops asking
_NAMES = tuple(n for table in (GAUGES, COUNTERS, HISTOGRAMS) for names in table.values() for n in names)


def metrics_url(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None
    return f"{parts.scheme}://{parts.netloc}/metrics"


def keep_lines(text: str) -> str:
    """The lines of the metrics gpusleuth reads (and their TYPE lines, which the parser needs for
    histograms); everything else in a scrape (Python's process metrics, HTTP middleware) is dropped."""
    out = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line[7:].split(" ", 1)[0]
            if name.startswith(_NAMES):
                out.append(line)
        elif line.startswith(_NAMES):
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")


class EngineScraper:
    """``start()``, then ``stop()`` → the scrapes kept; ``write(run_dir)`` puts them in the run directory."""

    def __init__(self, url: str, interval_s: float = INTERVAL_S, insecure: bool = False):
        self.url = metrics_url(url)
        self.interval_s = interval_s
        self.insecure = insecure
        self.scrapes: list[tuple[int, str]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.engine_seen = False
        self.problem: str | None = None  # one sentence about answers that were not HTTP (said once, never raised)

    def start(self) -> "EngineScraper":
        if self.url is not None:
            self._thread = threading.Thread(target=self._loop, args=(self.url,), name="gpusleuth-engine-metrics",
                                            daemon=True)
            self._thread.start()
        return self

    def baseline(self) -> None:
        """A scrape now, before the first level (``run_plan``'s ``on_ready``): the counters' starting point."""
        if self.url is not None and not self._stop.is_set():
            self._scrape(self.url)

    def stop(self) -> list[tuple[int, str]]:
        """Stop the loop and, the first time and if an engine answered, take the last scrape now."""
        if self.url is not None and self._thread is not None and not self._stop.is_set():
            self._stop.set()
            self._thread.join(timeout=TIMEOUT_S + 1.0)
            if self.engine_seen:
                self._scrape(self.url)
        self._stop.set()
        return self.scrapes

    def _scrape(self, url: str) -> bool | None:
        """One scrape: True kept (an engine's names), False answered without them, None no answer (or an
        answer it could not read: said once in ``problem``, never raised into the load)."""
        try:
            return self._scrape_once(url)
        except Exception as exc:  # noqa: BLE001 - a reader beside the load: a sentence, never a traceback
            self._said(f"reading the engine's metrics at {url} failed ({exc.__class__.__name__}: "
                       f"{str(exc)[:80]!r}); the load went on without them")
            return None

    def _scrape_once(self, url: str) -> bool | None:
        t_ns = time.time_ns()
        text = self._get(url)
        if text is None:
            return None
        kept = keep_lines(text)
        if any(line.startswith(tuple(ENGINE_PREFIXES)) for line in kept.splitlines()):
            self.engine_seen = True
            self.scrapes.append((t_ns, kept))
            return True
        return False

    def _get(self, url: str) -> str | None:
        ctx = None
        if self.insecure and url.startswith("https:"):
            import ssl

            ctx = ssl._create_unverified_context()  # the user asked for it (--insecure), as for the load itself
        try:
            with urllib.request.urlopen(url, timeout=TIMEOUT_S, context=ctx) as resp:  # noqa: S310 (http/https only)
                body: bytes = resp.read(MAX_BYTES + 1)
        except (OSError, ValueError, urllib.error.URLError):
            return None
        except http.client.HTTPException as exc:  # a status line or headers that are not HTTP (not an OSError)
            self._said(f"{url} answered something that is not HTTP ({exc.__class__.__name__}: "
                       f"{str(exc)[:80]!r}); no engine metrics were read from those answers")
            return None
        if len(body) > MAX_BYTES:
            return ""
        return body.decode("utf-8", "replace")

    def _said(self, sentence: str) -> None:
        if self.problem is None:
            self.problem = sentence

    def _loop(self, url: str) -> None:
        misses = 0
        while not self._stop.is_set():
            kept = self._scrape(url)
            if kept:
                misses = 0
            elif kept is False and not self.engine_seen:
                misses += 1
                if misses >= GIVE_UP:  # a server, not an engine: nothing to read
                    return
            self._stop.wait(self.interval_s)

    def write(self, run_dir: Path) -> None:
        if not self.scrapes:
            return
        with open(Path(run_dir) / FILE, "w") as f:
            for t_ns, text in self.scrapes:
                f.write(json.dumps({"t_ns": t_ns, "text": text}) + "\n")


__all__ = ["FILE", "EngineScraper", "keep_lines", "metrics_url"]
