"""Joules per input token, where prefill and decode can be told apart.

One energy counter covers a GPU's prefill and its decode alike. What tells them apart is how they vary: over the
window's steps a model's GPUs drew ``E_s = a·P_s + b·G_s + c`` joules, P_s and G_s the prompt and generation tokens
its engines counted in step s (vLLM's ``vllm:prompt_tokens_total`` and ``vllm:generation_tokens_total``), c the
energy of a step with neither (idle power × step). Fitted by least squares over the steps with all three, ``a`` is
the energy prefill adds per input token and ``b`` what decode adds per output token. The split is given only when
it is identified: both slopes positive and each known to within ``MAX_REL_SE`` (its standard error ÷ itself). When
prompts and generations rise and fall together (the same request mix all day) or barely move, their slopes cannot
be told apart and the ledger says so instead of guessing. The all-in joules per output token (idle paid by the
tokens) is unchanged; ``a`` holds no idle energy (that is ``c``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_REL_SE = 0.1  # a slope known to within 10 % (one standard error) is given
MIN_STEPS = 30


@dataclass
class PrefillSplit:
    j_per_token_in: float | None  # prefill's own energy per input token (None: not told apart)
    j_per_token_out_decode: float | None  # decode's own energy per output token
    idle_w: float | None  # the fit's energy of a step with no token, as watts
    steps: int
    note: str | None  # why not, in one sentence


def split_prefill(energy_j: np.ndarray, prompt: np.ndarray, generated: np.ndarray, step_s: int) -> PrefillSplit:
    ok = np.isfinite(energy_j) & np.isfinite(prompt) & np.isfinite(generated)
    n = int(ok.sum())
    if n < MIN_STEPS:
        return PrefillSplit(None, None, None, n, f"too few steps with energy and both token counters ({n})")
    e, p, g = energy_j[ok].astype(np.float64), prompt[ok].astype(np.float64), generated[ok].astype(np.float64)
    x = np.column_stack([p, g, np.ones(n)])
    coef, _, rank, _ = np.linalg.lstsq(x, e, rcond=None)
    if rank < 3:
        return PrefillSplit(None, None, None, n, "prompt and generation tokens moved in lockstep (or not at all): "
                            "prefill and decode energy cannot be told apart")
    resid = e - x @ coef
    sigma2 = float(resid @ resid) / max(n - 3, 1)
    se = np.sqrt(np.diag(sigma2 * np.linalg.inv(x.T @ x)))
    a, b, c = (float(v) for v in coef)
    if a <= 0 or b <= 0 or se[0] > MAX_REL_SE * a or se[1] > MAX_REL_SE * b:
        r = float(np.corrcoef(p, g)[0, 1]) if p.std() > 0 and g.std() > 0 else float("nan")
        return PrefillSplit(None, None, None, n, (
            "prefill and decode energy cannot be told apart: the prompt and generation tokens per step "
            + (f"moved together (correlation {r:.2f})" if np.isfinite(r) and abs(r) > 0.9 else
               "varied too little against the power's own variation") + f" — fitted {a:.3g} ± {se[0]:.2g} J per "
            "input token"))
    return PrefillSplit(a, b, c / step_s, n, None)


__all__ = ["PrefillSplit", "split_prefill"]
