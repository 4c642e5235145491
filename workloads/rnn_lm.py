"""A hand-updated RNN language model in the shape of pytorch/examples' word_language_model: no optimizer
(``p.data.add_(p.grad, alpha=-lr)``), validation after every epoch, the best model saved with
``torch.save``, and after training: reload the best model and evaluate on the test set — work that runs
entirely after the last step. Truth: steps, the validations inside the loop, and the after-training time
(the last validation, its save, the reload and the test), timed by the job itself.

Usage: python workloads/rnn_lm.py [--epochs N] [--batches N] [--eval-batches N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

from _truth import Truth  # noqa: E402

TRUTH = Truth("rnn_lm")
VOCAB, BPTT, BSZ = 200, 20, 8


class RNNModel(torch.nn.Module):
    def __init__(self, d: int = 64):
        super().__init__()
        self.encoder = torch.nn.Embedding(VOCAB, d)
        self.rnn = torch.nn.LSTM(d, d, 2)
        self.decoder = torch.nn.Linear(d, VOCAB)

    def forward(self, x, hidden):
        out, hidden = self.rnn(self.encoder(x), hidden)
        return self.decoder(out).view(-1, VOCAB), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(2, bsz, 64), w.new_zeros(2, bsz, 64))


def evaluate(model, data, batches):
    model.eval()
    total = 0.0
    hidden = model.init_hidden(BSZ)
    with torch.no_grad():
        for i in range(batches):
            x, y = data[i]
            out, hidden = model(x, hidden)
            total += torch.nn.functional.cross_entropy(out, y.view(-1)).item()
    return total / batches


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--eval-batches", type=int, default=30)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    make = lambda n: [(torch.randint(0, VOCAB, (BPTT, BSZ)), torch.randint(0, VOCAB, (BPTT, BSZ)))  # noqa: E731
                      for _ in range(n)]
    train, val, test = make(a.batches), make(a.eval_batches), make(a.eval_batches)
    model = RNNModel()
    path = os.path.join(tempfile.mkdtemp(), "model.pt")
    lr, best = 0.5, None
    for epoch in range(a.epochs):
        model.train()
        hidden = model.init_hidden(BSZ)
        for x, y in train:
            t0 = time.perf_counter()
            hidden = tuple(h.detach() for h in hidden)
            model.zero_grad()
            out, hidden = model(x, hidden)
            torch.nn.functional.cross_entropy(out, y.view(-1)).backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            TRUTH.steps.append(time.perf_counter() - t0)
        last = epoch == a.epochs - 1
        t0 = time.perf_counter()
        val_loss = evaluate(model, val, a.eval_batches)
        if best is None or val_loss < best:
            best = val_loss
            with open(path, "wb") as f:
                torch.save(model, f)
        TRUTH.add("after_training" if last else "validation_in_loop", time.perf_counter() - t0)
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        model = torch.load(f, weights_only=False)
    evaluate(model, test, a.eval_batches)
    TRUTH.add("after_training", time.perf_counter() - t0)
    TRUTH.emit()


if __name__ == "__main__":
    main()
