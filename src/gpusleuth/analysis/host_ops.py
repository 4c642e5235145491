"""Host-side op statistics from a profiler trace: how much of each step the CPU spends in framework ops,
in tiny ops, and in plain Python between ops.

Why a separate analysis: the device partition (``analysis/trace``) says *that* the device waited on the
host; on a CPU-only trace there is no device at all, and the question becomes whether the step is real
math or interpreter overhead. Three numbers answer it and feed the ``host.python`` rule:

- **op coverage**: share of step time inside at least one ATen op (``cpu_op``) on the step's thread;
- **python share**: the rest — the interpreter running user code between ops;
- **tiny-op share**: share of step time in *top-level* ops shorter than ``TINY_OP_NS`` (dispatch-dominated:
  on a CPU a 64-element add costs ~5 µs of which the arithmetic is nanoseconds), and in autograd nodes
  shorter than ``TINY_BACKWARD_NS`` (the backward mirror of such ops) — evidence, not the gain;
- **removable share** (what the ``host.python`` finding prices): what vectorizing a Python loop can take out
  of the step — the calls a loop issues (``loop_iterations``: one body of ops run ≥ ``REPEAT`` times back
  to back in one step, a loop over rows or elements), each counted whole when the op's median call is
  dispatch-sized (< ``TINY_OP_NS``, ``TINY_BACKWARD_NS`` for autograd nodes) and only up to that dispatch
  cost otherwise (a looped call that does real work keeps its work once vectorized), plus the interpreter
  time right before each such call (the loop body's Python). Ops issued a few times (each layer of a model,
  the optimizer's, a framework's per-step hooks and logging) are not a loop: vectorizing cannot issue them
  less often. Counting every op issued 16+ times as overhead whatever its duration made a stock ResNet-18's
  20 convolutions (67 ms each) "96 % inside tiny ops", and the gaps around a framework's hooks "removable";
  counting every op issued 16+ times as a loop's made nanoGPT's 2 blocks × 2 micro-batches "411 looped
  calls, 26 % of the step, HIGH", and a 24-layer stack of small Linear+ReLU blocks "80 %, HIGH"; a
  forward-only stack (inference) is told from a loop by the ops' recorded arguments (``_layer_stack``:
  Qwen1.5-0.5B's 24 decoder layers read 1,352 looped calls, 50 % of the step, before).

Top-level = not nested inside another op of the same thread (``aten::linear`` counts, its ``aten::addmm``
child does not), so counts mean "ops the Python code issued".

Only the user's own step counts: time inside a DataLoader fetch (torch's ``enumerate(DataLoader)#…``
annotation: the loader's per-sample indexing and collate are its ops, not the training code's, and input
time is the input rules' business) and inside collectives (a rank waiting in an all-reduce is not running
Python) is taken out of the step, with the ops in it, before any share is computed. So is the input wait the
hook measured in a loop without a DataLoader (``input_spans``: a nanoGPT ``get_batch`` or a Python generator
building the batch between one step's end and the next forward): that Python is input, priced by the input
rules; counted here it made a generator-fed LM's tokenizer "480 tiny ops per step, Python overhead ×1.94".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from gpusleuth.analysis import intervals as iv
from gpusleuth.analysis.trace.kernels import median_by_group
from gpusleuth.run.model import Run
from gpusleuth.sources.kineto.model import CPU_OP, USER_ANN

TINY_OP_NS = 20_000
#: autograd nodes run one per forward op; a backward node this short is the mirror of a tiny forward op
#: (``SelectBackward0`` of a per-row loop), so it counts as overhead too.
TINY_BACKWARD_NS = 100_000
#: the same sequence of top-level ops issued this many times back to back in one step is a Python loop over
#: elements/rows (its per-call cost is overhead however long each call is on a slow or busy CPU)
REPEAT = 16
#: the longest loop body (top-level ops per iteration) looked for: bounds the search to n × this per step
MAX_BODY = 512
#: a call this many times longer than its op's median call (at least 1 µs) was descheduled, not working
DESCHEDULED = 10


#: user annotations whose time is not the training code's own (DataLoader fetches)
EXCLUDED_ANNOTATIONS = ("enumerate(DataLoader)",)
#: op names of collectives: time in them is waiting on other ranks, not Python
COLLECTIVE_MARKS = ("allreduce", "all_reduce", "allgather", "all_gather", "reduce_scatter", "reducescatter",
                    "broadcast", "barrier", "all_to_all", "alltoall", "record_param_comms", "nccl:", "gloo:",
                    "c10d::")


#: user annotations a framework opens around its own per-parameter or per-module work (FSDP2's all-gather
#: copy-in/out and resharding, an optimizer's step over every parameter): the ops in them repeat because the
#: framework loops, not the training code, so "vectorize your loop" cannot remove them. They stay in the step
#: (real time) but are never the looped, removable part. FSDP2's example on CPU issued 1,989 such calls a step
#: and read "HIGH host.python, 27 % removable" on some runs.
FRAMEWORK_SCOPES = ("FSDP::", "Optimizer.step#", "Optimizer.zero_grad#", "DistributedDataParallel.")
#: profiler events a call goes through when a Python tensor subclass or dispatch mode handles it (DTensor,
#: FSDP2's sharded parameters): such calls follow the framework's per-parameter and per-shard dispatch, so
#: their count is the model's structure, not a loop in the training code. In that FSDP2 example 1,817 of the
#: 1,975 repeated calls a step (Adam's per-parameter update on DTensors among them) were of this kind.
SUBCLASS_DISPATCH = ("PythonSubclass", "PythonDispatchMode")


#: cells of the (body length × call) equality matrix :func:`_periodic_runs` holds at once (bounds its memory)
_PERIODIC_CELLS = 1 << 21


def _periodic_runs(codes: np.ndarray, repeat: int, max_body: int) -> list[tuple[int, int, int]]:
    """(start, stop, body length) of each stretch of ``codes`` where one sequence of ``body`` calls runs
    ``repeat`` or more times back to back, at its shortest body (a body of 8 repeated 64 times also
    repeats as 16 × 32: that stretch is reported once).

    Every body length is compared at once, a block of lengths per numpy pass (``codes[j] == codes[j + p]``
    for each ``p`` of the block, one row each): a Python step per body length and per stretch of equal
    calls cost 1.2 ms a step on a trace of 800 top-level ops a step; only the stretches long enough to be a
    loop reach Python, in the same order (shortest body first, then by start)."""
    n = len(codes)
    seen = np.zeros(n, bool)
    runs: list[tuple[int, int, int]] = []
    top = min(n // repeat, max_body)
    if top < 1:
        return runs
    codes = np.asarray(codes)
    # shifted[p]: codes[p:p + n] (a view), its last p entries past the end (masked off below)
    shifted = np.lib.stride_tricks.sliding_window_view(np.concatenate([codes, codes[:top]]), n)
    cols = np.arange(n)
    block = max(1, _PERIODIC_CELLS // n)
    for p0 in range(1, top + 1, block):
        ps = np.arange(p0, min(p0 + block, top + 1))
        # same[i, 1 + j]: codes[j] == codes[j + ps[i]]; False where j + ps[i] runs off the end, and at both
        # ends of each row, so that every stretch of True has a rising and a falling edge in its row
        same = np.zeros((len(ps), n + 2), bool)
        np.equal(shifted[ps[0]:ps[-1] + 1], codes, out=same[:, 1:n + 1])
        same[:, 1:n + 1] &= cols < (n - ps)[:, None]
        row, edge = np.nonzero(same[:, 1:] != same[:, :-1])  # row-major: by body length, then by position
        a, b, p = edge[0::2], edge[1::2], ps[row[0::2]]  # codes[j] == codes[j + p] for j in [a, b)
        for k in np.flatnonzero(b - a >= (repeat - 1) * p):
            ak, bk, pk = int(a[k]), int(b[k]), int(p[k])
            if not seen[ak:bk + pk].all():
                runs.append((ak, bk + pk, pk))
                seen[ak:bk + pk] = True
    return runs


def _tensor_sizes(call: tuple[str, str] | tuple[()]) -> frozenset[int]:
    """The sizes of every dimension of every tensor argument in one recorded call signature
    (``(Input Dims, Concrete Inputs)`` as JSON text; a ``cat``'s tensor list counts too)."""
    out: set[int] = set()

    def walk(v: object) -> None:
        if isinstance(v, list):
            if v and all(type(x) is int for x in v):
                out.update(v)
            else:
                for x in v:
                    walk(x)
    if call:
        try:
            walk(json.loads(call[0]))
        except ValueError:  # a damaged signature: no sizes
            pass
    return frozenset(out)


class _Sizes(dict[int, frozenset[int]]):
    """Signature code → its tensor sizes, parsed on first use (a step's repeated stretches look at a few
    of a trace's thousands of distinct signatures)."""

    def __init__(self, calls: list[tuple[str, str] | tuple[()]]) -> None:
        super().__init__()
        self.calls = calls

    def __missing__(self, code: int) -> frozenset[int]:
        v = self[code] = _tensor_sizes(self.calls[code])
        return v


def _layer_stack(a: int, b: int, p: int, calls: np.ndarray | None,
                 sizes: Mapping[int, frozenset[int]] | None) -> bool:
    """A forward-only stretch (calls ``a``..``b``, a body of ``p``) whose iterations are a model's layers:
    every iteration makes the same calls with the same argument shapes and scalar values (each layer runs
    the whole batch through the same computation with its own weights), and its iteration count is no size
    of the tensors the iteration before it was handed. A loop over rows or items leaves the loop variable
    in the trace: an index that walks (``o[i]`` is a ``select`` whose index is ``i``, ``x[i:i + 1]`` a
    ``slice`` whose bounds are), or — iterating a tensor (``for row in o``, one ``unbind``) — as many
    iterations as the tensor's rows. Without recorded arguments (``record_shapes`` off) there is no
    evidence either way: a loop it stays."""
    if calls is None or sizes is None:
        return False
    n = (b - a) // p
    body = calls[a:a + n * p].reshape(n, p)
    if not any(sizes[int(c)] for c in body[0]):  # no shapes recorded
        return False
    if not (body == body[0]).all():  # the loop variable reaches an op
        return False
    return not any(n in sizes[int(c)] for c in calls[max(a - p, 0):a])  # a tensor's rows, one an iteration


def loop_iterations(codes: np.ndarray, backward: np.ndarray, accumulate: np.ndarray, repeat: int = REPEAT,
                    max_body: int = MAX_BODY, calls: np.ndarray | None = None,
                    sizes: Mapping[int, frozenset[int]] | None = None) -> np.ndarray:
    """Per call of ``codes`` (one step's top-level op names, in time order): issued by a Python loop that
    vectorizing removes — inside a stretch where one sequence of ops (the loop body) runs ``repeat`` or more
    times back to back, the calls a loop issues from the same lines iteration after iteration, unless the
    iterations are the model's own structure. ``backward``/``accumulate``: per call, an autograd node / a
    gradient accumulated into a leaf (``AccumulateGrad``).

    Counting each op's calls in the step read a model's structure as a loop: nanoGPT with two blocks and
    gradient accumulation ×2 issues ``aten::linear`` 18 times a step and ``aten::transpose`` 16, at four
    places a block, in 2 blocks × 2 micro-batches — never one body 16 times over. Two structures do run
    back to back, and the trace tells them apart from a loop over rows:

    - a body holding forward ops and backward nodes is a whole training pass per iteration: gradient
      accumulation's micro-batches, however many;
    - a backward body that accumulates gradients into leaves owns parameters: each iteration is a distinct
      layer (a loop over rows sends every row's gradient into the same parameters, which autograd
      accumulates once a backward). Forward stretches of no more iterations than the deepest such stack
      (one more: a stack's first or last layer can fall outside the aligned stretch) are its forward;
    - a forward-only stretch (inference, or under ``torch.no_grad``) whose iterations are the same calls with
      the same arguments, the loop variable nowhere (``_layer_stack``): Qwen1.5-0.5B's inference step on an
      H100 runs one 56-call body 24 times over activations of [16, 559, 1024] every time (1,352 calls counted
      as looped before); a per-row loop over 64 rows selects row 0, 1, … 63 (``select``'s index walks) or
      unbinds a 64-row tensor right before its 64 iterations.

    ``calls``: per call, its code into ``sizes`` — a recorded argument signature's tensor sizes (empty where
    none was recorded); the codes are equal where the signatures (shapes and scalar values) are."""
    out = np.zeros(len(codes), bool)
    runs = _periodic_runs(codes, repeat, max_body)
    layers = [(b - a) // p for a, b, p in runs if backward[a:a + p].all() and accumulate[a:a + p].any()]
    deepest = max(layers, default=0)
    for a, b, p in runs:
        body = backward[a:a + p]
        if body.any() and not body.all():  # forward and backward each iteration: a micro-batch
            continue
        if accumulate[a:a + p].any():  # each iteration's own parameters: layers
            continue
        if not body.any() and (b - a) // p <= deepest + 1:  # the forward of those layers
            continue
        if not body.any() and _layer_stack(a, b, p, calls, sizes):  # forward-only layers (inference)
            continue
        out[a:b] = True
    return out


def _framework_name_mask(names: list[str]) -> np.ndarray:
    m = np.zeros(len(names) + 1, bool)
    for i, n in enumerate(names):
        if n.startswith(FRAMEWORK_SCOPES):
            m[i] = True
    return m


def _inside(ts: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per time in ``ts``: inside any of the windows [starts, ends)."""
    out = np.zeros(len(ts), bool)
    for a, b in zip(starts, ends):
        out |= (ts >= a) & (ts < b)
    return out


class _RowsByStart:
    """Some rows of a trace (ascending row numbers), indexed by start time for the per-step queries of
    :func:`host_op_stats`: a step looks only at the rows that can reach into it (a binary search), not at
    every row of the trace once per step. Each query returns exactly what a mask over all the rows would,
    in the same (row) order."""

    def __init__(self, rows: np.ndarray, ts: np.ndarray, end: np.ndarray, tid: np.ndarray) -> None:
        self.rows = rows
        s = ts[rows]
        # the trace's rows are sorted by time (TraceData), so this order is almost always the identity
        self.order = None if (s[1:] >= s[:-1]).all() else np.argsort(s, kind="stable")
        o = self.order
        self.ts = s if o is None else s[o]
        self.end = end[rows] if o is None else end[rows][o]
        self.tid = tid[rows] if o is None else tid[rows][o]
        # a row that ends after ``lo`` started after ``lo - longest``
        self.longest = int((self.end - self.ts).max()) if len(rows) else 0

    def _rows(self, at: np.ndarray) -> np.ndarray:
        """The rows at positions ``at`` (ascending) of the time order, in row order."""
        out: np.ndarray = self.rows[at] if self.order is None else self.rows[np.sort(self.order[at])]
        return out

    def starting(self, lo: int, hi: int, tid: int) -> np.ndarray:
        """Rows of thread ``tid`` starting in [lo, hi)."""
        i0, i1 = np.searchsorted(self.ts, [lo, hi], side="left")
        return self._rows(i0 + np.flatnonzero(self.tid[i0:i1] == tid))

    def overlapping(self, lo: int, hi: int, tid: int) -> np.ndarray:
        """Rows of thread ``tid`` that end after ``lo`` and start before ``hi``."""
        i0 = int(np.searchsorted(self.ts, lo - self.longest, side="right"))
        i1 = int(np.searchsorted(self.ts, hi, side="left"))
        hit = (self.end[i0:i1] > lo) & (self.tid[i0:i1] == tid)
        return self._rows(i0 + np.flatnonzero(hit))


def _excluded_name_mask(names: list[str]) -> np.ndarray:
    """Per name code: True for DataLoader fetch annotations and collectives (one slot more for -1 codes)."""
    m = np.zeros(len(names) + 1, bool)
    for i, n in enumerate(names):
        low = n.lower()
        if n.startswith(EXCLUDED_ANNOTATIONS) or any(k in low for k in COLLECTIVE_MARKS):
            m[i] = True
    return m


@dataclass(frozen=True)
class HostOps:
    """What one trace's training thread did on the host in its profiled steps: the top-level ops it issued,
    how many came from a Python loop, and the share of step time rewriting that loop removes."""

    label: str  # the trace's
    steps: int
    step_time_median_s: float
    ops_per_step: float
    tiny_ops_per_step: float
    median_op_us: float
    op_share: float  # of step time, inside top-level ops
    python_share: float  # between them
    tiny_op_share: float  # inside ops shorter than tiny_op_threshold_us
    repeat: int  # a body of ops issued this many times back to back in a step is a loop's
    looped_ops_per_step: float
    loop_python_share: float
    loop_op_share: float
    # the looped calls' dispatch and the Python before each, of the step less the time the host took from it
    # (descheduled calls): as on a quiet host
    removable_share: float
    tiny_op_threshold_us: float
    excluded_s_per_step: float  # DataLoader fetches, input waits, collectives: not the training code's
    # the looped body runs a recurrent cell (LSTMCell, GRUCell, RNNCell: ``aten::lstm_cell``…): a recurrence over
    # time steps, each iteration taking the state the one before made — no batched op can replace the loop
    recurrent: bool = False
    # every step with looped calls is forward-only (no autograd node) and the trace recorded no op arguments
    # (record_shapes off): its repetition may be the model's layers — nothing in the trace tells (inference
    # profiled by gpusleuth's own --profile-steps, which records no shapes)
    forward_only_unproven: bool = False
    trace: int | None = None  # its trace's place in RunAnalysis.traces (labels repeat across single-rank jobs)


# the ops of torch's recurrent cells (nn.LSTMCell, GRUCell, RNNCell and their fused kernels): a loop that calls
# one each iteration carries a state from iteration to iteration
RECURRENT_CELL_OPS = frozenset(("aten::lstm_cell", "aten::gru_cell", "aten::rnn_tanh_cell", "aten::rnn_relu_cell",
                                "aten::_thnn_fused_lstm_cell", "aten::_thnn_fused_gru_cell"))


def host_op_stats(run: Run, input_spans: tuple[np.ndarray, np.ndarray] | None = None) -> HostOps | None:
    """Per-trace host op statistics over its ProfilerStep windows; None without steps or ops.
    ``input_spans``: (starts, ends), absolute epoch ns, of the measured input waits of the traced process's
    steps (the pre-forward gaps of a loop without a DataLoader); taken out like a DataLoader fetch."""
    tr = getattr(run, "trace", None)
    if tr is None or not len(tr.events):
        return None
    ev = tr.events
    kind = ev["kind"]
    names = tr.names
    is_step = np.zeros(len(names) + 1, bool)
    is_step[[i for i, n in enumerate(names) if n.startswith("ProfilerStep#")]] = True
    step_rows = np.flatnonzero((kind == USER_ANN) & is_step[ev["name"]])
    if not len(step_rows):
        return None
    ops = np.flatnonzero(kind == CPU_OP)
    if not len(ops):
        return None
    ts_all = ev["ts"]
    end_all = ts_all + np.maximum(ev["dur"], 0)
    # top-level ops per thread: an op starting after every earlier op of its thread has ended
    top = np.zeros(len(ops), bool)
    tids = ev["tid"][ops]
    for t in np.unique(tids):
        m = np.flatnonzero(tids == t)
        s = ts_all[ops[m]]
        e = end_all[ops[m]]
        o = np.argsort(s, kind="stable")
        cm = np.maximum.accumulate(e[o])
        first = np.r_[True, s[o][1:] >= cm[:-1]]
        top[m[o[first]]] = True
    top_rows = ops[top]
    excl_name = _excluded_name_mask(names)
    excl_rows = np.flatnonzero(((kind == USER_ANN) | (kind == CPU_OP)) & excl_name[ev["name"]])
    fw_rows = np.flatnonzero((kind == USER_ANN) & _framework_name_mask(names)[ev["name"]])
    is_sub = np.zeros(len(names) + 1, bool)
    is_sub[[i for i, n in enumerate(names) if n in SUBCLASS_DISPATCH]] = True
    sub_rows = ops[is_sub[ev["name"][ops]]]
    excl_ns_total = 0
    is_bwd = np.zeros(len(names) + 1, bool)
    is_bwd[[i for i, n in enumerate(names) if n.startswith("autograd::engine::evaluate_function")]] = True
    is_cell = np.zeros(len(names) + 1, bool)
    is_cell[[i for i, n in enumerate(names) if n in RECURRENT_CELL_OPS]] = True
    is_acc = np.zeros(len(names) + 1, bool)
    is_acc[[i for i, n in enumerate(names) if n.startswith("autograd::engine::evaluate_function")
            and n.endswith("AccumulateGrad")]] = True
    # each op's recorded argument shapes (record_shapes): the sizes of its tensors, per distinct signature
    call_codes = ev["icall"] if "icall" in ev and len(tr.input_calls) > 1 else None
    call_sizes = _Sizes(tr.input_calls) if call_codes is not None else None
    in_s = in_e = np.empty(0, np.int64)
    if input_spans is not None and len(input_spans[0]):
        in_s = np.asarray(input_spans[0], np.int64) - int(tr.origin_ns)
        in_e = np.asarray(input_spans[1], np.int64) - int(tr.origin_ns)
    tid_all = ev["tid"]
    top_by, excl_by, fw_by = (_RowsByStart(r, ts_all, end_all, tid_all) for r in (top_rows, excl_rows, fw_rows))
    sub_by_tid: dict[int, np.ndarray] = {}
    steps: list[dict[str, float]] = []  # per step: its nanoseconds and op counts
    for r in step_rows:
        lo, hi = int(ts_all[r]), int(end_all[r])
        dur = hi - lo
        if dur <= 0:
            continue
        tid = int(tid_all[r])
        sel = top_by.starting(lo, hi, tid)
        xr = excl_by.overlapping(lo, hi, tid)
        xi = (in_e > lo) & (in_s < hi)
        xs = xe = np.empty(0, np.int64)
        if len(xr) or xi.any():  # not the user's code: the loader's fetch, the input wait, a collective's wait
            xs = np.clip(np.r_[ts_all[xr], in_s[xi]], lo, hi)
            xe = np.clip(np.r_[end_all[xr], in_e[xi]], lo, hi)
            excl = iv.union_length(xs, xe)
            sel = sel[~_inside(ts_all[sel], xs, xe)]
            dur -= excl
            excl_ns_total += excl
            if dur <= 0:
                continue
        sel = sel[np.argsort(ts_all[sel], kind="stable")]
        s = np.clip(ts_all[sel], lo, hi)
        e = np.clip(end_all[sel], lo, hi)
        covered = iv.union_length(s, e)
        d = e - s
        codes = ev["name"][sel]
        uniq, inv, cnt = np.unique(codes, return_inverse=True, return_counts=True)
        bwd = is_bwd[codes]
        tiny_m = (d < TINY_OP_NS) | (bwd & (d < TINY_BACKWARD_NS))
        fr = fw_by.overlapping(lo, hi, tid)
        framework = _inside(ts_all[sel], ts_all[fr], end_all[fr])
        if tid not in sub_by_tid:
            sub_by_tid[tid] = np.sort(ts_all[sub_rows[tid_all[sub_rows] == tid]])
        sub_ts = sub_by_tid[tid]
        if len(sub_ts):  # a call with a subclass-dispatch event inside it was dispatched by the framework
            framework |= np.searchsorted(sub_ts, ts_all[sel], side="left") < np.searchsorted(
                sub_ts, end_all[sel], side="left")
        # the same ops issued again and again, back to back, by the training code (a framework's own loops
        # not counted): a Python loop over elements
        looped = loop_iterations(codes, bwd, is_acc[codes], calls=call_codes[sel] if call_codes is not None
                                 else None, sizes=call_sizes) & ~framework
        # what vectorizing the loop removes from each looped call: its dispatch, not its work. An op whose
        # median call is dispatch-sized is all overhead; an op whose calls do real work (a convolution issued
        # once per layer) keeps it, less the dispatch of each call.
        cap = np.where(bwd, TINY_BACKWARD_NS, TINY_OP_NS)
        med = median_by_group(inv, d, len(uniq)) if len(uniq) else np.empty(0)
        typical = med[inv] if len(d) else np.zeros(0)
        # a call far longer than its op's typical call was descheduled (a busy host): the scheduler's time
        # is neither the loop's nor the model's, so it leaves the removable time and the step alike
        # (counted whole, one 15 ms preemption of a 2 µs call made a ResNet-18's SGD loop 11 % of its step)
        stolen_op = np.maximum(d - DESCHEDULED * np.maximum(typical, 1_000), 0)
        d_own = d - stolen_op
        loop_ops_ns = int(np.where(typical < cap, d_own, np.minimum(d_own, cap))[looped].sum())
        # the interpreter time right before each looped call: the loop body's Python (the previous top-level
        # op's end, or the end of an excluded window, or the step's start, bounds it)
        ends = np.sort(np.r_[lo, e, xe])
        prev = ends[np.maximum(np.searchsorted(ends, s, side="right") - 1, 0)]
        gap = np.maximum(s - prev, 0)
        # the same for the Python before each call, against the typical gap before that op
        typical_gap = (median_by_group(inv, gap, len(uniq))[inv] if len(gap)
                       else np.zeros(0))
        stolen_gap = np.maximum(gap - DESCHEDULED * np.maximum(typical_gap, 1_000), 0)
        loop_python_ns = int((gap - stolen_gap)[looped].sum())
        stolen = int(stolen_op.sum() + stolen_gap.sum())
        steps.append({
            "duration_ns": dur,
            "ops": int(len(sel)),
            "covered_ns": covered,
            "tiny_ns": int(d[tiny_m].sum()),
            "tiny_ops": int(tiny_m.sum()),
            "looped_ops": int(looped.sum()),
            "recurrent": bool((looped & is_cell[codes]).any()),
            "unproven": call_codes is None and not bwd.any(),
            "loop_ops_ns": loop_ops_ns,
            "loop_python_ns": min(loop_python_ns, dur - covered),
            "stolen_ns": min(stolen, dur // 2),
            "median_op_ns": float(np.median(d)) if len(d) else 0.0,
        })
    if not steps:
        return None
    total = sum(s["duration_ns"] for s in steps)
    covered_ns = sum(s["covered_ns"] for s in steps)
    tiny = sum(s["tiny_ns"] for s in steps)
    ops_n = sum(s["ops"] for s in steps)
    return HostOps(
        label=run.label,
        steps=len(steps),
        step_time_median_s=float(np.median([s["duration_ns"] for s in steps])) / 1e9,
        ops_per_step=ops_n / len(steps),
        tiny_ops_per_step=sum(s["tiny_ops"] for s in steps) / len(steps),
        median_op_us=float(np.median([s["median_op_ns"] for s in steps])) / 1e3,
        op_share=covered_ns / total,
        python_share=1.0 - covered_ns / total,
        tiny_op_share=tiny / total,
        repeat=REPEAT,
        looped_ops_per_step=sum(s["looped_ops"] for s in steps) / len(steps),
        loop_python_share=sum(s["loop_python_ns"] for s in steps) / total,
        loop_op_share=sum(s["loop_ops_ns"] for s in steps) / total,
        removable_share=sum(s["loop_python_ns"] + s["loop_ops_ns"] for s in steps)
        / max(total - sum(s["stolen_ns"] for s in steps), 1),
        tiny_op_threshold_us=TINY_OP_NS / 1e3,
        excluded_s_per_step=excl_ns_total / 1e9 / len(steps),
        recurrent=any(s["recurrent"] for s in steps),
        forward_only_unproven=any(s["looped_ops"] for s in steps) and all(
            s["unproven"] for s in steps if s["looped_ops"]),
    )
