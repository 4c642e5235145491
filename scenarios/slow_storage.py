"""input.io — every batch read waits on slow storage (latency, no CPU), num_workers=0.
Fixed: 8 workers with prefetching, so reads overlap training (sleeping workers need no core of their own)."""

import torch
from torch.utils.data import DataLoader

from _common import Loop, mlp, parse, remote_shards

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH, LATENCY = int(100 * args.scale), 64, 0.012


workers = 0 if args.planted else 8
loader = DataLoader(remote_shards(STEPS, BATCH, LATENCY), batch_size=None, num_workers=workers,
                    persistent_workers=workers > 0, prefetch_factor=4 if workers else None)
model, loop = mlp(512, 1024), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.train(loader, model, opt)
