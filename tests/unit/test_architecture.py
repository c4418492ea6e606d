"""The architecture as the tree shows it: one package, stages that import without cycles, a pure core.

Every import counts, including those inside functions and under TYPE_CHECKING: a cycle hidden by a
lazy import is still a cycle in the design.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}  # public, underscored only to spare field names
FOLDERS = {"service": "prexid.service", "detectors": "prexid.detectors"}


def modules() -> dict[str, Path]:
    """Every module of the installed package, by dotted name, from the folders it is mapped from."""
    out = {}
    for folder, package in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> set[str]:
    """The package modules `name` imports, anywhere in its body."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:  # `from pkg import mod` imports the module, `from mod import x` the module
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_module_of_prexid_takes_part_in_an_import_cycle() -> None:
    assert cycles(graph()) == []


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import pkg.b\n")
    (tmp_path / "b.py").write_text("def f():\n    from pkg import a\n")
    known = {"pkg.a", "pkg.b"}
    edges = {m: imports(m, tmp_path / f"{m[4:]}.py", known) for m in known}
    assert cycles(edges) == [["pkg.a", "pkg.b"]]


def test_detectors_import_nothing_from_the_service_side() -> None:
    leaks = {m: sorted(d for d in deps if d.startswith("prexid.service")) for m, deps in graph().items()}
    assert {m: d for m, d in leaks.items() if m.startswith("prexid.detectors") and d} == {}


def test_no_module_imports_a_private_name_of_another() -> None:
    mods = modules()
    private = []
    for name, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("prexid"):
                private += [f"{name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert private == []


def test_every_package_folder_is_installed_under_prexid() -> None:
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {name for name, path in modules().items() if path.name == "__init__.py"}
    assert listed == folders


def test_no_module_reads_a_private_attribute_of_another_object() -> None:
    """Each stateful object snapshots and restores itself; nobody reaches into another's `_fields`."""
    own = {"self", "cls", "argparse"}  # argparse: a standard-library type named in an annotation
    reads = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") or node.attr in NAMEDTUPLE_API:
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in own:
                continue
            if isinstance(value, ast.Call) and ast.unparse(value.func) == "super":
                continue
            reads.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    assert reads == []
