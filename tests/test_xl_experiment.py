"""`xlpe experiment xl-pe` on a tiny built-in pair: every table is produced, reruns are cached, bad configs fail
early."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.recipes.xl_pe import XLConfig, load_config

TINY = (Path(__file__).with_name("recipe_configs") / "xl-pe.toml").read_text()


def test_recipe_produces_every_table_and_reruns_from_cache(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out)]) == 0
    report = (out / "report.md").read_text()
    for title in ("Table 1", "Figure 3", "Table 3", "Table 4", "Figure 4"):
        assert title in report
    res = json.loads((out / "results.json").read_text())
    runs = res["results"]["runs"]
    # tau=1 is the Table 1 HeadXL system (tiny: 2 heads, tau_ratio 0.25 -> 1), so Figure 3 reuses it
    assert set(runs) == {f"{n}/seed1" for n in ("baseline", "inxl", "headxl", "headxl-tau2", "headxl-noise0.2",
                                                 "ef-none", "ef-inxl")}
    assert runs["headxl-tau2/seed1"]["pe_options"] == {"tau": 2}
    assert runs["ef-inxl/seed1"]["encoder_free"] and runs["inxl/seed1"]["params"] > runs["baseline/seed1"]["params"]
    al = runs["headxl/seed1"]["attention_alignment"]
    assert 0 <= al["aer"] <= 1 and "attention_alignment" not in runs["inxl/seed1"]
    assert "±" not in report          # one seed: values, not a std of 0.00
    # seed-aware significance: with one seed the report says no claim about training variance can be made
    assert "seed-aware paired bootstrap" in report and "one seed: no claim about training variance" in report
    assert "\n  - chrF: " in report.split("Claims (bold above")[1]      # chrF's verdict beneath each BLEU claim
    assert "compare_bleu" in res["results"]["summary"]["systems"]["inxl"]["tests"]["test"]
    assert res["results"]["summary"]["systems"]["headxl"]["alignment"]["compare"]["metric"] == "AER"
    assert "AER claims" in report
    # Table 3's reference row: the position-only diagonal alignment of the same gold set
    dg = res["results"]["diagonal_alignment"]
    assert dg["sentences"] == 20 and 0 < dg["aer"] < 1
    assert f"| reference: diagonal (position only, no model) | {100 * dg['aer']:.2f} |" in report
    assert (out / "plots" / "fig3_tau.png").exists() and (out / "plots" / "fig4_noise.png").exists()
    # the preorderer works on subwords by default (SPEC §4.1): one order index per piece of the joint model
    assert res["results"]["preorder"]["level"] == "subword" and "works on subwords" in report
    from xlpe.data.subword import SubwordModel
    sp = SubwordModel.load(next(out.glob("subword/spm.model")))
    src0 = (out / "synth" / "test.src").read_text().splitlines()[0]
    order0 = (out / "preorder" / "test.order").read_text().splitlines()[0].split()
    assert len(order0) == len(sp.encode(src0.split()).ids)
    # Table 1's cost column: the Table 1 systems trained in interleaved rounds, ratios to the baseline's
    cost = res["results"]["cost"]
    assert cost["reference"] == "baseline" and set(cost["systems"]) == {"baseline", "inxl", "headxl"}
    assert cost["systems"]["baseline"]["relative_speed_per_round"] == [1.0, 1.0]
    for v in cost["systems"].values():
        assert len(v["tokens_per_s"]) == 2 and all(t > 0 for t in v["tokens_per_s"])
    assert res["results"]["summary"]["systems"]["inxl"]["speed_vs_baseline"] == \
        cost["systems"]["inxl"]["relative_speed"]
    assert "2 interleaved rounds" in report
    per_round = cost["systems"]["inxl"]["relative_speed_per_round"]
    lo, hi = min(per_round), max(per_round)
    assert res["results"]["summary"]["systems"]["inxl"]["speed_vs_baseline_range"] == [lo, hi]
    assert f"({lo:.2f}–{hi:.2f}) |" in next(line for line in report.splitlines() if line.startswith("| +InXL"))
    # the recipe's own batches and optimiser settings, only the stopping rule is the stage's
    cost_train = json.loads((out / "cost" / "inxl" / "run.json").read_text())[-1]["train"]
    assert cost_train["max_tokens"] == 300 and cost_train["warmup"] == 2 and cost_train["max_updates"] == 6
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")}
    cost_stamp = (out / "cost" / "done.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out),
                 "--set", "experiment.bootstrap_samples=60", "--set", "experiment.threads=2"]) == 0
    # neither the report's bootstrap nor the thread count retrains anything; the speed is measured again
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")} == stamps
    assert (out / "cost" / "done.json").stat().st_mtime_ns != cost_stamp
    # another seed alone (one per sitting) shares the data, subwords, alignments and preorderer of the first
    shared = {p: p.stat().st_mtime_ns for p in out.glob("*/done.json") if not p.parent.name.startswith("cost")}
    assert {p.parent.name for p in shared} == {"synth", "subword", "align", "preorder"}   # built-in data: synth
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out), "--only", "table1",
                 "--set", "experiment.seeds=[2]", "--set", "experiment.systems=['baseline']",
                 "--set", "experiment.alignment_systems=[]"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.glob("*/done.json") if not p.parent.name.startswith("cost")} == shared
    base2 = out / "runs" / "baseline" / "seed2" / "done.json"
    assert base2.exists()
    # the other preorder level: new orders, so the XL runs train again; the baseline reads no orders and is kept
    stamp = base2.stat().st_mtime_ns
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out), "--only", "table1",
                 "--set", "experiment.seeds=[2]", "--set", "experiment.systems=['baseline', 'inxl']",
                 "--set", "experiment.alignment_systems=[]", "--set", "experiment.preorder_level='word'"]) == 0
    assert base2.stat().st_mtime_ns == stamp and not list((out / "runs" / "baseline").glob("seed2.stale-*"))
    assert (out / "preorder" / "done.json").stat().st_mtime_ns != shared[out / "preorder" / "done.json"]
    assert json.loads((out / "runs" / "inxl" / "seed2" / "done.json").read_text())["params"]["train_orders"]


@pytest.mark.parametrize("sets, msg", [
    (["experiment.systems=['baseline', 'bogus']"], "unknown system 'bogus'"),
    (["experiment.encoder_free=['rpe']"], "rpe is not defined without an encoder"),
    (["experiment.systems=['inxl']"], "must include 'baseline'"),
    (["experiment.xl_train_source='gold'"], "predicted' or 'oracle"),
    (["experiment.pe_options={rpe_k=3}"], "pe_options"),
    (["experiment.preorder_attach_null='left'"], "'right' or 'free'"),
    (["experiment.preorder_attach_null='free'"], "tau-only loss"),
    (["experiment.colour='red'"], r"unknown key\(s\) \['colour'\]"),
    (["experiment.noise_system='rpe'"], "reads none"),               # noise on a system without XL positions
    (["experiment.noise_unit='some'"], "noise_unit must be"),
    (["experiment.preorder_level='char'"], "preorder_level must be"),
    (["data.train_src='/nonexistent'", "data.train_tgt='/nonexistent'", "data.test_src='x'",
      "data.test_tgt='x'"], "does not exist"),
])
def test_bad_configs_fail_before_any_work(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, ["data.builtin='sov'", "train.max_updates=3"] + sets if "data.train_src" not in sets[0]
                    else ["train.max_updates=3"] + sets)


def test_budget_is_required():
    with pytest.raises(ConfigError, match="needs a budget"):
        XLConfig.from_dict({"data": {"builtin": "sov"}, "train": {"lr": 1e-3}})


@pytest.mark.parametrize("attach", ["right", "free"])
def test_preorder_attach_null_reaches_the_training_labels(tmp_path, monkeypatch, attach):
    from xlpe.reorder.btg import BTGPreorderer
    seen = []
    orig = BTGPreorderer.train

    def spy(self, sents, ranks, **kw):
        seen.extend(ranks)
        return orig(self, sents, ranks, **kw)

    monkeypatch.setattr(BTGPreorderer, "train", spy)
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out), "--only", "table1",
                 "--set", "experiment.systems=['baseline']", "--set", "experiment.alignment_systems=[]",
                 "--set", f"experiment.preorder_attach_null='{attach}'",
                 "--set", "experiment.preorder={loss='tau=1'}"]) == 0
    unranked = sum(r.count(-1) for r in seen)
    assert (unranked > 0) == (attach == "free")
    oracle = (out / "preorder" / "train.oracle.order").read_text().split("\n")
    assert all(sorted(map(int, l.split())) == list(range(len(l.split()))) for l in oracle if l)   # permutations


def test_training_pairs_sharing_either_side_with_the_gold_set_are_removed(tmp_path):
    from xlpe.experiments.engine.stages import data_stage
    files = {"train.en": ["a b", "c d", "e f", "g h"], "train.de": ["A B", "C D", "X Y", "G H"],
             "gold.en": ["c d", "z z"], "gold.de": ["Q Q", "X Y"], "gold.talp": ["1-1", "1-1"]}
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    t = str(tmp_path)
    cfg = XLConfig.from_dict({"data": {"train_src": f"{t}/train.en", "train_tgt": f"{t}/train.de",
                                       "test_src": f"{t}/gold.en", "test_tgt": f"{t}/gold.de",
                                       "gold_src": f"{t}/gold.en", "gold_tgt": f"{t}/gold.de",
                                       "gold_align": f"{t}/gold.talp"}, "train": {"max_updates": 1}})
    data = data_stage(tmp_path / "out", cfg.data)
    assert data["excluded"] == 2          # "c d" (source in gold), "X Y" (target in gold)
    assert open(data["paths"]["train_src"]).read().split("\n")[:-1] == ["a b", "g h"]
    assert open(data["paths"]["train_tgt"]).read().split("\n")[:-1] == ["A B", "G H"]


def test_removing_gold_pairs_keeps_the_training_links_and_trees_line_aligned(tmp_path):
    """Given training alignments and trees, exclude_gold removes the same lines from them as from the text: the
    kept pairs keep their own links and trees (a shift would pair a sentence with another's tree); a trees file
    that does not match the text is refused."""
    from xlpe.experiments.engine.stages import data_stage
    from xlpe.io.conllu import DepTree, read_conllu, write_conllu
    files = {"train.en": ["a b", "c d", "e f", "g h"], "train.de": ["A B", "C D", "X Y", "G H"],
             "train.align": ["0-0", "1-1", "0-1", "1-0"],
             "gold.en": ["c d", "z z"], "gold.de": ["Q Q", "X Y"], "gold.talp": ["1-1", "1-1"]}
    for name, lines in files.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    trees = [DepTree(s.split(" "), [0, 1] if k % 2 == 0 else [2, 0]) for k, s in enumerate(files["train.en"])]
    write_conllu(tmp_path / "train.conllu", trees)
    t = str(tmp_path)
    data = {"train_src": f"{t}/train.en", "train_tgt": f"{t}/train.de", "train_align": f"{t}/train.align",
            "train_trees": f"{t}/train.conllu", "test_src": f"{t}/gold.en", "test_tgt": f"{t}/gold.de",
            "gold_src": f"{t}/gold.en", "gold_tgt": f"{t}/gold.de", "gold_align": f"{t}/gold.talp"}
    res = data_stage(tmp_path / "out", XLConfig.from_dict({"data": data, "train": {"max_updates": 1}}).data)
    assert res["excluded"] == 2                                     # lines 2 and 3 go
    assert open(res["train_align"]).read().split("\n")[:-1] == ["0-0", "1-0"]
    kept = list(read_conllu(res["paths"]["train_trees"]))
    assert [(tr.words, tr.heads) for tr in kept] == [(["a", "b"], [0, 1]), (["g", "h"], [2, 0])]
    write_conllu(tmp_path / "train.conllu", trees[:3])
    with pytest.raises(ConfigError, match="has 3 trees for 4 training lines"):
        data_stage(tmp_path / "out2", XLConfig.from_dict({"data": data, "train": {"max_updates": 1}}).data)


def test_report_cells_show_a_spread_only_over_several_seeds():
    from xlpe.experiments.engine.summary import fmt as _fmt
    assert _fmt((0.7057, 0.0), 1, 100) == "70.57"
    assert _fmt((30.03, 0.92), 3) == "30.03 ± 0.92"


def test_report_p_cells_are_bold_only_when_both_tests_pass_and_claims_give_both_metrics():
    from xlpe.experiments.engine.summary import claim_lines, p_cell
    assert p_cell(None) == "—"
    assert p_cell({"p_bootstrap": 0.001, "p_seeds": 0.049}) == "**0.001 / 0.049**"
    assert p_cell({"p_bootstrap": 0.001, "p_seeds": 0.051}) == "0.001 / 0.051"
    assert p_cell({"p_bootstrap": 0.06, "p_seeds": 0.001}) == "0.060 / 0.001"
    assert p_cell({"p_bootstrap": 0.001, "p_seeds": None}) == "0.001 / n/a (1 seed)"     # one seed: never bold
    # seeds that do not vary (copies of one output): no t-test, and the cell says why
    assert p_cell({"p_bootstrap": 0.001, "p_seeds": None, "base_seeds": 3, "sys_seeds": 3}) == \
        "0.001 / n/a (no seed variance)"
    t = {"verdict_bleu": "not significant (BLEU …)", "verdict_chrf": "significantly worse (chrF …)"}
    assert claim_lines("+X vs baseline", t) == ["- +X vs baseline: not significant (BLEU …)",
                                                "  - chrF: significantly worse (chrF …)"]
    assert claim_lines("+X vs baseline", {"verdict_bleu": "v"}) == ["- +X vs baseline: v"]


def test_dev_curves_are_read_from_the_logs_and_averaged_over_seeds(tmp_path):
    from xlpe.experiments.engine.runs import dev_curve
    from xlpe.experiments.engine.summary import dev_curve_lines, system_summary
    runs = {}
    for seed, rows in ((1, ["400,2,6.0,5.5,245,1.0,6.0,9", "800,4,5.0,4.5,90,3.0,5.0,19",
                            "800,4,4.0,3.5,33,5.0,4.0,20"]),            # resumed: step 800 logged again
                       (2, ["400,2,7.0,6.5,665,2.0,7.0,9"])):
        d = tmp_path / f"s{seed}"
        d.mkdir()
        (d / "valid_log.csv").write_text("step,epoch,valid_loss,valid_nll,valid_ppl,valid_bleu,best,wall_time\n"
                                         + "\n".join(rows) + "\n")
        runs[f"base/seed{seed}"] = {"seed": seed, "params": 1, "pe": ["ape"], "updates": 800, "tests": {},
                                    "dev_curve": dev_curve(d)}
    assert runs["base/seed1"]["dev_curve"] == [
        {"step": 400, "valid_loss": 6.0, "valid_nll": 5.5, "valid_bleu": 1.0},
        {"step": 800, "valid_loss": 4.0, "valid_nll": 3.5, "valid_bleu": 5.0}]
    assert dev_curve(tmp_path) == []                              # no dev set, no curve
    s = system_summary(runs, "base", None, {}, seeds=[1, 2], resamples=10)
    assert s["dev_curve"][0] == {"step": 400, "seeds": 2, "valid_loss": pytest.approx((6.5, 0.7071), abs=1e-4),
                                 "valid_nll": pytest.approx((6.0, 0.7071), abs=1e-4),
                                 "valid_bleu": pytest.approx((1.5, 0.7071), abs=1e-4)}
    lines = dev_curve_lines(s, "the baseline")
    assert lines[1] == "## Dev learning curve of the baseline"
    assert lines[-2:] == ["| 400 | 2 | 6.500 ± 0.707 | 6.000 ± 0.707 | 1.50 ± 0.71 |",
                          "| 800 | 1 | 4.000 | 3.500 | 5.00 |"]


def test_dev_scores_table_lists_every_system_that_validated_at_its_last_validation():
    from xlpe.experiments.engine.summary import dev_scores_lines
    point = {"step": 800, "seeds": 3, "valid_loss": (4.0, 0.1), "valid_nll": (3.5, 0.05)}
    lines = dev_scores_lines({"base": {"dev_curve": [{**point, "step": 400}, point]}, "nodev": {},
                              "xl": {"dev_curve": [{**point, "valid_nll": (3.25, 0.0)}]}},
                             {"base": "baseline (APE)"})
    assert lines[1] == "## Dev scores of every system (last validation)"
    assert lines[3] == "| system | updates | seeds | dev loss | dev NLL |"      # no BLEU column: none logged
    assert lines[-2:] == ["| baseline (APE) | 800 | 3 | 4.000 ± 0.100 | 3.500 ± 0.050 |",
                          "| xl | 800 | 3 | 4.000 ± 0.100 | 3.250 ± 0.000 |"]
    assert dev_scores_lines({"nodev": {}}, {}) == []


def test_gold_dev_part_for_choices_and_the_rest_for_reporting(tmp_path, capsys):
    """A documented gold split (dev/test discipline): the first N gold sentences are the dev part, the rest is
    the reported gold and test set, and the whole set is reported apart, marked as including the dev part."""
    from xlpe.data.synthetic import SyntheticConfig, synth
    pytest.importorskip("eflomal")
    d = tmp_path / "data"
    synth(d, SyntheticConfig(profile="sov", seed=3), sizes={"train": 240, "test": 20})
    cfg = tmp_path / "c.toml"
    body = TINY.split("[experiment]")[1].replace('systems = ["baseline", "inxl", "headxl"]', 'systems = ["baseline"]')
    chosen = ('{ "train.max_updates" = "a tiny budget for the test", '
              '"experiment.preorder_iterations" = "gold dev part" }')
    cfg.write_text(f"""[data]
train_src = "{d}/train.src"
train_tgt = "{d}/train.tgt"
test_src = "{d}/test.src"
test_tgt = "{d}/test.tgt"
gold_src = "{d}/test.src"
gold_tgt = "{d}/test.tgt"
gold_align = "{d}/test.align"
gold_base = 0
gold_dev_lines = 5
[experiment]
chosen_on = {chosen}""" + body)
    out = tmp_path / "out"
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out), "--only", "table1", "table3",
                 "--set", "experiment.alignment_systems=['baseline']", "--set", "train.validate_every=1",
                 "--set", "train.dev_bleu=true"]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    assert res["data"]["gold_split"] == {"dev": [1, 5], "reported": [6, 20], "all": 20}
    src = (d / "test.src").read_text().splitlines()
    assert (out / "data" / "gold.src").read_text().splitlines() == src[5:]          # reported part
    assert (out / "data" / "gold_dev.src").read_text().splitlines() == src[:5]
    run = res["runs"]["baseline/seed1"]
    assert run["attention_alignment"]["sentences"] == 15
    assert run["attention_alignment_more"]["all-gold"]["sentences"] == 20
    assert set(run["tests"]) == {"test", "all-gold"}
    report = (out / "report.md").read_text()
    assert "gold sentences 6–20 (1–5 are the dev part" in report
    assert "all 20 gold sentences, dev part included" in report and "all gold (incl. dev part) BLEU" in report
    assert "## Choices and the data they were made on" in report and "`train.max_updates`: a tiny budget" in report
    # a learning curve on the dev part (validations every update), what a budget is chosen on
    assert [p["step"] for p in run["dev_curve"]] == [1, 2, 3] and "valid_bleu" in run["dev_curve"][0]
    assert "## Dev learning curve of the baseline (APE)" in report and "| 3 | 1 |" in report
    # the preorderer is scored on the dev part too, where its settings are chosen
    assert set(res["preorder"]) >= {"dev_btg", "gold_btg", "extra-all-gold_btg"}
    assert "preorderer on the gold set's dev part (sentences 1–5, for choices)" in report
    # --only preorder: that stage alone (no NMT run), its report naming the dev part's τ and the choices
    out2 = tmp_path / "out2"
    assert main(["experiment", "xl-pe", "--config", str(cfg), "--out", str(out2), "--only", "preorder"]) == 0
    pre_only = (out2 / "report.md").read_text()
    assert not (out2 / "runs").exists() and "the preorder stage only" in pre_only
    dev_tau = json.loads((out2 / "results.json").read_text())["results"]["preorder"]["dev_btg"]["tau"]
    assert f"(sentences 1–5, for choices), against gold-alignment ranks: τ {dev_tau:.4f}" in pre_only
    assert "`experiment.preorder_iterations`: gold dev part" in pre_only
    with pytest.raises(ConfigError, match="chosen_on names 'train.max_epochs'"):
        load_config(str(cfg), ["experiment.chosen_on={'train.max_epochs'='x'}"])


def test_reports_name_the_parts_of_a_split_gold_set():
    from xlpe.experiments.engine.summary import gold_split_lines
    assert gold_split_lines({"gold_split": {"dev": [1, 150], "reported": [151, 508], "all": 508}}) == [
        "- test set: gold sentences 151–508 (the reported part of all 508); dev set: gold sentences 1–150 "
        "(validation and every choice; never reported as a result)"]
    assert gold_split_lines({"gold_split": {}}) == gold_split_lines({}) == []


def test_report_header_names_the_t_test_each_comparison_uses():
    """Same seeds make the t-test paired, different seeds Welch's: the header does not call a paired test Welch's."""
    from xlpe.experiments.recipes.xl_pe_report import _header_lines
    cfg = load_config(None, ["data.builtin='sov'", "train.max_updates=3"])
    header = " ".join(_header_lines(cfg, {"data": {}, "preorder": {"level": "subword"}}))
    assert "a t-test over the per-seed scores, paired when both systems ran the same seeds" in header
    assert "Welch's otherwise" in header and "Welch's t-test over the per-seed scores (paired" not in header
