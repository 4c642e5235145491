"""Requests followed into the processes and tasks that run their model, by the framework's own id (issue 32;
docs/serving.md, "Requests followed across processes").

Same rules as every hook module: standard library only, Python 3.8+ syntax, never raise into the user's
program. Where a server hands a request's work to another process (LitServe's inference workers over a
multiprocessing manager's queue, a plain ``multiprocessing`` queue or pipe), the request and the forward that
ran for it live in two processes; the hook is in both (``sitecustomize`` loads it into every Python child,
spawned, forked or started by Ray), and the two ends meet on an id carried inside the work item itself:

* **producer** (inside an open request): a put/send on a multiprocessing channel stamps the request's hand-off
  and its follow key — the first id-like text of the item (LitServe's ``uid``; a UUID, ``req-…``), or ``?``
  when the item carries none (the report counts those as not followable, with the reason).
* **consumer** (outside any request): a get/recv of an item with an id puts the id in the taking thread's
  *pending* set and arms forward timing; every forward that thread runs outside a request lists the pending
  ids on its ``F`` line (with the time each was taken): the batch **by identity**, not by time windows. The
  id leaves the set when the consumer sends an item carrying it back (the answer) after a forward included
  it — a status message sent before the work ran (LitServe's START) does not end it.
* **Ray Serve**: a replica opens a request per call (``Replica._wrap_request``) with Ray's request id, which is
  the client's ``X-Request-Id`` when it sent one; ``@serve.batch`` runs each batch in its own task
  (``_BatchQueue._process_batch_inner``), whose forwards list the batch's request ids: what each forward took,
  even though Ray takes the next batch's items before the previous forward starts. The replica's receive proxy
  (the body fetched from Ray's proxy onto an ``asyncio.Queue`` inside the request) is the request's own input,
  not a hand-off: the request's hand-off is its put to the batcher.
* **BentoML**: in-process, but through a ``collections.deque`` no hook can patch: its dispatcher's
  ``inbound_call`` (the hand-off, a key per request) and ``outbound_call`` (the batch's take; its forwards list
  the batch's keys with that time) are followed instead.
"""
import contextlib
import contextvars
import functools
import itertools
import os
import re
import sys
import threading
import time

from _gpusleuth_handoff import OWN_INPUT
from _gpusleuth_request import _REQ, _arm, _disarm, _error, _now, _start_flusher, _FLUSHER, begin, end

_BATCH = contextvars.ContextVar("_gpusleuth_batch", default=None)  # a framework's batch: its request keys
_TL = threading.local()  # .pending: {key: [taken ns, forwarded]} of work this thread took from another process
KEY_MAX = 128
PENDING_MAX = 4096  # keys taken and never answered (a consumer that answers some other way): forget past this
_UUIDISH = re.compile(r"^[0-9A-Za-z][0-9A-Za-z_.:-]{7,127}$")
NO_KEY = "?"  # the work went to another process with nothing in it to follow it by


def _key_of(text):
    if text.__class__ is not str or not 8 <= len(text) <= KEY_MAX or not _UUIDISH.match(text):
        return None
    has_digit = has_alpha = False
    for ch in text:
        if ch.isdigit():
            has_digit = True
        elif ch.isalpha():
            has_alpha = True
    return text if has_digit and has_alpha else None


def find_key(item):
    """The id a work item carries: the first id-like text among its top-level parts (a tuple/list's
    elements, a dict's values, an object's attributes), else None. Not the payload's nested text."""
    try:
        if item.__class__ is str:
            return _key_of(item)
        if isinstance(item, (tuple, list)):
            parts = item[:8]
        elif isinstance(item, dict):
            parts = list(item.values())[:8]
        else:
            parts = list(getattr(item, "__dict__", {}).values())[:8]
        for p in parts:
            k = _key_of(p)
            if k is not None:
                return k
    except BaseException:
        pass
    return None


# ------------------------------------------------------------------------------------------------ producer
def _sent(item):
    """A put/send on a multiprocessing channel. Inside a request: the hand-off to another process. Outside
    any: maybe a consumer's answer."""
    req = _REQ.get()
    if req is not None and not req.closed:
        try:
            t = _now()
            if req.handoff < 0:
                req.handoff = t
            if not req.key or req.key == NO_KEY:
                req.key = find_key(item) or NO_KEY
        except BaseException as exc:
            _error("follow_put", exc)
        return
    pending = getattr(_TL, "pending", None)
    if pending:
        k = find_key(item)
        if k is not None:
            answered(k)


def answered(key):
    """The consumer sent ``key``'s answer: it leaves this thread's pending set once a forward took it."""
    pending = getattr(_TL, "pending", None)
    if pending:
        v = pending.get(key)
        if v is not None and v[1]:
            del pending[key]


