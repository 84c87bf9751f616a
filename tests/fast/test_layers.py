"""The package's layers, read from its imports: no cycle, and no module imports one from a layer above it.

Each folder of ``torch_otel/`` is a layer (docs/architecture.md draws them); the top-level modules are the entry
points. A module may import its own folder and the folders of lower layers. Two folders of one layer are peers
and import neither each other (live capture and the sinks both stand on the assembler). Every import counts, those
inside functions too (a lazy import is still a dependency). A new folder or top-level module must be given its layer
in :data:`LAYERS`; a layer's ``__init__.py`` imports nothing. ``bench/`` may import the package, the tests' shared
helpers (``tests.servers``, ``tests.helpers``, ``tests.synthetic``), and its own modules without a cycle; the package imports neither
``bench`` nor ``tests``.

The features (``_features/``) are plugins: nothing outside that folder imports a feature or names one, only the
machinery every feature is made of (``feature``, ``views``) and the one table of them (``registry``, whose rows name
each feature's module); no feature imports another. No module is longer than 600 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top, by folder (and top-level module). A module may import its own folder and the ones below it.
LAYERS: dict[str, int] = {
    "_version": 0,  # the package's and torch's versions, the tested releases
    "_core": 1,  # errors, health counts, settings, compile ids, ranks, the import watcher, torch's vocabulary
    "_otel": 2,  # OpenTelemetry providers and exporters from OTEL_*, guarded; OTLP-JSON files; ids; /metrics
    "_model": 3,  # typed events, the compile record, the Sink interface
    "_attach": 4,  # live capture's attach table: its row types, attaching them, the release policy
    "_features": 5,  # the features: each declared once, as a plugin its pipeline owns; their registry
    "_parse": 6,  # torch's records -> events; the TORCH_TRACE reader
    "_analysis": 7,  # recompiles, frames left in eager, divergence, diff: what the facts mean
    "_assemble": 8,  # events -> compile records, derived facts
    "_sinks": 9,  # spans, metrics, log records, the run summary, the pages
    "_capture": 9,  # live capture: the attach table and its hooks (a peer of the sinks)
    "_pipeline": 10,  # what puts sources and sinks together: live, replay, diff
    # entry points
    **dict.fromkeys(["_demo", "_cli", "_instrumentor", "auto", "sampling", "features", "__init__", "__main__", "_autostart"], 11),
}
ENTRY = 11


def layer_of(module: str) -> str:
    """``_core.errors`` -> ``_core``; ``_autostart.sitecustomize`` -> ``_autostart``; ``auto`` -> ``auto``."""
    return module.split(".")[0]


def _module_name(path: Path, base: Path) -> str:
    return ".".join(path.relative_to(base).with_suffix("").parts)


def _imports(path: Path, package: str | None) -> set[str]:
    """Every module ``path`` imports, as dotted names (relative imports resolved against ``package``)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level and package is not None:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - (node.level - 1)])
                if node.module:
                    out.add(f"{base}.{node.module}")
                    out.update(f"{base}.{node.module}.{a.name}" for a in node.names)  # `from .pkg import module`
                else:  # from . import x: x is a module
                    out.update(f"{base}.{a.name}" for a in node.names)
            elif node.module:
                out.add(node.module)
                out.update(f"{node.module}.{a.name}" for a in node.names)  # `from pkg import module`
    return out


