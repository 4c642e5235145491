"""phase.checkpoint — model + optimizer state saved to disk every 2 steps.
Fixed: every 20 steps (10× less often), what the rule's estimate assumes."""

import os
import tempfile

import torch

from _common import Loop, memory_loader, mlp, parse, train_step

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(200 * args.scale), 32
EVERY = 2 if args.planted else 20
x_all, y_all = torch.randn(STEPS * BATCH, 256), torch.randint(0, 10, (STEPS * BATCH,))
model, loop = mlp(256, 768, depth=2), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
out = tempfile.mkdtemp(prefix="scenario-ckpt-")
loop.start()
for i, (x, y) in enumerate(memory_loader(x_all, y_all, BATCH), 1):
    train_step(model, opt, x, y)
    loop.step(len(x))
    if i % EVERY == 0:
        path = os.path.join(out, "last.pt")
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": i}, path)
        with open(path, "rb+") as f:
            os.fsync(f.fileno())  # a real checkpoint must reach the disk
loop.done()
