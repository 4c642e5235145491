"""The field corpus: real public training scripts, vendored with their licences, each read by its own clock.

Every script in this folder is a public example people actually run (pytorch/examples, Lightning's examples,
minGPT, nanoGPT, transformers, the PyTorch tutorials), changed only as far as it takes to run offline on
CPU with synthetic data in seconds; each folder's CHANGES.md lists every change, and the changed lines carry
``# CHANGE n``. The referee is the script's own clock: what it already prints (imagenet's ``Time``/``Data``
columns, nanoGPT's ``iter N: ... time X ms``, minGPT's iteration timings), or — where a script prints no
timing — one added line per step, ``FIELD_CLOCK step=N t=<perf_counter> samples=S [tokens=T]``
(:func:`field_clock`), itself a listed change.

``SCRIPTS`` is the registry; :func:`record` runs one under ``gpusleuth run``; :func:`check` compares what
gpusleuth measured with the clock. ``tests/test_field_corpus.py`` asserts the comparison for every script,
with and without ``--profile-steps``; ``benchmarks/field_corpus.py`` prints the table in BENCHMARKS.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

FIELD = Path(__file__).resolve().parent
# torchvision's PyPI wheel for torch 2.13.0 is a CUDA build whose ops do not load beside the CPU torch: the
# scripts import a verbatim pure-Python subset of it instead (_torchvision/CHANGES.md says which and why)
TORCHVISION = FIELD / "_torchvision"

# The acceptance bands of issue 27: steps exact; step time, data wait and throughput within 10 %.
REL = 0.10
STARVED = 0.8  # the training loop ran under this share of the time it was runnable: a crowded host


@dataclass
class Clock:
    """What the script says about itself, read from its own output."""

    steps: int  # optimizer steps it ran, by its own count
    step_s: list[float]  # its per-step times, in order (a clock of timestamps gives one fewer than steps;
    # NaN for a step it did not time: minGPT prints one iteration in ten)
    data_s: list[float] | None = None  # its per-step data wait, where it measures one
    samples_per_step: float | None = None
    tokens_per_step: float | None = None
    first_timed: int = 1  # the 1-based step the first entry of step_s belongs to
    rank_step_s: dict[int, list[float]] | None = None  # a distributed script's clock, rank by rank (trainers
    # without ranks, Hogwild's: by process id)


@dataclass(frozen=True)
class Script:
    """One corpus entry: how to run the script and how to read its own clock."""

    name: str
    family: str
    path: str  # relative to workloads/field
    args: tuple[str, ...]
    parse: Callable[[str, "Script"], Clock]
    launcher: tuple[str, ...] = ()  # e.g. ("-m", "torch.distributed.run", ...): put between python and the script
    needs: tuple[str, ...] = ()  # modules it imports beyond torch (the test skips without them)
    # HIGH findings that are true for this script, each with the structural reason it is true
    true_high: dict[str, str] = field(default_factory=dict)
    profile_steps: str = "4-6"
    env: tuple[tuple[str, str], ...] = ()
    timeout: int = 300
    in_own_folder: bool = False  # run from the script's folder (it reads config and data by relative path)
    pythonpath: tuple[str, ...] = ()  # folders (relative to workloads/field) the script imports from
    # the torchvision subset on its path (transformers takes any torchvision for the whole package and
    # imports torchvision.io, which the subset lacks: run_clm needs none)
    torchvision: bool = True
    mkdirs: tuple[str, ...] = ()  # folders the script expects where it runs (the example repo ships them)
    profiled_too: bool = True  # also checked under --profile-steps (not the compile job: minutes on 2 cores)
    prepare: str | None = None  # a script (relative to workloads/field) run first with the run folder as its
    # argument: it writes the data the example would download (ours, not the example's)
    batch_shared_by: int = 1  # ranks that work on one batch (tensor parallelism: every rank reads the same
    # input), by the script's own structure: the job's throughput by its clock counts each batch once

    @property
    def file(self) -> Path:
        return FIELD / self.path

    def arg(self, name: str) -> str:
        """The value after ``name`` in the arguments (``--x v`` or ``--x=v``)."""
        for i, a in enumerate(self.args):
            if a == name:
                return self.args[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        raise KeyError(name)


# ---------------------------------------------------------------- clock parsers


# not anchored to a line's start: two ranks share one stdout, and a line can follow another's unfinished output
FIELD_CLOCK = re.compile(
    r"FIELD_CLOCK step=(\d+) t=([0-9.]+) samples=(\d+)(?: tokens=(\d+))?(?: rank=(\d+))?(?: pid=(\d+))?")


def field_clock(text: str, script: Script | None = None) -> Clock:
    """The one added line per step (a listed change): timestamps at the same point of every iteration, so
    consecutive differences are the steps' own durations."""
    rows = FIELD_CLOCK.findall(text)
    if not rows:
        raise ValueError("no FIELD_CLOCK line in the script's output")
    # a distributed script prints its rank: rank 0's lines are the main process's clock, and the job's
    # throughput is every rank's own (its per-step count over its mean step after the first), summed;
    # trainers without ranks (Hogwild) print their process id instead, and are keyed by it
    def key(r) -> int:
        return int(r[4]) if r[4] else int(r[5]) if r[5] else 0

    ranks = sorted({key(r) for r in rows})
    by_rank = {k: [r for r in rows if key(r) == k] for k in ranks}
    mine = by_rank[ranks[0]]
    t = np.array([float(r[1]) for r in mine])
    tokens = [int(r[3]) for r in mine if r[3]]
    return Clock(steps=len(mine), step_s=np.diff(t).tolist(),
                 samples_per_step=float(np.median([int(r[2]) for r in mine])),
                 tokens_per_step=float(np.median(tokens)) if tokens else None, first_timed=2,
                 rank_step_s={k: np.diff([float(r[1]) for r in rr]).tolist() for k, rr in by_rank.items()}
                 if len(ranks) > 1 else None)


