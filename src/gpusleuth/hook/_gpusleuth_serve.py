"""Per-request stages of a server, with no change to its code: the server patches (issue 16; docs/serving.md,
"Per-request stages").

Same rules as every hook module: standard library only, Python 3.8+ syntax, never raise into the user's
program. The import watcher of ``_gpusleuth_autohook`` hands each server module to :func:`patch` right after
it is imported; the patches open a request (``_gpusleuth_request.begin``) where the server starts one and
close it (``end``) where the response is done:

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
  stamped when its headers were parsed, so the time before the event loop ran it is its queue; its
  ``Server.shutdown`` writes the buffered lines (a SIGTERM is raised again after it, with no atexit).
* ``queue`` / ``asyncio.queues`` — a batching server's hand-off (``_gpusleuth_handoff``).
* ``multiprocessing`` channels, LitServe's loop, Ray Serve's replica and ``@serve.batch``, BentoML's
  ``CorkDispatcher`` — a request followed into the process or task that runs its model (``_gpusleuth_follow``).
"""
import contextvars
import functools
import sys

import _gpusleuth_state as _state
from _gpusleuth_handoff import _patch_asyncio_queues, _patch_queue
from _gpusleuth_request import _ACCEPTED, _REQ, _error, _now, begin, end

_QUEUE = contextvars.ContextVar("_gpusleuth_queue", default=-1)  # set by the server before the app call


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


def _patch_uvicorn_server(mod):
    """uvicorn stopped by SIGTERM shuts down gracefully, then raises the signal again with its default action:
    the process dies there, without atexit — and the half second of request and forward lines the flusher had
    not written yet was lost (a BentoML worker lost its last 0.27 s, 40 requests, issue 32). Write them once
    the shutdown has answered the last request."""
    cls = mod.Server
    real = cls.shutdown

    @functools.wraps(real)
    async def shutdown(self, *args, **kwargs):
        try:
            return await real(self, *args, **kwargs)
        finally:
            try:
                r = _state.R
                if r is not None:
                    r.flush()
            except BaseException as exc:
                _error("uvicorn_shutdown", exc)

    cls.shutdown = shutdown


PATCHES = {
    "socketserver": _patch_socketserver,
    "http.server": _patch_http_server,
    "wsgiref.handlers": _patch_wsgiref,
    "flask.app": _patch_flask,
    "starlette.applications": _patch_starlette,
    "uvicorn.protocols.http.h11_impl": _patch_uvicorn_cycle,
    "uvicorn.protocols.http.httptools_impl": _patch_uvicorn_cycle,
    "uvicorn.server": _patch_uvicorn_server,
    "queue": _patch_queue,
    "asyncio.queues": _patch_asyncio_queues,
}
# _gpusleuth_follow: requests followed elsewhere (other processes, in-process batchers it cannot see otherwise)
FOLLOWED = ("multiprocessing.queues", "multiprocessing.connection", "multiprocessing.managers", "litserve.loops.base",
            "ray.serve._private.replica", "ray.serve.batching", "bentoml._internal.marshal.dispatcher",
            "transformers.generation.continuous_batching.continuous_api")


# the serving framework a patched module belongs to: written once per process as a ``serving_framework`` fact, so
# that a fix names the framework's own knob (LitServe's ``batch_timeout``, not Triton's queue delay)
SERVER_FRAMEWORKS = {"litserve.loops.base": "litserve", "ray.serve._private.replica": "ray_serve",
                     "ray.serve.batching": "ray_serve", "bentoml._internal.marshal.dispatcher": "bentoml"}
_SAID = set()


def patch(name, module):
    try:
        if name in FOLLOWED:
            import _gpusleuth_follow

            _gpusleuth_follow.FOLLOW_PATCHES[name](module)
            _say_framework(name)
            return
        PATCHES[name](module)
    except BaseException as exc:
        _error("patch_" + name, exc)


def _say_framework(name):
    framework = SERVER_FRAMEWORKS.get(name)
    r = _state.R
    if framework is None or framework in _SAID or r is None:
        return
    _SAID.add(framework)
    top = sys.modules.get(name.split(".", 1)[0])
    r.info({"kind": "serving_framework", "name": framework,
            "version": str(getattr(top, "__version__", "") or "") or None})
