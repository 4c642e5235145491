"""input.transfer (GPU only) — large batches copied from pageable memory each step, synchronously.
Fixed: pinned memory and non_blocking copies."""

import sys

import torch

from _common import Loop, mlp, parse, train_step

args = parse(__doc__)
if not torch.cuda.is_available():
    sys.exit("needs a CUDA GPU")
STEPS, BATCH = int(60 * args.scale), 512
xs = [torch.randn(BATCH, 8192) for _ in range(4)]
if args.fixed:
    xs = [x.pin_memory() for x in xs]
y = torch.randint(0, 10, (BATCH,), device="cuda")
model = mlp(8192, 256).cuda()
opt, loop = torch.optim.SGD(model.parameters(), lr=0.01), Loop(args)
loop.start()
for i in range(STEPS):
    x = xs[i % 4].to("cuda", non_blocking=args.fixed)
    train_step(model, opt, x, y)
    loop.step(BATCH)
torch.cuda.synchronize()
loop.done()
