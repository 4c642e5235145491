"""healthy — a compute-bound MLP with data already in memory: nothing to fix. Both twins are identical."""

import torch

from _common import Loop, memory_loader, mlp, parse

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(40 * args.scale), 256
x_all, y_all = torch.randn(STEPS * BATCH, 512), torch.randint(0, 10, (STEPS * BATCH,))
model, loop = mlp(512, 1024), Loop(args)
opt = torch.optim.Adam(model.parameters())
loop.train(memory_loader(x_all, y_all, BATCH), model, opt)
