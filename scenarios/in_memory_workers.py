"""input.handover with the data in memory — a TensorDataset served by DataLoader workers: each batch is an index
and a collate, yet it crosses a process boundary (pickled, its tensors' shared memory handed over through a
socket) and the training thread waits for that. The workers read nothing; more of them cannot help.
Fixed: num_workers=0 — the batch is made in the training thread, no hand-over."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from _common import Loop, mlp, parse

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(600 * args.scale), 64
data = TensorDataset(torch.randn(STEPS * BATCH, 64), torch.randint(0, 10, (STEPS * BATCH,)))  # in memory

workers = 2 if args.planted else 0
loader = DataLoader(data, batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0)
model, loop = mlp(64, 64), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.train(loader, model, opt)
