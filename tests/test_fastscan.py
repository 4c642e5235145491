"""The compiled column scanner (``sources/kineto/_scan.c`` through ``fastscan.py``) gives exactly what the
msgspec path gives, or declines.

Three kinds of proof: (1) every trace fixture, the golden set's damaged/re-laid-out/re-compressed copies and the
fuzz families are read both ways (``GPUSLEUTH_PURE_PYTHON``) into identical answers, with small chunks so
that most of each file goes through the chunk decoder, and the scanner is shown to have read most chunks (the
comparison is not vacuous); (2) hand-made hostile chunks and (3) random damage to real chunks: wherever
msgspec refuses a chunk the scanner must decline it (a false event boundary would otherwise be taken), and
wherever it accepts one the builder's state must be the same, to the bit."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import numpy as np
import pytest

from gpusleuth.sources.kineto import decompress, fastscan, reader, split
from gpusleuth.sources.kineto.columns import ColumnBuilder
from gpusleuth.sources.kineto.result import ReadResult
from gpusleuth.sources.kineto.schema import decode_events
from gpusleuth.sources.kineto.textdecode import DECODE_ERRORS, decode

sys.path.insert(0, str(Path(__file__).parent))
import fuzz_inputs as F  # noqa: E402
from test_trace_reader_golden import FIX, VARIANT_SEEDS, _text, compressed, digest, trace_files, variants  # noqa: E402

built = pytest.mark.skipif(fastscan._compiled_scan is None, reason="the C scanner is not built (no compiler)")
SMALL_CHUNK = 1 << 13  # 8 KB: most of every fixture goes through the chunk decoder (1 MB would skip them all)


@pytest.fixture
def counted(monkeypatch):
    """Small chunks, one process, and the chunks the scanner read / declined counted."""
    monkeypatch.setattr(reader, "CHUNK", SMALL_CHUNK)
    monkeypatch.setattr(decompress, "BLOCK", SMALL_CHUNK)  # (a chunk is decoded per block at most)
    monkeypatch.setattr(split, "SPLIT_MIN_TEXT", 1 << 60)  # one process (the split read has its own test)
    tally = {"scanned": 0, "declined": 0}
    real = fastscan.take_chunk

    def take(*a):
        ok = real(*a)
        tally["scanned" if ok else "declined"] += 1
        return ok

    monkeypatch.setattr(fastscan, "take_chunk", take)
    return tally


def both_ways(path: Path, monkeypatch) -> tuple[dict, dict]:
    with monkeypatch.context() as m:
        m.setenv(fastscan.PURE_ENV, "1")
        pure = digest(path)
    with monkeypatch.context() as m:
        m.delenv(fastscan.PURE_ENV, raising=False)
        fast = digest(path)
    return pure, fast


def all_trace_fixtures() -> list[Path]:
    """Every Kineto trace under tests/fixtures (the golden set's and the rest: run directories' traces, GPU
    recordings), found by content."""
    out = set(trace_files())
    for p in FIX.rglob("*.json*"):
        if p.is_file() and p.name.endswith((".json", ".json.gz")) and b"traceEvents" in _text(p)[:1 << 16]:
            out.add(p)
    return sorted(out)


@built
def test_every_fixture_trace_reads_the_same_both_ways(counted, monkeypatch):
    files = all_trace_fixtures()
    assert len(files) > 60
    for p in files:
        pure, fast = both_ways(p, monkeypatch)
        assert fast == pure, p
    # not vacuous: the scanner read most chunks (~20,000 of ~31,000; it declines by design the chunks of traces
    # recorded with record_shapes, a third of the fixtures' text, and the few odd ones)
    assert counted["scanned"] > 10_000 and counted["scanned"] > counted["declined"], counted


@pytest.mark.slow  # ~20 s on a busy core: salvage at 8 KB chunks
@built
def test_damaged_relaid_and_recompressed_copies_read_the_same(counted, monkeypatch, tmp_path):
    for rel in VARIANT_SEEDS:
        seed = FIX / rel
        texts = {**variants(seed), **compressed(_text(seed))}
        for name, data in texts.items():
            f = tmp_path / f"v.{name}"
            f.write_bytes(data)
            pure, fast = both_ways(f, monkeypatch)
            assert fast == pure, (rel, name)
    assert counted["scanned"] > 100, counted


@built
@pytest.mark.parametrize("family", [F.layouts, F.orders, F.same_twice, F.strings, F.numbers, F.structure,
                                    F.damage])
def test_fuzz_families_read_the_same(counted, monkeypatch, tmp_path, family):
    rng = random.Random(36)
    n = 0
    for seed in F.kineto_seeds()[:6]:
        for case in family(F.read_text(seed), rng):
            if case.data is None:
                continue
            f = tmp_path / f"t{case.suffix}"
            f.write_bytes(case.data)
            pure, fast = both_ways(f, monkeypatch)
            assert fast == pure, (seed.name, case.name)
            n += 1
    assert n and counted["scanned"], counted


@pytest.mark.process  # a split read forks its child
@built
def test_a_split_read_gives_the_same_answer_both_ways(counted, monkeypatch):
    """Both parts of a two-process read (split.py) use the builder's scanner (the child inherits the setting)."""
    monkeypatch.setattr(split, "SPLIT_MIN_TEXT", 0)
    monkeypatch.setattr(split, "_usable_cpus", lambda: 2)
    nccl = FIX / "hta" / "nccl_parser_config" / "nccl_data.json.gz"
    pure, fast = both_ways(nccl, monkeypatch)
    assert fast == pure
    assert counted["scanned"] > 10 and not counted["declined"]  # the parent's part, all by the scanner


