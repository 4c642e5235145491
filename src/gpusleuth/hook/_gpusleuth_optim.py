"""The recorder's optimizer steps: the outermost step, the optimizers' cycle, skipped updates (stdlib only, 3.8+).

Part of ``Recorder`` (``_gpusleuth_state``; see ``_gpusleuth_steps`` for how a part shares its state).

An outermost ``optimizer.step()`` ends a step. Its record is kept *pending* until the next fetch or phase, or
until the optimizers' own order decides (docs/step-model.md, "Several optimizers"): the optimizers that step
between two fetches form one *cycle* — one iteration (GAN generator and discriminator, Muon + AdamW parameter
splits, one optimizer per layer) — which is written as one step when its first optimizer steps again. An
optimizer that steps again before those ahead of it in the cycle did, or one that was freed, shows that they
were used one after another (a new optimizer per stage, per epoch or per step): each of theirs is a step of
its own. A GradScaler that skips the update (inf/NaN gradients) ends a step with the delimiter ``skipped``;
``step(closure)``'s closure is timed so that the optimizer is billed only for its own work.
"""
import sys
import weakref

from _gpusleuth_records import FETCHES, FNEW, FSAMPLES, FTOKENS, GAP, OPT, _add_counts, _counters, _cpu, _now

STATE_INIT_FRAMES = 6  # how far up opt_pre looks for a state-initialising caller


def _lr_zero(opt):
    """The first parameter group's lr is 0 (or a tensor, not read here): the only steps worth ``_state_init_call``'s
    frame walk (0.8 µs) — a stateless optimizer would pay it every step otherwise."""
    try:
        lr = opt.param_groups[0].get("lr")
    except (AttributeError, IndexError, TypeError):
        return False
    return not isinstance(lr, (int, float)) or lr == 0


def _state_init_call():
    """Whether this optimizer step is torch.distributed.checkpoint's ``_init_optim_state``: a resumed job's
    ``get_state_dict``/``set_state_dict`` calls ``optim.step()`` once, with zero gradients and lr 0, to create
    the optimizer's state before loading into it. It is not a training step (counted, the FSDP2 example resumed
    from its checkpoint read 25 steps for 24). A few frame hops (under a microsecond), only at an outermost step."""
    f = sys._getframe(2)
    for _ in range(STATE_INIT_FRAMES):
        if f is None:
            return False
        code = f.f_code
        if code.co_name == "_init_optim_state" and "checkpoint" in code.co_filename:
            return True
        f = f.f_back
    return False


def _same(ref, opt):
    """Whether an optimizer reference (``Recorder._opt_key``) is ``opt``."""
    return ref() is opt if ref.__class__ is weakref.ref else ref == id(opt)


def _alive(ref):
    """Whether the referenced optimizer still exists (an ``id`` cannot tell: taken as alive)."""
    return ref.__class__ is not weakref.ref or ref() is not None


