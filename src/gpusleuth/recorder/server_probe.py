"""Before the first level of ``gpusleuth load``: is the server up (``wait_ready``: poll the URL until it answers
anything, a loading LLM server's 503s waited out), and which model does an OpenAI-compatible server list
(``discover_model``: ``GET /v1/models``). Probes on ``recorder/http_client.py``, apart from the generator
(``recorder/loadgen.py``) that runs the levels once they have answered.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
import time

from gpusleuth.recorder.time_limit import time_limit
from gpusleuth.recorder.http_client import Connection, ProtocolError, Target, parse_target, safe_url, why_failed


async def wait_ready(target: Target, timeout_s: float, cancel: threading.Event | None = None) -> str | None:
    """Poll the URL until it answers anything (a 404 or 405 is an answer: the server is up; so is a status
    line that is not HTTP — the requests' rows say that). A 503 is the server saying it is not ready yet
    (llama.cpp's server answers "Loading model" on every route while it loads): polled on until the time is
    up, and then taken as an answer (a server that is simply overloaded gets its load; its rows say 503).
    Only the head is read: a body that never ends does not hold the probe. None when it answered, else a
    sentence saying why not."""
    probe = parse_target(target.url, "GET", verify=target.verify)
    request = probe.request(b"")
    deadline = time.monotonic() + timeout_s
    last, unavailable = "no answer", False
    while time.monotonic() < deadline:
        if cancel is not None and cancel.is_set():
            return "the server exited before it answered"
        conn = Connection(probe)
        try:
            async with time_limit(min(5.0, max(deadline - time.monotonic(), 0.1))):
                status = await conn.send(request, head_only=True)
            if status != 503:
                return None
            last, unavailable = "503 Service Unavailable", True
        except ProtocolError:
            return None  # something answered: each request's row will say what was wrong with it
        except (asyncio.TimeoutError, TimeoutError):
            last = "no answer within 5 s"
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ProtocolError, ValueError) as exc:
            last = why_failed(exc)
            if isinstance(exc, ssl.SSLError):  # a certificate does not become trusted by waiting
                return f"{safe_url(target.url)} cannot be loaded: {last}"
        finally:
            conn.close()
        await asyncio.sleep(0.1)
    if unavailable:
        return None  # it answered, with 503 until the end: the load goes on and its rows say so
    return f"{safe_url(target.url)} did not answer within {timeout_s:g} s ({last})"


class _Collect:
    """A small JSON answer (``/v1/models``), kept up to 1 MiB."""

    def __init__(self) -> None:
        self.status, self.body = 0, bytearray()

    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status

    def data(self, piece: bytes) -> None:
        if len(self.body) < 1 << 20:
            self.body += piece[: (1 << 20) - len(self.body)]


async def discover_model(target: Target) -> tuple[str | None, str]:
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
