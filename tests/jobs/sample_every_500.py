"""The shape of minGPT's chargpt (issue 27, defect 2): after each iteration a callback prints the loss every
10 iterations and, at iteration 0 and then every 500, puts the model in eval mode, samples text from it
autoregressively, saves a checkpoint and goes back to training. A run shorter than 500 iterations sees the
eval/sample/save once, at the very start — no cadence to advise on. Written for the test (a tiny
character model on random tokens), not copied from minGPT."""

import argparse
import os
import tempfile

import torch
from torch import nn


class CharModel(nn.Module):
    def __init__(self, vocab: int = 65, width: int = 128, block: int = 32):
        super().__init__()
        self.block = block
        self.emb = nn.Embedding(vocab, width)
        self.mix = nn.Sequential(nn.Linear(width, width), nn.GELU(), nn.Linear(width, width))
        self.head = nn.Linear(width, vocab)

    def forward(self, idx):
        return self.head(self.mix(self.emb(idx)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=60)
    ap.add_argument("--sample-every", type=int, default=500)
    ap.add_argument("--sample-len", type=int, default=300)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = CharModel()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    data = torch.randint(0, 65, (4096,))
    ckpt = os.path.join(tempfile.mkdtemp(), "model.pt")
    for it in range(args.iters):
        ix = torch.randint(0, len(data) - model.block - 1, (16,))
        x = torch.stack([data[i:i + model.block] for i in ix])
        y = torch.stack([data[i + 1:i + 1 + model.block] for i in ix])
        loss = nn.functional.cross_entropy(model(x).view(-1, 65), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        # the callback after each batch
        if it % 10 == 0:
            print(f"iter {it}: train loss {loss.item():.4f}", flush=True)
        if it % args.sample_every == 0:
            model.eval()
            with torch.no_grad():
                ctx = torch.zeros((1, 1), dtype=torch.long)
                for _ in range(args.sample_len):
                    nxt = torch.multinomial(torch.softmax(model(ctx[:, -model.block:])[:, -1], -1), 1)
                    ctx = torch.cat([ctx, nxt], dim=1)
            torch.save(model.state_dict(), ckpt)
            model.train()


if __name__ == "__main__":
    main()
