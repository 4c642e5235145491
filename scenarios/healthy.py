"""healthy — a compute-bound MLP with data already in memory: nothing to fix. Both twins are identical."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from _common import Loop, mlp, parse, train_step

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(16 * args.scale), 256
data = TensorDataset(torch.randn(STEPS * BATCH, 512), torch.randint(0, 10, (STEPS * BATCH,)))
model, loop = mlp(512, 1024), Loop(args)
opt = torch.optim.Adam(model.parameters())
loop.start()
for x, y in DataLoader(data, batch_size=BATCH):
    train_step(model, opt, x, y)
    loop.step(len(x))
loop.done()
