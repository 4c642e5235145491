"""sync (GPU only) — `.item()` and a printed tensor every step force the host to wait for the device.
Fixed: accumulate on the device, read once at the end."""

import sys

import torch

from _common import Loop, mlp, parse, train_step

args = parse(__doc__)
if not torch.cuda.is_available():
    sys.exit("needs a CUDA GPU")
STEPS, BATCH = int(200 * args.scale), 256
x, y = torch.randn(BATCH, 1024, device="cuda"), torch.randint(0, 10, (BATCH,), device="cuda")
model = mlp(1024, 2048, depth=4).cuda()
opt, loop = torch.optim.SGD(model.parameters(), lr=0.01), Loop(args)
running = torch.zeros((), device="cuda")
loop.start()
for i in range(STEPS):
    loss = train_step(model, opt, x, y)
    if args.planted:
        _ = loss.item()  # the planted per-step sync
        _ = str(model[0].weight[0, :4])
    else:
        running += loss.detach()
    loop.step(BATCH)
torch.cuda.synchronize()
loop.done()
