"""The package's layers, read from its imports: no cycle, and no module imports one from a layer above it.

Every import counts, those inside functions too (a lazy import is still a dependency). A new module of the
package must be given its layer in :data:`LAYERS`; ``bench/`` may import the package and ``tests/servers.py``,
and its own modules without a cycle; the package imports neither ``bench`` nor ``tests``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Bottom to top. A module may import its own layer and the ones below it.
LAYERS: dict[str, int] = {
    # foundations: no torch_otel imports beyond this layer
    **dict.fromkeys(
        [
            "_internal",
            "_version",
            "_compile_id",
            "_categories",
            "_graph_breaks",
            "_ranks",
            "_ids",
            "_arm",
            "_ports",
            "_html",
            "_diff_html",
            "_export_guard",
            "_file_exporter",
            "_paths",
            "_cpu",
        ],
        0,
    ),
    **dict.fromkeys(["_config", "sampling"], 1),  # settings; the rank sampler (an SDK entry point)
    **dict.fromkeys(["_events", "_record", "_recompiles"], 2),  # typed events; the compile record and the sink interface
    **dict.fromkeys(["_cache", "_parse", "_assembler", "_frames"], 3),  # records -> events -> compiles; cache keys
    **dict.fromkeys(["_sources", "_export_hook", "_mega_cache"], 4),  # the attach table and its hook objects
    # live capture, and the sinks (spans, metrics, summary, divergence, log records, replay's resources)
    **dict.fromkeys(["_live", "_spans", "_metrics", "_summary", "_divergence", "_logs", "_replay_identity", "_diff"], 5),
    **dict.fromkeys(["_replay", "_exposition", "_setup"], 6),  # replay's reader; /metrics; providers from OTEL_*
    # what wires sources to sinks: replay's, live's; the diff's two sides
    **dict.fromkeys(["_replay_pipeline", "_bridge", "_baseline", "_diff_inputs"], 7),
    # entry points
    **dict.fromkeys(
        ["_demo", "_cli", "_instrumentor", "auto", "__init__", "__main__", "_autostart.__init__", "_autostart.sitecustomize"],
        8,
    ),
}


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
    """``bench`` module -> the bench modules it imports (``bench.x`` or, run as a script from bench/, ``x``)."""
    bench = ROOT / "bench"
    names = {p.stem for p in bench.glob("*.py")}
    graph = {}
    for p in bench.glob("*.py"):
        deps = set()
        for dotted in _imports(p, "bench"):
            head = dotted.split(".")
            if head[0] == "bench" and len(head) > 1 and head[1] in names:
                deps.add(head[1])
            elif head[0] in names:
                deps.add(head[0])
        graph[p.stem] = deps - {p.stem}
    return graph


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
    return sorted(
        f"{m} (layer {layers[m]}) imports {d} (layer {layers[d]})"
        for m, deps in graph.items()
        for d in deps
        if m in layers and d in layers and layers[d] > layers[m]
    )


# -- the package and bench as they are ------------------------------------------------------------------------


def test_every_package_module_has_a_layer():
    missing = sorted(set(package_graph()) - set(LAYERS))
    assert not missing, f"give these modules a layer in tests/fast/test_layers.py LAYERS: {missing}"
    gone = sorted(set(LAYERS) - set(package_graph()))
    assert not gone, f"LAYERS names modules the package no longer has: {gone}"


def test_the_package_has_no_import_cycle():
    assert find_cycle(package_graph()) is None


def test_no_package_module_imports_one_from_a_layer_above_it():
    assert upward_imports(package_graph(), LAYERS) == []


def test_the_package_imports_neither_bench_nor_tests():
    for path in (ROOT / "torch_otel").rglob("*.py"):
        bad = {d for d in _imports(path, "torch_otel") if d.split(".")[0] in ("bench", "tests")}
        assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_bench_has_no_import_cycle():
    graph = bench_graph()
    assert graph, "bench/ has no modules"
    assert find_cycle(graph) is None


# -- the checks themselves fail where they must ------------------------------------------------------------------


def test_a_cycle_is_found():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_an_upward_import_is_found():
    layers = {"_record": 2, "_spans": 5}
    assert upward_imports({"_record": {"_spans"}, "_spans": {"_record"}}, layers) == [
        "_record (layer 2) imports _spans (layer 5)"
    ]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from ._spans import SpanMapper", {"torch_otel._spans"}),
        ("def f():\n    from ._bridge import current\n", {"torch_otel._bridge"}),
        ("from . import _mega_cache as m", {"torch_otel._mega_cache"}),
        ("import torch_otel._assembler", {"torch_otel._assembler"}),
    ],
)
def test_imports_are_read_inside_functions_and_relative_ones_resolved(tmp_path, source, expected):
    f = tmp_path / "m.py"
    f.write_text(source)
    assert {d for d in _imports(f, "torch_otel") if d.startswith("torch_otel")} >= expected
