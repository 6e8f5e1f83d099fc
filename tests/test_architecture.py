"""The layer order of ../shared/STYLE.md and docs/architecture.md, checked on every import.

core ← runtime ← (analysis | transforms | numerics | profiling) ← render ← (façade | widgets |
cli). Every ``import`` statement in onnx_lab/ is read from the source (function bodies and
``if TYPE_CHECKING`` blocks included: a lazy import hides an arrow, it does not remove it), and
so is every ``importlib.import_module`` target written in the source (a literal module name, or
the literal start of an f-string, in a module that calls ``import_module``). An import may
point to its own layer's package or below, never above, and the four middle packages never
import each other. Inside a layer, the imports that run when a module is imported (its
top-level ones) form no cycle.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "onnx_lab"

# Layer rank of each top-level part of onnx_lab. Parts of one rank may import each other
# only where the rank says so (SIBLINGS_MAY_IMPORT).
LAYERS: dict[str, int] = {
    "errors": 0, "_pandas": 0, "_progress": 0, "_exit": 0, "_display": 0, "core": 0,
    "runtime": 1,
    "analysis": 2, "transforms": 2, "numerics": 2, "profiling": 2,
    "render": 3,
    "lab": 4, "_lab_methods": 4, "_lab_profiling": 4, "reporting": 4, "steps": 4, "culprit": 4, "backends": 4, "samples": 4, "widgets": 4, "cli": 4, "zoo": 4, "__init__": 4,
}
SIBLINGS_MAY_IMPORT = {0: True, 1: True, 2: False, 3: True, 4: True}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module_name(path: Path, root: Path) -> tuple[str, str]:
    """(module name, package used to resolve relative imports)."""
    rel = path.relative_to(root.parent).with_suffix("")
    name = ".".join(rel.parts)
    if name.endswith(".__init__"):
        name = name[: -len(".__init__")]
        return name, name
    return name, name.rsplit(".", 1)[0]


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    name, package = _module_name(path, root)
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "onnx_lab":  # from onnx_lab import x: x is the part
                out += [(node.lineno, f"onnx_lab.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, mod))
    out += _importlib_targets(path)
    return [(line, m) for line, m in out if m == "onnx_lab" or m.startswith("onnx_lab.")]


_MODULE = re.compile(r"onnx_lab(\.[A-Za-z_]\w*)*\.?")


def _importlib_targets(path: Path) -> list[tuple[int, str]]:
    """Module names an ``importlib.import_module`` in ``path`` may load: string literals that
    are onnx_lab module names, and the literal start of f-strings (``f"onnx_lab.x.{n}"``)."""
    text = path.read_text(encoding="utf-8")
    if "import_module" not in text:
        return []
    out = []
    for node in ast.walk(ast.parse(text)):
        lit = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            lit = node.value
        elif isinstance(node, ast.JoinedStr) and node.values and \
                isinstance(node.values[0], ast.Constant):
            lit = str(node.values[0].value)
        if lit and _MODULE.fullmatch(lit) and lit.startswith("onnx_lab."):
            out.append((node.lineno, lit.rstrip(".")))
    return out


def _modules(root: Path) -> dict[str, Path]:
    return {_module_name(p, root)[0]: p for p in sorted(root.rglob("*.py"))}


def _top_level_edges(path: Path, root: Path, known: dict[str, Path]) -> set[str]:
    """The onnx_lab modules ``path`` imports when it is imported (its top-level statements)."""
    name, package = _module_name(path, root)
    out: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                mod = ".".join(base[: len(base) - node.level + 1] +
                               ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            for a in node.names:
                sub = f"{mod}.{a.name}"
                out.add(sub if sub in known else mod)
    out.discard(name)
    return {m for m in out if m in known}


def import_cycles(root: Path = PACKAGE) -> list[list[str]]:
    """Cycles among top-level imports (strongly connected components of two or more)."""
    known = _modules(root)
    graph = {n: _top_level_edges(p, root, known) for n, p in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return cycles


def violations(root: Path = PACKAGE) -> list[str]:
    """Every import in ``root`` that points against the layer order."""
    bad = []
    for path in sorted(root.rglob("*.py")):
        name, _ = _module_name(path, root)
        src = _part(name)
        for line, target in _imports(path, root):
            dst = _part(target)
            if dst == src:
                continue
            if src not in LAYERS or dst not in LAYERS:
                bad.append(f"{path.relative_to(root.parent)}:{line} {target}: "
                           f"'{src if src not in LAYERS else dst}' has no layer in LAYERS")
                continue
            rs, rd = LAYERS[src], LAYERS[dst]
            if rd > rs or (rd == rs and not SIBLINGS_MAY_IMPORT[rs]):
                bad.append(f"{path.relative_to(root.parent)}:{line} imports {target} "
                           f"({src} is layer {rs}, {dst} is layer {rd})")
    return bad


def test_no_import_points_against_the_layer_order():
    bad = violations()
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


def test_no_cycle_among_the_imports_a_module_runs_when_imported():
    cycles = import_cycles()
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_cycle_check_finds_a_cycle(tmp_path):
    pkg = tmp_path / "onnx_lab"
    (pkg / "core").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "core" / "__init__.py").write_text("")
    (pkg / "core" / "a.py").write_text("from onnx_lab.core import b\n")
    (pkg / "core" / "b.py").write_text("from onnx_lab.core.a import thing\n")
    assert import_cycles(pkg) == [["onnx_lab.core.a", "onnx_lab.core.b"]]
    (pkg / "core" / "b.py").write_text("def f():\n    from onnx_lab.core.a import thing\n")
    assert import_cycles(pkg) == []


def test_every_part_of_the_package_has_a_layer():
    parts = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()
             if (p.suffix == ".py" or (p.is_dir() and (p / "__init__.py").exists()))}
    assert parts <= set(LAYERS), f"parts without a layer: {sorted(parts - set(LAYERS))}"


@pytest.mark.parametrize("source, ok", [
    ("from onnx_lab.core.model import LabModel\n", True),
    ("def f():\n    from onnx_lab.lab import Lab\n", False),            # lazy, still upward
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
     "    from onnx_lab.render import view\n", False),                   # type-only, upward
    ("from onnx_lab.transforms import base\n", False),                  # sideways
    ("from .. import lab\n", False),                                     # relative, upward
    ("import importlib\nimportlib.import_module('onnx_lab.render.view')\n", False),
    ("import importlib\nimportlib.import_module(f'onnx_lab.widgets.{1}')\n", False),
    ("import importlib\nimportlib.import_module('onnx_lab.core.model')\n", True),
])
def test_the_check_catches_what_it_must(tmp_path, source, ok):
    pkg = tmp_path / "onnx_lab"
    (pkg / "numerics").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "numerics" / "__init__.py").write_text("")
    (pkg / "numerics" / "probe.py").write_text(source)
    assert (violations(pkg) == []) is ok
