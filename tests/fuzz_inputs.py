"""Fuzz harness for every input gpusleuth reads: damaged, odd and hostile files made from real fixtures.

Why a harness and not a list of tests: the bugs a hostile user finds (a bit flip in a gzip stream, a lone
surrogate, a 30-digit timestamp, a FIFO) come in families; each family here is a *mutator* that turns a
real seed file into many cases, and one *runner* classifies what ``gpusleuth report F --json`` (and the
console and HTML outputs) did with each:

- ``error``     a clean one-line error naming the file (exit 2), no traceback
- ``salvaged``  a report with the loss stated in ``losses``
- ``same``      a report equal to the seed's (layout-only changes: compact JSON, CRLF, BOM, shuffled events…)
- ``ok``        a report (the mutation changed the data; nothing to compare against)
- ``traceback`` an exception escaped (a bug)
- ``hang``      no answer within the time limit (a bug)
- ``wrong``     a layout-only change gave different numbers, or a lossy change gave a report with no loss
                stated (a bug)

Readers come from the registry of input formats (``sources/detect.FORMATS``, see :data:`READERS`): each
format's seeds are the fixtures whose content it is, its mutators the line mutators unless :data:`CASES`
names others. tests/test_fuzz_inputs.py runs a few hundred cases; benchmarks/fuzz_at_scale.py runs 10⁵ and more.
"""

from __future__ import annotations

import bz2
import contextlib
import functools
import gzip
import io
import json
import lzma
import os
import random
import re
import signal
import sys
import traceback
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

BUGS = ("traceback", "hang", "wrong")
MTIME = 1_763_800_000  # every case file's (and reference's) modification time

# What a mutation promises about the report:
SAME = "same"    # only the layout changed: the report must equal the seed's
LOSSY = "lossy"  # data was damaged or made implausible: an error, or a report that states a loss
ANY = "any"      # data changed but is valid: any report or a clean error (never a bug)


@dataclass
class Case:
    name: str           # family/detail, stable for a given seed and rng
    data: bytes | None  # file content (None: ``make`` builds a special path)
    expect: str
    suffix: str = ".json"
    make: Callable[[Path], Path] | None = None  # builds a non-regular path (FIFO, loop…) under a dir


# ---- seeds ----------------------------------------------------------------------------------------

def kineto_seeds(small: bool = True) -> list[Path]:
    """Real Kineto traces: the HTA fixtures (small ones first) and the hand-made ones."""
    hta = sorted((FIXTURES / "hta").rglob("*.json*"), key=lambda p: p.stat().st_size)
    hta = [p for p in hta if "execution_trace/benchmark_simple_add_et" not in str(p)
           and "overlaid" not in p.name]
    own = [FIXTURES / "traces" / n for n in ("idle_causes.json", "overlapping_kernels.json",
                                             "gpu_without_launch.json", "missing_correlation.json")]
    if small:
        hta = [p for p in hta if p.stat().st_size < 120_000]
    return own + hta


