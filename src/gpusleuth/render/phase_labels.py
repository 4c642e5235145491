"""Names of gpusleuth's own phases, once for every renderer (terminal partition, headline badput, HTML).

The hook writes them (the profiler's trace export, the one FLOP-counted step's excess over the step before
it); their time is gpusleuth's, not the job's, and each renderer shows it under the same words.
"""

TOOL_PHASES = {"gpusleuth_profiler": "gpusleuth profiler (trace export)",
               "gpusleuth_flops": "gpusleuth FLOP count (one step, for MFU)"}
