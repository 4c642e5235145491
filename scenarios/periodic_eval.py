"""phase.eval — a full evaluation pass every 10 training steps (expected work, but costly).
Fixed: evaluate 4× less often (every 40 steps), what the rule's estimate assumes."""

import torch
from torch.utils.data import DataLoader, TensorDataset

from _common import Loop, memory_loader, mlp, parse, train_step

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(160 * args.scale), 32
EVERY = 10 if args.planted else 40
x_all, y_all = torch.randn(STEPS * BATCH, 256), torch.randint(0, 10, (STEPS * BATCH,))
val = TensorDataset(torch.randn(2048, 256), torch.randint(0, 10, (2048,)))
model, loop = mlp(256, 512), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.start()
for i, (x, y) in enumerate(memory_loader(x_all, y_all, BATCH), 1):
    train_step(model, opt, x, y)
    loop.step(len(x))
    if i % EVERY == 0:
        model.eval()
        with torch.no_grad():
            correct = sum((model(vx).argmax(1) == vy).sum().item() for vx, vy in DataLoader(val, batch_size=16))
        model.train()
loop.done()
