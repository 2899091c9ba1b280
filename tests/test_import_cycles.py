"""No import cycles between the modules of xlpe.

The graph is grimp's (the library under import-linter): every import statement of every module, wherever it
stands (module level, inside a function or method, under ``if TYPE_CHECKING:``, in ``try``), and a package
``__init__``'s re-exports of its submodules. Any strongly connected component of more than one module is a
cycle; the failure lists each one with the import lines that form it. A function-level import counts like any
other: hiding an import inside a function does not break a cycle. Not counted: ``importlib.import_module(name)``
(no import statement; the CLI dispatches to its sub-command modules that way) and the implicit import of a
parent package when one of its submodules is imported.
"""

from __future__ import annotations

import textwrap

import grimp

PACKAGE = "xlpe"


def import_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The import cycles of ``graph``: its strongly connected components of more than one module, and modules
    that import themselves; each sorted, the list sorted by first module (Tarjan's algorithm, iterative)."""
    modules = sorted(graph.modules)
    succ = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in modules:
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


def describe_cycles(graph: grimp.ImportGraph, cycles: list[list[str]]) -> str:
    """Each cycle with the import lines between its modules: ``importer:line: statement``."""
    out = []
    for comp in cycles:
        members = set(comp)
        out.append(f"cycle of {len(comp)} modules: {', '.join(comp)}")
        for importer in comp:
            details = [d for imported in graph.find_modules_directly_imported_by(importer) & members
                       for d in graph.get_import_details(importer=importer, imported=imported)]
            for d in sorted(details, key=lambda d: (d["line_number"] or 0, d["imported"])):
                out.append(f"    {importer}:{d['line_number']}: {d['line_contents']}")
    return "\n".join(out)


def test_the_package_has_no_import_cycles():
    graph = grimp.build_graph(PACKAGE, cache_dir=None)
    assert len(graph.modules) > 50, sorted(graph.modules)
    cycles = import_cycles(graph)
    assert not cycles, "import cycles between modules of xlpe:\n" + describe_cycles(graph, cycles)


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
    cycles = import_cycles(g)
    assert cycles == [["p.a", "p.b"], ["p.c", "p.d", "p.e"], ["p.s"]]
    text = describe_cycles(g, cycles)
    assert "    p.e:5: import p.c" in text and "    p.a:1: import p.b" in text
    assert "p.e:6" not in text                                     # an edge between two cycles is in neither
    g.remove_import(importer="p.b", imported="p.a")
    assert import_cycles(g) == [["p.c", "p.d", "p.e"], ["p.s"]]


def test_function_level_type_checking_and_reexport_imports_make_cycles(tmp_path, monkeypatch):
    """grimp records the imports that a cycle hides behind: inside functions and methods, under
    ``if TYPE_CHECKING:``, and a package ``__init__``'s re-exports."""
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
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("cyclepkg", cache_dir=None)
    assert import_cycles(graph) == [["cyclepkg.high", "cyclepkg.low"],
                                    ["cyclepkg.sub", "cyclepkg.sub.other", "cyclepkg.sub.part"],
                                    ["cyclepkg.typed", "cyclepkg.user"]]
    text = describe_cycles(graph, import_cycles(graph))
    assert "cyclepkg.low:3: from cyclepkg.high import g" in text
    assert "cyclepkg.typed:4: from cyclepkg.user import User" in text
    assert "cyclepkg.typed:7: import cyclepkg.user" in text
    assert "cyclepkg.sub:2: from cyclepkg.sub.part import PART" in text
