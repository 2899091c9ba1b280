"""Code size: every module of ``src/xlpe`` is at most 500 lines and every function or method at most 80 lines
(from its ``def`` line to the last line of its body, nested functions included), unless the module says why.

How a module says why: a comment line ``# size: <reason>`` among its first 5 lines (before the docstring, or
after a short one), the reason on that one line, in at least a few words. One marker covers the module:

* it excuses the module's length;
* it excuses a long function only if the reason names it (``name`` or ``Class.name``), e.g.
  ``# size: build_parser declares every option of the command in one table``;
* a marker that excuses nothing (a short module without a long function it names) is itself reported, so
  markers do not outlive their reason.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "xlpe"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80
MARKER_LINES = 5                   # the marker is looked for in this many first lines
MARKER = re.compile(r"^#\s*size:\s*(?P<reason>.*\S)\s*$")
MIN_REASON = 15                    # characters: a reason, not "ok"


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def size_marker(text: str) -> tuple[int, str] | None:
    """``(line, reason)`` of the module's ``# size:`` marker, or None."""
    for i, line in enumerate(text.splitlines()[:MARKER_LINES], 1):
        m = MARKER.match(line.strip())
        if m:
            return i, m.group("reason")
    return None


def long_functions(tree: ast.AST, limit: int) -> list[tuple[str, str, int, int]]:
    """``(name, qualified name, def line, length)`` of every function or method longer than ``limit`` lines."""
    found = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qual = prefix + child.name
                n = child.end_lineno - child.lineno + 1
                if n > limit:
                    found.append((child.name, qual, child.lineno, n))
                visit(child, qual + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)
    visit(tree, "")
    return found


def check_module(text: str, path: str, max_module: int = MAX_MODULE_LINES,
                 max_function: int = MAX_FUNCTION_LINES) -> list[Violation]:
    """The size violations of one module's source ``text`` (``path`` is only for the messages)."""
    out = []
    marker = size_marker(text)
    reason = marker[1] if marker else ""
    if marker and len(reason) < MIN_REASON:
        out.append(Violation(path, marker[0], f"'# size:' marker without a reason of at least {MIN_REASON} "
                                              f"characters: {reason!r}"))
        marker, reason = None, ""
    n_lines = len(text.splitlines())
    excused = False
    if n_lines > max_module:
        if marker:
            excused = True
        else:
            out.append(Violation(path, 1, f"module is {n_lines} lines (limit {max_module}) and has no "
                                          "'# size: <reason>' marker"))
    named = {w.strip(".") for w in re.findall(r"[\w.]+", reason)}
    for name, qual, line, n in long_functions(ast.parse(text), max_function):
        if marker and any(w == name or w == qual or qual.endswith("." + w) for w in named):
            excused = True
            continue
        out.append(Violation(path, line, f"{qual} is {n} lines (limit {max_function})"
                             + (" and the '# size:' marker does not name it" if marker else "")))
    if marker and not excused:
        out.append(Violation(path, marker[0], "'# size:' marker excuses nothing (the module is short and it "
                                              "names no long function): remove it"))
    return out


def all_violations() -> list[Violation]:
    out = []
    for p in sorted(SRC.rglob("*.py")):
        out += check_module(p.read_text(encoding="utf-8"), str(p.relative_to(SRC.parents[1])))
    return out


def test_modules_and_functions_are_short_or_say_why():
    violations = all_violations()
    for v in violations:
        print(v)
    assert not violations, (f"{len(violations)} size violation(s) (add a '# size: <reason>' marker, see "
                            "tests/test_code_size.py, or split):\n" + "\n".join(map(str, violations)))


# -- the checker itself, on small sources -----------------------------------------------------------------

def _source(body_lines: int, marker: str | None = None, name: str = "f", in_class: bool = False) -> str:
    head = [marker] if marker else []
    if in_class:
        return "\n".join(head + ["class C:", f"    def {name}(self):"] + ["        x = 1"] * (body_lines - 1)) + "\n"
    return "\n".join(head + [f"def {name}():"] + ["    x = 1"] * (body_lines - 1)) + "\n"


def test_function_length_counts_from_def_to_the_end_of_its_body():
    assert check_module(_source(10), "m.py", max_function=10) == []
    [v] = check_module(_source(11), "m.py", max_function=10)
    assert str(v) == "m.py:1: f is 11 lines (limit 10)"
    src = "@decorator\n" + _source(10) + "    # a comment\n\n    return x\n"
    [v] = check_module(src, "m.py", max_function=10)     # the decorator is not counted, the tail is
    assert (v.line, v.what) == (2, "f is 13 lines (limit 10)")


def test_methods_and_nested_functions_are_checked():
    [v] = check_module(_source(12, in_class=True, name="run"), "m.py", max_function=10)
    assert v.what.startswith("C.run is 12 lines")
    nested = "def outer():\n    def inner():\n" + "        x = 1\n" * 11 + "    return inner\n"
    assert [v.what.split(" is")[0] for v in check_module(nested, "m.py", max_function=10)] == ["outer",
                                                                                               "outer.inner"]


def test_a_marker_excuses_the_module_and_the_functions_it_names():
    long_module = "\n" * 30
    assert [v.line for v in check_module(long_module, "m.py", max_module=20)] == [1]
    assert check_module("# size: a generated table of constants\n" + long_module, "m.py", max_module=20) == []
    named = _source(12, marker="# size: f keeps its state machine in one place", name="f")
    assert check_module(named, "m.py", max_function=10) == []
    method = _source(12, marker="# size: C.run is the whole protocol, step by step", name="run", in_class=True)
    assert check_module(method, "m.py", max_function=10) == []
    other = _source(12, marker="# size: g keeps its state machine in one place", name="f")
    [v, stale] = check_module(other, "m.py", max_function=10)
    assert "does not name it" in v.what and "excuses nothing" in stale.what
    later = "\n" * MARKER_LINES + "# size: f keeps its state machine in one place\n" + _source(12)
    assert [v.what for v in check_module(later, "m.py", max_function=10)] == ["f is 12 lines (limit 10)"]


def test_a_marker_needs_a_reason_and_something_to_excuse():
    [v] = check_module("# size: ok\nx = 1\n", "m.py")
    assert "without a reason" in v.what
    [v] = check_module("# size: nothing long here, just in case\nx = 1\n", "m.py")
    assert v.line == 1 and "excuses nothing" in v.what


@pytest.mark.parametrize("text", ['"""Doc."""\n# size: kept here for a reason\n', "#!/usr/bin/env python\n"
                                  "# size: kept here for a reason\n"])
def test_the_marker_may_follow_a_docstring_line_or_a_shebang(text):
    assert size_marker(text) == (2, "kept here for a reason")
