"""Distributed jobs inside the hook: who this process is in the job, and every collective it calls.

Same rules as every hook module: standard library only (torch is handed in), Python 3.8+, never raise
into the user's program, the user's call runs exactly once with its own arguments and its result passes
through unchanged.

* Identity — rank, local rank, world size, node rank and host name from the environment
  (``_gpusleuth_identity``, in every ``H`` header). Once ``init_process_group`` returns, an ``I`` line
  ``{"kind": "dist_init", ...}`` states what torch itself says (``mp.spawn`` sets no variable for the rank;
  torch knows it).
* Collectives: ``torch.distributed.all_reduce``, ``all_gather``, ``reduce_scatter``, ``broadcast``,
  ``barrier``… are wrapped at module level. Each call becomes one ``C`` line (docs/run-format.md): host
  start (this rank's *arrival*), host end (the work completed: at return for a blocking call, in the
  future's done callback for ``async_op=True``), op, bytes, group, and the call's sequence number in its
  group. Ranks call the collectives of one group in the same order (torch requires it), so the sequence
  number matches one collective across ranks; analysis/comm.py does the cross-rank arithmetic.
* DDP: its built-in C++ all-reduce never passes through Python. At a DDP module's first forward, when
  the user registered no comm hook of their own, we register torch's reference ``allreduce_hook`` — the
  one torch documents as giving the same results as no hook — which calls ``dist.all_reduce(async_op=True)``
  per gradient bucket, so every bucket is timed by the wrapper above. A user's own hook calls ``dist.*``
  too and is timed the same way.
* Model parallelism: ``parallelize_module`` (DTensor tensor parallelism) and the pipeline schedules' ``step``
  (``torch.distributed.pipelining``) say how many ranks share one batch;
  an ``I`` line ``{"kind": "model_parallel", "style": "tensor", "size": N}`` (once per size), so that the job's
  throughput counts each batch once (analysis/structure.py).
* NCCL (CUDA tensors): the host times are arrival and enqueue; the device time of a blocking collective
  is taken with two CUDA events on the current stream (no synchronize) and written as ``device_ns``
  when both have completed, polled at the next collective.
"""
import collections
import os

import _gpusleuth_state as _state
from _gpusleuth_identity import identity
from _gpusleuth_records import _clean, _now
from _gpusleuth_records import collective_line  # the event-line formats

# Every public collective, under each name torch has given it: FSDP2 calls ``all_gather_single`` and
# ``reduce_scatter_single`` (torch ≥ 2.10; ``all_gather_into_tensor``/``reduce_scatter_tensor`` before,
# now deprecated aliases that call them — the outer call is the one recorded, see ``S.depth``).
COLLECTIVES = (
    "all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
    "reduce_scatter_tensor", "reduce_scatter_single", "_all_gather_base", "_reduce_scatter_base",
    "all_reduce_coalesced", "all_gather_coalesced", "broadcast", "reduce", "gather", "scatter", "all_to_all",
    "all_to_all_single", "barrier", "all_gather_object", "broadcast_object_list",
)
# positional index of ``group`` and ``async_op`` in each signature (torch's own order)
_GROUP_POS = {"all_reduce": 2, "broadcast": 2, "reduce": 3, "all_gather": 2, "all_gather_into_tensor": 2,
              "all_gather_single": 2, "_all_gather_base": 2, "all_gather_coalesced": 2,
              "all_reduce_coalesced": 2, "reduce_scatter": 3, "reduce_scatter_tensor": 3,
              "reduce_scatter_single": 3, "_reduce_scatter_base": 3, "barrier": 0, "all_to_all": 2,
              "all_to_all_single": 4, "gather": 3, "scatter": 3, "all_gather_object": 2,
              "broadcast_object_list": 2}
_ASYNC_POS = {name: pos + 1 for name, pos in _GROUP_POS.items()
              if name not in ("all_gather_object", "broadcast_object_list")}
# the first tensor argument's name, for callers that pass it by keyword (FSDP2: ``output=…``)
_FIRST_KW = ("tensor", "output_tensor", "output", "tensor_list", "tensors", "output_tensor_lists",
             "object_list")
CUDA_PENDING_MAX = 4096


