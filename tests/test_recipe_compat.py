"""Every recipe's output folder made by the code of :data:`BASELINE` stays valid for the code of this checkout: run
again here, it retrains nothing (every stage's ``done.json``, key and result, is left as it was) and writes the same
report. The tiny configs are the recipes' own end-to-end test configs (demo, xl-pe, structural-pe, dpe,
cross-align); the baseline's code comes from git history, so the test needs a clone with that commit.

:data:`BASELINE` moves forward only with a change that means to change a report or a key, and that change's commit
message says why. Before the experiment engine it was d20401d (the engine kept every key and report of that commit);
the statistics fix of the xl-pe report's AER-claims header (4e63507) then moved it to the merge that brought it,
and the xl-pe report header's naming of its t-test (paired or Welch's) to that change's commit, a7c2c5b.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import io
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "a7c2c5b"
CONFIGS = Path(__file__).with_name("recipe_configs")
DEMO = ["--train", "600", "--dev", "50", "--test", "50", "--vocab-size", "400", "--preorder-sentences", "200",
        "--preorder-iterations", "1", "--nmt-pe", "none", "ape", "headxl", "struct", "dpe", "--nmt-updates", "8",
        "--nmt-d-model", "32", "--nmt-layers", "1", "--beam", "2"]
RECIPES = ["demo", "xl-pe", "structural-pe", "dpe", "cross-align"]


def _baseline_src(tmp: Path) -> Path:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git clone: the baseline's code comes from git history")
    r = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", BASELINE, "src"], capture_output=True)
    if r.returncode:
        pytest.skip(f"commit {BASELINE} is not in this clone (shallow?): {r.stderr.decode()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as t:
        t.extractall(tmp, filter="data")
    return tmp / "src"


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    return _baseline_src(tmp_path_factory.mktemp("baseline"))


def _args(recipe: str, out: Path, tmp: Path) -> list[str]:
    if recipe == "demo":
        return ["demo", "--out", str(out), *DEMO]
    cfg = tmp / f"{recipe}.toml"
    text = (CONFIGS / f"{recipe}.toml").read_text()
    if recipe == "cross-align":
        text = text.replace("@INPUTS@", str(_cross_align_inputs(tmp)))
    cfg.write_text(text)
    return ["experiment", recipe, "--config", str(cfg), "--out", str(out)]


def _cross_align_inputs(tmp: Path) -> Path:
    """The cross-align recipe's toy encoder and two toy pairs (tests/test_cross_align_experiment.py)."""
    d = tmp / "ca-inputs"
    if not d.exists():
        pytest.importorskip("transformers")
        pytest.importorskip("eflomal")
        sys.path.insert(0, str(Path(__file__).parent))
        import test_cross_align_experiment as t
        t.write_encoder(d / "enc")
        t._pair(d / "ende", "ende")
        t._pair(d / "deen", "deen", True)
    return d


def _run(args: list[str], src: Path, cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run([sys.executable, "-m", "xlpe.cli", *args], cwd=cwd, env=env, capture_output=True, text=True,
                       timeout=900)
    assert r.returncode == 0, r.stderr[-4000:]


def _markers(out: Path) -> dict[str, bytes]:
    """Every stage's ``done.json`` and every single-file result's ``.key`` (a recipe's links), by content."""
    found = [*out.rglob("done.json"), *out.glob("links-*/*.key")]
    return {str(m.relative_to(out)): m.read_bytes() for m in sorted(found) if ".stale-" not in str(m)}


def _report(out: Path, recipe: str) -> str:
    text = (out / "report.md").read_text()
    return text.split("## Run")[0] if recipe == "demo" else text     # the demo's last section: time and command


@pytest.mark.parametrize("recipe", RECIPES)
def test_a_folder_made_before_the_engine_is_cached_and_reports_the_same(recipe, baseline, tmp_path):
    if recipe != "demo":
        pytest.importorskip("eflomal")
    out = tmp_path / "out"
    args = _args(recipe, out, tmp_path)
    _run(args, baseline, tmp_path)
    before, report = _markers(out), _report(out, recipe)
    _run(args, ROOT / "src", tmp_path)
    after = _markers(out)
    changed = sorted(k for k in before if after.get(k) != before[k])
    assert not changed, f"stages that ran again or changed key: {changed}"
    assert sorted(after) == sorted(before), f"new stages: {sorted(set(after) - set(before))}"
    assert _report(out, recipe) == report
    assert json.loads((out / "results.json").read_text())["results"]
