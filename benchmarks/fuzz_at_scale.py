"""Hostile-input fuzz at scale: ≥ 10⁵ damaged, odd and hostile inputs through ``gpusleuth report --json``.

The generator and the classifier are tests/fuzz_inputs.py (the test suite runs a few hundred of the same
cases). Here every seed × mutator family is run again and again with new random seeds (new bit-flip
positions, cut points, spliced bytes, field choices) across worker processes, in-process per worker (the
CLI's ``main``), until ``--cases`` cases or ``--minutes`` have run. A sample (``--console-every``,
``--html-every``) also goes through the console and HTML outputs.

    python benchmarks/fuzz_at_scale.py --cases 100000 --workers 2
    python benchmarks/fuzz_at_scale.py --minutes 20 --workers 2 --bugs /tmp/fuzz-bugs.txt

Prints the count per outcome class and per family; exits 1 if any traceback, hang or wrong answer was
seen (each listed with its reader, seed, rng seed and case name so it can be replayed).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

import fuzz_inputs as F  # noqa: E402

_REFS: dict[tuple[int, int], dict | None] = {}
_TMP: Path | None = None


def _init() -> None:
    global _TMP
    _TMP = Path(tempfile.mkdtemp(prefix="gpusleuth-fuzz-"))


def _task(args: tuple[int, int, int, int, int]) -> tuple[Counter, Counter, list[str]]:
    reader_ix, seed_ix, rng_seed, console_every, html_every = args
    reader = F.READERS[reader_ix]
    seed = reader.seeds()[seed_ix]
    key = (reader_ix, seed_ix)
    if key not in _REFS:
        _REFS[key] = F.reference_report(seed, _TMP)
    classes: Counter = Counter()
    families: Counter = Counter()
    bugs = []
    for i, case in enumerate(reader.cases(seed, random.Random(rng_seed))):
        kw = {}
        if console_every and i % console_every == 0:
            kw["console"] = True
        if html_every and i % html_every == 0:
            kw["html"] = _TMP / "r.html"
        o = F.run_case(case, _TMP, _REFS[key], **kw)
        classes[o.cls] += 1
        families[(reader.name, case.name.split("/")[0], o.cls)] += 1
        if o.cls in F.BUGS:
            bugs.append(f"{reader.name} {seed.name} rng={rng_seed} {o.case}: {o.cls}: {o.detail[-600:]!r}")
    return classes, families, bugs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", type=int, default=100_000)
    ap.add_argument("--minutes", type=float, default=None, help="stop after this long (whatever the count)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--console-every", type=int, default=10, help="every Nth case also through the console")
    ap.add_argument("--html-every", type=int, default=50, help="every Nth case also through --html")
    ap.add_argument("--bugs", type=Path, default=None, help="write every bug found to this file")
    ap.add_argument("--json", action="store_true", help="print the counts as JSON")
    args = ap.parse_args()

    tasks = []
    for rng_seed in range(1, 10**6):
        for r, reader in enumerate(F.READERS):
            tasks.extend((r, s, rng_seed, args.console_every, args.html_every) for s in range(len(reader.seeds())))
        if len(tasks) * 150 > args.cases * 2:
            break
    random.Random(0).shuffle(tasks)
    classes: Counter = Counter()
    families: Counter = Counter()
    bugs: list[str] = []
    t0 = time.monotonic()
    deadline = t0 + args.minutes * 60 if args.minutes else None
    with mp.get_context("fork").Pool(args.workers, initializer=_init) as pool:
        for c, f, b in pool.imap_unordered(_task, tasks):
            classes.update(c)
            families.update(f)
            bugs.extend(b)
            n = sum(classes.values())
            if n >= args.cases or (deadline and time.monotonic() > deadline):
                pool.terminate()
                break
    wall = time.monotonic() - t0
    n = sum(classes.values())
    if args.bugs:
        args.bugs.write_text("\n".join(bugs) + "\n")
    if args.json:
        print(json.dumps({"cases": n, "wall_s": wall, "classes": classes,
                          "families": {"/".join(k): v for k, v in sorted(families.items())}}, indent=1))
    else:
        print(f"{n:,} cases in {wall / 60:.1f} min ({n / wall:.0f}/s, {args.workers} workers)")
        for cls, k in classes.most_common():
            print(f"  {cls:10s} {k:8,d}")
        print("by family (reader/family: class counts)")
        fam: dict[str, Counter] = {}
        for (reader, family, cls), k in families.items():
            fam.setdefault(f"{reader}/{family}", Counter())[cls] += k
        for name in sorted(fam):
            print(f"  {name:24s} " + ", ".join(f"{c} {k:,}" for c, k in fam[name].most_common()))
        for b in bugs[:20]:
            print("BUG", b)
    return 1 if bugs else 0


if __name__ == "__main__":
    sys.exit(main())
