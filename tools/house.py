"""The house rules the layout keeps, checked from the code itself.

    python tools/house.py          # the violations, one a line; exit 1 if any

Four rules (issues 27 and 35):

* no import circles between the project's modules, counting imports inside functions;
* one concept per module: no module of the three packages over ``MAX_LINES`` lines;
* no reaching into another object's private fields: an attribute whose name starts with
  one underscore is read only on ``self``, ``cls`` or ``super()``;
* one class, one file: a method reads or writes ``self._name`` only where ``_name`` belongs
  to its own file. A private name belongs to a file when the file assigns ``self._name``
  in any method, or a class body in the file defines ``_name`` (a method, property, class
  attribute or annotated field). A read of a name that belongs to no file of the file is a
  violation when another project file assigns ``self._name``: the class is split in halves
  that share fields. A write is one when the name belongs to the file only through that
  write while another file sets it up in ``__init__`` (or ``__post_init__``,
  ``__setstate__``): the half fills a field the other half owns.

``ALLOWED`` lists the private reaches and split fields the project cannot avoid yet, each
with its reason. The checks take a ``root`` (the project folder) so the tests can feed
them small synthetic packages.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lrbandit_gym", "agents", "inference")
MAX_LINES = 1000

#: Names with a leading underscore that are public API of the standard library.
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})

#: (file, attribute): reason. Third-party state with no public way in.
ALLOWED: dict[tuple[str, str], str] = {}

#: file: (private names it shares with another file, space-separated; reason). Classes still
#: split over files that read each other's fields.
ALLOWED_SPLIT: dict[str, tuple[str, str]] = {}

#: Methods that set up an object's fields: a field written here is owned by this file.
SETUP_METHODS = frozenset({"__init__", "__post_init__", "__new__", "__setstate__"})


def modules(root: Path | None = None) -> list[Path]:
    root = ROOT if root is None else root
    return sorted(p for pkg in PACKAGES for p in (root / pkg).rglob("*.py"))


def module_name(path: Path, root: Path | None = None) -> str:
    parts = list(path.relative_to(ROOT if root is None else root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set[str], root: Path | None = None) -> set[str]:
    """Project modules ``path`` imports, at any depth of the file."""
    name = module_name(path, root)
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


def circles(root: Path | None = None) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    paths = {module_name(p, root): p for p in modules(root)}
    known = set(paths)
    # A package's __init__ only re-exports its modules' names: an import of the package is
    # not an edge of the design, so edges into an __init__ are left out (so no __init__ can
    # close a circle through the children it imports).
    edges = {
        m: {t for t in _imports(p, known, root) if paths[t].name != "__init__.py"}
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


def long_modules(root: Path | None = None) -> list[tuple[str, int]]:
    root = ROOT if root is None else root
    out = []
    for p in modules(root):
        n = len(p.read_text().splitlines())
        if n > MAX_LINES:
            out.append((str(p.relative_to(root)), n))
    return out


def private_reaches(root: Path | None = None) -> list[str]:
    root = ROOT if root is None else root
    out = []
    for p in modules(root):
        rel = str(p.relative_to(root))
        for node in ast.walk(ast.parse(p.read_text(), rel)):
            if not isinstance(node, ast.Attribute):
                continue
            attr = node.attr
            if not _is_private(attr):
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


def _is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in PUBLIC_UNDERSCORED


def _self_attr(node: ast.AST) -> str | None:
    """``_name`` when ``node`` is ``self._name``."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and _is_private(node.attr)
    ):
        return node.attr
    return None


def _set_name(call: ast.Call) -> str | None:
    """``_name`` when ``call`` is ``setattr(self, "_name", ...)`` or
    ``object.__setattr__(self, "_name", ...)`` (a frozen dataclass filling a field)."""
    f = call.func
    named = (isinstance(f, ast.Name) and f.id == "setattr") or (
        isinstance(f, ast.Attribute) and f.attr == "__setattr__"
    )
    if not named or len(call.args) < 2:
        return None
    target, key = call.args[0], call.args[1]
    if not (isinstance(target, ast.Name) and target.id == "self"):
        return None
    if isinstance(key, ast.Constant) and isinstance(key.value, str) and _is_private(key.value):
        return key.value
    return None


