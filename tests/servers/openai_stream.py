"""An OpenAI-compatible streaming server with a tiny GPT on CPU that times itself, for gpusleuth's serving
tests: ``python openai_stream.py PORT TRUTH.jsonl [--layers N] [--width D] [--context C] [--window W]``.

``ThreadingHTTPServer`` (HTTP/1.1 keep-alive), one thread per connection, each request generating in its
own thread with a small causal transformer: the first token is a forward over the whole prompt (prefill,
its cost grows with the prompt), each later one a forward over the last ``--window`` tokens (what a
decode step with a KV cache costs, roughly constant):

* ``POST /v1/completions`` (``prompt``) and ``POST /v1/chat/completions`` (``messages``), with
  ``max_tokens``, ``stream``, ``stream_options.include_usage``; the model never stops on its own, so a
  request generates exactly ``max_tokens`` tokens (default 16). A streaming answer is
  ``text/event-stream`` in ``chunked`` transfer encoding, one ``data: {…}`` event per token, flushed as it
  is made, then ``data: [DONE]``. ``usage`` (prompt and completion tokens) is in a non-streaming answer,
  and in the last event when ``include_usage`` is asked.
* ``GET /v1/models`` lists the one model; any other GET answers ``ok`` (the readiness probe).
* A body that is not JSON, or names neither ``prompt`` nor ``messages``, gets a 400 with an OpenAI-style
  ``error`` object.

**Its own clock.** For every request, one JSON line appended to TRUTH.jsonl when the request ends (so a
test reads it while the server runs): ``id`` (the request's ``X-Request-Id`` header, else ""), ``path``,
``prompt_tokens``, ``completion_tokens``, ``arrived`` (the kernel's receive timestamp of the request's
first bytes, ``SO_TIMESTAMPNS``, wall clock), ``recv`` (``time.time()`` when the handler began),
``ttft_s`` (arrival → the first token's event written to the socket), ``ttft_handler_s`` (the same from
the handler's start: what a server timing only its handler sees), ``gaps_s`` (between consecutive tokens'
writes), ``e2e_s`` (arrival → the last byte written), ``prefill_s`` and ``decode_s`` (the forwards: the
first token's, and all the others'), ``forwards``. The tokenizer is the
pure-Python word-piece hash of ``infer_common.tokenize``; a token's text is one of a fixed list of words.
"""
import argparse
import hashlib
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import torch
from infer_common import VOCAB, serve_until_stopped, tokenize

WORDS = [w.strip() for w in (
    "the of and to in is was for on that with as by at from his her an were are which this be it had not "
    "or have one all their there been has more when will would who so no time if out up into can said"
).split()]
MODEL_NAME = "tiny-gpt"


class TinyGPT(torch.nn.Module):
    """Token and position embeddings, N pre-norm transformer blocks with a causal mask, a vocabulary head."""

    def __init__(self, layers: int, width: int, context: int = 1024):
        super().__init__()
        self.context = context
        self.tok = torch.nn.Embedding(VOCAB, width)
        self.pos = torch.nn.Embedding(context, width)
        block = torch.nn.TransformerEncoderLayer(width, nhead=4, dim_feedforward=4 * width, batch_first=True,
                                                 norm_first=True, dropout=0.0)
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids[:, -self.context:]
        n = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(n).unsqueeze(0))
        mask = torch.nn.Transformer.generate_square_subsequent_mask(n)
        return self.head(self.blocks(x, mask=mask, is_causal=True)[:, -1])


class Truth:
    """Appends one JSON line per finished request (a lock: requests end on many threads)."""

    def __init__(self, path):
        self.path, self.lock = path, threading.Lock()
        open(path, "w").close()

    def add(self, row: dict) -> None:
        line = json.dumps(row) + "\n"
        with self.lock, open(self.path, "a") as f:
            f.write(line)

    def write(self) -> None:  # serve_until_stopped's hook: every row is already on disk
        pass


def prompt_text(req: dict) -> str | None:
    if isinstance(req.get("prompt"), str):
        return req["prompt"]
    msgs = req.get("messages")
    if isinstance(msgs, list) and msgs:
        return "\n".join(str(m.get("content", "")) for m in msgs if isinstance(m, dict))
    return None


SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # every event is its own small write: no delayed-ACK stall
    arrived = None  # the kernel's receive time of the request's first bytes (wall clock, s)

    def log_message(self, *args):
        pass

    def setup(self):
        super().setup()
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass

    def handle_one_request(self):
        """Peek at the next request's first byte with its kernel receive timestamp: the request's time in
        the server starts when it reached the socket, not when a thread got round to parsing it (a thread
        waiting for the GIL, or for the CPU on a busy host, is the server's time too)."""
        self.arrived = None
        try:
            _, anc, _, _ = self.connection.recvmsg(1, socket.CMSG_SPACE(16), socket.MSG_PEEK)
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) >= 16:
                    sec, nsec = struct.unpack("qq", data[:16])
                    self.arrived = sec + nsec / 1e9
        except OSError:
            pass
        super().handle_one_request()

    def _json(self, code: int, obj: dict) -> None:
        out = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        if self.path.startswith("/v1/models"):
            return self._json(200, {"object": "list", "data": [{"id": MODEL_NAME, "object": "model"}]})
        self._json(200, {"ok": True})

    def read_request(self):
        """(recv wall s, handler start, arrival on the perf_counter clock, chat?, request, prompt text, max_tokens),
        or None after answering 404/400 (also the engine server's: openai_engine.py)."""
        recv, t0 = time.time(), time.perf_counter()
        # the kernel's arrival on the perf_counter clock (else the handler's start)
        t_in = t0 - (recv - self.arrived) if self.arrived and 0 <= recv - self.arrived < 60 else t0
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        chat = self.path.startswith("/v1/chat/completions")
        if not (chat or self.path.startswith("/v1/completions")):
            self._json(404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}})
            return None
        try:
            req = json.loads(body)
            text = prompt_text(req)
            if text is None:
                raise ValueError("neither prompt nor messages")
            max_tokens = int(req.get("max_tokens") or req.get("max_completion_tokens") or 16)
        except (ValueError, TypeError, AttributeError) as exc:
            self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            return None
        return recv, t0, t_in, chat, req, text, max_tokens

    def do_POST(self):
        got = self.read_request()
        if got is None:
            return
        recv, t0, t_in, chat, req, text, max_tokens = got
        ids = tokenize(text)[:ARGS.context // 2] or [0]
        stream = bool(req.get("stream"))
        usage_in_stream = bool((req.get("stream_options") or {}).get("include_usage"))
        rid = self.headers.get("X-Request-Id") or ""
        kind = "chat.completion" if chat else "text_completion"
        seq = torch.tensor([ids])
        times, forwards, words = [], [], []  # perf_counter of each token's write; each forward's seconds
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.flush()
        for i in range(max_tokens):
            f0 = time.perf_counter()
            with torch.no_grad():  # prefill: the whole prompt; decode: the last --window tokens (a KV cache's cost)
                nxt = int(MODEL(seq if i == 0 else seq[:, -ARGS.window:]).argmax(-1))
            forwards.append(time.perf_counter() - f0)
            seq = torch.cat([seq, torch.tensor([[nxt]])], 1)
            word = WORDS[nxt % len(WORDS)] + " "
            words.append(word)
            if stream:
                delta = {"delta": {"content": word}} if chat else {"text": word}
                self._event({"id": rid or "gen", "object": kind + (".chunk" if chat else ""), "model": MODEL_NAME,
                             "choices": [{"index": 0, **delta, "finish_reason": "length" if i == max_tokens - 1 else None}]})
            times.append(time.perf_counter())
        usage = {"prompt_tokens": len(ids), "completion_tokens": max_tokens, "total_tokens": len(ids) + max_tokens}
        if stream:
            if usage_in_stream:
                self._event({"id": rid or "gen", "object": kind, "model": MODEL_NAME, "choices": [], "usage": usage})
            self._chunk(b"data: [DONE]\n\n")
            self._chunk(b"")
        else:
            text = "".join(words)
            choice = {"index": 0, "finish_reason": "length",
                      **({"message": {"role": "assistant", "content": text}} if chat else {"text": text})}
            self._json(200, {"id": rid or "gen", "object": kind, "model": MODEL_NAME, "choices": [choice],
                             "usage": usage})
            times = [time.perf_counter()]  # no stream: the whole answer is the first (and only) token event
        end = time.perf_counter()
        TRUTH.add({"id": rid, "path": self.path, "stream": stream, "prompt_tokens": len(ids),
                   # what it was asked: the prompt's digest and its first words (a prefix shared on purpose)
                   "prompt_sha": hashlib.sha1(text.encode()).hexdigest(), "prompt_head": " ".join(text.split()[:16]),
                   "completion_tokens": max_tokens, "recv": recv, "arrived": self.arrived, "ttft_s": times[0] - t_in,
                   "ttft_handler_s": times[0] - t0, "gaps_s": [b - a for a, b in zip(times, times[1:])],
                   "e2e_s": end - t_in,
                   "prefill_s": forwards[0] if forwards else 0.0, "decode_s": sum(forwards[1:]),
                   "forwards": len(forwards)})

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _event(self, obj: dict) -> None:
        self._chunk(b"data: " + json.dumps(obj).encode() + b"\n\n")


def main():
    global ARGS, MODEL, TRUTH
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("truth")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--window", type=int, default=16, help="tokens a decode step attends to")
    ARGS = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    MODEL = TinyGPT(ARGS.layers, ARGS.width, ARGS.context).eval()
    with torch.no_grad():
        MODEL(torch.zeros(1, 8, dtype=torch.long))  # warm-up, outside any request
    TRUTH = Truth(ARGS.truth)
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), Handler)
    server.daemon_threads = True
    print(f"openai_stream: serving {MODEL_NAME} on 127.0.0.1:{ARGS.port}", flush=True)
    serve_until_stopped(server, TRUTH)


if __name__ == "__main__":
    main()