def test_the_scanner_is_built_where_a_compiler_is():
    """Where this machine can build the extension, a checkout that has not built it would skip every test
    above silently: say how to build it instead."""
    import shutil
    import sysconfig

    can_build = shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc") \
        and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()
    if not can_build:
        pytest.skip("no C compiler or no Python headers here: the pure-Python path is the one in use")
    assert fastscan._compiled_scan is not None, (
        "the C scanner is not built: `pip install -c constraints.txt -e '.[test]'` or "
        "`python setup.py build_ext --inplace` (tests/test_fastscan.py skips its comparisons without it)")


def test_pure_python_setting_and_a_missing_build_use_the_msgspec_path(monkeypatch):
    monkeypatch.setenv(fastscan.PURE_ENV, "1")
    assert ColumnBuilder()._scan is None
    assert not ColumnBuilder().take_text(b'[{"ph":"X","ts":1}]')
    monkeypatch.delenv(fastscan.PURE_ENV)
    monkeypatch.setattr(fastscan, "_compiled_scan", None)
    assert ColumnBuilder()._scan is None


# ---- chunk by chunk: same state or declined ---------------------------------------------------------------

def _state(b: ColumnBuilder) -> list:
    cols = {k: np.concatenate(v) if v else None for k, v in b.parts.items()}
    out: list = [b.rows, sorted(b.phases.items()),
                 [(type(k).__name__, repr(k), v) for k, v in b.process_names.items()],
                 [(repr(k), v) for k, v in b.thread_names.items()]]
    for attr in ("name_ix", "cat_ix", "pid_ix", "tid_ix", "itype_ix", "icall_ix"):
        out.append([(type(k).__name__, repr(k), v) for k, v in getattr(b, attr).items()])
    for k, v in sorted(cols.items()):
        # bit for bit, but any NaN equals any NaN (the column pass turns every NaN into "no value" alike)
        out.append((k, None if v is None else (v.dtype.str, np.where(np.isnan(v), np.nan, v).tobytes()
                                                if v.dtype.kind == "f" else v.tobytes())))
    return out


def check(text: bytes) -> bool:
    """Assert the scanner reads ``text`` as the msgspec path does or declines it; True when it read it."""
    res = ReadResult()
    try:
        events = decode(decode_events, text, res)
    except DECODE_ERRORS:
        events = None
    fast = ColumnBuilder()
    assert fast._scan is not None
    took = fast.take_text(memoryview(bytearray(text)))
    if events is None or res.bad_utf8:
        assert not took, text[:300]
        return False
    if took:
        pure = ColumnBuilder()
        pure(events)
        assert _state(fast) == _state(pure), text[:300]
    else:
        assert _state(fast) == _state(ColumnBuilder())  # declined: untouched
    return took


