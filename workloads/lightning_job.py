"""A Lightning Trainer job (automatic optimization): Lightning calls ``optimizer.step(closure)`` and runs
forward and backward inside that call. Truth: the optimizer's own work (Adam's step with the closure's
time taken out), the steps, and the validation loop's time, all timed by the job itself.

With ``--ckpt-every N`` a ModelCheckpoint saves every N steps (its own write time is truth), and
``--final-save`` adds ``trainer.save_checkpoint`` after ``fit``: a save outside the cadence. ``--accum N``:
``accumulate_grad_batches`` (``--steps`` are optimizer steps; ``--val-every`` counts batches, as Lightning does).

Usage: python workloads/lightning_job.py [--steps N] [--val-every N] [--ckpt-every N] [--final-save]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

import lightning as L  # noqa: E402
from lightning.pytorch.callbacks import ModelCheckpoint  # noqa: E402
from _truth import Truth, timed_optimizer  # noqa: E402

TRUTH = Truth("lightning")
TimedAdam = timed_optimizer(torch.optim.Adam, TRUTH)  # Adam's own work: the closure Lightning hands it is not


class TimedCheckpoint(ModelCheckpoint):
    """ModelCheckpoint whose own save (the file write included) is timed."""

    def _save_checkpoint(self, trainer, filepath):
        with TRUTH.timer("save"):
            super()._save_checkpoint(trainer, filepath)


class Net(L.LightningModule):
    def __init__(self, width: int):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(64, width), torch.nn.ReLU(), torch.nn.Linear(width, 8))
        self.t_step = None

    def training_step(self, batch, idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def on_train_batch_start(self, batch, idx):
        self.t_step = time.perf_counter()

    def on_train_batch_end(self, outputs, batch, idx):
        TRUTH.steps.append(time.perf_counter() - self.t_step)

    def validation_step(self, batch, idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def on_validation_start(self):
        self.t_val = time.perf_counter()

    def on_validation_end(self):
        TRUTH.add("validation", time.perf_counter() - self.t_val)

    def configure_optimizers(self):
        # many parameters, small activations: Adam's own work is a real share of the step
        return TimedAdam(self.parameters(), lr=1e-3, foreach=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--val-every", type=int, default=30)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--ckpt-every", type=int, default=0, help="ModelCheckpoint every N steps (0: none)")
    ap.add_argument("--final-save", action="store_true", help="trainer.save_checkpoint after fit")
    ap.add_argument("--accum", type=int, default=1, help="accumulate_grad_batches (steps count batches ÷ accum)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    x = torch.randn(a.steps * a.accum * 16, 64)
    y = torch.randint(0, 8, (a.steps * a.accum * 16,))
    train = DataLoader(TensorDataset(x, y), batch_size=16)
    val = DataLoader(TensorDataset(x[:256], y[:256]), batch_size=64)
    ckdir = tempfile.mkdtemp(prefix="lightning_job")
    callbacks = [TimedCheckpoint(dirpath=ckdir, every_n_train_steps=a.ckpt_every, save_top_k=-1)] if a.ckpt_every else []
    trainer = L.Trainer(max_steps=a.steps, val_check_interval=a.val_every, limit_val_batches=4,
                        accumulate_grad_batches=a.accum,
                        num_sanity_val_steps=0, logger=False, enable_checkpointing=bool(callbacks), callbacks=callbacks,
                        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", devices=1)
    trainer.fit(Net(a.width), train, val)
    if a.final_save:
        with TRUTH.timer("final_save"):
            trainer.save_checkpoint(os.path.join(ckdir, "final.ckpt"))
    TRUTH.values["samples_per_step"] = 16
    TRUTH.emit()


if __name__ == "__main__":
    main()
