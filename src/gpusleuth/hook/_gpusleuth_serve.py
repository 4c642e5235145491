"""Per-request stages of a server, with no change to its code (issue 16; docs/serving.md, "Per-request stages").

Same rules as every hook module: standard library only, Python 3.8+ syntax, never raise into the user's
program. The import watcher of ``_gpusleuth_autohook`` hands each server module to :func:`patch` right after
it is imported; the patches open a request where the server starts one and close it where the response is
done:

* ``socketserver`` / ``http.server`` — ``TCPServer.get_request`` stamps the accept, the handler's
  ``__init__`` (in the worker thread) measures accept → handler start: the **queue** of a connection's
  first request (later requests of a keep-alive connection find their thread waiting: queue 0). A request
  runs from ``parse_request`` (the request line has arrived) to its response's last write to the socket
  (``socketserver._SocketWriter``, http.server's ``wfile``), or the end of ``handle_one_request`` when no
  write was seen after the last forward.
* ``wsgiref.handlers.BaseHandler.run`` and ``flask.app.Flask.wsgi_app`` — WSGI: from the app call to the
  response iterable's ``close()`` (the wsgiref one also knows its connection's queue).
* ``starlette.applications.Starlette.__call__`` (FastAPI too) — ASGI ``http`` scopes: from the app call
  to the ``http.response.body`` message without ``more_body``. Under uvicorn the request's cycle is
  stamped when its headers were parsed, so the time before the event loop ran it is its queue.

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

_now = time.time_ns
_REQ = contextvars.ContextVar("_gpusleuth_request", default=None)
_QUEUE = contextvars.ContextVar("_gpusleuth_queue", default=-1)  # set by the server before the app call
_LOCK = threading.Lock()
_ACTIVE = [0, None, 0]  # open requests, (Module, its __call__, ours) while wrapped, last request's end
IDLE_UNWRAP_NS = 2000000000
_ACCEPTED = {}  # id(accepted socket) -> accept time, until its handler starts
MAX_STAGES = 32
STAGE_NAME_MAX = 64
_FLUSHER = [None]
_OUTSIDE = threading.local()  # t0 of the outermost forward running outside any request on this thread
_tid = threading.get_ident
_HANDOFF = {}  # id(work item put on a queue inside a request) -> the request, until a consumer takes it
HANDOFF_MAX = 65536  # items put and never taken (a queue nobody drains): forget them past this many


class Req(object):
    __slots__ = ("kind", "start", "queue", "status", "first", "infer", "n", "batch", "fmod", "ft0",
                 "ev", "evs", "stages", "done", "returned", "token", "fend", "wrote", "handoff", "claimed",
                 "delivered", "closed", "rid", "f1", "received", "gets")

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
        _arm()
        return req
    except BaseException as exc:
        _error("request_begin", exc)
        return None


def end(req, t=None):
    """Close ``req`` (``t``: when its response was done, else now) and queue its ``R`` line."""
    try:
        req.closed = True  # a task started inside the request (a lazily started batcher) keeps its context
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
    r.line("R\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n" % (
        req.start, t, req.queue, pre, infer, post, req.status, req.kind, req.n, req.batch, stages,
        req.handoff, req.claimed, req.delivered, req.rid, req.f1, req.received, req.gets))
    r.flush_if_due(t, now=r.role == "python")  # a forked child (socketserver.ForkingMixIn) leaves through os._exit
    if _FLUSHER[0] is None:
        _start_flusher()


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
    thread); analysis joins it with the requests whose work was taken before it started and answered after
    it ended (docs/serving.md, "Batching servers")."""
    try:
        rows, tokens = _input_shape(args or tuple(kwargs.values()))
        t0 = _now()
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
                r.line("F\t%d\t%d\t%d\t%d\t%d\n" % (t0, t, rows, tokens, _tid()))
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


# -------------------------------------------------------------------------------------------- patches
# ------------------------------------------------------------------------------------- queue hand-off
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
        if req.handoff < 0:
            req.handoff = t
        if len(_HANDOFF) >= HANDOFF_MAX:
            _HANDOFF.clear()
        _HANDOFF[id(item)] = req
        _watch_futures(req, item)
    except BaseException as exc:
        _error("queue_put", exc)


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


def _resolved(req, fut):
    if req.delivered < 0:
        req.delivered = _now()


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
        _put(item)
        return real_put(self, item)

    @functools.wraps(real_get)
    def get_nowait(self):
        item = real_get(self)
        if _HANDOFF:
            _took(item)
        _got()
        return item

    cls.put_nowait, cls.get_nowait = put_nowait, get_nowait  # put / get call these


