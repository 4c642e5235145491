"""Two-process DistributedDataParallel training on CPU (gloo), for per-rank live metrics; ~6 s of steps."""

import time

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

dist.init_process_group("gloo")
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(32, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
data = DataLoader(TensorDataset(torch.randn(4096, 32), torch.randint(0, 4, (4096,))), batch_size=16)
end = time.monotonic() + 6
for x, y in data:
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    time.sleep(0.01)
    if time.monotonic() > end:
        break
dist.destroy_process_group()
