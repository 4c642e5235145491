"""The built-in training knobs a sweep can turn without touching the user's script.

Each knob is applied inside the job by the hook (``hook/_gpusleuth_knobs.py``) from a ``GPUSLEUTH_KNOB_*``
environment variable. This table is the one place that says which names exist, which values they take, and
what caveat a user must read before keeping a winner (a bigger batch changes the optimisation, not only speed).
"""

from __future__ import annotations

from dataclasses import dataclass

ENV_PREFIX = "GPUSLEUTH_KNOB_"


@dataclass(frozen=True)
class Knob:
    name: str
    kind: str  # "int", "bool", "choice"
    choices: tuple[str, ...] = ()
    help: str = ""
    caveat: str = ""

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()

    def normalize(self, value: str) -> str:
        """The value as the hook reads it; ValueError with a sentence when it is not valid."""
        v = str(value).strip()
        if self.kind == "int":
            try:
                n = int(v)
            except ValueError:
                raise ValueError(f"knob {self.name}: {value!r} is not an integer") from None
            if n < (0 if self.name == "num_workers" else 1):
                raise ValueError(f"knob {self.name}: {n} is out of range")
            return str(n)
        if self.kind == "bool":
            low = v.lower()
            if low in ("1", "true", "yes", "on"):
                return "1"
            if low in ("0", "false", "no", "off"):
                return "0"
            raise ValueError(f"knob {self.name}: {value!r} is not a boolean (use 0/1, true/false)")
        low = v.lower()
        if low in self.choices or (self.name == "accum" and low.isdigit() and int(low) >= 1):
            return low
        raise ValueError(f"knob {self.name}: {value!r} is not one of {', '.join(self.choices)}")


KNOBS: dict[str, Knob] = {k.name: k for k in (
    Knob("num_workers", "int", help="DataLoader worker processes"),
    Knob("pin_memory", "bool", help="DataLoader pinned host memory (faster, overlappable host→device copies)"),
    Knob("prefetch_factor", "int", help="batches each worker loads ahead (needs num_workers > 0)"),
    Knob("persistent_workers", "bool", help="keep workers alive between epochs (needs num_workers > 0)"),
    Knob("batch_size", "int", help="DataLoader batch size of every loader the script builds",
         caveat="a different batch size changes the optimisation: scale the learning rate (linear rule for SGD, "
                "about square-root for Adam) and check convergence, or use accum=keep to keep the effective batch"),
    Knob("accum", "choice", choices=("keep",),
         help="gradient accumulation: 'keep' = original batch ÷ new batch micro-batches per optimizer step, or N",
         caveat="accumulation keeps the effective batch (and so the learning rate) but not batch-norm statistics, "
                "which see the smaller micro-batch"),
    Knob("autocast", "choice", choices=("off", "fp16", "bf16"),
         help="mixed precision around the model's forward (off forces full precision)",
         caveat="fp16 training needs a GradScaler against gradient underflow (the knob adds none): prefer bf16 "
                "where the hardware has it, and check the loss curve before keeping lower precision"),
    Knob("tf32", "bool", help="TF32 matmuls/convolutions on NVIDIA Ampere+ (torch.backends …allow_tf32)",
         caveat="TF32 keeps fp32 range with a 10-bit mantissa: fine for most training, check sensitive models"),
)}

# Knobs the sweep sets itself (bounded runs); not a --param.
MAX_STEPS_ENV = ENV_PREFIX + "MAX_STEPS"
