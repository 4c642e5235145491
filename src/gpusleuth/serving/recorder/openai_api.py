"""One OpenAI-compatible request's answer, read as it arrives: token event times, usage, and what was wrong.

Why its own module: ``gpusleuth load`` against an LLM server must measure what a user of a streaming
endpoint sees — the time to the first token, every gap between tokens, the tokens counted — and it must
say in a sentence when the server is not OpenAI-compatible, a stream is malformed or never ends. This is
the :class:`~gpusleuth.serving.recorder.http_client.BodySink` the HTTP client hands each piece of the body to as
it comes off the socket, so an event's time is when its bytes arrived, and nothing holds the whole body
(an SSE line longer than ``MAX_EVENT_BYTES`` or a JSON answer longer than ``MAX_JSON_BYTES`` is an error,
not a memory leak).

A *token event* is an SSE ``data:`` event whose first choice carries text (``delta.content`` of
``/v1/chat/completions``, ``text`` of ``/v1/completions``, or ``delta.reasoning_content``); events that
carry only a role, a finish reason or usage are not tokens. A server that sends several tokens in one
event is counted by events in ``token_ns`` and by its ``usage`` in ``output_tokens`` when it gives one
(``stream_options.include_usage`` is asked for), else by events.
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import TypeGuard

from gpusleuth.run.meta import JsonObject

MAX_EVENT_BYTES = 4 * 1024 * 1024  # one SSE line
MAX_JSON_BYTES = 16 * 1024 * 1024  # a non-streaming answer

ENDPOINTS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}


def endpoint_kind(path: str) -> str | None:
    """``chat`` / ``completions`` when the URL's path ends in an OpenAI endpoint, else None."""
    for suffix, kind in ENDPOINTS.items():
        if path.rstrip("/").endswith(suffix):
            return kind
    return None


@dataclass
class OpenAIAnswer:
    """What one request's answer held. ``problem`` is empty for a usable answer, else a code with
    ``detail`` a sentence: ``api`` (a 2xx that is not an OpenAI answer), ``stream`` (a malformed SSE
    event, an error event, a stream cut before ``[DONE]``)."""

    stream: bool
    status: int = 0
    token_ns: list[int] = field(default_factory=list)  # wall-clock arrival of each token event
    input_tokens: int = -1
    output_tokens: int = -1
    tokens_from: str = ""  # "usage" (the server said), "stream" (counted token events), "" unknown
    # the engine's own clock for this request, where its answer carries one (llama.cpp's ``timings``: the prompt's
    # prefill and the decode, in ms of its compute), and the prompt tokens it took from its cache (the usage's
    # ``prompt_tokens_details.cached_tokens``, llama.cpp's ``cache_n``): -1 where the answer said nothing
    engine_prefill_ns: int = -1
    engine_decode_ns: int = -1
    cached_tokens: int = -1
    done: bool = False  # saw [DONE] (stream) or a whole JSON answer
    problem: str = ""
    detail: str = ""
    _sse: bool = False
    _buf: bytearray = field(default_factory=bytearray)
    _body_bytes: int = 0

    # -- BodySink --------------------------------------------------------------------------------------
    def head(self, status: int, headers: dict[str, str]) -> None:
        self.status = status
        ctype = headers.get("content-type", "").lower()
        self._sse = "text/event-stream" in ctype
        if 200 <= status < 300 and not self._sse and "json" not in ctype:
            self._fail("api", f"answered {ctype or 'no Content-Type'}, not JSON or an event stream")

    def data(self, piece: bytes) -> None:
        self._body_bytes += len(piece)
        if self.problem or not 200 <= self.status < 300:
            return  # an error's body, or after a problem: not parsed, not kept
        if self._sse:
            self._sse_piece(piece, time.time_ns())
        elif len(self._buf) + len(piece) > MAX_JSON_BYTES:
            self._fail("api", f"a JSON answer over {MAX_JSON_BYTES >> 20} MiB")
            self._buf.clear()
        else:
            self._buf += piece

    # -- after the body ----------------------------------------------------------------------------------
    def finish(self) -> None:
        """The body has ended: a JSON answer is parsed now; a stream without ``[DONE]`` is said."""
        if self.problem or not 200 <= self.status < 300:
            return
        if self._sse:
            if self._buf.strip():
                self._sse_piece(b"\n\n", time.time_ns())  # a last event without its blank line
            if not self.done and not self.problem:
                if self.token_ns:
                    self.done = True  # ended by the close or the last chunk: a complete stream without [DONE]
                else:
                    self._fail("stream", "the event stream ended without a single token or [DONE]")
            self._count_from_stream()
            return
        try:
            obj = json.loads(bytes(self._buf))
        except ValueError:
            self._fail("api", f"the answer is not JSON: {_show(bytes(self._buf[:60]))}")
            return
        finally:
            self._buf = bytearray()
        if not isinstance(obj, dict) or not isinstance(obj.get("choices"), list):
            self._fail("api", "the JSON answer has no `choices` list")
            return
        self._usage(obj)
        text = _choice_text(obj["choices"][0]) if obj["choices"] else ""
        self.done = True
        if text or self.output_tokens > 0:
            self.token_ns.append(time.time_ns())  # the whole answer is its one "token event"
        # without usage the output tokens stay unknown (-1): counting words is not counting tokens

    # -- SSE -----------------------------------------------------------------------------------------------
    def _sse_piece(self, piece: bytes, now: int) -> None:
        buf = self._buf
        buf += piece
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                if len(buf) > MAX_EVENT_BYTES:
                    self._fail("stream", f"an event-stream line over {MAX_EVENT_BYTES >> 20} MiB")
                    buf.clear()
                return
            line = bytes(buf[:nl]).rstrip(b"\r")
            del buf[:nl + 1]
            if line.startswith(b"data:"):
                self._event(line[5:].strip(), now)
                if self.problem:
                    buf.clear()
                    return
            # blank lines, comments (":"), event:/id:/retry: fields: nothing to time

    def _event(self, payload: bytes, now: int) -> None:
        if payload == b"[DONE]":
            self.done = True
            return
        if self.done:
            return  # events after [DONE] are ignored
        try:
            obj = json.loads(payload)
        except ValueError:
            self._fail("stream", f"a malformed event-stream event (not JSON): {_show(payload[:60])}")
            return
        if not isinstance(obj, dict):
            self._fail("stream", f"an event that is not a JSON object: {_show(payload[:60])}")
            return
        if obj.get("error") is not None:
            err = obj["error"]
            msg = err.get("message") if isinstance(err, dict) else err
            self._fail("stream", f"the server sent an error event: {_show(str(msg)[:120].encode())}")
            return
        choices = obj.get("choices")
        if choices and isinstance(choices, list) and isinstance(choices[0], dict) and _choice_text(choices[0]):
            self.token_ns.append(now)
        elif choices is None and obj.get("usage") is None:
            self._fail("api", "an event with neither `choices` nor `usage` (not an OpenAI stream)")
            return
        self._usage(obj)

    def _usage(self, obj: JsonObject) -> None:
        u = obj.get("usage")
        if isinstance(u, dict):
            p, c = u.get("prompt_tokens"), u.get("completion_tokens")
            if _count(p):
                self.input_tokens = p
            if _count(c):
                self.output_tokens, self.tokens_from = c, "usage"
            details = u.get("prompt_tokens_details")
            cached = details.get("cached_tokens") if isinstance(details, dict) else None
            if _count(cached):
                self.cached_tokens = cached
        self._engine_timings(obj)

    def _engine_timings(self, obj: JsonObject) -> None:
        t = obj.get("timings")  # llama.cpp's server: its own per-request clock, on the last event
        if isinstance(t, dict):
            pre, dec = _ms_to_ns(t.get("prompt_ms")), _ms_to_ns(t.get("predicted_ms"))
            if pre >= 0 and dec >= 0:
                self.engine_prefill_ns, self.engine_decode_ns = pre, dec
            if self.cached_tokens < 0 and _count(t.get("cache_n")):
                self.cached_tokens = t["cache_n"]

    def _count_from_stream(self) -> None:
        if self.tokens_from != "usage":
            self.output_tokens, self.tokens_from = len(self.token_ns), "stream"

    def _fail(self, code: str, detail: str) -> None:
        if not self.problem:
            self.problem, self.detail = code, detail


