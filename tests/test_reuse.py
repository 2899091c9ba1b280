"""experiment.reuse_runs: a run whose training is the same as a finished run of another recipe folder adopts it
(no training), gives the same results, and records where it came from; any difference in what decides training
(options, data content, seed) means training anew; speed and logging options and file paths do not count."""

import json
import shutil

import pytest

from xlpe.cli import main
from xlpe.experiments.engine.reuse import training_signature

from test_dpe_experiment import TINY


def _run(tmp_path, name, *sets):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / name
    args = ["experiment", "dpe", "--config", str(cfg), "--out", str(out), "--only", "table3",
            "--set", "experiment.cost_rounds=0"]
    for s in sets:
        args += ["--set", s]
    assert main(args) == 0
    return out, json.loads((out / "results.json").read_text())["results"]["runs"]


def test_a_run_with_the_same_training_is_adopted(tmp_path, caplog):
    a, runs_a = _run(tmp_path, "a")
    before = {f: f.read_bytes() for f in (a / "runs").rglob("train/*") if f.is_file()}
    b, runs_b = _run(tmp_path, "b", f"experiment.reuse_runs=['{a}']", "experiment.threads=2")
    assert {f: f.read_bytes() for f in before} == before                  # the source folder is left as it was
    for k in ("baseline/seed1", "dpe/seed1"):
        assert runs_b[k]["reused"] == str(a / "runs" / k / "train")
        assert runs_b[k]["tests"]["test"]["bleu"] == runs_a[k]["tests"]["test"]["bleu"]
        assert runs_b[k]["updates"] == 2
        log_a, log_b = (d / "runs" / k / "train" / "train_log.csv" for d in (a, b))
        assert log_b.read_text() == log_a.read_text()                 # adopted, not trained again
    # another budget, another seed: trained anew
    c, runs_c = _run(tmp_path, "c", f"experiment.reuse_runs=['{a}', '{tmp_path / 'missing'}']",
                     "train.max_updates=3", "experiment.seeds=[2]")
    assert "reused" not in runs_c["baseline/seed2"] and runs_c["baseline/seed2"]["updates"] == 3
    assert "missing has no runs/ folder (yet): nothing to reuse from it" in caplog.text
    assert "reused" not in runs_a["baseline/seed1"]


def test_training_signature(tmp_path):
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("a b\n")
    tgt.write_text("x y\n")
    model, train = {"d_model": 8}, {"lr": 1e-3, "seed": 1, "out": "x", "threads": 1}
    data = {"train_src": str(src), "train_tgt": str(tgt), "train_channels": {"xl": f"orders:{src}"}}
    sig = training_signature(model, train, data)
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(src, moved / "s.txt")
    assert training_signature(model, {**train, "out": "y", "threads": 2},
                              {**data, "train_src": str(moved / "s.txt")}) == sig     # paths and speed do not count
    assert training_signature(model, {**train, "lr": 2e-3}, data) != sig
    assert training_signature(model, {**train, "seed": 2}, data) != sig
    assert training_signature({"d_model": 16}, train, data) != sig
    (moved / "s.txt").write_text("a c\n")
    assert training_signature(model, train, {**data, "train_src": str(moved / "s.txt")}) != sig   # content counts
    assert training_signature(model, train, {**data, "train_channels": {"xl": f"orders:{moved / 's.txt'}"}}) != sig
    assert training_signature(model, train, {**data, "train_src": str(tmp_path / "missing")}) is None
    # a run from before the `adam` and `bucket_ties` options ran with the for-loop and random ties: it matches
    # those values, not the new defaults
    assert training_signature(model, {**train, "adam": "for-loop", "bucket_ties": False}, data) == sig
    assert training_signature(model, {**train, "adam": "fused", "bucket_ties": False}, data) != sig
    assert training_signature(model, {**train, "adam": "for-loop", "bucket_ties": True}, data) != sig


