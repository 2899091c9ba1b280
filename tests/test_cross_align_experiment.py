"""``xlpe experiment cross-align`` end to end on a tiny random BERT and two toy pairs of our own: dev choices
feed the architecture and the thresholds, the report scores only the test part, and a second run is cached."""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("eflomal")

from _crossalign_toy import PAIRS, write_encoder  # noqa: E402

from xlpe.align.crossalign_extract import Extraction  # noqa: E402
from xlpe.cli import main  # noqa: E402
from xlpe.errors import ConfigError  # noqa: E402
from xlpe.evaluate.aer import corpus_aer  # noqa: E402
from xlpe.experiments.recipes import cross_align as ca  # noqa: E402
from xlpe.experiments.engine.cache import digest, file_sig  # noqa: E402
from xlpe.experiments.recipes.cross_align_sweep import key_extraction  # noqa: E402
from xlpe.io.alignments import read_alignments  # noqa: E402

# gold: the pairs of equal length, aligned word for word (1-based); two more by hand
GOLD = [(s, t, " ".join(f"{k}-{k}" for k in range(1, len(s.split()) + 1))) for s, t in PAIRS
        if len(s.split()) == len(t.split())] + [("a dog ran", "hund lief", "2-1 3-2"),
                                                ("the big dog ran to the house", "der grosse hund lief zum haus",
                                                 "1-1 2-2 3-3 4-4 5-5 6p5 7-6")]


def _pair(d, name, reverse=False):
    d.mkdir()
    flip = (lambda s, t: (t, s)) if reverse else (lambda s, t: (s, t))
    train = [flip(s, t) for s, t in PAIRS] * 3
    (d / "train.src").write_text("".join(s + "\n" for s, _ in train))
    (d / "train.tgt").write_text("".join(t + "\n" for _, t in train))
    gold = [flip(s, t) for s, t, _ in GOLD]
    (d / "gold.src").write_text("".join(s + "\n" for s, _ in gold))
    (d / "gold.tgt").write_text("".join(t + "\n" for _, t in gold))
    links = [" ".join("-".join(reversed(x.split("-"))) if "-" in x else "p".join(reversed(x.split("p")))
                      for x in a.split()) if reverse else a for _, _, a in GOLD]
    (d / "gold.talp").write_text("".join(a + "\n" for a in links))
    return {"train_src": str(d / "train.src"), "train_tgt": str(d / "train.tgt"), "gold_src": str(d / "gold.src"),
            "gold_tgt": str(d / "gold.tgt"), "gold_align": str(d / "gold.talp"), "gold_base": 1}


def _gold(d):
    """A pair folder's gold sentences and their lengths in words."""
    src, tgt = (d / "gold.src").read_text().splitlines(), (d / "gold.tgt").read_text().splitlines()
    return src, tgt, [(len(a.split()), len(b.split())) for a, b in zip(src, tgt)]


def _assert_ssa_links(run, d, **extraction):
    """The dev pair's ++SSA links in ``run`` are its SSA model's at τ 0.1 with ``extraction``, which makes a
    difference here."""
    from xlpe.align.crossalign import CrossAligner
    al = CrossAligner.from_pretrained(run / "train-ende-s42-ssa" / "ssa" / "model")
    src, tgt, lengths = _gold(d / "ende")
    want = al.align(src, tgt, extraction=al.extraction(threshold=0.1, **extraction))
    assert list(read_alignments(run / "links-ende" / "ssa-s42.align", 0, lengths=lengths)) == want
    assert want != al.align(src, tgt, extraction=al.extraction(threshold=0.1))


def _links_key_is(run, pair, system, **material):
    """``links-<pair>/<system>.key`` is the digest the recipe gave ``material`` and the gold text before extractions
    were typed (commit d20401d): a run made then keeps its links."""
    p = run / f"data-{pair}"
    assert (run / f"links-{pair}" / f"{system}.key").read_text() == digest(
        {**material, "text": file_sig(str(p / "gold.src"), str(p / "gold.tgt"))})


def _old_menu_key(symmetrize: str, word_vectors: str) -> dict:
    """An untrained baseline's join and states as its links key had them: left out where the paper's."""
    return {**({} if symmetrize == "pieces" else {"symmetrize": [symmetrize]}),
            **({} if word_vectors == "pieces" else {"word_vectors": [word_vectors]})}


