"""The recorder's phases: explicit ones, the automatic ``eval`` and ``checkpoint`` phases (stdlib only, 3.8+).

Part of ``Recorder`` (``_gpusleuth_state``; see ``_gpusleuth_steps`` for how a part shares its state). A phase
that no step boundary fell inside (an eval loop, a checkpoint between steps) takes back the data it fetched from
the surrounding training step. ``model.eval()`` … ``model.train()`` on the model is an automatic ``eval`` phase,
the outermost call of a function that writes tensors a ``checkpoint`` phase.
"""
import weakref

from _gpusleuth_records import GAP, OPT, _clean, _now
from _gpusleuth_records import phase_begin_line, phase_line  # the event-line formats


class PhaseState:
    """Open phases, the automatic eval and checkpoint phases (a part of ``Recorder``)."""

    __slots__ = ()

    def phase_begin(self, name, source):
        if self.worker:
            return None
        if self.ng is not None:
            self._ng_close(_now())
        if self.pending is not None:
            self.commit()
        t = _now()
        name = _clean(name)
        snap = (self.nb, self.cur_start, list(self.c))
        tok = [name, t, source, snap]
        self.open_phases.append(tok)
        self.out.buf.append(phase_begin_line(name, t, source))
        self.flush()
        return tok

    def phase_end(self, tok, t=None):
        """End a phase (at ``t``, else now). If no step boundary fell inside it (an eval loop, a checkpoint
        between steps), the data it fetched belongs to the phase, not to the surrounding training step: roll
        it back."""
        if tok is None:
            return
        if t is None:
            t = _now()
        try:
            self.open_phases.remove(tok)
        except ValueError:
            return  # ended already (e.g. at exit)
        if tok is self.auto_eval:
            self.auto_eval = None
            self.eval_mod = None
        name, start, source, snap = tok
        if snap[0] == self.nb:
            self.cur_start = snap[1]
            c = list(snap[2])
            c[OPT] = self.c[OPT]  # optimizer time is not the phase's data
            self.c = c
            if c[GAP] < 0 and self.gap_t0 is not None:
                self.gap_t0 += t - start  # the phase is not the wait before the next forward
        self.out.buf.append(phase_line(name, start, t, source))
        self.flush()

    def in_phase(self, name):
        return any(p[0] == name for p in self.open_phases)

    def module_train(self, real, mod, mode):
        """``nn.Module.train`` (``eval()`` calls it) through the hook: the automatic ``eval`` phase."""
        if self.worker or self.train_depth:
            return real(mod, mode)
        try:
            was_training = bool(getattr(mod, "training", False))
        except Exception:
            was_training = False
        self.train_depth += 1
        try:
            result = real(mod, mode)
        finally:
            self.train_depth -= 1
        try:
            self._on_train(mod, bool(mode), was_training)
        except Exception as exc:
            self.error("module_train", exc)
        return result

    def _on_train(self, mod, mode, was_training):
        if self.ng is not None:
            self._ng_close(_now())
        self._on_train_mode(mod, mode, was_training)

    def _on_train_mode(self, mod, mode, was_training):
        """Automatic ``eval`` phase: from an outermost ``model.eval()`` to ``model.train()``.

        "Model" means a module the program put in training with an outermost ``.train()`` — not a submodule
        frozen with ``.eval()`` (batch-norm freezing, a distillation teacher). Before any such call, any
        module that was training counts. Only after the first step, so inference scripts are not all eval.
        """
        if self.trained is None:
            self.trained = weakref.WeakSet()
        trained = self.trained
        if mode:
            if self.auto_eval is not None:
                em = self.eval_mod() if self.eval_mod is not None else None
                if not (em is None or em is mod or mod in trained):
                    return  # a part of the model toggled during evaluation: not the end of it
                self.phase_end(self.auto_eval)
            trained.add(mod)
            return
        if self.auto_eval is not None or self.nb == 0 or self.in_phase("eval"):
            return  # already in an eval phase (ours, or the program's own gpusleuth.phase("eval"))
        if mod in trained or (len(trained) == 0 and was_training):
            self.auto_eval = self.phase_begin("eval", "auto")
            self.eval_mod = weakref.ref(mod)

    def checkpoint(self, real, args, kwargs):
        """A function that writes tensors (``torch.save``, safetensors' ``save_file``, a library's checkpoint
        entry point) through the hook: the outermost call is a ``checkpoint`` phase, whatever it writes to.
        A checkpoint begins where an automatic eval phase still open ends."""
        if self.worker or self.ckpt_depth:
            return real(*args, **kwargs)
        tok = None
        try:
            if not self.in_phase("checkpoint"):
                if self.auto_eval is not None:  # saving after validation: the evaluation is over
                    self.phase_end(self.auto_eval)
                tok = self.phase_begin("checkpoint", "auto")
        except Exception as exc:
            self.error("save", exc)
        self.ckpt_depth += 1
        try:
            return real(*args, **kwargs)
        finally:
            self.ckpt_depth -= 1
            if tok is not None:
                try:
                    self.phase_end(tok)
                except Exception as exc:
                    self.error("save", exc)
