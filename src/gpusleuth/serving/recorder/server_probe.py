"""Before the first level of ``gpusleuth load``: is the server up (``wait_ready``: poll the URL until its route
answers, a proxy's 404s and a loading LLM server's 503s waited out and said), and which model does an OpenAI-compatible server list
(``discover_model``: ``GET /v1/models``). Probes on ``serving/recorder/http_client.py``, apart from the generator
(``serving/recorder/loadgen.py``) that runs the levels once they have answered.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time

from gpusleuth.serving.recorder.time_limit import time_limit
from gpusleuth.serving.recorder.http_client import Connection, ProtocolError, ServerTarget, parse_target, safe_url, why_failed


# answers that say the route is not there yet: a gateway or proxy in front of a replica that is not up (Ray Serve's
# proxy answers 404 until the application is deployed; 502/504 from a gateway), an engine loading its model
# (llama.cpp's server answers 503 "Loading model" on every route)
NOT_YET = (404, 502, 503, 504)


async def _probe(probe: ServerTarget, deadline: float) -> int:
    """One probe's status (only the head is read: a body that never ends does not hold it)."""
    conn = Connection(probe)
    try:
        async with time_limit(min(5.0, max(deadline - time.monotonic(), 0.1))):
            return await conn.send(probe.request(b""), head_only=True)
    finally:
        conn.close()


async def wait_ready(target: ServerTarget, timeout_s: float, cancel: threading.Event | None = None
                     ) -> tuple[str | None, str | None]:
    """Poll the URL until its route answers: (why it never answered, or None; a sentence about the wait, or None).

    Anything but ``NOT_YET`` is an answer from the route — a 200, a 405 or 400 for a probe without the load's body,
    a 500, a status line that is not HTTP (the requests' rows say what was wrong). A 404 to the probe's GET is
    asked again with the load's own method (llama.cpp's server answers GET 404 on its POST routes) before it counts
    as not there yet. Until the time is up 404, 502, 503 and 504 are waited through, and the wait is said; once it
    is up the load goes on all the same (a server that answers only 503 under no load gets its load; its rows say
    what came back) and that is said too."""
    get = parse_target(target.url, "GET", verify=target.verify)
    own = parse_target(target.url, target.method, verify=target.verify) if target.method != "GET" else None
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    last = "no answer"
    seen: dict[int, int] = {}
    while time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            return "the server exited before it answered", None
        try:
            status = await _probe(get, deadline)
            if status == 404 and own is not None:
                status = await _probe(own, deadline)
            if status not in NOT_YET:
                return None, _waited(target, seen, time.monotonic() - t0, True)
            seen[status] = seen.get(status, 0) + 1
            last = f"{status}"
        except ProtocolError:
            return None, _waited(target, seen, time.monotonic() - t0, True)  # something answered: its rows say what
        except (asyncio.TimeoutError, TimeoutError):
            last = "no answer within 5 s"
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError) as exc:
            last = why_failed(exc)
            if isinstance(exc, ssl.SSLError):  # a certificate does not become trusted by waiting
                return f"{safe_url(target.url)} cannot be loaded: {last}", None
        await asyncio.sleep(0.1)
    if seen:  # it answered, never from the route: the load goes on and its rows say what came back
        return None, _waited(target, seen, timeout_s, False)
    return f"{safe_url(target.url)} did not answer within {timeout_s:g} s ({last})", None


def _waited(target: ServerTarget, seen: dict[int, int], waited_s: float, answered: bool) -> str | None:
    if not seen:
        return None
    statuses = ", ".join(f"{k} ×{v:,}" for k, v in sorted(seen.items()))
    if answered:
        return (f"waited {waited_s:.1f} s for {safe_url(target.url)} to answer from its route (it answered "
                f"{statuses} until then: not deployed or still loading); the first level started after that")
    return (f"{safe_url(target.url)} answered only {statuses} for the {waited_s:g} s of --ready-timeout: loaded all "
            "the same; the rows say what came back")


class _Collect:
    """A small JSON answer (``/v1/models``), kept up to 1 MiB."""

    def __init__(self) -> None:
        self.status, self.body = 0, bytearray()

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def data(self, piece: bytes) -> None:
        if len(self.body) < 1 << 20:
            self.body += piece[: (1 << 20) - len(self.body)]


async def discover_model(target: ServerTarget) -> tuple[str | None, str]:
    """The first model ``GET /v1/models`` lists (as vLLM, SGLang, TGI, llama.cpp and ``transformers serve``
    answer), with a sentence saying what was found; None when nothing usable answered (the requests then
    go without a ``model`` field, and a server that needs one says so in its 4xx)."""
    import json
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(target.url)
    path = parts.path.rstrip("/")
    base = path[: path.rindex("/v1/")] if "/v1/" in path else ""
    url = urlunsplit((parts.scheme, parts.netloc, base + "/v1/models", "", ""))
    probe = parse_target(url, "GET", verify=target.verify)
    conn, sink = Connection(probe), _Collect()
    try:
        async with time_limit(5.0):
            await conn.send(probe.request(b""), sink)
        listed = json.loads(bytes(sink.body)) if sink.status == 200 else None
        data = listed.get("data") if isinstance(listed, dict) else None
        model = data[0].get("id") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    except (asyncio.TimeoutError, TimeoutError, OSError, asyncio.IncompleteReadError, ProtocolError, ValueError):
        model = None
    finally:
        conn.close()
    if isinstance(model, str) and model and len(model) < 512:
        return model, f"model {model!r} (the first that {safe_url(url)} lists; --model picks another)"
    return None, (f"{safe_url(url)} listed no model (status {sink.status or 'none'}): requests are sent "
                  "without a model field (--model names one)")
