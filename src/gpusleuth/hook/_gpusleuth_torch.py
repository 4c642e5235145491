"""The torch patches of gpusleuth's hook (standard library only; torch is handed in once imported).

Each patch is a thin wrapper that feeds the recorder (`_gpusleuth_autohook.R`) and then gets out of the
way: the user's call always runs exactly once, with its own arguments, and its result or exception is
passed through unchanged. Bookkeeping failures are caught and reported once as ``hook_error`` lines.

What is patched, and why it is the right place:

* ``torch.optim.optimizer.register_optimizer_step_pre_hook/post_hook`` — torch's own global hooks around
  every ``Optimizer.step``; a stack keeps only the outermost one (wrappers such as ZeroRedundancyOptimizer
  or Lookahead call an inner optimizer's step). A ``closure`` argument is wrapped so that the forward and
  backward it runs (Lightning, LBFGS) are not counted as optimizer time.
* ``torch.nn.modules.module.register_module_forward_pre_hook`` — armed at each step's end and removed at
  the next forward: the pre-forward gap (input wait of loops without a DataLoader) and the batch's shape.
  Between those two moments only, so the modules' fast path is untouched the rest of the step.
* ``_BaseDataLoaderIter.__next__`` — the one method every DataLoader iterator goes through: data wait.
  ``_BaseDataLoaderIter.__init__`` — worker start-up is wait too, and where we learn the loader's config.
* ``torch.autograd.backward`` — what ``Tensor.backward`` calls: steps of scripts without an optimizer.
* ``nn.Module.train`` — ``eval()`` calls it; the outermost call on a model marks the automatic eval phase.
* ``torch.save`` (to a file or a buffer: Lightning serializes into ``BytesIO`` then writes) and, once the
  first step ends, ``safetensors.torch.save_file``/``save`` if imported (HF ``save_pretrained``, Trainer
  checkpoints) — the automatic checkpoint phase. A checkpoint begins where an automatic eval phase still
  open ends: one phase ends where the next begins.
* ``torch.utils.data._utils.worker._worker_loop`` — replaced by `_worker_loop` below, a module-level
  function, so that spawn-started workers unpickle it by name just like fork-started ones inherit it.
"""
import sys
import weakref

import _gpusleuth_autohook as _core

_now = _core._now
_cpu = _core._cpu
_tid = _core._tid
_batch_size = _core._batch_size
_input_shape = _core._input_shape
WAIT, CPU, SAMPLES, UNKNOWN, OPT, FETCHES = (_core.WAIT, _core.CPU, _core.SAMPLES, _core.UNKNOWN, _core.OPT,
                                            _core.FETCHES)
GAP, FSAMPLES, FTOKENS, FNEW = _core.GAP, _core.FSAMPLES, _core.FTOKENS, _core.FNEW
_REGISTER_FORWARD_PRE = None  # torch.nn.modules.module.register_module_forward_pre_hook, once installed

_ORIG_WORKER_LOOP = None


def install(torch, rec):
    for patch in (_patch_optimizer, _patch_dataloader, _patch_backward, _patch_train, _patch_save,
                  _patch_worker_loop, _patch_forward, _patch_distributed):
        try:
            patch(torch, rec)
        except Exception as exc:
            rec.error(patch.__name__, exc)
    arm_forward(rec)  # the job's first forward: its input is what step 1's input is compared with


def _patch_distributed(torch, rec):
    """Collectives, init_process_group and DDP's comm hook: see _gpusleuth_dist."""
    import _gpusleuth_dist

    _core._D = _gpusleuth_dist
    _gpusleuth_dist.install(torch, rec)