def _model_sig(run, stage_dir: str, stage: str):
    return file_sig(*ca._weights(str(run / stage_dir / stage / "model")))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("ca")
    enc = write_encoder(d / "enc")
    doc = {"data": {"pairs": [], "custom": {"ende": _pair(d / "ende", "ende"), "deen": _pair(d / "deen", "deen", True)},
                    "dev_pair": "ende", "dev_lines": 3},
           "experiment": {"encoder": str(enc), "prune_vocab": False, "thresholds": [0.1, 0.3], "bootstrap_samples": 50,
                          "batch_size": 4, "fig3_n": [1, 2], "fig3_train": {"tlm_max_steps": 2, "ssa_max_steps": 1}},
           "train": {"batch_size": 4, "tlm_accumulation": 1, "tlm_max_steps": 3, "ssa_max_steps": 2, "amp": "none",
                     "save_every": 1, "device": "cpu"}}
    cfg = ca.CrossAlignRecipeConfig.from_dict(doc)
    out = d / "run"
    r = ca.run_experiment(cfg, out)
    return d, out, doc, r


def test_recipe_reports_the_test_part_with_dev_choices(setup):
    d, out, doc, r = setup
    res = r["results"]
    ch = res["choices"]
    # the architecture follows the dev sweep: m = best untrained argmax layer - 1 (at most layers - n)
    untrained = res["fig5"]["untrained"]
    best = min(untrained, key=lambda lay: (untrained[lay]["argmax"], lay))
    assert ch["untrained_argmax_layer"] == best
    assert ch["m"] == max(0, min(best - 1, 4 - 2))
    # the SSA labels use the stage-1 model's dev τ, the extraction the SSA model's dev τ
    started = json.loads((out / "train-ende-s42-ssa" / "started.json").read_text())
    assert started["params"]["train"]["label_threshold"] == ch["tlm_threshold"]
    assert ch["ssa_threshold"] in (0.1, 0.3)
    # the extraction of a trained model: the best of softmax at every τ and mutual argmax at c, on dev
    c = ch["m"] + 1
    assert ch["ssa_extraction"] == ch["ssa_extractor"] in (0.1, 0.3, "argmax")
    at_c = res["fig5"]["ssa"][c]
    assert 100 * ch["dev_ssa_aer"] == pytest.approx(min(at_c["argmax"], at_c["softmax_best"]))
    # the dev pair is scored on its gold sentences after the dev lines only; the other pair on all of them
    assert res["pairs"]["ende"]["sentences"] == len(GOLD) - 3 and res["pairs"]["deen"]["sentences"] == len(GOLD)
    src, tgt, lengths = _gold(d / "ende")
    gold = list(read_alignments(d / "ende" / "gold.talp", 1, lengths=lengths))
    for system, file in (("+ssa", "ssa-s42"), ("untrained-argmax", "untrained-argmax")):
        hyp = list(read_alignments(out / "links-ende" / f"{file}.align", 0, lengths=lengths))
        want = corpus_aer(hyp[3:], gold[3:])
        assert res["pairs"]["ende"]["systems"][system]["aer"] == pytest.approx(100 * want.aer)
        assert res["pairs"]["ende"]["systems"][system]["aer_all_gold"] == pytest.approx(
            100 * corpus_aer(hyp, gold).aer)
    for pair in ("ende", "deen"):
        assert set(res["pairs"][pair]["systems"]) == {"eflomal", "untrained-argmax", "untrained-softmax",
                                                      "no-training", "+tlm", "+ssa"}
        assert "+ssa vs eflomal" in res["comparisons"][pair]
    assert set(res["fig3"]) == {1, 2}
    rep = r["report"]
    for text in ("Table 2 analogue", "Table 3 analogue", "Figure 3 analogue", "Figure 5 analogue",
                 "Where every choice came from", "one seed: no claim about training variance"):
        assert text in rep
    assert (out / "plots" / "fig5_layers.png").is_file() and (out / "plots" / "fig3_cross_layers.png").is_file()
    assert json.loads((out / "results.json").read_text())["results"]["choices"]["m"] == ch["m"]


