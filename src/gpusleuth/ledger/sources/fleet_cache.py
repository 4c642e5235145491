"""The DuckDB file that makes ``fleet --prometheus`` incremental: samples already fetched are never fetched again.

Time is cut into chunks aligned to the epoch (``chunk_s``, a multiple of the step), so a re-run, or a
longer ``--since``, asks the server only for chunks it has not got; a chunk that ends less than
``FRESH_S`` before now is kept but not marked complete (the server may still be receiving it) and is
fetched again next time. Samples are stored wide (one row per GPU and step, only where the server had a
sample), GPUs and owners (namespace/pod/container) once each — the pods sharing a time-sliced GPU as one more
owner row listing its members — and a pod's GPU request as the segments of time it existed.
Everything is keyed by the server URL and the label selector, so two clusters share one cache file safely.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import numpy as np

from gpusleuth.errors import InputError
from gpusleuth.ledger.run.fleet_usage import COLUMN_DTYPE, SAMPLE_COLUMNS, GpuSeries, Owner, PodRequest, PodTokens

FRESH_S = 900  # a chunk ending within this many seconds of now may still grow: fetched again next time
FORMAT = 4  # chunks stored by an older gpusleuth (no GR_ENGINE_ACTIVE, shared GPUs, energy, tokens, SM clock) are fetched again

_SCHEMA = """
CREATE TABLE IF NOT EXISTS chunks (src TEXT, step INTEGER, chunk_start BIGINT, chunk_end BIGINT,
                                   complete BOOLEAN, fetched_at DOUBLE, metrics TEXT);
CREATE TABLE IF NOT EXISTS gpus (src TEXT, uuid TEXT, host TEXT, gpu TEXT, model TEXT, mig_profile TEXT);
CREATE TABLE IF NOT EXISTS owners (src TEXT, id INTEGER, namespace TEXT, pod TEXT, container TEXT, grp TEXT);
CREATE TABLE IF NOT EXISTS samples (src TEXT, step INTEGER, uuid TEXT, t BIGINT, util REAL, sm_active REAL,
                                    tensor_active REAL, fb_used_mib REAL, fb_free_mib REAL, power_w REAL,
                                    owner INTEGER);
ALTER TABLE chunks ADD COLUMN IF NOT EXISTS fmt INTEGER;
ALTER TABLE owners ADD COLUMN IF NOT EXISTS members TEXT;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS gr_active REAL;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS energy_mj DOUBLE;
ALTER TABLE samples ADD COLUMN IF NOT EXISTS sm_clock_mhz REAL;
CREATE TABLE IF NOT EXISTS tokens (src TEXT, step INTEGER, t BIGINT, namespace TEXT, pod TEXT, model TEXT,
                                   generated DOUBLE, prompt DOUBLE);
CREATE TABLE IF NOT EXISTS requests (src TEXT, step INTEGER, chunk_start BIGINT, namespace TEXT, pod TEXT,
                                     container TEXT, node TEXT, gpus DOUBLE, samples BIGINT, first_s BIGINT,
                                     last_s BIGINT);
