"""No import cycles between the modules of xlpe.

The graph is grimp's (the library under import-linter): every import statement of every module, wherever it
stands (module level, inside a function or method, under ``if TYPE_CHECKING:``, in ``try``), including a package
``__init__``'s re-exports of its submodules. To it is added what Python runs besides: importing ``p.q.m`` from a
module outside package ``p.q`` runs ``p/q/__init__.py`` (and ``p/__init__.py``) first, so that import depends on
the package too (a module inside the package finds it initialised or initialising already). Any strongly
connected component of more than one module is a cycle; the failure lists each one with the import lines that
form it. A function-level import counts like any other: hiding an import inside a function does not break a
cycle. Not counted: ``importlib.import_module(name)`` (no import statement; the CLI dispatches to its
sub-command modules that way).
"""

from __future__ import annotations

import importlib
import sys
import textwrap

import grimp
import pytest

PACKAGE = "xlpe"


def dependencies(graph: grimp.ImportGraph) -> dict[str, dict[str, list[str]]]:
    """``importer -> module whose code the import runs -> ["line: statement", ...]``: grimp's direct imports,
    and for each one the packages above the imported module that the importer is not inside of."""
    deps: dict[str, dict[str, list[str]]] = {m: {} for m in graph.modules}
    for importer in graph.modules:
        for imported in graph.find_modules_directly_imported_by(importer):
            details = sorted(graph.get_import_details(importer=importer, imported=imported),
                             key=lambda d: d["line_number"] or 0)
            lines = [f"{d['line_number']}: {d['line_contents']}" for d in details] or ["?: (no line recorded)"]
            deps[importer].setdefault(imported, []).extend(lines)
            parts = imported.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                if package in deps and importer != package and not importer.startswith(package + "."):
                    deps[importer].setdefault(package, []).extend(f"{x}  [runs {package}]" for x in lines)
    return deps