IMAGENET = re.compile(r"^Epoch: \[\d+\]\[\s*(\d+)/\s*\d+\]\tTime\s+([0-9.]+) \(.*?\)\tData\s+([0-9.]+) \(", re.M)


def imagenet_clock(text: str, script: Script) -> Clock:
    """pytorch/examples imagenet: ``Epoch: [0][ 5/20]\\tTime  0.123 ( 0.150)\\tData  0.001 ( 0.010)`` — the
    batch's own time (data wait included) and its data wait, every ``-p`` batches (run with ``-p 1``)."""
    rows = IMAGENET.findall(text)
    if not rows:
        raise ValueError("no imagenet progress line in the script's output")
    return Clock(steps=int(rows[-1][0]), step_s=[float(r[1]) for r in rows], data_s=[float(r[2]) for r in rows],
                 samples_per_step=float(script.arg("-b")), first_timed=int(rows[0][0]))


NANOGPT = re.compile(r"^iter (\d+): loss [0-9.]+, time ([0-9.]+)ms", re.M)
NANOGPT_TOKENS = re.compile(r"^tokens per iteration will be: ([0-9,]+)", re.M)


def nanogpt_clock(text: str, script: Script) -> Clock:
    """nanoGPT train.py: ``iter N: loss L, time T ms, mfu M%`` every ``log_interval`` iterations (run with 1),
    T the whole iteration by its own ``time.time()``; tokens per iteration as the script prints them
    (``tokens per iteration will be: 1,024``: every micro-batch of the accumulation counted)."""
    rows = NANOGPT.findall(text)
    tokens = NANOGPT_TOKENS.search(text)
    if not rows or tokens is None:
        raise ValueError("no nanoGPT iteration line in the script's output")
    tok = float(tokens.group(1).replace(",", ""))
    return Clock(steps=len(rows), step_s=[float(r[1]) / 1e3 for r in rows],
                 samples_per_step=tok / float(script.arg("--block_size")), tokens_per_step=tok,
                 first_timed=int(rows[0][0]) + 1)


WLM = re.compile(r"^\| epoch +\d+ \| +(\d+)/ *(\d+) batches \| lr [0-9.]+ \| ms/batch +([0-9.]+) \|", re.M)


def wlm_clock(text: str, script: Script) -> Clock:
    """pytorch/examples word_language_model: ``| epoch 1 | 10/ 20 batches | lr 20.00 | ms/batch 441.49 |``
    every ``--log-interval`` L batches, the mean over the batches since the last line. The first line's
    window holds L + 1 batches (0..L) divided by L, so it is left out; window k then covers steps
    (k-1)L+2 .. kL+1 (1-based), each given the window's mean."""
    rows = WLM.findall(text)
    if len(rows) < 2:
        raise ValueError("fewer than two word_language_model progress lines in the script's output")
    L = int(script.arg("--log-interval"))
    step_s = [float(r[2]) / 1e3 for r in rows[1:] for _ in range(L)]
    bsz, bptt = float(script.arg("--batch_size")), float(script.arg("--bptt"))
    return Clock(steps=int(rows[-1][1]), step_s=step_s, samples_per_step=bsz, tokens_per_step=bsz * bptt,
                 first_timed=L + 2)


MINGPT = re.compile(r"^iter_dt ([0-9.]+)ms; iter (\d+): train loss", re.M)


