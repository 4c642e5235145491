"""The engine's own clock per request (llama.cpp's ``timings`` on its answers): parsed from the answer as the server
sent it, kept per request, and split per level into prefill, decode and the time outside them
(serving/analysis/tokens.py ``EngineClock``). The live check against llama.cpp's /metrics and our clock is in
tests/test_llama_engine.py; here, the parsing of answers recorded from that server (xllamacpp, 2026-11-28) and the
arithmetic on rows whose answer is known."""

from __future__ import annotations

import numpy as np
import pytest

from gpusleuth.serving.analysis.tokens import level_tokens
from gpusleuth.serving.recorder.openai_api import OpenAIAnswer

# the last two events of a stream and a whole answer, as llama.cpp's server sent them (ids shortened)
LAST_EVENT = (b'data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1795904608,'
              b'"model":"/tmp/tiny.gguf","system_fingerprint":"b0-unknown","object":"text_completion","usage":'
              b'{"completion_tokens":8,"prompt_tokens":61,"total_tokens":69,"prompt_tokens_details":{"cached_tokens":0}},'
              b'"id":"chatcmpl-FJG9","timings":{"cache_n":0,"prompt_n":61,"prompt_ms":7.858,"prompt_per_token_ms":'
              b'0.12881967213114753,"prompt_per_second":7762.789513871215,"predicted_n":8,"predicted_ms":3.63,'
              b'"predicted_per_token_ms":0.5185714285714286,"predicted_per_second":1928.3746556473827}}\n\n'
              b'data: [DONE]\n\n')
WHOLE = (b'{"choices":[{"text":"!YY","index":0,"logprobs":null,"finish_reason":"length"}],"created":1795904608,'
         b'"object":"text_completion","usage":{"completion_tokens":8,"prompt_tokens":61,"total_tokens":69,'
         b'"prompt_tokens_details":{"cached_tokens":60}},"id":"chatcmpl-VEjK","timings":{"cache_n":60,"prompt_n":1,'
         b'"prompt_ms":0.451,"predicted_n":8,"predicted_ms":2.353}}')


def _answer(body: bytes, stream: bool) -> OpenAIAnswer:
    a = OpenAIAnswer(stream=stream)
    a.head(200, {"content-type": "text/event-stream" if stream else "application/json"})
    a.data(b'data: {"choices":[{"text":"!","index":0}]}\n\n' + body if stream else body)
    a.finish()
    return a


def test_llama_cpps_timings_are_kept_from_a_stream_and_a_whole_answer():
    s = _answer(LAST_EVENT, stream=True)
    assert (s.engine_prefill_ns, s.engine_decode_ns, s.cached_tokens) == (7_858_000, 3_630_000, 0)
    assert not s.problem and s.output_tokens == 8
    w = _answer(WHOLE, stream=False)
    assert (w.engine_prefill_ns, w.engine_decode_ns, w.cached_tokens) == (451_000, 2_353_000, 60)


@pytest.mark.parametrize("timings", [b'"timings":{"prompt_ms":"7","predicted_ms":3}', b'"timings":{"prompt_ms":-1,'
                                     b'"predicted_ms":3}', b'"timings":{"prompt_ms":NaN,"predicted_ms":3}',
                                     b'"timings":{"prompt_ms":1e300,"predicted_ms":3}', b'"timings":[7,3]',
                                     b'"timings":{"prompt_ms":true,"predicted_ms":3}'])
def test_timings_a_server_garbled_are_not_taken(timings):
    """Untrusted numbers: a string, a negative, NaN (Python's json reads it), a huge or a boolean value, a list."""
    body = b'{"choices":[{"text":"x"}],"usage":{"completion_tokens":1,"prompt_tokens":2},' + timings + b'}'
    a = _answer(body, stream=False)
    assert (a.engine_prefill_ns, a.engine_decode_ns) == (-1, -1) and not a.problem


def test_a_level_split_by_the_engines_clock():
    """Three answered requests of 100 ms on our clock: the engine timed 20 + 30, 10 + 80 and 40 + 60.5 ms of them
    (the last 0.5 ms longer than ours: within the 1 ms its clock may differ), a fourth gave no timings, a fifth
    failed. Outside = E2E − prefill − decode per request (50, 10, 0 ms), its share Σ 60 / Σ 300."""
    ms = 1_000_000
    n = 5
    start = np.arange(n, dtype=np.int64) * 200 * ms
    end = start + 100 * ms
    ld = {"start_ns": start, "end_ns": end, "first_token_ns": start + 5 * ms,
          "output_tokens": np.full(n, 4, np.int64), "input_tokens": np.asarray([10, 10, 10, 10, -1], np.int64),
          "tokens_from": np.asarray(["usage"] * n, object),
          "token_ns": np.empty(n, object),
          "engine_prefill_ns": np.asarray([20, 10, 40, -1, -1], np.int64) * ms,
          "engine_decode_ns": np.asarray([30 * ms, 80 * ms, int(60.5 * ms), -1, -1], np.int64),
          "cached_tokens": np.asarray([5, 0, -1, 2, -1], np.int64)}
    for i, s in enumerate(start):  # each request's token event times (one array per row)
        ld["token_ns"][i] = np.asarray([s + 5 * ms, s + 50 * ms])
    m = np.ones(n, bool)
    ok = np.asarray([True, True, True, True, False])
    tk = level_tokens(ld, m, ok, 1.0)
    e = tk.engine
    assert e is not None and e.requests == 3 and e.over_e2e == 0
    assert e.prefill_ms.p50 == pytest.approx(20) and e.decode_ms.p50 == pytest.approx(60.5)
    assert e.outside_ms.p50 == pytest.approx(10) and e.outside_share == pytest.approx(60 / 300)
    assert tk.cached_share == pytest.approx(7 / 30)  # the three answers that said: 5 + 0 + 2 of 10 + 10 + 10
    ld["engine_decode_ns"][1] = 95 * ms  # 10 + 95 > 100: the engine's clock ran 5 ms past ours
    assert level_tokens(ld, m, ok, 1.0).engine.over_e2e == 1
    without = {k: v for k, v in ld.items() if k not in ("engine_prefill_ns", "engine_decode_ns", "cached_tokens")}
    old = level_tokens(without, m, ok, 1.0)  # a load recorded before these columns were kept
    assert old.engine is None and old.cached_share is None
