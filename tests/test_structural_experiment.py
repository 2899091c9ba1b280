"""`xlpe experiment structural-pe` on a tiny built-in pair: the ablation table, the Table 2 comparison rows, the
composition with XL PE, caching, and early config errors."""

import json

import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.structural_pe import load_config

TINY = """
[data]
builtin = "sov"
builtin_sizes = [240, 20, 20]
[experiment]
seeds = [1]
systems = ["abs-seq", "abs-seq+both-stru", "rel-seq", "rel-seq+both-stru"]
compose = ["headxl+both-stru"]
vocab_size = 300
preorder_iterations = 1
preorder = { learner = "perceptron", loss = "tau=1" }   # the XL system's preorderer, as xl-pe would build it
preorder_attach_null = "free"
beam = 2
bootstrap_samples = 30
pe_options = { struct_k = 4 }
cost_rounds = 1
cost_updates = 2
[model]
preset = "tiny"
d_model = 16
n_heads = 2
d_ff = 32
enc_layers = 1
dec_layers = 1
[train]
max_updates = 2
max_tokens = 300
warmup = 2
validate_every = 1
"""


def test_structural_recipe_end_to_end(tmp_path, capsys):
    pytest.importorskip("eflomal")                  # the composition with XL PE aligns the training data
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    assert main(["experiment", "structural-pe", "--config", str(cfg), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    s = res["summary"]
    assert set(res["runs"]) == {f"{n}/seed1" for n in ("abs-seq", "abs-seq+both-stru", "rel-seq",
                                                       "rel-seq+both-stru", "headxl+both-stru")}
    assert s["rel-seq+both-stru"]["compared_with"] == "rel-seq"           # the Table 2 analogue
    assert s["abs-seq+both-stru"]["compared_with"] == "abs-seq"
    assert res["runs"]["headxl+both-stru/seed1"]["pe"] == ["ape", "headxl", "struct_abs", "struct_rel"]
    assert s["abs-seq+both-stru"]["params"] > s["abs-seq"]["params"]
    report = (out / "report.md").read_text()
    assert "the generator's gold trees" in report and "+HeadXL +abs-stru +rel-stru" in report
    assert "decoding sent/s vs abs-seq" in report and "Cost of structural PE over abs+rel-seq" in report
    assert set(res["decode_cost"]["systems"]) == set(res["cost"]["systems"]) >= {"abs-seq", "rel-seq+both-stru"}
    assert "no claim about training variance" in report and (out / "plots" / "table1.png").exists()
    assert "## Dev learning curve of the baseline (abs-seq)" in report and "| 2 | 1 |" in report
    assert "## Dev scores of every system (last validation)" in report
    assert "| +HeadXL +abs-stru +rel-stru | 2 | 1 |" in report
    btg = json.loads((out / "preorder" / "model" / "model.json").read_text())["config"]
    assert (btg["learner"], btg["loss"]) == ("perceptron", "tau=1")     # [experiment] preorder reached the stage
    assert json.loads((out / "preorder" / "started.json").read_text())["params"]["attach_null"] == "free"
    assert json.loads((out / "align" / "started.json").read_text())["params"]["lower"] is True   # as xl-pe aligns
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")}
    assert main(["experiment", "structural-pe", "--config", str(cfg), "--out", str(out)]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")} == stamps     # cached

    # archive the finished folder and restore it on "another machine": the recipe trains nothing there, and its
    # report has the same numbers, decoding cost included (recorded under the archived checkpoints' signatures)
    arch, moved = tmp_path / "archive", tmp_path / "elsewhere"
    assert main(["experiment", "archive", str(out), "--to", str(arch)]) == 0
    printed = capsys.readouterr().out
    assert "left out synth: holds files of a kind an archive does not keep" in printed     # the corpus's own text
    assert not list(arch.rglob("*.pt")) and (arch / "runs" / "abs-seq" / "seed1.tar.xz").is_file()
    assert main(["experiment", "archive", str(out), "--to", str(arch)]) == 0
    assert " 0 stages written" in capsys.readouterr().out                                     # nothing changed
    import shutil
    shutil.rmtree(out)                                                  # "another machine": the old folder is gone
    assert main(["experiment", "restore", str(arch), "--into", str(moved)]) == 0
    assert main(["experiment", "structural-pe", "--config", str(cfg), "--out", str(moved)]) == 0
    assert not list((moved / "runs").rglob("*.pt"))                                            # nothing trained
    again = json.loads((moved / "results.json").read_text())["results"]
    assert again["summary"] == s and again["decode_cost"]["systems"] == res["decode_cost"]["systems"]
    assert all(str(moved) in t["hyp"] for r in again["runs"].values() for t in r["tests"].values())


@pytest.mark.parametrize("sets, msg", [
    (["experiment.systems=['rel-seq']"], "must include 'abs-seq'"),
    (["experiment.systems=['abs-seq', 'struct+magic']"], "unknown system"),
    (["experiment.colour='red'"], r"unknown key\(s\) \['colour'\]"),
    (["experiment.preorder_attach_null='free'"], "needs a tau-only loss"),
    (["experiment.preorder={colour='red'}"], r"unknown BTG option\(s\) \['colour'\]"),
    (["experiment.preorder_level='char'"], "preorder_level must be"),
])
def test_bad_configs_fail_early(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, ["data.builtin='sov'", "train.max_updates=3"] + sets)
