"""Training knobs that ``gpusleuth sweep`` turns inside an unmodified job (standard library only).

A sweep must measure the user's *own* script with one setting changed, so the setting has to reach code we
did not write. We do it where the hook already sits: right after ``import torch``, and only when at least one
``GPUSLEUTH_KNOB_*`` variable is set (the hook calls :func:`install` only then — otherwise nothing here runs).

Knobs (environment variable → effect):

* ``GPUSLEUTH_KNOB_NUM_WORKERS``, ``_PIN_MEMORY``, ``_PREFETCH_FACTOR``, ``_PERSISTENT_WORKERS``,
  ``_BATCH_SIZE`` — override those ``DataLoader(...)`` arguments in every loader the main process builds.
  Arguments that would make torch raise (``prefetch_factor`` without workers) are dropped and said so.
* ``GPUSLEUTH_KNOB_ACCUM`` — ``keep`` (accumulate gradients over ``original batch ÷ new batch`` micro-batches,
  so the effective batch and the learning rate stay valid) or an integer count. Optimizer ``step()`` and
  ``zero_grad()`` become no-ops on all but every k-th call, and gradients are divided by k before the real step.
* ``GPUSLEUTH_KNOB_AUTOCAST`` — ``off`` / ``fp16`` / ``bf16``: the outermost ``nn.Module`` call of the main
  thread runs inside ``torch.autocast`` (``off`` forces full precision even if the script autocasts).
* ``GPUSLEUTH_KNOB_TF32`` — ``1``/``0``: TF32 matmuls and convolutions on NVIDIA GPUs.
* ``GPUSLEUTH_KNOB_MAX_STEPS`` — end the job cleanly (``SystemExit(0)``) after that many optimizer steps, so
  each configuration of a sweep is a bounded run.

What each knob did is written as ``I`` records (``{"kind": "knob", …}``) so the sweep can prove the setting
really reached the job. Like the rest of the hook, failures are swallowed and recorded (``hook_error``).
"""
import os
import threading
import types

PREFIX = "GPUSLEUTH_KNOB_"
LOADER_KNOBS = ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "batch_size")
_BOOL = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}

_state = {"orig_batch": None, "new_batch": None, "accum": 1, "steps": 0, "main_tid": None}


def requested(environ=None):
    """The knobs set in the environment, parsed: {name: value}. Malformed values raise ValueError."""
    env = os.environ if environ is None else environ
    out = {}
    for key, raw in env.items():
        if not key.startswith(PREFIX):
            continue
        name = key[len(PREFIX):].lower()
        text = raw.strip()
        if name in ("num_workers", "prefetch_factor", "batch_size", "max_steps"):
            out[name] = int(text)
        elif name in ("pin_memory", "persistent_workers", "tf32"):
            if text.lower() not in _BOOL:
                raise ValueError("%s=%r is not a boolean" % (key, raw))
            out[name] = _BOOL[text.lower()]
        elif name == "autocast":
            if text.lower() not in ("off", "fp16", "bf16"):
                raise ValueError("%s=%r: expected off, fp16 or bf16" % (key, raw))
            out[name] = text.lower()
        elif name == "accum":
            out[name] = "keep" if text.lower() == "keep" else int(text)
        else:
            out[name] = text  # unknown: reported, not applied
    return out


def install(torch, rec):
    """Apply the requested knobs. Never raises: a failure becomes one ``hook_error`` line."""
    try:
        knobs = requested()
    except Exception as exc:
        rec.error("knobs_parse", exc)
        return
    _state["main_tid"] = threading.get_ident()
    rec.info({"kind": "knob", "event": "requested", "knobs": knobs})
    for fn, names in ((_patch_loader, LOADER_KNOBS), (_patch_optimizer, ("accum", "max_steps")),
                      (_patch_autocast, ("autocast",)), (_set_tf32, ("tf32",))):
        if any(n in knobs for n in names):
            try:
                fn(torch, rec, knobs)
            except Exception as exc:
                rec.error("knob_" + fn.__name__.strip("_"), exc)


# ------------------------------------------------------------------------------------------ DataLoader
def _patch_loader(torch, rec, knobs):
    import inspect

    cls = torch.utils.data.DataLoader
    real_init = cls.__init__
    sig = inspect.signature(real_init)
    depth = [0]

    def __init__(self, *args, **kwargs):
        r = rec
        if depth[0] or r.worker or threading.get_ident() != _state["main_tid"]:
            return real_init(self, *args, **kwargs)
        try:
            bound = sig.bind(self, *args, **kwargs)
            call = dict(bound.arguments)
            call.pop("self", None)  # DataLoader.__init__ has no *args/**kwargs: every argument is named
            call = _override_loader(call, knobs, r)
        except Exception as exc:
            r.error("knob_loader", exc)
            return real_init(self, *args, **kwargs)
        depth[0] += 1
        try:
            return real_init(self, **call)
        finally:
            depth[0] -= 1

    __init__.__wrapped__ = real_init
    cls.__init__ = __init__


