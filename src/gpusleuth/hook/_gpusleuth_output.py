"""The recorder's own lines: the header, logs, facts, errors, and when its ``Writer`` flushes (stdlib only, 3.8+).

Part of ``Recorder`` (``_gpusleuth_state``; see ``_gpusleuth_steps`` for how a part shares its state). The lines'
formats are ``_gpusleuth_records``'; the file, its buffer and a full disk are ``_gpusleuth_writer``'s.
"""
import json
import os
import sys

from _gpusleuth_identity import identity
from _gpusleuth_records import SET, _clean, _jsonable, _now
from _gpusleuth_records import fact_line, header_line, log_line  # the event-line formats
from _gpusleuth_writer import FLUSH_NS


class EventOutput:
    """What the recorder writes besides steps and phases, and its flushes (a part of ``Recorder``)."""

    __slots__ = ()

    def log(self, samples, tokens, metrics):
        if self.worker:
            return
        t = _now()
        rec = {}
        if samples is not None:
            rec["samples"] = samples
            self.c[SET] = int(samples) + (self.c[SET] or 0)
        if tokens is not None:
            rec["tokens"] = tokens
        rec.update(metrics)
        self.out.buf.append(log_line(t, json.dumps(rec, default=_jsonable)))
        if t - self.out.last_flush >= FLUSH_NS:
            self.flush()

    def _framework_fact(self):
        """Which training framework drives the loop (its modules are imported by the first step), so
        that fixes can name the framework's own knob (``val_check_interval``, ``eval_steps``…)."""
        mods = sys.modules
        for name, module in (("lightning", "lightning.pytorch"), ("lightning", "pytorch_lightning"),
                             ("transformers", "transformers.trainer"), ("accelerate", "accelerate"),
                             ("deepspeed", "deepspeed")):
            if module in mods:
                mod = mods.get(name) or mods.get(module)
                self.info({"kind": "framework", "name": name,
                           "version": str(getattr(mod, "__version__", "") or "") or None})
                return

    def info(self, fact):
        self.out.buf.append(fact_line(_now(), json.dumps(fact, default=str)))

    def line(self, text):
        """A finished event line from a patch module (``C``, ``R``, ``F``, ``G``), written at the next flush."""
        self.out.buf.append(text)

    def error(self, where, exc):
        """One diagnostic line per failure site; the user's program carries on untouched."""
        try:
            if where in self.errors:
                return
            self.errors.add(where)
            self.info({"kind": "hook_error", "where": where, "error": "%s: %s" % (type(exc).__name__, exc)})
            self.flush()
        except BaseException:
            pass

    def trace_path(self):
        rank = os.environ.get("RANK", "0")
        return os.path.join(self.run_dir, "trace", "rank%s-pid%d.pt.trace.json.gz" % (_clean(rank), self.pid))

    def _header(self):
        torch = self.torch or sys.modules.get("torch")
        head = {
            "pid": self.pid,
            "ppid": os.getppid(),
            "role": self.role,
            "argv": list(getattr(sys, "argv", []) or []),
            "python": sys.version.split()[0],
            "executable": sys.executable,
            "torch": str(getattr(torch, "__version__", "")) or None if torch is not None else None,
            "t_ns": self.start_ns,
        }
        try:
            head.update(identity())  # rank, local rank, world size, node, host
        except BaseException as exc:
            self.error("identity", exc)
        if self.worker_id is not None:
            head["worker_id"] = self.worker_id
        return header_line(json.dumps(head, default=str))

    def flush(self, force=False):
        """Write the buffered lines now (``Writer.flush``); once written, ask whether the job has started
        using CUDA (``Device.check``: at each flush, not per step)."""
        if self.out.flush(force) and self.dev is not None:
            self.dev.check()

    def flush_if_due(self, t, now=False):
        """Flush when the last flush is ``FLUSH_NS`` old at ``t`` (or ``now``)."""
        if now or t - self.out.last_flush >= FLUSH_NS:
            self.flush()

    def writing(self):
        """Whether this process's events still reach its file (not given up on a disk that refused them)."""
        return not self.out.broken
