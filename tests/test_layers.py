"""The import structure of ``loadgen/``: no cycles, imports point down the layers, and
only the CLI loads click.

The graph is read from the source (``tests/helpers/import_graph.py``). A function-level
(deferred) import counts like a module-level one: it only delays the import to the first
call, the dependency is the same, and a cycle through it is still a cycle (it merely
does not fail at import time). Imports under ``if TYPE_CHECKING:`` never run and are
not counted.

The layers, bottom first (``LAYERS`` in the helper; a module may import its own layer
and those below it):

1. foundations: _version, _compat, timefmt, status, errors, option, bounds, atomic,
   redact, clock, record, config
2. codecs
3. transports: targetspec, targets
4. measuring: machine, gcpolicy, cloudwatch_settings, metrics, stats, slo, selfcheck,
   load, workload, export, measurement, fidelity_tokens
5. engine
6. run description and results: runconfig, saturation, results, progress
7. what runs next to a target: vllm, simulator, aws, servers, fidelity, fidelity_sim
8. workers
9. the API: api, run_target
10. studies and reports: scenario, report
11. front doors: mcp, cli, and the package root (the public facade)
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from tests.helpers.import_graph import LAYERS, ROOT, cycles, edges, layer_of, module_files, upward

# What still points up, and why it is allowed; at most three.
ALLOWED_UPWARD: set[tuple[str, str]] = set()


# loadgen/report/ is being rewritten on another branch; its own cycles (each through a
# function-level import) are left to it: report.compare <-> report.workload and
# report.document <-> report.headline/sections/cloudwatch. Cycles reaching outside
# report/ are not exempt.
CYCLE_EXEMPT = "loadgen.report."


def test_no_import_cycles():
    found = [cycle for cycle in cycles(edges())
             if not all(module.startswith(CYCLE_EXEMPT) for module in cycle)]
    assert found == [], "import cycles (module-level and deferred imports):\n" + "\n".join(
        " <-> ".join(cycle) for cycle in found)


def test_every_module_has_a_layer():
    for module in module_files():
        assert 0 <= layer_of(module) < len(LAYERS)


def test_imports_point_down_the_layers():
    found = {(edge.importer, edge.imported) for edge in upward(edges())}
    assert len(ALLOWED_UPWARD) <= 3
    assert found <= ALLOWED_UPWARD, "upward imports: " + ", ".join(
        f"{a} -> {b}" for a, b in sorted(found - ALLOWED_UPWARD))


def test_only_the_cli_imports_the_cli():
    found = [edge for edge in edges()
             if edge.imported.startswith("loadgen.cli") and not edge.importer.startswith(
                 "loadgen.cli")]
    assert found == []


def test_only_the_cli_imports_click_or_cloup():
    found = []
    for module, path in module_files().items():
        if module.startswith("loadgen.cli"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and
                     not node.level else [])
            found += [f"{module}:{node.lineno} {name}" for name in names
                      if name.split(".")[0] in ("click", "cloup")]
    assert found == []


_WORKER_CHILD = """
import os, sys
from multiprocessing import Pipe

import loadgen.workers.worker
from loadgen.targets.factory import make_target
from loadgen.workers.processes import child_main

make_target("http://127.0.0.1:9")  # the transport a worker builds (not opened)
parent, child = Pipe()
parent.close()  # the parent is gone: the child returns at its first read
child_main(os.dup(child.fileno()))
print(sorted(m for m in sys.modules
             if m.split(".")[0] in ("click", "cloup") or m.startswith("loadgen.cli")))
"""


def test_a_worker_process_does_not_load_the_cli():
    """A fresh interpreter imports ``loadgen.workers.worker``, builds a target and runs a
    worker process's entry point (``python -m loadgen.workers FD``) up to its first read:
    neither click, cloup nor ``loadgen.cli`` is loaded (its event loop runner came from
    the CLI once)."""
    done = subprocess.run([sys.executable, "-c", _WORKER_CHILD], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


# loadgen/report/ is being rewritten on another branch (document.py is over the limit there).
SIZE_EXEMPT = ("loadgen.report",)


def test_no_module_over_400_lines():
    over = {module: lines for module, path in module_files().items()
            if not module.startswith(SIZE_EXEMPT)
            and (lines := len(path.read_text().splitlines())) > 400}
    assert over == {}


def _layout_names() -> list[str]:
    """The modules and packages README's "Layout" block names at the start of its
    ``loadgen/`` lines, in order."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout", 1)[1].split("```", 2)[1]
    names = []
    for line in block.splitlines():
        if line.startswith("  ") and not line.startswith("   "):
            for token in line.split():
                if not re.fullmatch(r"\w+(\.py|/)", token):
                    break
                names.append(token)
    return names


def test_readme_layout_names_every_module_in_layer_order():
    tree = {path.name + ("/" if path.is_dir() else "")
            for path in (ROOT / "loadgen").iterdir()
            if path.name not in ("__init__.py", "__pycache__", "py.typed")}
    named = _layout_names()
    assert sorted(named) == sorted(tree)
    modules = [f"loadgen.{name.removesuffix('.py').removesuffix('/')}" for name in named
               if name != "data/"]
    ranks = [layer_of(module) for module in modules]
    assert ranks == sorted(ranks), "README's Layout lists a module before a lower layer"