def package_graph() -> dict[str, set[str]]:
    """``torch_otel`` module (``_spans``, ``_autostart.sitecustomize``, ``__init__``) -> the package modules it imports."""
    pkg = ROOT / "torch_otel"
    names = {_module_name(p, pkg): p for p in pkg.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = "torch_otel" + ("." + ".".join(name.split(".")[:-1]) if "." in name else "")
        deps = set()
        for dotted in _imports(path, package):
            if dotted == "torch_otel":
                deps.add("__init__")
            elif dotted.startswith("torch_otel."):
                rest = dotted[len("torch_otel.") :]
                if rest in names:
                    deps.add(rest)
                elif f"{rest}.__init__" in names:
                    deps.add(f"{rest}.__init__")
        graph[name] = deps - {name}
    return graph


def bench_graph() -> dict[str, set[str]]:
    """``bench`` module (``cost.run``, ``fleet.metrics``) -> the bench modules it imports (``bench.cost.measure``)."""
    bench = ROOT / "bench"
    names = {".".join(p.relative_to(bench).with_suffix("").parts): p for p in bench.rglob("*.py")}
    graph = {}
    for name, p in names.items():
        package = ".".join(["bench", *name.split(".")[:-1]])
        deps = set()
        for dotted in _imports(p, package):
            head = dotted.split(".")
            if head[0] == "bench" and ".".join(head[1:]) in names:
                deps.add(".".join(head[1:]))
        graph[name] = deps - {name}
    return graph


def bench_imports_of_tests() -> set[str]:
    """What ``bench/`` imports of ``tests``: the shared helpers only, never a test module."""
    out: set[str] = set()
    for p in (ROOT / "bench").rglob("*.py"):
        out |= {d for d in _imports(p, "bench") if d.split(".")[0] == "tests" and d.count(".") == 1}
    return out


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules on it (first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def upward_imports(graph: dict[str, set[str]], layers: dict[str, int]) -> list[str]:
    """Each import of a module from a higher layer, or from a peer folder of the same layer."""
    out = []
    for m, deps in graph.items():
        lm = layer_of(m)
        for d in deps:
            ld = layer_of(d)
            if lm not in layers or ld not in layers or ld == lm or layers[lm] == layers[ld] == ENTRY:
                continue  # its own folder; the entry points import one another
            if layers[ld] > layers[lm]:
                out.append(f"{m} (layer {layers[lm]}) imports {d} (layer {layers[ld]})")
            elif layers[ld] == layers[lm]:
                out.append(f"{m} imports {d}, of its peer folder {ld} (layer {layers[ld]})")
    return sorted(out)


# -- the package and bench as they are ------------------------------------------------------------------------


def test_every_package_module_has_a_layer():
    graph = package_graph()
    missing = sorted(m for m in graph if layer_of(m) not in LAYERS)
    assert not missing, f"give these modules' folders a layer in tests/fast/test_layers.py LAYERS: {missing}"
    gone = sorted(set(LAYERS) - {layer_of(m) for m in graph})
    assert not gone, f"LAYERS names folders or modules the package no longer has: {gone}"


def test_the_package_is_folders_by_layer_and_its_entry_points():
    """Nothing but the entry points (and the version) sits at the top: every other module is in its layer's folder."""
    top = sorted(m for m in package_graph() if "." not in m)
    assert set(top) <= {m for m, n in LAYERS.items() if n in (0, ENTRY)}, top
    folders = sorted(p.name for p in (ROOT / "torch_otel").iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert set(folders) - {"_autostart"} == {f for f, n in LAYERS.items() if 0 < n < ENTRY}, folders


def test_a_layer_s_init_imports_nothing():
    """``import torch_otel.auto`` loads only what it names (torch_otel._core.import_watch): a layer's package adds nothing."""
    for name, deps in package_graph().items():
        if name.endswith(".__init__") and name.count(".") == 1 and layer_of(name) != "_autostart":
            assert not deps, f"torch_otel/{layer_of(name)}/__init__.py imports {sorted(deps)}"
            tree = ast.parse((ROOT / "torch_otel" / layer_of(name) / "__init__.py").read_text())
            assert all(isinstance(n, ast.Expr) for n in tree.body), f"{layer_of(name)}/__init__.py holds more than a docstring"


def test_each_private_layer_says_it_is_private():
    """What is not ``torch_otel``'s ``__all__`` is private, and each layer's docstring says so."""
    for init in sorted((ROOT / "torch_otel").glob("_*/__init__.py")):
        if init.parent.name != "_autostart":
            assert "Private: not an API" in init.read_text(encoding="utf-8"), init.relative_to(ROOT)


def test_the_package_has_no_import_cycle():
    assert find_cycle(package_graph()) is None


def test_no_package_module_imports_one_from_a_layer_above_it():
    assert upward_imports(package_graph(), LAYERS) == []


def test_the_package_imports_neither_bench_nor_tests():
    for path in (ROOT / "torch_otel").rglob("*.py"):
        bad = {d for d in _imports(path, "torch_otel") if d.split(".")[0] in ("bench", "tests")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


# The features' machinery and their one table: what the rest of the package may import of ``_features/``
FEATURE_MACHINERY = {"_features.feature", "_features.views", "_features.registry", "_features.__init__"}


def feature_of(module: str) -> str | None:
    """``_features.graph_calls.state`` -> ``graph_calls``; None for the machinery and every other module."""
    if layer_of(module) != "_features" or module in FEATURE_MACHINERY:
        return None
    return module.split(".")[1]


def feature_imports(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a feature from outside it that is not the registry's (a feature named outside the table)."""
    out = []
    for m, deps in graph.items():
        for d in deps:
            f = feature_of(d)
            if f is not None and feature_of(m) != f and m != "_features.registry":
                out.append(f"{m} imports {d}, of the feature {f}")
    return sorted(out)


def test_nothing_but_the_registry_imports_a_feature():
    """A feature is a plugin: the rest of the package reads it through the registry, never by name."""
    graph = package_graph()
    assert {feature_of(m) for m in graph} - {None} >= {"cache_lookups", "graph_calls"}
    assert feature_imports(graph) == []


def registry_rows() -> list[str]:
    """The features the registry's rows name, read from its source (``Row(".graph_calls")`` -> ``graph_calls``)."""
    tree = ast.parse((ROOT / "torch_otel" / "_features" / "registry.py").read_text(encoding="utf-8"))
    return [
        node.args[0].value[1:]
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Row" and node.args
        if isinstance(node.args[0], ast.Constant) and str(node.args[0].value).startswith(".")
    ]


def test_every_feature_of_the_folder_has_one_row_and_is_named_nowhere_else():
    """The registry's rows and the folder's feature packages are the same features; outside ``_features/`` no module
    names one: not by its module path, not by its name as a string (``cap.state("graph_calls")``)."""
    folder = ROOT / "torch_otel" / "_features"
    packages = sorted(p.name for p in folder.iterdir() if (p / "__init__.py").exists())
    rows = registry_rows()
    assert sorted(rows) == packages and len(set(rows)) == len(rows), (rows, packages)
    for path in (ROOT / "torch_otel").rglob("*"):
        if path.suffix not in (".py", ".js") or folder in path.parents:
            continue
        text = path.read_text(encoding="utf-8")
        for name in rows:
            for said in (f"_features.{name}", f"_features/{name}", f'"{name}"', f"'{name}'"):
                assert said not in text, f"{path.relative_to(ROOT)} names the feature {name} ({said})"


def test_no_module_is_longer_than_600_lines():
    """A module holds one idea: over 600 lines it holds more (split it by idea, docs/architecture.md)."""
    long = {
        str(p.relative_to(ROOT)): n
        for p in (ROOT / "torch_otel").rglob("*")
        if p.suffix in (".py", ".js") and (n := len(p.read_text(encoding="utf-8").splitlines())) > 600
    }
    assert not long, long


def test_a_feature_named_outside_the_table_is_found():
    graph = {
        "_features.registry": {"_features.toy"},
        "_features.toy": {"_features.feature"},
        "_features.other.state": {"_features.toy", "_features.views"},
        "_sinks.summary": {"_features.registry", "_features.toy"},
    }
    assert feature_imports(graph) == [
        "_features.other.state imports _features.toy, of the feature toy",
        "_sinks.summary imports _features.toy, of the feature toy",
    ]


def test_bench_has_no_import_cycle_and_imports_only_the_tests_shared_helpers():
    graph = bench_graph()
    assert {"cost.run", "fleet.metrics", "outputs.same_output"} <= set(graph), sorted(graph)
    assert any(graph.values()), "bench/ imports none of its own modules: the graph is not read"
    assert find_cycle(graph) is None
    assert bench_imports_of_tests() <= {"tests.servers", "tests.helpers", "tests.synthetic"}, bench_imports_of_tests()


# -- the checks themselves fail where they must ------------------------------------------------------------------


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_an_upward_import_and_a_peer_import_are_found():
    layers = {"_model": 3, "_sinks": 9, "_capture": 9}
    graph = {
        "_model.record": {"_sinks.spans"},
        "_sinks.spans": {"_model.record", "_sinks.metrics"},
        "_capture.live_capture": {"_sinks.logs"},
    }
    assert upward_imports(graph, layers) == [
        "_capture.live_capture imports _sinks.logs, of its peer folder _sinks (layer 9)",
        "_model.record (layer 3) imports _sinks.spans (layer 9)",
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ._sinks.spans import SpanMapper", {"torch_otel._sinks.spans"}),
        ("def f():\n    from ._pipeline.bridge import current\n", {"torch_otel._pipeline.bridge"}),
        ("from ._capture import mega_cache as m", {"torch_otel._capture.mega_cache"}),
        ("import torch_otel._assemble.assembler", {"torch_otel._assemble.assembler"}),
    ],
)
def test_imports_are_read_inside_functions_and_relative_ones_resolved(tmp_path, source, expected):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert {d for d in _imports(f, "torch_otel") if d.startswith("torch_otel")} >= expected
