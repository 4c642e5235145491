"""Input-pipeline rules: is the training loop waiting on its data, and is that CPU work or latency?

One module per job (issue 35): ``bound`` is the rule ``input_bound`` — it measures the steady steps' exposed data
wait and names its cause from the CPU evidence — and hands the cause's prediction and fix to that cause's module
(``preprocessing``, ``io_wait``, ``handover``; a wait that a few steps carry: ``spikes``); ``transfer`` is the rule
``h2d_transfer`` (host-to-device copies on the device timeline); ``_shared`` holds what they share (thresholds,
the loader of the training loop, the cores free for workers, the measured wait handed to each cause).
"""
