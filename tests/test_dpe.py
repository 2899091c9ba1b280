"""Dynamic position encoding (Zheng et al.; SPEC §6.1-6.3): structure, supervision, composition."""

import pytest
import torch

from xlpe.errors import ConfigError
from xlpe.nn.positions import sinusoid
from xlpe.nn.positions.dpe import decode_positions
from xlpe.nn.transformer import build_model, count_parameters
from xlpe.train.losses import combine_losses, label_smoothed_nll

from _nmt_toy import pe_config, quick_train_config, random_batch, tiny_model_config
from _nmt_toy import toy  # noqa: F401  (toy is a fixture)


def cfg(pe, **kw):
    return pe_config(pe, 20, **kw)


def batch():
    return random_batch(2, 20, pad_second=True)


def test_mse_targets_are_the_models_own_sinusoid_rows_and_unaligned_tokens_are_free():
    src, tgt = batch()
    m = build_model(cfg(["dpe"])).eval()
    target = torch.tensor([[2, 0, -1, 1, 3, -1], [0, -1, 1, -1, -1, -1]])      # -1: unaligned, EOS, pad
    plug, seen = m.encoder.pe[0], []
    real = plug.input_term
    plug.input_term = lambda ctx: seen.append(real(ctx)) or seen[-1]
    enc = m.encode(src, {"dpe_target": target})
    zz = seen[0]
    aligned = target >= 0
    expect = (zz[aligned] - sinusoid(target[aligned], 32)).pow(2).mean()
    assert torch.allclose(enc.aux["loss_dpe"], expect)
    assert "loss_dpe" not in m.encode(src).aux                                  # no target: no loss, no error


def test_encoder_input_is_dropout_e_plus_z_without_ape_again():
    src, tgt = batch()
    m = build_model(cfg(["dpe"])).eval()
    seen = {}
    first = m.encoder.layers[0]
    orig = first.forward

    def spy(x, pad, *a, **k):
        seen["x"] = x
        return orig(x, pad, *a, **k)
    first.forward = spy
    m.encode(src)
    e = m.encoder.embed(src) * 32 ** 0.5
    z = e + sinusoid(torch.arange(6).expand(2, 6), 32)
    for layer in m.encoder.pe[0].layers:
        z = layer(z, src.eq(0))
    assert torch.allclose(seen["x"], e + z, atol=1e-5)


def test_lambda_zero_leaves_the_translation_gradient_unchanged():
    src, tgt = batch()
    m = build_model(cfg(["dpe"]))
    target = torch.tensor([[2, 0, -1, 1, 3, -1], [0, -1, 1, -1, -1, -1]])
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
    grads = []
    for w in (0.0, None):
        m.zero_grad()
        torch.manual_seed(0)
        logits, aux = m(src, tgt_in, {"dpe_target": target}, return_aux=True)
        nll, _ = label_smoothed_nll(logits, tgt_out, 0.1, ignore_index=0, reduction="sum")
        obj, _ = combine_losses(nll, aux, {"loss_dpe": 0.0} if w == 0.0 else {"loss_dpe": 0.5})
        obj.backward()
        grads.append({k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None})
    m.zero_grad()
    torch.manual_seed(0)
    logits = m(src, tgt_in)
    nll, _ = label_smoothed_nll(logits, tgt_out, 0.1, ignore_index=0, reduction="sum")
    nll.backward()
    plain = {k: p.grad.clone() for k, p in m.named_parameters() if p.grad is not None}
    assert set(grads[0]) == set(plain) and all(torch.allclose(grads[0][k], plain[k], atol=1e-6) for k in plain)
    assert any(not torch.allclose(grads[1][k], plain[k], atol=1e-6) for k in plain)     # λ=0.5 changes them


def test_parameter_count_matches_the_deeper_control_and_combinations():
    dpe = count_parameters(build_model(cfg(["dpe"], enc_layers=2)))
    deeper = count_parameters(build_model(cfg(["ape"], enc_layers=4)))
    assert dpe == deeper                                   # the paper's 8E / 10E control (SPEC §6.1, Table 5)
    cfg(["dpe", "rpe"])                                    # relative encodings combine
    for other in ("ape", "inxl", "struct_abs"):
        with pytest.raises(ConfigError, match="carries the absolute position"):
            cfg(["dpe", other] if other != "inxl" else ["dpe", "inxl"])
    with pytest.raises(ConfigError, match="dpe_layers"):
        cfg(["dpe"], pe_options={"dpe_layers": 0})