class _State:
    __slots__ = ("depth", "seq", "names", "done", "cuda_q", "world")

    def __init__(self):
        self.depth = 0  # >0 inside a wrapped collective: nested ones (all_gather_object → all_gather) are its own
        self.seq = {}  # group name → collectives called so far
        self.names = {}  # id(group) → name
        self.done = collections.deque()  # lines finished in other threads (async completion), drained here
        self.cuda_q = []  # (line prefix fields, start event, end event) waiting for the device
        self.world = None


S = _State()


def install(torch, rec):
    """Patch torch.distributed (collectives, init_process_group) and DDP. Called from _gpusleuth_torch."""
    rec.before_exit(at_exit)
    try:
        dist = torch.distributed
        if not dist.is_available():
            return
    except Exception as exc:
        rec.error("dist_available", exc)
        return
    try:
        c10d = __import__("torch.distributed.distributed_c10d", fromlist=["x"])
    except Exception as exc:
        rec.error("dist_import", exc)
        return
    for name in COLLECTIVES:
        real = getattr(dist, name, None)
        if real is None or getattr(real, "_gpusleuth", False):
            continue
        wrapped = _wrap(torch, name, real)
        for mod in (dist, c10d):
            try:
                if getattr(mod, name, None) is real:
                    setattr(mod, name, wrapped)
            except Exception as exc:
                rec.error("dist_patch", exc)
    _patch_init(dist, c10d, rec)
    try:
        _patch_ddp(torch, rec)
    except Exception as exc:
        rec.error("ddp_patch", exc)


TENSOR_PARALLEL_MODULES = ("torch.distributed.tensor.parallel", "torch.distributed.tensor.parallel.api")


def patch_tensor_parallel(sys_modules):
    """Wrap ``parallelize_module`` where the job will find it (the package and its ``api`` module; the import
    watcher calls this right after ``torch.distributed.tensor.parallel`` is imported, before the job binds the
    name). The ranks of the mesh it is given work on the same batch."""
    wrapped = {}
    for name in TENSOR_PARALLEL_MODULES:
        mod = sys_modules.get(name)
        real = getattr(mod, "parallelize_module", None) if mod is not None else None
        if real is None or getattr(real, "_gpusleuth", False):
            continue
        if id(real) not in wrapped:  # the package re-exports the api's function: one wrapper for both names
            wrapped[id(real)] = _parallelize_module(real)
        setattr(mod, "parallelize_module", wrapped[id(real)])


def _parallelize_module(real):
    seen = set()

    def parallelize_module(*args, **kwargs):
        out = real(*args, **kwargs)
        r = _state.R
        if r is not None and not r.worker:
            try:
                mesh = kwargs.get("device_mesh", args[1] if len(args) > 1 else None)
                if mesh is not None:
                    size = int(mesh.size())
                    names = [str(n) for n in (getattr(mesh, "mesh_dim_names", None) or ())]
                else:  # torch takes the current mesh: the whole world
                    import torch.distributed as dist

                    size, names = int(dist.get_world_size()), []
                if size not in seen:
                    seen.add(size)
                    r.info({"kind": "model_parallel", "style": "tensor", "size": size, "dims": names})
            except Exception as exc:
                r.error("parallelize_module", exc)
        return out

    parallelize_module._gpusleuth = True
    parallelize_module.__wrapped__ = real
    parallelize_module.__doc__ = real.__doc__
    return parallelize_module


PIPELINE_SCHEDULES = ("_PipelineSchedule", "PipelineScheduleSingle", "PipelineScheduleMulti")


def patch_pipeline_schedules(module):
    """Wrap the pipeline schedules' ``step`` (``torch.distributed.pipelining``): every stage of a pipeline
    works on the same batch, split into micro-batches. Inside a ``step`` the recorder multiplies the step's
    first forward's rows by the schedule's micro-batch count (each stage's first module call sees one
    micro-batch: its first, or the activations received for it), so that every stage counts the whole batch;
    an ``I`` line ``{"kind": "model_parallel", "style": "pipeline", "size": stages' ranks}`` lets the job count
    it once."""
    for name in PIPELINE_SCHEDULES:
        cls = getattr(module, name, None)
        real = cls.__dict__.get("step") if cls is not None else None
        if real is None or getattr(real, "_gpusleuth", False):
            continue
        setattr(cls, "step", _schedule_step(real))