def read_text(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


# ---- mutators: seed text -> cases --------------------------------------------------------------------

def _events(text: bytes) -> tuple[dict, list]:
    doc = json.loads(text)
    return doc, doc["traceEvents"]


def _dump(doc, **kw) -> bytes:
    return json.dumps(doc, **kw).encode()


def _x_events(events: list) -> list[dict]:
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def layouts(text: bytes, rng: random.Random) -> Iterator[Case]:
    """Same events, other bytes: every JSON layout and container a tool may write."""
    doc, _ = _events(text)
    compact = _dump(doc, separators=(",", ":"))
    yield Case("layout/compact", compact, SAME)
    yield Case("layout/one-line-spaces", _dump(doc), SAME)
    yield Case("layout/indent-tabs", _dump(doc, indent="\t"), SAME)
    yield Case("layout/crlf", _dump(doc, indent=1).replace(b"\n", b"\r\n"), SAME)
    yield Case("layout/ascii-escaped", _dump(doc, ensure_ascii=True, indent=2), SAME)
    yield Case("layout/utf8-raw", json.dumps(doc, ensure_ascii=False).encode(), SAME)
    yield Case("layout/bom", b"\xef\xbb\xbf" + _dump(doc, indent=2), SAME)
    yield Case("layout/utf16", json.dumps(doc).encode("utf-16"), LOSSY)
    yield Case("layout/one-event-per-line",
               b'{"traceEvents": [\n' + b",\n".join(_dump(e) for e in doc["traceEvents"]) + b"\n]"
               + (b", " + _dump({k: v for k, v in doc.items() if k != "traceEvents"})[1:-1]
                  if len(doc) > 1 else b"") + b"}", SAME)
    meta_first = {k: v for k, v in doc.items() if k != "traceEvents"}
    meta_first["traceEvents"] = doc["traceEvents"]
    yield Case("layout/events-last", _dump(meta_first), SAME)
    nested = {"aaa": {"traceEvents": [{"ph": "X", "name": "decoy", "ts": 1, "dur": 1}]}}
    nested.update(doc)
    yield Case("layout/nested-traceEvents-first", _dump(nested, indent=1), SAME)
    nested_c = dict(nested)
    yield Case("layout/nested-traceEvents-compact", _dump(nested_c, separators=(",", ":")), SAME)
    yield Case("layout/escaped-traceEvents-key", compact.replace(b'"traceEvents"', b'"trace\\u0045vents"', 1), SAME)
    yield Case("layout/escaped-keys", re.sub(rb'"(ph|ts|dur|name)":', lambda m: b'"\\u%04x' % m.group(1)[0]
                                             + m.group(1)[1:] + b'":', compact), SAME)
    yield Case("layout/integral-floats", re.sub(rb'("(?:rank|world_size|pid|tid)":)(\d+)([,}])', rb"\1\2.0\3",
                                                compact), SAME)
    pretty = _dump(doc, indent=2)
    yield Case("container/gzip", gzip.compress(pretty), SAME, ".json.gz")
    yield Case("container/gzip-misnamed", gzip.compress(pretty), SAME, ".json")
    yield Case("container/bz2", bz2.compress(pretty), SAME, ".json.bz2")
    yield Case("container/xz", lzma.compress(pretty), SAME, ".json.xz")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("trace.json", pretty)
    yield Case("container/zip", buf.getvalue(), SAME, ".zip")
    yield Case("container/zstd-magic", b"\x28\xb5\x2f\xfd" + bytes(range(64)), LOSSY, ".json.zst")
    import pyarrow as pa

    yield Case("container/zstd", pa.compress(pretty, codec="zstd", asbytes=True), SAME, ".json.zst")


def orders(text: bytes, rng: random.Random) -> Iterator[Case]:
    """Same events in another order: the numbers must not move."""
    doc, events = _events(text)
    for how in ("reverse", "shuffle"):
        d = dict(doc)
        ev = list(events)
        if how == "reverse":
            ev.reverse()
        else:
            rng.shuffle(ev)
        d["traceEvents"] = ev
        yield Case(f"order/{how}", _dump(d, indent=1), SAME)


def same_twice(text: bytes, rng: random.Random) -> Iterator[Case]:
    """Every event written twice (a trace concatenated into itself, a bad merge): one kernel cannot run twice
    at the same nanosecond, so the copies are dropped and said — never kernel time doubled in silence."""
    doc, events = _events(text)
    d = dict(doc)
    d["traceEvents"] = events + events
    yield Case("dup/events-twice", _dump(d), LOSSY)
    d["traceEvents"] = [x for e in events for x in (e, e)]
    yield Case("dup/events-interleaved", _dump(d), LOSSY)


def _pick_string_site(text: bytes, rng: random.Random) -> int | None:
    """Position just after the opening quote of a ``"name": "`` value."""
    sites = [i for i in range(len(text)) if text.startswith(b'"name": "', i)][:2000] or \
            [i for i in range(len(text)) if text.startswith(b'"name":"', i)][:2000]
    if not sites:
        return None
    s = rng.choice(sites)
    return text.index(b'"', text.index(b":", s) + 1) + 1


def strings(text: bytes, rng: random.Random) -> Iterator[Case]:
    """Hostile string content inside valid JSON: escapes, control characters, bad UTF-8."""
    pretty = _dump(json.loads(text), indent=1)
    payloads = {
        "lone-surrogate-escaped": (b"\\ud800x", ANY),
        "lone-low-surrogate": (b"\\udfff", ANY),
        "surrogate-pair": (b"\\ud83d\\ude00", ANY),
        "esc-osc52": (b"\\u001b]52;c;aGVsbG8=\\u0007", ANY),
        "esc-osc8": (b"\\u001b]8;;http://x\\u001b\\\\link\\u001b]8;;\\u001b\\\\", ANY),
        "esc-csi": (b"\\u001b[2J\\u001b[31mred", ANY),
        "nul": (b"a\\u0000b", ANY),
        "c1": (b"\xc2\x9b31m\xc2\x9d", ANY),
        "bidi": (b"\xe2\x80\xaeevil", ANY),
        "html": (b"<script>alert(1)</script>", ANY),
        "invalid-utf8": (b"\xff\xfe\xc3", LOSSY),
        "overlong-utf8": (b"\xc0\xaf", LOSSY),
        "raw-surrogate-utf8": (b"\xed\xa0\x80", LOSSY),
        "long": (b"x" * 100_000, ANY),
    }
    for tag, (payload, expect) in payloads.items():
        at = _pick_string_site(pretty, rng)
        if at is None:
            return
        yield Case(f"string/{tag}", pretty[:at] + payload + pretty[at:], expect)


def _set_field(text: bytes, rng: random.Random, field: str, value, where: str = "event") -> bytes:
    doc, events = _events(text)
    xs = _x_events(events) or [e for e in events if isinstance(e, dict)]
    if not xs:
        return _dump(doc)
    e = rng.choice(xs)
    if where == "args":
        args = e.setdefault("args", {})
        if isinstance(args, dict):
            args[field] = value
    else:
        e[field] = value
    return _dump(doc, indent=1)


def numbers(text: bytes, rng: random.Random) -> Iterator[Case]:
    """Numbers no trace should hold: giant, negative, non-finite, wrong type."""
    big = 10 ** 30
    for field in ("ts", "dur"):
        yield Case(f"number/{field}-giant-int", _set_field(text, rng, field, big), LOSSY)
        yield Case(f"number/{field}-int64-overflow", _set_field(text, rng, field, 2 ** 63 + 5), LOSSY)
        yield Case(f"number/{field}-huge-float", _set_field(text, rng, field, 1e300), LOSSY)
        yield Case(f"number/{field}-negative", _set_field(text, rng, field, -5e15), LOSSY)
        yield Case(f"number/{field}-list", _set_field(text, rng, field, [1, 2]), ANY)
        yield Case(f"number/{field}-object", _set_field(text, rng, field, {"a": 1}), ANY)
        yield Case(f"number/{field}-string", _set_field(text, rng, field, "12x"), ANY)
        yield Case(f"number/{field}-bool", _set_field(text, rng, field, True), ANY)
        yield Case(f"number/{field}-null", _set_field(text, rng, field, None), ANY)
    yield Case("number/ts-outlier-years", _set_field(text, rng, "ts", 3e14), LOSSY)
    s = _set_field(text, rng, "ts", 12345)
    yield Case("number/ts-nan-token", s.replace(b'"ts": 12345', b'"ts": NaN', 1), ANY)
    for field in ("correlation", "stream", "device"):
        yield Case(f"args/{field}-giant", _set_field(text, rng, field, big, "args"), ANY)
        yield Case(f"args/{field}-2**53", _set_field(text, rng, field, 2 ** 53 + 1, "args"), ANY)
        yield Case(f"args/{field}-list", _set_field(text, rng, field, [1, [2]], "args"), ANY)
        yield Case(f"args/{field}-float", _set_field(text, rng, field, 1e300, "args"), ANY)
        yield Case(f"args/{field}-hex", _set_field(text, rng, field, "0xffffffffffffffffffff", "args"), ANY)
    for field in ("name", "cat", "pid", "tid"):
        yield Case(f"field/{field}-list", _set_field(text, rng, field, ["a", 1]), ANY)
        yield Case(f"field/{field}-object", _set_field(text, rng, field, {"a": [1]}), ANY)
        yield Case(f"field/{field}-giant", _set_field(text, rng, field, big), ANY)
    yield Case("field/args-list", _set_field(text, rng, "args", [1, 2]), ANY)
    yield Case("field/ph-list", _set_field(text, rng, "ph", ["X"]), ANY)
    doc, _ = _events(text)
    for key, value in (("baseTimeNanoseconds", big), ("baseTimeNanoseconds", -1), ("baseTimeNanoseconds", "x"),
                       ("distributedInfo", [1]), ("distributedInfo", {"rank": big, "world_size": -1}),
                       ("deviceProperties", {"a": 1}), ("deviceProperties", [[1], {"id": [1], "name": 5}]),
                       ("displayTimeUnit", 7), ("traceEvents", {"a": 1}), ("traceEvents", "x")):
        d = dict(doc)
        d[key] = value
        yield Case(f"meta/{key}-{type(value).__name__}", _dump(d, indent=1), ANY)


def structure(text: bytes, rng: random.Random) -> Iterator[Case]:
    """Deep nesting, empty and odd top levels."""
    doc, events = _events(text)
    for depth in (1000, 100_000):
        at = _pick_string_site(_dump(doc, indent=1), rng)
        d = dict(doc)
        d["traceEvents"] = list(events)
        d["traceEvents"].insert(len(events) // 2, {"ph": "X", "name": "deep", "ts": 1, "dur": 1,
                                                   "args": {"x": 0}})
        s = _dump(d, indent=1).replace(b'"x": 0', b'"x": ' + b"[" * depth + b"]" * depth, 1)
        yield Case(f"structure/deep-array-{depth}", s, ANY)
        s = _dump(d, indent=1).replace(b'"x": 0', b'"x": ' + b'{"a":' * depth + b"0" + b"}" * depth, 1)
        yield Case(f"structure/deep-object-{depth}", s, ANY)
        del at
    yield Case("structure/deep-top", b"[" * 100_000 + b"]" * 100_000, LOSSY)
    # one event bigger than a chunk whose text is full of the boundary pattern: valid, nothing lost
    at = next((i for i, e in enumerate(events) if isinstance(e, dict) and e.get("ph") == "X"
               and isinstance(e.get("args", {}), dict)), None)
    if at is not None:
        d = dict(doc, traceEvents=list(events))
        x = d["traceEvents"][at]
        d["traceEvents"][at] = dict(x, args={**x.get("args", {}), "blob": ("x" * 200 + "}, {") * 10_000})
        yield Case("structure/huge-event", _dump(d), SAME)
    yield Case("structure/empty-object", b"{}", LOSSY)
    yield Case("structure/null", b"null", LOSSY)
    yield Case("structure/whitespace", b" \n\t " * 100, LOSSY)
    yield Case("structure/empty", b"", LOSSY)
    yield Case("structure/events-not-objects", b'{"traceEvents": [1, "a", null, [], true]}', LOSSY)
    yield Case("structure/duplicate-key", _dump(doc, indent=1)[:-1] + b', "traceEvents": []}', ANY)
    yield Case("structure/trailing-garbage", _dump(doc, indent=1) + b"\x00garbage", ANY)


