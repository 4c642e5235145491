"""A hostile HTTP server for ``gpusleuth load``'s fault tests: ``python hostile_http.py PORT``.

Raw asyncio (no framework: the point is to send what frameworks refuse to), one answer per path prefix,
HTTP/1.1 keep-alive where the answer allows it:

* ``/status30``: a 30-digit status code;
* ``/big``: 200 with a 100 MB body (Content-Length), written in 1 MiB pieces;
* ``/huge``: 200 announcing a 10 GB Content-Length, then zeros until the client goes away;
* ``/s500``, ``/s429``, ``/s302``: that status, a short body;
* ``/html/v1/chat/completions``: 200 ``text/html`` (a web page, not an OpenAI server);
* ``/malformed/v1/chat/completions``: an event stream whose second event is not JSON;
* ``/forever/v1/chat/completions``: a token event every 50 ms, never ``[DONE]``, never the last chunk;
* ``/hang``: reads a POST, never answers (a GET, the readiness probe, gets ``ok``);
* ``/metrics``: with a second argument ``bad-metrics``, a status line that is not HTTP (what the engine-metrics
  scraper met from a broken proxy); else ``ok`` like
* anything else: 200 ``ok``.
"""
import asyncio
import json
import sys

PIECE = b"\0" * (1 << 20)
BAD_METRICS = sys.argv[2:3] == ["bad-metrics"]


def _event(text: str) -> bytes:
    data = b"data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            path = line.split(" ")[1] if " " in line else "/"
            length = 0
            for h in head.split(b"\r\n")[1:]:
                if h.lower().startswith(b"content-length:"):
                    length = int(h.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            if not await answer(line.split(" ")[0], path, writer):
                break
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def answer(method: str, path: str, w: asyncio.StreamWriter) -> bool:
    """Write the answer for ``path``; False when the connection is to be closed."""
    if path.startswith("/metrics") and BAD_METRICS:
        w.write(b"HTTP/1.1 2OO OK-ish\r\nContent-Length: 2\r\n\r\nno")
    elif path.startswith("/status30"):
        w.write(b"HTTP/1.1 123456789012345678901234567890 Odd\r\nContent-Length: 2\r\n\r\nno")
    elif path.startswith("/big"):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (100 * len(PIECE)))
        for _ in range(100):
            w.write(PIECE)
            await w.drain()
    elif path.startswith("/huge"):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n")
        while True:
            w.write(PIECE)
            await w.drain()  # raises once the client has closed
    elif path[:5] in ("/s500", "/s429", "/s302"):
        code = path[2:5]
        extra = b"Location: /\r\n" if code == "302" else b""
        w.write(b"HTTP/1.1 %s Status\r\n%sContent-Length: 2\r\n\r\nno" % (code.encode(), extra))
    elif path.startswith("/html/"):
        body = b"<html><body>a web page</body></html>"
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
    elif path.startswith("/malformed/"):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        w.write(_event("hello"))
        bad = b"data: {this is not json\n\n"
        w.write(b"%x\r\n%s\r\n" % (len(bad), bad) + _event("world"))
        w.write(b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n")
    elif path.startswith("/forever/"):
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            w.write(_event("tok"))
            await w.drain()
            await asyncio.sleep(0.05)
    elif path.startswith("/hang") and method == "POST":
        await asyncio.sleep(3600)
    else:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    await w.drain()
    return True


async def main(port: int) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", port)
    print(f"hostile_http: listening on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main(int(sys.argv[1])))
    except KeyboardInterrupt:
        pass
