"""``fleet --prometheus``'s pass: a metrics server's GPUs, fetched into the cache, folded into the ledger report.

sources/prom_fleet.py (chunked over time and GPUs, DuckDB cache) → analysis/ledger.py (one batch of GPUs in
memory at a time) → report/ledger.py's LedgerReport.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from gpusleuth.analysis.ledger import LedgerBuilder, Pricing
from gpusleuth.report.ledger import LedgerReport
from gpusleuth.sources.fleet_cache import FleetCache
from gpusleuth.sources.prom_client import PrometheusClient, read_auth
from gpusleuth.sources.prom_fleet import FleetQuery, PrometheusFleet


def build_ledger_report(url: str, start_s: int, end_s: int, *, step_s: int = 30, chunk_s: int = 6 * 3600,
                        gpus_per_query: int = 200, parallel: int = 3, selector: str = "", group_label: str | None = None,
                        pricing: Pricing | None = None, cache_path: Path | None = None,
                        token_file: Path | None = None, basic_auth_file: Path | None = None,
                        ca_file: Path | None = None, verify: bool = True,
                        progress: Callable[[int, int], None] | None = None) -> LedgerReport:
    """Fetch what the cache lacks, fold every GPU, and assemble the report."""
    t0 = time.monotonic()
    auth = read_auth(token_file, basic_auth_file)
    query = FleetQuery(url=url, start_s=start_s, end_s=end_s, step_s=step_s, chunk_s=chunk_s,
                       gpus_per_query=gpus_per_query, parallel=parallel, selector=selector, group_label=group_label)
    with PrometheusClient(url, auth=auth, ca_file=ca_file, verify=verify) as client:
        cache = FleetCache(cache_path, src=f"{client.url}|{selector}|{group_label or ''}", step_s=step_s)
        try:
            fleet = PrometheusFleet(client, query, cache, progress=progress)
            window = fleet.open()
            builder = LedgerBuilder(window, pricing or Pricing())
            for batch in fleet.batches():
                builder.add(batch)
            ledger = builder.finish()
        finally:
            cache.close()
    return LedgerReport(ledger=ledger, elapsed_s=time.monotonic() - t0, queries=fleet.queries)
