"""A small HTTP/1.1 client on asyncio streams, for ``gpusleuth load``.

Why hand-written rather than httpx or aiohttp: a load generator must not be the bottleneck on a small
machine, and it should cost nothing to install. Measured here (BENCHMARKS.md, "load generator"): httpx
is 7 wheels / 4.8 MB installed and 150 ms to import, aiohttp 10 wheels / 15 MB (native) and 240 ms; this
module is stdlib only (asyncio imports in 45 ms) and, doing nothing but write a request and read one
response per keep-alive connection, sends several thousand requests per second from one core.

It speaks just what a load test needs: one request at a time per connection (no pipelining), keep-alive
(and a fresh connection per request against a server seen to close after every answer: :class:`TargetMemo`),
bodies by ``Content-Length``, ``chunked`` or read-to-close, ``https`` through the stdlib ``ssl``. A body is
never held whole: it is read in pieces of at most ``BODY_PIECE`` bytes as they arrive, each handed to the
request's :class:`BodySink` (an OpenAI stream's parser, which timestamps every token event) or dropped, so
a 10 GB answer costs 64 KiB of memory, and a streamed answer's pieces are seen when they come, not at its
end. A status line that is not ``HTTP/1.x`` and a three-digit code is a :class:`ProtocolError`, never an
exception that escapes the level.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit, urlunsplit

from gpusleuth.serving.recorder.time_limit import time_limit

MAX_HEADER_BYTES = 64 * 1024
BODY_PIECE = 64 * 1024  # the most of a response body held at once
PROBE_DRAIN_MAX = 64 * 1024  # a readiness probe reads a body this short before it closes (see _drain_short)
PROBE_DRAIN_S = 1.0

# a socket address as getaddrinfo gives it (typeshed's): IPv4 (host, port), IPv6 (host, port, flowinfo, scope id),
# or (int, bytes) where Python was built without IPv6 support
SockAddr = tuple[str, int] | tuple[str, int, int, int] | tuple[int, bytes]


class BodySink(Protocol):
    """What a request does with its response as it arrives: the status and headers, then the body's pieces
    in order (chunked framing removed). Called on the event loop, so each call must be quick."""

    def head(self, status: int, headers: dict[str, str]) -> None: ...

    def data(self, piece: bytes) -> None: ...


class ProtocolError(Exception):
    """The server answered something that is not HTTP/1.x."""


@dataclass
class TargetMemo:
    """What the connections to one target learnt about its server, shared by all of them (one per
    :class:`ServerTarget`, so per ``gpusleuth load`` run).

    ``closes_after_answer``: a connection that had carried one answer was found closed when the next request
    went out on it. llama.cpp's server does this after every streamed answer although its header says
    ``Keep-Alive`` (BENCHMARKS.md, "real engines"); writing onto such a connection, reading the close and
    reconnecting cost ~1 ms more of each request's TTFT than opening a fresh connection at once. From then
    on a connection is closed as soon as its answer ended and each request opens its own. A connection that
    carried two answers or more proves nothing (keep-alive limits and idle timeouts close those).
    ``address``: the host's address, resolved once (a load test does not look the name up per connect)."""

    closes_after_answer: bool = False
    address: tuple[socket.AddressFamily, SockAddr] | None = None  # family, sockaddr


@dataclass(frozen=True)
class ServerTarget:
    """Where requests go, parsed once: host, port, TLS, and the request's fixed bytes."""

    url: str
    host: str
    port: int
    tls: bool
    head: bytes  # request line and headers, without Content-Length
    method: str
    verify: bool = True  # https: check the server's certificate (--insecure: don't)
    memo: TargetMemo = field(default_factory=TargetMemo, compare=False, repr=False)

    def request(self, body: bytes, extra: bytes = b"") -> bytes:
        """The request's bytes; ``extra``: more header lines, each ending in CRLF (a request id)."""
        length = f"Content-Length: {len(body)}\r\n" if body or self.method not in ("GET", "HEAD") else ""
        return self.head + extra + length.encode() + b"\r\n" + body


