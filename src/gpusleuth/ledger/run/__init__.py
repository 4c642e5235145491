"""Fleet ledger, data model: the typed Prometheus history."""
