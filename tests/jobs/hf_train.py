"""A tiny real Hugging Face Trainer job on CPU (no downloads: a BERT config built in code, random tokens):
evaluation and a checkpoint every 20 steps. ``--callback`` adds gpusleuth's GpusleuthCallback."""

import argparse
import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"input_ids": torch.randint(0, 500, (32,), generator=g), "labels": torch.tensor(i % 2)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--callback", action="store_true")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, max_position_embeddings=64, num_labels=2)
    callbacks = []
    if args.callback:
        from gpusleuth.integrations.hf import GpusleuthCallback

        callbacks.append(GpusleuthCallback())
    targs = TrainingArguments(
        output_dir=args.out, max_steps=60, per_device_train_batch_size=8, per_device_eval_batch_size=16,
        eval_strategy="steps", eval_steps=20, save_strategy="steps", save_steps=20, logging_steps=10,
        report_to="none", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
    )
    trainer = Trainer(model=BertForSequenceClassification(config), args=targs, train_dataset=Tokens(60 * 8),
                      eval_dataset=Tokens(64), callbacks=callbacks)
    trainer.train()
    print("hf job done", trainer.state.global_step, file=sys.stderr)


if __name__ == "__main__":
    main()
