"""Synthetic stand-in for word_language_model's data/wikitext-2 (ours, not the example's; see ../../CHANGES.md):
train.txt / valid.txt / test.txt of made-up words, 19 words a line (20 tokens with the <eos> data.py adds).
701 training lines = 14,020 tokens = 701 rows of batch 20, so with --bptt 35 the loop runs exactly the
20 batches its progress line announces (len(train_data) // bptt). Run once; the outputs are committed."""
import os
import random

here = os.path.dirname(__file__)
rng = random.Random(1337)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(1000)]
for name, lines in (("train.txt", 701), ("valid.txt", 60), ("test.txt", 60)):
    with open(os.path.join(here, name), "w") as f:
        for _ in range(lines):
            f.write(" ".join(rng.choice(words) for _ in range(19)) + "\n")
