"""A continuous-batching LLM engine behind an OpenAI-compatible streaming API, for gpusleuth's serving tests:
``python openai_engine.py PORT TRUTH.jsonl [--max-num-seqs S] [--admit-every K] [--chunked-prefill C]
[--width W] [--layers L]``.

The HTTP side is ``openai_stream.py``'s (kernel arrival stamps, SSE events, ``/v1/models``); the model runs on
**one engine thread**, as vLLM's, SGLang's and TGI's do. A handler tokenizes the prompt, puts ``(ids,
max_tokens, its token queue)`` on the engine's ``queue.Queue`` and streams what its own ``queue.Queue``
receives. The engine runs one forward per step over every token scheduled in it — one row per token, the
rows of a prompt being prefilled and one row per sequence decoding — and hands each decoding sequence its
next token. The model is a stack of wide linear layers over token rows: a step costs about what its rows
cost, a prompt of 64 tokens several decode steps.

Scheduling (the engine takes a request off its queue only when it admits it; at most ``--max-num-seqs``
running, default 8):

* default — **decode first, prefill waits** (TGI's ``--max-waiting-tokens``, a scheduler that protects the
  running sequences' inter-token latency): waiting requests are admitted only when nothing runs or after
  ``--admit-every`` (16) decode steps since the last admission; the admitted prompts are prefilled whole in a
  step of their own. A request arriving mid-generation waits behind up to K of the others' decode steps.
* ``--compute-bound``: a step costs what its rows cost one by one — a device already at its compute roofline,
  where a bigger batch buys no throughput: one replica is full, whatever its scheduler does.
* ``--chunked-prefill C``: every step admits what waits (up to the slots) and mixes the running sequences'
  decode rows with up to C prompt tokens of the sequences still prefilling (vLLM's chunked prefill with
  ``--max-num-batched-tokens``, SGLang's ``--chunked-prefill-size``): a new request's prefill starts at the
  next step. Its first token comes with the step that finishes its prompt.

**Its own clock.** One JSON line per request in TRUTH.jsonl, written when the request ends: ``id`` (its
``X-Request-Id``), ``arrived`` (kernel receive stamp, wall s), ``ttft_s`` / ``e2e_s`` (from the arrival, as
``openai_stream.py``), and the engine's account of it: ``queued_s`` (enqueued → admitted), ``first_step_s``
(enqueued → its first step started), ``behind`` (``[seconds, sequences]`` of each step that started after it
was enqueued and before its first step and was other sequences' decode only: what it waited behind),
``prefill_steps``, ``steps``. And one line per engine step, ``{"step": [wall start ns, seconds, rows, decode
rows, prefill rows, sequences]}``, written when the server stops (kept in memory until then: a file append
per step would slow the engine).
"""
import argparse
import json
import queue
import threading
import time

import torch
from infer_common import VOCAB, serve_until_stopped, tokenize
from openai_stream import MODEL_NAME, WORDS, Handler, Truth

from http.server import ThreadingHTTPServer


class EngineTruth(Truth):
    """Request lines as they end; the steps kept in memory (a file append per step would slow the engine) and
    written when the server stops."""

    def __init__(self, path):
        super().__init__(path)
        self.steps = []

    def step(self, row):
        self.steps.append(row)  # list.append is atomic: one engine thread writes, shutdown reads

    def write(self):
        with self.lock, open(self.path, "a") as f:
            f.writelines(json.dumps({"step": row}) + "\n" for row in self.steps)