X = '{"ph":"X","cat":"kernel","name":"k","pid":1,"tid":2,"ts":1.5,"dur":2,"args":{"correlation":5,"stream":7}}'
ODD = [
    # read by the scanner
    ('{"ph":"X","name":"a\\"b\\\\c\\/\\n\\u00e9\\u0000","ts":3,"dur":1}', True),
    ('{"ph":"X","name":"\\u0061","ts":3}', True),  # the same value as "a", spelled otherwise: one code
    ('{"ph":"X","name":"a","ts":3}', True),
    ('{"ph":"X","pid":"1","tid":1,"ts":4}', True),  # a string "1" and an integer 1: two codes
    ('{"ph":"X","pid":-0,"tid":-5,"ts":-0,"dur":-0.0}', True),
    ('{"ph":"X","ts":1e-400,"dur":1.7976931348623157e308}', True),
    ('{"ph":"X","ts":1700000000123456.789,"dur":0.001,"args":{"correlation":9007199254740993}}', True),
    ('{"ph":"X","ts":null,"dur":null,"args":null}', True),
    ('{"ph":"X","args":{"correlation":null,"stream":-3,"device":999999999999999999,"name":"x"}}', True),
    ('{"ph":"X","name":"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80","cat":"\x7f","ts":1}', True),
    ('{"ph":"f","args":5,"x":[1,{"a":[true,false,null]},-1.5e-3,"\\u00e9"],"ph2":{}}', True),
    ('{"ph":"M","name":"process_name","pid":1,"args":{"name":"main"}}', True),
    ('{"ph":"M","name":"thread_name","pid":"1","tid":7,"args":{"name":"\\u00e9t\\u00e9"}}', True),
    ('{"ph":"X","args":{"blob":' + "[" * 60 + "]" * 60 + '},"ts":2}', True),
    (' {"ph" : "X" , "ts" : 2 } ', True),
    # declined (msgspec refuses them, or reads them in ways the scanner leaves to it)
    ('{"ph":"X","name":"\\ud800","ts":1}', False),
    ('{"ph":"X","name":"\\ud83d\\ude00","ts":1}', False),
    ('{"ph":"X","name":"a\x01b","ts":1}', False),
    ('{"ph":"X","name":"a\tb","ts":1}', False),
    ('{"ph":"X","name":"\xff","ts":1}', False),
    ('{"ph":"X","name":"\xc0\xaf","ts":1}', False),
    ('{"ph":"X","name":"\xed\xa0\x80","ts":1}', False),
    ('{"ph":"X","name":"\xf4\x90\x80\x80","ts":1}', False),
    ('{"ph":"X","name":"a\\x","ts":1}', False),
    ('{"ph":"X","name":"a\\u12","ts":1}', False),
    ('{"ph":"X","ts":1e400}', False),
    ('{"ph":"X","ts":-1e400}', False),
    ('{"ph":"X","ts":123456789012345678901234567890}', False),
    ('{"ph":"X","ts":01}', False),
    ('{"ph":"X","ts":1.}', False),
    ('{"ph":"X","ts":.5}', False),
    ('{"ph":"X","ts":+1}', False),
    ('{"ph":"X","ts":1e}', False),
    ('{"ph":"X","ts":"12"}', False),
    ('{"ph":"X","ts":true}', False),
    ('{"ph":"X","ts":NaN}', False),
    ('{"ph":"X","ts":1,"ts":2}', False),
    ('{"ph":"X","ph":"f"}', False),
    ('{"ph":"X","p\\u0068":"f"}', False),
    ('{"ph":"\\u0058","ts":1}', False),
    ('{"ph":"Q","ts":1}', False),
    ('{"ts":1}', False),
    ('{}', False),
    ('{"ph":5}', False),
    ('{"ph":"X","args":5}', False),
    ('{"ph":"X","args":[]}', False),
    ('{"ph":"M","args":5}', False),
    ('{"ph":"M","name":"process_name","pid":1e400,"args":{"name":"main"}}', False),
    ('{"ph":"X","pid":1.0}', False),
    ('{"ph":"X","pid":null}', False),
    ('{"ph":"X","pid":12345678901234567890}', False),
    ('{"ph":"X","name":5}', False),
    ('{"ph":"X","cat":null}', False),
    ('{"ph":"X","args":{"correlation":1.0}}', False),
    ('{"ph":"X","args":{"correlation":"5"}}', False),
    ('{"ph":"X","args":{"stream":1e400}}', False),
    ('{"ph":"X","args":{"name":1e400}}', False),
    ('{"ph":"X","args":{"correlation":1,"correlation":2}}', False),
    ('{"ph":"X","args":{"Input type":["float"]}}', False),
    ('{"ph":"X","args":{"Input Dims":[[1]],"Concrete Inputs":[""]}}', False),
    ('{"ph":"X","args":{"corr\\u0065lation":1}}', False),
    ('{"ph":"f","x":tru}', False),
    ('{"ph":"f","x":nul}', False),
    ('{"ph":"f","x":[1,]}', False),
    ('{"ph":"f","x":{"a":1,}}', False),
    ('{"ph":"f",}', False),
    ('{"ph":"f","x":1x}', False),
    ('{"ph":"f","x":[' + "[" * 1000 + "]" * 1000 + "]}", False),
    ('{"ph":"f","x":[' + "[" * 100 + "]" * 100 + "]}", False),  # msgspec reads it; the scanner leaves it
    ('{"ph":"f" "x":1}', False),
    ('{"ph":"f","x":1}}', False),
    ('{"ph":"f","x":1', False),
    ('{"ph":"f","x":"abc', False),
    ('1', False),
    ('"x"', False),
    ('[]', False),
]