"""


class FleetCache:
    """One DuckDB database (a file, or a temporary one deleted on close) holding what was fetched."""

    def __init__(self, path: Path | None, src: str, step_s: int, memory_limit: str = "256MB"):
        import duckdb

        self.src, self.step = src, int(step_s)
        self._tmp: Path | None = None
        if path is None:
            import tempfile

            self._tmp = Path(tempfile.mkdtemp(prefix="gpusleuth-fleet-")) / "cache.duckdb"
            path = self._tmp
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = duckdb.connect(str(self.path))
        except (OSError, duckdb.Error) as exc:
            raise InputError(self.path, f"cannot open the fleet cache ({str(exc)[:200]}); give another --cache "
                             "path or --no-cache") from None
        self.db.execute(f"SET memory_limit='{memory_limit}'; SET threads=2; SET preserve_insertion_order=false")
        self.db.execute(_SCHEMA)
        self._owners: dict[Owner, int] = {}
        self._sets: dict[frozenset[int], int] = {}  # the pods sharing a time-sliced GPU → their holder id
        self._members: dict[int, frozenset[int]] = {}
        self._next = 0
        for oid, ns, pod, cont, grp, members in self.db.execute(
                "SELECT id, namespace, pod, container, grp, members FROM owners WHERE src = ?", [src]).fetchall():
            if members:
                ids = frozenset(int(x) for x in members.split(","))
                self._sets[ids], self._members[oid] = oid, ids
            else:
                self._owners[Owner(ns, pod, cont, grp)] = oid
            self._next = max(self._next, oid + 1)
        self._known_gpus = {u for (u,) in self.db.execute("SELECT uuid FROM gpus WHERE src = ?", [src]).fetchall()}

    def close(self) -> None:
        self.db.close()
        if self._tmp is not None:
            import shutil

            shutil.rmtree(self._tmp.parent, ignore_errors=True)

    # --- chunks ---------------------------------------------------------------------------------------
    def complete_chunks(self) -> dict[int, list[str]]:
        """Chunk start → the metric names it held, for chunks fetched completely at this step."""
        rows = self.db.execute("SELECT chunk_start, metrics FROM chunks WHERE src = ? AND step = ? AND complete "
                               "AND fmt >= ?", [self.src, self.step, FORMAT]).fetchall()
        return {int(s): [m for m in (metrics or "").split(",") if m] for s, metrics in rows}

    def begin_chunk(self, start: int, end: int) -> None:
        """Forget whatever an earlier, incomplete fetch of this chunk left."""
        args = [self.src, self.step, start, end]
        self.db.execute("DELETE FROM samples WHERE src = ? AND step = ? AND t >= ? AND t < ?", args)
        self.db.execute("DELETE FROM requests WHERE src = ? AND step = ? AND chunk_start = ?", args[:3])
        self.db.execute("DELETE FROM tokens WHERE src = ? AND step = ? AND t >= ? AND t < ?", args)
        self.db.execute("DELETE FROM chunks WHERE src = ? AND step = ? AND chunk_start = ?", args[:3])

    def end_chunk(self, start: int, end: int, metrics: list[str]) -> None:
        complete = end <= time.time() - FRESH_S
        self.db.execute("INSERT INTO chunks (src, step, chunk_start, chunk_end, complete, fetched_at, metrics, fmt) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        [self.src, self.step, start, end, complete, time.time(), ",".join(sorted(metrics)), FORMAT])

    # --- writing --------------------------------------------------------------------------------------
    def owner_id(self, owner: Owner) -> int:
        oid = self._owners.get(owner)
        if oid is None:
            oid = self._next
            self._next += 1
            self._owners[owner] = oid
            self.db.execute("INSERT INTO owners (src, id, namespace, pod, container, grp) VALUES (?, ?, ?, ?, ?, ?)",
                            [self.src, oid, owner.namespace, owner.pod, owner.container, owner.group])
        return oid

    def members(self, holder: int) -> frozenset[int]:
        """The owner ids behind a holder id: itself, or the pods sharing a time-sliced GPU."""
        return self._members.get(holder, frozenset((holder,)))

    def holder_id(self, members: frozenset[int]) -> int:
        """The id of pods holding a GPU together (one pod: its own id)."""
        if len(members) == 1:
            return next(iter(members))
        hid = self._sets.get(members)
        if hid is None:
            hid = self._next
            self._next += 1
            self._sets[members], self._members[hid] = hid, members
            self.db.execute("INSERT INTO owners (src, id, namespace, pod, container, grp, members) "
                            "VALUES (?, ?, '', '', '', '', ?)", [self.src, hid, ",".join(map(str, sorted(members)))])
        return hid

    def add_gpus(self, gpus: dict[str, dict[str, str]]) -> None:
        new = [[self.src, u, g.get("host", ""), g.get("gpu", ""), g.get("model", ""), g.get("mig_profile", "")]
               for u, g in gpus.items() if u not in self._known_gpus]
        if new:
            self.db.executemany("INSERT INTO gpus VALUES (?, ?, ?, ?, ?, ?)", new)
            self._known_gpus.update(r[1] for r in new)

    def add_samples(self, uuids: list[str], t0: int, cols: dict[str, np.ndarray], owner: np.ndarray) -> int:
        """Store a (GPU × step) block; only cells where the server had some sample. Returns rows stored."""
        import pyarrow as pa

        have = np.zeros(owner.shape, bool)
        for c in SAMPLE_COLUMNS:
            have |= ~np.isnan(cols[c])
        gi, si = np.nonzero(have)
        if not len(gi):
            return 0
        table = pa.table({
            "src": pa.array([self.src] * len(gi), pa.string()).dictionary_encode(),
            "step": np.full(len(gi), self.step, np.int32),
            "uuid": pa.DictionaryArray.from_arrays(gi.astype(np.int32), pa.array(uuids, pa.string())),
            "t": (t0 + si.astype(np.int64) * self.step),
            **{c: cols[c][gi, si].astype(COLUMN_DTYPE[c]) for c in SAMPLE_COLUMNS},
            "owner": owner[gi, si].astype(np.int32),
        })
        self.db.register("_block", table)
        names = ", ".join(("src", "step", "uuid", "t", *SAMPLE_COLUMNS, "owner"))
        self.db.execute(f"INSERT INTO samples ({names}) SELECT {names} FROM _block")
        self.db.unregister("_block")
        return len(gi)

    def add_requests(self, chunk_start: int, rows: list[PodRequest]) -> None:
        import pyarrow as pa

        if not rows:
            return
        n = len(rows)
        self.db.register("_reqs", pa.table({
            "src": [self.src] * n, "step": [self.step] * n, "chunk_start": [chunk_start] * n,
            "namespace": [r.namespace for r in rows], "pod": [r.pod for r in rows],
            "container": [r.container for r in rows], "node": [r.node for r in rows],
            "gpus": [r.gpus for r in rows], "samples": [r.samples for r in rows],
            "first_s": [r.first_s for r in rows], "last_s": [r.last_s for r in rows]}))
        self.db.execute("INSERT INTO requests SELECT * FROM _reqs")
        self.db.unregister("_reqs")

    def add_tokens(self, t0: int, rows: dict[tuple[str, str, str], dict[str, np.ndarray]]) -> None:
        """One chunk's token counters: (namespace, pod, model) → {"generated", "prompt"} per step from ``t0``."""
        import pyarrow as pa

        keys = list(rows)
        ks = [np.flatnonzero(~np.isnan(c["generated"]) | ~np.isnan(c["prompt"])) for c in rows.values()]
        n = sum(len(k) for k in ks)
        if not n:
            return
        # the key columns as dictionaries (an index per row), not a Python string per row
        kid = np.repeat(np.arange(len(keys), dtype=np.int32), [len(k) for k in ks])

        def column(i: int) -> pa.DictionaryArray:
            return pa.DictionaryArray.from_arrays(kid, pa.array([key[i] for key in keys], pa.string()))

        self.db.register("_tok", pa.table({
            "src": pa.array([self.src], pa.string()).dictionary_encode().take(np.zeros(n, np.int32)),
            "step": np.full(n, self.step, np.int32),
            "t": np.concatenate([t0 + k.astype(np.int64) * self.step for k in ks]),
            "namespace": column(0), "pod": column(1), "model": column(2),
            "generated": np.concatenate([c["generated"][k] for c, k in zip(rows.values(), ks)]),
            "prompt": np.concatenate([c["prompt"][k] for c, k in zip(rows.values(), ks)])}))
        self.db.execute("INSERT INTO tokens SELECT src, step, t, namespace, pod, model, generated, prompt FROM _tok")
        self.db.unregister("_tok")

    def tokens(self, start: int, end: int) -> list[PodTokens]:
        """Each (namespace, pod, model)'s token counters on the grid [start, end), NaN where there was no sample."""
        n = (end - start) // self.step
        args = [self.src, self.step, start, end]
        where = "src = ? AND step = ? AND t >= ? AND t < ?"
        keys = self.db.execute(f"SELECT DISTINCT namespace, pod, model FROM tokens WHERE {where} ORDER BY 1, 2, 3",
                               args).fetchall()
        if not keys:
            return []
        out = []
        for ns, pod, model in keys:  # a query per engine pod: no sort or window over all their rows at once
            tbl = self.db.execute(f"SELECT t, generated, prompt FROM tokens WHERE {where} AND namespace = ? AND pod = ? "
                                  "AND model = ?", [*args, ns, pod, model]).fetchnumpy()
            k = ((np.asarray(tbl["t"], dtype=np.int64) - start) // self.step).astype(np.int64)
            pt = PodTokens(ns, pod, model, np.full(n, np.nan), np.full(n, np.nan))
            pt.generated[k] = np.ma.filled(np.ma.asarray(tbl["generated"]).astype(np.float64), np.nan)
            pt.prompt[k] = np.ma.filled(np.ma.asarray(tbl["prompt"]).astype(np.float64), np.nan)
            out.append(pt)
        return out

    # --- reading --------------------------------------------------------------------------------------
    def gpu_ids(self, start: int, end: int) -> list[str]:
        """GPUs with any sample in [start, end), in a stable order (host, index)."""
        rows = self.db.execute("""
            SELECT g.uuid FROM gpus g WHERE g.src = $src AND EXISTS (
                SELECT 1 FROM samples s WHERE s.src = $src AND s.step = $step AND s.uuid = g.uuid
                AND s.t >= $start AND s.t < $end)
            ORDER BY g.host, try_cast(g.gpu AS INTEGER), g.gpu, g.uuid
        """, {"src": self.src, "step": self.step, "start": start, "end": end}).fetchall()
        return [u for (u,) in rows]

    def metrics_seen(self, starts: list[int]) -> set[str]:
        if not starts:
            return set()
        rows = self.db.execute("SELECT metrics FROM chunks WHERE src = ? AND step = ? AND list_contains(?, chunk_start)",
                               [self.src, self.step, starts]).fetchall()
        return {m for (ms,) in rows for m in (ms or "").split(",") if m}

    def series(self, uuids: list[str], start: int, end: int) -> Iterator[GpuSeries]:
        """The GPUs' samples on the grid [start, end), NaN where there were none."""
        n = (end - start) // self.step
        owners = {oid: o for o, oid in self._owners.items()}
        info = {u: (h, g, m, mig) for u, h, g, m, mig in self.db.execute(
            "SELECT uuid, host, gpu, model, mig_profile FROM gpus WHERE src = ? AND list_contains(?, uuid)",
            [self.src, uuids]).fetchall()}
        import pyarrow as pa

        # the batch's GPUs as a small table joined in, so each row carries an int, not a Python str per row
        self.db.register("_batch", pa.table({"uuid": pa.array(uuids, pa.string()),
                                             "gi": np.arange(len(uuids), dtype=np.int32)}))
        tbl = self.db.execute(f"""
            SELECT b.gi, s.t, {", ".join(f"s.{c}" for c in SAMPLE_COLUMNS)}, s.owner
            FROM samples s JOIN _batch b ON s.uuid = b.uuid
            WHERE s.src = ? AND s.step = ? AND s.t >= ? AND s.t < ? ORDER BY b.gi, s.t
        """, [self.src, self.step, start, end]).fetchnumpy()
        self.db.unregister("_batch")
        uu = np.asarray(tbl["gi"], dtype=np.int32)
        idx = ((np.asarray(tbl["t"]) - start) // self.step).astype(np.int64)
        values = {c: np.ma.filled(np.ma.asarray(tbl[c]).astype(COLUMN_DTYPE[c]), np.nan) for c in SAMPLE_COLUMNS}
        own = np.ma.filled(np.ma.asarray(tbl["owner"]), -1).astype(np.int32)
        del tbl
        bounds = np.flatnonzero(np.r_[True, uu[1:] != uu[:-1], True]) if len(uu) else np.array([0])
        for a, b in zip(bounds[:-1], bounds[1:]):
            uuid = uuids[int(uu[a])]
            cols = {c: np.full(n, np.nan, COLUMN_DTYPE[c]) for c in SAMPLE_COLUMNS}
            k = idx[a:b]
            for c in SAMPLE_COLUMNS:
                cols[c][k] = values[c][a:b]
            seg = own[a:b]
            held = np.unique(seg[seg >= 0])  # the cache's holder ids on this GPU → 0, 1, … in GpuSeries.holders
            owner = np.full(n, -1, np.int32)
            owner[k] = np.where(seg >= 0, np.searchsorted(held, seg), -1)
            pods = sorted({m for h in held for m in self.members(int(h))})
            local = {m: i for i, m in enumerate(pods)}
            host, gpu, model, mig = info.get(uuid, ("", "", "", ""))
            yield GpuSeries(uuid=uuid, host=host, gpu=gpu, model=model, start_s=start, step_s=self.step,
                            columns=cols, owner=owner, owners=[owners[m] for m in pods], mig_profile=mig,
                            holders=[tuple(local[m] for m in sorted(self.members(int(h)))) for h in held])

    def requests(self, start: int, end: int) -> list[PodRequest]:
        """Each pod's request over [start, end): its stored presence segments clipped to the window."""
        rows = self.db.execute("""
            WITH seg AS (
                SELECT namespace, pod, container, node, gpus, greatest(first_s, $start) AS a,
                       least(last_s, $end - $step) AS b
                FROM requests WHERE src = $src AND step = $step AND last_s >= $start AND first_s < $end)
            SELECT namespace, pod, container, any_value(node), max(gpus), sum((b - a) // $step + 1), min(a), max(b)
            FROM seg WHERE b >= a GROUP BY namespace, pod, container ORDER BY namespace, pod, container
        """, {"src": self.src, "step": self.step, "start": start, "end": end}).fetchall()
        return [PodRequest(namespace=ns, pod=pod, container=c, node=node or "", gpus=float(g), samples=int(s),
                           first_s=int(f), last_s=int(la)) for ns, pod, c, node, g, s, f, la in rows]
