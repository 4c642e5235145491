"""input.io with workers — one DataLoader worker waiting on high-latency reads can't keep up.
Fixed: 8 workers (the rule asks for at least latency ÷ compute + 1), each waiting in parallel."""

import torch
from torch.utils.data import DataLoader

from _common import Loop, mlp, parse, remote_shards

args = parse(__doc__, lambda p: p.add_argument(
    "--sharing-strategy", help="torch.multiprocessing sharing strategy (file_system: no per-tensor hand-shake)"))
torch.set_num_threads(1)
if args.sharing_strategy:
    torch.multiprocessing.set_sharing_strategy(args.sharing_strategy)
STEPS, BATCH, LATENCY = int(100 * args.scale), 64, 0.015


workers = 1 if args.planted else 8
loader = DataLoader(remote_shards(STEPS, BATCH, LATENCY), batch_size=None, num_workers=workers,
                    persistent_workers=True, prefetch_factor=4)
model, loop = mlp(512, 1024), Loop(args)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
loop.train(loader, model, opt)