def test_extraction_key_material_is_the_old_form():
    """Typed extractions give the sweep keys, the untrained baselines' links keys, the dev choices' order in
    results.json and the menus' order (the dev set's tie-break) the string / keyword form gave."""
    from xlpe.experiments.recipes.cross_align_sweep import (DevChoice, DevChoices, ModelChoices, menu, sweep_key,
                                                            sweep_menu)
    for ext, key in ((Extraction(threshold=0.1), 0.1), (Extraction(threshold=0.1, null_sink="none"), 0.1),
                     (Extraction(threshold=0.3, symmetrize="gdfa"), "0.3|grow-diag-final-and"),
                     (Extraction(threshold=0.4, word_vectors="mean", symmetrize="gdfa", layer=7),
                      "0.4|grow-diag-final-and|mean"),
                     (Extraction(threshold=0.1, word_vectors="mean"), "0.1|pieces|mean"),
                     (Extraction(method="argmax", null_sink="none"), "argmax"),
                     (Extraction(method="argmax", null_sink="none", symmetrize="union"), "argmax|union"),
                     (Extraction(method="argmax", null_sink="none", word_vectors="mean"), "argmax|pieces|mean")):
        assert sweep_key(ext) == key and type(sweep_key(ext)) is type(key)
        assert key_extraction(key, null_sink=ext.null_sink, layer=ext.layer) == ext
        assert key_extraction(str(key), null_sink=ext.null_sink, layer=ext.layer) == ext
    def untrained(ext):
        return ca.untrained_key(ext, [["w", 1, "ab"]]).key_material()
    enc = {"model": [["w", 1, "ab"]]}
    assert untrained(Extraction(method="argmax", null_sink="none", layer=7)) == {**enc, "layer": 7}
    assert untrained(Extraction(threshold=0.5, null_sink="none", layer=7, symmetrize="gdfa")) == {
        **enc, "layer": 7, "tau": 0.5, "symmetrize": ["grow-diag-final-and"]}
    assert untrained(Extraction(method="argmax", null_sink="none", layer=6, word_vectors="mean")) == {
        **enc, "layer": 6, "word_vectors": ["mean"]}
    assert [sweep_key(x) for x in menu(["argmax", 0.1], "cls", ["pieces", "union"], ["pieces", "mean"])] == [
        "argmax", 0.1, "argmax|union", "0.1|union", "argmax|pieces|mean", "0.1|pieces|mean", "argmax|union|mean",
        "0.1|union|mean"]
    assert [sweep_key(x) for x in sweep_menu([0.2], "cls", ["union"])] == ["argmax", 0.2, "argmax|union", "0.2|union"]
    assert {x.null_sink for x in sweep_menu([0.2], "cls") if x.method == "softmax"} == {"cls"}

    def chose(ext, aer):
        return DevChoice(ext, aer)
    ch = DevChoices(m=6, n=2, untrained_argmax=chose(Extraction(method="argmax", null_sink="none", layer=7), 0.2),
                    untrained_softmax=chose(Extraction(threshold=0.5, null_sink="none", layer=7, symmetrize="gdfa"),
                                            0.21))
    ssa = ModelChoices(label=chose(Extraction(threshold=0.2, layer=7), 0.19),
                       joined=chose(Extraction(threshold=0.3, layer=7, symmetrize="gdfa"), 0.18),
                       best=chose(Extraction(threshold=0.4, layer=6, symmetrize="gdfa", word_vectors="mean"), 0.17))
    ch.models["ssa"] = ssa
    ch.links["ssa"] = ssa.best.extraction
    assert list(ch.to_json().items()) == [
        ("untrained_argmax_layer", 7), ("untrained_softmax_layer", 7), ("untrained_softmax_threshold", 0.5),
        ("untrained_softmax_symmetrize", "grow-diag-final-and"), ("untrained_argmax_symmetrize", "pieces"),
        ("m", 6), ("n", 2), ("untrained_argmax_vectors", "pieces"), ("untrained_softmax_vectors", "pieces"),
        ("dev_untrained_argmax_aer", 0.2), ("dev_untrained_softmax_aer", 0.21),
        ("ssa_joined", "0.3|grow-diag-final-and"), ("ssa_threshold", 0.2),
        ("ssa_extractor", "0.4|grow-diag-final-and|mean"), ("dev_ssa_aer", 0.17), ("ssa_layer", 6),
        ("ssa_extraction", "0.4|grow-diag-final-and|mean")]


