"""Which model the decoding-cost stage times per system when a table was filled over several machines: the first
seed whose checkpoint is on this disk, and, once measured, the same models for as long as they are there."""

from pathlib import Path

import pytest

import xlpe.experiments.engine.cost as cost
import xlpe.nn.checkpoint as checkpoint


@pytest.fixture
def timed(monkeypatch):
    """Checkpoints are any ``checkpoint_<step>.pt`` file (no model loads); the measurement records what it timed."""
    calls = []

    def newest(folder):
        found = checkpoint.list_checkpoints(folder)
        return found[-1][1] if found else None

    def measure(cks, **kw):
        calls.append(dict(cks))
        return {"reference": next(iter(cks)), "systems": {n: {"relative_speed": 1.0} for n in cks}}

    monkeypatch.setattr(checkpoint, "latest_checkpoint", newest)
    monkeypatch.setattr(cost, "measure_decode_cost", measure)
    return calls


def _model(out: Path, name: str, seed: int) -> Path:
    d = out / "runs" / name / f"seed{seed}" / "train"
    d.mkdir(parents=True, exist_ok=True)
    p = d / "checkpoint_10.pt"
    p.write_text(f"{name} {seed}")
    return p


def _stage(out: Path, seeds):
    src = out / "test.src"
    if not src.exists():
        src.write_text("a b c\n")
    return cost.decode_cost_stage(out, ["ape", "rpe"], seeds, src=str(src), channels={}, beam=2, lenpen=1.0,
                                  threads=1, rounds=1)


def test_each_system_times_its_first_seed_on_this_disk(tmp_path, timed):
    ape2, rpe1 = _model(tmp_path, "ape", 2), _model(tmp_path, "rpe", 1)
    _model(tmp_path, "rpe", 2)
    res = _stage(tmp_path, [1, 2, 3])               # ape's seed 1 was trained on another machine
    assert timed == [{"ape": str(ape2), "rpe": str(rpe1)}]
    assert res["seeds"] == {"ape": 2, "rpe": 1}
    # ape's seed-1 model arrives: the recorded measurement's models are still here, so nothing is timed again
    _model(tmp_path, "ape", 1)
    assert _stage(tmp_path, [1, 2, 3])["seeds"] == {"ape": 2, "rpe": 1} and len(timed) == 1
    # a model that was timed is gone: the stage times the first seed on this disk again
    ape2.unlink()
    assert _stage(tmp_path, [1, 2, 3])["seeds"] == {"ape": 1, "rpe": 1} and len(timed) == 2


def test_one_seed_and_missing_reference(tmp_path, timed):
    _model(tmp_path, "rpe", 1)
    assert _stage(tmp_path, 1) == {} and timed == []                # no APE model: nothing to compare with
    _model(tmp_path, "ape", 1)
    assert _stage(tmp_path, 1)["seeds"] == {"ape": 1, "rpe": 1}      # an int is one seed, as the older recipes pass