def mingpt_clock(text: str, script: Script) -> Clock:
    """minGPT chargpt: ``iter_dt 12.34ms; iter N: train loss L`` every 10 iterations, where ``iter_dt`` is
    iteration N's own duration counted 1-based (the trainer updates it after the callback prints); the
    trainer runs exactly ``--trainer.max_iters`` iterations."""
    rows = [(int(n), float(ms) / 1e3) for ms, n in MINGPT.findall(text) if int(n) > 0]
    if not rows:
        raise ValueError("no minGPT iter_dt line in the script's output")
    steps = int(script.arg("--trainer.max_iters"))
    step_s = [float("nan")] * steps
    for n, s in rows:
        step_s[n - 1] = s
    bsz, block = float(script.arg("--trainer.batch_size")), float(script.arg("--data.block_size"))
    return Clock(steps=steps, step_s=step_s, samples_per_step=bsz, tokens_per_step=bsz * block)


BENCH = re.compile(r"^time per iteration: ([0-9.]+)ms", re.M)


def bench_clock(text: str, script: Script) -> Clock:
    """nanoGPT bench.py: 10 burn-in iterations, then ``time per iteration: X ms`` over the next 20 (its own
    ``time.time()`` around the stage): steps 11-30 each given that mean."""
    m = BENCH.search(text)
    if m is None:
        raise ValueError("no 'time per iteration' line in bench.py's output")
    bsz, block = float(script.arg("--batch_size")), float(script.arg("--block_size"))
    return Clock(steps=30, step_s=[float(m.group(1)) / 1e3] * 20, samples_per_step=bsz, tokens_per_step=bsz * block,
                 first_timed=11)


REGRESSION = re.compile(r"^Loss: [0-9.]+ after (\d+) batches", re.M)


GNN = re.compile(r"^Epoch: (\d+) \(([0-9.]+)s\) loss_train", re.M)


def gnn_clock(text: str, script: Script) -> Clock:
    """pytorch/examples gat and gcn: ``Epoch: 0005 (0.5112s) loss_train: ...`` every ``--val-every`` epochs
    (run with 1), the seconds from the top of ``train_iter`` — the optimizer step *and* the two evaluation
    passes it makes every epoch — to the print. One full-graph step an epoch: every node goes through the
    forward (the samples of a step are the graph's nodes: ``NODES`` of gnn/synthetic_cora.py, which wrote it)."""
    rows = GNN.findall(text)
    if not rows:
        raise ValueError("no 'Epoch: N (T s)' line in the graph example's output")
    return Clock(steps=int(rows[-1][0]), step_s=[float(r[1]) for r in rows], samples_per_step=float(CORA_NODES),
                 first_timed=int(rows[0][0]))


def regression_clock(text: str, script: Script) -> Clock:
    """pytorch/examples regression: its own count (``Loss: L after N batches``) and the added clock line."""
    m = REGRESSION.search(text)
    if m is None:
        raise ValueError("no 'after N batches' line in the regression example's output")
    clock = field_clock(text, script)
    clock.steps = int(m.group(1))
    return clock


# ---------------------------------------------------------------- the corpus

# A true HIGH input.preprocessing, by the scripts' own structure: their DataLoaders get workers only on an
# accelerator (``{'num_workers': 1, ...} if use_cuda else {}`` in pytorch/examples; Lightning's examples and
# Fabric's twin pass none), so on CPU every sample is made on the training thread, and FakeData (our
# stand-in for MNIST, CHANGES.md) draws a random image, converts it to PIL and back to a tensor per sample.
# On a quiet 2-core host that loading is 24-88 % of each step (vae 80 %: 46 ms of 58; MNIST CNN 26 %: 29 ms
# of 113). The named fix applied (BENCHMARKS.md, "Field corpus: the HIGH findings' fixes applied"): one worker
# on the free core, as the finding predicts, gave the MNIST CNN ×1.29–1.33 (predicted ×1.33); on the VAE,
# where loading is 4× the compute, ×0.87–0.92 (predicted ×1.21: open, the worker's own cost per batch rose).
LOADING_ON_THE_TRAINING_THREAD = {
    "input.preprocessing": "num_workers=0 on CPU by the script's own choice, and FakeData's per-sample PIL "
                           "round trip is 24-88 % of every step on a quiet host"}