def test_stage_and_links_keys_are_those_of_the_old_keyword_form(setup):
    """Every links key and the dev stages' keys of the run are the digests of the key material the recipe built
    from its string-keyed choices and loose keywords before extractions were typed (written out here)."""
    d, out, doc, r = setup
    ch = json.loads((out / "results.json").read_text())["results"]["choices"]
    enc = file_sig(*ca._weights(str(d / "enc")))
    for pair in ("ende", "deen"):
        _links_key_is(out, pair, "untrained-argmax", model=enc, layer=ch["untrained_argmax_layer"])
        _links_key_is(out, pair, "untrained-softmax", model=enc, layer=ch["untrained_softmax_layer"],
                      tau=ch["untrained_softmax_threshold"])
        for stage in ("tlm", "ssa"):
            _links_key_is(out, pair, f"{stage}-s42", model=_model_sig(out, f"train-{pair}-s42-{stage}", stage),
                          extraction=ch[f"{stage}_extraction"])
        _links_key_is(out, pair, "no-training", model=enc, opts={"n": 2, "m": ch["m"]}, seed=42,
                      extraction=ch["ssa_extraction"])

    def key(stage):
        return json.loads((out / stage / "done.json").read_text())["key"]
    assert key("dev-untrained") == digest({"model": enc, "lines": 3, "layers": [], "thresholds": [0.1, 0.3],
                                           "gold": file_sig(str(out / "data-ende" / "gold.talp"))})
    for stage in ("tlm", "ssa"):
        assert key(f"dev-{stage}") == digest({"model": _model_sig(out, f"train-ende-s42-{stage}", stage), "lines": 3,
                                              "thresholds": [0.1, 0.3]})


def test_second_run_is_cached(setup, caplog):
    d, out, doc, r = setup
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")}
    caplog.set_level("INFO")
    again = ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc), out)
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.safetensors")} == before
    assert "stage train-ende-s42-tlm: cached" in caplog.text
    assert again["results"]["pairs"] == json.loads(json.dumps(r["results"]["pairs"]))


def test_an_ssa_option_retrains_ssa_and_not_tlm(setup, tmp_path, caplog):
    """A stage's cache key holds its own training options only: changing how SSA trains keeps the TLM model, and
    options of how a run is carried out (checkpoint interval) retrain nothing."""
    import copy
    import shutil
    d, out, doc, r = setup
    run2 = tmp_path / "run"
    shutil.copytree(out, run2)
    doc2 = copy.deepcopy(doc)
    doc2["train"]["ssa_trainable"] = "upto"
    doc2["train"]["save_every"] = 7                                     # how it runs, not what it learns
    caplog.set_level("INFO")
    ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc2), run2, only=["table2"])
    assert "stage train-ende-s42-tlm: cached" in caplog.text
    assert "stage train-ende-s42-ssa: running" in caplog.text
    started = json.loads((run2 / "train-ende-s42-ssa" / "started.json").read_text())
    assert started["params"]["train"]["ssa_trainable"] == "upto" and "tlm_lr" not in started["params"]["train"]


def test_trained_layer_dev_extracts_at_the_dev_best_layer(setup, tmp_path, monkeypatch):
    """experiment.trained_layer = "dev": a trained model's links come from its dev-best layer, not from c. The dev
    sweep of the SSA model is doctored so that the layer above c is perfect on dev."""
    import copy
    import shutil
    from xlpe.align.crossalign import CrossAligner
    d, out, doc, r = setup
    run2 = tmp_path / "run"
    shutil.copytree(out, run2)
    shutil.rmtree(run2 / "dev-ssa")
    real_sweep = ca.sweep

    def sweep(aligner, *a, **k):
        grid = real_sweep(aligner, *a, **k)
        top = max(grid)
        grid[top]["argmax"] = [grid[top]["argmax"][3]] * 4                 # |A∩S| = |A∩P| = |A| = |S|: AER 0
        return grid
    monkeypatch.setattr(ca, "sweep", sweep)
    calls, real_extract = [], ca._extract

    def extract(model_dir, pair_paths, **kw):
        calls.append((str(model_dir), kw["extraction"]))
        return real_extract(model_dir, pair_paths, **kw)
    monkeypatch.setattr(ca, "_extract", extract)
    doc2 = copy.deepcopy(doc)
    doc2["experiment"]["trained_layer"] = "dev"
    res = ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc2), run2, only=["table2"])["results"]
    ch = res["choices"]
    top = ch["m"] + ch["n"]
    assert ch["ssa_layer"] == top != ch["m"] + 1 and ch["ssa_extraction"] == "argmax" and ch["dev_ssa_aer"] == 0
    al = CrossAligner.from_pretrained(run2 / "train-ende-s42-ssa" / "ssa" / "model")
    src, tgt, lengths = _gold(d / "ende")
    want = al.align(src, tgt, extraction=Extraction(method="argmax", null_sink="none", layer=top))
    ssa_calls = [ext for m, ext in calls if "train-ende-s42-ssa" in m]
    assert [ext.layer for ext in ssa_calls] == [top]                       # the new key: extracted again, at top
    assert list(read_alignments(run2 / "links-ende" / "ssa-s42.align", 0, lengths=lengths)) == want
    assert f"at layer {top} (the dev-best layer)" in (run2 / "report.md").read_text()
    _links_key_is(run2, "ende", "ssa-s42", model=_model_sig(run2, "train-ende-s42-ssa", "ssa"), extraction="argmax",
                  layer=top)
    doc2["experiment"]["trained_layer"] = "best"
    with pytest.raises(ConfigError, match="trained_layer"):
        ca.CrossAlignRecipeConfig.from_dict(doc2).validate()


