"""Clock throttling from NVML's cumulative clock-event counters (§6 G4, §7 N3).

The telemetry summary turns the counters (ns held down per reason: SW power cap, thermal, HW slowdown,
power brake) into the share of the run each reason was active — exact, no aliasing. Fires at ≥ 5 % of the
run (moderate), ≥ 20 % (high). Gain: while throttled the SM clock ran at the observed mean instead of
the maximum; compute-bound work scales with clock, so the loss is throttled share × (1 − mean/max clock).
"""

from __future__ import annotations

from gpusleuth.diagnosis.facts import Facts
from gpusleuth.diagnosis.finding import Evidence, Finding, Missing
from gpusleuth.diagnosis.rules._common import gain_from_seconds, no_gpu
from gpusleuth.diagnosis.rules._scope import per_gpu, the_gpu

MODERATE = 0.05
HIGH = 0.20
REASONS = ("sw_power_cap", "sw_thermal", "thermal", "hw_thermal", "hw_slowdown", "hw_power_brake")


@per_gpu
def clock_throttling(facts: Facts) -> list[Finding] | Missing:
    g = the_gpu(facts)
    if g is None:
        return no_gpu("clock throttling", facts, "throttling")
    shares = {k: v for k, v in g.throttled_share.items() if k in REASONS}
    share = min(sum(shares.values()), 1.0)
    if share < MODERATE:
        return []
    clock = g.sm_clock_mhz["mean"] if g.sm_clock_mhz else None
    deficit = (1 - clock / g.max_sm_clock_mhz) if clock and g.max_sm_clock_mhz else 0.1
    s = facts.outcomes.steps
    saved = share * max(deficit, 0.0) * (s.step_time_s if s.steps else facts.outcomes.wall_s)
    reasons = ", ".join(f"{k} {v:.0%}" for k, v in sorted(shares.items(), key=lambda kv: -kv[1]))
    thermal = any("thermal" in k for k in shares)
    return [Finding(
        cause="throttling", severity="high" if share >= HIGH else "moderate",
        title=f"GPU {g.index} clocks held down {share:.0%} of the run ({reasons})",
        summary=("The driver lowered the SM clock for power or temperature; every kernel ran slower than "
                 "the card's rated speed during that time."),
        evidence=[Evidence("throttled share", round(share * 100, 1), "% of run", "NVML clock-event counters"),
                  Evidence("SM clock mean / max", f"{clock or 0:.0f} / {g.max_sm_clock_mhz or 0:.0f}", "MHz", "NVML"),
                  Evidence("temperature p95", g.temp_c["p95"] if g.temp_c else None, "°C", "NVML")],
        fix=("Check cooling and airflow (thermal) or the power limit (`nvidia-smi -q -d POWER`; "
             "`nvidia-smi -pl` if the site allows); a node that throttles while its peers don't is "
             "a hardware ticket, not a code change." if thermal else
             "The card hits its power cap: check `nvidia-smi -q -d POWER` (enforced vs default limit); "
             "bf16 math does more work per joule; a node-level power cap is a hardware/site setting."),
        estimated_gain=gain_from_seconds(facts, saved, "throttled share × (1 − mean SM clock ÷ max clock) of "
                                         "step time, for compute-bound kernels (upper bound)"),
        confidence="medium",
    )]