def import_cycles(deps: dict[str, dict[str, list[str]]]) -> list[list[str]]:
    """The import cycles of ``deps`` (from :func:`dependencies`): its strongly connected components of more than
    one module, and modules that import themselves; each sorted, the list sorted (Tarjan's algorithm, iterative)."""
    succ = {m: sorted(deps[m]) for m in sorted(deps)}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in succ:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(succ[root]))]
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(succ[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in succ[v]:
                    found.append(sorted(comp))
    return sorted(found)


def describe_cycles(deps: dict[str, dict[str, list[str]]], cycles: list[list[str]]) -> str:
    """Each cycle with the import lines between its modules: ``importer:line: statement``."""
    out = []
    for comp in cycles:
        out.append(f"cycle of {len(comp)} modules: {', '.join(comp)}")
        for importer in comp:
            lines = {x for target in set(comp) & set(deps[importer]) for x in deps[importer][target]}
            out += [f"    {importer}:{x}" for x in sorted(lines, key=lambda x: (int(x.split(":")[0]), x))]
    return "\n".join(out)


def test_the_package_has_no_import_cycles():
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    assert len(graph.modules) > 50, sorted(graph.modules)
    deps = dependencies(graph)
    cycles = import_cycles(deps)
    assert not cycles, "import cycles between modules of xlpe:\n" + describe_cycles(deps, cycles)


def test_cycle_finder_on_a_hand_made_graph():
    g = grimp.ImportGraph()
    edges = [("p.a", "p.b"), ("p.b", "p.a"),                      # a two-cycle
             ("p.c", "p.d"), ("p.d", "p.e"), ("p.e", "p.c"),      # a three-cycle ...
             ("p.e", "p.a"),                                      # ... that imports the two-cycle: still two SCCs
             ("p.f", "p.g"), ("p.g", "p.h"), ("p.f", "p.h"),      # a diamond without cycle
             ("p.s", "p.s")]                                      # a module that imports itself
    for n, (a, b) in enumerate(edges, 1):
        g.add_import(importer=a, imported=b, line_number=n, line_contents=f"import {b}")
    g.add_module("p.alone")
    deps = dependencies(g)
    cycles = import_cycles(deps)
    assert cycles == [["p.a", "p.b"], ["p.c", "p.d", "p.e"], ["p.s"]]
    text = describe_cycles(deps, cycles)
    assert "    p.e:5: import p.c" in text and "    p.a:1: import p.b" in text
    assert "p.e:6" not in text                                     # an edge between two cycles is in neither
    g.remove_import(importer="p.b", imported="p.a")
    assert import_cycles(dependencies(g)) == [["p.c", "p.d", "p.e"], ["p.s"]]


def test_importing_a_submodule_runs_its_package():
    g = grimp.ImportGraph()
    g.add_module("q")
    edges = [("q.pkg", "q.pkg.part"),            # the package re-exports a submodule
             ("q.pkg.part", "q.pkg.helper"),     # which imports a sibling: no dependency on its own package
             ("q.pkg.helper", "q.low"),
             ("q.low", "q.pkg.leaf")]            # from outside the package: runs q/pkg/__init__.py first
    for n, (a, b) in enumerate(edges, 11):
        g.add_import(importer=a, imported=b, line_number=n, line_contents=f"import {b}")
    deps = dependencies(g)
    assert set(deps["q.low"]) == {"q.pkg.leaf", "q.pkg"} and set(deps["q.pkg.part"]) == {"q.pkg.helper"}
    cycles = import_cycles(deps)
    assert cycles == [["q.low", "q.pkg", "q.pkg.helper", "q.pkg.part"]]
    assert "    q.low:14: import q.pkg.leaf  [runs q.pkg]" in describe_cycles(deps, cycles)
    g.remove_import(importer="q.low", imported="q.pkg.leaf")
    assert import_cycles(dependencies(g)) == []


def test_hidden_and_implicit_imports_make_cycles(tmp_path, monkeypatch):
    """grimp records the imports that a cycle hides behind (inside functions and methods, under
    ``if TYPE_CHECKING:``, a package ``__init__``'s re-exports), and a cycle through a package's ``__init__``
    that no import statement names is a real one: importing its first module fails."""
    root = tmp_path / "cyclepkg"
    files = {
        "__init__.py": "",
        "low.py": """
            def f():
                from cyclepkg.high import g   # a cycle hidden in a function
                return g
            """,
        "high.py": """
            from cyclepkg.low import f

            def g():
                return f
            """,
        "typed.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from cyclepkg.user import User
            class Base:
                def m(self) -> "User":
                    import cyclepkg.user
                    return cyclepkg.user.User()
            """,
        "user.py": """
            from cyclepkg.typed import Base
            class User(Base):
                pass
            """,
        "sub/__init__.py": """
            from cyclepkg.sub.part import PART
            """,
        "sub/part.py": """
            from cyclepkg.sub.other import OTHER
            PART = OTHER
            """,
        "sub/other.py": """
            OTHER = 1
            def later():
                from cyclepkg.sub import PART   # through the package's re-export
                return PART
            """,
        "layers.py": """
            from cyclepkg.plugins.types import T   # runs plugins/__init__.py, which imports this module
            X = T
            """,
        "plugins/__init__.py": """
            from cyclepkg.plugins.enc import ENC
            """,
        "plugins/types.py": """
            T = 1
            """,
        "plugins/enc.py": """
            from cyclepkg.layers import X
            ENC = X
            """,
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclepkg", cache_dir=None)
    deps = dependencies(graph)
    cycles = import_cycles(deps)
    assert cycles == [["cyclepkg.high", "cyclepkg.low"],
                      ["cyclepkg.layers", "cyclepkg.plugins", "cyclepkg.plugins.enc"],
                      ["cyclepkg.sub", "cyclepkg.sub.other", "cyclepkg.sub.part"],
                      ["cyclepkg.typed", "cyclepkg.user"]]
    text = describe_cycles(deps, cycles)
    assert "cyclepkg.low:3: from cyclepkg.high import g" in text
    assert "cyclepkg.typed:4: from cyclepkg.user import User" in text
    assert "cyclepkg.typed:7: import cyclepkg.user" in text
    assert "cyclepkg.sub:2: from cyclepkg.sub.part import PART" in text
    assert "cyclepkg.layers:2: from cyclepkg.plugins.types import T" in text and "[runs cyclepkg.plugins]" in text
    try:
        with pytest.raises(ImportError, match="partially initialized module 'cyclepkg.layers'"):
            importlib.import_module("cyclepkg.layers")
    finally:
        for name in [m for m in sys.modules if m == "cyclepkg" or m.startswith("cyclepkg.")]:
            del sys.modules[name]
