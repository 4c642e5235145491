"""Synthetic stand-in for nanoGPT's data/shakespeare_char (ours, not nanoGPT's; see ../../CHANGES.md): the
same files in the same format — train.bin / val.bin of uint16 character ids and meta.pkl with a 65-symbol
vocabulary — from a seeded random stream instead of the downloaded text. Run once; the outputs are committed."""
import os
import pickle

import numpy as np

here = os.path.dirname(__file__)
chars = sorted(set("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"))
rng = np.random.default_rng(1337)
rng.integers(0, len(chars), 40000, dtype=np.uint16).tofile(os.path.join(here, "train.bin"))
rng.integers(0, len(chars), 4000, dtype=np.uint16).tofile(os.path.join(here, "val.bin"))
with open(os.path.join(here, "meta.pkl"), "wb") as f:
    pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)),
                 "stoi": {c: i for i, c in enumerate(chars)}}, f)
