"""A streaming server that closes the connection after every answer, as llama.cpp's server does, stdlib only:
``python closing_stream.py PORT [--tokens N] [--gap-ms G]``.

Every POST is answered ``200`` with an OpenAI-style ``text/event-stream`` in ``chunked`` encoding: N events
``data: {"choices":[{"text":"tok"}]}`` G ms apart, the first after G ms, then ``data: [DONE]`` and the
terminal chunk. Its headers say ``Connection: keep-alive`` and ``Keep-Alive: timeout=5, max=100`` — and
then the server closes the connection anyway, right after the terminal chunk (what llama.cpp's server does
after every streamed answer). A client that believes the header writes its next request onto a closed
connection. Any GET answers ``ok`` (a readiness probe). Prints ``listening`` once it accepts; stops on
SIGTERM.
"""
import argparse
import json
import signal
import socket
import sys
import threading
import time

EVENT = b"data: " + json.dumps({"choices": [{"index": 0, "text": "tok"}]}).encode() + b"\n\n"
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
        b"Connection: keep-alive\r\nKeep-Alive: timeout=5, max=100\r\n\r\n")


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def read_request(conn: socket.socket) -> bytes | None:
    """One request's head and body (by Content-Length); None when the client closed."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        piece = conn.recv(65536)
        if not piece:
            return None
        buf += piece
    head, _, body = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        piece = conn.recv(65536)
        if not piece:
            return None
        body += piece
    return head


def answer(conn: socket.socket, tokens: int, gap_s: float) -> None:
    try:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        head = read_request(conn)
        if head is None:
            return
        if head.startswith(b"GET"):
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok")
            return
        conn.sendall(HEAD)
        for _ in range(tokens):
            time.sleep(gap_s)
            conn.sendall(chunk(EVENT))
        conn.sendall(chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    except OSError:
        pass
    finally:
        conn.close()  # whatever the header said


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--gap-ms", type=float, default=2.0)
    a = ap.parse_args()
    srv = socket.create_server(("127.0.0.1", a.port), backlog=128)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print("listening", flush=True)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=answer, args=(conn, a.tokens, a.gap_ms / 1e3), daemon=True).start()


if __name__ == "__main__":
    main()