def test_symmetrisation_menu_is_chosen_on_dev_for_every_system(setup, tmp_path, monkeypatch):
    """experiment.symmetrize = ["pieces", "grow-diag-final-and"]: the dev sweeps score both joins, every system
    takes the best on dev, and the links and the report follow. The SSA sweep is doctored so that softmax τ=0.1
    joined by grow-diag-final-and is perfect at c; an unchanged untrained choice keeps its cached links."""
    import copy
    import shutil
    d, out, doc, r = setup
    run2 = tmp_path / "run"
    shutil.copytree(out, run2)
    real_sweep, menus = ca.sweep, []

    def sweep(aligner, *a, **k):
        grid = real_sweep(aligner, *a, **k)
        menus.append(list(dict.fromkeys(x.symmetrize for x in k["extractions"])))
        if aligner.config.stages and aligner.config.stages[-1] == "ssa":                # the SSA model's sweep
            c = aligner.config.m + 1
            row = grid[c]["0.1|grow-diag-final-and"]
            grid[c]["0.1|grow-diag-final-and"] = [row[3]] * 4                   # AER 0
        assert all(set(row) == {"argmax", 0.1, 0.3, "argmax|grow-diag-final-and", "0.1|grow-diag-final-and",
                                "0.3|grow-diag-final-and"} for row in grid.values())
        return grid
    monkeypatch.setattr(ca, "sweep", sweep)
    doc2 = copy.deepcopy(doc)
    doc2["experiment"]["symmetrize"] = ["pieces", "gdfa"]
    cfg = ca.CrossAlignRecipeConfig.from_dict(doc2)
    assert cfg.experiment.symmetrize == ["pieces", "grow-diag-final-and"]
    res = ca.run_experiment(cfg, run2, only=["table2"])["results"]
    ch = res["choices"]
    assert menus and all(m == ["pieces", "grow-diag-final-and"] for m in menus)   # dev-untrained, -tlm, -ssa again
    assert ch["ssa_extraction"] == "0.1|grow-diag-final-and" and ch["dev_ssa_aer"] == 0
    assert ch["untrained_argmax_symmetrize"] in ("pieces", "grow-diag-final-and")
    _assert_ssa_links(run2, d, symmetrize="grow-diag-final-and")
    assert "softmax τ=0.1 + grow-diag-final-and" in (run2 / "report.md").read_text()
    _links_key_is(run2, "ende", "ssa-s42", model=_model_sig(run2, "train-ende-s42-ssa", "ssa"),
                  extraction="0.1|grow-diag-final-and")
    enc = file_sig(*ca._weights(str(d / "enc")))
    _links_key_is(run2, "ende", "untrained-softmax", model=enc, layer=ch["untrained_softmax_layer"],
                  tau=ch["untrained_softmax_threshold"], **_old_menu_key(ch["untrained_softmax_symmetrize"], "pieces"))
    doc2["experiment"]["symmetrize"] = ["both"]
    with pytest.raises(ConfigError, match="symmetrize must be one of"):
        ca.CrossAlignRecipeConfig.from_dict(doc2).validate()


def test_cli_runs_one_table_from_the_cache(setup, tmp_path, capsys):
    d, out, doc, r = setup
    lines = []
    for table in ("data", "experiment", "train"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {_toml(v)}" for k, v in doc[table].items() if k != "custom"]
    for name, spec in doc["data"]["custom"].items():
        lines += [f"[data.custom.{name}]"] + [f"{k} = {_toml(v)}" for k, v in spec.items()]
    (tmp_path / "c.toml").write_text("\n".join(lines) + "\n")
    assert main(["experiment", "cross-align", "--config", str(tmp_path / "c.toml"), "--out", str(out),
                 "--only", "table2"]) == 0
    text = capsys.readouterr().out
    assert "Table 2 analogue" in text and "Table 3 analogue" not in text


def _toml(v) -> str:
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)


