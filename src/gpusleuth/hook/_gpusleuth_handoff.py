"""The queue hand-off of a batching server, inside the hook (docs/serving.md, "Batching servers").

Same rules as every hook module: standard library only, Python 3.8+ syntax, never raise into the user's
program. ``queue.Queue`` and ``asyncio.Queue`` are patched as they are imported (``_gpusleuth_serve.patch``):
a put inside a request, the take of that item outside any request and the resolution of a future handed
over with it are stamped on the open request (``_gpusleuth_request``), whose ``R`` line carries them.
"""
import contextvars
import functools
import sys

from _gpusleuth_request import _REQ, _error, _now

_HANDOFF = {}  # id(work item put on a queue inside a request) -> the request, until a consumer takes it
HANDOFF_MAX = 65536  # items put and never taken (a queue nobody drains): forget them past this many
_WATCHED = {}  # id(request) -> (the request, the futures handed over with its work), until its answer is stamped
# set on a queue that holds a request's own input, not work handed to a batcher (Ray Serve's replica buffers each
# request's body from its proxy on an asyncio.Queue of its own: _gpusleuth_follow marks it): puts and gets on it
# are the request reading its body
OWN_INPUT = "_gpusleuth_own_input"


# A batching server's handler does not run the model: it puts its input (and usually a future) on a queue
# and waits; a batcher outside any request takes the inputs off the queue, runs one forward, resolves the
# futures. The put (inside the request), the take (outside any) and the future's resolution are the three
# moments that tie the request to the forwards that ran for it, whatever the server.
def _put(item):
    req = _REQ.get()
    if req is None or req.closed:
        return
    try:
        t = _now()
        if _own_code(item, req):
            return
        if req.handoff < 0:
            req.handoff = t
        if len(_HANDOFF) >= HANDOFF_MAX:
            _HANDOFF.clear()
        _HANDOFF[id(item)] = req
        _watch_futures(req, item)
    except BaseException as exc:
        _error("queue_put", exc)


def _own_code(item, req):
    """Whether ``item`` is the request's own code sent to a thread under a copy of its context (anyio's and so
    Starlette's ``run_in_threadpool``: ``(context, func, args, future, scope)`` on its worker thread's queue —
    FastAPI runs every sync dependency so, LitServe's ``no_auth`` on each request): the request goes on in that
    thread, nothing was handed to a batcher. Before, that put was the request's hand-off, the worker thread's get its
    take and the thread's future its answer: a LitServe request's wait began before it read its body, 0.2 ms (1
    client) to 1.1 ms (16) early against its clock, median."""
    if item.__class__ is not tuple or not item:
        return False
    for p in item[:8]:
        if p.__class__ is contextvars.Context:
            return p.get(_REQ) is req
    return False


def _got():
    """A get from a queue inside a request: a streaming handler taking its next token from the engine."""
    req = _REQ.get()
    if req is not None and req.handoff >= 0 and not req.closed:
        req.received = _now()
        req.gets += 1


def _took(item):
    try:
        req = _HANDOFF.pop(id(item), None)
        if req is not None and req.claimed < 0:
            cur = _REQ.get()
            if cur is None or cur.closed:
                req.claimed = _now()
    except BaseException as exc:
        _error("queue_get", exc)


def _future_types():
    out = []
    for name in ("asyncio.futures", "concurrent.futures._base"):
        mod = sys.modules.get(name)
        cls = getattr(mod, "Future", None) if mod is not None else None
        if isinstance(cls, type):
            out.append(cls)
    return tuple(out)


def _watch_futures(req, item):
    """Futures handed over with the work (``(input, future)``, a dict or an object holding one): when one
    is resolved, the request has its answer — the end of its wait for the batch."""
    types = _future_types()
    if not types:
        return
    if isinstance(item, (tuple, list)):
        parts = item[:16]
    elif isinstance(item, dict):
        parts = list(item.values())[:16]
    else:
        parts = [item] + list(getattr(item, "__dict__", {}).values())[:16]
    for p in parts:
        if isinstance(p, types):
            p.add_done_callback(functools.partial(_resolved, req))
            if len(_WATCHED) >= HANDOFF_MAX:
                _WATCHED.clear()
            _WATCHED.setdefault(id(req), (req, []))[1].append(p)


def _resolved(req, fut):
    if req.delivered < 0:
        req.delivered = _now()
    _WATCHED.pop(id(req), None)


# An asyncio future runs its done-callbacks on a later turn of the event loop, not when it is resolved: a batcher
# that resolves a batch's futures and goes on to its next forward without yielding (requests already queued, and a
# loop stalled past its wait window by its first check) can run that forward before the callbacks, and an answer
# stamped after it put the next batch inside the request's window: that forward joined one request too many (4
# where the server's batch had 3, a full run on 2 cores; tests/test_serving_batching.py, the batch edge).
# Before each forward outside a request: a future already resolved is answered by then.
def answered_before_forward(t):
    """Stamp ``t`` (a forward outside any request is starting) as the answer of every request whose handed-over
    future is already resolved but whose done-callback has not run yet. Called from the forward's thread."""
    if not _WATCHED:
        return
    try:
        for req, futs in list(_WATCHED.values()):  # a copy: the event loop's thread adds and removes meanwhile
            if req.closed:
                _WATCHED.pop(id(req), None)
            elif req.delivered < 0 and any(f.done() for f in futs):
                req.delivered = t
    except BaseException as exc:
        _error("queue_answered", exc)


def _patch_queue(mod):
    cls = mod.Queue
    real_put, real_get = cls.put, cls.get

    @functools.wraps(real_put)
    def put(self, item, *args, **kwargs):
        _put(item)
        return real_put(self, item, *args, **kwargs)

    @functools.wraps(real_get)
    def get(self, *args, **kwargs):
        item = real_get(self, *args, **kwargs)
        if _HANDOFF:
            _took(item)
        _got()
        return item

    cls.put, cls.get = put, get  # put_nowait / get_nowait call these


def _patch_asyncio_queues(mod):
    cls = mod.Queue
    real_put, real_get = cls.put_nowait, cls.get_nowait

    @functools.wraps(real_put)
    def put_nowait(self, item):
        if not getattr(self, OWN_INPUT, False):
            _put(item)
        return real_put(self, item)

    @functools.wraps(real_get)
    def get_nowait(self):
        item = real_get(self)
        if getattr(self, OWN_INPUT, False):
            return item
        if _HANDOFF:
            _took(item)
        _got()
        return item

    cls.put_nowait, cls.get_nowait = put_nowait, get_nowait  # put / get call these
