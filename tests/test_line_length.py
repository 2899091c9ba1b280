"""Line length: no line of ``src/``, ``tests/`` or ``benchmarks/`` (``.py``) or of ``examples/`` (``.toml``) is longer
than 120 characters (characters, not bytes: ``é`` counts one). Every offender is listed as ``path:line: length``."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINE = 120
#: folder -> the file suffix checked in it
CHECKED = {"src": ".py", "tests": ".py", "benchmarks": ".py", "examples": ".toml"}


def long_lines(root: Path, checked: dict[str, str] = CHECKED, limit: int = MAX_LINE) -> list[str]:
    """``path:line: length`` of every line longer than ``limit`` characters in the ``checked`` folders of
    ``root`` (paths relative to ``root``, in path order)."""
    out = []
    for folder, suffix in checked.items():
        for p in sorted((root / folder).rglob(f"*{suffix}")):
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
                if len(line) > limit:
                    out.append(f"{p.relative_to(root).as_posix()}:{i}: {len(line)}")
    return out


def test_no_line_is_longer_than_120_characters():
    offenders = long_lines(ROOT)
    assert not offenders, (f"{len(offenders)} line(s) longer than {MAX_LINE} characters (wrap them):\n"
                           + "\n".join(offenders))


def test_the_checker_counts_characters_and_names_path_and_line(tmp_path):
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    (tmp_path / "examples").mkdir()
    (tmp_path / "src" / "pkg" / "m.py").write_text("x = 1\n" + "é" * 10 + "\n" + "y" * 11 + "\n", encoding="utf-8")
    (tmp_path / "src" / "notes.txt").write_text("z" * 50 + "\n", encoding="utf-8")     # not a checked suffix
    (tmp_path / "examples" / "a.toml").write_text("k = 1\r\n" + "v" * 12 + "\r\n", encoding="utf-8")
    found = long_lines(tmp_path, {"src": ".py", "examples": ".toml"}, limit=10)
    assert found == ["src/pkg/m.py:3: 11", "examples/a.toml:2: 12"]
