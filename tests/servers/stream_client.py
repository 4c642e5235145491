"""An independent streaming client, stdlib only (``http.client`` in threads), the yardstick ``gpusleuth
load`` is held to on a real engine: ``python stream_client.py URL BODY.json CONCURRENCY SECONDS``.

Each of CONCURRENCY threads keeps one HTTP/1.1 connection and posts BODY.json again as soon as the previous
answer ended. A response's lines are read as they come (``http.client`` undoes the chunked encoding); the
arrival of each ``data:`` line carrying text (``choices[0].delta.content`` or ``choices[0].text``) is one
token event. Prints one JSON object: ``requests`` (answered 200 in the window), ``rps`` (their count over
the window from the first send to the last answer), ``ttft_ms`` and ``itl_ms`` (every request's time to
the first event, every gap between events), ``errors``. Knows nothing of gpusleuth.
"""
import http.client
import json
import sys
import threading
import time
from urllib.parse import urlsplit


def run(url: str, body: bytes, concurrency: int, seconds: float) -> dict:
    parts = urlsplit(url)
    lock = threading.Lock()
    ttft, itl, ends, starts, errors = [], [], [], [], []
    deadline = time.monotonic() + seconds

    def worker():
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            try:
                conn.request("POST", parts.path, body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                events = []
                for line in resp:
                    if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                        continue
                    now = time.perf_counter()
                    choices = json.loads(line[5:]).get("choices") or [{}]
                    c = choices[0]
                    if (c.get("delta") or {}).get("content") or c.get("text"):
                        events.append(now)
                t1 = time.perf_counter()
            except (OSError, http.client.HTTPException, ValueError) as exc:
                with lock:
                    errors.append(type(exc).__name__)
                conn.close()
                conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
                continue
            with lock:
                if resp.status != 200 or not events:
                    errors.append(str(resp.status))
                    continue
                starts.append(t0)
                ends.append(t1)
                ttft.append((events[0] - t0) * 1e3)
                itl.extend((b - a) * 1e3 for a, b in zip(events, events[1:]))
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    span = (max(ends) - min(starts)) if ends else 0.0
    return {"requests": len(ends), "rps": len(ends) / span if span else 0.0, "ttft_ms": ttft, "itl_ms": itl,
            "errors": errors}


if __name__ == "__main__":
    url, body_file, conc, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    with open(body_file, "rb") as f:
        print(json.dumps(run(url, f.read(), conc, secs)))