# --------------------------------------------------------------------------------------------- optimizer
def _patch_optimizer(torch, rec):
    import importlib

    optim = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the submodule name

    def pre_hook(opt, args, kwargs):
        r = _core.R
        if r is None or r.worker:
            return None
        try:
            stack = r.opt_stack
            if stack:
                if any(o is opt for o in stack):  # an earlier step raised before its post-hook: start over
                    del stack[:]
                else:
                    stack.append(opt)
                    return None
            stack.append(opt)
            r.opt_begin(opt)
            return _time_closure(r, args, kwargs)
        except Exception as exc:  # Ctrl-C is the user's: let it through
            r.error("optimizer_pre", exc)
        return None

    def post_hook(opt, args, kwargs):
        r = _core.R
        if r is None or r.worker:
            return None
        try:
            stack = r.opt_stack
            if stack and stack[-1] is opt:
                stack.pop()
                if not stack:
                    r.opt_end()
        except Exception as exc:
            r.error("optimizer_post", exc)
        return None

    optim.register_optimizer_step_pre_hook(pre_hook)
    optim.register_optimizer_step_post_hook(post_hook)

    # An optimizer that exists will end the steps: backward() must not (see Recorder.backward_end).
    cls = optim.Optimizer
    real_init = cls.__init__

    def __init__(self, *args, **kwargs):
        r = _core.R
        if r is not None:
            r.opt_made = True
        return real_init(self, *args, **kwargs)

    __init__.__wrapped__ = real_init
    __init__.__doc__ = real_init.__doc__
    cls.__init__ = __init__


def _time_closure(r, args, kwargs):
    """``step(closure)``: hand the optimizer a closure that adds its own duration to ``r.closure_ns``, so
    that ``opt_end`` can bill the optimizer only for its own work. None (no change) without a closure.
    ``args[0]`` is the optimizer itself (torch passes ``self`` first)."""
    closure = kwargs.get("closure") if kwargs else None
    positional = closure is None and len(args) > 1 and callable(args[1])
    if positional:
        closure = args[1]
    if closure is None or not callable(closure):
        return None

    def timed_closure(*a, **k):
        t0 = _now()
        try:
            return closure(*a, **k)
        finally:
            r.closure_ns += _now() - t0

    if positional:
        return (args[0], timed_closure) + tuple(args[2:]), kwargs
    kwargs = dict(kwargs)
    kwargs["closure"] = timed_closure
    return args, kwargs


# -------------------------------------------------------------------------------------------- DataLoader
def _patch_dataloader(torch, rec):
    base = torch.utils.data.dataloader._BaseDataLoaderIter
    real_next = base.__next__
    real_init = base.__init__

    def __next__(self):
        # The hottest path of the hook (once per batch): kept inline, see BENCHMARKS.md.
        r = _core.R
        if r is None or r.in_fetch or r.worker or _tid() != r.main_tid:
            return real_next(self)
        try:
            rec = r.pending
            if rec is not None:  # a fetch: the pending optimizer step is over for sure
                r.pending = None
                r._emit(rec)
            if r.cur_start is None:
                r.first_activity()
            r.in_fetch = True
            t0 = _now()
            c0 = _cpu()
        except Exception as exc:
            r.error("fetch_enter", exc)
            return real_next(self)
        try:
            batch = real_next(self)
        except BaseException:
            try:  # StopIteration at the end of an epoch (and worker shutdown) is waiting too
                r.fetch_exit(t0, c0, None, False)
            except Exception as exc:
                r.error("fetch_exit", exc)
            raise
        try:
            c1 = _cpu()
            t1 = _now()
            r.in_fetch = False
            c = r.c
            c[WAIT] += t1 - t0
            c[CPU] += c1 - c0
            c[FETCHES] += 1
            first = batch
            if first.__class__ is tuple or first.__class__ is list:
                first = first[0] if first else None
            shape = getattr(first, "shape", None)
            if shape:  # a tensor (or array) first: the common case
                c[SAMPLES] += shape[0]
            else:
                n = _batch_size(batch)
                if n < 0:
                    c[UNKNOWN] = True
                else:
                    c[SAMPLES] += n
        except Exception as exc:
            r.in_fetch = False
            r.error("fetch_exit", exc)
        return batch

    def __init__(self, loader, *args, **kwargs):
        r = _core.R
        if r is None or r.in_fetch or r.worker or _tid() != r.main_tid:
            return real_init(self, loader, *args, **kwargs)
        try:
            _loader_fact(r, loader)
            timed = getattr(loader, "num_workers", 0) > 0  # starting workers is what makes this slow
            if timed:
                r.fetch_enter()
                t0 = _now()
                c0 = _cpu()
        except Exception as exc:
            r.error("loader_init", exc)
            return real_init(self, loader, *args, **kwargs)
        if not timed:
            return real_init(self, loader, *args, **kwargs)
        try:
            return real_init(self, loader, *args, **kwargs)
        finally:
            try:
                r.fetch_exit(t0, c0, None, False)
            except Exception as exc:
                r.error("loader_init", exc)

    __next__.__wrapped__ = real_next
    __init__.__wrapped__ = real_init
    base.__next__ = __next__
    base.__init__ = __init__


