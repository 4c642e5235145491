"""A server's requests inside the hook: open one (``begin``), close it (``end``: its ``R`` line), time the model's
forwards inside it, and the named stages of ``gpusleuth.stage`` (issue 16; docs/serving.md, "Per-request stages").

Same rules as every hook module: standard library only, Python 3.8+ syntax, never raise into the user's
program. The server patches (``_gpusleuth_serve``) call ``begin`` where a server starts a request and ``end``
where its response is done; the queue hand-off (``_gpusleuth_handoff``) marks the open request's put, take
and answer.

The open request lives in a context variable, so threads and asyncio tasks (and the worker threads
``run_in_threadpool`` copies the context into) each see only their own. While at least one request is
open, ``nn.Module.__call__`` is wrapped to time the outermost module calls inside it: several forwards in
one request add up, CUDA events give their device time once CUDA is in use, forwards outside any request
are not counted, and the original ``__call__`` is put back once no request has been open for 2 s — a
training job's modules are untouched.

Each finished request is one ``R`` line (docs/run-format.md). With no forward in a request (a health
check), ``pre`` and ``post`` are -1: there is no model call to split it at.
"""
import contextvars
import functools
import json
import sys
import threading
import time

import _gpusleuth_state as _state
from _gpusleuth_records import _clean, _input_shape
from _gpusleuth_writer import FLUSH_NS
from _gpusleuth_records import forward_line, request_line  # the event-line formats

_now = time.time_ns
_REQ = contextvars.ContextVar("_gpusleuth_request", default=None)
_LOCK = threading.Lock()
_ACTIVE = [0, None, 0]  # open requests, (Module, its __call__, ours) while wrapped, last request's end
IDLE_UNWRAP_NS = 2000000000
_ACCEPTED = {}  # id(accepted socket) -> accept time, until its handler starts
MAX_STAGES = 32
STAGE_NAME_MAX = 64
_FLUSHER = [None]
_OUTSIDE = threading.local()  # t0 of the outermost forward running outside any request on this thread
_OPEN = set()  # the open requests, for the ones the process's exit interrupts (at_exit)
_tid = threading.get_ident


class Req(object):
    __slots__ = ("kind", "start", "queue", "status", "first", "infer", "n", "batch", "fmod", "ft0",
                 "ev", "evs", "stages", "done", "returned", "token", "fend", "wrote", "handoff", "claimed",
                 "delivered", "closed", "rid", "f1", "received", "gets", "key")

    def __init__(self, kind, start, queue):
        self.kind = kind
        self.start = start
        self.queue = queue
        self.status = -1
        self.first = -1  # start of the first forward
        self.infer = 0  # wall ns in outermost forwards
        self.n = 0  # outermost forwards
        self.batch = -1  # rows of the first forward's first tensor
        self.fmod = None  # the outermost module whose call is running now
        self.ft0 = 0
        self.ev = None
        self.evs = None  # [(start event, end event, wall ns)] on CUDA
        self.stages = None
        self.done = -1  # the response was complete (ASGI: last body message sent)
        self.returned = False  # WSGI: the app returned its iterable (iteration and close still to come)
        self.token = None
        self.fend = -1  # end of the last forward
        self.wrote = -1  # http.server: the last write of the response to the client's socket
        self.handoff = -1  # the request put its work on a queue (a batcher's): first put
        self.claimed = -1  # a consumer outside any request (the batcher) took that work off the queue
        self.delivered = -1  # a future handed over with the work was resolved (the batch's answer)
        self.closed = False
        self.rid = "-1"  # the client's X-Request-Id, as text ("-1": none)
        self.f1 = -1  # wall ns of the first forward (a generation's prefill)
        self.received = -1  # the request's last get from a queue (a streaming handler's last token)
        self.gets = 0  # its gets from queues after the hand-off (a stream: one per token, maybe an end marker)
        self.key = ""  # what its work is followed by into another process or a framework's batch (_gpusleuth_follow)


# ------------------------------------------------------------------------------------------- requests
def begin(kind, queue=-1):
    """Open a request in this thread/task; None when one is open already (a framework inside a server
    we also patch: the outer one counts) or when the hook is not recording."""
    r = _state.R
    if r is None or r.worker:
        return None
    try:
        if _REQ.get() is not None:
            return None
        req = Req(kind, _now(), queue)
        req.token = _REQ.set(req)
        _OPEN.add(req)
        _arm()
        return req
    except BaseException as exc:
        _error("request_begin", exc)
        return None


