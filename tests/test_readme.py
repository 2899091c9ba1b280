"""The README is read in five minutes (under 8 KB, no line over 120 characters) and keeps what a newcomer needs:
the two set-up commands CI runs, the licence note on eflomal, links that lead somewhere. The other hand-written
pages (docs/*.md, benchmarks/README.md) keep to the same line length; docs/results/ is checked on its own."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_the_readme_is_short():
    assert len(README.read_bytes()) < 8 * 1024


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_line_is_over_120_characters(page):
    long = [(i, len(line)) for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
            if len(line) > 120]
    assert not long, f"{page.relative_to(ROOT)}: lines over 120 characters (line, length): {long}"


def test_the_readme_keeps_the_set_up_commands_and_the_licence_note():
    text = README.read_text(encoding="utf-8")
    setup = re.search(r"## Set-up: two commands\n\n```bash\n(.*?)```", text, re.S)
    assert setup, "the set-up section with its two commands"
    assert [line.split("#")[0].strip() for line in setup[1].splitlines()] == ["make demo", "make test"]
    assert "make test" in (ROOT / ".ci" / "run").read_text()           # what CI runs is what the README says
    assert re.search(r"`eflomal` extra[^.]*GPLv3", text) and "pip install -e ." in text


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_to_files_of_the_repository_lead_to_them(page):
    text = page.read_text(encoding="utf-8")
    for target in LINK.findall(text):
        if "://" in target or target.startswith("mailto:"):
            continue
        assert (page.parent / target).exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"
