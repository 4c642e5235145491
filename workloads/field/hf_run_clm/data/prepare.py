"""Offline inputs for run_clm.py (ours, not the example's; see ../CHANGES.md): ``train.txt`` — lines of made-up
words — and ``tokenizer/`` — a byte-level BPE tokenizer (GPT-2's kind, 512 tokens) trained on that text with
the ``tokenizers`` library and saved as a transformers tokenizer, since the script loads one by name or path
and the hub is out of reach. Run once; the outputs are committed."""
import os
import random

from tokenizers import ByteLevelBPETokenizer
from transformers import PreTrainedTokenizerFast

here = os.path.dirname(os.path.abspath(__file__))
rng = random.Random(1337)
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 8))) for _ in range(400)]
path = os.path.join(here, "train.txt")
with open(path, "w") as f:
    for _ in range(600):
        f.write(" ".join(rng.choice(words) for _ in range(12)) + "\n")
bpe = ByteLevelBPETokenizer()
bpe.train([path], vocab_size=512, min_frequency=2, special_tokens=["<|endoftext|>"])
tok = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<|endoftext|>",
                              eos_token="<|endoftext|>", unk_token="<|endoftext|>", model_max_length=128)
tok.save_pretrained(os.path.join(here, "tokenizer"))
