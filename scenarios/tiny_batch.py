"""batch.too_small — batch 4 through a wide model with Adam: the per-step optimizer update (fixed cost,
whatever the batch) dominates. Fixed: batch ×16 (what the rule recommends here), same samples."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from _common import Loop, mlp, parse

args = parse(__doc__)
torch.set_num_threads(1)
SAMPLES = int(512 * args.scale)
BATCH = 4 if args.planted else 64
data = TensorDataset(torch.randn(SAMPLES, 64), torch.randint(0, 10, (SAMPLES,)))
model, loop = mlp(64, 1024, depth=2), Loop(args)
opt = torch.optim.Adam(model.parameters(), foreach=False)
loop.train(DataLoader(data, batch_size=BATCH), model, opt)
