"""The prompts an OpenAI-compatible load sends: a folder of text files, a JSONL dataset, or synthetic.

Why its own module: what is asked shapes what is measured (a long prompt is a long prefill, a long answer
many decode steps), so the prompts are read once, before the first request, and each bad line is said —
never a traceback, never a silent skip.

* **folder**: every regular file (name order) is one prompt, its text as the user's message;
* **JSONL**: one object a line, in any of the shapes datasets use — ShareGPT (``conversations`` or
  ``messages`` with ``from``/``role`` and ``value``/``content``: the first human/user turn is the prompt, the
  reply after it sets ``max_tokens`` when ``--output-tokens`` does not), ``{"prompt": …}``,
  ``{"messages": [...]}`` (chat as given), ``{"text": …}``; an optional ``max_tokens``/``output_tokens`` field.
  Lines that are not JSON or hold no prompt are skipped and counted (the first named);
* **synthetic**: ``--input-tokens MEAN[:SD]`` words drawn from a fixed list of common English words (each is
  one token in the BPE vocabularies of GPT-2, Llama and their kin, so the server's ``usage`` tells how close
  it came), ``--output-tokens MEAN[:SD]`` as ``max_tokens``, both normal and clipped at 1, seeded — a fresh
  prompt for every request of the run (``PromptSource``), so no engine answers one from its prefix cache unless
  ``--shared-prefix`` asks for a prefix shared on purpose.

A reply's length in tokens is estimated from its characters (4 a token) when no tokenizer is at hand; the
server's ``usage`` is what the results count.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.run.meta import JsonObject

COMMON_WORDS = (
    "the of and to in is was for on that with as by at from his her an were are which this be it had not or "
    "have one all their there been has more when will would who so no time if out up into can said its only "
    "new some could these two may first then do any like my now over such our man me even most made after "
    "also did many before must through back years where much your way well down should because each just "
    "those people how too little state good very make world still own see men work long get here between "
    "both life being under never day same another know while last might us great old year off come since "
    "against go came right used take three"
).split()
CHARS_PER_TOKEN = 4


@dataclass(frozen=True)
class Prompt:
    """One request's content: a text (a user message on chat) or chat messages, and its ``max_tokens``."""

    content: str | tuple[JsonObject, ...]  # chat messages as the user's file held them
    max_tokens: int | None = None

    def payload(self) -> str | list[JsonObject]:
        return self.content if isinstance(self.content, str) else [dict(m) for m in self.content]


@dataclass(frozen=True)
class Lengths:
    """A token-length distribution: normal ``mean`` ± ``sd``, clipped to at least 1."""

    mean: int
    sd: int = 0

    @classmethod
    def parse(cls, text: str, flag: str) -> "Lengths":
        mean, _, sd = text.partition(":")
        try:
            m, s = int(mean), int(sd or 0)
        except ValueError:
            m, s = 0, -1
        if m < 1 or s < 0 or m > 1_000_000:
            raise ValueError(f"{flag} wants MEAN or MEAN:SD in tokens (whole numbers, MEAN ≥ 1), got {text!r}")
        return cls(m, s)

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if not self.sd:
            return np.full(n, self.mean, dtype=np.int64)
        return np.maximum(np.rint(rng.normal(self.mean, self.sd, n)), 1).astype(np.int64)


def synthetic(n: int, inputs: Lengths, outputs: Lengths | None, seed: int | np.random.Generator = 0) -> list[Prompt]:
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    ins = inputs.draw(rng, n)
    outs = outputs.draw(rng, n) if outputs else [None] * n
    words = np.asarray(COMMON_WORDS)
    return [Prompt(" ".join(words[rng.integers(0, len(words), int(k))]), None if o is None else int(o))
            for k, o in zip(ins, outs)]


def shared_prefix(tokens: int, seed: int = 0) -> str:
    """``tokens`` common words, the same for every prompt of a run (``--shared-prefix``): a system prompt that
    many requests share on purpose, what an engine's prefix cache is for. Drawn apart from the prompts
    (seed + 1), so the prompts after it are the ones the run would send without it."""
    words = np.asarray(COMMON_WORDS)
    return " ".join(words[np.random.default_rng(seed + 1).integers(0, len(words), tokens)]) if tokens > 0 else ""