class OptimizerCycle:
    """The optimizer's steps and the cycle of several optimizers (a part of ``Recorder``)."""

    __slots__ = ()

    def commit(self):
        """Write the pending optimizer cycle as one step: a fetch, a phase or the exit ended the iteration."""
        cycle = self.pending
        if cycle is not None:
            self.pending = None
            self._emit(self._joined(cycle))

    def _joined(self, cycle):
        """The records of one cycle's optimizer steps as one step record: counters summed, the earliest
        forward's input, the last step's end and CUDA event."""
        if len(cycle) == 1:
            return cycle[0][1]
        recs = [rec for _, rec in cycle]
        c = list(recs[0][2])
        for rec in recs[1:]:
            old = rec[2]
            _add_counts(c, old)
            if c[GAP] < 0 <= old[GAP]:
                c[GAP], c[FSAMPLES], c[FTOKENS], c[FNEW] = old[GAP], old[FSAMPLES], old[FTOKENS], old[FNEW]
        self._count("joined")
        if not c[FETCHES]:
            self._count("joined_unfetched")  # no fetch inside: only the optimizers' order says it is one
        last = recs[-1]
        return (recs[0][0], last[1], c, last[3], last[4])

    def _opt_key(self, opt):
        """A reference to ``opt`` that does not keep it alive (its state can be gigabytes) and that a new
        optimizer reusing a freed one's ``id`` cannot match; ``id`` where the object refuses weak references."""
        ref = self.opt_ref
        if ref is not None and _same(ref, opt):
            return ref
        try:
            ref = weakref.ref(opt)
        except TypeError:
            ref = id(opt)
        self.opt_ref = ref
        return ref

    def _resolve_cycle(self, opt, cycle):
        """``opt`` begins a step while the cycle's optimizer steps are pending (no fetch or phase since)."""
        if _same(cycle[0][0], opt):  # the cycle came round: one iteration (also the one-optimizer loop)
            self.pending = None
            self._emit(self._joined(cycle))
            return
        k = next((i for i, (ref, _) in enumerate(cycle) if _same(ref, opt)), -1)
        if k > 0:
            # ``opt`` steps again before the optimizers ahead of it came round: those were used one after
            # another (a stage, a layer trained in turn), not in one iteration — each of theirs was a step
            self.pending = None
            self._count("split")
            for _, rec in cycle[:k]:
                self._emit(rec)
            self._emit(self._joined(cycle[k:]))
            return
        dead = max((i for i, (ref, _) in enumerate(cycle) if not _alive(ref)), default=-1)
        if dead >= 0:  # a freed optimizer never steps again: its steps ended (a new optimizer per step/epoch)
            self._count("retired")
            rest = cycle[dead + 1:]
            self.pending = rest or None
            for _, rec in cycle[:dead + 1]:
                self._emit(rec)

    def optimizer_made(self):
        """An optimizer exists: it will end the steps, backward() must not (see backward_end)."""
        self.opt_made = True

    def opt_pre(self, opt, args, kwargs):
        """torch's global optimizer-step pre-hook. A stack keeps only the outermost step (wrappers such as
        ZeroRedundancyOptimizer or Lookahead call an inner optimizer's step). Returns new (args, kwargs)
        when the step has a closure to time, else None."""
        if self.worker:
            return None
        try:
            self.scaler_opt = None  # the scaler's optimizer did step
            stack = self.opt_stack
            if stack:
                if any(o is opt for o in stack):  # an earlier step raised before its post-hook: start over
                    del stack[:]
                else:
                    stack.append(opt)
                    return None
            stack.append(opt)
            if not opt.state and _lr_zero(opt) and _state_init_call():
                self.opt_init = True
                return None
            self.opt_begin(opt)
            return self._time_closure(args, kwargs)
        except Exception as exc:  # Ctrl-C is the user's: let it through
            self.error("optimizer_pre", exc)
        return None

    def opt_post(self, opt):
        """torch's global optimizer-step post-hook: the outermost step returned."""
        if self.worker:
            return
        try:
            stack = self.opt_stack
            if stack and stack[-1] is opt:
                stack.pop()
                if stack:
                    return
                if self.opt_init:
                    self.opt_init = False
                else:
                    self.opt_end(opt)
        except Exception as exc:
            self.error("optimizer_post", exc)

    def scaler_begin(self, opt):
        """A GradScaler decides whether ``opt`` steps; returns a token for ``scaler_end``."""
        if self.worker or not self.here() or self.opt_stack:
            return None
        self.scaler_opt = opt
        return opt

    def scaler_end(self, token):
        """The scaler returned: if the optimizer's step did not run, the iteration ended with a skipped
        update (inf/NaN gradients) — a step of its own, written with the delimiter ``skipped``."""
        if token is None or self.scaler_opt is not token:
            return
        self.scaler_opt = None
        try:
            if self.cur_start is None:
                self.first_activity()
            self.opt_begin(token)
            self.opt_end(token, "skipped")
            self._count("skipped")
        except Exception as exc:
            self.error("scaler_skip", exc)

    def _time_closure(self, args, kwargs):
        """``step(closure)``: hand the optimizer a closure that adds its own duration to ``closure_ns``, so
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
            self.closure_calls += 1
            try:
                return closure(*a, **k)
            finally:
                self.closure_ns += _now() - t0

        if positional:
            return (args[0], timed_closure) + tuple(args[2:]), kwargs
        kwargs = dict(kwargs)
        kwargs["closure"] = timed_closure
        return args, kwargs

    def opt_begin(self, opt):
        if self.ng is not None:
            self._ng_close(_now())
        if self.cur_start is None:
            self.first_activity()
        if self.auto:
            if self.mode != "optimizer":
                if self.held:
                    self.prof_ahead = max(self.prof_ahead - len(self.held), 0)  # never written: not ahead
                    self._merge_back(self.held, micro=True)
                    self.held = []
                self.mode = "optimizer"
                if self.c[FETCHES] and self.patches is not None:  # without a loader, backward marks micro-batches
                    self.patches.release_backward(self)
            cycle = self.pending
            if cycle is not None:
                self._resolve_cycle(opt, cycle)
        if self.auto_eval is not None:
            self.phase_end(self.auto_eval)
        self.closure_ns = 0
        self.closure_calls = 0
        self.opt_t0 = _now()

    def opt_end(self, opt, delim="optimizer"):
        """The outermost optimizer step returned. Its own time excludes its closure's (Lightning and
        LBFGS run forward and backward inside ``step(closure)``: that is not the optimizer's work)."""
        t = _now()
        c = self.c
        c[OPT] += max(t - self.opt_t0 - self.closure_ns, 0)
        self.closure_ns = 0
        if self.closure_calls > 1:  # the optimizer evaluated the loss several times (LBFGS' line search)
            self._count("reevaluated")
        if self.auto and self.mode == "optimizer":  # _take(), inlined: this runs every step
            start = self.cur_start
            dev = self.dev
            entry = (self._opt_key(opt), (start if start is not None else t, t, c, delim,
                                          dev.mark() if dev.on else None))
            cycle = self.pending
            if cycle is None:
                self.pending = [entry]
            else:
                cycle.append(entry)
            self.c = _counters()
            self.cur_start = t
            self.nb += 1
            self.gap_t0 = t
            self.gap_c0 = None if c[FETCHES] else _cpu()  # see _take
            dev.arm()
