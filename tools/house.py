"""The house rules the layout keeps, checked from the code itself.

    python tools/house.py          # the violations, one a line; exit 1 if any

Three rules (issue 27):

* no import circles between the project's modules, counting imports inside functions;
* no module of the three packages over ``MAX_LINES`` lines;
* no reaching into another object's private fields: an attribute whose name starts with
  one underscore is read only on ``self``, ``cls`` or ``super()``.

``ALLOWED`` lists the private reaches the project cannot avoid, each with its reason.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lrbandit_gym", "agents", "inference")
MAX_LINES = 600

#: Names with a leading underscore that are public API of the standard library.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

#: (file, attribute): reason. Third-party state with no public way in.
ALLOWED: dict[tuple[str, str], str] = {}


def modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    """Project modules ``path`` imports, at any depth of the file."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                found.add(t)
    return found


def circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    paths = {module_name(p): p for p in modules()}
    known = set(paths)
    # A package's __init__ only re-exports its modules' names: an import of the package is
    # not an edge of the design, so edges into an __init__ are left out (so no __init__ can
    # close a circle through the children it imports).
    edges = {
        m: {t for t in _imports(p, known) if paths[t].name != "__init__.py"}
        for m, p in paths.items()
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for m in sorted(edges):
        if m not in index:
            visit(m)
    return out


def long_modules() -> list[tuple[str, int]]:
    out = []
    for p in modules():
        n = len(p.read_text().splitlines())
        if n > MAX_LINES:
            out.append((str(p.relative_to(ROOT)), n))
    return out


def private_reaches() -> list[str]:
    out = []
    for p in modules():
        rel = str(p.relative_to(ROOT))
        for node in ast.walk(ast.parse(p.read_text(), rel)):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not attr.startswith("_") or attr.startswith("__") or attr in PUBLIC_UNDERSCORED:
                continue
            v = node.value
            if isinstance(v, ast.Name) and v.id in ("self", "cls"):
                continue
            if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super":
                continue
            if (rel, attr) in ALLOWED:
                continue
            out.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    return out


def violations() -> list[str]:
    lines = [f"import circle: {' <-> '.join(c)}" for c in circles()]
    lines += [f"{path}: {n} lines (at most {MAX_LINES})" for path, n in long_modules()]
    lines += [f"private reach: {r}" for r in private_reaches()]
    return lines


def main() -> int:
    found = violations()
    print("\n".join(found) if found else "the house rules hold")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
