"""``GpusleuthCallback`` for PyTorch Lightning: steps, evaluation and checkpoints from the Trainer's hooks.

    from gpusleuth.integrations.lightning import GpusleuthCallback
    trainer = L.Trainer(callbacks=[GpusleuthCallback()])

- A step ends at ``on_train_batch_end`` of the batch that ran the optimizer (every
  ``accumulate_grad_batches``-th, and the last), through ``gpusleuth.step()``: the zero-code hook would
  delimit at ``optimizer.step``, inside which Lightning runs forward and backward (its closure).
- ``eval`` spans ``on_validation_start`` … ``on_validation_end``; ``checkpoint`` spans the Trainer's
  ``save_checkpoint`` (what ``ModelCheckpoint`` calls), since Lightning has no hook around the write.
- Every ``log_every_n_steps`` steps it logs ``gpusleuth/step_time_s``, ``gpusleuth/data_wait_share``,
  ``gpusleuth/samples_per_s`` and ``gpusleuth/steps`` to the Trainer's loggers (``pl_module.log_dict``).

Works with ``lightning`` (``lightning.pytorch``) or the older ``pytorch_lightning`` package.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import gpusleuth
from gpusleuth.integrations._common import LiveNumbers, Phases

if TYPE_CHECKING:  # checked against `lightning`; the older `pytorch_lightning` has the same hooks
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import Callback
    from lightning.pytorch.utilities.types import STEP_OUTPUT
else:
    try:
        from lightning.pytorch.callbacks import Callback
    except ImportError:  # pragma: no cover - the standalone package
        from pytorch_lightning.callbacks import Callback


class GpusleuthCallback(Callback):
    def __init__(self, log_numbers: bool = True) -> None:
        super().__init__()
        self.log_numbers = log_numbers
        self.phases = Phases()
        self.live = LiveNumbers()

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        save = trainer.save_checkpoint
        if getattr(save, "_gpusleuth", False):
            return
        phases = self.phases

        @functools.wraps(save)
        def save_checkpoint(*args: Any, **kwargs: Any) -> None:  # Trainer.save_checkpoint's own arguments
            phases.begin("checkpoint")
            try:
                return save(*args, **kwargs)
            finally:
                phases.end("checkpoint")

        # marked, so a second setup (fit, then validate) does not wrap it twice; the method is replaced on
        # this Trainer only, which its type does not describe: hence setattr
        setattr(save_checkpoint, "_gpusleuth", True)
        setattr(trainer, "save_checkpoint", save_checkpoint)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: STEP_OUTPUT,
                           batch: Any, batch_idx: int) -> None:  # batch: whatever the user's loader yields
        every = max(int(getattr(trainer, "accumulate_grad_batches", 1) or 1), 1)
        if (batch_idx + 1) % every and not trainer.is_last_batch:
            return  # an accumulation micro-batch: the step goes on
        gpusleuth.step()
        n = max(int(getattr(trainer, "log_every_n_steps", 50) or 50), 1)
        if self.log_numbers and trainer.global_step % n == 0:
            numbers = self.live.numbers()
            if numbers:
                pl_module.log_dict(numbers, on_step=True, on_epoch=False, prog_bar=False, logger=True)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.phases.begin("eval")

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.phases.end("eval")

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.phases.end_all()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.phases.end_all()
