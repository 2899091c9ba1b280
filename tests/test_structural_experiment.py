"""`xlpe experiment structural-pe` on a tiny built-in pair: the ablation table, the Table 2 comparison rows, the
composition with XL PE, caching, and early config errors."""

import json
from pathlib import Path

import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.recipes.structural_pe import load_config

TINY = (Path(__file__).with_name("recipe_configs") / "structural-pe.toml").read_text()


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
    assert "\n  - chrF: " in report                # every claim gives chrF's verdict beneath BLEU's
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


def test_an_extra_test_set_is_translated_by_runs_taken_from_another_folder(tmp_path):
    """``data.extra_tests`` with given trees: a second folder that adds a test set takes the first folder's trained
    runs (``reuse_runs``), trains nothing, and scores the extra set; a copy of the test set scores as the test set."""
    import shutil
    first = TINY.replace('compose = ["headxl+both-stru"]', "compose = []").replace(
        'systems = ["abs-seq", "abs-seq+both-stru", "rel-seq", "rel-seq+both-stru"]',
        'systems = ["abs-seq", "abs-seq+both-stru"]').replace("cost_rounds = 1", "cost_rounds = 0")
    cfg = tmp_path / "c.toml"
    cfg.write_text(first)
    one, two = tmp_path / "one", tmp_path / "two"
    assert main(["experiment", "structural-pe", "--config", str(cfg), "--out", str(one)]) == 0
    test = {k: one / "synth" / f"test.{k}" for k in ("src", "tgt", "conllu")}
    for k, p in test.items():                                       # the test set again, under another name
        shutil.copy(p, tmp_path / f"again.{k}")
    extra = f'again = ["{tmp_path}/again.src", "{tmp_path}/again.tgt", "{tmp_path}/again.conllu"]'
    cfg.write_text(first.replace('builtin_sizes = [240, 20, 20]\n',
                                 f'builtin_sizes = [240, 20, 20]\nextra_tests = {{ {extra} }}\n')
                   .replace("[model]", f'reuse_runs = ["{one}"]\n[model]'))
    assert main(["experiment", "structural-pe", "--config", str(cfg), "--out", str(two)]) == 0
    a = json.loads((one / "results.json").read_text())["results"]
    b = json.loads((two / "results.json").read_text())["results"]
    for run, r in b["runs"].items():
        assert r["tests"]["test"]["bleu"] == a["runs"][run]["tests"]["test"]["bleu"]     # the same models
        assert r["tests"]["again"]["bleu"] == r["tests"]["test"]["bleu"]
        assert (two / "runs" / run / "train" / "train_log.csv").read_text() == (
            one / "runs" / run / "train" / "train_log.csv").read_text()                  # adopted, not trained
    assert set(b["summary"]["abs-seq+both-stru"]["tests"]) == {"test", "again"}
    report = (two / "report.md").read_text()
    assert "## The same systems on the extra test set `again`" in report and "(again):" in report


@pytest.mark.parametrize("extra, msg", [
    ('{ test = ["a", "b"] }', "not a usable test set name"),
    ('{ t2 = ["only-one"] }', r"expected \[source, reference\] or \[source, reference, trees\]"),
    ('{ t2 = ["/no/such.src", "/no/such.tgt"] }', "does not exist"),
])
def test_bad_extra_tests_fail_early(extra, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, ["data.builtin='sov'", "train.max_updates=3", f"data.extra_tests={extra}"])


def test_the_dpe_recipe_refuses_extra_test_sets():
    from xlpe.experiments.recipes.dpe import load_config as dpe_config
    with pytest.raises(ConfigError, match="translates no extra test set"):
        dpe_config(None, ["data.builtin='sov'", "train.max_updates=3", 'data.extra_tests={ t2 = ["a", "b"] }'])
