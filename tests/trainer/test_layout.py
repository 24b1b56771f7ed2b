"""The trainer's rooms and their one-way imports (docs/architecture.md, "The rooms").

Every module of `grappa` lives in one room; a room imports only rooms on lower floors (and
itself), and no modules import each other in a circle. Function-level imports count: a lazy
import is still a dependency. The checker runs on the real package and, to show it can fail, on
small packages written here with a circle and an upward import.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

TRAINER = Path(__file__).resolve().parents[2] / "trainer"

# room -> floor: a room may import rooms on lower floors only.
FLOORS = {
    "grappa.util": 0, "grappa.config": 0,
    "grappa.data": 1,
    "grappa.models": 2,
    "grappa.tasks": 3,
    "grappa.strategies": 4,
    "grappa.runtime": 5,
    "grappa.inference": 6,
    "grappa.app": 7,
    # entry points at the top: `python -m grappa` and the documented model-file command
    "grappa.__main__": 8, "grappa.model_file": 8,
}
TOP_LEVEL = {"__init__.py", "__main__.py", "config.py", "model_file.py", "util", "data", "models",
             "tasks", "strategies", "runtime", "inference", "app"}
# What the operator imports: with every package on the way, free of torch and numpy (its image
# has neither), at import time.
OPERATOR_IMPORTS = ("grappa.config", "grappa.strategies.grappa.rounds", "grappa.runtime.job_progress")
HEAVY = ("torch", "numpy", "torch_geometric", "scipy", "matplotlib")


def module_files(root: Path, package: str) -> dict[str, Path]:
    out = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports_of(name: str, path: Path, modules: dict[str, Path], top_only: bool = False) -> set[str]:
    """The modules `name` imports (grappa's and others'), each resolved to the most specific
    module that exists: `from a.b import c` is a.b.c when that is a module, else a.b."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_only else ast.walk(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                found.add(sub if sub in modules else target)
    return found


def room_of(module: str) -> str | None:
    for room in sorted(FLOORS, key=len, reverse=True):
        if module == room or module.startswith(room + "."):
            return room
    return None


def graph(root: Path, package: str = "grappa") -> dict[str, set[str]]:
    modules = module_files(root, package)
    return {m: {i for i in imports_of(m, p, modules) if i in modules and i != m} for m, p in modules.items()}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in g:
        if start in index:
            continue
        work = [(start, iter(sorted(g[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def violations(root: Path, package: str = "grappa") -> list[str]:
    """Every import that reaches up a floor or out of the rooms, and every circle."""
    g = graph(root, package)
    problems = []
    for m, deps in sorted(g.items()):
        room = room_of(m)
        if room is None:
            if m != package:
                problems.append(f"{m} is in no room: move it into one (FLOORS)")
            continue
        for d in sorted(deps):
            target = room_of(d)
            if target is None or target == room:
                continue
            if FLOORS[target] >= FLOORS[room]:
                problems.append(f"{m} (floor {FLOORS[room]}, {room}) imports {d} "
                                f"(floor {FLOORS[target]}, {target}): an upward import")
    for comp in circles(g):
        problems.append("import circle: " + " -> ".join(comp))
    return problems


def test_rooms_import_one_way_and_in_no_circle():
    assert violations(TRAINER) == []


def test_the_top_level_is_the_rooms():
    found = {p.name for p in (TRAINER / "grappa").iterdir() if p.name != "__pycache__"}
    assert found == TOP_LEVEL, f"new at the top: {sorted(found - TOP_LEVEL)}; gone: {sorted(TOP_LEVEL - found)}"


def test_every_room_says_what_it_holds_and_may_import():
    for room in FLOORS:
        path = TRAINER / Path(*room.split("."))
        init = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert doc, f"{init} has no docstring"
        if path.is_dir():
            assert "May import" in doc, f"{init}: say which rooms it may import"


@pytest.mark.parametrize("name", OPERATOR_IMPORTS)
def test_what_the_operator_imports_loads_no_torch(name):
    """Statically: the module-level imports of `name`, of every package on its way and of what
    they import in turn, never reach torch or numpy."""
    modules = module_files(TRAINER, "grappa")
    todo = [name] + [".".join(name.split(".")[:i]) for i in range(1, name.count(".") + 1)]
    seen: set[str] = set()
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for i in imports_of(m, modules[m], modules, top_only=True):
            assert i.split(".")[0] not in HEAVY, f"{m} imports {i} at import time (on the operator's path)"
            if i in modules:
                todo += [i] + [".".join(i.split(".")[:k]) for k in range(1, i.count(".") + 1)]


def _package(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = tmp_path / "grappa" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_the_checker_finds_a_circle_and_an_upward_import(tmp_path):
    root = _package(tmp_path, {
        "__init__.py": "",
        "data/__init__.py": "",
        "data/a.py": "def f():\n    from grappa.data import b  # a lazy import still counts\n",
        "data/b.py": "from grappa.data.a import f\n",
        "models/__init__.py": "",
        "models/m.py": "from ..runtime.r import X\n",  # relative, upward
        "runtime/__init__.py": "",
        "runtime/r.py": "from grappa.models.m import Y\nX = 1\n",
        "loose.py": "",
    })
    found = violations(root)
    assert "import circle: grappa.data.a -> grappa.data.b" in found
    assert any("grappa.models.m (floor 2, grappa.models) imports grappa.runtime.r" in p for p in found)
    assert "grappa.loose is in no room: move it into one (FLOORS)" in found
    assert any(p.startswith("import circle:") and "grappa.models.m" in p for p in found)


if __name__ == "__main__":  # python tests/trainer/test_layout.py: the violations, one per line
    print("\n".join(violations(TRAINER)) or "the rooms import one way")
    sys.exit(0)
