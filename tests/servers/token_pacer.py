"""A streaming server that does no model work: every POST is answered with ``--tokens`` OpenAI completion
token events, one every ``--gap-ms``, then ``data: [DONE]`` — over HTTP/1.1 keep-alive, chunked. Each
answer's event write times (``time.time_ns()`` right after the write) go to LOG as one JSON line keyed by
the request's ``X-Request-Id``. What a load generator's ceiling is measured against
(``benchmarks/stream_ceiling.py``): the server's cost per event is a few microseconds, so thousands of
streams fit on one core, and its write stamps are the truth the client's arrival stamps are compared with.

    python token_pacer.py PORT LOG.jsonl [--tokens 32] [--gap-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import time

EVENT = b'data: {"choices":[{"index":0,"text":"x"}]}\n\n'
DONE = b"data: [DONE]\n\n"


def chunk(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tokens: int, gap: float, log) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
            length = int(headers.get("content-length", "0") or 0)
            if length:
                await reader.readexactly(length)
            if not lines[0].startswith("POST"):
                body = b'{"object":"list","data":[{"id":"pacer","object":"model"}]}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
                continue
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
            start = time.monotonic()
            writes = []
            for i in range(tokens):
                delay = start + (i + 1) * gap - time.monotonic()  # paced from the start: no drift
                if delay > 0:
                    await asyncio.sleep(delay)
                writer.write(chunk(EVENT))
                writes.append(time.time_ns())
                await writer.drain()
            writer.write(chunk(DONE) + b"0\r\n\r\n")
            await writer.drain()
            log.write(json.dumps({"id": headers.get("x-request-id", ""), "writes_ns": writes}) + "\n")
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("log")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    a = ap.parse_args()
    with open(a.log, "w", buffering=1 << 16) as log:
        server = await asyncio.start_server(lambda r, w: serve(r, w, a.tokens, a.gap_ms / 1e3, log),
                                            "127.0.0.1", a.port, backlog=4096)
        stop = asyncio.Event()  # SIGTERM ends it with the log flushed
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with server:
            await stop.wait()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
