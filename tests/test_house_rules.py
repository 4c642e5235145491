"""The house rules of docs/architecture.md, checked from the imports (AST), so the next change keeps them.

Data flows one way: sources → Run → analysis → diagnosis → report → render → cli; ``pipeline`` drives the
pass (Runs in, Reports out) and is the only stage after the analysis that holds a Run. A stage may import the
stages before it, never those after; rules see only Facts; renderers format a Report and never reach back
into the analysis or the files; only ``sources/`` (and the recorder, which writes them) reads files. Imports
under ``if TYPE_CHECKING:`` are for annotations only and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "src" / "gpusleuth"

# the packages each stage may import from gpusleuth (besides itself and the leaf modules below)
LEAVES = {"errors", "_version", "lean_imports"}
ALLOWED = {
    "run": {"run"},
    "sources": {"run", "sources", "recorder.schemas"},  # the recorder's on-disk schemas are the contract
    # writes the run directory; finalize turns raw events into tables; the exporter's live window numbers are
    # the analysis's own (analysis/window.py: the step view's carving), never a second computation; the stall
    # watch's terminal line is the report's verdict (analysis/stalls.py: judge), on the same record
    "recorder": {"run", "sources", "recorder", "analysis.window", "analysis.stalls"},
    "analysis": {"run", "analysis", "sources.kineto.model"},
    # the analysis is the last stage that sees a Run: what comes after reads the RunAnalysis
    "diagnosis": {"analysis", "diagnosis"},
    "report": {"sources", "analysis", "diagnosis", "report"},  # sources: the live view's tails
    # the pipeline owns each verb's flow, record → finalize → read → report (issue 35: thin verbs), so it may
    # start the recorder; the stages below never import it
    "pipeline": {"run", "sources", "recorder", "analysis", "diagnosis", "report", "pipeline"},
    # renderers read the Report, plus the vocabulary the analysis defines (metric ids and their direction,
    # trace category ids) so that labels match the numbers
    "render": {"report", "render", "diagnosis.taxonomy", "diagnosis.finding", "analysis.compare", "analysis.trace"},
}


# A domain's room (docs/architecture.md, "The rooms"): one package with a subpackage (or module) per stage,
# named after the stage — ``serving/analysis/`` is analysis, ``serving/rules/`` diagnosis rules,
# ``serving/report.py`` report — and held to that stage's rules, as if it were in the stage's folder.
ROOMS = {"serving", "ledger"}
ROOM_STAGES = {"rules": "diagnosis.rules"}


def _stage_path(name: str) -> str:
    """A module name without ``gpusleuth.``, a room's module as its stage's (``serving.analysis.load`` →
    ``analysis.load``); a room's own ``__init__`` is a leaf (its docstring is the room's map)."""
    parts = name.split(".")
    if parts[0] in ROOMS:
        if len(parts) == 1:
            return "errors"  # the room's package: documentation only, a leaf
        return ".".join([ROOM_STAGES.get(parts[1], parts[1])] + parts[2:])
    return name


def _modules():
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "hook":  # stdlib-only code run inside the user's interpreter: no gpusleuth imports
            continue
        yield rel, ast.parse(path.read_text(), str(path))


def _stage_parts(rel: Path) -> tuple[str, ...]:
    """``rel``'s path parts as its stage's: ``serving/rules/slo.py`` → ("diagnosis", "rules", "slo.py")."""
    return tuple(_stage_path(".".join(rel.parts)).split("."))


def _type_checking_lines(tree) -> set[int]:
    lines = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for sub in ast.walk(node):
                lines.add(getattr(sub, "lineno", -1))
    return lines


MODULES = {".".join(("gpusleuth",) + p.relative_to(PKG).with_suffix("").parts).removesuffix(".__init__")
           for p in PKG.rglob("*.py")}


def _imports(tree):
    skip = _type_checking_lines(tree)
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "gpusleuth" or node.module.startswith("gpusleuth."):
                # `from pkg import module` depends on the module (and the package's __init__ runs first,
                # which a module of the package importing it back does not make a cycle)
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    yield sub if sub in MODULES else node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gpusleuth."):
                    yield alias.name


def _allowed(target: str, allowed: set[str]) -> bool:
    name = _stage_path(target[len("gpusleuth."):])
    if name.split(".")[0] in LEAVES:
        return True
    return any(name == a or name.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_each_stage_imports_only_the_stages_before_it(stage):
    bad = []
    for rel, tree in _modules():
        if _stage_parts(rel)[0] != stage:
            continue
        bad += [f"{rel}: imports {t}" for t in _imports(tree) if not _allowed(t, ALLOWED[stage])]
    assert not bad, "\n".join(bad)


def test_nothing_after_the_analysis_imports_the_run_model():
    """Not even for an annotation: a Run that reaches the diagnosis, a report or a renderer is climbed back
    up from (re-deriving what the analysis computed). ``pipeline`` hands it to the analysis and stops."""
    bad = []
    for rel, tree in _modules():
        if _stage_parts(rel)[0] not in ("diagnosis", "report", "render"):
            continue
        for node in ast.walk(tree):
            names = ([node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else
                     [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            bad += [f"{rel}:{node.lineno}: imports {n}" for n in names
                    if n == "gpusleuth.run" or n.startswith("gpusleuth.run.")]
    assert not bad, "\n".join(bad)


def test_rules_see_only_facts():
    bad = []
    for rel, tree in _modules():
        if _stage_parts(rel)[:2] != ("diagnosis", "rules"):
            continue
        ok = {"diagnosis.facts", "diagnosis.finding", "diagnosis.rules"}
        bad += [f"{rel}: imports {t}" for t in _imports(tree) if not _allowed(t, ok)]
    assert not bad, "\n".join(bad)


# what each scope hands its rule one of (rules/_scope.py): a rule under it never walks that list itself
UNIT_LISTS = {"per_rank": ("traces", "host_ops", "device_traces"), "per_gpu": ("gpus",)}


def test_a_rule_that_judges_one_rank_or_gpu_leaves_the_loop_to_the_engine():
    """A rule marked @per_rank / @per_gpu is written for one rank's or one card's facts: the engine iterates
    and merges (issue 22). A loop over facts.traces / facts.gpus inside it would judge several at once again
    and hide from the engine which rank or card lacked its data."""
    bad, marked = [], 0
    for rel, tree in _modules():
        if _stage_parts(rel)[:2] != ("diagnosis", "rules"):
            continue
        for fn in ast.walk(tree):
            if not isinstance(fn, ast.FunctionDef):
                continue
            marks = [d.id for d in fn.decorator_list if isinstance(d, ast.Name) and d.id in UNIT_LISTS]
            for mark in marks:
                marked += 1
                for node in ast.walk(fn):
                    iters = ([node.iter] if isinstance(node, (ast.For, ast.comprehension)) else [])
                    for it in iters:
                        names = {n.attr for n in ast.walk(it) if isinstance(n, ast.Attribute)}
                        names |= {n.func.id for n in ast.walk(it) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
                        if names & set(UNIT_LISTS[mark]):
                            bad.append(f"{rel}:{node.lineno}: {fn.name} (@{mark}) loops over {ast.unparse(it)}")
    assert marked >= 14, f"only {marked} rules marked @per_rank / @per_gpu: did the marks move?"
    assert not bad, "\n".join(bad)


def _module_name(rel: Path) -> str:
    return ".".join(("gpusleuth",) + rel.with_suffix("").parts).removesuffix(".__init__")


def _all_imports(rel: Path, tree) -> set[str]:
    """Every gpusleuth module a file imports, wherever the import stands: at module level, in a function, under
    ``if TYPE_CHECKING:`` (an annotation's import is still an edge a reader has to follow, and a cycle through
    it is one a refactor trips over), and relative imports resolved against the file's package."""
    me = _module_name(rel)
    package = me if rel.name == "__init__.py" else me.rsplit(".", 1)[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            if module == "gpusleuth" or module.startswith("gpusleuth."):
                for alias in node.names:
                    sub = f"{module}.{alias.name}"
                    out.add(sub if sub in MODULES else module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("gpusleuth.")}
    return out - {me}


KNOWN_CYCLES: set[str] = set()  # none: the last (the Kineto reader and its salvage) went with issue 36's result.py


def test_no_import_cycles_between_modules():
    """No module reaches itself through the imports, type-only and function-level ones included (issue 35):
    result types live in leaf modules, so the module that computes them and the ones that read them never
    import each other. A package's ``__init__`` re-exporting its own modules is Python's normal package
    import, not a layering loop; the package root re-exports the API."""
    graph = {_module_name(rel): _all_imports(rel, tree) for rel, tree in _modules()}
    known = set(graph)
    edges = {m: {t for t in ts if t in known} for m, ts in graph.items()}
    cycles = _cycles(edges)
    cycles = [c for c in cycles if not c.startswith("gpusleuth →") and " gpusleuth →" not in c
              and not any(c.startswith(f"{pkg} →") for pkg in _packages())]
    assert not [c for c in cycles if c not in KNOWN_CYCLES], "\n".join(cycles)


# The user's API: each trainer's callback is imported from its framework's module under the one documented name
# (docs/integrations.md), as the frameworks' own integrations do; renaming one would break users' code.
PUBLIC_TWINS = {"GpusleuthCallback": {"integrations/hf.py", "integrations/lightning.py"}}


def test_each_class_name_once():
    """One name, one class (issue 35): two ``StepStats`` (or ``Band``, ``Series``, ``Target``) meant a reader
    or a grep landed on the wrong one. The hook's classes count too: they share the reader's head."""
    where: dict[str, list[str]] = {}
    for path in sorted(PKG.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.relative_to(PKG)}:{node.lineno}")
    twice = {name: places for name, places in where.items() if len(places) > 1
             and {p.split(":")[0] for p in places} != PUBLIC_TWINS.get(name)}
    assert not twice, "\n".join(f"{n}: {', '.join(p)}" for n, p in sorted(twice.items()))


def _cycles(edges: dict[str, set[str]]) -> list[str]:
    """Every circle a depth-first walk of ``edges`` closes, as "a → b → a"."""
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(m, path):
        state[m] = 1
        for t in sorted(edges[m]):
            if state.get(t) == 1:
                cycles.append(" → ".join(path[path.index(t):] + [t]))
            elif t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    return cycles


def _packages() -> set[str]:
    """Package __init__ modules: they import their own modules to re-export them; a module of the package
    using the package's name back is Python's normal package import, not a layering loop."""
    return {m for m in MODULES if (PKG / Path(*m.split(".")[1:]) / "__init__.py").exists()}


HOOK = PKG / "hook"


def _hook_imports(tree) -> list[tuple[int, str, bool]]:
    """(line, module, at module level) of every import in a hook file."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, node.col_offset == 0) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            out.append((node.lineno, node.module or "", node.col_offset == 0))
    return out


def test_hook_files_are_prefixed_stdlib_only_top_level_modules():
    """Each hook file becomes a top-level module of the user's program (the hook directory is first on the
    job's PYTHONPATH): it carries the ``_gpusleuth_`` prefix so no user module shares its name, imports
    nothing of gpusleuth (the package may not even be importable there), and at module level only the
    standard library and its sibling hook modules (torch and servers are patched once the job imports them)."""
    import sys

    siblings = {p.stem for p in HOOK.glob("*.py")}
    bad = []
    for path in sorted(HOOK.glob("*.py")):
        if path.stem != "sitecustomize" and not path.stem.startswith("_gpusleuth_"):
            bad.append(f"hook/{path.name}: not named _gpusleuth_*")
        for line, module, top in _hook_imports(ast.parse(path.read_text(), str(path))):
            root = module.split(".")[0]
            if root == "gpusleuth":
                bad.append(f"hook/{path.name}:{line}: imports {module} (the hook is stdlib-only)")
            elif top and root not in sys.stdlib_module_names and root not in siblings:
                bad.append(f"hook/{path.name}:{line}: imports {module} at module level (stdlib only)")
    assert not bad, "\n".join(bad)


FILE_CALLS = {"read_bytes", "read_text", "write_bytes", "write_text", "mkdir", "unlink", "rmdir", "touch",
              "scandir", "listdir", "rename", "remove", "glob", "rglob", "iterdir"}


@pytest.mark.parametrize("stage", ["analysis", "diagnosis", "report"])
def test_analysis_diagnosis_and_report_touch_no_file(stage):
    """Files are read in ``sources/`` and written by the recorder or a cache module there (the summary cache:
    ``sources/summaries.py``); analysis, diagnosis and the report are handed what was read. A report that
    wrote its summary cache from ``report/`` was how reading a run came to write it."""
    bad = []
    for rel, tree in _modules():
        if _stage_parts(rel)[0] != stage:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Name) and f.id == "open":
                bad.append(f"{rel}:{node.lineno}: open()")
            elif isinstance(f, ast.Attribute) and f.attr in FILE_CALLS:
                bad.append(f"{rel}:{node.lineno}: .{f.attr}()")
            elif isinstance(f, ast.Attribute) and f.attr == "replace" and ast.unparse(f.value) == "os":
                bad.append(f"{rel}:{node.lineno}: os.replace()")
    assert not bad, "\n".join(bad)


def _hook_graph() -> dict[str, set[str]]:
    """Hook module → the sibling hook modules it imports, anywhere in the file (a function-level import
    is an edge too: it runs in the same process, and a circle through it is still a circle)."""
    siblings = {p.stem for p in HOOK.glob("*.py")}
    return {path.stem: {m.split(".")[0] for _, m, _ in _hook_imports(ast.parse(path.read_text(), str(path)))
                        if m.split(".")[0] in siblings and m.split(".")[0] != path.stem}
            for path in sorted(HOOK.glob("*.py"))}


def test_the_hooks_imports_form_no_circle():
    """The hook by responsibility (issue 22): records and writer at the bottom, the recorder's state above
    them, the patch modules (torch, dist, serve) above the state, the activation on top. A patch module the
    state needs is handed in (``Recorder.torch_imported``), never imported back."""
    cycles = _cycles(_hook_graph())
    assert not cycles, "\n".join(cycles)


# What reaching into a recorder looks like: ``r.x = …``, ``r.x += …``, ``r.x[i] = …``, ``del r.x``,
# ``setattr(r, …)``, ``r.x.append(…)``. The recorder is a parameter named r/rec/recorder, anything assigned
# from one, or ``….R`` / ``….rec`` (``_gpusleuth_state.R``, a Device's ``self.rec``).
_RECORDER_NAMES = {"r", "rec", "recorder"}
_MUTATORS = {"append", "appendleft", "extend", "insert", "add", "update", "pop", "popleft", "remove", "discard",
             "clear", "setdefault", "__setitem__"}


def _is_recorder(node, names: set[str]) -> bool:
    return (isinstance(node, ast.Name) and node.id in names) or \
        (isinstance(node, ast.Attribute) and node.attr in ("R", "rec"))


def _recorder_writes(tree) -> list[tuple[int, str]]:
    out = []
    for fn in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
        names = set(_RECORDER_NAMES)
        for node in ast.walk(fn):  # locals bound to the recorder: ``r = _state.R``
            if isinstance(node, ast.Assign) and _is_recorder(node.value, names):
                names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            targets = (node.targets if isinstance(node, (ast.Assign, ast.Delete)) else
                       [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else [])
            for t in targets:
                for sub in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    while isinstance(sub, ast.Subscript):
                        sub = sub.value
                    if isinstance(sub, ast.Attribute) and _is_recorder(sub.value, names):
                        out.append((sub.lineno, ast.unparse(sub)))
            if isinstance(node, ast.Call):
                f = node.func
                if isinstance(f, ast.Name) and f.id in ("setattr", "delattr") and node.args \
                        and _is_recorder(node.args[0], names):
                    out.append((node.lineno, ast.unparse(node)))
                elif isinstance(f, ast.Attribute) and f.attr in _MUTATORS and isinstance(f.value, ast.Attribute) \
                        and _is_recorder(f.value.value, names):
                    out.append((node.lineno, ast.unparse(f)))
    return sorted(set(out))


# The recorder's own modules: ``_gpusleuth_state`` (the process, ``Recorder`` itself) and the parts it is made of,
# one responsibility each (issue 35): steps, the optimizer, what a step is fed, no-grad passes, phases, output.
RECORDER_PARTS = {"_gpusleuth_state", "_gpusleuth_steps", "_gpusleuth_optim", "_gpusleuth_feed", "_gpusleuth_nograd",
                  "_gpusleuth_phases", "_gpusleuth_output"}


def test_only_the_recorders_modules_change_the_recorder():
    """Patch modules (torch, dist, serve, knobs), the device, the API and the activation call the recorder's
    methods; they never set, delete or mutate its attributes. Its state changes in the recorder's own modules
    alone (``RECORDER_PARTS``), where the step and phase rules can be read."""
    bad = []
    for path in sorted(HOOK.glob("*.py")):
        if path.stem in RECORDER_PARTS:
            continue
        bad += [f"hook/{path.name}:{line}: {what}" for line, what in _recorder_writes(ast.parse(path.read_text()))]
    assert not bad, "\n".join(bad)


def test_the_hook_times_a_fetch_in_one_place():
    """Data wait is measured by one function (``Recorder.fetch``): a DataLoader's ``__next__``, a
    ``gpusleuth.watch``-ed iterable and a loader starting its workers all go through it, so a change to
    what a fetch counts cannot reach one of them and miss the others (it was written twice)."""
    where = set()
    for path in sorted(HOOK.glob("*.py")):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Subscript) \
                        and ast.unparse(node.target.slice) == "WAIT":
                    where.add(f"{path.stem}.{fn.name}")
    assert where == {"_gpusleuth_feed.fetch"}, sorted(where)


def test_the_recorder_is_its_parts_on_one_object():
    """``Recorder`` is split by responsibility into parts (issue 35) without costing the per-step path a hop:
    every part is a base class of it with ``__slots__ = ()``, so each method runs on the one object and reads its
    attributes directly (a part with slots of its own would not combine; one without ``__slots__`` would give
    every recorder a ``__dict__``, where a misspelt attribute is silently a new one). The parts are exactly
    ``RECORDER_PARTS``, one class each; none imports ``_gpusleuth_state``; no method is defined in two."""
    classes = {}  # module -> its classes' (name, bases, __slots__ source, method names), private ones left out
    for stem in RECORDER_PARTS:
        tree = ast.parse((HOOK / f"{stem}.py").read_text())
        classes[stem] = [(c.name, [ast.unparse(b) for b in c.bases],
                          next((ast.unparse(n.value) for n in c.body if isinstance(n, ast.Assign)
                                and [ast.unparse(t) for t in n.targets] == ["__slots__"]), None),
                          [f.name for f in c.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")])
                         for c in tree.body if isinstance(c, ast.ClassDef) and not c.name.startswith("_")]
    (recorder,) = [c for c in classes["_gpusleuth_state"] if c[0] == "Recorder"]
    parts = {stem: cs for stem, cs in classes.items() if stem != "_gpusleuth_state"}
    assert all(len(cs) == 1 for cs in parts.values()), parts
    assert sorted(recorder[1]) == sorted(cs[0][0] for cs in parts.values()), (recorder[1], parts)
    assert all(cs[0][2] == "()" for cs in parts.values()), {s: cs[0][2] for s, cs in parts.items()}
    names = recorder[3] + [m for cs in parts.values() for m in cs[0][3]]
    assert len(names) == len(set(names)), sorted({m for m in names if names.count(m) > 1})
    graph = _hook_graph()
    assert not any("_gpusleuth_state" in graph[p] for p in parts), graph


def test_tests_and_benchmarks_share_no_module_name():
    """Tests put benchmarks/ on sys.path to reuse its workloads; a module of the same name in both folders then
    imports whichever the path lists first, so one test's import order broke another's (benchmarks/fuzz_inputs.py
    shadowed tests/fuzz_inputs.py once test_serving_batching had run: "no attribute reference_report")."""
    root = PKG.parents[1]
    names = lambda d: {p.stem for p in (root / d).glob("*.py")}  # noqa: E731
    assert not names("tests") & names("benchmarks"), sorted(names("tests") & names("benchmarks"))


def test_one_hook_module_owns_every_event_line_format():
    """Every event line (``S``, ``B``, ``P``, ``G``, ``C``, ``R``, ``F``, ``L``, ``I``, ``H``, ``X``) is formatted
    in ``_gpusleuth_records`` (issue 35: the formats were spread over five modules, so a new column had to be
    found in each): no other hook module holds a string that starts a line with a kind letter and a tab."""
    import re

    starts = re.compile(r"^[A-Z]\t")
    bad = []
    for path in sorted(HOOK.glob("*.py")):
        if path.stem == "_gpusleuth_records":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and starts.match(node.value):
                bad.append(f"hook/{path.name}:{node.lineno}: {node.value[:30]!r}")
    assert not bad, "\n".join(bad)


def test_each_verb_module_is_thin():
    """``cli/`` modules parse flags and call the pipeline (issue 35: thin verbs): none over 250 lines
    (``cli/load.py`` was 512, building a Run by hand and writing and re-reading meta.json)."""
    cli = Path(__file__).resolve().parents[1] / "src" / "gpusleuth" / "cli"
    fat = {p.name: n for p in sorted(cli.glob("*.py")) if (n := len(p.read_text().splitlines())) > 250}
    assert not fat, fat
