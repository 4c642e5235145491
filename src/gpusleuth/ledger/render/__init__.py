"""Fleet ledger, render stage: terminal, JSON, CSV, HTML and Grafana; format, never compute."""
