"""host.python — the loss is computed by a per-sample Python loop (hundreds of tiny ops per step).
Fixed: one vectorized F.cross_entropy. Needs a profiler trace: run with --profile-steps 5-14."""

import torch
import torch.nn.functional as F

from _common import Loop, memory_loader, mlp, parse

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(120 * args.scale), 64
x_all, y_all = torch.randn(STEPS * BATCH, 256), torch.randint(0, 10, (STEPS * BATCH,))
model, loop = mlp(256, 512), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.start()
for x, y in memory_loader(x_all, y_all, BATCH):
    out = model(x)
    if args.planted:
        loss = 0
        for i in range(out.shape[0]):  # the planted per-sample loop
            loss = loss + (out[i].logsumexp(0) - out[i][y[i]])
        loss = loss / out.shape[0]
    else:
        loss = F.cross_entropy(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    loop.step(len(x))
loop.done()
