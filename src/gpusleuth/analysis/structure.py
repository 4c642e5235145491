"""The structure check: what the step model inferred about the job, checked against the run's own counts.

Why: every number per step (throughput, data wait, the input and host findings' budgets) rests on what the
hook decided a step, a phase and a trainer are (docs/step-model.md). Those decisions are made by construction
from what the job did — optimizers' order, fetches, grad mode, processes, the device mesh — but some shapes
stay ambiguous (two optimizers with no fetch between them: one GAN iteration, or two stages?). A user acting
on a wrong count never trusts the tool again, so each inference the run cannot confirm becomes one sentence,
and a doubtful structure lowers the confidence of the findings that rest on it (``doubtful``).

Inputs, all recorded: the hook's ``step_model`` fact per process (what it had to decide: optimizer cycles
joined with and without a fetch inside, cycles split by order or by a freed optimizer, updates a GradScaler
skipped, evaluations found with gradients off), its ``model_parallel`` facts (``parallelize_module``: ranks
that share a batch), each step's fetches and where its input wait was measured, and the step view's workers
(ranks, or trainer processes side by side without ranks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from gpusleuth.run.model import Table

Workers = Literal["single", "ranks", "trainers"]


@dataclass
class StepStructure:
    """What the step model inferred and how sure the run's counts make it."""

    workers: Workers = "single"  # one process; ranks of a distributed job; trainer processes without ranks
    model_parallel: int = 1  # ranks that work on one batch (tensor × pipeline parallelism); the job counts it once
    tensor_parallel: int = 1  # its tensor-parallel part (parallelize_module's mesh)
    pipeline_parallel: int = 1  # its pipeline part (the pipeline schedule's stages' ranks)
    microbatches: int = 0  # the pipeline schedule's micro-batches a step (0: no pipeline)
    skipped_updates: int = 0  # steps whose update a GradScaler skipped (inf/NaN gradients)
    eval_passes_no_grad: int = 0  # evaluations found with gradients off and no model.eval()
    joined_without_fetch: int = 0  # steps of several optimizers that only their order made one iteration
    split_by_order: int = 0  # times an optimizer's order showed the ones before it were used one after another
    input_inside_model: int = 0  # steps whose first module call came inside the model (input wait unknown)
    crowded_steps: int = 0  # steps that fetched more than twice the usual batches
    # steps whose optimizer evaluated its closure more than once (LBFGS: a line search over the loss): the
    # step's own work is the algorithm's, not a per-batch overhead a larger batch would amortize
    reevaluated_steps: int = 0
    notes: list[str] = field(default_factory=list)  # one sentence per inference worth knowing, doubts first
    doubtful: bool = False  # the step counts may be wrong: findings resting on them lose confidence


def _facts(infos: list[dict[str, Any]], kind: str, pids: set[int]) -> list[dict[str, Any]]:
    return [i for i in infos if i.get("kind") == kind and i.get("pid") in pids]


def _int(fact: dict[str, Any], key: str) -> int:
    v = fact.get(key)
    return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


def step_structure(infos: list[dict[str, Any]], main_pid: int, table: Table, workers: list[int],
                   ranked: bool) -> StepStructure:
    """The structure of the job whose main process (its steps: ``table``) and workers (ranks or trainers,
    by pid) the step view chose."""
    pids = set(workers) | {main_pid}
    out = StepStructure(workers="ranks" if ranked and len(workers) > 1 else
                        "trainers" if len(workers) > 1 else "single")
    main_facts = _facts(infos, "step_model", {main_pid})
    shape = main_facts[-1] if main_facts else {}
    out.skipped_updates = _int(shape, "skipped")
    out.eval_passes_no_grad = _int(shape, "eval_no_grad")
    out.joined_without_fetch = _int(shape, "joined_unfetched")
    out.split_by_order = _int(shape, "split")
    out.reevaluated_steps = _int(shape, "reevaluated")
    parallel = _facts(infos, "model_parallel", pids)
    tensor = max([_int(f, "size") for f in parallel if f.get("style", "tensor") == "tensor"], default=1)
    pipeline = max([_int(f, "size") for f in parallel if f.get("style") == "pipeline"], default=1)
    share = max(tensor, 1) * max(pipeline, 1)  # a batch is shared by a tensor group in every pipeline stage
    if ranked and share > 1 and len(workers) >= share:
        out.model_parallel = share
        out.tensor_parallel, out.pipeline_parallel = max(tensor, 1), max(pipeline, 1)
        out.microbatches = max([_int(f, "microbatches") for f in parallel if f.get("style") == "pipeline"],
                               default=0)

    if "wait_source" in table:
        out.input_inside_model = int((table["wait_source"] == "in_model").sum())
    fetches = table["fetches"]
    fetched = fetches[fetches > 0]
    if len(fetched) >= 5:
        usual = float(np.median(fetched))
        out.crowded_steps = int((fetched > 2 * usual).sum())
    out.doubtful = bool(out.joined_without_fetch or out.crowded_steps)  # the counts themselves may be wrong
    _sentences(out, len(table), workers, fetched)
    return out


def _sentences(out: StepStructure, n: int, workers: list[int], fetched: np.ndarray) -> None:
    notes: list[str] = []
    if out.joined_without_fetch:
        notes.append(f"{out.joined_without_fetch} of {n} steps each hold several optimizers' updates with no data "
                     "fetch between them: read as one iteration by the optimizers' order (a GAN's, a parameter "
                     "split's); if they are separate stages, those steps are merged")
    if out.crowded_steps:
        usual = int(np.median(fetched))
        notes.append(f"{out.crowded_steps} step(s) fetched more than twice the usual {usual} batch(es) (at most "
                     f"{int(fetched.max())}): a pass the step model did not separate (an evaluation, a second "
                     "loader) may be inside them, with its data wait")
    if out.input_inside_model:
        notes.append(f"in {out.input_inside_model} of {n} steps the model's first module call came after its "
                     "forward had begun (model.forward(x) called directly, or functional layers first): their "
                     "input wait is not measured")
    if out.skipped_updates:
        notes.append(f"{out.skipped_updates} of {n} steps ended with an update the GradScaler skipped (inf/NaN "
                     "gradients): each is counted as a step")
    if out.split_by_order:
        notes.append(f"optimizers were used one after another ({out.split_by_order} change(s) of optimizer, "
                     "told by their order): each of their steps is counted")
    if out.eval_passes_no_grad:
        notes.append(f"{out.eval_passes_no_grad} evaluation pass(es) ran with gradients off and no model.eval(): "
                     "found by their own fetches, or their model called on new inputs feeding no optimizer step, "
                     "and reported as eval phases")
    if out.workers == "trainers":
        pids = ", ".join(str(p) for p in workers)
        notes.append(f"{len(workers)} trainer processes ran side by side without torch.distributed (pids {pids}): "
                     "the job's throughput is their sum")
    if out.model_parallel > 1:
        replicas = max(len(workers) // out.model_parallel, 1)
        parts = []
        if out.tensor_parallel > 1:
            parts.append(f"tensor parallel over {out.tensor_parallel} ranks (parallelize_module)")
        if out.pipeline_parallel > 1:
            parts.append(f"pipeline parallel over {out.pipeline_parallel} stage ranks (torch.distributed.pipelining, "
                         f"{out.microbatches} micro-batches a step: each stage counts the whole batch)")
        notes.append(f"{' and '.join(parts)}: {out.model_parallel} ranks share each batch, so the job's throughput "
                     f"counts it once ({replicas} data-parallel replica(s))")
    out.notes = notes


__all__ = ["StepStructure", "Workers", "step_structure"]
