"""contention — torch runs 4× as many intra-op threads as cores while a busy DataLoader worker shares
the machine. Fixed: torch.set_num_threads(cores − busy workers), what the rule recommends.

The model is a deep stack of small layers: many short parallel regions per step, which is where threads
that share cores lose most (every region waits at a barrier for its slowest, descheduled thread)."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from _common import Loop, cores, mlp, parse

args = parse(__doc__)
C = cores()
WORKERS = max(1, C // 2)
torch.set_num_threads(4 * C if args.planted else max(1, C - WORKERS))
STEPS, BATCH = int(150 * args.scale), 256


class Augmented(Dataset):
    """One batch per item, augmented in the worker with vectorized numpy: ~3 ms of CPU a batch, well
    under a step (~12 ms), so one worker keeps up once it has a core (the fixed twin is not input-bound)."""

    def __len__(self):
        return STEPS

    def __getitem__(self, i):
        img = np.random.default_rng(i).standard_normal((BATCH, 32, 32)).astype(np.float32)
        for _ in range(3):
            img = (np.roll(img, 1, 1) + img + np.roll(img, -1, 1)) / 3
        return torch.from_numpy(img.reshape(BATCH, -1)), torch.arange(BATCH) % 10


loader = DataLoader(Augmented(), batch_size=None, num_workers=WORKERS, persistent_workers=True, prefetch_factor=4)
model, loop = mlp(32 * 32, 256, depth=8), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.train(loader, model, opt)
