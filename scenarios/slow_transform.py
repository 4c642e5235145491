"""input.preprocessing — a costly per-sample transform run in the training process (num_workers=0).
Fixed: the same transform in DataLoader workers (cores − 1), overlapping training."""

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from _common import Loop, cores, mlp, parse

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(120 * args.scale), 64


class Blurred(Dataset):
    def __len__(self):
        return STEPS * BATCH

    def __getitem__(self, i):
        img = np.random.default_rng(i).standard_normal((48, 48)).astype(np.float32)
        for _ in range(3):  # the costly augmentation
            img = (np.roll(img, 1, 0) + img + np.roll(img, -1, 0)) / 3
            img = (np.roll(img, 1, 1) + img + np.roll(img, -1, 1)) / 3
        return torch.from_numpy(img.reshape(-1)), i % 10


workers = 0 if args.planted else max(1, cores() - 1)
loader = DataLoader(Blurred(), batch_size=BATCH, num_workers=workers, persistent_workers=workers > 0,
                    prefetch_factor=4 if workers else None)
# The transform costs about 60 % of a training step, so one worker on a spare core hides it fully: the
# fixed twin stays quiet on a 2-core machine (loading that outran compute would need more cores, not a fix).
model, loop = mlp(48 * 48, 1024), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.train(loader, model, opt)
