"""Fleet ledger, sources stage: Prometheus (client, fleet queries) and the incremental DuckDB cache."""