def test_restored_runs_are_finished_and_give_their_results(tmp_path):
    """A folder restored from `xlpe experiment archive` has its runs without checkpoints: its own recipe trains
    nothing there and reports the same numbers (the DPE probe's included); another recipe whose runs have the same
    training and the same evaluation takes their results; one that evaluates otherwise (another beam) trains."""
    a, runs_a = _run(tmp_path, "a")
    assert main(["experiment", "archive", str(a), "--to", str(tmp_path / "arch")]) == 0
    assert main(["experiment", "restore", str(tmp_path / "arch"), "--into", str(tmp_path / "a2")]) == 0
    a2, runs_a2 = _run(tmp_path, "a2")
    assert not list((a2 / "runs").rglob("*.pt"))                           # nothing trained
    res_a, res_a2 = (json.loads((d / "results.json").read_text())["results"] for d in (a, a2))
    assert res_a2["summary"] == res_a["summary"] and res_a2["probe"] == res_a["probe"] != {}
    assert "tau" in runs_a["dpe/seed1"]["probe"] and "probe" not in runs_a["baseline/seed1"]   # made with the run
    b, runs_b = _run(tmp_path, "b", f"experiment.reuse_runs=['{a2}']")
    assert not list((b / "runs").rglob("*.pt"))                            # results taken, nothing trained
    assert set(runs_b) == set(runs_a) >= {"baseline/seed1", "dpe/seed1"}
    for k in ("baseline/seed1", "dpe/seed1"):
        assert runs_b[k]["reused"] == str(a2 / "runs" / k / "train") and runs_b[k]["reused_results_only"]
        assert runs_b[k]["tests"]["test"]["bleu"] == runs_a[k]["tests"]["test"]["bleu"]
        assert runs_b[k]["tests"]["test"]["hyp"] == str(b / "runs" / k / "test.hyp")
        assert (b / "runs" / k / "test.hyp").read_text() == (a2 / "runs" / k / "test.hyp").read_text()
    c, runs_c = _run(tmp_path, "c", f"experiment.reuse_runs=['{a2}']", "experiment.beam=1")
    assert "reused" not in runs_c["baseline/seed1"]
    assert list((c / "runs" / "baseline" / "seed1" / "train").glob("*.pt"))  # trained here


def test_a_restored_folder_elsewhere_keeps_runs_with_their_own_channels(tmp_path):
    """A system with channels of its own (DPE on eflomal targets beside DPE on gold ones) is keyed by their content,
    not their path: restored into another folder, its runs are cached, as every other run is."""
    pytest.importorskip("eflomal")
    eff = "experiment.eflomal_targets_too=true"
    a, runs_a = _run(tmp_path, "a", eff)
    assert "dpe-eflomal/seed1" in runs_a
    assert main(["experiment", "archive", str(a), "--to", str(tmp_path / "arch")]) == 0
    assert main(["experiment", "restore", str(tmp_path / "arch"), "--into", str(tmp_path / "elsewhere")]) == 0
    b, runs_b = _run(tmp_path, "elsewhere", eff)
    assert not list((b / "runs").rglob("*.pt"))                            # nothing trained
    assert runs_b["dpe-eflomal/seed1"]["tests"]["test"]["bleu"] == runs_a["dpe-eflomal/seed1"]["tests"]["test"]["bleu"]


def test_dpe_takes_its_baseline_from_structural_pe(tmp_path):
    """The Europarl tables' plan (docs/results/runs/tables.sh): dpe's baseline is structural-pe's abs-seq run (the
    same APE model, data, test set and beam; no gold set, no probe), adopted with its checkpoint on the machine that
    trained it, and as results only after an archive and a restore elsewhere."""
    from test_structural_experiment import TINY as STRUCT

    cfg = tmp_path / "s.toml"
    cfg.write_text(STRUCT)
    s = tmp_path / "s"
    assert main(["experiment", "structural-pe", "--config", str(cfg), "--out", str(s),
                 "--set", "experiment.systems=['abs-seq']", "--set", "experiment.compose=[]",
                 "--set", "experiment.pe_options={}", "--set", "experiment.cost_rounds=0"]) == 0
    runs_s = json.loads((s / "results.json").read_text())["results"]["runs"]
    _, runs_d = _run(tmp_path, "d", f"experiment.reuse_runs=['{s}']")
    assert runs_d["baseline/seed1"]["reused"] == str(s / "runs" / "abs-seq" / "seed1" / "train")
    assert runs_d["baseline/seed1"]["tests"]["test"]["bleu"] == runs_s["abs-seq/seed1"]["tests"]["test"]["bleu"]
    assert "reused" not in runs_d["dpe/seed1"]
    assert main(["experiment", "archive", str(s), "--to", str(tmp_path / "arch")]) == 0
    assert main(["experiment", "restore", str(tmp_path / "arch"), "--into", str(tmp_path / "s2")]) == 0
    d2, runs_d2 = _run(tmp_path, "d2", f"experiment.reuse_runs=['{tmp_path / 's2'}']")
    assert runs_d2["baseline/seed1"]["reused_results_only"]
    assert runs_d2["baseline/seed1"]["tests"]["test"]["bleu"] == runs_s["abs-seq/seed1"]["tests"]["test"]["bleu"]
    assert not list((d2 / "runs" / "baseline").rglob("*.pt"))