def _safe_len(dataset):
    """len(dataset) where that is cheap and defined (map-style); None for iterable datasets."""
    try:
        n = len(dataset)
        return n if isinstance(n, int) else None
    except Exception:
        return None

def _torch_threads(r):
    """torch.get_num_threads() of this process (issue 4: CPU oversubscription evidence); None on failure."""
    try:
        return int(r.torch.get_num_threads()) if r.torch is not None else None
    except Exception:
        return None


def _loader_fact(r, loader):
    """One ``I`` record per distinct loader configuration: what the input-pipeline rules reason about."""
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:
        batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    dataset = getattr(loader, "dataset", None)
    fact = {
        "kind": "dataloader",
        "num_workers": getattr(loader, "num_workers", None),
        "batch_size": batch_size,
        "pin_memory": bool(getattr(loader, "pin_memory", False)),
        "persistent_workers": bool(getattr(loader, "persistent_workers", False)),
        "prefetch_factor": getattr(loader, "prefetch_factor", None),
        "drop_last": bool(getattr(loader, "drop_last", False)),
        "dataset": type(dataset).__name__,
        # issue 4 (diagnosis, contention rule): intra-op threads of this process when its loader starts
        "torch_threads": _torch_threads(r),
        "dataset_len": _safe_len(dataset),  # samples per epoch, for cost per epoch
    }
    key = tuple(sorted((k, str(v)) for k, v in fact.items()))
    if key not in r.dl_seen:
        r.dl_seen.add(key)
        r.info(fact)


# --------------------------------------------------------------------------------------------- backward
def _patch_backward(torch, rec):
    autograd = torch.autograd
    real_backward = autograd.backward

    def backward(*args, **kwargs):
        r = _core.R
        if r is None or r.bw_depth or r.worker or (r.cur_start is not None and not r.auto):
            return real_backward(*args, **kwargs)  # nothing to do: backward does not delimit steps here
        if r.cur_start is not None and r.mode == "optimizer":
            result = real_backward(*args, **kwargs)  # kept only for loops without a DataLoader:
            try:
                r.micro_backward()  # the next forward may be another micro-batch of this step
            except Exception as exc:
                r.error("backward", exc)
            return result
        try:
            if r.cur_start is None:
                r.first_activity()
        except Exception as exc:
            r.error("backward", exc)
        r.bw_depth += 1
        try:
            result = real_backward(*args, **kwargs)
        finally:
            r.bw_depth -= 1
        try:
            r.backward_end(_now())
        except Exception as exc:
            r.error("backward", exc)
        return result

    backward.__wrapped__ = real_backward
    backward.__doc__ = real_backward.__doc__
    backward.__name__ = real_backward.__name__
    autograd.backward = backward


def release_backward(r):
    """Put torch's own ``autograd.backward`` back once backward can no longer delimit steps (an optimizer
    or an explicit ``gpusleuth.step()`` took over) and its micro-batches need no counting (the loop reads a
    DataLoader): no per-step cost, and no frame of ours in the tracebacks of the most common training
    error. Code that kept a reference to the wrapper still works."""
    try:
        autograd = r.torch.autograd
        real = getattr(autograd.backward, "__wrapped__", None)
        if real is not None and getattr(autograd.backward, "__module__", None) == __name__:
            autograd.backward = real
    except Exception as exc:
        r.error("release_backward", exc)


