"""`xlpe experiment dpe` on a tiny built-in pair (Tables 2-5 analogues, caching, early config errors), the 2PT
reordered-source stage, and the probe of what DPE layers learned."""

import json
from pathlib import Path

import pytest
import torch

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.recipes.dpe import load_config
from xlpe.experiments.recipes.twopass import reordered_stage

from _nmt_toy import tiny_model_config, toy  # noqa: F401  (toy is a fixture)

TINY = (Path(__file__).with_name("recipe_configs") / "dpe.toml").read_text()


def test_dpe_recipe_end_to_end(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY)
    out = tmp_path / "out"
    assert main(["experiment", "dpe", "--config", str(cfg), "--out", str(out)]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    runs, s = res["runs"], res["summary"]
    assert set(runs) == {f"{n}/seed1" for n in ("baseline", "dpe", "dpe-l0", "deeper", "2pt-reorderer", "2pt")}
    # Table 5: the deeper control has exactly the parameters of DPE (N_dpe = 2 more encoder layers)
    assert s["deeper"]["params"] == s["dpe"]["params"] > s["baseline"]["params"]
    # ... and DPE is compared with it directly: the same hypotheses as its comparison with the baseline
    vs = s["dpe"]["vs_deeper"]["compare_bleu"]
    assert vs["base_mean"] == s["deeper"]["tests"]["test"]["bleu"][0]
    assert vs["sys_mean"] == s["dpe"]["tests"]["test"]["bleu"][0]
    # λ = 0: DPE layers trained without the reordering loss (the weight reaches the trainer)
    assert runs["dpe-l0/seed1"]["pe"] == ["dpe"]
    started = json.loads((out / "runs" / "dpe-l0" / "seed1" / "started.json").read_text())
    assert started["params"]["run"]["train"]["aux_weights"] == {"loss_dpe": 0.0}
    # 2PT: the reorderer is 2+2 layers, the translator reads its output and the oracle reordering
    assert set(runs["2pt/seed1"]["tests"]) == {"test", "oracle"}
    assert runs["2pt/seed1"]["tests"]["test"]["hyp"] != runs["2pt/seed1"]["tests"]["oracle"]["hyp"]
    assert "oracle" in s["2pt"] and s["2pt-reorderer"]["tests"]["test"]["bleu"][0] >= 0
    # the probe of the DPE layers on the test set, against the identity order
    for name in ("dpe/seed1", "dpe-l0/seed1"):
        pr = res["probe"][name]
        assert pr["mse"] > 0 and 0 <= pr["tau"] <= 1 and 0 <= pr["tau_identity"] < 1 and pr["sentences"] == 20
    # the cost stages: training and decoding speed of dpe and deeper relative to the baseline, same run
    for stage in ("cost", "decode_cost"):
        assert set(res[stage]["systems"]) == {"baseline", "dpe", "deeper"} and res[stage]["reference"] == "baseline"
        assert res[stage]["systems"]["baseline"]["relative_speed"] == 1.0
        assert all(v["relative_speed"] > 0 for v in res[stage]["systems"].values())
    report = (out / "report.md").read_text()
    for title in ("Decoding speed (sentences/s, beam search) relative to the baseline", "Table 2 analogue",
                  "Table 3 analogue", "Table 4 analogue", "Table 5 analogue", "upper bound: needs the reference",
                  "no claim about training variance"):
        assert title in report
    assert (out / "plots" / "bleu.png").exists()
    assert "## Dev learning curve of the baseline (APE)" in report and "| 2 | 1 |" in report
    assert "- 2PT vs baseline: " in report and "\n  - chrF: " in report
    assert "| +DPE vs the deeper control |" in report and "- +DPE vs baseline +2 encoder layers: " in report
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")}
    assert main(["experiment", "dpe", "--config", str(cfg), "--out", str(out), "--only", "table3"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")} == stamps     # cached


def test_lambda_chosen_on_the_dev_set(tmp_path):
    """lambda_choice = 'dev': the sweep translates the dev set, the best mean dev BLEU picks the dpe system's λ,
    and the report says so."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY.replace("lambdas = [0.0, 0.5]", "lambdas = [0.0, 0.5]\nlambda_choice = 'dev'"))
    out = tmp_path / "out"
    assert main(["experiment", "dpe", "--config", str(cfg), "--out", str(out), "--only", "table3"]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    dev = {float(k): v for k, v in res["lambda_dev_bleu"].items()}
    assert set(dev) == {0.0, 0.5} and res["lambda_chosen"] == max(dev, key=dev.get)
    assert all("dev" in res["runs"][f"dpe-l{lam:g}/seed1"]["tests"] for lam in (0.0, 0.5))
    started = json.loads((out / "runs" / "dpe" / "seed1" / "started.json").read_text())
    assert started["params"]["run"]["train"]["aux_weights"] == {"loss_dpe": res["lambda_chosen"]}
    assert "chosen on the dev set" in (out / "report.md").read_text()
    # the dpe system at the chosen λ is the sweep's run of that λ (same seed and key): linked, not trained again
    chosen = f"dpe-l{res['lambda_chosen']:g}"
    link = out / "runs" / "dpe" / "seed1"
    assert link.is_symlink() and link.resolve() == (out / "runs" / chosen / "seed1").resolve()
    assert res["runs"]["dpe/seed1"]["tests"]["test"] == res["runs"][f"{chosen}/seed1"]["tests"]["test"]
    assert "dpe/seed1" in res["probe"]
    # `xlpe experiment status` of the finished folder: nothing unfinished, the shared run shown as its link
    from xlpe.experiments.engine.status import folder_status
    st = folder_status(out)
    assert st["unfinished"] == 0 and st["link"] == 1
    assert {"name": "runs/dpe/seed1", "state": "link", "target": f"runs/{chosen}/seed1"} in st["stages"]
    assert all(e["update"] == 2 for e in st["stages"] if e["name"].startswith("runs/") and e["state"] == "done")


def test_training_links_never_saw_the_test_pairs(tmp_path):
    """targets = 'eflomal': DPE's training targets come from eflomal over the training pairs alone; the test
    targets of the probe from a run over train + test (the AER protocol). One joint run would make the training
    targets a function of the test references."""
    from xlpe.experiments.engine.cache import file_sig
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY.replace("xl_systems = []", "xl_systems = []\ntargets = 'eflomal'").replace(
        "cost_rounds = 1", "cost_rounds = 0"))
    out = tmp_path / "out"
    assert main(["experiment", "dpe", "--config", str(cfg), "--out", str(out), "--only", "table3"]) == 0

    def params(stage):
        return json.loads((out / stage / "done.json").read_text())["params"]
    assert [f[0] for f in params("align")["files"]] == ["train.src", "train.tgt"]
    assert [f[0] for f in params("align-test")["files"]] == ["train.src", "train.tgt", "test.src", "test.tgt"]
    assert file_sig(out / "align" / "train.align")[0] in params("dpe-train")["files"]
    assert file_sig(out / "align-test" / "test.align")[0] in params("dpe-test")["files"]
    res = json.loads((out / "results.json").read_text())["results"]
    assert res["alignments"] == {"train": str(out / "align" / "train.align"),
                                 "test": str(out / "align-test" / "test.align")}


def test_dpe_against_xl_pe(tmp_path):
    """The comparison none of the papers made: the XL systems read the preorderer's orders (trained on the training
    pairs' eflomal links), train beside DPE on the same data and seeds, and are compared with DPE as well as with
    the baseline. Only the XL systems' cache keys hold the orders, so the other tables reuse their runs."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(TINY.replace("xl_systems = []", "xl_systems = ['headxl']\npreorder_iterations = 1").replace(
        "cost_rounds = 1", "cost_rounds = 0"))
    out = tmp_path / "out"
    assert main(["experiment", "dpe", "--config", str(cfg), "--out", str(out), "--only", "xl"]) == 0
    res = json.loads((out / "results.json").read_text())["results"]
    assert set(res["runs"]) == {"baseline/seed1", "dpe/seed1", "headxl/seed1"}
    assert "headxl" in res["runs"]["headxl/seed1"]["pe"]
    # the orders come from a preorderer trained on the training pairs' own eflomal links, for every split
    assert [f[0] for f in json.loads((out / "align" / "done.json").read_text())["params"]["files"]] == \
        ["train.src", "train.tgt"]
    keys = {n: json.loads((out / "runs" / n / "seed1" / "started.json").read_text())["params"]
            for n in ("baseline", "dpe", "headxl")}
    assert "orders" not in json.dumps(keys["baseline"]) and "orders" not in json.dumps(keys["dpe"])
    assert set(keys["headxl"]["run"]["orders"]) == {"train", "dev", "test"}
    vs = res["summary"]["headxl"]["vs_dpe"]
    assert "compare_bleu" in vs and "verdict_bleu" in vs
    report = (out / "report.md").read_text()
    assert "DPE against XL PE (same data, seeds and budget)" in report and "| XL system vs DPE |" in report
    assert "\n| headxl | " in report
    stamps = {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")}
    assert main(["experiment", "dpe", "--config", str(cfg), "--out", str(out), "--only", "table3"]) == 0
    assert {p: p.stat().st_mtime_ns for p in (out / "runs").rglob("done.json")
            if "headxl" not in str(p)} == {p: t for p, t in stamps.items() if "headxl" not in str(p)}


def test_a_link_to_an_earlier_lambda_choice_is_replaced(tmp_path):
    from xlpe.experiments.recipes.dpe import _share_sweep_runs
    runs = tmp_path / "runs"
    for n in ("dpe-l0.1", "dpe-l0.5"):
        (runs / n / "seed1").mkdir(parents=True)
        (runs / n / "seed1" / "done.json").write_text("{}")
    _share_sweep_runs(runs, "dpe-l0.1", [1, 2])          # seed 2 has no finished sweep run: nothing to link
    assert (runs / "dpe" / "seed1").resolve() == (runs / "dpe-l0.1" / "seed1").resolve()
    assert not (runs / "dpe" / "seed2").exists()
    _share_sweep_runs(runs, "dpe-l0.5", [1])
    assert (runs / "dpe" / "seed1").resolve() == (runs / "dpe-l0.5" / "seed1").resolve()
    assert (runs / "dpe-l0.1" / "seed1" / "done.json").exists()          # the earlier target is untouched


@pytest.mark.parametrize("sets, msg", [
    (["experiment.dpe_lambda=-0.1"], "λ must be >= 0"),
    (["experiment.lambdas=[0.5, -1.0]"], "λ must be >= 0"),
    (["experiment.aux_loss_mode='fairseq'", "experiment.lambdas=[2.0]"], "λ must be <= 1"),
    (["experiment.targets='magic'"], "targets must be one of"),
    (["experiment.twopass_unaligned='move'"], "twopass_unaligned"),
    (["experiment.xl_systems=['baseline']"], "no XL position encoding"),
    (["experiment.dpe_layers=0"], "dpe_layers"),
    (["experiment.lambda_choice='test'"], "lambda_choice"),
    (["experiment.lambda_choice='dev'", "experiment.lambdas=[]"], "needs experiment.lambdas"),
    (["experiment.preorder_attach_null='free'"], "needs a tau-only loss"),
    (["experiment.preorder={colour='red'}"], r"unknown BTG option\(s\) \['colour'\]"),
])
def test_bad_configs_fail_early(sets, msg):
    with pytest.raises(ConfigError, match=msg):
        load_config(None, ["data.builtin='sov'", "train.max_updates=3"] + sets)


def test_gold_targets_need_alignments(tmp_path):
    f = tmp_path / "x.txt"
    f.write_text("a b\n")
    files = [f"data.{k}='{f}'" for k in ("train_src", "train_tgt", "test_src", "test_tgt")]
    with pytest.raises(ConfigError, match="targets = 'eflomal'"):
        load_config(None, files + ["train.max_updates=3"])
    assert load_config(None, files + ["train.max_updates=3", "experiment.targets='eflomal'"])


def test_reordered_stage_drop_and_keep(tmp_path):
    """SPEC §6.5's example: 'on' and 'occasion' are unaligned; drop loses them, keep leaves them after their left
    neighbour; a sentence without links keeps its first word rather than becoming an empty line."""
    src, al = tmp_path / "s.txt", tmp_path / "a.txt"
    src.write_text("mr hän sch represented you on this occasion .\nno links here\n")
    al.write_text("0-0 1-1 2-2 3-5 4-3 6-4 8-6\n\n")
    drop = reordered_stage(tmp_path / "d", {"test": (str(src), str(al))}, unaligned="drop")
    keep = reordered_stage(tmp_path / "k", {"test": (str(src), str(al))}, unaligned="keep")
    assert open(drop["test"]).read().splitlines() == ["mr hän sch you this represented .", "no"]
    assert open(keep["test"]).read().splitlines() == ["mr hän sch you on this occasion represented .",
                                                      "no links here"]
    with pytest.raises(ConfigError, match="unaligned"):
        reordered_stage(tmp_path / "x", {"test": (str(src), str(al))}, unaligned="move")


def test_probe_scores_the_identity_order_and_the_models_own_mse(tmp_path, toy):
    """Targets equal to the source order: the identity scores τ = 1; the MSE is the mean squared distance between
    the DPE layers' output and the model's own sinusoid rows, recomputed here by hand."""
    from xlpe.data.subword import EOS_ID, SubwordModel
    from xlpe.infer.dpe_probe import dpe_order_quality
    from xlpe.nn.positions.dpe import model_sinusoid
    from xlpe.nn.transformer import build_model

    sw = SubwordModel.load(toy["spm"])
    lines = open(toy["dev_src"]).read().splitlines()[:6]
    n = [len(sw.encode(line).ids) for line in lines]
    tfile = tmp_path / "t.dpe"
    tfile.write_text("".join(" ".join(f"{i}-{i}" for i in range(k)) + "\n" for k in n))
    torch.manual_seed(0)
    model = build_model(tiny_model_config(pe=["dpe"], dropout=0.0, src_vocab_size=sw.vocab_size)).eval()
    pr = dpe_order_quality(model, sw, lines, str(tfile))
    assert pr["tau_identity"] == 1.0 and pr["tokens"] == sum(n) and pr["sentences"] == 6
    assert pr["mse_identity"] == 0.0               # PE(i) = PE(p(i)) when the targets are the source order
    sq = 0.0
    with torch.inference_mode():
        for line, k in zip(lines, n):
            ids = torch.tensor([sw.encode(line).ids + [EOS_ID]])
            z = model.encoder(ids).aux["dpe_z"][0, :k]
            sq += float((z - model_sinusoid(torch.arange(k), model.cfg)).pow(2).sum())
    assert pr["mse"] == pytest.approx(sq / (sum(n) * model.cfg.d_model), rel=1e-4)
    with pytest.raises(ConfigError, match="no DPE layers"):
        dpe_order_quality(build_model(tiny_model_config(src_vocab_size=sw.vocab_size)), sw, lines, str(tfile))