@pytest.mark.parametrize("doc, message", [
    ({"data": {"pairs": ["xxen"]}}, "unknown gold set 'xxen'"),
    ({"data": {"pairs": ["deen"], "dev_pair": "zhen"}}, "dev_pair 'zhen' is not among the pairs"),
    ({"model": {"n": "dev"}}, "only m and threshold are chosen on the dev set"),
    ({"data": {"pairs": [], "custom": {"x": {"train_src": "a"}}}}, "needs train_src, train_tgt"),
    ({"experiment": {"thresholds": [1.5]}}, "thresholds"),
    ({"experiment": {"trained_extractors": ["max"]}}, "trained_extractors"),
    ({"train": {"tlm_lr": "fast"}}, "tlm_lr"),
    ({"experiment": {"chosen_on": {"train.nothing": "dev"}}}, "not a setting of this config"),
])
def test_config_errors(doc, message):
    with pytest.raises(ConfigError, match=message):
        ca.CrossAlignRecipeConfig.from_dict(doc)


def test_dev_lines_must_leave_a_test_part(setup, tmp_path):
    d, out, doc, r = setup
    bad = json.loads(json.dumps(doc))
    bad["data"]["dev_lines"] = len(GOLD)
    with pytest.raises(ConfigError, match="leaves none of the"):
        ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(bad), tmp_path / "run")


def _copy_run(setup, tmp_path, **experiment):
    """The module run copied to ``tmp_path/run`` and its config with ``experiment`` options changed."""
    import copy
    import shutil
    out, doc = setup[1], setup[2]
    run2 = tmp_path / "run"
    shutil.copytree(out, run2)
    doc2 = copy.deepcopy(doc)
    doc2["experiment"].update(experiment)
    return run2, doc2


def test_further_ssa_rounds_train_on_the_previous_rounds_labels(setup, tmp_path, caplog):
    """experiment.ssa_rounds = [1.0, 1.0]: each further SSA round starts from the model before it, its labels from
    that model at the τ the dev set chose for it; the last round's model is the recipe's Cross-Align (Table 2, the
    comparisons, against the round before it too) and Table 3 keeps the paper's ++SSA and round 2 beside it. The TLM
    and SSA stages stay cached."""
    from xlpe.align.crossalign import CrossAligner
    from xlpe.experiments.engine.cache import file_sig
    d = setup[0]
    run2, doc2 = _copy_run(setup, tmp_path, ssa_rounds=[1.0, 1.0])
    caplog.set_level("INFO")
    res = ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc2), run2, only=["table2", "table3"])
    assert "stage train-ende-s42-ssa: cached" in caplog.text
    for stage in ("train-ende-s42-ssa-r2", "train-deen-s42-ssa-r2", "train-ende-s42-ssa-r3", "train-deen-s42-ssa-r3"):
        assert f"stage {stage}: running" in caplog.text
    ch = res["results"]["choices"]
    for stage, prev in (("ssa-r2", "ssa"), ("ssa-r3", "ssa-r2")):
        init = run2 / f"train-ende-s42-{prev}" / "ssa" / "model"
        started = json.loads((run2 / f"train-ende-s42-{stage}" / "started.json").read_text())["params"]
        assert started["init"] == json.loads(json.dumps(file_sig(*ca._weights(str(init)))))
        assert started["train"]["label_threshold"] == ch[f"{prev}_threshold"] and started["train"]["ssa_epochs"] == 1.0
    for pair in ("ende", "deen"):
        assert {"+ssa", "+ssa-r2", "+ssa-r3"} <= set(res["results"]["pairs"][pair]["systems"])
        comps = res["results"]["comparisons"][pair]
        assert {"+ssa-r3 vs eflomal", "+ssa-r3 vs +ssa", "+ssa-r3 vs +ssa-r2", "+ssa vs +tlm"} <= set(comps)
        assert "+ssa vs eflomal" not in comps and "+ssa-r2 vs eflomal" not in comps
    r3 = CrossAligner.from_pretrained(run2 / "train-ende-s42-ssa-r3" / "ssa" / "model")
    src, tgt, lengths = _gold(d / "ende")
    want = r3.align(src, tgt, extraction=key_extraction(ch["ssa-r3_extraction"], null_sink=r3.config.null_sink))
    assert list(read_alignments(run2 / "links-ende" / "ssa-r3-s42.align", 0, lengths=lengths)) == want
    rep = res["report"]
    table2 = rep.split("## Table 2 analogue")[1].split("##")[0]
    table3 = rep.split("## Table 3 analogue")[1].split("##")[0]
    assert "SSA round 3" in table2 and "SSA round 2" not in table2 and "++SSA" not in table2
    assert "++SSA" in table3 and "SSA round 2" in table3 and "SSA round 3" in table3
    assert "+ssa-r3 vs +ssa-r2" in rep
    assert f"SSA-R2 label τ={ch['ssa_threshold']:g}" in rep and f"SSA-R3 label τ={ch['ssa-r2_threshold']:g}" in rep
    doc2["experiment"]["ssa_rounds"] = [0]
    with pytest.raises(ConfigError, match="ssa_rounds"):
        ca.CrossAlignRecipeConfig.from_dict(doc2)


