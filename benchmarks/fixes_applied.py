"""Every true HIGH of the field corpus, its named fix applied: gpusleuth's predicted speed-up against the
script's own clock, plain and fixed run alternately (issue 31's must-show: "every true HIGH's fix applied with
predicted vs measured").

Usage: PYTHONPATH=src python benchmarks/fixes_applied.py [--only NAME,...] [--pairs 3]   (prints Markdown)

Per script: one ``gpusleuth run`` of the unchanged script gives the finding, its fix and its predicted
ratio for the steps (1 ÷ (1 − the gain's share of step time); its headline speed-up is the whole loop's); then ``--pairs`` rounds of the unchanged script and a patched copy (the fix the finding
names, nothing else: ``FIXES`` below lists each edit), without gpusleuth, alternately, in the corpus's
environment (``OMP_NUM_THREADS=1``). Measured = the fixed copy's steady throughput ÷ the unchanged one's, by the
script's own clock (``corpus.steady_throughput``), each round; the table gives every round and the median.

The patch is applied only when the finding names that fix: a script whose finding names another (say, caching
the samples where no core is free) gets that fix's edit or is reported as not applied, never silently the other.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workloads" / "field"))
import corpus  # noqa: E402

from gpusleuth.pipeline.build import build_report  # noqa: E402
from gpusleuth.sources.rundir import load_run  # noqa: E402

WORKERS = "num_workers=1"  # what the workers fix says on this 2-core host with one core free
CACHE = "cache decoded/transformed samples"  # what the cheaper-loading fix says


@dataclass(frozen=True)
class Fix:
    """One fix as edits to the script's own files: (file relative to the script's folder, old text, new)."""

    names: str  # the text the finding's first fix line must contain for this edit to be the fix it names
    edits: tuple[tuple[str, str, str], ...]


_LOADER = "num_workers=1, persistent_workers=True, prefetch_factor=4"  # the finding's fix, verbatim
_LOADER_KW = "'num_workers': 1, 'persistent_workers': True, 'prefetch_factor': 4"
# the cheaper-loading fix for a data set made on the fly: every sample made once, before training (one epoch
# reads each sample once, so a cache filled during training would save nothing: this is "moved offline")
_CACHED = ("\n\ndef _cached(ds):  # FIX: every sample decoded and transformed once, before training\n"
           "    xs, ys = zip(*(ds[i] for i in range(len(ds))))\n"
           "    return torch.utils.data.TensorDataset(torch.stack(xs), torch.tensor(ys))\n")


def _cache(file: str, anchor: str, old: str, new: str) -> Fix:
    """The helper after ``anchor`` (an import line), and the training data set wrapped in it."""
    return Fix(CACHE, ((file, anchor, anchor + _CACHED), (file, old, new)))


FIXES: dict[str, list[Fix]] = {
    "mnist_cnn": [Fix(WORKERS, (("main.py", "train_kwargs = {'batch_size': args.batch_size}",
                                 f"train_kwargs = {{'batch_size': args.batch_size, {_LOADER_KW}}}"),))],
    "vae": [Fix(WORKERS, (("main.py", "kwargs = {'num_workers': 1, 'pin_memory': True} if use_accel else {}",
                           f"kwargs = {{{_LOADER_KW}}}"),)),
            _cache("main.py", "import torch.utils.data\n",
                   "    datasets.FakeData(2560, (1, 28, 28), 10, transform=transforms.ToTensor()),",
                   "    _cached(datasets.FakeData(2560, (1, 28, 28), 10, transform=transforms.ToTensor())),")],
    "mnist_rnn": [Fix(WORKERS, (("main.py", "kwargs = {'num_workers': 1, 'pin_memory': True} if args.accel else {}",
                                 f"kwargs = {{{_LOADER_KW}}}"),)),
                  _cache("main.py", "import torch.optim as optim\n",
                         "        datasets.FakeData(1280, (1, 28, 28), 10,  # CHANGE 1 (was MNIST, downloaded)\n"
                         "                       transform=transforms.Compose([\n"
                         "                           transforms.ToTensor(),\n"
                         "                           transforms.Normalize((0.1307,), (0.3081,))\n"
                         "                       ])),\n",
                         "        _cached(datasets.FakeData(1280, (1, 28, 28), 10,  # CHANGE 1 (was MNIST, downloaded)\n"
                         "                       transform=transforms.Compose([\n"
                         "                           transforms.ToTensor(),\n"
                         "                           transforms.Normalize((0.1307,), (0.3081,))\n"
                         "                       ]))),\n")],
    "torch_image_classifier": [Fix(WORKERS, (("train_torch.py", "        train_dataset,\n        batch_size=hparams.batch_size,\n",
                                              f"        train_dataset,\n        batch_size=hparams.batch_size, {_LOADER},\n"),))],
    "fabric_image_classifier": [Fix(WORKERS, (("train_fabric.py", "        train_dataset,\n        batch_size=hparams.batch_size,\n",
                                               f"        train_dataset,\n        batch_size=hparams.batch_size, {_LOADER},\n"),))],
    "lightning_autoencoder": [
        Fix(WORKERS, (("autoencoder.py", "return DataLoader(self.mnist_train, batch_size=self.batch_size)",
                       f"return DataLoader(self.mnist_train, batch_size=self.batch_size, {_LOADER})"),)),
        _cache("autoencoder.py", "import torch.nn.functional as F\n",
               "        dataset = torchvision.datasets.FakeData(60000, (1, 28, 28), 10, transform=transforms.ToTensor())",
               "        dataset = _cached(torchvision.datasets.FakeData(60000, (1, 28, 28), 10, "
               "transform=transforms.ToTensor()))")],
    "lightning_backbone": [
        Fix(WORKERS, (("backbone_image_classifier.py", "return DataLoader(self.mnist_train, batch_size=self.batch_size)",
                       f"return DataLoader(self.mnist_train, batch_size=self.batch_size, {_LOADER})"),)),
        _cache("backbone_image_classifier.py", "import torch\n",
               "        dataset = datasets.FakeData(60000, (1, 28, 28), 10, transform=transforms.ToTensor())",
               "        dataset = _cached(datasets.FakeData(60000, (1, 28, 28), 10, transform=transforms.ToTensor()))")],
    # LightningDataModule.from_datasets takes num_workers and no other loader argument: one epoch, one start-up
    "lightning_gan": [Fix(WORKERS, (("generative_adversarial_net.py",
                                     "transform=torchvision.transforms.ToTensor()), batch_size=64)",
                                     "transform=torchvision.transforms.ToTensor()), batch_size=64, num_workers=1)"),))],
    # both cores held by the two trainers: the finding names the cache, not workers
    "mnist_hogwild": [Fix(CACHE, (("main.py",
        "    dataset2 = datasets.FakeData(200, (1, 28, 28), 10, transform=transform)  # CHANGE 1\n",
        "    dataset2 = datasets.FakeData(200, (1, 28, 28), 10, transform=transform)  # CHANGE 1\n"
        "    dataset1 = torch.utils.data.TensorDataset(torch.stack([x for x, _ in dataset1]),\n"
        "                                              torch.tensor([y for _, y in dataset1]))\n"),))],
}


def chosen(name: str, fix_text: str) -> Fix | None:
    """The listed edit for the fix the finding names first (the earliest of the known fixes in its text);
    None when the script has no edit for that one — another listed fix is never substituted for it."""
    at = {k: fix_text.find(k) for k in (WORKERS, CACHE) if k in fix_text}
    if not at:
        return None
    first = min(at, key=lambda k: at[k])
    return next((f for f in FIXES.get(name, []) if f.names == first), None)


def verdict(predicted: float, measured: float) -> str:
    """Judged on the share of the steps' time saved (1 − 1/speed-up), as tests/test_field_corpus.py judges a
    fix: held within 10 points; above, the gain was under-predicted; below, the prediction missed (a HIGH
    whose fix does not pay is the worst outcome)."""
    def saved(x: float) -> float:
        return 1 - 1 / x

    err = saved(measured) - saved(predicted)
    if abs(err) <= 0.10:
        return f"✓ held ({err * 100:+.0f} pts)"
    return f"✓ conservative ({err * 100:+.0f} pts)" if err > 0 else f"✗ missed ({err * 100:+.0f} pts)"


def patched(script: corpus.Script, fix: Fix, into: Path) -> corpus.Script:
    """A copy of the script's folder with the fix's edits; each edit must match exactly once."""
    folder = script.file.parent
    dest = into / folder.name
    shutil.copytree(folder, dest)
    for rel, old, new in fix.edits:
        f = dest / rel
        text = f.read_text()
        if text.count(old) != 1:
            raise SystemExit(f"{script.name}: the edit for {rel} matches {text.count(old)} times")
        f.write_text(text.replace(old, new))
    return corpus.Script(**{**script.__dict__, "path": str(dest / script.file.name)})


def run_plain(script: corpus.Script, cwd: Path) -> float:
    """The script without gpusleuth; its own clock's steady throughput."""
    cwd.mkdir(parents=True, exist_ok=True)
    for d in script.mkdirs:
        (cwd / d).mkdir(parents=True, exist_ok=True)
    if script.prepare:
        subprocess.run([sys.executable, str(corpus.FIELD / script.prepare), str(cwd)], check=True,
                       capture_output=True, timeout=120)
    args = [a.replace("{tmp}", str(cwd)) for a in script.args]
    res = subprocess.run([sys.executable, *script.launcher, str(script.file), *args], capture_output=True, text=True,
                         timeout=script.timeout, env=corpus.environment(script),
                         cwd=script.file.parent if script.in_own_folder else cwd)
    if res.returncode != 0:
        raise SystemExit(f"{script.name} failed (exit {res.returncode}): {res.stderr[-2000:]}")
    return corpus.steady_throughput(script.parse(res.stdout + res.stderr, script))


