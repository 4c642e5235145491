"""A tiny real PyTorch Lightning job on CPU (no downloads): 2 epochs, validation and a checkpoint each epoch.

``--callback`` adds gpusleuth's GpusleuthCallback; the tests compare runs with and without it.
"""

import argparse
import sys
import time

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, Dataset


class Slow(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(0.001)
        g = torch.Generator().manual_seed(i)
        return torch.randn(32, generator=g), torch.tensor(i % 4)


class Model(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--callback", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    callbacks = []
    if args.callback:
        from gpusleuth.integrations.lightning import GpusleuthCallback

        callbacks.append(GpusleuthCallback())
    trainer = L.Trainer(
        max_epochs=2, accelerator="cpu", devices=1, logger=CSVLogger(args.out, name="logs"), callbacks=callbacks,
        default_root_dir=args.out, log_every_n_steps=10, num_sanity_val_steps=0, enable_progress_bar=False,
        enable_model_summary=False, limit_val_batches=8,
    )
    trainer.fit(Model(), DataLoader(Slow(16 * 40), batch_size=16), DataLoader(Slow(16 * 8), batch_size=16))
    print("lightning job done", trainer.global_step, file=sys.stderr)


if __name__ == "__main__":
    main()