# ------------------------------------------------------------------------------------------------ consumer
def _taken(item):
    """A get/recv from a multiprocessing channel outside any request: work from another process's request."""
    req = _REQ.get()
    if req is not None and not req.closed:
        return
    try:
        k = find_key(item)
        if k is None:
            return
        pending = getattr(_TL, "pending", None)
        if pending is None:
            pending = _TL.pending = {}
        if len(pending) >= PENDING_MAX:
            pending.clear()
        pending[k] = [_now(), False]
        _arm()  # forwards of this process are timed from now on (until 2 s without any work)
        _disarm()
        if _FLUSHER[0] is None:
            _start_flusher()
    except BaseException as exc:
        _error("follow_get", exc)


def current_keys():
    """The request keys of the forward starting now outside any request, as the ``F`` line's text
    (``key/taken,key/taken``; ``/-1`` where the take was not seen), or ``""`` when nothing is known."""
    try:
        batch = _BATCH.get()
        if batch:  # keys, or (key, taken ns) where the batcher's take was seen
            return ",".join(["%s/%d" % (_clean(k[0]), k[1]) if k.__class__ is tuple else _clean(k) + "/-1"
                             for k in batch if k])
        pending = getattr(_TL, "pending", None)
        if not pending:
            return ""
        out = []
        for k, v in pending.items():
            v[1] = True
            out.append("%s/%d" % (_clean(k), v[0]))
        return ",".join(out)
    except BaseException as exc:
        _error("follow_keys", exc)
        return ""


def taken_from_another_process():
    """Whether this thread's forward ran for work another process handed over (not a Ray batch of this process's
    own requests): its ``F`` line is the only record of that work in this process, and the process may be
    ended by a signal right after it answers (LitServe terminates its workers when it stops)."""
    try:
        return not _BATCH.get() and bool(getattr(_TL, "pending", None))
    except BaseException:
        return False


def _clean(key):
    key = str(key)[:KEY_MAX]
    return "".join([ch if ch.isprintable() and ch not in ",/\t\n " else "_" for ch in key])


# ------------------------------------------------------------------------------------------- the patches
def _patch_mp_queues(mod):
    for name in ("Queue", "SimpleQueue"):
        cls = getattr(mod, name, None)
        if cls is None:
            continue
        real_put, real_get = cls.put, cls.get

        def put(self, obj, *args, _real=real_put, **kwargs):
            _sent(obj)
            return _real(self, obj, *args, **kwargs)

        def get(self, *args, _real=real_get, **kwargs):
            item = _real(self, *args, **kwargs)
            _taken(item)
            return item

        cls.put, cls.get = functools.wraps(real_put)(put), functools.wraps(real_get)(get)


def _patch_mp_connection(mod):
    cls = mod.Connection
    real_send, real_recv = cls.send, cls.recv

    @functools.wraps(real_send)
    def send(self, obj):
        if not getattr(_TL, "proxy", False):  # a manager proxy's own call message: followed by its method
            _sent(obj)
        return real_send(self, obj)

    @functools.wraps(real_recv)
    def recv(self):
        item = real_recv(self)
        if not getattr(_TL, "proxy", False):
            _taken(item)
        return item

    cls.send, cls.recv = send, recv


def _patch_mp_managers(mod):
    """A manager's queue (``manager.Queue()``, LitServe's request queue): its proxy's put/get."""
    cls = mod.BaseProxy
    real = cls._callmethod

    @functools.wraps(real)
    def _callmethod(self, methodname, args=(), kwds={}):
        if methodname in ("put", "put_nowait") and args:
            _sent(args[0])
        _TL.proxy = True
        try:
            res = real(self, methodname, args, kwds)
        finally:
            _TL.proxy = False
        if methodname in ("get", "get_nowait"):
            _taken(res)
        return res

    cls._callmethod = _callmethod


def _patch_litserve_loops(mod):
    """LitServe answers through its transport (a manager queue or ZMQ): ``LitLoop.put_response`` is the one
    place every answer passes, with the request's uid; a START status is not the answer."""
    cls = mod.LitLoop
    real = cls.put_response

    @functools.wraps(real)
    def put_response(self, transport, response_queue_id, uid, response_data, status, *args, **kwargs):
        try:
            if getattr(status, "name", str(status)) != "START":
                answered(uid)
        except BaseException as exc:
            _error("litserve_answer", exc)
        return real(self, transport, response_queue_id, uid, response_data, status, *args, **kwargs)

    cls.put_response = put_response


