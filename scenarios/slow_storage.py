"""input.io — every batch read waits on slow storage (latency, no CPU), num_workers=0.
Fixed: 8 workers with prefetching, so reads overlap training (sleeping workers need no core of their own)."""

import time

import torch
from torch.utils.data import DataLoader, Dataset

from _common import Loop, mlp, parse, train_step

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH, LATENCY = int(100 * args.scale), 64, 0.012


class Remote(Dataset):
    def __len__(self):
        return STEPS

    def __getitem__(self, i):  # one batch per item, like reading a shard from object storage
        time.sleep(LATENCY)
        g = torch.Generator().manual_seed(i)
        return torch.randn(BATCH, 512, generator=g), torch.randint(0, 10, (BATCH,), generator=g)


workers = 0 if args.planted else 8
loader = DataLoader(Remote(), batch_size=None, num_workers=workers, persistent_workers=workers > 0,
                    prefetch_factor=4 if workers else None)
model, loop = mlp(512, 1024), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.start()
for x, y in loader:
    train_step(model, opt, x, y)
    loop.step(len(x))
loop.done()