def test_a_second_seed_trains_every_pair_again_with_the_first_seeds_dev_choices(setup, tmp_path, caplog):
    """experiment.seeds = [42, 7]: every pair's chain is trained once per seed; the dev choices (and the dev sweeps)
    stay those of the dev pair's first seed; each system row averages its seeds and the significance keeps them
    together (the report names both)."""
    r = setup[3]
    run2, doc2 = _copy_run(setup, tmp_path, seeds=[42, 7])
    caplog.set_level("INFO")
    res = ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc2), run2, only=["table2"])
    for stage in ("train-ende-s42-tlm", "train-ende-s42-ssa", "train-deen-s42-ssa", "dev-tlm", "dev-ssa"):
        assert f"stage {stage}: cached" in caplog.text
    for pair in ("ende", "deen"):
        for stage in ("tlm", "ssa"):
            assert f"stage train-{pair}-s7-{stage}: running" in caplog.text
            assert (run2 / f"links-{pair}" / f"{stage}-s7.align").is_file()
        started = json.loads((run2 / f"train-{pair}-s7-ssa" / "started.json").read_text())["params"]
        assert started["train"]["seed"] == 7
        assert started["train"]["label_threshold"] == r["results"]["choices"]["tlm_threshold"]
        row = res["results"]["pairs"][pair]["systems"]["+ssa"]
        assert len(row["aer_seeds"]) == 2 and row["aer"] == pytest.approx(sum(row["aer_seeds"]) / 2)
        assert len(res["results"]["pairs"][pair]["systems"]["eflomal"]["aer_seeds"]) == 1
        comps = res["results"]["comparisons"][pair]
        # SSA of seed 7 continues TLM of seed 7: the test across seeds is the paired one (undefined, and saying so,
        # when the toy runs' differences do not vary)
        c = comps["+ssa vs +tlm"]
        assert c["seed_test"] == "paired-t" or c["reason"].startswith("the paired t-test is undefined")
        assert comps["+ssa vs eflomal"]["seed_test"] == "none"        # one eflomal run: no test across seeds
    assert res["results"]["choices"] == r["results"]["choices"]
    assert "2 training seed(s) [42, 7]" in res["report"]


def test_round_labels_dev_takes_the_labelling_models_best_join(setup, tmp_path, monkeypatch, caplog):
    """experiment.round_labels = "dev": a further round's labels are the SSA model's best softmax extraction at c on
    the dev set, join included (the sweep is doctored so that τ=0.3 + grow-diag-final-and wins at c): the round's
    label file holds exactly those links of every training pair; the paper's first round keeps its cached key."""
    import copy
    import shutil
    import numpy as np
    from xlpe.align import crossalign_data as cd
    from xlpe.align.crossalign import CrossAligner
    d, out, doc, r = setup
    run2 = tmp_path / "run"
    shutil.copytree(out, run2)
    real_sweep = ca.sweep

    def sweep(aligner, *a, **k):
        grid = real_sweep(aligner, *a, **k)
        if aligner.config.stages and aligner.config.stages[-1] == "ssa":
            c = aligner.config.m + 1
            grid[c]["0.3|grow-diag-final-and"] = [grid[c]["0.3|grow-diag-final-and"][3]] * 4     # AER 0
        return grid
    monkeypatch.setattr(ca, "sweep", sweep)
    doc2 = copy.deepcopy(doc)
    doc2["experiment"].update(ssa_rounds=[1.0], symmetrize=["pieces", "gdfa"], round_labels="dev")
    caplog.set_level("INFO")
    res = ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc2), run2, only=["table2"])
    assert "stage train-ende-s42-ssa: cached" in caplog.text          # round 1: the paper's labels, as before
    ch = res["results"]["choices"]
    assert ch["ssa_joined"] == "0.3|grow-diag-final-and"
    started = json.loads((run2 / "train-ende-s42-ssa-r2" / "started.json").read_text())["params"]["train"]
    assert started["label_threshold"] == 0.3 and started["label_symmetrize"] == "grow-diag-final-and"
    ssa = CrossAligner.from_pretrained(run2 / "train-ende-s42-ssa" / "ssa" / "model")
    p = run2 / "data-ende"
    data = cd.PairData(ssa, str(p / "train.src"), str(p / "train.tgt"))
    labels = Extraction(threshold=0.3, symmetrize="grow-diag-final-and", layer=ssa.config.align_layer)
    want = cd.label_pairs(ssa.model, data, labels, device="cpu")
    with np.load(run2 / "train-ende-s42-ssa-r2" / "ssa" / cd.LABELS) as z:
        assert np.array_equal(z["links"], want.links) and np.array_equal(z["offsets"], want.offsets)
    pieces = cd.label_pairs(ssa.model, data, Extraction(threshold=0.3, layer=ssa.config.align_layer), device="cpu")
    assert len(pieces.links) < len(want.links)                           # the join made a difference here
    assert "SSA-R2 labels softmax τ=0.3 + grow-diag-final-and" in res["report"]
    doc2["train"]["label_threshold"] = 0.2
    with pytest.raises(ConfigError, match="round_labels"):
        ca.CrossAlignRecipeConfig.from_dict(doc2).validate()
    doc2["train"].pop("label_threshold")
    doc2["experiment"]["round_labels"] = "gdfa"
    with pytest.raises(ConfigError, match="round_labels"):
        ca.CrossAlignRecipeConfig.from_dict(doc2).validate()