# ----------------------------------------------------------------------------------- eval (Module.train)
def _patch_train(torch, rec):
    module_cls = torch.nn.Module
    real_train = module_cls.train

    def train(self, mode=True):
        r = _core.R
        if r is None or r.worker or r.train_depth:
            return real_train(self, mode)
        try:
            was_training = bool(getattr(self, "training", False))
        except Exception:
            was_training = False
        r.train_depth += 1
        try:
            result = real_train(self, mode)
        finally:
            r.train_depth -= 1
        try:
            _on_train(r, self, bool(mode), was_training)
        except Exception as exc:
            r.error("module_train", exc)
        return result

    train.__wrapped__ = real_train
    train.__doc__ = real_train.__doc__
    module_cls.train = train


def _on_train(r, mod, mode, was_training):
    """Automatic ``eval`` phase: from an outermost ``model.eval()`` to ``model.train()``.

    "Model" means a module the program put in training with an outermost ``.train()`` — not a submodule
    frozen with ``.eval()`` (batch-norm freezing, a distillation teacher). Before any such call, any
    module that was training counts. Only after the first step, so inference scripts are not all eval.
    """
    if r.trained is None:
        r.trained = weakref.WeakSet()
    trained = r.trained
    if mode:
        if r.auto_eval is not None:
            em = r.eval_mod() if r.eval_mod is not None else None
            if not (em is None or em is mod or mod in trained):
                return  # a part of the model toggled during evaluation: not the end of it
            r.phase_end(r.auto_eval)
        trained.add(mod)
        return
    if r.auto_eval is not None or r.nb == 0 or any(p[0] == "eval" for p in r.open_phases):
        return  # already in an eval phase (ours, or the program's own gpusleuth.phase("eval"))
    if mod in trained or (len(trained) == 0 and was_training):
        r.auto_eval = r.phase_begin("eval", "auto")
        r.eval_mod = weakref.ref(mod)


# ------------------------------------------------------------------------------ checkpoint (torch.save)
def _checkpoint_writer(real_save):
    """Wrap a function that writes tensors (``torch.save``, safetensors' ``save_file``) so that the
    outermost call is a ``checkpoint`` phase, whatever it writes to."""

    def save(*args, **kwargs):
        r = _core.R
        if r is None or r.worker or r.ckpt_depth:
            return real_save(*args, **kwargs)
        tok = None
        try:
            if not any(p[0] == "checkpoint" for p in r.open_phases):
                if r.auto_eval is not None:  # saving after validation: the evaluation is over
                    r.phase_end(r.auto_eval)
                tok = r.phase_begin("checkpoint", "auto")
        except Exception as exc:
            r.error("save", exc)
        r.ckpt_depth += 1
        try:
            return real_save(*args, **kwargs)
        finally:
            r.ckpt_depth -= 1
            if tok is not None:
                try:
                    r.phase_end(tok)
                except Exception as exc:
                    r.error("save", exc)

    save.__wrapped__ = real_save
    save.__doc__ = real_save.__doc__
    save.__name__ = real_save.__name__
    return save


# The checkpoint entry points of libraries: the whole save (state-dict gathering, JSON side files, the
# write), not only the tensor write inside it. (module, class or None, attribute)
CHECKPOINT_ENTRY_POINTS = (
    ("safetensors.torch", None, "save_file"),
    ("safetensors.torch", None, "save"),
    ("transformers.modeling_utils", "PreTrainedModel", "save_pretrained"),
    ("transformers.trainer", "Trainer", "_save_checkpoint"),
    ("lightning.pytorch.trainer.trainer", "Trainer", "save_checkpoint"),
    ("pytorch_lightning.trainer.trainer", "Trainer", "save_checkpoint"),
)


