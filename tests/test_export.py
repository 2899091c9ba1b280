"""`xlpe export --format ctranslate2`: CTranslate2 gives the hypotheses `xlpe translate` gives, and encodings it
cannot express are refused with the reason."""

import json

import numpy as np
import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)

ct2 = pytest.importorskip("ctranslate2")
#: 300 updates of this shape learn the toy reversal well enough that no output runs to the length limit (where the
#: two engines' rules differ: xlpe forces EOS at a·S+b, CTranslate2 cuts at max_decoding_length)
SHAPE = dict(dropout=0.0, d_model=32, d_ff=64, n_heads=2, enc_layers=2, dec_layers=2)


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory):
    return _train(toy, tmp_path_factory.mktemp("ape") / "run")


def _train(toy, out, **overrides):
    from xlpe.train import DataConfig, train
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]))
    return train(tiny_model_config(**SHAPE, **overrides), quick_train_config(out, max_updates=300, lr=5e-3),
                 data).last_checkpoint


#: trained models besides the fixture's post-norm APE one: Shaw RPE alone (pre-norm, which exercises the final
#: layer norms) and the learned absolute table
VARIANTS = {"ape": {}, "rpe-pre-norm": dict(pe=["rpe"], rpe_k=4, pre_norm=True), "learned": dict(pe=["learned"])}


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_ctranslate2_gives_the_same_hypotheses(toy, tmp_path, variant, trained):
    from xlpe.infer.translate import translate_lines
    from xlpe.nn.checkpoint import load_model
    ck = _train(toy, tmp_path / "run", **VARIANTS[variant]) if VARIANTS[variant] else trained
    out = tmp_path / "ct2"
    assert main(["export", "--checkpoint", str(ck), "--output", str(out)]) == 0
    model, _, (sw, _) = load_model(ck)
    assert [p.name for p in model.encoder.pe] == VARIANTS[variant].get("pe", ["ape"])
    lines = open(toy["dev_src"]).read().splitlines()
    tr = ct2.Translator(str(out), device="cpu", intra_threads=1)
    pieces = [sw.encode(line.split()).pieces for line in lines]
    def ct2_out(beam):
        return [sw.decode_pieces(r.hypotheses[0]) for r in
                tr.translate_batch(pieces, beam_size=beam, length_penalty=0.6, max_decoding_length=model.cfg.max_len)]
    greedy = translate_lines(model, sw, lines, greedy=True)
    assert greedy == ct2_out(1)                          # the same network: greedy search agrees exactly
    assert len(set(greedy)) > len(greedy) // 2          # not a degenerate comparison of empty or repeated outputs
    # beam search: the engines' rules for finishing hypotheses differ slightly (CTranslate2 is closest to
    # xlpe's fairseq rule); most sentences agree
    beam = translate_lines(model, sw, lines, beam=3, lenpen=0.6, beam_stop="fairseq")
    assert sum(a == b for a, b in zip(beam, ct2_out(3))) >= 0.75 * len(lines)


def _scores(model, sw, tmp_path, pieces, targets, flip_relative=False):
    """CTranslate2's per-token log-probabilities of ``targets`` and xlpe's teacher-forced ones, for ``model``
    exported as it is (``flip_relative``: with its relative tables' rows reversed, a wrong index direction)."""
    import torch
    from xlpe.infer.export import ctranslate2_spec
    spec = ctranslate2_spec(model, sw)
    for layer in spec.encoder.layer if flip_relative else ():
        att = layer.self_attention
        att.relative_position_keys = np.ascontiguousarray(att.relative_position_keys[::-1])
        att.relative_position_values = np.ascontiguousarray(att.relative_position_values[::-1])
    spec.validate()
    tmp_path.mkdir()
    spec.save(str(tmp_path))
    tr = ct2.Translator(str(tmp_path), device="cpu", intra_threads=1)
    theirs, ours = [], []
    for src, tgt, res in zip(pieces, targets, tr.score_batch(pieces, targets)):
        ids = [sw.sp.piece_to_id(p) for p in tgt] + [model.cfg.eos_id]
        src_ids = torch.tensor([[sw.sp.piece_to_id(p) for p in src] + [model.cfg.eos_id]])
        with torch.no_grad():
            logits = model(src_ids, torch.tensor([[model.cfg.bos_id] + ids[:-1]]))
        ours += torch.log_softmax(logits.float(), -1)[0, torch.arange(len(ids)), ids].tolist()
        theirs += res.log_probs
    return np.array(theirs), np.array(ours)