def predicted(script: corpus.Script, work: Path) -> tuple[str, float | None, str]:
    """(the HIGH's cause, its predicted throughput ratio, its fix) from one recording of the unchanged script."""
    res = corpus.record(script, work / "run", False, work)
    if res.returncode != 0:
        raise SystemExit(f"{script.name} failed under gpusleuth: {res.stderr[-2000:]}")
    rep = build_report(load_run(work / "run"))
    high = [f for f in rep.findings if f.severity == "high" and f.cause in script.true_high]
    if not high:
        return "no HIGH", None, ""
    f = high[0]
    if f.estimated_gain is None:
        return f.cause, None, f.fix
    # the steps' own ratio (the clock times steady steps; the gain's speedup is the whole loop's, phases
    # such as a test pass included, which the fix leaves as they are)
    return f.cause, 1 / (1 - f.estimated_gain.step_share) if f.estimated_gain.step_share < 1 else None, f.fix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated script names (default: every true HIGH)")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--apply", choices=("named", "workers", "cache"), default="named",
                    help="the fix the finding names first (default), or a listed one regardless (to measure it)")
    a = ap.parse_args()
    names = [n for n in a.only.split(",") if n] or [s.name for s in corpus.SCRIPTS if s.true_high]
    print("| script | finding (load) | predicted | fix applied | measured, each round (samples/s unchanged → fixed) | "
          "median | verdict |")
    print("|---|---|---|---|---|---|---|")
    for name in names:
        script = corpus.BY_NAME[name]
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            load = os.getloadavg()[0]
            cause, pred, fix_text = predicted(script, work / "rec")
            fix = chosen(name, fix_text) if a.apply == "named" else next(
                (f for f in FIXES.get(name, []) if f.names == (WORKERS if a.apply == "workers" else CACHE)), None)
            if fix is None:
                print(f"| {name} | {cause} (load {load:.1f}) | ×{pred or 0:.2f} | none listed | not applied: "
                      f"{fix_text[:80]!r} | – | – |")
                continue
            fixed = patched(script, fix, work / "fixed")
            rounds = []
            for i in range(a.pairs):
                pair = [(script, "plain"), (fixed, "fixed")]
                got = {}
                for s, label in pair if i % 2 == 0 else pair[::-1]:
                    got[label] = run_plain(s, work / f"{label}{i}")
                rounds.append((got["plain"], got["fixed"]))
            ratios = [f / p for p, f in rounds]
            med = statistics.median(ratios)
            cells = ", ".join(f"×{r:.2f} ({p:,.0f} → {f:,.0f})" for r, (p, f) in zip(ratios, rounds))
            held = verdict(pred, med) if pred else "no prediction"
            named = "" if a.apply == "named" or chosen(name, fix_text) is fix else " (not the one named first)"
            print(f"| {name} | {cause} (load {load:.1f}–{os.getloadavg()[0]:.1f}) | ×{pred:.2f} | {fix.names}{named} | {cells} | "
                  f"×{med:.2f} | {held} |", flush=True)


if __name__ == "__main__":
    main()
