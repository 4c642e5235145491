"""precision (GPU only) — large fp32 matmuls with TF32 off. Fixed: bf16 autocast."""

import sys

import torch

from _common import Loop, mlp, parse, train_step

args = parse(__doc__)
if not torch.cuda.is_available():
    sys.exit("needs a CUDA GPU")
torch.backends.cuda.matmul.allow_tf32 = False
STEPS, BATCH = int(60 * args.scale), 4096
x, y = torch.randn(BATCH, 4096, device="cuda"), torch.randint(0, 10, (BATCH,), device="cuda")
model = mlp(4096, 4096, depth=4).cuda()
opt, loop = torch.optim.SGD(model.parameters(), lr=0.01), Loop(args)
loop.start()
for i in range(STEPS):
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.fixed):
        train_step(model, opt, x, y)
    loop.step(BATCH)
torch.cuda.synchronize()
loop.done()
