"""A nanoGPT-style language model fed by a memmap ``get_batch`` (no DataLoader): random windows of a
uint16 token file on disk, read at the top of each iteration. ``--read-delay-ms`` plants a slow read
(network storage) so the input wait is large and known. Truth: the job's own timing of ``get_batch``,
of the optimizer and of each iteration, and the tokens per step.

``--workers N`` applies gpusleuth's fix for an input-bound loop without a DataLoader: the same
``get_batch`` inside an ``IterableDataset``, iterated through ``DataLoader(num_workers=N)``, so batches are
read while the model trains (the prediction check of BENCHMARKS.md).

Usage: python workloads/memmap_lm.py [--steps N] [--batch B] [--read-delay-ms MS] [--workers N] [--data FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _truth import Truth, timed_optimizer  # noqa: E402

TRUTH = Truth("memmap_lm")
BLOCK, VOCAB = 32, 256


class TinyLM(torch.nn.Module):
    def __init__(self, d: int = 64):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, d)
        self.pos = torch.nn.Parameter(torch.zeros(BLOCK, d))
        layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True)
        self.body = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, VOCAB)

    def forward(self, idx, targets):
        h = self.body(self.emb(idx) + self.pos)
        return torch.nn.functional.cross_entropy(self.head(h).view(-1, VOCAB), targets.view(-1))


def get_batch(data: np.ndarray, delay_s: float, batch: int):
    """nanoGPT's get_batch: a fresh memmap view each call, random windows, int64 tensors."""
    if delay_s:
        time.sleep(delay_s)  # the storage latency of a remote file system
    ix = torch.randint(len(data) - BLOCK - 1, (batch,))
    x = torch.stack([torch.from_numpy(data[i:i + BLOCK].astype(np.int64)) for i in ix.tolist()])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + BLOCK].astype(np.int64)) for i in ix.tolist()])
    return x, y


class Batches(torch.utils.data.IterableDataset):
    """The fix: get_batch as a dataset, so DataLoader workers run it ahead of the training loop."""

    def __init__(self, path: str, delay_s: float, batch: int):
        self.path, self.delay_s, self.batch = path, delay_s, batch

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        torch.manual_seed(1000 + (info.id if info else 0))
        data = np.memmap(self.path, dtype=np.uint16, mode="r")
        while True:
            yield get_batch(data, self.delay_s, self.batch)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--read-delay-ms", type=float, default=0.0)
    ap.add_argument("--data", default=None)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--workers", type=int, default=0, help="apply the fix: get_batch in N DataLoader workers")
    ap.add_argument("--pin-memory", action="store_true", help="with --workers: DataLoader(pin_memory=True)")
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    path = a.data or os.path.join(tempfile.mkdtemp(), "train.bin")
    if not os.path.exists(path):
        np.random.default_rng(0).integers(0, VOCAB, 200_000, dtype=np.uint16).tofile(path)
    model = TinyLM()
    opt = timed_optimizer(torch.optim.AdamW, TRUTH)(model.parameters(), lr=1e-3)
    batches = None
    if a.workers:
        batches = iter(torch.utils.data.DataLoader(Batches(path, a.read_delay_ms / 1e3, a.batch), batch_size=None,
                                                   num_workers=a.workers, prefetch_factor=4,
                                                   pin_memory=a.pin_memory))
    t_loop = time.perf_counter()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        with TRUTH.timer("input"):
            if batches is not None:
                x, y = next(batches)
            else:
                data = np.memmap(path, dtype=np.uint16, mode="r")
                x, y = get_batch(data, a.read_delay_ms / 1e3, a.batch)
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        TRUTH.steps.append(time.perf_counter() - t0)
    TRUTH.values.update(samples_per_step=a.batch, tokens_per_step=a.batch * BLOCK,
                        loop_s=time.perf_counter() - t_loop)
    TRUTH.emit()


if __name__ == "__main__":
    main()
