"""contention — torch runs 4× as many intra-op threads as cores while a busy DataLoader worker shares
the machine. Fixed: torch.set_num_threads(cores − busy workers), what the rule recommends."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from _common import Loop, cores, mlp, parse, train_step

args = parse(__doc__)
C = cores()
WORKERS = max(1, C // 2)
torch.set_num_threads(4 * C if args.planted else max(1, C - WORKERS))
STEPS, BATCH = int(30 * args.scale), 64


class Augmented(Dataset):
    def __len__(self):
        return STEPS * BATCH

    def __getitem__(self, i):
        img = np.random.default_rng(i).standard_normal((32, 32)).astype(np.float32)
        img = (np.roll(img, 1, 0) + img + np.roll(img, -1, 0)) / 3
        return torch.from_numpy(img.reshape(-1)), i % 10


loader = DataLoader(Augmented(), batch_size=BATCH, num_workers=WORKERS, persistent_workers=True, prefetch_factor=4)
model, loop = mlp(32 * 32, 1024, depth=3), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.start()
for x, y in loader:
    train_step(model, opt, x, y)
    loop.step(len(x))
loop.done()