def parse_target(url: str, method: str = "GET", headers: list[tuple[str, str]] | None = None,
                 verify: bool = True) -> ServerTarget:
    """A URL and headers into a :class:`ServerTarget`; ``ValueError`` with a sentence when the URL is unusable."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("the URL must start with http:// or https://")
    if not parts.hostname:
        raise ValueError("the URL names no host")
    tls = parts.scheme == "https"
    port = port or (443 if tls else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    host_header = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if parts.port:
        host_header += f":{parts.port}"
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host_header}", "User-Agent: gpusleuth-load",
             "Accept: */*", "Connection: keep-alive"]
    given = {k.lower() for k, _ in headers or []}
    lines = [ln for ln in lines if ln.split(":", 1)[0].lower() not in given or ln.startswith(method)]
    for k, v in headers or []:
        if any(c in k + v for c in "\r\n") or not k.strip():
            raise ValueError(f"header {k!r} has a line break or no name")
        if k.strip().lower() in ("content-length", "transfer-encoding"):
            raise ValueError(f"header {k.strip()} is set by gpusleuth from the body; leave it out")
        lines.append(f"{k.strip()}: {v.strip()}")
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1", "replace")
    return ServerTarget(url=url, host=parts.hostname, port=port, tls=tls, head=head, method=method, verify=verify)


def safe_url(url: str) -> str:
    """The URL as it may be stored and shown: no user:password, no query (it often carries keys)."""
    try:
        p = urlsplit(url)
        host = p.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = host + (f":{p.port}" if p.port else "")
        return urlunsplit((p.scheme, netloc, p.path, "…" if p.query else "", ""))
    except ValueError:
        return "(unparseable URL)"


@dataclass
class Connection:
    """One keep-alive connection; ``send`` returns the response's status code."""

    target: ServerTarget
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    used: int = 0  # responses read on it (a reused connection may have been closed by the server)
    _answered: bool = False  # the current request got a status line (a failure after it is not retried)

    async def open(self, request: bytes = b"") -> asyncio.StreamReader:
        """Connect (the connection's reader is returned); ``request``'s bytes go out as soon as the connection is up. Plain HTTP connects a
        non-blocking socket itself (no Nagle from the start) and sends before the stream objects exist:
        ``asyncio.open_connection`` takes a turn of the loop between connect and write, and on a loop that
        is reading other streams that turn was most of a reconnect's cost (BENCHMARKS.md)."""
        t = self.target
        self.used = 0
        if t.tls:
            ctx = ssl.create_default_context()
            if not t.verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            self.reader, self.writer = await asyncio.open_connection(t.host, t.port, ssl=ctx, limit=MAX_HEADER_BYTES)
            self.writer.write(request)
            return self.reader
        loop = asyncio.get_running_loop()
        sock = await self._connect(loop)
        try:
            sent = 0
            if request:
                try:
                    sent = sock.send(request)
                except BlockingIOError:
                    pass
            self.reader = asyncio.StreamReader(limit=MAX_HEADER_BYTES, loop=loop)
            protocol = asyncio.StreamReaderProtocol(self.reader, loop=loop)
            transport, _ = await loop.create_connection(lambda: protocol, sock=sock)
        except BaseException:
            sock.close()
            self.reader = None
            raise
        self.writer = asyncio.StreamWriter(transport, protocol, self.reader, loop)
        if sent < len(request):
            self.writer.write(request[sent:])
        return self.reader

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        """A connected non-blocking socket without Nagle. The host's addresses are looked up once: the first
        connect tries each in turn (``localhost`` may name ::1 first and the server listen on 127.0.0.1
        only), and the one that answered is used from then on."""
        memo = self.target.memo
        candidates: list[tuple[socket.AddressFamily, SockAddr]]
        if memo.address is not None:
            candidates = [memo.address]
        else:
            try:  # an address written as one (127.0.0.1, ::1) is parsed here, not sent to a resolver thread
                infos = socket.getaddrinfo(self.target.host, self.target.port, type=socket.SOCK_STREAM,
                                           flags=socket.AI_NUMERICHOST)
            except socket.gaierror:
                infos = await loop.getaddrinfo(self.target.host, self.target.port, type=socket.SOCK_STREAM)
            candidates = [(family, address) for family, _, _, _, address in infos]
        failure: OSError | None = None
        for family, address in candidates:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    sock.connect(address)  # loopback: usually done at once
                except BlockingIOError:
                    await loop.sock_connect(sock, address)
            except OSError as exc:
                sock.close()
                failure = exc
                continue
            except BaseException:
                sock.close()
                raise
            memo.address = family, address
            return sock
        raise failure or OSError(f"{self.target.host} has no address")

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def send(self, request: bytes, sink: BodySink | None = None, head_only: bool = False) -> int:
        """Write one request and read its whole response, handing the body to ``sink`` piece by piece
        (``head_only``: only the status line and headers, then the connection is closed — a readiness probe
        must not wait out a body). A connection the server closed while idle is reopened once (nothing of
        the response was read by then, so nothing is lost or sent twice); one it closed right after its
        first answer teaches the target's :class:`TargetMemo` that every request needs its own."""
        self._answered = False
        if self.writer is not None and self.used and self.target.memo.closes_after_answer:
            self.close()  # answered before the server's habit was learnt: it is closing this one too
        # reader and writer are set together (open) and cleared together (close)
        reader, writer = self.reader, self.writer
        if reader is None or writer is None:
            return await self._response(await self.open(request), sink, head_only)
        try:
            writer.write(request)
            return await self._response(reader, sink, head_only)
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            if self.used == 0 or self._answered or (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                raise  # a fresh connection failing, or an answer cut off half-way: a real error
            if self.used == 1:
                self.target.memo.closes_after_answer = True  # closed right after its first answer
            self.close()
            return await self._response(await self.open(request), sink, head_only)

    async def _response(self, reader: asyncio.StreamReader, sink: BodySink | None, head_only: bool = False) -> int:
        """Read one response from ``reader`` (this connection's, passed by the caller that opened or wrote on it)."""
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise ProtocolError("response headers over 64 KiB") from None
            self._answered = True
            lines = head.decode("latin-1").split("\r\n")
            status_line = lines[0].split(" ", 2)
            if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
                raise ProtocolError(f"not an HTTP/1.x response: {lines[0][:60]!r}")
            code = status_line[1]
            if len(code) != 3 or not code.isdigit():
                raise ProtocolError(f"the status code {code[:24]!r}{'…' if len(code) > 24 else ''} is not three digits")
            status = int(code)
            if 100 <= status < 200 and status != 101:
                continue  # 100 Continue and friends: the real answer follows
            break
        length, chunked, close = None, False, status_line[0] == "HTTP/1.0"
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name, value = name.strip().lower(), value.strip()
            if not name:
                continue
            headers[name] = value
            if name == "content-length":
                if not value.isdigit():
                    raise ProtocolError(f"Content-Length {value[:24]!r} is not a number")
                length = int(value)
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection":
                v = value.lower()
                close = "close" in v or (close and "keep-alive" not in v)
        if sink is not None:
            sink.head(status, headers)
        if head_only:
            await self._drain_short(reader, length, chunked, status)
            self.close()
            return status
        if self.target.method == "HEAD" or status in (204, 304):
            pass
        elif chunked:
            await self._chunks(reader, sink)
        elif length is not None:
            await self._exactly(reader, length, sink)
        else:
            while piece := await reader.read(BODY_PIECE):  # body until the server closes
                if sink is not None:
                    sink.data(piece)
            close = True
        self.used += 1
        if close or self.target.memo.closes_after_answer:
            self.close()
        return status

    async def _drain_short(self, reader: asyncio.StreamReader, length: int | None, chunked: bool, status: int) -> None:
        """Before a probe closes: read a short body the server announced (Content-Length up to
        ``PROBE_DRAIN_MAX``, for a second at most). Closing a socket with unread bytes in it sends a reset, and
        closing before the server wrote its body makes its write draw one: Python's ``http.server`` then prints a
        ``ConnectionResetError`` traceback into the server's own log on every probe. A body of unknown length
        (a stream that may never end) is left unread: a probe must not wait it out."""
        if chunked or length is None or length > PROBE_DRAIN_MAX or self.target.method == "HEAD" or status in (204, 304):
            return
        try:
            async with time_limit(PROBE_DRAIN_S):
                await self._exactly(reader, length, None)
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError):
            pass  # the close below ends it either way

    @staticmethod
    async def _exactly(reader: asyncio.StreamReader, n: int, sink: BodySink | None) -> None:
        """``n`` body bytes, read in pieces as they arrive; a close before the last is IncompleteReadError."""
        while n > 0:
            piece = await reader.read(min(n, BODY_PIECE))
            if not piece:
                raise asyncio.IncompleteReadError(b"", n)
            n -= len(piece)
            if sink is not None:
                sink.data(piece)

    async def _chunks(self, reader: asyncio.StreamReader, sink: BodySink | None) -> None:
        while True:
            line = await reader.readline()
            if not line.endswith(b"\n"):
                raise asyncio.IncompleteReadError(line, None)
            size_text = line.split(b";", 1)[0].strip() or b"0"
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"a chunk size {size_text[:24]!r} is not hexadecimal") from None
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            await self._exactly(reader, size, sink)
            await reader.readexactly(2)


def why_failed(exc: BaseException) -> str:
    """A connection failure in words, for the sentence when a URL never answers."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"its TLS certificate is not trusted ({exc.verify_message}); --insecure skips the check"
    if isinstance(exc, ssl.SSLError):
        return f"TLS failed ({exc.reason or exc})"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, ProtocolError):
        return f"it did not answer HTTP ({exc})"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    if isinstance(exc, asyncio.IncompleteReadError):
        return "the connection closed without an answer"
    return str(exc) or type(exc).__name__
