"""A Hugging Face ``Trainer`` job on a tiny GPT-2 built in code (no download): evaluation every
``--eval-steps`` steps and safetensors checkpoints every ``--save-steps``. Truth: steps, the optimizer's
own work, evaluation and save time, timed by the job through a ``TrainerCallback`` and a timed optimizer.

Usage: python workloads/hf_trainer.py [--steps N] [--eval-steps N] [--save-steps N] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

import torch  # noqa: E402
from transformers import (GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback,  # noqa: E402
                          TrainingArguments)

from _truth import Truth, timed_optimizer  # noqa: E402

TRUTH = Truth("hf_trainer")


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int = 32):
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, 128, (n, seq), generator=g)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Clock(TrainerCallback):
    def on_step_begin(self, args, state, control, **kw):
        self.t = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        TRUTH.steps.append(time.perf_counter() - self.t)

    def on_evaluate(self, args, state, control, **kw):
        pass


class TimedTrainer(Trainer):
    def evaluate(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return super().evaluate(*a, **k)
        finally:
            TRUTH.add("evaluate", time.perf_counter() - t0)

    def _save_checkpoint(self, *a, **k):
        t0 = time.perf_counter()
        try:
            return super()._save_checkpoint(*a, **k)
        finally:
            TRUTH.add("save", time.perf_counter() - t0)

    def create_optimizer(self, model=None):
        if self.optimizer is None:
            self.optimizer = timed_optimizer(torch.optim.AdamW, TRUTH)(self.model.parameters(),
                                                                       lr=self.args.learning_rate)
        return self.optimizer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--eval-steps", type=int, default=10)
    ap.add_argument("--save-steps", type=int, default=20)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    cfg = GPT2Config(vocab_size=128, n_positions=32, n_embd=64, n_layer=2, n_head=2)
    args = TrainingArguments(
        output_dir=a.out or tempfile.mkdtemp(), max_steps=a.steps, per_device_train_batch_size=8,
        per_device_eval_batch_size=8, eval_strategy="steps", eval_steps=a.eval_steps, save_strategy="steps",
        save_steps=a.save_steps, logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, seed=0,
    )
    trainer = TimedTrainer(model=GPT2LMHeadModel(cfg), args=args, train_dataset=Tokens(a.steps * 8),
                           eval_dataset=Tokens(64), callbacks=[Clock()])
    trainer.train()
    TRUTH.values["samples_per_step"] = 8
    TRUTH.emit()


if __name__ == "__main__":
    main()