def end(req, t=None):
    """Close ``req`` (``t``: when its response was done, else now) and queue its ``R`` line."""
    try:
        if req.closed:  # already finished by at_exit
            return
        req.closed = True  # a task started inside the request (a lazily started batcher) keeps its context
        _OPEN.discard(req)
        try:
            _REQ.reset(req.token)
        except ValueError:  # closed from another context (an iterable closed elsewhere)
            if _REQ.get() is req:
                _REQ.set(None)
        _disarm()
        _finish(req, t if t is not None and t > 0 else _now())
    except BaseException as exc:
        _error("request_end", exc)


def _finish(req, t):
    r = _state.R
    if r is None:
        return
    total = max(t - req.start, 0)
    if req.n:
        infer = min(_device_ns(req), total)
        pre = min(max(req.first - req.start, 0), total - infer)
        post = max(total - pre - infer, 0)
    else:
        pre = post = -1
        infer = 0
    stages = json.dumps(req.stages, separators=(",", ":")) if req.stages else "{}"
    r.line(request_line(req.start, t, req.queue, pre, infer, post, req.status, req.kind, req.n, req.batch, stages,
                        req.handoff, req.claimed, req.delivered, req.rid, req.f1, req.received, req.gets,
                        req.key or "-"))
    r.flush_if_due(t, now=r.role == "python")  # a forked child (socketserver.ForkingMixIn) leaves through os._exit
    if _FLUSHER[0] is None:
        _start_flusher()


def at_exit():
    """The process is exiting (Ctrl-C on a server): a request whose handler thread had written its response
    but not yet returned — the client has its answer — still gets its ``R`` line, ended at its last write (its
    last body message on ASGI). Daemon handler threads stop where they are at exit, so without this the last
    answered request was lost whenever the signal came right after the answer. A request with nothing written
    yet was cut off: no line, as before."""
    for req in list(_OPEN):
        try:
            t = req.done if req.done > 0 else req.wrote
            if req.closed or t <= 0:
                continue
            req.closed = True
            _OPEN.discard(req)
            _finish(req, t)
        except BaseException as exc:
            _error("request_at_exit", exc)


def _device_ns(req):
    """The forwards' time: CUDA events where they completed (the response needed the result on the host,
    so they normally have), the host's wall time for the others."""
    evs = req.evs
    if not evs:
        return req.infer
    total = req.infer - sum(w for _, _, w in evs)
    for s, e, wall in evs:
        try:
            total += int(s.elapsed_time(e) * 1e6) if e.query() else wall
        except BaseException:
            total += wall
    return max(total, 0)


def _start_flusher():
    """A server can sit idle for minutes after its last request: write what it served every half second
    rather than only at the next request or at exit (a SIGKILL would lose it)."""
    def loop():
        while True:
            time.sleep(FLUSH_NS / 1e9)
            r = _state.R
            if r is None or not r.writing():
                return
            if _ACTIVE[1] is not None:
                _unwrap_idle()
            try:
                r.flush()  # nothing buffered: nothing written
            except BaseException:
                pass

    try:
        th = threading.Thread(target=loop, name="gpusleuth-flush", daemon=True)
        _FLUSHER[0] = th
        th.start()
    except BaseException as exc:
        _error("flusher", exc)


def after_fork():
    """A forked server worker: no flusher thread, no hooks, no open request of the parent."""
    _FLUSHER[0] = None
    _ACTIVE[0] = 0
    _ACCEPTED.clear()
    _OPEN.clear()


def _error(where, exc):
    r = _state.R
    if r is not None:
        r.error(where, exc)


# ------------------------------------------------------------------------------------ forward timing
# While a request is open, ``nn.Module.__call__`` is a thin wrapper that times the outermost module call of
# the request (inner modules: one context-variable look-up). Not torch's global module hooks: with those,
# every module of the model takes torch's slow call path (~5 µs a module, measured); not hooks on the
# model's own instance either: they would stay in its ``_forward_hooks`` and be pickled by ``torch.save``.
def _arm():
    with _LOCK:
        _ACTIVE[0] += 1
        if _ACTIVE[1] is None:
            mod = sys.modules.get("torch.nn.modules.module")
            if mod is not None:
                try:
                    cls = mod.Module
                    real = cls.__dict__["__call__"]
                    cls.__call__ = _timed_call(real)
                    _ACTIVE[1] = (cls, real, cls.__dict__["__call__"])
                except BaseException as exc:
                    _error("request_arm", exc)