def _count(v: object) -> TypeGuard[int]:
    """A token count as a server may state it: a non-negative JSON integer of sane size (untrusted)."""
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 40


def _ms_to_ns(v: object) -> int:
    """An engine's milliseconds (a JSON number, untrusted) as ns; -1 unless finite, ≥ 0 and under a day."""
    if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v < 86_400_000:
        return round(v * 1e6)
    return -1


def _choice_text(choice: object) -> str:
    if not isinstance(choice, dict):
        return ""
    delta = choice.get("delta")
    if isinstance(delta, dict):
        text = delta.get("content") or delta.get("reasoning_content") or ""
        return text if isinstance(text, str) else ""
    msg = choice.get("message")
    if isinstance(msg, dict):
        text = msg.get("content") or ""
        return text if isinstance(text, str) else ""
    text = choice.get("text") or ""
    return text if isinstance(text, str) else ""


def _show(raw: bytes) -> str:
    """Untrusted server bytes as a short printable repr (no terminal escapes)."""
    return repr(raw.decode("utf-8", "replace"))[:100]


def request_body(kind: str, prompt: str | list[JsonObject], max_tokens: int | None, model: str | None, stream: bool,
                 extra: JsonObject | None = None) -> bytes:
    """The JSON body of one request to ``/v1/chat/completions`` (``kind`` chat: ``prompt`` is the messages
    or a user message's text) or ``/v1/completions``."""
    body: JsonObject = {}
    if model:
        body["model"] = model
    if kind == "chat":
        body["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt if isinstance(prompt, str) else "\n".join(str(m.get("content", "")) for m in prompt)
    if max_tokens is not None:
        body["max_tokens"] = int(max_tokens)
    body["stream"] = stream
    if stream:
        body["stream_options"] = {"include_usage": True}
    body.update(extra or {})
    return json.dumps(body).encode()