def _schedule_step(real):
    seen = set()

    def step(self, *args, **kwargs):
        r = _state.R
        n = getattr(self, "_n_microbatches", None)
        if r is None or r.worker or not isinstance(n, int) or n < 1 or r.pp_microbatches:
            return real(self, *args, **kwargs)  # a schedule's step calling its parent's: counted once
        try:
            stages = [self._stage] if hasattr(self, "_stage") else list(getattr(self, "_stages", ()))
            size = int(getattr(stages[0], "group_size", 0) or 0) if stages else 0
            key = (size, n)
            if size > 1 and key not in seen:
                seen.add(key)
                r.info({"kind": "model_parallel", "style": "pipeline", "size": size, "microbatches": n,
                        "schedule": type(self).__name__})
        except Exception as exc:
            r.error("pipeline_schedule", exc)
        r.pipeline_step(n)
        try:
            return real(self, *args, **kwargs)
        finally:
            r.pipeline_step(0)

    step._gpusleuth = True
    step.__wrapped__ = real
    step.__doc__ = real.__doc__
    return step


def _patch_init(dist, c10d, rec):
    real = getattr(dist, "init_process_group", None)
    if real is None or getattr(real, "_gpusleuth", False):
        return

    def init_process_group(*args, **kwargs):
        out = real(*args, **kwargs)
        r = _state.R
        if r is not None:
            try:
                fact = {"kind": "dist_init", "rank": dist.get_rank(), "world_size": dist.get_world_size(),
                        "backend": str(dist.get_backend())}
                fact.update({k: v for k, v in identity().items() if k in ("local_rank", "node_rank", "host")})
                r.info(fact)
                r.flush()
            except Exception as exc:
                r.error("dist_init", exc)
        return out

    init_process_group._gpusleuth = True
    for mod in (dist, c10d):
        if getattr(mod, "init_process_group", None) is real:
            setattr(mod, "init_process_group", init_process_group)


def _group_name(torch, group):
    if group is None:
        return "world"
    key = id(group)
    name = S.names.get(key)
    if name is None:
        try:
            world = S.world
            if world is None:
                world = S.world = torch.distributed.group.WORLD
            name = "world" if group is world else str(getattr(group, "group_name", None) or key)
        except Exception:
            name = str(key)
        S.names[key] = name
    return name


def _nbytes(obj, depth=0):
    """Bytes of the tensors in a collective's first argument (a tensor or a list of them)."""
    try:
        numel = getattr(obj, "numel", None)
        if numel is not None and hasattr(obj, "element_size"):
            return int(numel()) * int(obj.element_size())
        if depth < 2 and isinstance(obj, (list, tuple)):
            return sum(_nbytes(x, depth + 1) for x in obj)
    except Exception:
        pass
    return 0


def _is_cuda(obj):
    t = obj[0] if isinstance(obj, (list, tuple)) and obj else obj
    return bool(getattr(t, "is_cuda", False))


def _wrap(torch, name, real):
    gpos = _GROUP_POS.get(name)
    apos = _ASYNC_POS.get(name)

    def collective(*args, **kwargs):
        r = _state.R
        if r is None or r.worker or S.depth:
            return real(*args, **kwargs)
        try:
            if S.done:
                _drain(r)
            group = kwargs.get("group") if "group" in kwargs else (
                args[gpos] if gpos is not None and len(args) > gpos else None)
            is_async = bool(kwargs.get("async_op") if "async_op" in kwargs else (
                args[apos] if apos is not None and len(args) > apos else False))
            gname = _group_name(torch, group)
            seq = S.seq.get(gname, 0)
            S.seq[gname] = seq + 1
            first = args[0] if args and name != "barrier" else next(
                (kwargs[k] for k in _FIRST_KW if k in kwargs), None)
            nbytes = _nbytes(first)
            cuda = r.cuda_on() and _is_cuda(first)
            ev0 = _mark(r) if cuda else None
            t0 = _now()
        except Exception as exc:
            r.error("collective_enter", exc)
            return real(*args, **kwargs)
        S.depth += 1
        try:
            out = real(*args, **kwargs)
        finally:
            S.depth -= 1
        try:
            head = (t0, name, nbytes, gname, seq)
            if is_async and out is not None and hasattr(out, "get_future") and not cuda:
                _on_done(out, head)
            else:
                ev1 = _mark(r) if cuda and not is_async else None
                if ev0 is not None and ev1 is not None:
                    S.cuda_q.append((head, _now(), ev0, ev1))
                    if len(S.cuda_q) > CUDA_PENDING_MAX:
                        del S.cuda_q[0]
                    _poll_cuda(r)
                else:  # blocking on the host (gloo), or async NCCL: the host end is the enqueue
                    r.line(_line(head, _now(), -1))
        except Exception as exc:
            r.error("collective_exit", exc)
        return out

    collective._gpusleuth = True
    collective.__wrapped__ = real
    collective.__name__ = name
    collective.__doc__ = getattr(real, "__doc__", None)
    return collective