@built
@pytest.mark.parametrize("event,scanned", ODD, ids=[str(i) for i in range(len(ODD))])
def test_hostile_events_are_read_exactly_or_declined(event, scanned):
    for text in (f"[{event}]", f"[{X},{event},{X}]", f"[\n  {X},\n  {event}\n]"):
        assert check(text.encode("latin-1")) == scanned, text  # (the \xNN characters above are raw bytes)


@built
def test_chunk_framing_and_garbage_are_declined():
    for text in (f"[{X}]x", f"[{X}]\x00", f"[{X},]", f"[,{X}]", f"[{X}{X}]", f"{X}", f"[{X}", "[]", "[ ]",
                 f"[{X}]]", f"x[{X}]", f"[{X}\x00]", f"[{X}\x0b]"):
        assert not check(text.encode()), text
    assert check(f" \r\n\t[ {X} , {X} ]\n ".encode())


@built
def test_random_damage_to_real_chunks_is_read_exactly_or_declined():
    """Real event text (windows of three traces' events that the scanner reads, laid out three ways), damaged at
    random a few thousand times: never a chunk the scanner reads differently from msgspec, never one msgspec
    refuses that it reads."""
    import json

    rng = random.Random(3636)
    chunks = []
    for rel in ("hta/nccl_parser_config/nccl_data.json.gz", "tracelens/h100_qwen1.5_0.5b.json.gz",
                "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz"):
        events = json.loads(_text(FIX / rel))["traceEvents"]
        windows = [events[i:i + 40] for i in range(0, len(events), 40)]
        windows = [w for w in windows if ColumnBuilder().take_text(json.dumps(w).encode())][:4]
        assert windows, rel
        for w in windows:
            chunks += [json.dumps(w).encode(), json.dumps(w, indent=2).encode(),
                       json.dumps(w, separators=(",", ":")).encode()]
    nasty = [b"\x00", b"\x01", b"\x1f", b"\x7f", b"\x80", b"\xc3", b"\xed", b"\xff", b"\\", b'"', b"{", b"}",
             b"[", b"]", b",", b":", b"0", b"-", b"e", b".", b"+", b" ", b"\n", b"\\u", b"\\ud800", b"X", b"M",
             b"null", b"1e999", b"\xc3\xa9", b'"ph":"X",', b'"ts":', b'"args":{}', b'"pid":"1"']
    took = declined = 0
    for _ in range(int(os.environ.get("FASTSCAN_FUZZ_N", "3000"))):
        b = bytearray(rng.choice(chunks))
        for _ in range(rng.choice((1, 1, 2, 3))):
            at = rng.randrange(1, len(b) - 1)
            op = rng.random()
            if op < 0.4:
                b[at:at + 1] = rng.choice(nasty)
            elif op < 0.7:
                b[at:at] = rng.choice(nasty)
            elif op < 0.9:
                del b[at:at + rng.randrange(1, 8)]
            else:
                b[at] = rng.randrange(256)
        if check(bytes(b)):
            took += 1
        else:
            declined += 1
    assert took > 300 and declined > 300, (took, declined)  # both sides exercised


@built
def test_a_regular_trace_is_read_by_the_scanner_alone(counted, monkeypatch):
    monkeypatch.delenv(fastscan.PURE_ENV, raising=False)
    b = ColumnBuilder()
    reader.read_events(FIX / "hta" / "nccl_parser_config" / "nccl_data.json.gz", b)
    assert b.scanned > 100 and b.declined == 0


@built
def test_numbers_convert_as_msgspec_converts_them():
    """ts/dur as msgspec's float (or int → float) would give them, ids through float64 as the column pass does:
    random literals of every shape, checked against the msgspec path (declining is allowed, differing is not)."""
    rng = random.Random(7)
    took = 0
    for _ in range(3000):
        digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 24))).lstrip("0") or "0"
        lit = ("-" if rng.random() < 0.3 else "") + digits
        if rng.random() < 0.6:
            lit += "." + "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20)))
        if rng.random() < 0.4:
            lit += rng.choice("eE") + rng.choice(["", "+", "-"]) + str(rng.randint(0, 330))
        for field in ('"ts":%s', '"dur":%s', '"args":{"correlation":%s}', '"args":{"stream":%s,"device":%s}'):
            body = field.replace("%s", lit)
            took += check(f'[{{"ph":"X",{body}}}]'.encode())
    assert took > 3000