def _patch_ray_replica(mod):
    """A Ray Serve replica's call: a request of its own, named by Ray's request id (the client's
    ``X-Request-Id`` when it sent one), from the replica starting it to its result."""
    cls = mod.Replica
    real = cls._wrap_request

    @contextlib.contextmanager
    def _wrap_request(self, request_metadata, *args, **kwargs):
        req = begin("ray", -1)
        if req is not None:
            try:
                rid = str(getattr(request_metadata, "request_id", "") or "")[:KEY_MAX]
                if rid:
                    req.rid = rid if rid.isprintable() else "-1"
                    req.key = _clean(rid)
            except BaseException as exc:
                _error("ray_request", exc)
        try:
            with real(self, request_metadata, *args, **kwargs) as cb:
                yield cb
            if req is not None and req.status < 0:
                req.status = 200
        except BaseException:
            if req is not None:
                req.status = 500
            raise
        finally:
            if req is not None:
                end(req)

    cls._wrap_request = _wrap_request
    for name in ("ASGIReceiveProxy", "ASGIDIReceiveProxy"):  # the latter: Ray's direct ingress (2.5x)
        _own_input_queue(getattr(mod, name, None))


def _own_input_queue(cls):
    """Ray's receive proxy: the replica puts the request's body messages, fetched from the proxy (or its own
    ingress), on an ``asyncio.Queue`` inside the request, and the handler gets them from it. That put is the
    request reading its own input, not work handed to a batcher: were it the hand-off, the request's wait for
    its batch would start when its body arrived, and count the handler's wake-up and input building (0.7 ms a
    request at 1 client, 2.7 ms at 16, measured against the replica's clock). The queue is marked as the
    request's own; the next put inside the request (``serve.batch``'s queue, a batcher of the user's) is the
    hand-off."""
    if not isinstance(cls, type):
        return
    prop = cls.__dict__.get("queue")
    if isinstance(prop, property) and prop.fget is not None:  # created lazily, in the user code's event loop
        real = prop.fget

        @functools.wraps(real)
        def queue(self):
            q = real(self)
            try:
                setattr(q, OWN_INPUT, True)
            except BaseException as exc:
                _error("ray_receive", exc)
            return q

        cls.queue = property(queue, prop.fset, prop.fdel, prop.__doc__)
        return
    real_init = cls.__init__  # a version that makes its queue as it is built

    @functools.wraps(real_init)
    def __init__(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        try:
            q = self.__dict__.get("_queue") or self.__dict__.get("queue")
            if q is not None:
                setattr(q, OWN_INPUT, True)
        except BaseException as exc:
            _error("ray_receive", exc)

    cls.__init__ = __init__


def _patch_ray_batching(mod):
    """``@serve.batch``: each batch runs in a task of its own; its forwards are the batch's requests'."""
    cls = mod._BatchQueue
    real = cls._process_batch_inner

    @functools.wraps(real)
    async def _process_batch_inner(self, func, batch, *args, **kwargs):
        try:
            _REQ.set(None)  # the batcher task was started inside the first request: its forwards are not that one's
            keys = []
            for item in batch:
                ctx = getattr(item, "request_context", None)
                rid = getattr(ctx, "request_id", None) if ctx is not None else None
                keys.append(_clean(rid) if rid else NO_KEY)
            _BATCH.set(tuple(keys))
        except BaseException as exc:
            _error("ray_batch", exc)
        return await real(self, func, batch, *args, **kwargs)

    cls._process_batch_inner = _process_batch_inner


_JOBS = {}  # id(a job's input handed to an in-process batcher inside a request) -> [key, the request]
_JOB_SEQ = itertools.count(1)
JOBS_MAX = 65536  # inputs never taken (cancelled for latency, a batcher that died): forget them past this many


def _patch_bentoml_dispatcher(mod):
    """BentoML's adaptive batching (``CorkDispatcher``): a request's ``inbound_call`` appends a job (its input
    and a future) to a ``collections.deque`` — a C type, which no hook can patch — and a controller task created
    by the *first* request takes jobs off it and starts ``outbound_call`` with each batch, whose forward runs in a
    thread (``anyio.to_thread``, context copied). The hand-off is the call itself; the input's identity finds
    the request again in the batch, and a key of its own (pid and a sequence number) names it; the batch task
    names its jobs' keys (with its take time) on its forwards, and is no request's own even though its context
    was copied from the first one's. A request that hands over more than one job is followed by its last."""
    cls = mod.CorkDispatcher
    real_in, real_out = cls.inbound_call, cls.outbound_call

    @functools.wraps(real_in)
    async def inbound_call(self, data, *args, **kwargs):
        req = _REQ.get()
        if req is not None and not req.closed:
            try:
                if req.handoff < 0:
                    req.handoff = _now()
                req.key = "job-%d-%d" % (os.getpid(), next(_JOB_SEQ))  # an input's id is reused once it is freed
                if len(_JOBS) >= JOBS_MAX:
                    _JOBS.clear()
                _JOBS[id(data)] = [req.key, req]
            except BaseException as exc:
                _error("bentoml_in", exc)
        return await real_in(self, data, *args, **kwargs)

    @functools.wraps(real_out)
    async def outbound_call(self, inputs_info, *args, **kwargs):
        reqs = []
        try:
            _REQ.set(None)  # this task's context is a copy of the first request's: its forwards are not that one's
            t = _now()
            keys = []
            for job in inputs_info:
                got = _JOBS.pop(id(getattr(job, "data", None)), None)
                if got is None:  # a job BentoML split in two (an input larger than the batch's room): unknown
                    keys.append((NO_KEY, -1))
                    continue
                key, req = got
                keys.append((key, t))
                reqs.append(req)
                if req.claimed < 0:
                    req.claimed = t
            _BATCH.set(tuple(keys))
        except BaseException as exc:
            _error("bentoml_out", exc)
        try:
            return await real_out(self, inputs_info, *args, **kwargs)
        finally:
            # the jobs' futures were resolved, and nothing awaited since: no request has resumed yet (a future's
            # done-callback would run after the request's own wake-up, which ends it first)
            t = _now()
            for req in reqs:
                if req.delivered < 0 and not req.closed:
                    req.delivered = t

    cls.inbound_call, cls.outbound_call = inbound_call, outbound_call


def _patch_transformers_cb(mod):
    """``transformers``' continuous batching (``transformers serve --continuous-batching``, ``generate_batch``): a
    request's ``add_request`` puts a ``RequestState`` on the manager's ``queue.Queue``; the manager's thread drains
    that queue into its scheduler at *every* step, whether or not the state gets room in a batch, and then runs one
    forward per step for the states the scheduler chose. The drain is no take: a state can wait in the scheduler
    for many steps (no KV-cache blocks left, the token budget spent) while the forwards of others run. Followed by
    the engine's own ``request_id`` instead: the hand-off names it, and each step's forward names the states in its
    batch, each with the moment the engine's scheduler took it out of PENDING (its ``lifespan[0]``, on
    ``perf_counter``: converted to the hook's wall clock)."""
    manager, processor = mod.ContinuousBatchingManager, mod.ContinuousBatchProcessor
    real_add, real_step = manager.add_request, processor._generation_step
    offset = _now() - time.perf_counter_ns()

    @functools.wraps(real_add)
    def add_request(self, *args, **kwargs):
        rid = real_add(self, *args, **kwargs)
        req = _REQ.get()
        if rid is not None and req is not None and not req.closed:
            try:
                req.key = _clean(rid)
            except BaseException as exc:
                _error("transformers_cb_in", exc)
        return rid

    @functools.wraps(real_step)
    def _generation_step(self, *args, **kwargs):
        token = None
        try:
            keys = []
            io = self.inputs_and_outputs
            pairs = getattr(io, "io_pairs", None)  # async batching (CUDA streams): the pair this step runs
            if pairs:
                io = getattr(pairs[io.current_pair], "host_io", io)
            for fs in getattr(io, "requests_in_batch", None) or ():
                st = getattr(fs, "state", None)
                rid = getattr(st, "request_id", None)
                began = (getattr(st, "lifespan", None) or (-1,))[0]
                taken = int(began * 1e9) + offset if isinstance(began, float) and began > 0 else -1
                keys.append((_clean(rid), taken) if isinstance(rid, str) and rid else (NO_KEY, -1))
            token = _BATCH.set(tuple(keys))
        except BaseException as exc:
            _error("transformers_cb_step", exc)
        try:
            return real_step(self, *args, **kwargs)
        finally:
            if token is not None:
                _BATCH.reset(token)

    manager.add_request, processor._generation_step = add_request, _generation_step


# module → its patch, applied by _gpusleuth_serve.patch as the module is imported
FOLLOW_PATCHES = {
    "multiprocessing.queues": _patch_mp_queues,
    "multiprocessing.connection": _patch_mp_connection,
    "multiprocessing.managers": _patch_mp_managers,
    "litserve.loops.base": _patch_litserve_loops,
    "ray.serve._private.replica": _patch_ray_replica,
    "ray.serve.batching": _patch_ray_batching,
    "bentoml._internal.marshal.dispatcher": _patch_bentoml_dispatcher,
    "transformers.generation.continuous_batching.continuous_api": _patch_transformers_cb,
}

