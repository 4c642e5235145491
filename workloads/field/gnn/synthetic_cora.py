"""A graph in the Cora files' format, made here: ``python synthetic_cora.py DIR`` writes ``DIR/cora/cora.content``
and ``DIR/cora/cora.cites``, which the GAT and GCN examples' own ``load_cora`` reads unchanged.

Why synthetic: the examples download Cora (linqs-data.soe.ucsc.edu) on every run; the corpus runs offline.
Why Cora's shape: the examples split nodes by fixed counts (GAT: 1,200 test, 400 validation, the rest
training; GCN: 1,000 / 500 / rest), so the graph needs Cora's 2,708 papers; 5,429 citations and 7 classes as
Cora has. Features: 500 binary words a paper (Cora: 1,433), about 18 set per paper as in Cora, so that
numpy's text reader takes ~1 s, not ~5. Seeded: every run reads the same graph. Our file, not the examples'.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

NODES, EDGES, WORDS, WORDS_PER_PAPER = 2708, 5429, 500, 18
CLASSES = ("Case_Based", "Genetic_Algorithms", "Neural_Networks", "Probabilistic_Methods",
           "Reinforcement_Learning", "Rule_Learning", "Theory")


def write(folder: Path, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    out = folder / "cora"
    out.mkdir(parents=True, exist_ok=True)
    ids = rng.choice(np.arange(1, 1_200_000), NODES, replace=False)
    labels = rng.integers(0, len(CLASSES), NODES)
    words = np.zeros((NODES, WORDS), dtype=np.int8)
    for i in range(NODES):  # papers of a class share vocabulary: a learnable signal, as in Cora
        pool = (labels[i] * 60 + rng.integers(0, 120, WORDS_PER_PAPER)) % WORDS
        words[i, pool] = 1
    lines = [f"{ids[i]}\t" + "\t".join(map(str, words[i])) + f"\t{CLASSES[labels[i]]}" for i in range(NODES)]
    (out / "cora.content").write_text("\n".join(lines) + "\n")
    cited = rng.integers(0, NODES, EDGES)
    same = rng.random(EDGES) < 0.8  # citations mostly within a class
    citing = np.where(same, [rng.choice(np.flatnonzero(labels == labels[c])) for c in cited],
                      rng.integers(0, NODES, EDGES))
    (out / "cora.cites").write_text("".join(f"{ids[a]}\t{ids[b]}\n" for a, b in zip(cited, citing)))
    return out


if __name__ == "__main__":
    print(write(Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
