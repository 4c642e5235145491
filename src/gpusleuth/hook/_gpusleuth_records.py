"""The record formats and clocks of gpusleuth's in-process recorder: pure helpers with no state.

Every event line the hook writes is formatted here, one function per kind (``S`` steps, ``B``/``P`` phases,
``G`` device time, ``C`` collectives, ``R`` requests, ``F`` forwards outside a request, ``L`` logs, ``I``
facts, ``H`` the header, ``X`` the exit mark): the reader (``sources/events.py``, docs/run-format.md) has one
place to match, and a test keeps line literals out of every other hook module.

The bottom of the hook's import graph: every other hook module may import it, it imports none of them.
Same rules as every hook module: standard library only, Python 3.8+ syntax, never raise into the user's
program.
"""
import threading
import time

_now = time.time_ns
try:
    _cpu = time.thread_time_ns
    _cpu()
except (AttributeError, OSError):  # platforms without a per-thread clock: process CPU is the next best
    _cpu = time.process_time_ns
_tid = threading.get_ident


def _clean(name):
    return str(name).replace("\t", " ").replace("\n", " ").replace("\r", " ")


def _batch_size(batch, depth=0):
    """Samples in a fetched batch: a tensor's (or array's) first dimension, else the first one found
    inside a tuple/list/dict; -1 when nothing says."""
    shape = getattr(batch, "shape", None)
    if shape is not None:
        try:
            return int(shape[0]) if len(shape) else -1
        except (TypeError, ValueError, IndexError):
            return -1
    if depth < 3:
        if isinstance(batch, (tuple, list)):
            items = batch
        elif isinstance(batch, dict) or hasattr(batch, "values"):
            try:
                items = list(batch.values())
            except Exception:
                return -1
        else:
            return -1
        for item in items:
            n = _batch_size(item, depth + 1)
            if n >= 0:
                return n
    return -1


def _jsonable(obj):
    """``json.dumps`` fallback for log values: tensors and numpy scalars become numbers or lists."""
    try:
        numel = getattr(obj, "numel", None) or getattr(obj, "size", None)
        if callable(numel) and numel() == 1 and hasattr(obj, "item"):
            return obj.item()
        if hasattr(obj, "tolist"):
            return obj.tolist()
        if hasattr(obj, "item"):
            return obj.item()
    except Exception:
        pass
    return str(obj)


# The running step's counters live in one list so that closing a step costs one allocation; the
# hot paths (a fetch, an optimizer step) index it with these constants.
WAIT, CPU, SAMPLES, UNKNOWN, SET, OPT, FETCHES, GAP, FSAMPLES, FTOKENS, FNEW = range(11)


def _counters():
    """[data wait ns, data CPU ns, samples read from batches, a batch size was unknown,
    samples the program told us (None if it did not), optimizer ns, fetches,
    ns from the step's start to its first forward (-1: no forward seen), the first forward's input:
    samples (-1 unknown), tokens (-1 unless a 2-D integer tensor), 1 if that input is a new tensor and 0
    if it is the previous step's own (-1 unknown)]"""
    return [0, 0, 0, False, None, 0, 0, -1, -1, -1, -1]


def _add_counts(c, old):
    """Add counters ``old`` of a record into ``c``: the waits, samples, optimizer time and fetches (what
    accumulates over a step's parts; the first forward's fields are the caller's to choose)."""
    for i in (WAIT, CPU, SAMPLES, OPT, FETCHES):
        c[i] += old[i]
    c[UNKNOWN] = c[UNKNOWN] or old[UNKNOWN]
    if old[SET] is not None:
        c[SET] = old[SET] + (c[SET] or 0)


def _input_shape(args, seq_first=False):
    """(samples, tokens) of a forward's first tensor argument: its batch dimension — the first, or the
    second for a model whose recurrent layers take ``[seq, batch, …]`` (``seq_first``: PyTorch's RNN/LSTM/GRU
    default, word_language_model's layout) — and rows × columns when it is a 2-D integer tensor (token
    ids); -1 where the input does not say."""
    for a in args[:3]:
        shape = getattr(a, "shape", None)
        if shape is None:
            continue
        try:
            if not len(shape):
                return -1, -1
            n = int(shape[1]) if seq_first and len(shape) >= 2 else int(shape[0])
            dt = getattr(a, "dtype", None)
            tokens = int(shape[0]) * int(shape[1]) if len(shape) == 2 and dt is not None \
                and not dt.is_floating_point and not dt.is_complex else -1
            return n, tokens
        except (TypeError, ValueError, AttributeError):
            return -1, -1
    return -1, -1


def _step_line(rec):
    """Format an S record. Done at flush time, in a batch, not on the step's hot path."""
    start, end, c = rec[0], rec[1], rec[2]
    if c[SET] is not None:
        samples = c[SET]
    elif c[UNKNOWN] or not c[FETCHES]:
        samples = -1
    else:
        samples = c[SAMPLES]
    return "S\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\n" % (
        start, end, c[WAIT], c[CPU], samples, c[OPT], c[FETCHES], rec[3], c[GAP], c[FSAMPLES], c[FTOKENS],
        c[FNEW])


def phase_begin_line(name, t, source):
    return "B\t%s\t%d\t%s\n" % (name, t, source)


def phase_line(name, start, end, source):
    return "P\t%s\t%d\t%d\t%s\n" % (name, start, end, source)


def device_time_line(step, ns):
    return "G\t%d\t%d\n" % (step, ns)


def collective_line(t0, end_ns, name, nbytes, group, seq, device_ns):
    return "C\t%d\t%d\t%s\t%d\t%s\t%d\t%d\n" % (t0, end_ns, name, nbytes, _clean(group), seq, device_ns)


def request_line(start, end, queue, pre, infer, post, status, kind, n, batch, stages, handoff, claimed,
                 delivered, rid, f1, received, gets, key):
    return "R\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%s\n" % (
        start, end, queue, pre, infer, post, status, kind, n, batch, stages, handoff, claimed, delivered, rid, f1,
        received, gets, key)


def forward_line(t0, t, rows, tokens, tid, keys):
    return "F\t%d\t%d\t%d\t%d\t%d\t%s\n" % (t0, t, rows, tokens, tid, keys)


def log_line(t, text):
    return "L\t%d\t%s\n" % (t, text)


def fact_line(t, text):
    return "I\t%d\t%s\n" % (t, text)


def header_line(text):
    return "H\t%s\n" % text


def exit_line(t):
    return "X\t%d\n" % t


def _parse_range(text):
    """``"A-B"`` (or ``"A"``) → (A, B), 0-based inclusive step indices; None if absent or malformed."""
    if not text:
        return None
    try:
        a, _, b = text.strip().partition("-")
        lo = int(a)
        hi = int(b) if b else lo
        if lo < 0 or hi < lo:
            return None
        return lo, hi
    except ValueError:
        return None