def patch_late_writers(r):
    """At the first step: checkpoint writers of libraries imported by then (safetensors, HF
    ``save_pretrained`` and the Trainer's checkpoint, Lightning's ``Trainer.save_checkpoint``). Not
    earlier: importing them ourselves would cost every job."""
    for modname, clsname, attr in CHECKPOINT_ENTRY_POINTS:
        mod = sys.modules.get(modname)
        owner = getattr(mod, clsname, None) if clsname and mod is not None else mod
        real = getattr(owner, attr, None) if owner is not None else None
        if callable(real) and getattr(real, "__module__", None) != __name__:
            setattr(owner, attr, _checkpoint_writer(real))
    st = sys.modules.get("safetensors.torch")
    if st is None:
        return
    # transformers binds save_file at import: `from safetensors.torch import save_file as safe_save_file`
    for modname in ("transformers.modeling_utils", "transformers.trainer"):
        mod = sys.modules.get(modname)
        if mod is None:
            continue
        for attr in ("safe_save_file", "save_file"):
            real = getattr(mod, attr, None)
            if callable(real) and getattr(real, "__module__", "").startswith("safetensors"):
                setattr(mod, attr, _checkpoint_writer(real))


def _patch_save(torch, rec):
    real_save = torch.save
    save = _checkpoint_writer(real_save)
    torch.save = save
    serialization = sys.modules.get("torch.serialization")
    if serialization is not None and getattr(serialization, "save", None) is real_save:
        serialization.save = save


# ------------------------------------------------------------------------------ DataLoader worker loop
def _patch_worker_loop(torch, rec):
    global _ORIG_WORKER_LOOP
    worker = sys.modules.get("torch.utils.data._utils.worker")
    if worker is None:
        import torch.utils.data._utils.worker as worker
    real = worker._worker_loop
    if real is not _worker_loop:
        _ORIG_WORKER_LOOP = real
        worker._worker_loop = _worker_loop


def _worker_loop(*args, **kwargs):
    """Replaces torch's DataLoader worker entry point: mark the process as a worker, then run torch's.

    Module-level on purpose: a spawn-started worker receives it pickled by name and imports this module
    (our directory is on the child's PYTHONPATH) — fork-started workers simply inherit it.
    """
    try:
        r = _core.R
        if r is not None:
            worker_id = args[10] if len(args) > 10 else kwargs.get("worker_id")
            r.become_worker(worker_id)
    except Exception:
        pass
    real = _ORIG_WORKER_LOOP
    if real is None:  # torch is imported in this child by now, which installed the patch and saved it
        import torch.utils.data._utils.worker as worker

        real = _ORIG_WORKER_LOOP or worker._worker_loop
    return real(*args, **kwargs)


# ------------------------------------------------------------------------- first forward of a step
def _patch_forward(torch, rec):
    global _REGISTER_FORWARD_PRE
    from torch.nn.modules import module

    _REGISTER_FORWARD_PRE = module.register_module_forward_pre_hook


def arm_forward(r):
    """A step just ended: catch the next forward's start. Registered per step and removed by the first
    forward, because any global module hook takes every module call off torch's fast path."""
    if r.fwd_handle is None and _REGISTER_FORWARD_PRE is not None and not r.worker:
        try:
            r.fwd_handle = _REGISTER_FORWARD_PRE(_first_forward)
        except Exception as exc:  # Ctrl-C is the user's: let it through
            r.error("forward_arm", exc)


_SEQ_FIRST = {}  # id(module) -> whether its recurrent layers take [seq, batch, …] (asked once per model)


def _seq_first(module):
    """A model whose RNN/LSTM/GRU layers all run with ``batch_first=False`` is fed ``[seq, batch]``: its
    batch is the input's second dimension. Walked once per model, not per step."""
    key = id(module)
    got = _SEQ_FIRST.get(key)
    if got is None:
        got = False
        try:
            rnn = _core.R.torch.nn.RNNBase if _core.R is not None and _core.R.torch is not None else None
            if rnn is not None:
                layers = [m for m in module.modules() if isinstance(m, rnn)]
                got = bool(layers) and not any(getattr(m, "batch_first", False) for m in layers)
        except Exception:  # Ctrl-C is the user's: let it through
            got = False
        if len(_SEQ_FIRST) < 1024:
            _SEQ_FIRST[key] = got
    return got


