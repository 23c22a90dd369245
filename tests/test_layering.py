"""The packages' layering, read from the source with ast (no import, no Spark): no import cycle
between modules of plans/, executor/ and gpu_kernels/, and dependencies that point one way
(DESIGN.md section 3). Every import counts, also one inside a function or under
TYPE_CHECKING: a lazy import that dodges a cycle is still a cycle.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conftest import ROOT

PACKAGES = ("plans", "executor", "gpu_kernels")
GPU = ("gpu_kernels", "cupy", "array_api_compat.cupy", "cudf", "numba")
SPARK = ("pyspark", "py4j")
# Plans shipped as examples are user code: a user's kernel may call gpu_kernels' helpers.
EXAMPLES = "plans.examples"
# The tests' bridge to the reference interpreter; an application may check against it.
ORACLE_BRIDGE = "executor.reference"
APPS = "executor.apps"
# (importers, those exempt, what they may not import, why)
RULES = [
    ("plans", (EXAMPLES,), ("executor",) + SPARK + GPU, "plans: no executor, Spark or GPU code"),
    (EXAMPLES, (), ("executor",) + SPARK, "example plans are user code on the builder API"),
    ("gpu_kernels", (), ("executor", "plans") + SPARK, "kernels know no plans and no Spark"),
    ("executor", (APPS, "executor.__main__"), (APPS,),
     "the library core does not depend on its applications"),
    ("executor", (ORACLE_BRIDGE,), ("plans.semantics",), "the oracle stays off the runtime path"),
]
# Cycles not broken yet, each with its way out. Any other cycle fails, and so does a listed one
# that is gone (then delete its line).
KNOWN_CYCLES = []


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the packages (a package is its
    __init__.py)."""
    out = {}
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(name: str, path: Path, known) -> set[str]:
    """Every module `name` (at `path`) imports anywhere in its text: a module of the packages
    where the import names one (`from . import ir` is plans.ir, `from plans import Dataflow` is
    plans), else the dotted name as written (pyspark.sql, numpy)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            for alias in node.names:
                child = f"{source}.{alias.name}"
                out.add(child if child in known else source)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> everything it imports (modules of the packages and outside names alike)."""
    files = module_files(root)
    return {name: imported(name, path, files) for name, path in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, or of one module that
    imports itself (Tarjan), each sorted; only edges between the graph's own modules count."""
    index, low, stack, on_stack, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v] & graph.keys()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def breaches(graph: dict[str, set[str]]) -> list[str]:
    """Imports against the direction of DESIGN.md section 3, one line each."""
    return [f"{module} imports {target} ({why})"
            for module, targets in sorted(graph.items())
            for importers, exempt, banned, why in RULES
            if within(module, (importers,)) and not within(module, exempt)
            for target in sorted(targets) if within(target, banned)]


def test_the_packages_import_without_cycles():
    found = cycles(import_graph())
    assert found == KNOWN_CYCLES, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_dependencies_point_one_way():
    assert breaches(import_graph()) == []


def test_the_graph_sees_every_kind_of_import():
    """The walk reads relative, absolute, lazy and TYPE_CHECKING imports, and a module of a
    package named in `from package import module`."""
    graph = import_graph()
    assert "plans.query" in graph["plans.ir"]                    # from . import query as cq
    assert "plans.errors" in graph["plans.schema"]               # from .errors import ...
    assert "executor.runner" in graph["executor"]                # lazy, in __getattr__
    assert {"executor.apps.launch", "plans"} <= graph["executor.apps.cli"]
    assert "pyspark.sql" in graph["executor.runner"]


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_a_lazy_cycle_and_a_backward_import_are_flagged(tmp_path):
    """The checks can fail: a cycle closed by an import inside a function, one closed under
    TYPE_CHECKING, and imports against the layering, in a tree written for the test (where
    the oracle's bridge and an example plan's kernel import what they may)."""
    _write(tmp_path, {f"{pkg}/__init__.py": "" for pkg in PACKAGES})
    _write(tmp_path, {
        "plans/a.py": "from .b import f\n",
        "plans/b.py": "def f():\n    from plans import a\n",
        "plans/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from . import d\n",
        "plans/d.py": "from .c import x\n",
        "plans/e.py": "import pyspark.sql\nfrom executor.x import y\n",
        "gpu_kernels/k.py": "def g():\n    from pyspark.sql import functions\n",
        "executor/x.py": "from plans.semantics import evaluate\nfrom .apps import cli\n",
        "executor/apps/__init__.py": "",
        "executor/apps/cli.py": "from .. import x\n",
        "executor/reference.py": "from plans.semantics import evaluate\n",
        "plans/semantics.py": "",
        "plans/examples/__init__.py": "",
        "plans/examples/u.py": "def kernel(xp, cols):\n"
                               "    from gpu_kernels.expand import parents\n",
    })
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["executor.apps.cli", "executor.x"], ["plans.a", "plans.b"],
                             ["plans.c", "plans.d"]]
    assert breaches(graph) == [
        "executor.x imports executor.apps.cli (the library core does not depend on its "
        "applications)",
        "executor.x imports plans.semantics (the oracle stays off the runtime path)",
        "gpu_kernels.k imports pyspark.sql (kernels know no plans and no Spark)",
        "plans.e imports executor.x (plans: no executor, Spark or GPU code)",
        "plans.e imports pyspark.sql (plans: no executor, Spark or GPU code)",
    ]


@pytest.mark.parametrize("module", sorted(module_files()))
def test_every_module_opens_with_a_docstring(module):
    path = module_files()[module]
    tree = ast.parse(path.read_text())
    if not tree.body and path.name == "__init__.py":
        return  # an empty package marker
    assert ast.get_docstring(tree), f"{path.relative_to(ROOT)} has no module docstring"
