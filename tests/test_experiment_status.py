"""`xlpe experiment status OUT`: stages done / unfinished / shared by link, an unfinished run's progress and the
rest at its own pace (a pause left out), stale stages left out, a clear error for a missing folder."""

import json

import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.engine.status import folder_status, render_status


def _stage(d, params, done=True, result=None):
    d.mkdir(parents=True)
    (d / "started.json").write_text(json.dumps({"key": "k", "params": params}))
    if done:
        (d / "done.json").write_text(json.dumps({"key": "k", "params": params, "result": result or {}}))


def _log(d, rows):
    d.mkdir(parents=True, exist_ok=True)
    (d / "train_log.csv").write_text("step,loss,wall_time\n" + "".join(f"{s},1.0,{w}\n" for s, w in rows))


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "out"
    _stage(out / "data", {"files": []}, result={"seconds": 3.0})
    _stage(out / "align.stale-0123", {"files": []})                      # moved aside: not listed
    _stage(out / "runs" / "baseline" / "seed1", {"train": {"max_updates": 100}}, result={"seconds": 250.0})
    _log(out / "runs" / "baseline" / "seed1" / "train", [(50, 100.0), (100, 200.0)])
    # unfinished: 2 s per update, except one interval with a 1,000 s pause in it
    _stage(out / "runs" / "dpe-l0.5" / "seed1", {"train": {"max_updates": 100}}, done=False)
    _log(out / "runs" / "dpe-l0.5" / "seed1" / "train", [(10, 20.0), (20, 40.0), (30, 1060.0), (40, 1080.0)])
    with open(out / "runs" / "dpe-l0.5" / "seed1" / "train" / "train_log.csv", "a") as f:
        f.write(",1.")                                                   # a line the trainer is still writing
    _stage(out / "train-deen-s42-tlm", {"train": {"tlm_max_steps": 9}}, done=False)     # a Cross-Align stage
    _log(out / "train-deen-s42-tlm" / "tlm", [(5, 30.0)])
    (out / "runs" / "dpe").mkdir()
    (out / "runs" / "dpe" / "seed1").symlink_to("../dpe-l0.5/seed1", target_is_directory=True)
    return out


def test_folder_status(folder):
    st = folder_status(folder)
    by = {e["name"]: e for e in st["stages"]}
    assert set(by) == {"data", "runs/baseline/seed1", "runs/dpe-l0.5/seed1", "runs/dpe/seed1", "train-deen-s42-tlm"}
    assert (st["done"], st["unfinished"], st["link"]) == (2, 2, 1)
    assert by["train-deen-s42-tlm"] == {"name": "train-deen-s42-tlm", "state": "unfinished", "update": 5,
                                        "train_seconds": 30.0}
    assert by["runs/baseline/seed1"] == {"name": "runs/baseline/seed1", "state": "done", "seconds": 250.0,
                                         "budget": 100, "update": 100, "train_seconds": 200.0,
                                         "seconds_per_update": 2.0}
    run = by["runs/dpe-l0.5/seed1"]
    assert run["state"] == "unfinished" and run["update"] == 40 and run["seconds_per_update"] == 2.0
    assert run["remaining_seconds"] == 120 == st["remaining_seconds"]          # 60 updates at 2 s, the pause left out
    assert by["runs/dpe/seed1"] == {"name": "runs/dpe/seed1", "state": "link", "target": "runs/dpe-l0.5/seed1"}
    text = render_status(st)
    assert "2 stages done, 2 unfinished, 1 shared by link" in text
    assert "| runs/dpe-l0.5/seed1 | unfinished | 40 / 100 | 18 min | 2 min |" in text
    assert "| runs/dpe/seed1 | = runs/dpe-l0.5/seed1 |" in text


def test_status_cli(folder, tmp_path, capsys):
    assert main(["experiment", "status", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unfinished"] == 2
    assert main(["experiment", "status", str(folder)]) == 0
    assert capsys.readouterr().out.startswith(f"# {folder}: 2 stages done")
    with pytest.raises(ConfigError, match="no such folder"):
        folder_status(tmp_path / "missing")
    assert main(["experiment", "status", str(tmp_path / "missing")]) != 0