SCRIPTS: list[Script] = [
    Script("imagenet_resnet18", "torchvision classification (CNN)", "imagenet/main.py",
           ("--dummy", "-a", "resnet18", "--epochs", "1", "-b", "4", "-j", "2", "-p", "1",
            "--dummy-train", "80", "--dummy-val", "8", "--dummy-image", "112"),
           imagenet_clock),
    Script("lightning_autoencoder", "Lightning (LightningCLI, fit + test + predict)",
           "lightning_autoencoder/autoencoder.py",
           ("--trainer.max_epochs=1", "--trainer.limit_train_batches=60", "--trainer.limit_val_batches=4",
            "--trainer.limit_test_batches=4", "--trainer.limit_predict_batches=2"),
           field_clock, needs=("lightning", "jsonargparse"), profile_steps="10-14",
           true_high=LOADING_ON_THE_TRAINING_THREAD),
]

NANOGPT_ARGS = ("--dataset=synthetic", "--device=cpu", "--compile=False", "--dtype=float32", "--n_layer=2",
                "--n_head=2", "--n_embd=64", "--block_size=64", "--batch_size=8", "--max_iters=30",
                "--eval_interval=1000", "--eval_iters=4", "--log_interval=1", "--out_dir={tmp}/out")
SCRIPTS += [
    Script("nanogpt_accum2", "nanoGPT LM, no DataLoader, gradient accumulation ×2", "nanogpt/train.py",
           NANOGPT_ARGS + ("--gradient_accumulation_steps=2",), nanogpt_clock, in_own_folder=True),
    Script("nanogpt", "nanoGPT LM, no DataLoader, one micro-batch", "nanogpt/train.py",
           NANOGPT_ARGS + ("--gradient_accumulation_steps=1",), nanogpt_clock, in_own_folder=True),
    Script("nanogpt_compile", "torch.compile: nanoGPT LM with --compile=True (inductor, CPU)", "nanogpt/train.py",
           tuple(a for a in NANOGPT_ARGS if a != "--compile=False") + ("--compile=True", "--gradient_accumulation_steps=1"),
           nanogpt_clock, in_own_folder=True, timeout=600, profiled_too=False),
]

SCRIPTS += [
    Script("dcgan", "DCGAN (pytorch/examples), two optimizers an iteration, --dataset fake", "dcgan/main.py",
           ("--dataset", "fake", "--batchSize", "32", "--ngf", "16", "--ndf", "16", "--niter", "1",
            "--workers", "2"), field_clock),
    Script("vae", "VAE (pytorch/examples)", "vae/main.py", ("--epochs", "1"), field_clock, mkdirs=("results",),
           true_high=LOADING_ON_THE_TRAINING_THREAD),
    Script("mnist_cnn", "MNIST CNN (pytorch/examples mnist)", "mnist/main.py", ("--epochs", "1"), field_clock,
           true_high=LOADING_ON_THE_TRAINING_THREAD),
    Script("word_language_model", "word_language_model LSTM (pytorch/examples): hand-written SGD, no optimizer",
           "word_language_model/main.py",
           ("--data", str(FIELD / "word_language_model" / "data" / "synthetic"), "--epochs", "1",
            "--log-interval", "2", "--batch_size", "20", "--bptt", "35", "--save", "{tmp}/model.pt"), wlm_clock,
           # its steps end at backward() (no optimizer), held a second before they are written: the profiler
           # is stepped at each boundary as it happens, not as it is written (it traced steps 18-20 for "6-7")
           profile_steps="6-7"),
]

TORCHRUN = ("-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2")
SCRIPTS += [
    Script("ddp_torchrun", "torchrun DDP tutorial (pytorch/examples ddp-tutorial-series), 2 ranks on gloo",
           "ddp_tutorial/multigpu_torchrun.py", ("2", "1", "--batch_size", "32"), field_clock, launcher=TORCHRUN,
           profile_steps="10-14"),
    Script("fsdp2", "FSDP2 example (pytorch/examples distributed/FSDP2), 2 ranks on gloo", "fsdp2/example.py",
           (), field_clock, launcher=TORCHRUN, profile_steps="3-4"),
]

SCRIPTS += [
    Script("lightning_backbone", "Lightning backbone image classifier (LightningCLI; validation every 20 batches)",
           "lightning_backbone/backbone_image_classifier.py",
           ("--trainer.max_epochs=1", "--trainer.limit_train_batches=60", "--trainer.val_check_interval=20",
            "--trainer.limit_val_batches=4", "--trainer.limit_test_batches=4", "--trainer.limit_predict_batches=2"),
           field_clock, needs=("lightning", "jsonargparse"), profile_steps="30-34",
           true_high=LOADING_ON_THE_TRAINING_THREAD),
    Script("mingpt_chargpt", "minGPT chargpt (DataLoader; samples and saves at iteration 0)",
           "mingpt/projects/chargpt/chargpt.py",
           ("--trainer.max_iters=200", "--trainer.batch_size=16", "--trainer.num_workers=2", "--trainer.device=cpu",
            "--model.model_type=gpt-nano", "--data.block_size=64", "--system.work_dir='{tmp}/out'"),
           mingpt_clock, in_own_folder=True, pythonpath=("mingpt",), profile_steps="40-44"),
]