def _lossy_unless_valid(data: bytes) -> str:
    """A flipped digit or letter can leave valid JSON with other values: nothing can tell it was damaged."""
    try:
        json.loads(data)
    except ValueError:
        return LOSSY
    return ANY


def damage(text: bytes, rng: random.Random, n: int = 6) -> Iterator[Case]:
    """Random damage to the text: bit flips, cut-offs, spliced bytes."""
    pretty = _dump(json.loads(text), indent=1)
    for i in range(n):
        b = bytearray(pretty)
        pos = rng.randrange(len(b))
        b[pos] ^= 1 << rng.randrange(8)
        yield Case(f"damage/bitflip-{i}", bytes(b), _lossy_unless_valid(bytes(b)))
        cut = rng.randrange(1, len(pretty))
        yield Case(f"damage/cut-{i}", pretty[:cut], LOSSY)
        a = rng.randrange(len(pretty))
        spliced = pretty[:a] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40))) + pretty[a:]
        yield Case(f"damage/splice-{i}", spliced, _lossy_unless_valid(spliced))
    gz = bytearray(gzip.compress(pretty))
    for i in range(n):
        g = bytearray(gz)
        pos = rng.randrange(10, len(g) - 8)
        g[pos] ^= 0xFF
        yield Case(f"gzip/flip-{i}", bytes(g), LOSSY, ".json.gz")
        yield Case(f"gzip/cut-{i}", bytes(gz[: rng.randrange(10, len(gz))]), LOSSY, ".json.gz")
    yield Case("gzip/middle-byte", bytes(gz[: len(gz) // 2]) + bytes([gz[len(gz) // 2] ^ 0x55])
               + bytes(gz[len(gz) // 2 + 1:]), LOSSY, ".json.gz")
    for what, packed, suffix in (("xz", lzma.compress(pretty), ".json.xz"), ("bz2", bz2.compress(pretty), ".json.bz2")):
        for i in range(2):
            b = bytearray(packed)
            b[rng.randrange(12, len(b) - 4)] ^= 1 << rng.randrange(8)
            yield Case(f"{what}/flip-{i}", bytes(b), LOSSY, suffix)
        yield Case(f"{what}/zero-tail", packed[: len(packed) // 2] + bytes(len(packed) - len(packed) // 2), LOSSY,
                   suffix)
    yield Case("gzip/concatenated-members", gzip.compress(pretty[: len(pretty) // 2])
               + gzip.compress(pretty[len(pretty) // 2:]), SAME, ".json.gz")


MUTATORS: list[Callable[[bytes, random.Random], Iterator[Case]]] = [
    layouts, orders, same_twice, strings, numbers, structure, damage]


def _fifo(d: Path) -> Path:
    p = d / "fifo.json"
    os.mkfifo(p)
    return p


def _loop(d: Path) -> Path:
    a, b = d / "a.json", d / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    return a


def _unreadable(d: Path) -> Path:
    p = d / "secret.json"
    p.write_text('{"traceEvents": []}')
    p.chmod(0)
    return p


def _unreadable_dir(d: Path) -> Path:
    p = d / "locked"
    p.mkdir()
    (p / "meta.json").write_text("{}")
    p.chmod(0)
    return p


def _dangling(d: Path) -> Path:
    p = d / "dangling.json"
    p.symlink_to(d / "missing.json")
    return p


def _newline_name(d: Path) -> Path:
    p = d / "a\nb\x1b[2J.json"  # the error sentence must stay one inert line
    p.write_bytes(b"\x00not a trace")
    return p


def paths() -> Iterator[Case]:
    """Paths that are not regular readable files."""
    root = os.geteuid() == 0  # root reads a chmod-0 file: nothing to test there
    for name, make in (("fifo", _fifo), ("symlink-loop", _loop),
                       *(() if root else (("unreadable-file", _unreadable), ("unreadable-dir", _unreadable_dir))),
                       ("dangling-symlink", _dangling),
                       ("dev-zero", lambda d: Path("/dev/zero")), ("dev-null", lambda d: Path("/dev/null")),
                       ("dev-urandom", lambda d: Path("/dev/urandom")), ("empty-dir", lambda d: d),
                       ("name-too-long", lambda d: d / ("x" * 300 + ".json")),
                       ("path-too-long", lambda d: Path(str(d) + "/a" * 3000)),
                       ("newline-in-name", _newline_name)):
        yield Case(f"path/{name}", None, LOSSY, make=make)


# ---- run directories ----------------------------------------------------------------------------------

def rundir_seeds() -> list[Path]:
    """Run directories recorded by gpusleuth (tests/fixtures/rundir/README.md): finished and cut off."""
    return sorted(p for p in (FIXTURES / "rundir").iterdir() if p.is_dir())


def _copy_run(seed: Path, work: Path) -> Path:
    import shutil

    d = work / seed.name
    shutil.copytree(seed, d, symlinks=True)
    return d


def _edit(seed: Path, fn: Callable[[Path], None]) -> Callable[[Path], Path]:
    def make(work: Path) -> Path:
        d = _copy_run(seed, work)
        fn(d)
        return d
    return make


def _flip(path: Path, rng: random.Random, n: int = 1) -> None:
    b = bytearray(path.read_bytes())
    for _ in range(n):
        if b:
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(b))


def _set_meta(key: str, value) -> Callable[[Path], None]:
    def fn(d: Path) -> None:
        meta = json.loads((d / "meta.json").read_text())
        meta[key] = value
        (d / "meta.json").write_text(json.dumps(meta))
    return fn


_META_VALUES = ["x", [1], {"a": 1}, None, 10 ** 30, -5, 1.5e300, True]


def _rewrite_parquet(d: Path, table: str, how: str) -> None:
    """A telemetry table another tool rewrote: every column as text, columns renamed, or another table's file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t = pq.read_table(d / f"{table}.parquet")
    if how == "as-text":
        t = pa.table({c: pa.array([str(v) for v in t[c].to_pylist()]) for c in t.column_names})
    elif how == "renamed":
        t = t.rename_columns([c + "_x" for c in t.column_names])
    else:
        t = pq.read_table(d / f"{'procs' if table == 'host' else 'host'}.parquet")
    pq.write_table(t, d / f"{table}.parquet")


def rundir_cases(seed: Path, rng: random.Random) -> Iterator[Case]:
    """Damaged run directories: mistyped meta.json fields, flipped/cut/emptied tables and streams, bad
    hook events, missing pieces."""
    meta = json.loads((seed / "meta.json").read_text())
    for key in sorted(meta):
        value = rng.choice(_META_VALUES)
        yield Case(f"meta/{key}={str(value)[:12]}", None, ANY, make=_edit(seed, _set_meta(key, value)))
    for key in ("start_ns", "end_ns", "exit_code", "interval_s", "command", "recorder", "losses", "env"):
        for value in _META_VALUES:
            yield Case(f"meta/{key}={str(value)[:12]}", None, ANY, make=_edit(seed, _set_meta(key, value)))
    yield Case("meta/flip", None, ANY, make=_edit(seed, lambda d: _flip(d / "meta.json", rng)))
    yield Case("meta/fifo", None, LOSSY, make=_edit(seed, lambda d: ((d / "meta.json").unlink(),
                                                                   os.mkfifo(d / "meta.json"))))
    yield Case("meta/list", None, LOSSY, make=_edit(seed, lambda d: (d / "meta.json").write_text("[1]")))
    yield Case("meta/empty-object", None, ANY, make=_edit(seed, lambda d: (d / "meta.json").write_text("{}")))
    yield Case("meta/invalid-utf8", None, LOSSY,
               make=_edit(seed, lambda d: (d / "meta.json").write_bytes(b'{"label": "\xff"}')))
    files = sorted(p.relative_to(seed) for p in seed.rglob("*") if p.is_file() and p.name != "meta.json")
    for rel in files:
        for i in range(3):
            yield Case(f"file/{rel}/flip-{i}", None, ANY,
                       make=_edit(seed, lambda d, rel=rel, n=i + 1: _flip(d / rel, rng, n)))
        cut = rng.random()
        yield Case(f"file/{rel}/cut", None, ANY,
                   make=_edit(seed, lambda d, rel=rel: (d / rel).write_bytes(
                       (d / rel).read_bytes()[: int(cut * (d / rel).stat().st_size)])))
        yield Case(f"file/{rel}/empty", None, ANY, make=_edit(seed, lambda d, rel=rel: (d / rel).write_bytes(b"")))
        yield Case(f"file/{rel}/garbage", None, ANY,
                   make=_edit(seed, lambda d, rel=rel: (d / rel).write_bytes(bytes(range(256)) * 4)))
        yield Case(f"file/{rel}/removed", None, ANY, make=_edit(seed, lambda d, rel=rel: (d / rel).unlink()))
        yield Case(f"file/{rel}/fifo", None, ANY, make=_edit(seed, lambda d, rel=rel: ((d / rel).unlink(),
                                                                         os.mkfifo(d / rel))))
        yield Case(f"file/{rel}/directory", None, ANY,
                   make=_edit(seed, lambda d, rel=rel: ((d / rel).unlink(), (d / rel).mkdir())))
    if (seed / "steps.parquet").exists():
        def corrupt_steps_no_raw(d: Path) -> None:
            import shutil

            shutil.rmtree(d / "raw")
            _flip(d / "steps.parquet", rng, 8)
        yield Case("steps/corrupt-without-raw", None, ANY, make=_edit(seed, corrupt_steps_no_raw))
    for table in ("host", "procs"):
        if (seed / f"{table}.parquet").exists():
            for how in ("as-text", "renamed", "other-table"):
                yield Case(f"parquet/{table}-{how}", None, ANY, make=_edit(seed, lambda d, t=table, how=how:
                                                                           _rewrite_parquet(d, t, how)))
    def host_count_text(d: Path) -> None:
        meta = json.loads((d / "meta.json").read_text())
        (meta.get("recorder") or {}).setdefault("host", {})["logical_cores"] = "x"
        (d / "meta.json").write_text(json.dumps(meta))
    yield Case("meta/host-cores-text", None, ANY, make=_edit(seed, host_count_text))
    yield Case("raw/removed", None, ANY, make=_edit(seed, lambda d: __import__("shutil").rmtree(d / "raw")))
    yield Case("raw/odd-lines", None, ANY, make=_edit(seed, lambda d: next((d / "raw").iterdir()).open("ab").write(
        b"S\t1\t2\n\xff\xfe\nS\tx\ty\t0\t0\t-1\t1\t0\toptimizer\nH\t[1]\nS\t" + b"9" * 40 + b"\t1\t0\t0\t-1\t0\t0\tx\n"
        b"R\t1\t2\t-1\t0\t0\t0\t200\tasgi\t1\t1\t{\"a\": 1e400}\nR\t1\t2\t-1\t0\t0\t0\t200\tasgi\t1\t1\t{\"\\u001b\": 5}\n"
        b"R\t" + b"9" * 40 + b"\t1\t0\t0\t0\t0\t0\twsgi\t1\t1\t{}\n")))


# ---- line-oriented logs: nvidia-smi CSV, Prometheus / DCGM text (issue 14's readers) -------------------

def _header_lines(lines: list[bytes]) -> int:
    """Leading lines that are not samples (comments, a CSV header): kept first when rows are shuffled."""
    n = 0
    for ln in lines:
        s = ln.strip()
        if s and (s[:1].isdigit() or (s[:1].isalpha() and b"{" in s and not s.startswith(b"#"))):
            break
        n += 1
    return n


def line_layouts(text: bytes, rng: random.Random, suffix: str) -> Iterator[Case]:
    """Line endings, a BOM, blank lines, no final newline: the same samples, so the same report."""
    unix = text.replace(b"\r\n", b"\n")
    yield Case("layout/crlf", unix.replace(b"\n", b"\r\n"), SAME, suffix)
    yield Case("layout/no-final-newline", unix.rstrip(b"\n"), SAME, suffix)
    yield Case("layout/bom", b"\xef\xbb\xbf" + unix, SAME, suffix)
    yield Case("layout/blank-lines", unix.replace(b"\n", b"\n\n", 3) + b"\n\n", SAME, suffix)


def line_orders(text: bytes, rng: random.Random, suffix: str) -> Iterator[Case]:
    """The same sample lines in another order: every reader sorts what needs order."""
    lines = text.replace(b"\r\n", b"\n").rstrip(b"\n").split(b"\n")
    head = _header_lines(lines)
    body = lines[head:]
    if len(body) < 3:
        return
    # A log whose rows do not name their GPU (nvidia-smi without index/uuid/pci.bus_id) numbers the GPUs by
    # their place in each sampling burst: there the order is data, not layout.
    header = b"\n".join(lines[:head]).lower()
    named = suffix == ".metrics" or any(k in header for k in (b"index", b"uuid", b"pci.bus_id"))
    expect = SAME if named else ANY
    shuffled = body[:]
    rng.shuffle(shuffled)
    yield Case("order/shuffled-rows", b"\n".join(lines[:head] + shuffled) + b"\n", expect, suffix)
    yield Case("order/reversed-rows", b"\n".join(lines[:head] + body[::-1]) + b"\n", expect, suffix)


def line_damage(text: bytes, rng: random.Random, suffix: str, n: int = 4) -> Iterator[Case]:
    """Cut-offs, bit flips, spliced bytes and garbage lines. A cut at a line boundary is a shorter log (no
    way to tell), a cut inside a line is a damaged one (its loss must be stated)."""
    unix = text.replace(b"\r\n", b"\n")
    for i in range(n):
        cut = rng.randrange(1, len(unix))
        at_boundary = unix[cut - 1:cut] == b"\n"
        yield Case(f"damage/cut-{i}", unix[:cut], ANY if at_boundary else LOSSY, suffix)
        b = bytearray(unix)
        b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        yield Case(f"damage/bitflip-{i}", bytes(b), ANY, suffix)
        a = rng.randrange(len(unix))
        yield Case(f"damage/splice-{i}", unix[:a] + bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
                   + unix[a:], ANY, suffix)
    lines = unix.rstrip(b"\n").split(b"\n")
    at = rng.randrange(_header_lines(lines), len(lines) + 1)
    garbage = bytes(rng.choice(b"abcxyz!@#$%^&*()0123456789,;:") for _ in range(rng.randrange(5, 60)))
    yield Case("damage/garbage-line", b"\n".join(lines[:at] + [garbage] + lines[at:]) + b"\n", LOSSY, suffix)


def line_odd(text: bytes, rng: random.Random, suffix: str) -> Iterator[Case]:
    """Valid-looking but odd content: any report or a clean error, never a traceback or a hang."""
    unix = text.replace(b"\r\n", b"\n")
    lines = unix.rstrip(b"\n").split(b"\n")
    head = _header_lines(lines)
    yield Case("odd/empty", b"", ANY, suffix)
    yield Case("odd/header-only", b"\n".join(lines[:head]) + b"\n", ANY, suffix)
    yield Case("odd/one-row", b"\n".join(lines[:head + 1]) + b"\n", ANY, suffix)
    yield Case("odd/duplicated", unix + unix, ANY, suffix)
    numbers = list(re.finditer(rb"(?<![\w.])\d+(?:\.\d+)?(?![\w.])", unix))
    for i, value in enumerate((b"9" * 40, b"-1", b"nan", b"inf", b"1e308", b"0", b"9" * 400)):  # 400 digits: > float
        if numbers:
            m = rng.choice(numbers)
            yield Case(f"odd/number-{i}", unix[:m.start()] + value + unix[m.end():], ANY, suffix)
    yield Case("odd/nul-bytes", unix.replace(b",", b",\x00", 5), ANY, suffix)
    yield Case("odd/latin1", unix.replace(b"MiB", b"Mi\xe9", 3), ANY, suffix)
    yield Case("odd/long-line", b"\n".join(lines[:head + 1] + [b"x" * 1_000_000] + lines[head + 1:]), ANY, suffix)
    yield Case("odd/controls", unix.replace(b"W", b"W\x1b]52;c;aGk=\x07", 2), ANY, suffix)


LINE_MUTATORS = [line_layouts, line_orders, line_damage, line_odd]


def line_cases(seed: Path, rng: random.Random) -> Iterator[Case]:
    text = seed.read_bytes()
    suffix = "".join(seed.suffixes[-1:]) or ".txt"
    for m in LINE_MUTATORS:
        yield from m(text, rng, suffix)


# ---- Nsight Systems SQLite exports -----------------------------------------------------------------------

def _sqlite_edit(seed: bytes, sql: list[str]) -> bytes | None:
    """The export with ``sql`` applied (a schema or value change a damaged or odd export could have)."""
    import sqlite3
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "e.sqlite"
        p.write_bytes(seed)
        con = sqlite3.connect(p)
        try:
            for q in sql:
                con.execute(q)
            con.commit()
        except sqlite3.DatabaseError:
            return None
        finally:
            con.close()
        return p.read_bytes()


_NSYS_TABLES = ("CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_RUNTIME",
                "NVTX_EVENTS", "StringIds", "TARGET_INFO_GPU", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION")


def nsys_cases(seed: Path, rng: random.Random, n: int = 4) -> Iterator[Case]:
    """Byte damage (SQLite checks little: a flipped value byte is a different value, so ANY) and the
    schema and value oddities of other Nsight versions and of damaged exports."""
    data = seed.read_bytes()
    for i in range(n):
        b = bytearray(data)
        for _ in range(rng.randrange(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        yield Case(f"damage/bytes-{i}", bytes(b), ANY, ".sqlite")
        yield Case(f"damage/cut-{i}", data[: rng.randrange(16, len(data))], ANY, ".sqlite")
    yield Case("damage/header", b"SQLite format 2\x00" + data[16:], ANY, ".sqlite")
    yield Case("damage/zero-page-2", data[:4096] + bytes(4096) + data[8192:], ANY, ".sqlite")
    edits = [(f"schema/drop-{t}", [f"DROP TABLE {t}"]) for t in _NSYS_TABLES]
    edits += [
        ("values/null-ends", ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = NULL WHERE rowid % 3 = 0"]),
        ("values/text-starts", ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = 'x' WHERE rowid % 5 = 0"]),
        ("values/huge-ends", ["UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 9223372036854775807 WHERE rowid = 1"]),
        ("values/negative-durations", ["UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start - 1000"]),
        ("values/nvtx-controls", ["UPDATE NVTX_EVENTS SET text = char(27) || ']52;c;aGk=' || char(7) || "
                                  "'<script>alert(1)</script>' WHERE rowid % 2 = 0"]),
        ("values/missing-strings", ["DELETE FROM StringIds WHERE rowid % 2 = 0"]),
        ("values/empty-kernels", ["DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL"]),
        ("values/session-start-blob", ["UPDATE TARGET_INFO_SESSION_START_TIME SET utcEpochNs = x'ff00'"]),
    ]
    for name, sql in edits:
        edited = _sqlite_edit(data, sql)
        if edited is not None:
            yield Case(name, edited, ANY, ".sqlite")


# ---- readers: one per input format of sources/detect.FORMATS, and run directories -------------------------

@dataclass
class Reader:
    """One input kind: its seed files and the cases made from each. :data:`READERS` is made from the
    registry of input formats (``sources/detect.FORMATS``): a new format is fuzzed as soon as it is registered
    and a fixture of it is in tests/fixtures (its seed, found by content); only a format whose files are not
    lines of text needs its mutators named in :data:`CASES`."""

    name: str
    seeds: Callable[[], list[Path]]
    cases: Callable[[Path, random.Random], Iterator[Case]]


def text_cases(mutators: list[Callable[[bytes, random.Random], Iterator[Case]]]):
    def make(seed: Path, rng: random.Random) -> Iterator[Case]:
        text = read_text(seed)
        for m in mutators:
            yield from m(text, rng)
    return make


@functools.lru_cache(maxsize=1)
def _fixture_formats() -> dict[Path, str]:
    """Every fixture file (outside run directories) with the format ``sniff`` reads in it."""
    from gpusleuth.errors import InputError
    from gpusleuth.sources.detect import sniff

    found = {}
    for p in sorted(FIXTURES.rglob("*")):
        if not p.is_file() or any((q / "meta.json").exists() for q in p.parents if FIXTURES in q.parents):
            continue
        try:
            found[p] = sniff(p)
        except (InputError, OSError):
            continue  # a README, a licence, a script: not an input
    return found


def fixture_seeds(name: str) -> list[Path]:
    """The fixtures whose content is format ``name``, smallest first."""
    return sorted((p for p, f in _fixture_formats().items() if f == name), key=lambda p: (p.stat().st_size, p))


# the formats whose seeds or mutators are not the defaults: the Kineto traces are chosen (small ones, the
# hand-made ones) and mutated as JSON events; Nsight exports are SQLite; every other format is lines of text
SEEDS: dict[str, Callable[[], list[Path]]] = {"kineto": kineto_seeds}
CASES: dict[str, Callable[[Path, random.Random], Iterator[Case]]] = {
    "kineto": text_cases(MUTATORS), "nsys": nsys_cases}


def _readers() -> list[Reader]:
    from gpusleuth.sources.detect import FORMATS

    made = [Reader(f.name, SEEDS.get(f.name, functools.partial(fixture_seeds, f.name)),
                   CASES.get(f.name, line_cases)) for f in FORMATS]
    return made + [Reader("rundir", rundir_seeds, rundir_cases)]


READERS: list[Reader] = _readers()


def reader(name: str) -> Reader:
    return next(r for r in READERS if r.name == name)


def cases(reader: Reader, seed: Path, rng: random.Random) -> Iterator[Case]:
    return reader.cases(seed, rng)


# ---- runner --------------------------------------------------------------------------------------------

class _Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise _Timeout()


def run_cli(args: list[str], timeout: float = 20.0) -> tuple[str, int | None, str, str]:
    """Run ``gpusleuth ARGS`` in this process; returns (outcome, exit code, stdout, stderr).

    outcome is ``exit``, ``traceback`` (with the formatted traceback in stderr) or ``hang``.
    """
    from gpusleuth.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    # `report` keeps pandas out of *its* process; in the test run's process that would stick (pyarrow caches
    # "no pandas" at its first array, and mlflow's import then fails in later tests), so not here
    import gpusleuth.lean_imports as lean

    meta_path = list(sys.meta_path)
    guard, lean.keep_pandas_out = lean.keep_pandas_out, lambda: None
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = main(args)
        return "exit", rc, out.getvalue(), err.getvalue()
    except _Timeout:
        return "hang", None, out.getvalue(), err.getvalue()
    except SystemExit as exc:
        return "exit", int(exc.code or 0), out.getvalue(), err.getvalue()
    except BaseException:  # noqa: BLE001 - this is what we are looking for
        return "traceback", None, out.getvalue(), err.getvalue() + traceback.format_exc()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        sys.meta_path[:] = meta_path
        lean.keep_pandas_out = guard


_VOLATILE = {"path", "label", "trace_path"}
_CASE_FILE = re.compile(r"(^|[\s(])t\.[A-Za-z0-9.]+")


def comparable(report: dict):
    """The report's numbers and findings, without the file name/path (which differ between cases)."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if k not in _VOLATILE}
        if isinstance(v, list):
            return [clean(x) for x in v]
        if isinstance(v, float):
            return float(f"{v:.9g}")
        if isinstance(v, str):  # names of the case's file (t.json, t.zip …) differ between cases
            return None if "/" in v or ".json" in v or _CASE_FILE.search(v) else v
        return v
    return clean(report)


def first_difference(a, b, where: str = "") -> str | None:
    if type(a) is not type(b):
        return f"{where}: {a!r:.80} != {b!r:.80}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b)):
            d = first_difference(a.get(k), b.get(k), f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} items != {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            d = first_difference(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{where}: {a!r:.80} != {b!r:.80}"


@dataclass
class Outcome:
    case: str
    cls: str
    detail: str = ""


_CTRL = set(range(0x00, 0x20)) - {0x0A} | set(range(0x7F, 0xA0))


def raw_controls(text: str) -> bool:
    """A control/escape character other than newline in terminal output (what makes a trace able to
    move the cursor, set the title or write the clipboard)."""
    return any(ord(c) in _CTRL for c in text)


def classify(case: Case, path: Path, reference: dict | None, console: bool = False,
             html: Path | None = None, timeout: float = 20.0) -> Outcome:
    """Run the case through ``report --json`` (and the console/HTML output if asked); classify it."""
    kind, rc, out, err = run_cli(["report", str(path), "--json"], timeout)
    if kind != "exit":
        return Outcome(case.name, kind, err[-2000:])
    if rc != 0:
        first = err.strip().splitlines()
        if rc == 2 and len(first) == 1 and first[0].startswith("gpusleuth: error:"):
            if raw_controls(err):
                return Outcome(case.name, "wrong", f"raw control character in the error: {err!r:.200}")
            if case.expect == SAME and reference is not None:  # the same trace in other bytes, refused
                return Outcome(case.name, "wrong", f"a layout-only change was refused: {first[0][:300]}")
            return Outcome(case.name, "error", first[0][:300])
        return Outcome(case.name, "wrong", f"exit {rc}: {err[-500:]!r}")
    try:
        report = json.loads(out)
    except ValueError as exc:
        return Outcome(case.name, "wrong", f"--json output is not JSON ({exc})")
    losses = report.get("losses") or []
    result = Outcome(case.name, "salvaged" if losses else "ok", "; ".join(losses)[:300])
    if case.expect == SAME and reference is not None:
        diff = first_difference(comparable(reference), comparable(report))
        if diff is None:
            result = Outcome(case.name, "same")
        elif not losses:
            return Outcome(case.name, "wrong", f"layout-only change gave another report: {diff}")
        else:
            return Outcome(case.name, "wrong", f"layout-only change lost data: {'; '.join(losses)[:300]}")
    elif case.expect == LOSSY and not losses:
        if reference is None or first_difference(comparable(reference), comparable(report)) is not None:
            return Outcome(case.name, "wrong", "damaged input gave a different report and no loss was stated")
        result = Outcome(case.name, "same")
    if console:
        kind, rc, cout, cerr = run_cli(["report", str(path)], timeout)
        if kind != "exit" or rc != 0:
            return Outcome(case.name, kind if kind != "exit" else "wrong", f"console: {cerr[-1500:]}")
        if raw_controls(cout + cerr):
            return Outcome(case.name, "wrong", "raw control character in the console report")
    if html is not None:
        kind, rc, _, herr = run_cli(["report", str(path), "--html", str(html)], timeout)
        if kind != "exit" or rc != 0:
            return Outcome(case.name, kind if kind != "exit" else "wrong", f"html: {herr[-1500:]}")
        page = html.read_text(encoding="utf-8", errors="replace")
        if "<script>alert(1)</script>" in page:
            return Outcome(case.name, "wrong", "unescaped trace string in the HTML report")
    return result


def reference_report(seed: Path, tmp: Path) -> dict | None:
    if seed.is_dir():
        import shutil

        p = tmp / "ref"
        shutil.rmtree(p, ignore_errors=True)
        shutil.copytree(seed, p)
    else:  # named like the cases ("t" + suffix), so the file's name drops out of the comparison the same way
        p = tmp / ("t" + (".json.gz" if seed.name.endswith(".json.gz") else seed.suffix))
        p.write_bytes(seed.read_bytes())
        os.utime(p, (MTIME, MTIME))
    kind, rc, out, _ = run_cli(["report", str(p), "--json"])
    return json.loads(out) if kind == "exit" and rc == 0 else None


def run_case(case: Case, tmp: Path, reference: dict | None, **kw) -> Outcome:
    work = tmp / "case"
    if work.exists():
        _rmtree(work)
    work.mkdir()
    try:
        if case.make is not None:
            path = case.make(work)
        else:
            path = work / ("t" + case.suffix)
            path.write_bytes(case.data)
            os.utime(path, (MTIME, MTIME))  # Prometheus scrapes are timed by their file's mtime
        return classify(case, path, reference, **kw)
    finally:
        _rmtree(work)


def _rmtree(p: Path) -> None:
    for root, dirs, _ in os.walk(p):
        for d in dirs:
            with contextlib.suppress(OSError):
                os.chmod(os.path.join(root, d), 0o700)
    import shutil

    shutil.rmtree(p, ignore_errors=True)