def test_decoding_z_back_to_positions():
    rows = sinusoid(torch.tensor([[3, 0, 5]]), 32)
    assert decode_positions(rows, cfg(["dpe"]), 10).tolist() == [[3, 0, 5]]


def test_train_with_dpe_targets_translate_without(toy, tmp_path):
    """Targets are a training-only channel: asked of the training data, never of the input to translate."""
    from xlpe.infer.translate import translate_lines
    from xlpe.train import DataConfig, train

    dpe = tmp_path / "train.dpe"
    dpe.write_text("0-0\n" * len(open(toy["src"]).read().splitlines()))
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), dev_src=str(toy["dev_src"]),
                      dev_tgt=str(toy["dev_tgt"]), subword_model=str(toy["spm"]),
                      train_channels={"dpe_target": "dpe:" + str(dpe)})
    res = train(tiny_model_config(pe=["dpe"]), quick_train_config(tmp_path / "run", max_updates=2, log_every=1),
                data)
    rows = open(tmp_path / "run" / "train_log.csv").read()
    assert "loss_dpe" in rows
    from xlpe.nn.checkpoint import load_model
    model, _, sw = load_model(res.last_checkpoint)
    assert len(translate_lines(model, sw, ["w1 w2", "w3"], beam=2)) == 2
    with pytest.raises(ConfigError, match="dpe_target"):
        train(tiny_model_config(pe=["dpe"]), quick_train_config(tmp_path / "r2", max_updates=1),
              DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"])))


@pytest.mark.parametrize("mode", ["paper", "fairseq"])
def test_both_loss_modes_train(toy, tmp_path, mode):
    """SPEC §6.3: the paper's objective and the DPE code's compatibility mode both train and log loss_dpe; the
    trainer refuses a fairseq weight above 1 before the first batch."""
    from xlpe.train import DataConfig, train

    dpe = tmp_path / "train.dpe"
    dpe.write_text("0-1 1-0\n" * len(open(toy["src"]).read().splitlines()))
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]),
                      train_channels={"dpe_target": "dpe:" + str(dpe)})
    train(tiny_model_config(pe=["dpe"]), quick_train_config(tmp_path / "run", max_updates=2, log_every=1,
                                                            aux_loss_mode=mode), data)
    rows = open(tmp_path / "run" / "train_log.csv").read().splitlines()
    col = rows[0].split(",").index("loss_dpe")
    assert all(float(r.split(",")[col]) > 0 for r in rows[1:])
    if mode == "fairseq":
        with pytest.raises(ConfigError, match="at most 1"):
            train(tiny_model_config(pe=["dpe"]),
                  quick_train_config(tmp_path / "r2", max_updates=1, aux_loss_mode=mode,
                                     aux_weights={"loss_dpe": 1.5}), data)


def test_a_dpe_target_beyond_the_sentence_is_an_error_naming_file_line_and_bound(toy, tmp_path):
    """Issue 57 class 6: a DPE target of 900 for a sentence of a few subwords was trained on. A target ranks the
    sentence's subwords (SPEC §6.2: ``p(i) < src_len``): one outside is an error naming the file, the line and
    the bound."""
    from xlpe.data.corpus import ParallelData
    from xlpe.data.subword import SubwordModel
    from xlpe.errors import FormatError
    from xlpe.sources import open_sources
    sw = SubwordModel.load(toy["spm"])
    lines = open(toy["src"]).read().splitlines()
    n = len(sw.encode(lines[1].split()).ids)
    dpe = tmp_path / "train.dpe"
    dpe.write_text("0-0\n" + f"0-{n - 1} 1-900\n" + "0-0\n" * (len(lines) - 2))
    with pytest.raises(FormatError, match=rf"train\.dpe:2: channel 'dpe_target' gives token 1 the value 900, "
                                          rf"outside 0\.\.{n - 1}: its values rank the {n} subwords"):
        ParallelData.from_files(toy["src"], toy["tgt"], sw, channels=open_sources({"dpe_target": f"dpe:{dpe}"}))
    dpe.write_text("0-0\n" + f"0-{n - 1} 1-0\n" + "0-0\n" * (len(lines) - 2))     # the last rank is n - 1
    assert len(ParallelData.from_files(toy["src"], toy["tgt"], sw,
                                       channels=open_sources({"dpe_target": f"dpe:{dpe}"}))) == len(lines)