SCRIPTS += [
    Script("imagenet_vit_b_32", "torchvision classification (ViT-B/32) through imagenet main.py --dummy",
           "imagenet/main.py",
           ("--dummy", "-a", "vit_b_32", "--epochs", "1", "-b", "2", "-j", "2", "-p", "1",
            "--dummy-train", "24", "--dummy-val", "4", "--dummy-image", "224"),
           imagenet_clock),
    Script("mnist_rnn", "MNIST LSTM (pytorch/examples mnist_rnn)", "mnist_rnn/main.py", ("--epochs", "1"),
           field_clock,
           true_high=LOADING_ON_THE_TRAINING_THREAD),
    Script("fabric_image_classifier", "Lightning Fabric image classifier (fabric.backward, setup_dataloaders)",
           "fabric_image_classifier/train_fabric.py", ("--epochs", "1"), field_clock, needs=("lightning",),
           true_high=LOADING_ON_THE_TRAINING_THREAD),
    Script("torch_image_classifier", "the same classifier in plain PyTorch (Lightning's train_torch.py)",
           "fabric_image_classifier/train_torch.py", ("--epochs", "1"), field_clock,
           true_high=LOADING_ON_THE_TRAINING_THREAD),
]

CLM = FIELD / "hf_run_clm" / "data"
SCRIPTS += [
    Script("hf_run_clm", "HF Trainer: transformers' run_clm.py, a tiny GPT-2 from scratch on a text file",
           "hf_run_clm/run_clm.py",
           ("--model_type", "gpt2", "--config_overrides", "n_embd=64,n_layer=2,n_head=2,n_positions=128,vocab_size=512",
            "--tokenizer_name", str(CLM / "tokenizer"), "--train_file", str(CLM / "train.txt"), "--do_train",
            "--max_steps", "30", "--per_device_train_batch_size", "4", "--block_size", "64",
            "--output_dir", "{tmp}/out", "--cache_dir", "{tmp}/cache", "--logging_steps", "10", "--report_to", "none",
            "--use_cpu", "--save_strategy", "no"),
           field_clock, needs=("transformers", "datasets", "evaluate"), profile_steps="10-14",
           env=(("HF_DATASETS_OFFLINE", "1"), ("HF_HUB_OFFLINE", "1")), torchvision=False),
]

SCRIPTS += [
    Script("regression", "polynomial regression (pytorch/examples): batches made in the loop, hand-written update",
           "regression/main.py", (), regression_clock, profile_steps="20-24"),
    Script("nanogpt_bench", "nanoGPT bench.py: a fixed batch, burn-in then timed iterations", "nanogpt/bench.py",
           ("--real_data=False", "--device=cpu", "--compile=False", "--dtype=float32", "--batch_size=2",
            "--block_size=32", "--n_layer=2", "--n_head=2", "--n_embd=64"), bench_clock, in_own_folder=True,
           profile_steps="4-6"),
]

SCRIPTS += [
    Script("lightning_gan", "Lightning GAN template: manual optimization, two optimizers a batch",
           "lightning_gan/generative_adversarial_net.py", (), field_clock, needs=("lightning",), profile_steps="4-6",
           true_high=LOADING_ON_THE_TRAINING_THREAD),
]

