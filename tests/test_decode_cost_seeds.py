"""Which model the decoding-cost stage times per system when a table was filled over several machines: the first
seed whose checkpoint is on this disk, and, once measured, the same models for as long as they are there."""

import json
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


def _model(out: Path, name: str, seed: int, folder: str = "runs") -> Path:
    """A finished run's checkpoint in ``out/<folder>``."""
    d = out / folder / name / f"seed{seed}" / "train"
    d.mkdir(parents=True, exist_ok=True)
    (d.parent / "done.json").write_text("{}")
    p = d / "checkpoint_10.pt"
    p.write_text(f"{folder} {name} {seed}")
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


def test_a_copy_stands_in_for_runs_trained_on_other_machines(tmp_path, timed):
    rpe3 = _model(tmp_path, "rpe", 3)
    for s in (1, 2, 3):                 # ape's runs are archives here: their checkpoints' signatures, no file
        d = tmp_path / "runs" / "ape" / f"seed{s}"
        (d / "train").mkdir(parents=True)
        (d / "done.json").write_text("{}")
        (d / "archived_checkpoints.json").write_text('{"train": {"latest": ["checkpoint_10.pt", 9, "ab"]}}')
    assert cost.untimed(tmp_path, ["ape", "rpe"], [1, 2, 3], "copies") == ["ape"]
    assert cost.untimed(tmp_path, ["ape", "rpe"], [1, 2, 3], "") == ["ape"]
    src = tmp_path / "test.src"
    src.write_text("a b c\n")
    stage = dict(src=str(src), channels={}, beam=2, lenpen=1.0, threads=1, rounds=1)
    assert cost.decode_cost_stage(tmp_path, ["ape", "rpe"], [1, 2, 3], copies="copies", **stage) == {}
    (tmp_path / "copies" / "ape" / "seed1" / "train").mkdir(parents=True)     # still training: not a model yet
    (tmp_path / "copies" / "ape" / "seed1" / "train" / "checkpoint_5.pt").write_text("half")
    assert cost.untimed(tmp_path, ["ape", "rpe"], [1, 2, 3], "copies") == ["ape"]
    ape1 = _model(tmp_path, "ape", 1, "copies")
    (ape1.parent / "checkpoint_5.pt").unlink()
    assert cost.untimed(tmp_path, ["ape", "rpe"], [1, 2, 3], "copies") == []
    res = cost.decode_cost_stage(tmp_path, ["ape", "rpe"], [1, 2, 3], copies="copies", **stage)
    assert timed == [{"ape": str(ape1), "rpe": str(rpe3)}]
    assert res["seeds"] == {"ape": "copy of seed 1", "rpe": 3}
    # the copy's file is gone but an archive recorded it: the measurement stands, nothing is trained or timed again
    sig = cost.file_sig(ape1)[0]
    ape1.unlink()
    (tmp_path / "copies" / "ape" / "seed1" / "archived_checkpoints.json").write_text(
        json.dumps({"train": {"latest": sig}}))
    assert cost.untimed(tmp_path, ["ape", "rpe"], [1, 2, 3], "copies") == []
    assert cost.decode_cost_stage(tmp_path, ["ape", "rpe"], [1, 2, 3], copies="copies", **stage) == res
    assert len(timed) == 1