def _line(head, end_ns, device_ns):
    t0, name, nbytes, gname, seq = head
    return collective_line(t0, end_ns, name, nbytes, gname, seq, device_ns)


def _on_done(work, head):
    """An async collective (DDP's buckets): its end is when its future completes, in whatever thread
    completes it; the line waits in a deque for the main thread (the recorder's buffer is the main thread's)."""
    fut = work.get_future()

    def done(_fut):
        try:
            S.done.append(_line(head, _now(), -1))
        except Exception:
            pass

    fut.add_done_callback(done)


def _drain(r):
    done = S.done
    while done:
        try:
            r.line(done.popleft())
        except IndexError:
            break


def _mark(r):
    try:
        return r.cuda_event()
    except Exception:
        return None


def _poll_cuda(r):
    """Emit the NCCL collectives whose two events completed: ``query()``, never a wait."""
    q = S.cuda_q
    try:
        while q:
            head, host_end, s, e = q[0]
            if not (e.query() and s.query()):
                break
            del q[0]
            r.line(_line(head, host_end, int(s.elapsed_time(e) * 1e6)))
    except Exception as exc:
        del q[:]
        r.error("collective_cuda", exc)


def after_fork():
    """A forked child (a DataLoader worker, a Hogwild trainer) starts with none of the parent's collectives:
    the lines its async completions left undrained and its CUDA events are the parent's to write (a child
    that now leaves through the hook's exit would write them again, and polling CUDA events in a forked
    child is undefined), and its sequence numbers are its own if it joins a group of its own."""
    S.__init__()


def at_exit(r):
    """Called by the recorder's exit path before its last flush."""
    try:
        if S.cuda_q:
            _poll_cuda(r)
        _drain(r)
    except Exception:
        pass


# --------------------------------------------------------------------------------------------- DDP
def _patch_ddp(torch, rec):
    ddp = torch.nn.parallel.DistributedDataParallel
    real_forward = ddp.forward
    real_register = ddp.register_comm_hook
    real_builtin = getattr(ddp, "_register_builtin_comm_hook", None)
    if getattr(real_forward, "_gpusleuth", False):
        return

    def register_comm_hook(self, state, hook):
        self.__dict__["_gpusleuth_user_hook"] = True
        return real_register(self, state, hook)

    def _register_builtin_comm_hook(self, comm_hook_type):
        self.__dict__["_gpusleuth_user_hook"] = True
        return real_builtin(self, comm_hook_type)

    def forward(self, *inputs, **kwargs):
        d = self.__dict__
        if "_gpusleuth_user_hook" not in d:
            d["_gpusleuth_user_hook"] = False
            r = _state.R
            if r is not None and not r.worker:
                try:
                    _timed_default_hook(torch, self, real_register)
                except Exception as exc:
                    r.error("ddp_comm_hook", exc)
        return real_forward(self, *inputs, **kwargs)

    forward._gpusleuth = True
    ddp.forward = forward
    ddp.register_comm_hook = register_comm_hook
    if real_builtin is not None:
        ddp._register_builtin_comm_hook = _register_builtin_comm_hook


def _timed_default_hook(torch, module, real_register):
    """Register torch's reference all-reduce hook (same results as DDP's built-in reduction, per torch's
    documentation) when nothing else was registered and DDP would otherwise reduce in C++ unseen."""
    if os.environ.get("GPUSLEUTH_DDP_HOOK", "1") == "0":
        return
    if getattr(module, "_comm_hooks", None):
        return
    if getattr(module, "mixed_precision", None) is not None:  # DDP's own mixed-precision hook path
        return
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    real_register(module, module.process_group, default_hooks.allreduce_hook)
