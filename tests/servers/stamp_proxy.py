"""A byte-level TCP proxy that times every streamed request on its own clock, neither the client's nor the
server's: ``python stamp_proxy.py LISTEN_PORT UPSTREAM_HOST:PORT LOG.jsonl``.

It sits on loopback between a load generator and an engine and forwards bytes both ways unchanged, the
moment they arrive (a thread per direction, blocking sockets, no Nagle). On the way it reads them — HTTP/1.1
requests on each connection (headers, then a ``Content-Length`` body), and the responses (chunked or by
length) as server-sent events — and stamps each request at the two edges that belong to the client:

* ``sent_ns``: the kernel's receive time (``SO_TIMESTAMPNS``) of the read that completed the request. On
  loopback the bytes are delivered inside the sender's ``send``, so this is when the client's write went
  out — the proxy's own wake-up is not in it;
* ``event_ns``: for each ``data:`` event carrying text (``choices[0].text`` or ``choices[0].delta.content``,
  what a streaming client counts as a token), ``time.time_ns()`` right before the bytes that completed it
  are written on to the client (a ``send`` of a few µs): the client cannot have them earlier, and how much
  later it stamps them is its own doing. ``engine_event_ns``: the kernel's receive time of the same bytes
  from the engine (when the engine wrote them);
* ``end_ns``: when the response's last byte was written on (the same way).

One JSON line per request, written when its response ends: ``conn`` (the connection's number), ``seq`` (the
request's place on it), ``request_id`` (the ``X-Request-Id`` header, else null), the stamps above and
``status``. A client that times a request right stamps its start at most a few microseconds before
``sent_ns`` and each token at most its own wake-up after ``event_ns``: that difference is its timing error.
Knows nothing of gpusleuth. Stops on SIGTERM/SIGINT (each line is flushed as it is written).
"""
from __future__ import annotations

import collections
import json
import signal
import socket
import struct
import sys
import threading
import time

READ = 1 << 16


class Exchange:
    """One request and its response on a connection, as the proxy saw them pass."""

    def __init__(self, conn: int, seq: int, request_id: int | str | None, sent_ns: int):
        self.rec = {"conn": conn, "seq": seq, "request_id": request_id, "sent_ns": sent_ns, "status": 0,
                    "event_ns": [], "engine_event_ns": [], "end_ns": 0}


class RequestReader:
    """Splits the client's bytes into HTTP requests; says when one has passed whole."""

    def __init__(self) -> None:
        self.buf = b""
        self.body_left = -1  # -1: reading headers
        self.request_id: int | str | None = None

    def feed(self, data: bytes) -> int:
        """The number of requests completed by ``data``, the id of the last in ``self.request_id``."""
        done = 0
        self.buf += data
        while True:
            if self.body_left < 0:
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return done
                head, self.buf = self.buf[:end].decode("latin-1"), self.buf[end + 4:]
                length, rid = 0, None
                for line in head.split("\r\n")[1:]:
                    k, _, v = line.partition(":")
                    if k.strip().lower() == "content-length":
                        length = int(v.strip())
                    elif k.strip().lower() == "x-request-id":
                        rid = int(v.strip()) if v.strip().isdigit() else v.strip()
                self.request_id, self.body_left = rid, length
            take = min(self.body_left, len(self.buf))
            self.buf, self.body_left = self.buf[take:], self.body_left - take
            if self.body_left > 0:
                return done
            self.body_left = -1
            done += 1


class ResponseReader:
    """Follows one response: its head, its body (chunked or by length), the SSE events in the body."""

    def __init__(self) -> None:
        self.buf = b""
        self.state = "head"
        self.left = 0  # bytes of the current chunk / body still to come
        self.chunked = False
        self.status = 0
        self.sse = b""

    def feed(self, data: bytes) -> tuple[int, bool]:
        """(text events completed in ``data``, whether the response ended in it)."""
        self.buf += data
        events = 0
        while True:
            if self.state == "head":
                end = self.buf.find(b"\r\n\r\n")
                if end < 0:
                    return events, False
                head, self.buf = self.buf[:end].decode("latin-1"), self.buf[end + 4:]
                lines = head.split("\r\n")
                self.status = int(lines[0].split()[1])
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
                self.chunked = "chunked" in headers.get("transfer-encoding", "").lower()
                if self.chunked:
                    self.state = "size"
                else:
                    self.left = int(headers.get("content-length", "0"))
                    self.state = "body"
            elif self.state == "size":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return events, False
                size = int(self.buf[:end].split(b";")[0], 16)
                self.buf = self.buf[end + 2:]
                if size == 0:
                    self.state = "trailer"
                else:
                    self.left, self.state = size, "chunk"
            elif self.state in ("chunk", "body"):
                take = self.buf[: self.left]
                self.buf, self.left = self.buf[len(take):], self.left - len(take)
                events += self._sse(take)
                if self.left > 0:
                    return events, False
                if self.state == "body":
                    return events, True
                self.state = "crlf"
            elif self.state == "crlf":
                if len(self.buf) < 2:
                    return events, False
                self.buf, self.state = self.buf[2:], "size"
            elif self.state == "trailer":
                end = self.buf.find(b"\r\n")
                if end < 0:
                    return events, False
                line, self.buf = self.buf[:end], self.buf[end + 2:]
                if not line:
                    return events, True

    def _sse(self, data: bytes) -> int:
        self.sse += data
        n = 0
        while True:
            end = self.sse.find(b"\n\n")
            if end < 0:
                return n
            event, self.sse = self.sse[:end], self.sse[end + 2:]
            for line in event.split(b"\n"):
                if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                    continue
                try:
                    c = (json.loads(line[5:]).get("choices") or [{}])[0]
                except ValueError:
                    continue
                if (c.get("delta") or {}).get("content") or c.get("text"):
                    n += 1


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value


