"""``fleet --prometheus``'s pass: a metrics server's GPUs, fetched into the cache, folded into the ledger report.

ledger/sources/prom_fleet.py (chunked over time and GPUs, DuckDB cache) → ledger/analysis/ledger.py (one batch of GPUs in
memory at a time) → ledger/report.py's LedgerReport.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from gpusleuth.ledger.analysis.ledger import LedgerBuilder
from gpusleuth.ledger.analysis.model import Pricing
from gpusleuth.ledger.report import LedgerReport
from gpusleuth.ledger.sources.fleet_cache import FleetCache
from gpusleuth.ledger.sources.prom_client import PrometheusClient, read_auth
from gpusleuth.errors import InputError
from gpusleuth.ledger.sources.prom_fleet import CADENCE_PROBES, HPC_LABEL, FleetQuery, PrometheusFleet, survey


def build_ledger_report(url: str, start_s: int, end_s: int, *, step_s: int | None = None, chunk_s: int = 6 * 3600,
                        gpus_per_query: int = 200, parallel: int = 3, selector: str = "", group_label: str | None = None,
                        pricing: Pricing | None = None, cache_path: Path | None = None,
                        token_file: Path | None = None, basic_auth_file: Path | None = None,
                        ca_file: Path | None = None, verify: bool = True,
                        progress: Callable[[int, int], None] | None = None,
                        power_cap_w: float | None = None) -> LedgerReport:
    """Survey the window (cadence, owner labels), fetch what the cache lacks, fold every GPU, assemble the report.

    Without ``step_s`` the step is the history's own cadence (``Survey.step``); ``chunk_s`` is then rounded to a
    multiple of it. Without ``group_label``, dcgm-exporter's HPC job label groups GPUs where the series carry it."""
    t0 = time.monotonic()
    auth = read_auth(token_file, basic_auth_file)
    with PrometheusClient(url, auth=auth, ca_file=ca_file, verify=verify) as client:
        found = survey(client, start_s, end_s, selector)
        if found.refused and not step_s:
            raise InputError(client.url, "the server refuses even the cadence survey (samples per hour, "
                             f"{CADENCE_PROBES} hours) as too many samples: give the scrape interval as --step S")
        step = step_s if step_s else found.step(chunk_s)
        chunk_s = max(step, chunk_s // step * step)
        if group_label is None and found.hpc_jobs:
            group_label = HPC_LABEL
        query = FleetQuery(url=url, start_s=start_s, end_s=end_s, step_s=step, chunk_s=chunk_s,
                           gpus_per_query=gpus_per_query, parallel=parallel, selector=selector,
                           group_label=group_label, renamed_jobs=found.renamed_jobs)
        cache = FleetCache(cache_path, src=f"{client.url}|{selector}|{group_label or ''}", step_s=step)
        try:
            fleet = PrometheusFleet(client, query, cache, progress=progress)
            window = fleet.open()
            window.cadence, window.step_given, window.conventions = found.cadence, bool(step_s), found.conventions
            builder = LedgerBuilder(window, pricing or Pricing(), power_cap_w)
            for batch in fleet.batches():
                builder.add(batch)
            ledger = builder.finish()
        finally:
            cache.close()
    return LedgerReport(ledger=ledger, elapsed_s=time.monotonic() - t0, queries=fleet.queries + found.queries,
                        survey_queries=found.queries)
