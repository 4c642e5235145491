"""The fleet ledger's room (``gpusleuth fleet --prometheus``): where a cluster's GPU-hours, energy and dollars went,
per namespace, pod and served model — one subpackage (or module) per stage, named after the stage
(docs/architecture.md, "The rooms"):

- ``run/``: the typed input (``GpuSeries``, ``FleetWindow``)
- ``sources/``: the Prometheus client, the dcgm-exporter / kube-state-metrics queries, the DuckDB cache
- ``analysis/``: the result types (``model.py``), one GPU's fold (``fold.py``), its energy (``energy.py``), the
  served models' energy and tokens (``tokens.py``), sizing, the power-cap what-if, and the ledger assembled
  (``ledger.py``)
- ``pipeline.py``: the pass (query → fold → report); ``report.py``: the report and its JSON
- ``render/``: terminal, JSON, CSV, HTML, Grafana

tests/test_house_rules.py reads ``gpusleuth.ledger.<stage>`` as that stage."""