def _disarm():
    with _LOCK:
        _ACTIVE[0] = max(_ACTIVE[0] - 1, 0)
        _ACTIVE[2] = _now()


def _unwrap_idle():
    """Put ``Module.__call__`` back once no request has been open for IDLE_UNWRAP_NS. Not at each
    request's end: setting a class attribute of ``nn.Module`` invalidates the type caches of all its
    subclasses (~70 µs), too much to pay twice per request of a server with one request at a time."""
    with _LOCK:
        if _ACTIVE[0] == 0 and _ACTIVE[1] is not None and _now() - _ACTIVE[2] >= IDLE_UNWRAP_NS:
            cls, real, ours = _ACTIVE[1]
            if cls.__dict__.get("__call__") is ours:  # someone patched it after us: leave theirs alone
                cls.__call__ = real
            _ACTIVE[1] = None


def _timed_call(real):
    @functools.wraps(real)
    def __call__(self, *args, **kwargs):
        req = _REQ.get()
        if req is None or req.closed:
            if getattr(_OUTSIDE, "t0", 0):  # inside a forward outside any request already
                return real(self, *args, **kwargs)
            return _outside_forward(real, self, args, kwargs)
        if req.fmod is not None or req.done >= 0:
            return real(self, *args, **kwargs)
        _forward_start(req, self, args)
        try:
            return real(self, *args, **kwargs)
        finally:
            _forward_end(req)

    return __call__


def _outside_forward(real, module, args, kwargs):
    """An outermost forward outside any request while requests are open: a batcher's model thread or task
    running one forward for the requests it took off a queue. One ``F`` line (start, end, rows, tokens,
    thread, the keys of the requests it ran for where they are known: ``_gpusleuth_follow``); analysis joins it with the requests whose work was taken before it started and answered after
    it ended (docs/serving.md, "Batching servers")."""
    try:
        rows, tokens = _input_shape(args or tuple(kwargs.values()))
        follow = sys.modules.get("_gpusleuth_follow")
        keys = follow.current_keys() if follow is not None else ""
        handoff = sys.modules.get("_gpusleuth_handoff")
        t0 = _now()
        if handoff is not None:
            handoff.answered_before_forward(t0)  # a batch answered before this forward is not in it
        _OUTSIDE.t0 = t0
    except BaseException as exc:
        _error("outside_forward", exc)
        return real(module, *args, **kwargs)
    try:
        return real(module, *args, **kwargs)
    finally:
        t = _now()
        _OUTSIDE.t0 = 0
        try:
            r = _state.R
            if r is not None:
                r.line(forward_line(t0, t, rows, tokens, _tid(), keys or "-"))
                if keys and follow.taken_from_another_process():
                    # written before the answer leaves: a worker terminated when its server stops (SIGTERM runs no
                    # exit handler) lost its last half second of forwards, and their requests read "not followed"
                    r.flush()
        except BaseException as exc:
            _error("outside_forward", exc)


def _forward_start(req, module, args):
    try:
        req.fmod = module
        if req.first < 0:
            req.batch = _input_shape(args)[0]
        r = _state.R
        if r is not None and r.cuda_on():
            req.ev = _event(r)
        t = _now()
        if req.first < 0:
            req.first = t
        req.ft0 = t
    except Exception as exc:
        _error("request_forward", exc)


def _forward_end(req):
    t = _now()
    try:
        req.fmod = None
        req.fend = t
        wall = t - req.ft0
        req.infer += wall
        if not req.n:
            req.f1 = wall
        req.n += 1
        if req.ev is not None:
            e = _event(_state.R)
            if e is not None:
                if req.evs is None:
                    req.evs = []
                req.evs.append((req.ev, e, wall))
            req.ev = None
    except Exception as exc:
        _error("request_forward", exc)


def _event(r):
    try:
        ev = r.torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev
    except BaseException as exc:
        _error("request_cuda_event", exc)
        return None


# -------------------------------------------------------------------------------- named stages (API)
def stage_begin(name):
    req = _REQ.get()
    if req is None:
        return None
    return (req, _clean(name)[:STAGE_NAME_MAX], _now())


def stage_end(tok):
    req, name, t0 = tok
    d = _now() - t0
    st = req.stages
    if st is None:
        st = req.stages = {}
    if name in st or len(st) < MAX_STAGES:
        st[name] = st.get(name, 0) + d
