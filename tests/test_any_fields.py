"""``Any`` in the data model, counted (issue 35): a class field typed ``Any`` (or a container of ``Any``, or a
bare ``dict``/``list``/``tuple``, which is one) is a contract mypy cannot check, so each one is listed here and
the list may only shrink.

Not counted: the msgspec schema of trace JSON (``sources/kineto/schema.py``: untrusted input, decoded lazily
on purpose), fields typed ``JsonObject`` (``run/meta.py``: one JSON object as a file held it — a hook record, a
hardware description — untrusted input read with ``.get``), and the hook (stdlib-only code inside the user's
process). The trace's columns (``run/trace_data.py``, the Run's part the Kineto reader builds) keep its process and
thread ids as the file gave them: listed apart."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "src" / "gpusleuth"

UNTRUSTED = {"sources/kineto/schema.py"}
# the Prometheus HTTP API's JSON envelope: whatever the server sent
UNTRUSTED_FIELDS = {"ledger/sources/prom_client.py:_Envelope.data"}

# Left to type (issue 35 item 1): take one off by typing it. The derived records (loader configs, hardware,
# scaling, fleet rows) are typed in run/records.py and beside their dataclasses; the framework the loop runs under
# is one fact (``Facts.framework``), no longer the hook's records.
KNOWN: set[str] = set()
# a trace's process and thread ids are whatever JSON scalars the file gave (Kineto writes ints, other tools
# strings: "Spans", "[pid 12] stream 7"), kept as given and compared only for equality; untrusted input
TRACE_MODEL = {f"run/trace_data.py:TraceData.{n}" for n in ("pids", "tids", "process_names", "thread_names")}


# a container named without its items' types holds Any just as well (``list`` is ``list[Any]``)
BARE = {"dict", "list", "tuple", "set", "frozenset", "Dict", "List", "Tuple", "Set", "FrozenSet"}


def _holds_any(annotation: ast.expr) -> bool:
    if "Any" in ast.unparse(annotation).replace("JsonObject", ""):
        return True
    subscripted = {id(n.value) for n in ast.walk(annotation) if isinstance(n, ast.Subscript)}
    return any(isinstance(n, ast.Name) and n.id in BARE and id(n) not in subscripted for n in ast.walk(annotation))


def any_fields() -> set[str]:
    found = set()
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel.startswith("hook/") or rel in UNTRUSTED:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ClassDef):
                continue
            for st in node.body:
                if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
                    if _holds_any(st.annotation):
                        found.add(f"{rel}:{node.name}.{st.target.id}")
    return found - UNTRUSTED_FIELDS


def test_any_fields_only_shrink():
    found = any_fields()
    new = found - KNOWN - TRACE_MODEL
    assert not new, f"a field typed Any outside untrusted input: {sorted(new)} (give it a type)"
    gone = (KNOWN | TRACE_MODEL) - found
    assert not gone, f"typed now: take {sorted(gone)} off the list in {Path(__file__).name}"
    assert not found - TRACE_MODEL and not KNOWN  # no field of the data model is Any but the ids above


def test_a_bare_container_counts_as_any():
    def holds(src: str) -> bool:
        return _holds_any(ast.parse(src, mode="eval").body)

    assert holds("dict") and holds("list[dict]") and holds("tuple | None") and holds("dict[str, Any]")
    assert not holds("dict[str, int]") and not holds("list[JsonObject]") and not holds("tuple[int, ...] | None")