class TokenModel(torch.nn.Module):
    """Token rows → next-token logits: an embedding, ``layers`` wide linear layers, a vocabulary head."""

    def __init__(self, width: int, layers: int, compute_bound: bool = False):
        super().__init__()
        self.compute_bound = compute_bound
        self.tok = torch.nn.Embedding(VOCAB, width)
        self.body = torch.nn.Sequential(*[m for _ in range(layers) for m in (torch.nn.Linear(width, width),
                                                                              torch.nn.ReLU())])
        self.head = torch.nn.Linear(width, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if self.compute_bound:  # a device already at its compute roofline: a step costs its rows, batched or not
            return torch.cat([self.head(self.body(self.tok(ids[i:i + 1]))) for i in range(len(ids))])
        return self.head(self.body(self.tok(ids)))


class Seq:
    __slots__ = ("ids", "max_tokens", "out", "enq", "admitted", "first_step", "prefilled", "made", "behind",
                 "prefill_steps", "steps", "done")

    def __init__(self, ids, max_tokens, out, enq):
        self.ids, self.max_tokens, self.out, self.enq = ids, max_tokens, out, enq
        self.admitted = self.first_step = None
        self.prefilled = 0  # prompt tokens already run
        self.made = 0  # tokens handed out
        self.behind = []  # [seconds, sequences] of each decode-only step that started while it waited
        self.prefill_steps = self.steps = 0
        self.done = threading.Event()


class Engine:
    def __init__(self, model, args, truth):
        self.model, self.args, self.truth = model, args, truth
        self.q = queue.Queue()
        self.lock = threading.Lock()
        self.pending = []  # Seq objects enqueued, not yet admitted (the engine's view of its queue)

    def submit(self, seq):
        with self.lock:
            self.pending.append(seq)
        self.q.put(seq)

    def _admit(self, running, slots):
        taken = []
        while len(running) + len(taken) < slots:
            try:
                seq = self.q.get_nowait() if running or taken else self.q.get()
            except queue.Empty:
                break
            seq.admitted = time.perf_counter()
            with self.lock:
                self.pending.remove(seq)
            taken.append(seq)
        return taken

    def run(self):
        a = self.args
        running, since_admit = [], 0
        while True:
            chunked = a.chunked_prefill > 0
            if chunked or not running or since_admit >= a.admit_every:
                new = self._admit(running, a.max_num_seqs)
                if new:
                    since_admit = 0
                running += new
            if not running:
                continue
            decoding = [s for s in running if s.prefilled >= len(s.ids)]
            filling = [s for s in running if s.prefilled < len(s.ids)]
            rows, chunks = [], []
            if chunked:
                budget = a.chunked_prefill
                for s in filling:
                    n = min(budget, len(s.ids) - s.prefilled)
                    if n <= 0:
                        break
                    chunks.append((s, n))
                    budget -= n
                for s in decoding:
                    rows.append(s.ids[-1])
            elif filling:  # decode first: a prefill step of its own, whole prompts
                chunks = [(s, len(s.ids) - s.prefilled) for s in filling]
                decoding = []
            else:
                rows = [s.ids[-1] for s in decoding]
            for s, n in chunks:
                rows.extend(s.ids[s.prefilled:s.prefilled + n])
            x = torch.tensor(rows, dtype=torch.long)
            t_wall, t0 = time.time_ns(), time.perf_counter()
            with torch.no_grad():
                logits = self.model(x)
            secs = time.perf_counter() - t0
            self.truth.step([t_wall, secs, len(rows), len(decoding), sum(n for _, n in chunks),
                             len(decoding) + len(chunks)])
            if decoding and not chunks:  # others' decode only: charge it to every request still waiting
                with self.lock:
                    for s in self.pending:
                        if s.enq <= t0:
                            s.behind.append([secs, len(decoding)])
            in_step = [s for s, _ in chunks] + decoding
            for s in in_step:
                if s.first_step is None:
                    s.first_step = t0
                s.steps += 1
            for s, n in chunks:
                s.prefilled += n
                s.prefill_steps += 1
            emit = decoding + [s for s, _ in chunks if s.prefilled >= len(s.ids)]  # a finished prompt's first token
            row_of = {}
            k = len(decoding)
            for s, n in chunks:
                k += n
                row_of[id(s)] = k - 1
            for i, s in enumerate(decoding):
                row_of[id(s)] = i
            for s in emit:
                nxt = int(logits[row_of[id(s)]].argmax())
                s.ids = s.ids + [nxt]  # the next step decodes it
                s.prefilled = len(s.ids)
                s.made += 1
                s.out.put(WORDS[nxt % len(WORDS)] + " ")
                if s.made >= s.max_tokens:
                    s.out.put(None)
            running = [s for s in running if s.made < s.max_tokens]
            if decoding and not chunks:
                since_admit += 1


class EngineHandler(Handler):
    def do_POST(self):
        got = self.read_request()
        if got is None:
            return
        recv, _, t_in, chat, _, text, max_tokens = got
        ids = tokenize(text)[:ARGS.max_prompt] or [0]
        rid = self.headers.get("X-Request-Id") or ""
        kind = "chat.completion.chunk" if chat else "text_completion"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        out = queue.Queue()
        seq = Seq(ids, max_tokens, out, time.perf_counter())
        ENGINE.submit(seq)
        times = []
        while True:
            word = out.get()
            if word is None:
                break
            delta = {"delta": {"content": word}} if chat else {"text": word}
            self._event({"id": rid or "gen", "object": kind, "model": MODEL_NAME, "choices": [{"index": 0, **delta}]})
            times.append(time.perf_counter())
        usage = {"prompt_tokens": len(ids), "completion_tokens": max_tokens, "total_tokens": len(ids) + max_tokens}
        self._event({"id": rid or "gen", "object": kind, "model": MODEL_NAME, "choices": [], "usage": usage})
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")
        end = time.perf_counter()
        TRUTH.add({"id": rid, "arrived": self.arrived, "recv": recv, "prompt_tokens": len(ids),
                   "completion_tokens": max_tokens, "ttft_s": times[0] - t_in, "e2e_s": end - t_in,
                   "queued_s": seq.admitted - seq.enq, "first_step_s": seq.first_step - seq.enq,
                   "behind": seq.behind,
                   "prefill_steps": seq.prefill_steps, "steps": seq.steps})


def main():
    global ARGS, ENGINE, TRUTH
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("truth")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--admit-every", type=int, default=16, help="decode steps between admissions (no chunking)")
    p.add_argument("--chunked-prefill", type=int, default=0, help="prompt tokens per step (0: whole prompts)")
    p.add_argument("--width", type=int, default=1024)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--max-prompt", type=int, default=256)
    p.add_argument("--compute-bound", action="store_true", help="a step costs its rows: bigger batches gain nothing")
    ARGS = p.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = TokenModel(ARGS.width, ARGS.layers, ARGS.compute_bound).eval()
    with torch.no_grad():
        model(torch.zeros(64, dtype=torch.long))  # warm-up, outside any request
    TRUTH = EngineTruth(ARGS.truth)
    ENGINE = Engine(model, ARGS, TRUTH)
    threading.Thread(target=ENGINE.run, name="engine", daemon=True).start()
    server = ThreadingHTTPServer(("127.0.0.1", ARGS.port), EngineHandler)
    server.daemon_threads = True
    print(f"openai_engine: serving {MODEL_NAME} on 127.0.0.1:{ARGS.port}", flush=True)
    serve_until_stopped(server, TRUTH)


if __name__ == "__main__":
    main()