def recv_stamped(sock: socket.socket) -> tuple[bytes, int]:
    """The next bytes and the kernel's receive time of the last of them (wall clock, ns); on loopback that
    is when the sender's write returned, not when this thread got round to reading."""
    data, anc, _, _ = sock.recvmsg(READ, socket.CMSG_SPACE(16))
    for level, kind, raw in anc:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(raw) >= 16:
            sec, nsec = struct.unpack("qq", raw[:16])
            return data, sec * 1_000_000_000 + nsec
    return data, time.time_ns()


class Proxy:
    """A thread per direction per connection, blocking sockets, no Nagle: the bytes go on as they come."""

    def __init__(self, upstream: tuple[str, int], log) -> None:
        self.upstream = upstream
        self.log = log
        self.lock = threading.Lock()
        self.conns = 0

    def serve(self, listener: socket.socket) -> None:
        while True:
            client, _ = listener.accept()
            self.conns += 1
            threading.Thread(target=self.handle, args=(client, self.conns), daemon=True).start()

    def handle(self, client: socket.socket, conn: int) -> None:
        try:
            server = socket.create_connection(self.upstream)
        except OSError:
            client.close()
            return
        for sock in (client, server):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        pending: collections.deque[Exchange] = collections.deque()  # sent, not yet answered (no pipelining)
        down = threading.Thread(target=self._down, args=(server, client, pending), daemon=True)
        down.start()
        self._up(client, server, pending, conn)
        down.join()
        client.close()
        server.close()

    def _up(self, client: socket.socket, server: socket.socket, pending, conn: int) -> None:
        reqs, seq = RequestReader(), 0
        try:
            while True:
                data, arrived = recv_stamped(client)
                if not data:
                    break
                for _ in range(reqs.feed(data)):  # recorded before it goes on: its answer cannot come first
                    pending.append(Exchange(conn, seq, reqs.request_id, arrived))
                    seq += 1
                server.sendall(data)
        except (OSError, ValueError):
            pass
        try:
            server.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def _down(self, server: socket.socket, client: socket.socket, pending) -> None:
        resp = ResponseReader()
        try:
            while True:
                data, arrived = recv_stamped(server)
                if not data:
                    break
                passed = time.time_ns()  # the client cannot have these bytes before now: a lower bound, µs early
                client.sendall(data)
                rest = data
                while rest and pending:
                    events, ended = resp.feed(rest)
                    rest, resp.buf = (resp.buf, b"") if ended else (b"", resp.buf)
                    ex = pending[0].rec
                    ex["event_ns"].extend([passed] * events)
                    ex["engine_event_ns"].extend([arrived] * events)
                    if ended:
                        ex["end_ns"], ex["status"] = passed, resp.status
                        with self.lock:
                            self.log.write(json.dumps(ex) + "\n")
                            self.log.flush()
                        pending.popleft()
                        resp = ResponseReader()
        except (OSError, ValueError, IndexError):
            pass
        try:
            client.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def main(port: int, upstream: str, log_path: str) -> None:
    host, _, up_port = upstream.rpartition(":")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})  # only this thread takes them
    with open(log_path, "a") as log:
        proxy = Proxy((host or "127.0.0.1", int(up_port)), log)
        listener = socket.create_server(("127.0.0.1", port), backlog=128)
        threading.Thread(target=proxy.serve, args=(listener,), daemon=True).start()
        print("listening", port, flush=True)
        signal.sigwait({signal.SIGTERM, signal.SIGINT})
        with proxy.lock:
            log.flush()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], sys.argv[3])