@built
def test_the_phases_it_reads_are_the_schemas():
    """A phase the tagged schema decodes (X, M and the skipped ones) is read; any other one is declined (the
    loose decoder's)."""
    from gpusleuth.sources.kineto import schema

    known = {"X", "M"} | {s.__struct_config__.tag for s in schema._SKIPPED}
    for code in range(0x20, 0x7F):
        c = chr(code)
        if c in '"\\':
            continue
        text = f'[{{"ph":"{c}","name":"process_name","args":{{"name":"p"}}}},{X}]'.encode()
        assert check(text) == (c in known), c


def _generated_chunk(rng: random.Random) -> bytes:
    """A chunk of 1–4 generated events: mostly regular fields, now and then a value of another type, a hostile
    string or number, a repeated or unknown key, odd args, other whitespace, or a cut."""
    ws = ["", "", " ", "\n  ", "\t", "\r\n"]

    def string() -> str:
        if rng.random() < 0.9:
            return '"' + rng.choice(["a", "aten::mm", "kernel", "x y", "\\n", "\\u00e9", "é€", "1", ""]) + '"'
        return '"' + "".join(rng.choices(["a", "\\n", '\\"', "\\\\", "\\u0000", "\\ud800", "\\ud83d\\ude00", "é",
                                          "\x01", "\x7f", "\udcff", "\\x"], k=rng.randint(0, 4))) + '"'

    def number() -> str:
        if rng.random() < 0.9:
            return rng.choice(["0", "1", "-1", "12.5", "1700000000123456", "1700000000123456.789", "0.001", "null"])
        return rng.choice(["-0", "-0.0", "1E-5", "1e400", "1e-400", "01", "1.", ".5", "123456789012345678",
                           "1234567890123456789", "9007199254740993", "NaN", "-", "tru"])

    def value(depth: int = 0) -> str:
        r = rng.random()
        if r < 0.35:
            return string()
        if r < 0.7 or depth > 1:
            return number()
        if r < 0.85:
            return "[" + ",".join(value(depth + 1) for _ in range(rng.randint(0, 3))) + "]"
        return "{" + ",".join(f'"k{i}":{value(depth + 1)}' for i in range(rng.randint(0, 2))) + "}"

    def event() -> str:
        fields: list[tuple[str, str]] = []
        if rng.random() < 0.95:
            fields.append(("ph", rng.choice(['"X"'] * 6 + ['"M"', '"f"', '"i"', '"Q"', '"\\u0058"', "5"])))
        for k in ("cat", "name", "pid", "tid", "ts", "dur"):
            if rng.random() < 0.8:
                regular = string() if k in ("cat", "name") else number() if k in ("ts", "dur") else \
                    rng.choice([number(), string()])
                fields.append((k, value() if rng.random() < 0.1 else regular))
        if rng.random() < 0.8:
            args = [(k, number() if rng.random() < 0.8 else value()) for k in
                    ("correlation", "stream", "device", "name", "External id", "Input type", "corr\\u0065lation")
                    if rng.random() < (0.5 if k in ("correlation", "stream", "device", "External id") else 0.05)]
            fields.append(("args", "{" + ",".join(f'"{k}":{v}' for k, v in args) + "}" if rng.random() < 0.9
                           else rng.choice(["null", "5", "[]"])))
        rng.shuffle(fields)
        if fields and rng.random() < 0.03:
            fields.append(fields[0])
        return "{" + ",".join(f'{rng.choice(ws)}"{k}"{rng.choice(ws)}:{rng.choice(ws)}{v}' for k, v in fields) + "}"

    text = "[" + ",".join(rng.choice(ws) + event() for _ in range(rng.randint(1, 4))) + rng.choice(ws) + "]"
    if rng.random() < 0.05:
        text = text[:rng.randrange(len(text))]
    return text.encode("utf-8", "surrogateescape")  # ("\udcff": a raw byte 0xff)


@built
def test_generated_events_are_read_exactly_or_declined():
    rng = random.Random(36)
    took = sum(check(_generated_chunk(rng)) for _ in range(int(os.environ.get("FASTSCAN_FUZZ_N", "4000"))))
    assert took > 150, took  # (the rest declined: each chunk holds a few chances of an odd value)
