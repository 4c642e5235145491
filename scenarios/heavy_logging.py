"""phase.logging — every step logs per-parameter statistics (norms, histograms) formatted as text.
Fixed: log every 10 steps. The logging is marked with gpusleuth.phase("logging") (a no-op outside
gpusleuth), the explicit API for phases the hook cannot see by itself."""

import io

import torch

from _common import Loop, memory_loader, mlp, parse, train_step

try:
    import gpusleuth
    phase = gpusleuth.phase
except ImportError:  # pragma: no cover
    import contextlib
    phase = lambda name: contextlib.nullcontext()  # noqa: E731

args = parse(__doc__)
torch.set_num_threads(1)
STEPS, BATCH = int(100 * args.scale), 32
EVERY = 1 if args.planted else 10
x_all, y_all = torch.randn(STEPS * BATCH, 256), torch.randint(0, 10, (STEPS * BATCH,))
model, loop = mlp(256, 512), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
sink = io.StringIO()
loop.start()
for i, (x, y) in enumerate(memory_loader(x_all, y_all, BATCH), 1):
    loss = train_step(model, opt, x, y)
    loop.step(len(x))
    if i % EVERY == 0:
        with phase("logging"):
            for name, p in model.named_parameters():
                hist = torch.histc(p.detach(), bins=64)
                sink.write(f"{i} {name} norm={p.norm().item():.4f} grad={p.grad.norm().item():.4f} "
                           f"loss={loss.item():.4f} hist={hist.tolist()} sample={p.detach().flatten()[:256]}\n")
loop.done()
