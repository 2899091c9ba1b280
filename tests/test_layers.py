"""The import contract of pyproject.toml ([tool.importlinter]): the layers of docs/layout.md run one way."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def test_imports_follow_the_layer_order():
    exe = shutil.which("lint-imports") or str(Path(sys.executable).with_name("lint-imports"))
    if not Path(exe).exists():
        pytest.fail("lint-imports is missing: install the dev extra (pip install -e '.[dev]')")
    r = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "2 kept, 0 broken" in r.stdout