class PromptSource:
    """The prompts of one run, one per request, in order across all its levels — never restarted per level.

    An engine with prefix caching (vLLM's automatic prefix caching, SGLang's radix cache, llama.cpp's slot cache)
    answers a prompt it has seen from its cache: a level that resent an earlier level's prompts measured the cache,
    not the prefill (the same level twice read TTFT 222 → 11.8 ms against llama.cpp's server). Synthetic prompts
    are drawn afresh for every request (``synthetic``: their lengths, the seed); a dataset's are sent once each in
    order and, when the run asks for more, resent from the start — each resend counted in ``repeats`` for the
    report to say. ``prefix`` (``shared_prefix``) starts every prompt with the same words, on purpose."""

    CHUNK = 256

    def __init__(self, prompts: list[Prompt] | None = None, synthetic_lengths: tuple[Lengths, Lengths | None] | None
                 = None, seed: int = 0, prefix: str = ""):
        self.prompts = list(prompts or [])
        self.lengths = synthetic_lengths
        self.rng = np.random.default_rng(seed)
        self.prefix = prefix
        self.sent = 0
        self.repeats = 0  # requests that resent a dataset prompt already sent in this run
        self._drawn: list[Prompt] = []

    def next(self) -> tuple[Prompt, int]:
        """The next request's prompt and its index (the n-th synthetic prompt of the run; a dataset's line)."""
        k = self.sent
        self.sent += 1
        if self.lengths is not None:
            if not self._drawn:
                self._drawn = synthetic(self.CHUNK, self.lengths[0], self.lengths[1], self.rng)[::-1]
            return self._with_prefix(self._drawn.pop()), k
        n = len(self.prompts)
        if k >= n:
            self.repeats += 1
        return self._with_prefix(self.prompts[k % n]), k % n

    def _with_prefix(self, p: Prompt) -> Prompt:
        if not self.prefix:
            return p
        if isinstance(p.content, str):
            return Prompt(f"{self.prefix} {p.content}", p.max_tokens)
        msgs = [dict(m) for m in p.content]
        msgs[0]["content"] = f"{self.prefix} {msgs[0].get('content', '')}"
        return Prompt(tuple(msgs), p.max_tokens)

    def repeat_note(self) -> str | None:
        if not self.repeats:
            return None
        return (f"the {len(self.prompts):,} prompts given ran out: {self.repeats:,} of the {self.sent:,} requests "
                "resent one already sent in this run, which an engine with prefix caching may answer from its "
                "cache (a larger dataset, or synthetic prompts, keeps every prompt fresh)")


def from_folder(folder: Path, outputs: Lengths | None, seed: int = 0) -> list[Prompt]:
    from gpusleuth.run.files import check_regular

    files = sorted(f for f in folder.iterdir() if f.is_file())
    if not files:
        raise InputError(folder, "holds no files to send as prompts")
    texts = []
    for f in files:
        try:
            check_regular(f, "a prompt")
            texts.append(f.read_text(encoding="utf-8", errors="replace"))
        except OSError as exc:
            raise InputError(f, f"cannot be read ({exc.strerror or exc})") from None
    outs = outputs.draw(np.random.default_rng(seed), len(texts)) if outputs else [None] * len(texts)
    return [Prompt(t, None if o is None else int(o)) for t, o in zip(texts, outs)]


def from_jsonl(path: Path, outputs: Lengths | None, seed: int = 0, limit: int = 100_000) -> tuple[list[Prompt], str | None]:
    """The dataset's prompts (at most ``limit``) and a sentence about the lines skipped, if any."""
    from gpusleuth.run.files import check_regular

    try:
        check_regular(path, "a JSONL dataset")
        f = open(path, encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(path, f"cannot be read ({exc.strerror or exc})") from None
    prompts: list[Prompt] = []
    bad_json, no_prompt, first_bad = 0, 0, ""
    with f:
        for number, line in enumerate(f, 1):
            if len(prompts) >= limit:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                bad_json += 1
                first_bad = first_bad or f"line {number} is not JSON"
                continue
            prompt = _prompt_of(obj)
            if prompt is None:
                no_prompt += 1
                first_bad = first_bad or f"line {number} holds no prompt"
                continue
            prompts.append(prompt)
    if not prompts:
        raise InputError(path, "holds no usable prompt" + (f" ({first_bad}; {bad_json} line(s) not JSON, "
                                                          f"{no_prompt} without a prompt)" if first_bad else ""))
    if outputs:
        outs = outputs.draw(np.random.default_rng(seed), len(prompts))
        prompts = [Prompt(p.content, int(o)) for p, o in zip(prompts, outs)]
    note = None
    if bad_json or no_prompt:
        note = (f"{path.name}: {bad_json + no_prompt} line(s) skipped ({bad_json} not JSON, {no_prompt} without "
                f"a prompt; first: {first_bad}); {len(prompts):,} prompts used")
    return prompts, note


def _prompt_of(obj: object) -> Prompt | None:
    if not isinstance(obj, dict):
        return None
    limit = obj.get("max_tokens", obj.get("output_tokens"))
    limit = int(limit) if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else None
    turns = obj.get("conversations")
    if turns is None and isinstance(obj.get("messages"), list) and any(
            isinstance(m, dict) and "from" in m for m in obj["messages"]):
        turns = obj["messages"]
    if isinstance(turns, list):  # ShareGPT
        for i, t in enumerate(turns):
            if not isinstance(t, dict):
                continue
            who = str(t.get("from", t.get("role", ""))).lower()
            text = t.get("value", t.get("content"))
            if who in ("human", "user") and isinstance(text, str) and text.strip():
                reply = turns[i + 1] if i + 1 < len(turns) and isinstance(turns[i + 1], dict) else {}
                answer = reply.get("value", reply.get("content"))
                if limit is None and isinstance(answer, str) and answer:
                    limit = max(1, len(answer) // CHARS_PER_TOKEN)
                return Prompt(text, limit)
        return None
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs and all(isinstance(m, dict) and isinstance(m.get("content"), str) for m in msgs):
        return Prompt(tuple({"role": str(m.get("role", "user")), "content": m["content"]} for m in msgs), limit)
    for key in ("prompt", "text", "question", "input"):
        if isinstance(obj.get(key), str) and obj[key].strip():
            return Prompt(obj[key], limit)
    return None