def _first_forward(module, args):
    """The first module call since the last step's end: the pre-forward gap ends here. Its first tensor
    argument gives the batch's samples (and tokens, for 2-D integer ids), and whether it is a new tensor
    (input was fetched) or the previous step's own (the gap was other host work)."""
    r = _core.R
    if r is None or r.worker or _tid() != r.main_tid:
        return None
    try:
        nb = r.nb
        if any(p[3][0] == nb for p in r.open_phases):
            return None  # an eval/checkpoint between steps: its forwards are not the next step's
        t = _now()
        h, r.fwd_handle = r.fwd_handle, None
        if h is not None:
            h.remove()
        c = r.c
        x = next((a for a in args if getattr(a, "shape", None) is not None), None)
        had = r.prev_in is not None  # a dead reference still says: the previous input is gone, this one is new
        prev = r.prev_in() if had else None
        try:
            r.prev_in = weakref.ref(x) if x is not None else None
        except TypeError:
            r.prev_in = None
        if r.gap_t0 is None:
            return None  # the first forward of the job (armed at import): remember its input only
        if c[GAP] >= 0:  # a later forward of the step, armed by its backward: another micro-batch?
            _micro_batch(r, c, module, args, x, prev)
            return None
        c[GAP] = max(t - r.gap_t0, 0)
        if not c[FETCHES] and r.gap_c0 is not None:  # no loader: the gap's thread CPU is the input's evidence
            c[CPU] += max(_cpu() - r.gap_c0, 0)
        c[FSAMPLES], c[FTOKENS] = _input_shape(args, _seq_first(module))
        if x is not None and had:
            c[FNEW] = 0 if prev is x else 1
    except Exception as exc:  # Ctrl-C is the user's: let it through
        r.error("first_forward", exc)
    return None



def _micro_batch(r, c, module, args, x, prev):
    """A loop without a DataLoader takes its samples from the forward's input; under gradient accumulation
    one optimizer step runs several forwards (nanoGPT's ``for micro_step in range(...)``), and counting only
    the first halved tokens/s. A forward after the step's backward that trains (grad enabled, module in
    training mode) on a new input tensor is one more micro-batch: its samples and tokens add up."""
    if c[FETCHES] or c[FSAMPLES] < 0 or x is None or x is prev or not module.training \
            or not r.torch.is_grad_enabled():
        return
    n, tokens = _input_shape(args, _seq_first(module))
    c[FSAMPLES] = c[FSAMPLES] + n if n >= 0 else -1
    if c[FTOKENS] >= 0:
        c[FTOKENS] = c[FTOKENS] + tokens if tokens >= 0 else -1


# ----------------------------------------------------------------------------------------- CUDA events
def cuda_check(r):
    """CUDA is 'in use' once the program initialized it; we never initialize it ourselves. Asked at the
    first step and at each flush, not per step: missing the device time of a step or two is fine."""
    if r.cuda_on or r.torch is None or r.worker:
        return r.cuda_on
    try:
        r.cuda_on = bool(r.torch.cuda.is_initialized())
    except Exception:
        r.cuda_on = False
    return r.cuda_on


def cuda_device(r):
    """The device the job works on: the one its memory is on (a model moved with ``.to("cuda:1")`` without
    ``set_device`` leaves the *current* device at 0, and an event there would time device 0 and could create
    a context on it). Decided once memory is held, then kept; recorded with its UUID, so the analysis can
    tell the job's GPUs (NVML names them by the same UUID). None until the job holds device memory."""
    dev = r.cuda_dev
    if dev is not None:
        return dev
    cuda = r.torch.cuda
    held = [i for i in range(cuda.device_count()) if cuda.memory_reserved(i) > 0]
    if not held:
        return None
    cur = cuda.current_device()
    dev = cur if cur in held else held[0]
    r.cuda_dev = dev
    try:
        for i in held:
            props = cuda.get_device_properties(i)
            r.info({"kind": "cuda_device", "index": i, "uuid": str(getattr(props, "uuid", "") or ""),
                    "name": str(props.name), "timed": i == dev, "sm_count": int(props.multi_processor_count)})
    except Exception as exc:
        r.error("cuda_device", exc)
    return dev


