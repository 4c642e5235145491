"""Fixes in the words of the framework that runs the loop.

A user of Lightning or the Hugging Face Trainer does not write ``eval_every`` or a bare ``DataLoader(...)``
call for evaluation cadence: the knobs are ``Trainer(val_check_interval=…)`` and
``TrainingArguments(eval_steps=…)``. The hook writes one ``framework`` fact at the first step (which
framework's modules the job imported); these helpers turn a generic fix into that framework's knob, and
fall back to plain PyTorch when no framework is known.
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts, LoaderConfig


def framework(facts: Facts) -> str | None:
    """``"lightning"``, ``"transformers"``, ``"accelerate"``, ``"deepspeed"`` or None (plain PyTorch)."""
    return facts.framework


PREFETCH = 4  # batches each worker loads ahead in the recommended loader


def loader_fix(facts: Facts, workers: int, *, prefetch: bool = True, loader: LoaderConfig | None = None) -> str:
    """Where ``num_workers`` (and friends) are set in this framework. ``loader``: the DataLoader the run
    already has (the hook's record); a knob it already sets that way is not recommended again."""
    have: LoaderConfig = loader or {}
    knobs = [("num_workers", workers, have.get("num_workers") == workers),
             ("pin_memory", True, have.get("pin_memory") is True),
             ("persistent_workers", True, have.get("persistent_workers") is True)]
    if prefetch:
        knobs.append(("prefetch_factor", PREFETCH, (have.get("prefetch_factor") or 0) >= PREFETCH))
    todo = [(name, value) for name, value, already in knobs if not already]
    if not todo:
        return ""
    fw = framework(facts)
    if fw == "transformers":
        return "TrainingArguments(..., " + ", ".join(f"dataloader_{n}={v}" for n, v in todo) + ")"
    where = " in your LightningModule/LightningDataModule's train_dataloader()" if fw == "lightning" else ""
    return "DataLoader(..., " + ", ".join(f"{n}={v}" for n, v in todo) + ")" + where


def inline_loading_fix(facts: Facts) -> str:
    """``num_workers=0`` where this framework sets it (and nothing else: ``persistent_workers`` or
    ``prefetch_factor`` with no workers is an error in PyTorch's DataLoader)."""
    fw = framework(facts)
    if fw == "transformers":
        return "TrainingArguments(..., dataloader_num_workers=0)"
    where = " in your LightningModule/LightningDataModule's train_dataloader()" if fw == "lightning" else ""
    return "DataLoader(..., num_workers=0)" + where


def eval_fix(facts: Facts, every: str, k: int, steps_between: float | None) -> str:
    fw = framework(facts)
    n = f"{steps_between * k:.0f}" if steps_between else f"{k}× your current interval"
    if fw == "lightning":
        per = facts.batches_per_step or 1
        if steps_between and per > 1:
            # val_check_interval counts training batches, not optimizer steps: under gradient accumulation
            # (several batches a step) the interval in steps would evaluate only per× less often
            n = f"{steps_between * k * per:.0f}"
            every = f"{every} ({steps_between * per:.0f} training batches: {per:g} per optimizer step)"
        knob = (f"`Trainer(val_check_interval={n})` (it counts training batches; or `check_val_every_n_epoch`), "
                f"or `limit_val_batches={1 / k:g}` for a 1/{k} subset")
    elif fw == "transformers":
        knob = f"`TrainingArguments(eval_steps={n})`, or a 1/{k} subset of `eval_dataset`"
    else:
        knob = f"evaluate {k}× less often (e.g. every {n} steps) or on a 1/{k} subset of the validation set"
    return (f"Evaluation runs {every}; {knob}, and keep it under `torch.no_grad()`/`inference_mode()` with a "
            "larger eval batch. Don't drop it: evaluation is how you know training works.")


def checkpoint_fix(facts: Facts, every: str, k: int, steps_between: float | None) -> str:
    fw = framework(facts)
    n = f"{steps_between * k:.0f}" if steps_between else f"{k}× your current interval"
    if fw == "lightning":
        knob = f"`ModelCheckpoint(every_n_train_steps={n})`"
    elif fw == "transformers":
        knob = f"`TrainingArguments(save_steps={n})` (and `save_total_limit`)"
    else:
        knob = f"save {k}× less often (every {n} steps)"
    return (f"Checkpoints are written {every}; {knob}, or save asynchronously so training continues during "
            "the write: `torch.distributed.checkpoint.async_save(state_dict, checkpoint_id=path)` (or copy the "
            "state to CPU and write it from a background thread). Keep enough checkpoints for your restart "
            "budget.")
