"""The repository speaks of itself only: no file names a folder of the machine it was written on (an absolute
path under a home, root, work or temporary folder) or a working session by number ("session" and a digit).

Its files are the ones git tracks, plus untracked ones that .gitignore does not hide (outside a git clone: every
file but caches and run outputs). .gitignore is excluded because its lines are patterns relative to the
repository, not paths of a machine. The results overview links every findings page, and the findings pages keep to
120 characters a line.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
EXCLUDED = (".gitignore",)
SKIPPED_DIRS = {".git", "__pycache__", ".pytest_cache", ".hypothesis", "runs", "demo-out", "build", "dist", ".venv"}
SESSION = re.compile(r"\bsessions? [0-9]", re.IGNORECASE)
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|tmp|Users)/")


def repository_files() -> list[str]:
    if shutil.which("git") and (ROOT / ".git").exists():
        r = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           capture_output=True, check=True)
        names = [n for n in r.stdout.decode().split("\0") if n]
    else:
        names = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
                 if p.is_file() and not SKIPPED_DIRS & set(p.relative_to(ROOT).parts)
                 and not any(part.endswith(".egg-info") for part in p.parts)]
    return sorted(n for n in names if not n.startswith(EXCLUDED) and (ROOT / n).is_file())


def matches(pattern: re.Pattern) -> list[str]:
    found = []
    for name in repository_files():
        try:
            text = (ROOT / name).read_text(encoding="utf-8")
        except UnicodeDecodeError:          # binary files (images) hold no prose
            continue
        found += [f"{name}:{i}: {line.strip()[:100]}" for i, line in enumerate(text.splitlines(), 1)
                  if pattern.search(line)]
    return found


def test_no_file_names_a_working_session():
    assert not matches(SESSION), "\n".join(matches(SESSION))


def test_no_file_names_a_folder_of_the_machine():
    assert not matches(MACHINE_PATH), "\n".join(matches(MACHINE_PATH))


def test_the_patterns_catch_what_they_are_for():
    assert SESSION.search("measured in Session " + "22") and SESSION.search("(sessions " + "7-9)")
    assert not SESSION.search("one session of training") and not SESSION.search("session [0-9]")
    for path in ("/" + "work/shared/data", "cd /" + "root/x", '"/' + 'tmp/out"', "/" + "home/me/runs"):
        assert MACHINE_PATH.search(path), path
    for path in ("../shared/data", "runs/work/x", "src/xlpe/cli", "https://example.org/tmp/x"):
        assert not MACHINE_PATH.search(path), path


def test_the_results_overview_links_every_findings_page():
    overview = (RESULTS / "README.md").read_text(encoding="utf-8")
    linked = set(re.findall(r"\]\(([^)#\s]+)", overview))
    pages = {p.name for p in RESULTS.glob("*.md")} - {"README.md"}
    assert pages and pages <= linked, f"not linked from docs/results/README.md: {sorted(pages - linked)}"
    assert all((RESULTS / link).exists() for link in linked), sorted(linked)


def test_the_findings_pages_keep_to_120_characters():
    pages = [p for p in sorted(RESULTS.rglob("*.md")) if not str(p.relative_to(ROOT)).startswith(EXCLUDED)]
    long = [f"{p.relative_to(ROOT)}:{i}" for p in pages
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if len(line) > 120]
    assert not long, long
