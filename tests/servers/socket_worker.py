"""A server whose model runs in a worker process reached through a raw socket, which gpusleuth's hook cannot tie
to a request (issue 32): ``python socket_worker.py PORT``.

The HTTP process (a stdlib ``ThreadingHTTPServer``, whose requests the hook records) writes each request's body
to a ``socket.socketpair`` shared with a worker it starts with ``subprocess`` (the socket's end handed over with
``pass_fds``); the worker — a Python process with the hook in it too — reads length-prefixed bodies from its
end, runs a small torch model on each and writes the label back. No ``queue.Queue``, ``asyncio.Queue`` or
``multiprocessing`` queue or pipe carries the work: the request runs no forward of its own and hands nothing
over that the hook follows, while the worker does the work. ``python socket_worker.py --worker FD`` is the
worker.
"""

import json
import socket
import struct
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def _read(sock, n):
    buf = b""
    while len(buf) < n:
        got = sock.recv(n - len(buf))
        if not got:
            raise EOFError
        buf += got
    return buf


def _send(sock, data):
    sock.sendall(struct.pack("!I", len(data)) + data)


def _recv(sock):
    (n,) = struct.unpack("!I", _read(sock, 4))
    return _read(sock, n)


def worker(fd):
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    sock = socket.socket(fileno=fd)
    while True:
        try:
            body = _recv(sock)
        except (EOFError, OSError):
            return
        x = torch.full((1, 64), float(len(body) % 7))
        with torch.no_grad():
            for _ in range(20):  # a few ms of a core: the worker is where the time goes
                y = model(x)
        _send(sock, json.dumps({"label": int(y.argmax())}).encode())


def serve(port):
    mine, theirs = socket.socketpair()
    proc = subprocess.Popen([sys.executable, __file__, "--worker", str(theirs.fileno())], pass_fds=[theirs.fileno()])
    theirs.close()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:  # one request on the socket at a time
                _send(mine, body)
                answer = _recv(mine)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        mine.close()
        proc.wait(timeout=10)


if __name__ == "__main__":
    if sys.argv[1] == "--worker":
        worker(int(sys.argv[2]))
    else:
        serve(int(sys.argv[1]))