def test_word_state_menu_is_chosen_on_dev_and_round_labels_stay_on_pieces(setup, tmp_path, monkeypatch, caplog):
    """experiment.word_vectors = ["pieces", "mean"]: every dev sweep also scores each extraction on the words' mean
    states; a system takes them where the dev set prefers them (the SSA sweep is doctored so that softmax τ=0.1 on
    mean states is perfect at c), its links and the report follow; a further round's labels still come from piece
    states (round 2 trains on the SSA model's best piece-level softmax), and no trained stage is retrained."""
    d = setup[0]
    real_sweep, menus = ca.sweep, []

    def sweep(aligner, *a, **k):
        grid = real_sweep(aligner, *a, **k)
        menus.append(list(dict.fromkeys(x.word_vectors for x in k["extractions"])))
        if aligner.config.stages and aligner.config.stages[-1] == "ssa":
            c = aligner.config.m + 1
            grid[c]["0.1|pieces|mean"] = [grid[c]["0.1|pieces|mean"][3]] * 4                   # AER 0
        assert all({"argmax|pieces|mean", "0.1|pieces|mean", "0.3|pieces|mean", "argmax", 0.1, 0.3} == set(row)
                   for row in grid.values())
        return grid
    monkeypatch.setattr(ca, "sweep", sweep)
    run2, doc2 = _copy_run(setup, tmp_path, word_vectors=["pieces", "mean"], ssa_rounds=[1.0], round_labels="dev")
    caplog.set_level("INFO")
    res = ca.run_experiment(ca.CrossAlignRecipeConfig.from_dict(doc2), run2, only=["table2"])
    assert menus and all(m == ["pieces", "mean"] for m in menus)
    for stage in ("train-ende-s42-tlm", "train-ende-s42-ssa", "train-deen-s42-ssa"):
        assert f"stage {stage}: cached" in caplog.text
    ch = res["results"]["choices"]
    assert ch["ssa_extraction"] == "0.1|pieces|mean" and ch["dev_ssa_aer"] == 0
    assert "|mean" not in str(ch["ssa_joined"])                                  # the labels' choice: pieces
    started = json.loads((run2 / "train-ende-s42-ssa-r2" / "started.json").read_text())["params"]["train"]
    assert started["label_threshold"] == key_extraction(ch["ssa_joined"], null_sink="cls").threshold
    assert "label_word_vectors" not in started          # piece-state labels keep the key they had before the option
    assert ch["untrained_argmax_vectors"] in ("pieces", "mean")
    _assert_ssa_links(run2, d, word_vectors="mean")
    _links_key_is(run2, "ende", "ssa-s42", model=_model_sig(run2, "train-ende-s42-ssa", "ssa"),
                  extraction="0.1|pieces|mean")
    _links_key_is(run2, "deen", "untrained-argmax", model=file_sig(*ca._weights(str(d / "enc"))),
                  layer=ch["untrained_argmax_layer"], **_old_menu_key("pieces", ch["untrained_argmax_vectors"]))
    rep = res["report"]
    assert "SSA model extraction at c: softmax τ=0.1, word mean states" in rep and "on pieces or mean states" in rep
    doc2["experiment"]["word_vectors"] = ["max"]
    with pytest.raises(ConfigError, match="word_vectors must be one of"):
        ca.CrossAlignRecipeConfig.from_dict(doc2).validate()
