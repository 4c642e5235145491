"""``gpusleuth fleet``: one row per run over many run directories, and the dollars lost by cause.

Why it scales: each run directory carries ``summary.json`` (``report/summary.py`` makes the record), the flat
record the verb that recorded it left (or one computed once and cached outside the run: reading never writes a
run; ``sources/summaries.py`` reads both); the fleet puts those (one small JSON object each) into one Arrow
table and DuckDB does the filtering, sorting and the by-cause totals in SQL over it. (DuckDB's own
``read_json`` was 12× slower over 10,000 small files with an explicit schema, and its auto-detection samples
only the first files, so a badput cause first seen later would be dropped.) Only runs that have never been
reported are analysed (``pipeline/fleet.py``; their summary is then cached), so the 10,000th look at a fleet
costs one directory scan and one query. Numbers in BENCHMARKS.md. This module reads no file: it is handed
the records.

``price`` re-prices every run at one GPU-hour price (the team's own rate) instead of the price each run was
reported with (a CPU-only run is priced as one machine, as the report prices it); dollars lost by cause
are a run's badput seconds × its price per second of wall time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, cast

from gpusleuth.errors import InputError
from gpusleuth.sources.layout import RunDir

if TYPE_CHECKING:  # imported where used: pyarrow is the fleet extra's
    import pyarrow as pa

SORTS = {
    "lost": "lost_usd", "cost": "cost_usd", "gpu_hours": "gpu_hours", "goodput": "goodput", "mfu": "mfu",
    "start": "start_ns", "label": "label", "wall": "wall_s",
}

def _schema() -> pa.Schema:
    import pyarrow as pa

    f64, i64, txt = pa.float64(), pa.int64(), pa.string()
    return pa.schema([
        ("label", txt), ("path", txt), ("hostname", txt), ("start_ns", i64), ("wall_s", f64), ("exit_code", i64),
        ("gpus", i64), ("gpu_model", txt), ("gpu_hours", f64), ("steps", i64), ("samples_per_s", f64),
        ("goodput", f64), ("mfu", f64), ("cost_usd", f64), ("usd_per_second", f64),
        ("badput_s", pa.map_(txt, f64)), ("findings", i64), ("top_finding", txt), ("top_cause", txt),
        ("top_severity", txt), ("top_gain_usd", f64), ("filename", txt),
    ])


@dataclass
class FleetFilter:
    since_ns: int | None = None
    until_ns: int | None = None
    label: str | None = None  # a glob: 'bert-*'
    sort: str = "lost"
    ascending: bool = False
    limit: int | None = None
    price_per_gpu_hour: float | None = None


class FleetRow(TypedDict):
    """One run of the fleet table (``fleet --json``'s ``rows``): its summary's fields as :func:`_schema` holds
    them (each may be null), and the dollars lost at the fleet's price."""

    label: str | None
    path: str | None
    hostname: str | None
    start_ns: int | None
    wall_s: float | None
    exit_code: int | None
    gpus: int | None
    gpu_model: str | None
    gpu_hours: float | None
    steps: int | None
    samples_per_s: float | None
    goodput: float | None
    mfu: float | None
    cost_usd: float | None  # at the fleet's price (--price-per-gpu-hour), else the run's own
    lost_usd: float | None  # badput seconds × the price per second
    top_lost_cause: str | None  # the cause that lost the most dollars
    lost_by_cause: dict[str, float]
    findings: int | None
    top_finding: str | None
    top_cause: str | None
    top_severity: str | None
    top_gain_usd: float | None


@dataclass
class Fleet:
    rows: list[FleetRow]  # one per run, sorted and limited
    runs: int  # runs matching the filter (before the limit)
    lost_by_cause: dict[str, float] = field(default_factory=dict)  # USD over the matching runs, largest first
    totals: dict[str, float | None] = field(default_factory=dict)  # gpu_hours, cost_usd, lost_usd
    skipped: list[str] = field(default_factory=list)  # directories without a usable summary, and why


def query_fleet(summaries: list[tuple[Path, dict[str, Any]]], flt: FleetFilter) -> Fleet:
    """The fleet table of ``(run directory, summary record)`` pairs (``pipeline/fleet.fleet_summaries``)."""
    try:
        import duckdb
    except ImportError:
        raise InputError(summaries[0][0] if summaries else Path("."),
                         "gpusleuth fleet needs DuckDB: pip install 'gpusleuth[fleet]'") from None
    table, unreadable = _table(summaries)
    if table is None:
        return Fleet(rows=[], runs=0, skipped=unreadable)
    if flt.sort not in SORTS:
        raise ValueError(f"sort by one of {', '.join(SORTS)}")
    con = duckdb.connect()
    con.register("summaries", table)
    where = ["TRUE"]
    params: dict[str, float | int | str | None] = {"price": flt.price_per_gpu_hour}
    if flt.since_ns is not None:
        where.append("start_ns >= $since")
        params["since"] = flt.since_ns
    if flt.until_ns is not None:
        where.append("start_ns < $until")
        params["until"] = flt.until_ns
    if flt.label:
        where.append("label GLOB $label")
        params["label"] = flt.label
    con.execute(f"""
        CREATE TEMP TABLE runs AS
        SELECT *,
               CASE WHEN $price IS NULL THEN cost_usd ELSE greatest(gpus, 1) * wall_s * $price / 3600 END AS cost,
               CASE WHEN $price IS NULL THEN usd_per_second ELSE greatest(gpus, 1) * $price / 3600 END AS rate
        FROM summaries
        WHERE {' AND '.join(where)}
    """, params)
    con.execute("""
        CREATE TEMP TABLE lost AS
        SELECT filename, cause, seconds * rate AS usd
        FROM (SELECT filename, rate, unnest(map_keys(badput_s)) AS cause, unnest(map_values(badput_s)) AS seconds
              FROM runs)
        WHERE rate IS NOT NULL
    """)
    order = f"{SORTS[flt.sort]} {'ASC' if flt.ascending else 'DESC'} NULLS LAST, label"
    limit = f"LIMIT {int(flt.limit)}" if flt.limit else ""
    cur = con.execute(f"""
        WITH per_run AS (
            SELECT filename, sum(usd) AS lost_usd, arg_max(cause, usd) AS top_lost_cause,
                   map_from_entries(list({{'key': cause, 'value': usd}})) AS lost_by_cause
            FROM lost GROUP BY filename)
        SELECT r.label, r.path, r.hostname, r.start_ns, r.wall_s, r.exit_code, r.gpus, r.gpu_model, r.gpu_hours,
               r.steps, r.samples_per_s, r.goodput, r.mfu, r.cost AS cost_usd, p.lost_usd, p.top_lost_cause,
               p.lost_by_cause, r.findings, r.top_finding, r.top_cause, r.top_severity, r.top_gain_usd
        FROM runs r LEFT JOIN per_run p USING (filename)
        ORDER BY {order} {limit}
    """)
    names = [c[0] for c in cur.description]
    # the columns of the SELECT above, of the Arrow schema's types (null where a summary lacked one)
    rows = [cast(FleetRow, dict(zip(names, row))) for row in cur.fetchall()]
    for row in rows:
        row["lost_by_cause"] = dict(row["lost_by_cause"] or {})
    # an aggregate without GROUP BY returns exactly one row; duckdb's stubs type fetchone() as maybe None
    totals = con.execute("SELECT count(*), sum(gpu_hours), sum(cost) FROM runs").fetchone()
    count, hours, cost = totals or (0, None, None)
    by_cause = dict(con.execute("SELECT cause, sum(usd) AS s FROM lost GROUP BY cause ORDER BY s DESC").fetchall())
    lost_total = sum(by_cause.values()) if by_cause else None
    return Fleet(rows=rows, runs=count, lost_by_cause=by_cause, skipped=unreadable,
                 totals={"gpu_hours": hours, "cost_usd": cost, "lost_usd": lost_total})


def _table(summaries: list[tuple[Path, dict[str, Any]]]) -> tuple[pa.Table | None, list[str]]:
    """Every run's summary as one Arrow table (None if none), and those with a field of the wrong type, named."""
    import pyarrow as pa

    schema = _schema()
    names = [n for n in schema.names if n != "filename"]
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    for d, rec in summaries:
        row = {n: rec.get(n) for n in names}
        row["filename"] = str(RunDir(d).summary)
        rows.append(row)
    if not rows:
        return None, bad
    try:
        return pa.Table.from_pylist(rows, schema=schema), bad
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        good = []  # one record with a wrong type: find it rather than lose the fleet
        for row in rows:
            try:
                pa.Table.from_pylist([row], schema=schema)
                good.append(row)
            except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
                bad.append(f"{row['filename']}: a field has the wrong type ({exc}); left out")
        return (pa.Table.from_pylist(good, schema=schema) if good else None), bad


def parse_when(text: str) -> int:
    """``2026-11-01``, ``2026-11-01T08:00``, or a span back from now: ``36h``, ``7d``, ``2w`` → ns since epoch."""
    units = {"h": 3600, "d": 86400, "w": 7 * 86400}
    t = text.strip()
    if t[:-1].replace(".", "", 1).isdigit() and t[-1:] in units:
        return int((datetime.now(timezone.utc).timestamp() - float(t[:-1]) * units[t[-1]]) * 1e9)
    try:
        when = datetime.fromisoformat(t)
    except ValueError:
        raise ValueError(f"a time is an ISO date (2026-11-01[T08:00]) or a span like 36h/7d/2w, got {text!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1e9)