@pytest.mark.parametrize("pe,extra", [(["ape"], {}), (["ape"], dict(pre_norm=True, activation="gelu")),
                                      (["learned"], {}), (["ape", "learned"], {}), (["none"], {}),
                                      (["rpe"], {}), (["rpe"], dict(pre_norm=True)),
                                      (["rpe"], dict(pe_options={"rpe_values": False}))])
def test_ctranslate2_scores_equal_xlpes_for_every_expressible_encoding(toy, tmp_path, pe, extra):
    """Every token's log-probability under the exported model equals xlpe's own, on random weights (every table
    row distinct) and sentences longer than the clipping distance ``rpe_k = 3``: exact layout, scale and index
    direction of the position terms, not only agreement on a trained model's argmax."""
    import torch
    from xlpe.data.subword import SubwordModel
    from xlpe.nn.transformer import build_model
    sw = SubwordModel.load(toy["spm"])
    torch.manual_seed(0)
    model = build_model(tiny_model_config(**{**SHAPE, **extra}, pe=pe, rpe_k=3, max_len=32,
                                          src_vocab_size=sw.vocab_size)).eval()
    split = [line.split() for line in open(toy["src"]).read().splitlines()]
    pieces = [sw.encode(w).pieces for w in split if len(w) >= 6][:6]
    targets = [sw.encode(line.split()).pieces for line in open(toy["tgt"]).read().splitlines()[:6]]
    theirs, ours = _scores(model, sw, tmp_path / "ct2", pieces, targets)
    assert np.abs(theirs - ours).max() < 1e-4, (pe, extra)
    if pe == ["rpe"]:                        # the check can fail: reversed relative tables change the scores
        theirs, _ = _scores(model, sw, tmp_path / "flipped", pieces, targets, flip_relative=True)
        assert np.abs(theirs - ours).max() > 1e-2


def test_unexpressible_models_and_bad_outputs_are_refused(toy, tmp_path, trained, capsys):
    from xlpe.infer.export import ctranslate2_spec, exportable
    from xlpe.nn.transformer import build_model
    reasons = {("ape", "rpe"): "replace the absolute encoding", ("learned", "rpe"): "replace the absolute encoding",
               ("inxl",): "read channels, add layers", ("dpe",): "read channels, add layers",
               ("ape", "struct_abs"): "read channels, add layers", ("rpe", "struct_rel"): "read channels, add layers",
               ("ape", "disan"): "mask attention heads (disan)"}
    for pe, reason in reasons.items():
        cfg = tiny_model_config(pe=list(pe), src_vocab_size=40)
        assert "pe=" in exportable(cfg) and reason in exportable(cfg)
        with pytest.raises(ConfigError, match="cannot export to CTranslate2"):
            ctranslate2_spec(build_model(cfg), None)
    out = tmp_path / "m"
    out.mkdir()
    assert main(["export", "--checkpoint", str(trained), "--output", str(out)]) == 1
    assert "exists" in capsys.readouterr().err and not any(out.iterdir())
    assert main(["export", "--checkpoint", str(trained), "--output", str(out), "--force",
                 "--quantization", "int8"]) == 0
    assert json.loads(capsys.readouterr().out)["quantization"] == "int8" and (out / "model.bin").exists()
