"""The main job end to end on a tiny budget, and what issue 4 asks of the built-in pair."""

import json

import pytest

from xlpe.cli import main


def test_demo_tiny(tmp_path, capsys):
    out = tmp_path / "demo"
    args = ["demo", "--out", str(out), "--train", "600", "--dev", "50", "--test", "50", "--vocab-size", "400",
            "--preorder-sentences", "200", "--preorder-iterations", "1", "--nmt-pe", "none", "ape", "headxl", "struct",
            "dpe",
            "--nmt-updates", "8", "--nmt-d-model", "32", "--nmt-layers", "1", "--beam", "2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    for heading in ("## Corpus", "## Metric self-checks", "## Word alignment", "## Preordering", "## Translation"):
        assert heading in text
    res = json.loads((out / "results.json").read_text())["results"]
    assert res["stats"]["check_aer_gold_vs_gold"] == 0.0
    assert res["stats"]["check_aer_spec_example_6"] == pytest.approx(0.25)
    assert res["stats"]["check_bleu_ref_vs_ref"] == pytest.approx(100.0)
    assert res["stats"]["test"]["gold_order_tau"] == 1.0
    assert set(res["nmt"]) >= {"none", "ape", "headxl"}
    assert "attention_alignment" in res["nmt"]["headxl"] and "attention_alignment" not in res["nmt"]["none"]
    assert res["nmt"]["headxl"]["pe"] == ["ape", "headxl"]
    assert res["nmt"]["struct"]["pe"] == ["ape", "struct_abs", "struct_rel"] and res["nmt"]["dpe"]["pe"] == ["dpe"]
    assert (out / "plots" / "corpus.png").stat().st_size > 0 and (out / "plots" / "nmt.png").stat().st_size > 0
    # what trains on links (the preorderer, DPE's targets) reads a run over the training pairs alone; the joint run
    # over every split (the AER protocol) saw the test references
    assert _stage_files(out / "align-train") == ["train.src", "train.tgt"]
    assert {"test.src", "test.tgt"} <= set(_stage_files(out / "align"))
    from xlpe.experiments.engine.cache import file_sig
    train_links = file_sig(out / "align-train" / "train.align")[0]
    assert train_links in _stage_params(out / "preorder")["files"]
    assert train_links in _stage_params(out / "dpe-train")["files"]
    # a second run is served from the cache: every stage is skipped, the report is identical
    assert main(args) == 0
    again = capsys.readouterr().out
    assert again.split("## Run")[0] == text.split("## Run")[0]


def test_builtin_pair_alignment_quality(tmp_path):
    """eflomal through xlpe on the German-like built-in pair: AER <= 5% against the generator's gold."""
    pytest.importorskip("eflomal")
    from xlpe.align.eflomal import EflomalAligner
    from xlpe.data.synthetic import SyntheticConfig, synth
    from xlpe.evaluate.aer import corpus_aer
    from xlpe.io import read_alignments, read_bitext
    synth(tmp_path, SyntheticConfig(profile="v2", seed=2), sizes={"train": 3000})
    pairs = list(read_bitext(tmp_path / "train.src", tmp_path / "train.tgt"))
    als = EflomalAligner(quiet=True).align([s for s, _ in pairs], [t for _, t in pairs])
    score = corpus_aer(als, list(read_alignments(tmp_path / "train.align", 0)))
    assert score.aer <= 0.05, score.format()


def _stage_params(d):
    return json.loads((d / "done.json").read_text())["params"]


def _stage_files(d):
    return [f[0] for f in _stage_params(d)["files"]]
