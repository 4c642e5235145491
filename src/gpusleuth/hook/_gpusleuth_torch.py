"""The torch patches of gpusleuth's hook (standard library only; torch is handed in once imported).

Each patch is a thin wrapper that hands the call to a method of the recorder (`_gpusleuth_state.R`) — the
recorder decides what the call means for the step and its phases; this module sets none of its attributes
— and otherwise gets out of the way: the user's call always runs exactly once, with its own arguments, and
its result or exception is passed through unchanged. Bookkeeping failures are caught and reported once as
``hook_error`` lines.

What is patched, and why it is the right place:

* ``torch.optim.optimizer.register_optimizer_step_pre_hook/post_hook`` — torch's own global hooks around
  every ``Optimizer.step``; a stack keeps only the outermost one (wrappers such as ZeroRedundancyOptimizer
  or Lookahead call an inner optimizer's step). A ``closure`` argument is wrapped so that the forward and
  backward it runs (Lightning, LBFGS) are not counted as optimizer time.
* ``torch.nn.modules.module.register_module_forward_pre_hook`` — armed at each step's end and removed at
  the next forward (``_gpusleuth_device``): the pre-forward gap (input wait of loops without a DataLoader)
  and the batch's shape (``Recorder.first_forward``). Between those two moments only, so the modules' fast
  path is untouched the rest of the step.
* ``_BaseDataLoaderIter.__next__`` — the one method every DataLoader iterator goes through: data wait
  (``Recorder.fetch``, the hook's one timed fetch).
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

import _gpusleuth_state as _state

_ORIG_WORKER_LOOP = None


def install(torch, rec):
    for patch in (_patch_optimizer, _patch_grad_scaler, _patch_dataloader, _patch_backward, _patch_train,
                  _patch_save, _patch_worker_loop, _patch_distributed):
        try:
            patch(torch, rec)
        except Exception as exc:
            rec.error(patch.__name__, exc)


def _patch_distributed(torch, rec):
    """Collectives, init_process_group and DDP's comm hook: see _gpusleuth_dist."""
    import _gpusleuth_dist

    _gpusleuth_dist.install(torch, rec)


# --------------------------------------------------------------------------------------------- optimizer
def _patch_optimizer(torch, rec):
    import importlib

    optim = importlib.import_module("torch.optim.optimizer")  # torch.optim deletes the submodule name

    def pre_hook(opt, args, kwargs):
        r = _state.R
        return None if r is None else r.opt_pre(opt, args, kwargs)

    def post_hook(opt, args, kwargs):
        r = _state.R
        if r is not None:
            r.opt_post(opt)
        return None

    optim.register_optimizer_step_pre_hook(pre_hook)
    optim.register_optimizer_step_post_hook(post_hook)

    # An optimizer that exists will end the steps: backward() must not (see Recorder.backward_end).
    cls = optim.Optimizer
    real_init = cls.__init__

    def __init__(self, *args, **kwargs):
        r = _state.R
        if r is not None:
            r.optimizer_made()
        return real_init(self, *args, **kwargs)

    __init__.__wrapped__ = real_init
    __init__.__doc__ = real_init.__doc__
    cls.__init__ = __init__


def _patch_grad_scaler(torch, rec):
    """``GradScaler.step`` skips ``optimizer.step()`` when the scaled gradients hold inf/NaN (and, with its
    default growth schedule, does so in the first iterations of every mixed-precision job): the iteration
    happened, its update did not. ``_maybe_opt_step`` is where the scaler decides; when the optimizer's own
    step did not run inside it, the recorder ends the step as a skipped update (``Recorder.skipped_step``)
    instead of merging two iterations into one."""
    import importlib

    try:
        cls = importlib.import_module("torch.amp.grad_scaler").GradScaler
    except (ImportError, AttributeError):
        return  # a torch before the device-generic scaler: its cuda.amp scaler is not followed
    real = getattr(cls, "_maybe_opt_step", None)
    if real is None or getattr(real, "__module__", None) == __name__:
        return

    def _maybe_opt_step(self, optimizer, *args, **kwargs):
        r = _state.R
        if r is None:
            return real(self, optimizer, *args, **kwargs)
        token = r.scaler_begin(optimizer)
        result = real(self, optimizer, *args, **kwargs)  # an exception passes through; the token is dropped
        r.scaler_end(token)
        return result

    _maybe_opt_step.__wrapped__ = real
    _maybe_opt_step.__doc__ = real.__doc__
    cls._maybe_opt_step = _maybe_opt_step


# -------------------------------------------------------------------------------------------- DataLoader
def _patch_dataloader(torch, rec):
    base = torch.utils.data.dataloader._BaseDataLoaderIter
    real_next = base.__next__
    real_init = base.__init__

    def __next__(self):
        r = _state.R
        if r is None:
            return real_next(self)
        return r.fetch(real_next, self)  # the hottest path of the hook (once per batch)

    def __init__(self, loader, *args, **kwargs):
        r = _state.R
        if r is None or not r.here():
            return real_init(self, loader, *args, **kwargs)
        try:
            r.loader_fact(_loader_fact(r, loader))
            timed = getattr(loader, "num_workers", 0) > 0  # starting workers is what makes this slow
        except Exception as exc:
            r.error("loader_init", exc)
            return real_init(self, loader, *args, **kwargs)
        if not timed:
            return real_init(self, loader, *args, **kwargs)
        return r.fetch(lambda it: real_init(it, loader, *args, **kwargs), self, counts=False)

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
    """What the input-pipeline rules reason about, of one loader (the recorder writes each distinct one once)."""
    batch_size = getattr(loader, "batch_size", None)
    if batch_size is None:
        batch_size = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
    dataset = getattr(loader, "dataset", None)
    return {
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


# --------------------------------------------------------------------------------------------- backward
def _patch_backward(torch, rec):
    autograd = torch.autograd
    real_backward = autograd.backward

    def backward(*args, **kwargs):
        r = _state.R
        if r is None:
            return real_backward(*args, **kwargs)
        return r.backward(real_backward, args, kwargs)

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
        r = _state.R
        if r is None:
            return real_train(self, mode)
        return r.module_train(real_train, self, mode)

    train.__wrapped__ = real_train
    train.__doc__ = real_train.__doc__
    module_cls.train = train


# ------------------------------------------------------------------------------ checkpoint (torch.save)
def _checkpoint_writer(real_save):
    """Wrap a function that writes tensors (``torch.save``, safetensors' ``save_file``) so that the
    outermost call is a ``checkpoint`` phase, whatever it writes to."""

    def save(*args, **kwargs):
        r = _state.R
        if r is None:
            return real_save(*args, **kwargs)
        return r.checkpoint(real_save, args, kwargs)

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
        r = _state.R
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
