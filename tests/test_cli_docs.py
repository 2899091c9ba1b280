"""docs/cli.md is the ``--help`` of every command as the parsers give it now (:mod:`xlpe.cli.docs`)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from xlpe.cli import COMMANDS
from xlpe.cli.docs import MAX_LINE, REGENERATE, fold, help_texts, render
from xlpe.experiments.recipes import RECIPES

PAGE = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


@pytest.fixture(scope="module")
def texts():
    return help_texts()


def test_docs_cli_md_is_not_stale(texts):
    text = PAGE.read_text(encoding="utf-8")
    made_with = re.search(r"argparse of Python (\d+)\.(\d+)", text)
    assert made_with, "docs/cli.md does not say which Python made it: regenerate it"
    if tuple(map(int, made_with.groups())) != sys.version_info[:2]:
        pytest.skip(f"docs/cli.md was made with Python {'.'.join(made_with.groups())}, whose argparse lays help out "
                    f"differently from this Python's; regenerate it there with `{REGENERATE}`")
    assert text == render(texts), f"docs/cli.md is stale: regenerate it with `{REGENERATE}`"


def test_every_command_and_sub_command_has_its_help_on_the_page(texts):
    progs = [prog for prog, _ in texts]
    for name in COMMANDS:
        assert f"xlpe {name}" in progs
    for nested in ("xlpe subword train", "xlpe crossalign align", "xlpe preorder apply", "xlpe experiment status",
                   *(f"xlpe experiment {r}" for r in RECIPES)):
        assert nested in progs
    text = PAGE.read_text(encoding="utf-8")
    for prog in progs:
        assert f"\n#{'#' * min(1 + max(prog.count(' ') - 1, 0), 3)} {prog}\n" in text
    assert "usage: xlpe experiment dpe [-h]" in text and "--paired-seeds" in text


def test_no_line_of_the_page_is_too_long_and_folding_keeps_every_word():
    assert max(len(line) for line in PAGE.read_text(encoding="utf-8").splitlines()) <= MAX_LINE
    line = "      [--only {table1,fig3} [{table1,fig3} ...]] " + " ".join(f"[--opt{i} X]" for i in range(9))
    parts = fold(line, 60)
    assert all(len(p) <= 60 for p in parts) and len(parts) > 1
    assert " ".join(p.strip() for p in parts) == line.strip()
    assert all(p.startswith("        ") for p in parts[1:])
    assert fold("short line") == ["short line"] and fold("x" * 130) == ["x" * 130]      # no space: left whole