# Graph networks: one full-graph step an epoch, no DataLoader, the model called with (features, adjacency);
# a Cora-shaped graph made by gnn/synthetic_cora.py (the examples download Cora). GAT's attention is dense
# over all node pairs: one head of 8 hidden units keeps an epoch near 0.5 s on one core (8 heads of 64: 5.5 s).
def _cora_nodes() -> int:
    """The node count gnn/synthetic_cora.py writes (one source for the graph and the clock's samples)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("synthetic_cora", FIELD / "gnn" / "synthetic_cora.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return int(mod.NODES)


CORA_NODES = _cora_nodes()
SCRIPTS += [
    Script("gat", "GAT (pytorch/examples gat): full-graph steps, dense N×N attention, two eval passes an epoch",
           "gnn/gat_main.py", ("--epochs", "12", "--val-every", "1", "--num-heads", "1", "--hidden-dim", "8"),
           gnn_clock, needs=("requests",), prepare="gnn/synthetic_cora.py", profile_steps="5-7"),
    Script("gcn", "GCN (pytorch/examples gcn): full-graph steps, sparse adjacency, two eval passes an epoch",
           "gnn/gcn_main.py", ("--epochs", "60", "--val-every", "1"), gnn_clock, needs=("requests",),
           prepare="gnn/synthetic_cora.py", profile_steps="20-24"),
]

# Loop shapes of issue 31: each a public script whose structure the step model must read by construction.
SCRIPTS += [
    Script("mnist_hogwild", "MNIST Hogwild (pytorch/examples): 2 trainer processes through torch.multiprocessing "
           "(spawn), no torch.distributed; the test after them with model.eval()", "mnist_hogwild/main.py",
           ("--epochs", "1", "--num-processes", "2"), field_clock, profile_steps="8-10",
           # each trainer's DataLoader (num_workers=0 on CPU, the script's choice) converts FakeData's PIL images on
           # its training thread, as mnist_cnn's does: HIGH on a quiet host (x3.20-3.57 plain, x2.06 profiled); the
           # cache fix applied measured x3.85-4.06 (BENCHMARKS.md, "mnist_hogwild's true HIGH")
           true_high=LOADING_ON_THE_TRAINING_THREAD),
    Script("tensor_parallel", "tensor parallel example (pytorch/examples distributed/tensor_parallelism): DTensor "
           "parallelize_module over 2 ranks on gloo, the same batch on both", "tensor_parallel/tensor_parallel_example.py",
           (), field_clock, launcher=TORCHRUN, batch_shared_by=2, profile_steps="20-22"),
    Script("mingpt_ddp", "minGPT DDP (pytorch/examples distributed/minGPT-ddp), 2 ranks on gloo: an evaluation "
           "pass each epoch under set_grad_enabled(False) without model.eval()", "mingpt_ddp/main.py", (),
           field_clock, launcher=TORCHRUN, needs=("fsspec", "yaml"), profile_steps="10-12"),
    Script("time_sequence_prediction", "time_sequence_prediction (pytorch/examples): two LSTMCells over the time "
           "steps inside an LBFGS closure, a no_grad prediction after each step, no DataLoader",
           "time_sequence_prediction/train.py", ("--steps", "10"), field_clock,
           prepare="time_sequence_prediction/generate_sine_wave.py", profile_steps="4-5"),
    Script("mnist_forward_forward", "Forward-Forward (pytorch/examples): one Adam per layer, layers trained in turn, "
           "self.forward(x), the data read once", "mnist_forward_forward/main.py",
           ("--epochs", "30", "--train_size", "500", "--test_size", "200"), field_clock, profile_steps="10-12"),
]

BY_NAME = {s.name: s for s in SCRIPTS}


# ---------------------------------------------------------------- running and checking


def command(script: Script, out: Path, profile: bool, tmp: Path) -> list[str]:
    run_args = ["--profile-steps", script.profile_steps] if profile else []
    args = [a.replace("{tmp}", str(tmp)) for a in script.args]
    return [sys.executable, "-m", "gpusleuth", "run", "--no-gpu", "--no-report", *run_args, "--out", str(out), "--",
            sys.executable, *script.launcher, str(script.file), *args]


def environment(script: Script) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", **dict(script.env))
    extra = [str(TORCHVISION)] * script.torchvision + [str(FIELD / p) for p in script.pythonpath]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH", ""), *extra) if p)
    return env


def record(script: Script, out: Path, profile: bool, cwd: Path) -> subprocess.CompletedProcess:
    """``gpusleuth run --no-gpu --no-report [--profile-steps a-b] -- python SCRIPT ARGS`` in ``cwd`` (the
    scripts write checkpoints and logs where they run; ``{tmp}`` in an argument is ``cwd``), or in the
    script's own folder for scripts that read their config and data by relative path."""
    cwd.mkdir(parents=True, exist_ok=True)
    for d in script.mkdirs:
        (cwd / d).mkdir(parents=True, exist_ok=True)
    if script.prepare:
        subprocess.run([sys.executable, str(FIELD / script.prepare), str(cwd)], check=True, capture_output=True,
                       timeout=120)
    return subprocess.run(command(script, out, profile, cwd), capture_output=True, text=True,
                          timeout=script.timeout, env=environment(script),
                          cwd=script.file.parent if script.in_own_folder else cwd)


