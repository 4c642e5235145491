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

import gpusleuth
from gpusleuth.integrations._common import LiveNumbers, Phases

try:
    from lightning.pytorch.callbacks import Callback
except ImportError:  # pragma: no cover - the standalone package
    from pytorch_lightning.callbacks import Callback


class GpusleuthCallback(Callback):
    def __init__(self, log_numbers: bool = True):
        super().__init__()
        self.log_numbers = log_numbers
        self.phases = Phases()
        self.live = LiveNumbers()

    def setup(self, trainer, pl_module, stage: str) -> None:
        save = trainer.save_checkpoint
        if getattr(save, "_gpusleuth", False):
            return
        phases = self.phases

        @functools.wraps(save)
        def save_checkpoint(*args, **kwargs):
            phases.begin("checkpoint")
            try:
                return save(*args, **kwargs)
            finally:
                phases.end("checkpoint")

        save_checkpoint._gpusleuth = True
        trainer.save_checkpoint = save_checkpoint

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        every = max(int(getattr(trainer, "accumulate_grad_batches", 1) or 1), 1)
        if (batch_idx + 1) % every and not trainer.is_last_batch:
            return  # an accumulation micro-batch: the step goes on
        gpusleuth.step()
        n = max(int(getattr(trainer, "log_every_n_steps", 50) or 50), 1)
        if self.log_numbers and trainer.global_step % n == 0:
            numbers = self.live.numbers()
            if numbers:
                pl_module.log_dict(numbers, on_step=True, on_epoch=False, prog_bar=False, logger=True)

    def on_validation_start(self, trainer, pl_module) -> None:
        self.phases.begin("eval")

    def on_validation_end(self, trainer, pl_module) -> None:
        self.phases.end("eval")

    def on_exception(self, trainer, pl_module, exception) -> None:
        self.phases.end_all()

    def teardown(self, trainer, pl_module, stage: str) -> None:
        self.phases.end_all()