def cuda_mark(r):
    """An event recorded on the job's device's current stream (never a synchronize), or None where recording
    one is not allowed (CUDA-graph capture) or the job holds no device memory yet."""
    try:
        cuda = r.torch.cuda
        dev = cuda_device(r)
        if dev is None:
            return None
        if cuda.current_device() == dev:  # the usual case: no device switch per step
            if cuda.is_current_stream_capturing():
                return None
            stream = cuda.current_stream()
        else:
            with cuda.device(dev):  # it holds the job's memory: its context exists already
                if cuda.is_current_stream_capturing():
                    return None
                stream = cuda.current_stream()
        pool = r.ev_pool
        ev = pool.pop() if pool else cuda.Event(enable_timing=True)
        ev.record(stream)
        return ev
    except Exception as exc:
        r.error("cuda_event", exc)
        return None


def gpu_step(r, idx, end_ev):
    """Queue step ``idx``'s (start, end) events; the start is the previous step's end event."""
    start_ev = r.cuda_prev
    r.cuda_prev = end_ev
    q = r.gpu_q
    if start_ev is not None and end_ev is not None:
        q.append((idx, start_ev, end_ev))
        if len(q) > _core.GPU_PENDING_MAX:
            del q[0]
    gpu_poll(r)


def gpu_poll(r):
    """Emit ``G`` for every queued step whose events have completed: ``query()``, never a wait. Events on
    one stream complete in order, so we stop at the first one still pending."""
    q = r.gpu_q
    try:
        while q:
            idx, s, e = q[0]
            if not (e.query() and s.query()):
                break
            del q[0]
            r.buf.append("G\t%d\t%d\n" % (idx, int(s.elapsed_time(e) * 1e6)))
            if len(r.ev_pool) < 64:  # s ended step idx-1, whose entry is gone: nobody refers to it now
                r.ev_pool.append(s)
    except Exception as exc:
        del q[:]
        r.error("cuda_poll", exc)


# ------------------------------------------------------------------------------------------- profiler
def prof_start(r):
    try:
        r.prof = start_profiler(r.torch, r)
    except Exception as exc:
        r.error("profiler_start", exc)
        r.prof = None
    if r.prof is None:
        r.prof_done = True


def prof_step(r):
    """Step the profiler at a step boundary; stop it once its window has been exported."""
    import warnings

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r.prof.step()
            if r.prof_done:
                r.prof.stop()
                r.prof = None
    except Exception as exc:
        r.error("profiler_step", exc)
        r.prof = None
        r.prof_done = True


def start_profiler(torch, rec):
    """A ``torch.profiler.profile`` whose schedule captures steps A..B of this process (0-based, as we
    count them), stepped at every step boundary, exporting a gzipped Chrome trace when the window ends."""
    import warnings

    lo, hi = rec.prof_range
    prof_mod = torch.profiler
    activities = [prof_mod.ProfilerActivity.CPU]
    try:
        if torch.cuda.is_available():
            activities.append(prof_mod.ProfilerActivity.CUDA)
    except Exception:
        pass
    warmup = 1 if lo >= 1 else 0

    def ready(prof):
        import os

        rec.prof_done = True
        path = rec.trace_path()
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            prof.export_chrome_trace(path)
            rec.info({"kind": "profiler_trace", "path": path, "steps": [lo, hi]})
        except Exception as exc:
            rec.error("profiler_export", exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "won't be using warmup" and friends must not reach the user
        prof = prof_mod.profile(
            activities=activities,
            schedule=prof_mod.schedule(wait=lo - warmup, warmup=warmup, active=hi - lo + 1, repeat=1),
            on_trace_ready=ready,
            record_shapes=False,
            with_stack=False,
        )
        prof.start()
    return prof