def _request_id(req, value):
    """The client's ``X-Request-Id`` (bytes or str) on ``req``, as text: what the server's rows are joined to
    the client's on (``gpusleuth load`` sends integers; gateways and replayed traffic send UUIDs, ``cmpl-…``).
    Untrusted: at most ``_RID_MAX`` characters are kept and anything not printable — a tab or line break
    would split the record line — is replaced; the reader cleans it again (run/request_ids.py)."""
    try:
        if value is None or req is None:
            return
        if value.__class__ is not str:
            value = bytes(value[:512]).decode("latin-1")
        text = value[:512].strip()[:_RID_MAX]
        if not text.isprintable():
            text = "".join([ch if ch.isprintable() else "\ufffd" for ch in text])
        if text:
            req.rid = text
    except BaseException:
        pass


_RID_MAX = 128  # run/request_ids.REQUEST_ID_MAX: a UUID is 36 characters, vLLM's "cmpl-" + 32 hex 37


def _status(text):
    try:
        return int(str(text).split(None, 1)[0])
    except (TypeError, ValueError, IndexError):
        return -1


def _patch_socketserver(mod):
    tcp = mod.TCPServer
    real_get = tcp.get_request

    @functools.wraps(real_get)
    def get_request(self):
        res = real_get(self)
        try:
            if len(_ACCEPTED) > 4096:  # handlers that never started (refused by verify_request)
                _ACCEPTED.clear()
            _ACCEPTED[id(res[0])] = _now()
        except BaseException as exc:
            _error("accept", exc)
        return res

    base = mod.BaseRequestHandler
    real_init = base.__init__

    @functools.wraps(real_init)
    def __init__(self, request, *args, **kwargs):
        try:
            t0 = _ACCEPTED.pop(id(request), None)
            self._gpusleuth_queue = _now() - t0 if t0 is not None else -1
        except BaseException as exc:
            _error("handler_start", exc)
        return real_init(self, request, *args, **kwargs)

    tcp.get_request = get_request
    base.__init__ = __init__

    writer = getattr(mod, "_SocketWriter", None)  # a handler's wfile when wbufsize is 0 (http.server's)
    if writer is not None:
        real_write = writer.write

        @functools.wraps(real_write)
        def write(self, b):
            n = real_write(self, b)
            req = _REQ.get()
            if req is not None:
                req.wrote = _now()
            return n

        writer.write = write


def _patch_http_server(mod):
    h = mod.BaseHTTPRequestHandler
    real_one, real_parse, real_send = h.handle_one_request, h.parse_request, h.send_response_only

    @functools.wraps(real_one)
    def handle_one_request(self):
        try:
            self._gpusleuth_req = None
            self._gpusleuth_one = True
        except BaseException as exc:
            _error("http_request", exc)
        try:
            return real_one(self)
        finally:
            req = getattr(self, "_gpusleuth_req", None)
            if req is not None:
                self._gpusleuth_req = None
                end(req, _response_done(req))

    @functools.wraps(real_parse)
    def parse_request(self):
        try:
            if getattr(self, "_gpusleuth_one", False) and getattr(self, "_gpusleuth_req", None) is None:
                q = getattr(self, "_gpusleuth_queue", -1)
                self._gpusleuth_queue = 0  # the next request of this connection finds its thread waiting
                self._gpusleuth_req = begin("http.server", q)
        except BaseException as exc:
            _error("http_request", exc)
        ok = real_parse(self)
        req = getattr(self, "_gpusleuth_req", None)
        if ok and req is not None:
            try:
                _request_id(req, self.headers.get("X-Request-Id"))
            except BaseException as exc:
                _error("http_request", exc)
        return ok

    @functools.wraps(real_send)
    def send_response_only(self, code, *args, **kwargs):
        req = _REQ.get()
        if req is not None and req.status < 0:
            try:
                req.status = int(code)
            except (TypeError, ValueError):
                pass
        return real_send(self, code, *args, **kwargs)

    h.handle_one_request = handle_one_request
    h.parse_request = parse_request
    h.send_response_only = send_response_only


def _response_done(req):
    """When an ``http.server`` request's response was done: its last socket write, if that came after its
    last forward — work the handler does once the client has its answer (an access-log line taken under a
    lock, metrics) is not the request's, as ASGI's end at the last body message; else now (a buffered
    ``wfile`` whose writes we do not see, a forward after the last write). A WSGI app inside the handler
    (werkzeug) keeps WSGI's end, the response iterable's ``close()``, which its server calls later."""
    w = req.wrote
    return w if w > 0 and w >= req.fend and req.kind != "wsgi" else None


