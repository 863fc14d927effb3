"""The import graph of ``loadgen/``, read from the source (nothing is imported).

An edge ``a -> b`` is one ``import``/``from ... import`` statement in module ``a`` naming
module ``b`` (``from pkg import name`` names ``pkg.name`` when that is a module, else
``pkg``; a package is its ``__init__``). Each edge says whether it runs when ``a`` is
imported (*module level*: the module body, including ``if``/``try``/``with`` blocks and
class bodies) or later (*deferred*: inside a function). Imports under
``if TYPE_CHECKING:`` never run and are not edges.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "loadgen"


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    line: int
    deferred: bool


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` under ``loadgen/``."""
    modules = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(body: list[ast.stmt], deferred: bool):
    """Yield (import node, deferred) for the statements in ``body``, walking blocks."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, deferred
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _imports(node.body, True)
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _imports(node.orelse, deferred)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                for child in getattr(node, field, []) or []:
                    if isinstance(child, ast.stmt):
                        yield from _imports([child], deferred)
                    elif hasattr(child, "body"):  # except handlers, match cases
                        yield from _imports(child.body, deferred)


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def edges(root: Path = ROOT) -> list[Edge]:
    """Every import from one loadgen module to another."""
    modules = module_files(root)
    found = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"
        for node, deferred in _imports(tree.body, False):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = _resolve(module, is_package, node)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in dict.fromkeys(targets):
                if target in modules and target != module:
                    found.append(Edge(module, target, node.lineno, deferred))
    return found


def cycles(graph: list[Edge]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    successors: dict[str, set[str]] = {}
    for edge in graph:
        successors.setdefault(edge.importer, set()).add(edge.imported)
        successors.setdefault(edge.imported, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def visit(node: str) -> None:  # recursion depth is bounded by the module count (~200)
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(successors[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(successors):
        if node not in index:
            visit(node)
    return components


# The layers, bottom first. A module may import its own layer and the ones below it;
# an import of a higher layer is "upward". The first matching prefix decides.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("foundations", ("_version", "_compat", "timefmt", "status", "errors", "option", "bounds",
                     "atomic", "redact", "clock", "record", "config")),
    ("codecs", ("codecs",)),
    ("transports", ("targetspec", "targets")),
    ("measuring", ("machine", "gcpolicy", "cloudwatch_settings", "metrics", "stats", "slo",
                   "selfcheck", "load", "workload", "export", "measurement", "fidelity_tokens",
                   "timeline")),
    ("engine", ("engine",)),
    ("run description and results", ("runconfig", "saturation", "knee", "server_peaks", "results",
                                     "progress")),
    ("what runs next to a target", ("vllm", "simulator", "aws", "servers", "fidelity",
                                    "fidelity_sim")),
    ("workers", ("workers",)),
    ("the API", ("api", "run_target", "measure")),
    ("studies and reports", ("scenario", "report")),
    ("front doors", ("mcp", "cli", "")),  # "": the package root, the public facade
)


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of ``module`` (a dotted ``loadgen...`` name)."""
    rest = module.split(".")[1] if "." in module else ""
    for rank, (_, prefixes) in enumerate(LAYERS):
        if rest in prefixes:
            return rank
    raise KeyError(f"{module} is in no layer: add it to LAYERS in tests/helpers/import_graph.py")


def upward(graph: list[Edge]) -> list[Edge]:
    """Edges from a module to a module of a higher layer."""
    return [edge for edge in graph if layer_of(edge.imported) > layer_of(edge.importer)]