@dataclass
class Verdict:
    """gpusleuth against the clock, one script, one recording."""

    name: str
    profiled: bool
    steps_clock: int
    steps_got: int
    step_s_clock: float  # median of the script's own steady step times
    step_s_got: float | None  # gpusleuth's median over the same steps
    tput_unit: str  # "samples/s" or "tokens/s"
    tput_clock: float | None  # per-step count ÷ the script's own mean steady step
    tput_got: float | None  # the report's steady throughput
    data_clock: float | None  # median data wait per step by the script's own clock
    data_got: float | None
    findings: list[tuple[str, str, float | None]]  # (severity, cause, predicted speed-up)
    false_high: list[str]
    load: float | None = None
    # the stall watch (issue 33) on a healthy script: every stall it raised while recording is a false alarm
    stalls: list[str] = field(default_factory=list)
    # the same steps' summed times on both clocks, and the share of the time the training loop was runnable that
    # it ran (the recording's own schedstat): see step_agrees
    step_total_s_clock: float | None = None
    step_total_s_got: float | None = None
    cpu_attained: float | None = None

    def step_agrees(self) -> bool:
        """gpusleuth's step times are the script's: the medians over the same steps within REL — or, where the
        recording itself shows the loop starved of CPU (it ran under STARVED of the time it was runnable), their
        sums. Both clocks cut the same time into steps at boundaries a few statements apart (the optimizer's
        return, the script's ``time.time()``); on a crowded host a descheduling between the two moves time from
        one step to the next, which the medians of two partitions of the same time do not survive (nanoGPT
        ×2 accumulation profiled: 20.6 vs 23.5 ms with two busy loops on two cores) and the sums do."""
        err = self.errors()["step"]
        if err is not None and abs(err) <= REL:
            return True
        if self.cpu_attained is None or self.cpu_attained >= STARVED or not self.step_total_s_clock:
            return False
        return self.step_total_s_got is not None and abs(self.step_total_s_got / self.step_total_s_clock - 1) <= REL

    def errors(self) -> dict[str, float | None]:
        def rel(got, want):
            return None if got is None or not want else got / want - 1

        return {"step": rel(self.step_s_got, self.step_s_clock), "tput": rel(self.tput_got, self.tput_clock),
                "data": rel(self.data_got, self.data_clock)}

    def problems(self) -> list[str]:
        """Every way this recording misses the bands of issue 27 (empty: it passes)."""
        out = []
        if self.steps_got != self.steps_clock:
            out.append(f"steps {self.steps_got} for the script's {self.steps_clock}")
        err = self.errors()
        if not self.step_agrees():
            out.append(f"step {err['step']}")
        if err["tput"] is None or abs(err["tput"]) > REL:
            out.append(f"tput {err['tput']}")
        # data wait: within 10 % of the script's own, or — when the wait is a sliver — within 1 % of the step
        if self.data_clock is not None:
            if self.data_got is None or (abs(self.data_got - self.data_clock) > REL * self.data_clock
                                         and abs(self.data_got - self.data_clock) > 0.01 * self.step_s_clock):
                out.append(f"data wait {self.data_got} for the script's {self.data_clock}")
        if self.false_high:
            out.append("false HIGH: " + ", ".join(self.false_high))
        if self.stalls:
            out.append("stall watch raised: " + "; ".join(self.stalls))
        return out


