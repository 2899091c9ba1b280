"""`xlpe experiment compare` on a tiny built-in pair: every channel kind, both baselines, the cost columns,
keys that hold only what a system reads, and early config errors."""

import json
from pathlib import Path

import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.engine.cost import measured_train
from xlpe.experiments.recipes.compare import load_config
from xlpe.train.config import TrainConfig

TINY = (Path(__file__).with_name("recipe_configs") / "compare.toml").read_text()
SYSTEMS = ("none", "ape", "rpe", "disan", "headxl", "struct", "dpe", "rpe+headxl")


def test_compare_recipe_end_to_end(tmp_path):
    pytest.importorskip("eflomal")                  # XL orders and DPE targets come from eflomal links
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    assert main(["experiment", "compare", "--config", str(cfg), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    s = res["summary"]
    assert set(res["runs"]) == {f"{n}/seed{k}" for n in SYSTEMS for k in (1, 2)}
    assert res["runs"]["disan/seed1"]["pe"] == ["ape", "disan"]
    assert res["runs"]["rpe+headxl/seed1"]["pe"] == ["ape", "rpe", "headxl"]
    assert s["disan"]["params"] == s["ape"]["params"] < s["rpe"]["params"]
    t = s["headxl"]["tests"]["test"]
    assert set(t["vs"]) == {"ape", "rpe"} and t["vs"]["ape"]["compare_bleu"]["sys_seeds"] == 2
    assert set(s["ape"]["tests"]["test"]["vs"]) == {"rpe"}                   # not against itself
    assert set(res["cost"]["systems"]) == set(res["decode_cost"]["systems"]) == set(SYSTEMS) - {"none"}
    assert s["dpe"]["speed_vs_ape"] > 0 and s["struct"]["decode_speed_vs_ape"] > 0
    assert res["decode_cost"]["seeds"] == {n: 1 for n in SYSTEMS if n != "none"}  # all on this disk: the first seed
    # a run's key holds the channel files its model reads, and nothing else
    keys = {n: json.loads((out / "runs" / n / "seed1" / "done.json").read_text())["params"] for n in SYSTEMS}
    reads = {n: keys[n]["run"].get("reads", {}) for n in SYSTEMS}
    assert reads["ape"] == reads["rpe"] == reads["disan"] == {}
    assert set(reads["headxl"]["train"]) == {"xl"} and set(reads["struct"]["test"]) == {"depth", "tree_word",
                                                                                          "tree_head"}
    assert set(reads["dpe"]) == {"train"} and set(reads["dpe"]["train"]) == {"dpe_target"}
    report = (out / "report.md").read_text()
    for label in ("+DiSAN", "+RPE +HeadXL", "| no PE | none |", "Δ BLEU vs +RPE (p)", "decoding vs APE",
                  "decoding speeds timed each system's model of seed 1 (ape, "):
        assert label in report
    assert "## Claims (each names the tests it rests on)" in report and "t-test" in report
    assert (out / "plots" / "compare.png").exists()
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")}
    # a system added later trains alone: the others' runs stay cached
    assert main(["experiment", "compare", "--config", str(cfg), "--out", str(out),
                 "--set", "experiment.systems=" + repr(list(SYSTEMS) + ["learned"])]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json") if "learned" not in str(p)} == stamps
    assert (out / "runs" / "learned" / "seed2" / "done.json").exists()
    # APE's runs were trained on another machine (no checkpoint here): decode_cost_copies trains its first seed's
    # run again for the decoding cost, and nothing else
    for ck in (out / "runs" / "ape").rglob("checkpoint_*.pt"):
        ck.unlink()
    assert main(["experiment", "compare", "--config", str(cfg), "--out", str(out),
                 "--set", "experiment.decode_cost_copies=true"]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    others = {n: 1 for n in SYSTEMS if n not in ("none", "ape")}
    assert res["decode_cost"]["seeds"] == {"ape": "copy of seed 1", **others}
    assert [p.parent.name for p in (out / "decode-cost-runs").glob("*/seed*")] == ["ape"]
    assert "model of seed 1 (disan, dpe, " in (out / "report.md").read_text()
    assert "copy of seed 1 (ape); a copy is that run trained again" in (out / "report.md").read_text()


def test_a_copy_without_its_model_is_forgotten_so_that_it_trains_again(tmp_path, monkeypatch):
    """A copy restored from an archive (done, no checkpoint) before its timing was made is trained again; a copy
    with its model, or one still training, stays."""
    import xlpe.nn.checkpoint as checkpoint
    from xlpe.experiments.recipes.compare import _forget_lost_copies
    monkeypatch.setattr(checkpoint, "latest_checkpoint", lambda d: next(iter(Path(d).glob("checkpoint_*.pt")), None))
    for name, files in (("ape", ["done.json"]), ("rpe", ["done.json", "train/checkpoint_9.pt"]),
                        ("disan", ["train/checkpoint_4.pt"])):
        for f in files:
            (tmp_path / name / "seed1" / f).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / "seed1" / f).write_text("x")
    _forget_lost_copies(tmp_path, ["ape", "rpe", "disan"], 1)
    assert [n for n in ("ape", "rpe", "disan") if (tmp_path / n / "seed1").exists()] == ["rpe", "disan"]


@pytest.mark.parametrize("sets, msg", [
    (["experiment.systems=['rpe']"], "must include 'ape'"),
    (["experiment.systems=['ape', 'ape']"], "listed twice"),
    (["experiment.systems=['ape', 'magic']"], "unknown system"),
    (["experiment.colour='red'"], r"unknown key\(s\) \['colour'\]"),
    (["experiment.pe_options={disan_layerz=1}"], "disan_layerz"),
])
def test_bad_configs_fail_early(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, ["data.builtin='sov'", "train.max_updates=3"] + sets)


@pytest.mark.parametrize("budget", [{"schedule": "linear", "max_updates": 1460},
                                    {"schedule": "linear_time", "max_time_minutes": 20.0}])
def test_cost_rounds_train_where_a_budget_schedule_cannot(budget):
    """The cost rounds end after a few updates, within the warm-up and without the time budget: a schedule that
    decays over the budget is held at its peak there (the learning rate changes no update's cost)."""
    train = {"lr": 0.002, "warmup": 400, "save_every": 500, **budget}
    with pytest.raises(ConfigError, match="linear"):
        TrainConfig(**{**train, "max_updates": 10, "max_time_minutes": 0.0}).schedule_obj()
    opts = measured_train(train)
    assert opts == {"lr": 0.002, "warmup": 400, "schedule": "constant"}
    assert TrainConfig(**opts, max_updates=10).schedule_obj().lr_at(500) == 0.002
    assert measured_train({"schedule": "inverse_sqrt", "warmup": 4}) == {"schedule": "inverse_sqrt", "warmup": 4}
