"""The serving room: everything about a server under ``gpusleuth load`` and a recorded server's requests, one
subpackage per stage, each named after the stage it belongs to (docs/architecture.md, "The rooms"):

- ``recorder/``: the load generator (HTTP client, arrivals, prompts, the OpenAI-compatible stream, readiness
  probe, the engine's /metrics scrape) — writes ``load.parquet`` and ``engine_metrics.jsonl``
- ``run/``: the serving parts of the data model (request ids, engine samples, the per-request export)
- ``sources/``: reading an engine's /metrics samples
- ``analysis/``: load levels and the knee, tokens and SLOs, per-request stages, batching, misses, capacity,
  the engine per level (the last stage that sees a Run)
- ``rules/``: the serving findings, pure functions of ``Facts``
- ``report.py``: the Report's serving section
- ``render/``: the terminal and HTML serving sections

Data flows one way through them, as through the house: a module of a stage imports only the stages before it
(tests/test_house_rules.py reads ``gpusleuth.serving.<stage>`` as that stage)."""