def check(script: Script, clock: Clock, run, report, profiled: bool) -> Verdict:
    """Compare one recording with the script's own clock over the same steps: those gpusleuth counts in its
    steady throughput (after warm-up, outside the profiler's window, with a known batch) and no phase
    overlaps. Which steps those are is gpusleuth's choice; every value on the clock side is the script's own."""
    from gpusleuth.analysis.bundle import analyze

    d = report.to_dict()
    out = d["outcomes"] or {}
    thr = out.get("throughput") or {}
    tokens = clock.tokens_per_step is not None
    per_step = clock.tokens_per_step if tokens else clock.samples_per_step
    analysis = analyze(run)
    view = analysis.view
    main = view.main
    keep = main.steady.copy()
    keep &= (main.table["tokens"] > 0) if tokens else (main.table["samples"] >= 0)
    # a step that a phase overlaps (Lightning's validation every N batches, a callback's sampling) is carved
    # by gpusleuth but whole on the script's clock: those steps are left out of the clock's side
    span_ns = np.asarray(main.table["end_ns"] - main.table["start_ns"])
    whole = span_ns == main.dur_ns
    # ... unless every step holds one (the graph examples evaluate inside every epoch, and their clock times
    # the epoch): then the clock's step is gpusleuth's whole span, phase included, and the report's training
    # throughput is put on the same footing by the share of the span that was training (its own numbers)
    with_phase = bool(keep.any()) and not bool((keep & whole).any())
    if not with_phase:
        keep &= whole
    # a loop without an optimizer ends gpusleuth's step at backward(), the script's after its hand-written
    # update: gpusleuth's own cost paid at a boundary (the profiler starting, ~1 s) falls in the step before
    # an instrumented one on the script's clock — that step is left out of the clock's side too
    if main.instrumented and set(main.table["delimiter"].tolist()) == {"backward"}:
        before = [i - 1 for i in main.instrumented if 0 < i <= len(keep)]
        keep[before] = False
    # step k (1-based) is the clock's entry k - first_timed (a clock of timestamps has none for step 1); the
    # main process's own lines where the clock has several processes' (Hogwild's trainers are peers: gpusleuth's
    # main one need not be the first the clock names)
    own = clock.step_s
    if clock.rank_step_s and _clock_key(main) in clock.rank_step_s:
        own = clock.rank_step_s[_clock_key(main)]
    steps = np.flatnonzero(keep)
    idx = steps + 1 - clock.first_timed
    inside = (idx >= 0) & (idx < len(own))
    steps, idx = steps[inside], idx[inside]
    timed = ~np.isnan(np.array(own, dtype=float)[idx])
    steps, idx = steps[timed], idx[timed]
    steady = np.array(own)[idx]
    # step time is compared step for step: gpusleuth's carved durations of the very steps the clock timed (the
    # report's p50 also holds the carved steps the clock cannot time; on 20-step runs on a busy host the
    # medians of two different subsets differ by more than the band)
    got_ns = span_ns if with_phase else main.dur_ns
    got_step = float(np.median(got_ns[steps])) / 1e9 if len(steps) else None
    tput_got = thr.get("tokens_per_s" if tokens else "samples_per_s")
    if with_phase and tput_got is not None and len(steps):
        tput_got *= float(main.dur_ns[steps].sum()) / float(span_ns[steps].sum())
    data_got = float(np.median(main.wait_ns[main.steady])) / 1e9 if clock.data_s is not None else None
    highs = [f.cause for f in report.findings if f.severity == "high"]
    return Verdict(
        name=script.name, profiled=profiled, steps_clock=clock.steps, steps_got=int(out.get("steps") or 0),
        step_s_clock=float(np.median(steady)), step_s_got=got_step,
        tput_unit="tokens/s" if tokens else "samples/s",
        tput_clock=job_tput(clock, view, per_step) / script.batch_shared_by if clock.rank_step_s else
        (per_step / float(steady.mean()) if per_step else None),
        tput_got=tput_got,
        data_clock=float(np.median(np.array(clock.data_s)[idx])) if clock.data_s is not None else None,
        data_got=data_got,
        findings=[(f.severity, f.cause, f.estimated_gain.speedup if f.estimated_gain else None)
                  for f in report.findings if f.cause != "healthy"],
        false_high=[c for c in highs if c not in script.true_high],
        stalls=[f"stall {r.id} ({(r.seen_ns - r.since_ns) / 1e9:.0f} s without progress, threshold "
                f"{r.threshold_s:.0f} s)" for r in run.stalls],
        step_total_s_clock=float(steady.sum()) if len(steady) else None,
        step_total_s_got=float(got_ns[steps].sum()) / 1e9 if len(steps) else None,
        cpu_attained=analysis.host.main_cpu_attained if analysis.host is not None else None,
    )


def _clock_key(p) -> int:
    """Which of the clock's per-process lines are this process's: its rank, or its pid for a trainer without one."""
    return p.rank if p.rank is not None else p.pid


def steady_throughput(clock: Clock, warmup: int = 2) -> float:
    """The script's throughput by its own clock alone (no recording to say which steps are steady): its
    per-step count over its mean step after the first ``warmup`` timed steps (a loader's workers start, the
    allocator warms), every trainer's summed where it has several. For comparing one script with itself."""
    per_step = clock.tokens_per_step or clock.samples_per_step
    if not per_step:
        raise ValueError("the clock counts no samples or tokens per step")
    series = list(clock.rank_step_s.values()) if clock.rank_step_s else [clock.step_s]
    total = 0.0
    for own in series:
        x = np.asarray(own[warmup:], dtype=float)
        x = x[np.isfinite(x)]
        if not len(x):
            raise ValueError("too few timed steps after warm-up")
        total += per_step / float(x.mean())
    return total


def job_tput(clock: Clock, view, per_step: float) -> float:
    """A distributed job's throughput by the script's own clock: every rank's per-step count over its own
    mean step, on the steps gpusleuth counts steady for that rank, summed."""
    total = 0.0
    for p in view.ranks:
        own = np.array(clock.rank_step_s.get(_clock_key(p), []))
        idx = np.flatnonzero(p.steady) + 1 - clock.first_timed
        idx = idx[(idx >= 0) & (idx < len(own))]
        total += per_step / float(own[idx].mean())
    return total
