"""A small HTTP/1.1 client on asyncio streams, for ``gpusleuth load``.

Why hand-written rather than httpx or aiohttp: a load generator must not be the bottleneck on a small
machine, and it should cost nothing to install. Measured here (BENCHMARKS.md, "load generator"): httpx
is 7 wheels / 4.8 MB installed and 150 ms to import, aiohttp 10 wheels / 15 MB (native) and 240 ms; this
module is stdlib only (asyncio imports in 45 ms) and, doing nothing but write a request and read one
response per keep-alive connection, sends several thousand requests per second from one core.

It speaks just what a load test needs: one request at a time per connection (no pipelining), keep-alive,
bodies by ``Content-Length``, ``chunked`` or read-to-close, ``https`` through the stdlib ``ssl``. A
response is read whole and discarded; only its status and its end time matter.
"""

from __future__ import annotations

import asyncio
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

MAX_HEADER_BYTES = 64 * 1024


class ProtocolError(Exception):
    """The server answered something that is not HTTP/1.x."""


@dataclass(frozen=True)
class Target:
    """Where requests go, parsed once: host, port, TLS, and the request's fixed bytes."""

    url: str
    host: str
    port: int
    tls: bool
    head: bytes  # request line and headers, without Content-Length
    method: str
    verify: bool = True  # https: check the server's certificate (--insecure: don't)

    def request(self, body: bytes) -> bytes:
        length = f"Content-Length: {len(body)}\r\n" if body or self.method not in ("GET", "HEAD") else ""
        return self.head + length.encode() + b"\r\n" + body


def parse_target(url: str, method: str = "GET", headers: list[tuple[str, str]] | None = None,
                 verify: bool = True) -> Target:
    """A URL and headers into a :class:`Target`; ``ValueError`` with a sentence when the URL is unusable."""
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
    return Target(url=url, host=parts.hostname, port=port, tls=tls, head=head, method=method, verify=verify)


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

    target: Target
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    used: int = 0  # responses read on it (a reused connection may have been closed by the server)

    async def open(self) -> None:
        t = self.target
        ctx = None
        if t.tls:
            ctx = ssl.create_default_context()
            if not t.verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
        self.reader, self.writer = await asyncio.open_connection(t.host, t.port, ssl=ctx, limit=MAX_HEADER_BYTES)
        self.used = 0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None

    async def send(self, request: bytes) -> int:
        """Write one request and read its whole response. A connection the server closed while idle is
        reopened once (nothing of the response was read, so nothing is lost or sent twice by then)."""
        if self.writer is None:
            await self.open()
        try:
            self.writer.write(request)
            return await self._response()
        except (ConnectionError, asyncio.IncompleteReadError) as exc:
            if self.used == 0 or (isinstance(exc, asyncio.IncompleteReadError) and exc.partial):
                raise  # a fresh connection failing, or an answer cut off half-way: a real error
            self.close()
            await self.open()
            self.writer.write(request)
            return await self._response()

    async def _response(self) -> int:
        reader = self.reader
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise ProtocolError("response headers over 64 KiB") from None
            lines = head.decode("latin-1").split("\r\n")
            status_line = lines[0].split(" ", 2)
            if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
                raise ProtocolError(f"not an HTTP/1.x response: {lines[0][:60]!r}")
            status = int(status_line[1])
            if 100 <= status < 200 and status != 101:
                continue  # 100 Continue and friends: the real answer follows
            break
        length, chunked, close = None, False, status_line[0] == "HTTP/1.0"
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "content-length":
                length = int(value.strip())
            elif name == "transfer-encoding":
                chunked = "chunked" in value.lower()
            elif name == "connection":
                v = value.strip().lower()
                close = "close" in v or (close and "keep-alive" not in v)
        if self.target.method == "HEAD" or status in (204, 304):
            pass
        elif chunked:
            await self._chunks()
        elif length is not None:
            await reader.readexactly(length)
        else:
            await reader.read()  # body until the server closes
            close = True
        self.used += 1
        if close:
            self.close()
        return status

    async def _chunks(self) -> None:
        reader = self.reader
        while True:
            size = int((await reader.readline()).split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            await reader.readexactly(size + 2)


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