def _override_loader(call, knobs, rec):
    """The DataLoader arguments with the knobs applied; records what changed and what could not."""
    set_, skipped, original = {}, {}, {}
    workers = call.get("num_workers", 0) or 0
    if "num_workers" in knobs:
        original["num_workers"] = workers
        workers = knobs["num_workers"]
        call["num_workers"] = set_["num_workers"] = workers
    if "batch_size" in knobs:
        orig = call.get("batch_size", 1)
        original["batch_size"] = orig
        if call.get("batch_sampler") is not None:
            skipped["batch_size"] = "the loader has its own batch_sampler"
        elif orig is None:
            skipped["batch_size"] = "the loader does no batching (batch_size=None)"
        else:
            call["batch_size"] = set_["batch_size"] = knobs["batch_size"]
            if _state["orig_batch"] is None:  # the first loader is taken as the training loader
                _state["orig_batch"] = int(orig)
                _state["new_batch"] = int(knobs["batch_size"])
    if "pin_memory" in knobs:
        original["pin_memory"] = bool(call.get("pin_memory", False))
        call["pin_memory"] = set_["pin_memory"] = knobs["pin_memory"]
    for name in ("prefetch_factor", "persistent_workers"):
        if name in knobs:
            original[name] = call.get(name)
            if workers > 0:
                call[name] = set_[name] = knobs[name]
            else:
                skipped[name] = "needs num_workers > 0"
    if workers == 0:  # settings torch refuses without worker processes
        if call.get("prefetch_factor") is not None:
            call["prefetch_factor"] = None
            skipped.setdefault("prefetch_factor", "dropped: needs num_workers > 0")
        if call.get("persistent_workers"):
            call["persistent_workers"] = False
            skipped.setdefault("persistent_workers", "dropped: needs num_workers > 0")
    rec.info({"kind": "knob", "event": "applied", "where": "DataLoader", "set": set_, "original": original,
              "skipped": skipped})
    return call


# ------------------------------------------------------------------------ optimizer: accumulation, stop
def accum_factor(knobs):
    """Micro-batches per optimizer step: explicit, or ``keep`` = original batch ÷ new batch (≥ 1)."""
    a = knobs.get("accum")
    if a is None:
        return 1
    if a == "keep":
        orig, new = _state["orig_batch"], _state["new_batch"]
        if not orig or not new or new >= orig:
            return 1
        return max(1, int(round(orig / float(new))))
    return max(1, int(a))


def _patch_optimizer(torch, rec, knobs):
    import importlib

    optim = importlib.import_module("torch.optim.optimizer")
    max_steps = knobs.get("max_steps")
    if "accum" in knobs:
        base = optim.Optimizer
        real_init = base.__init__

        def __init__(self, *args, **kwargs):
            real_init(self, *args, **kwargs)
            try:
                if "_gpusleuth_calls" not in self.__dict__:
                    self._gpusleuth_calls = 0
                    self.step = types.MethodType(_accum_step, self)
                    self.zero_grad = types.MethodType(_accum_zero_grad, self)
            except Exception as exc:
                rec.error("knob_accum", exc)

        __init__.__wrapped__ = real_init
        base.__init__ = __init__
        _state["rec"] = rec
        _state["knobs"] = knobs
    if max_steps:
        def post_hook(opt, args, kwargs):
            r = rec
            if r.worker or r.opt_stack:  # an inner optimizer of a wrapper: not the end of a step
                return None
            _state["steps"] += 1
            if _state["steps"] >= max_steps and threading.get_ident() == _state["main_tid"]:
                r.info({"kind": "knob", "event": "stopped", "steps": _state["steps"]})
                raise SystemExit(0)
            return None

        optim.register_optimizer_step_post_hook(post_hook)


def _accum_step(self, *args, **kwargs):
    """Every k-th call is the real step, on gradients averaged over the k micro-batches."""
    k = accum_factor(_state.get("knobs") or {})
    self._gpusleuth_calls += 1
    if k > 1 and self._gpusleuth_calls % k:
        return None
    if k > 1:
        rec = _state.get("rec")
        if not _state.get("accum_said") and rec is not None:
            _state["accum_said"] = True
            rec.info({"kind": "knob", "event": "applied", "where": "optimizer", "set": {"accum": k},
                      "original": {"batch_size": _state["orig_batch"]}, "skipped": {}})
        import torch

        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.div_(k)
    return type(self).step(self, *args, **kwargs)


def _accum_zero_grad(self, *args, **kwargs):
    """Gradients are cleared only after a real step, so the micro-batches in between add up."""
    k = accum_factor(_state.get("knobs") or {})
    if k > 1 and self._gpusleuth_calls % k:
        return None
    return type(self).zero_grad(self, *args, **kwargs)


# ------------------------------------------------------------------------------------------- autocast
def _patch_autocast(torch, rec, knobs):
    mode = knobs["autocast"]
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "off": None}[mode]
    module_cls = torch.nn.Module
    real_call = module_cls.__call__
    depth = [0]
    said = []

    def __call__(self, *args, **kwargs):
        if depth[0] or threading.get_ident() != _state["main_tid"] or rec.worker:
            return real_call(self, *args, **kwargs)
        try:
            device = "cpu"
            for p in self.parameters():
                device = p.device.type
                break
            if dtype is None:
                ctx = torch.autocast(device_type=device, enabled=False)
            else:
                ctx = torch.autocast(device_type=device, dtype=dtype)
            if not said:
                said.append(1)
                rec.info({"kind": "knob", "event": "applied", "where": "forward",
                          "set": {"autocast": mode}, "original": {}, "skipped": {}, "device": device})
        except Exception as exc:
            rec.error("knob_autocast", exc)
            return real_call(self, *args, **kwargs)
        depth[0] += 1
        try:
            with ctx:
                return real_call(self, *args, **kwargs)
        finally:
            depth[0] -= 1

    __call__.__wrapped__ = real_call
    module_cls.__call__ = __call__


def _set_tf32(torch, rec, knobs):
    on = bool(knobs["tf32"])
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    rec.info({"kind": "knob", "event": "applied", "where": "torch.backends", "set": {"tf32": on},
              "original": {}, "skipped": {}})