class _FileFields:
    """The private names one file defines, sets up, reads and writes on ``self``."""

    def __init__(self, tree: ast.Module) -> None:
        self.body: set[str] = set()  # defined in a class body: methods, attributes, fields
        self.fields: set[str] = set()  # class-body names that hold data: attributes, properties
        self.setup: set[str] = set()  # assigned in a SETUP_METHODS method
        self.assigned: set[str] = set()  # assigned in any method
        self.reads: list[tuple[int, str]] = []  # ``self._x += 1`` reads too
        self.writes: list[tuple[int, str]] = []  # outside the setup methods
        self.classes: set[str] = set()
        self.bases: set[str] = set()
        for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
            self.classes.add(cls.name)
            self.bases.update(
                b.id if isinstance(b, ast.Name) else b.attr
                for b in cls.bases
                if isinstance(b, ast.Name | ast.Attribute)
            )
            for stmt in cls.body:
                names = [n for n in _body_names(stmt) if _is_private(n)]
                self.body.update(names)
                if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    self.fields.update(names)
                elif isinstance(stmt, ast.ClassDef):
                    pass
                elif any(_is_property(d) for d in stmt.decorator_list):
                    self.fields.update(names)
            for fn in cls.body:
                if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    self._method(fn)
        self.fields |= self.assigned
        self.owned = self.setup | (self.body & self.assigned) | (self.fields - self.assigned)

    def _method(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        setup = fn.name in SETUP_METHODS
        for node in ast.walk(fn):
            if isinstance(node, ast.AugAssign) and (name := _self_attr(node.target)):
                self.reads.append((node.lineno, name))
            name = _self_attr(node)
            if name is None and isinstance(node, ast.Call):
                name = _set_name(node)
                store = name is not None
            else:
                store = name is not None and isinstance(node.ctx, (ast.Store, ast.Del))
            if name is None:
                continue
            if store:
                self.assigned.add(name)
                if setup:
                    self.setup.add(name)
                else:
                    self.writes.append((node.lineno, name))
            else:
                self.reads.append((node.lineno, name))


def _is_property(decorator: ast.expr) -> bool:
    name = decorator.attr if isinstance(decorator, ast.Attribute) else None
    if isinstance(decorator, ast.Name):
        name = decorator.id
    return name in ("property", "cached_property") or (
        isinstance(decorator, ast.Attribute) and decorator.attr in ("setter", "getter")
    )


def _body_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    if isinstance(stmt, ast.Assign):
        return [n.id for t in stmt.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    return []


def split_fields(root: Path | None = None) -> list[str]:
    """Reads and writes of ``self._name`` whose field another project file owns.

    A read is one when the file neither assigns ``self._name`` nor defines ``_name`` in a
    class body, while another project file holds it as a field (assigns it, or defines it as
    a class attribute or property). A write is one when the file neither sets the field up
    nor reads it, while another project file sets it up: the file fills another's field.
    """
    root = ROOT if root is None else root
    files = {str(p.relative_to(root)): _FileFields(ast.parse(p.read_text())) for p in modules(root)}
    field_of: dict[str, set[str]] = {}
    owned_by: dict[str, set[str]] = {}
    for rel, f in files.items():
        for name in f.fields:
            field_of.setdefault(name, set()).add(rel)
        for name in f.owned:
            owned_by.setdefault(name, set()).add(rel)

    def where(rel: str, name: str, among: dict[str, set[str]]) -> str:
        # The files that hold the name, those of a base or subclass first: most private
        # names (``_n``, ``_B``) are also used by unrelated classes elsewhere.
        others = sorted(among.get(name, set()) - {rel})
        f = files[rel]
        kin = [o for o in others if f.bases & files[o].classes or files[o].bases & f.classes]
        return ", ".join(kin or others[:3] + (["…"] if len(others) > 3 else []))

    out = []
    for rel, f in files.items():
        allowed = ALLOWED_SPLIT.get(rel, ("", ""))[0].split()
        read = {name for _, name in f.reads}
        for line, name in f.reads:
            if name in f.assigned or name in f.body or name in allowed:
                continue
            if field_of.get(name, set()) - {rel}:
                out.append(
                    f"{rel}:{line}: reads self.{name}, a field of {where(rel, name, field_of)}"
                )
        for line, name in f.writes:
            if name in f.owned or name in read or name in allowed:
                continue
            if owned_by.get(name, set()) - {rel}:
                out.append(
                    f"{rel}:{line}: writes self.{name}, a field of {where(rel, name, owned_by)}"
                )
    return sorted(set(out), key=lambda v: (v.split(":")[0], int(v.split(":")[1]), v))


def violations(root: Path | None = None) -> list[str]:
    lines = [f"import circle: {' <-> '.join(c)}" for c in circles(root)]
    lines += [f"{path}: {n} lines (at most {MAX_LINES})" for path, n in long_modules(root)]
    lines += [f"private reach: {r}" for r in private_reaches(root)]
    lines += [f"split class: {r}" for r in split_fields(root)]
    return lines


def main() -> int:
    found = violations()
    print("\n".join(found) if found else "the house rules hold")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
