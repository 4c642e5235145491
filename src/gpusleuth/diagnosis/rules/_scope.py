"""What a rule judges one at a time — a rank, a GPU — declared on the rule, iterated by the engine.

Why a declaration and not a loop in each rule: seven rules once copied the same ``for t in
device_traces(facts)`` and the engine kept a hand-written list of them to merge their findings. Now a rule
written for one rank (or one GPU) says so with ``@per_rank`` (``@per_gpu``); the engine
(``diagnosis/engine.py``) cuts the facts into one view per rank (``Facts.for_rank``) or per card
(``Facts.for_gpu``), calls the rule once per view, and merges what comes back. The mark is a typed
:class:`Scope` stored on the function (``rule.scope``), so the engine reads it and nothing is kept in sync.

A rule under a scope reads its rank's trace with :func:`rank_trace` (its card with :func:`the_gpu`): both
refuse facts of several ranks or cards, so a per-rank rule called on the whole job by mistake fails loudly
instead of quietly judging the first rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, TypeVar

from gpusleuth.diagnosis.facts import Facts, HostOps

if TYPE_CHECKING:  # rules see Facts; these name what Facts holds
    from gpusleuth.analysis.telemetry import GpuSummary
    from gpusleuth.analysis.trace import TraceAnalysis


@dataclass(frozen=True)
class Scope:
    """One kind of unit a rule judges on its own."""

    unit: str  # plural, as the merged finding says it: "Seen on 3 ranks"
    # the facts seen from each unit, with the unit's name ("rank 3", "GPU 1"); [] when the job has none
    views: Callable[[Facts], list[tuple[str, Facts]]]


def _rank_views(facts: Facts) -> list[tuple[str, Facts]]:
    """One view per trace, named by its rank — or by its label (file and rank) where ranks are unknown or
    repeat, as in traces of several single-rank jobs read together."""
    ranks = [t.rank for t in facts.traces]
    by_rank = None not in ranks and len(set(ranks)) == len(ranks)
    return [(f"rank {t.rank}" if by_rank else t.label, view) for t, view in zip(facts.traces, facts.rank_views())]


RANKS = Scope("ranks", _rank_views)
GPUS = Scope("GPUs", lambda f: [(f"GPU {g.index}", f.for_gpu(g)) for g in f.gpus])


R = TypeVar("R", bound=Callable[..., object])


def per_rank(rule: R) -> R:
    """The rule judges one rank's trace (and its host ops): the engine calls it once per rank of the job."""
    setattr(rule, "scope", RANKS)
    return rule


def per_gpu(rule: R) -> R:
    """The rule judges one GPU's telemetry: the engine calls it once per GPU of the job (an 8-GPU node once
    gave eight near-copies of one finding)."""
    setattr(rule, "scope", GPUS)
    return rule


def scope_of(rule: Callable[..., object]) -> Scope | None:
    """The scope a rule declared, None for a rule that judges the whole job at once."""
    scope = getattr(rule, "scope", None)
    return scope if isinstance(scope, Scope) else None


def rank_trace(facts: Facts) -> TraceAnalysis | None:
    """The trace of the one rank a ``@per_rank`` rule judges, if it saw device work (None: no trace, or a
    CPU-only one — the rule then says what it lacks)."""
    if len(facts.traces) > 1:
        raise ValueError(f"a per-rank rule was given {len(facts.traces)} ranks' facts: the engine calls it once "
                         "per rank (Facts.for_rank)")
    return facts.traces[0] if facts.traces and facts.traces[0].device_span_s > 0 else None


def rank_host_ops(facts: Facts) -> HostOps | None:
    """The host-op statistics of the one rank a ``@per_rank`` rule judges (None: its trace has no steps)."""
    if len(facts.host_ops) > 1:
        raise ValueError(f"a per-rank rule was given {len(facts.host_ops)} ranks' host ops: the engine calls it "
                         "once per rank (Facts.for_rank)")
    return facts.host_ops[0] if facts.host_ops else None


def the_gpu(facts: Facts) -> GpuSummary | None:
    """The one GPU a ``@per_gpu`` rule judges (None: no GPU telemetry)."""
    if len(facts.gpus) > 1:
        raise ValueError(f"a per-GPU rule was given {len(facts.gpus)} GPUs' facts: the engine calls it once per "
                         "GPU (Facts.for_gpu)")
    return facts.gpus[0] if facts.gpus else None