def _patch_wsgiref(mod):
    bh = mod.BaseHandler
    real_run = bh.run

    @functools.wraps(real_run)
    def run(self, application):
        rh = getattr(self, "request_handler", None)
        req = begin("wsgi", getattr(rh, "_gpusleuth_queue", -1) if rh is not None else -1)
        if req is None:
            return real_run(self, application)

        def app(environ, start_response):
            _request_id(req, environ.get("HTTP_X_REQUEST_ID"))
            return application(environ, _status_of(req, start_response))

        try:
            return real_run(self, app)
        finally:
            end(req)

    bh.run = run


def _status_of(req, start_response):
    """``start_response`` that also notes the status in ``req``."""
    def sr(status, headers, *exc_info):
        req.status = _status(status)
        return start_response(status, headers, *exc_info)

    return sr


class _Closing(object):
    """A WSGI response iterable whose ``close()`` also ends the request (PEP 3333: the server calls it)."""

    def __init__(self, result, req):
        self._result = result
        self._req = req

    def __iter__(self):
        return iter(self._result)

    def close(self):
        try:
            close = getattr(self._result, "close", None)
            if close is not None:
                close()
        finally:
            req, self._req = self._req, None
            if req is not None:
                end(req)


def _wsgi_call(real, app, environ, start_response):
    old = _REQ.get()
    if old is not None and old.returned:  # the server never closed the last response: end it now
        end(old)
    elif old is not None and old.kind == "http.server":  # Flask under werkzeug's dev server: a WSGI app
        old.kind = "wsgi"
    req = begin("wsgi")
    if req is None:
        return real(app, environ, start_response)
    _request_id(req, environ.get("HTTP_X_REQUEST_ID"))
    try:
        result = real(app, environ, _status_of(req, start_response))
    except BaseException:
        end(req)
        raise
    req.returned = True
    return _Closing(result, req)


def _patch_flask(mod):
    cls = mod.Flask
    real = cls.wsgi_app

    @functools.wraps(real)
    def wsgi_app(self, environ, start_response):
        return _wsgi_call(real, self, environ, start_response)

    cls.wsgi_app = wsgi_app


def _patch_starlette(mod):
    cls = mod.Starlette
    real = cls.__call__

    @functools.wraps(real)
    async def __call__(self, scope, receive, send):
        req = begin("asgi", _QUEUE.get()) if scope.get("type") == "http" else None
        if req is None:
            return await real(self, scope, receive, send)
        try:
            for k, v in scope.get("headers") or ():
                if k == b"x-request-id":
                    _request_id(req, v)
        except BaseException as exc:
            _error("asgi_request_id", exc)

        async def send_done(message):
            await send(message)
            try:
                kind = message.get("type")
                if kind == "http.response.start":
                    req.status = int(message.get("status", -1))
                elif kind == "http.response.body" and not message.get("more_body", False) and req.done < 0:
                    req.done = _now()
            except Exception as exc:
                _error("asgi_send", exc)

        try:
            return await real(self, scope, receive, send_done)
        finally:
            end(req, req.done)

    cls.__call__ = __call__


def _patch_uvicorn_cycle(mod):
    """uvicorn creates a request's cycle when its headers are parsed and runs it as a task: the time
    between the two is the request's wait for the event loop (its queue)."""
    cls = mod.RequestResponseCycle
    real_init, real_run = cls.__init__, cls.run_asgi

    @functools.wraps(real_init)
    def __init__(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        try:
            self._gpusleuth_t = _now()
        except BaseException as exc:
            _error("uvicorn_cycle", exc)

    @functools.wraps(real_run)
    async def run_asgi(self, app):
        t0 = getattr(self, "_gpusleuth_t", None)
        if t0 is not None:
            _QUEUE.set(max(_now() - t0, 0))
        return await real_run(self, app)

    cls.__init__ = __init__
    cls.run_asgi = run_asgi


PATCHES = {
    "socketserver": _patch_socketserver,
    "http.server": _patch_http_server,
    "wsgiref.handlers": _patch_wsgiref,
    "flask.app": _patch_flask,
    "starlette.applications": _patch_starlette,
    "uvicorn.protocols.http.h11_impl": _patch_uvicorn_cycle,
    "uvicorn.protocols.http.httptools_impl": _patch_uvicorn_cycle,
    "queue": _patch_queue,
    "asyncio.queues": _patch_asyncio_queues,
}


def patch(name, module):
    try:
        PATCHES[name](module)
    except BaseException as exc:
        _error("patch_" + name, exc)
