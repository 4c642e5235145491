"""host.launch_bound (GPU only) — a deep stack of tiny layers: thousands of microsecond kernels per step.
Fixed: torch.compile(mode="reduce-overhead") (fusion + CUDA graphs)."""

import sys

import torch

from _common import Loop, mlp, parse, train_step

args = parse(__doc__)
if not torch.cuda.is_available():
    sys.exit("needs a CUDA GPU")
STEPS, BATCH = int(100 * args.scale), 8
x, y = torch.randn(BATCH, 32, device="cuda"), torch.randint(0, 10, (BATCH,), device="cuda")
model = mlp(32, 32, depth=48).cuda()
if args.fixed:
    model = torch.compile(model, mode="reduce-overhead")
opt, loop = torch.optim.SGD(model.parameters(), lr=0.01, foreach=True), Loop(args)
loop.start()
for i in range(STEPS):
    train_step(model, opt, x, y)
    loop.step(BATCH)
torch.cuda.synchronize()
loop.done()
