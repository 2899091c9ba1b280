"""Cross-lingual position encodings (SPEC §4): index direction, HeadXL/Combination identities (SPEC §12.3, §12.7),
parameter counts, configuration errors, encoder-free variants."""

import pytest
import torch

from xlpe.data.channels import expand_channel
from xlpe.errors import ConfigError
from xlpe.io.orders import invert_order
from xlpe.nn.positions import required_inputs, sinusoid
from xlpe.nn.positions.xl import resolve_tau
from xlpe.nn.transformer import TransformerConfig, build_model, count_parameters

from test_nn_positions import batch  # noqa: E402  (the same random batch)


def cfg(pe, **kw):
    kw.setdefault("src_vocab_size", 16)
    kw.setdefault("dropout", 0.0)
    return TransformerConfig.from_preset("tiny", pe=pe, **kw)


def xl_channel(orders):
    """pos_XL channel (EOS appended) for word-level orders without subword splits."""
    return torch.tensor([expand_channel("xl", invert_order(o), None, len(o)).tolist() for o in orders])


def test_spec_12_3_index_direction_and_eos():
    """Tokens [a,b,c,d], lader order [2,3,1,0] (reordered c d b a) -> pos_XL [3,2,0,1]; EOS keeps index 4."""
    assert invert_order([2, 3, 1, 0]) == [3, 2, 0, 1]
    assert xl_channel([[2, 3, 1, 0]]).tolist() == [[3, 2, 0, 1, 4]]


def test_xl_term_is_sinusoid_of_inverse_order_and_identity_is_ape():
    src, tgt = batch(B=1, T=5)
    ape = build_model(cfg(["ape"])).eval()
    xl = build_model(cfg(["xl"])).eval()
    xl.load_state_dict(ape.state_dict())
    ident = xl_channel([[0, 1, 2, 3]])
    assert torch.equal(xl(src, tgt, {"xl": ident}), ape(src, tgt))           # bit for bit
    chan = xl_channel([[2, 3, 1, 0]])
    enc = xl.encode(src, {"xl": chan})
    enc_ape = ape.encode(src)
    assert not torch.allclose(enc.memory, enc_ape.memory)
    # the term each row receives is sinusoid(pos_XL[i]) -- row 0 (token a) gets position 3, not o[0] = 2
    ctx_term = xl.encoder.pe[0].input_term(_ctx(src, {"xl": chan}))
    assert torch.equal(ctx_term[0, 0], sinusoid(torch.tensor(3), 32))
    assert torch.equal(ctx_term[0, 4], sinusoid(torch.tensor(4), 32))


def _ctx(src, channels):
    from xlpe.nn.positions import EncodingContext
    return EncodingContext(src, torch.zeros(*src.shape, 32), src.eq(0), channels)


@pytest.mark.parametrize("param, extra", [("full", 2 * 32 * 32), ("diag", 2 * 32)])
def test_inxl_and_combination_parameter_counts(param, extra):
    base = count_parameters(build_model(cfg(["ape"])))
    opts = {"xl_fusion_param": param}
    assert count_parameters(build_model(cfg(["inxl"], pe_options=opts))) - base == extra
    assert count_parameters(build_model(cfg(["ape", "combination"], pe_options=opts))) - base == extra
    assert count_parameters(build_model(cfg(["ape", "headxl"]))) == base
    assert count_parameters(build_model(cfg(["xl"]))) == base


def test_inxl_formula():
    torch.manual_seed(0)
    m = build_model(cfg(["inxl"])).eval()
    src, _ = batch(B=1, T=5)
    chan = xl_channel([[2, 3, 1, 0]])
    term = m.encoder.pe[0].input_term(_ctx(src, {"xl": chan}))
    f = m.encoder.pe[0].fusion
    expect = torch.tanh(sinusoid(torch.arange(5), 32) @ f.U.weight.t() + sinusoid(chan[0], 32) @ f.V.weight.t())
    assert torch.allclose(term[0], expect, atol=1e-6)


def test_spec_12_7_headxl_identities():
    """tau=0 is vanilla for any order; tau=H with PE_XL = PE_abs is vanilla; tau=1 with another order is not."""
    torch.manual_seed(0)
    vanilla = build_model(cfg(["ape"])).eval()
    src, tgt = batch()
    ref = vanilla(src, tgt)
    ident, other = xl_channel([[0, 1, 2, 3, 4]] * 2), xl_channel([[4, 3, 2, 1, 0], [1, 0, 3, 2, 4]])
    for tau, chan, same in ((0, other, True), (2, ident, True), (1, other, False), (2, other, False)):
        m = build_model(cfg(["ape", "headxl"], pe_options={"tau": tau})).eval()
        m.load_state_dict(vanilla.state_dict())          # zero extra parameters
        out = m(src, tgt, {"xl": chan})
        assert torch.allclose(out, ref, atol=1e-5) == same, (tau, same)


def test_spec_12_7_combination_equals_headxl_fed_tanh_pe_abs_u_plus_v():
    """Combination with PE_XL = PE_abs equals HeadXL whose XL heads read X + tanh(PE_abs (U+V))."""
    torch.manual_seed(0)
    comb = build_model(cfg(["ape", "combination"], pe_options={"tau": 1})).eval()
    src, tgt = batch()
    ident = xl_channel([[0, 1, 2, 3, 4]] * 2)
    out = comb(src, tgt, {"xl": ident})
    f = comb.encoder.pe[1].fusion
    pe = sinusoid(torch.arange(6), 32)
    fused = torch.tanh(pe @ (f.U.weight + f.V.weight).t())
    # a HeadXL model whose "PE_XL" rows are that fused vector: feed it through the xl hook directly
    head = build_model(cfg(["ape", "headxl"], pe_options={"tau": 1})).eval()
    head.load_state_dict({k: v for k, v in comb.state_dict().items() if "fusion" not in k})
    head.encoder.pe[1].xl_term = lambda ctx: fused.expand(ctx.emb.shape)
    assert torch.allclose(head(src, tgt, {"xl": ident}), out, atol=1e-6)
    # and the XL heads matter: a model without them differs
    vanilla = build_model(cfg(["ape"])).eval()
    vanilla.load_state_dict(head.state_dict())
    assert not torch.allclose(vanilla(src, tgt), out, atol=1e-4)


def test_headxl_uses_only_first_layer_and_selected_heads():
    torch.manual_seed(0)
    m = build_model(cfg(["ape", "headxl"], pe_options={"tau": 1}))
    src, tgt = batch()
    chan = xl_channel([[4, 3, 2, 1, 0], [1, 0, 3, 2, 4]])
    ctx = _ctx(src, {"xl": chan})
    p = m.encoder.pe[1]
    assert p.head_input(ctx, 1) is None
    hi = p.head_input(ctx, 0)
    assert hi.heads.tolist() == [True, False] and hi.x.shape == (2, 6, 32)


def test_headxl_on_all_layers_adds_the_xl_term_to_later_layers_inputs():
    """SPEC §10's alternative (layers = "all", [I]): the XL heads of every later layer read H + PE_XL."""
    torch.manual_seed(0)
    src, tgt = batch()
    chan = xl_channel([[4, 3, 2, 1, 0], [1, 0, 3, 2, 4]])
    first = build_model(cfg(["ape", "headxl"], pe_options={"tau": 1})).eval()
    every = build_model(cfg(["ape", "headxl"], pe_options={"tau": 1, "layers": "all"})).eval()
    every.load_state_dict(first.state_dict())                 # no extra parameter
    assert count_parameters(every) == count_parameters(first)
    ctx = _ctx(src, {"xl": chan})
    h = torch.randn(2, 6, 32)
    hi = every.encoder.pe[1].head_input(ctx, 1, h)
    assert torch.allclose(hi.x, h + every.encoder.pe[1].xl_term(ctx)) and hi.heads.tolist() == [True, False]
    assert not torch.allclose(every(src, tgt, {"xl": chan}), first(src, tgt, {"xl": chan}), atol=1e-4)
    zero = build_model(cfg(["ape", "headxl"], pe_options={"tau": 0, "layers": "all"})).eval()
    vanilla = build_model(cfg(["ape"])).eval()
    vanilla.load_state_dict(zero.state_dict())
    assert torch.allclose(zero(src, tgt, {"xl": chan}), vanilla(src, tgt), atol=1e-6)     # τ=0: vanilla
    with pytest.raises(ConfigError, match="layers must be"):
        cfg(["ape", "headxl"], pe_options={"layers": "some"})


def test_padding_does_not_change_real_positions():
    torch.manual_seed(0)
    for pe in (["xl"], ["inxl"], ["ape", "headxl"], ["ape", "combination"]):
        m = build_model(cfg(pe, pe_options={"tau": 1} if len(pe) > 1 else {})).eval()
        src, tgt = batch(B=1, T=5)
        chan = xl_channel([[2, 3, 1, 0]])
        out = m(src, tgt, {"xl": chan})
        src_p = torch.cat([src, torch.zeros(1, 3, dtype=torch.long)], 1)
        chan_p = torch.cat([chan, torch.zeros(1, 3, dtype=torch.long)], 1)
        out_p = m(src_p, tgt, {"xl": chan_p})
        assert torch.allclose(out, out_p, atol=1e-5), pe


@pytest.mark.parametrize("H, ratio, tau", [(16, 0.25, 4), (8, 0.25, 2), (4, 0.25, 1), (2, 0.25, 1), (8, 0.0, 0),
                                           (8, 1.0, 8)])
def test_tau_from_ratio(H, ratio, tau):
    assert resolve_tau(TransformerConfig(d_model=H * 4, n_heads=H, pe=["ape"]), {"tau_ratio": ratio}) == tau


@pytest.mark.parametrize("pe, opts, msg", [
    (["ape", "headxl"], {"tau": 3}, r"tau .* \[0, n_heads=2\]"),
    (["ape", "combination"], {"tau": -1}, "tau"),
    (["ape", "headxl"], {"tau_ratio": 1.5}, "tau_ratio"),
    (["headxl"], {}, "list 'ape' too"),
    (["ape", "inxl"], {}, "replaces 'ape'"),
    (["ape", "headxl", "combination"], {}, "list one of them"),
    (["inxl"], {"xl_fusion_param": "low-rank"}, "xl_fusion_param"),
    (["xl"], {"tau": 1}, "not read by any"),
])
def test_config_errors_before_training(pe, opts, msg):
    with pytest.raises(ConfigError, match=msg):
        build_model(cfg(pe, pe_options=opts))


def test_missing_xl_channel_is_a_clear_error():
    m = build_model(cfg(["ape", "headxl"]))
    src, tgt = batch()
    with pytest.raises(ConfigError, match="headxl needs position channel 'xl'"):
        m(src, tgt)
    assert required_inputs(cfg(["ape", "headxl"])) == {"xl"}
    assert required_inputs(cfg(["ape", "rpe"])) == set()


@pytest.mark.parametrize("pe", [["none"], ["ape"], ["xl"], ["inxl"], ["ape", "headxl"], ["ape", "combination"]])
def test_encoder_free_variants_train_and_decode(pe):
    torch.manual_seed(0)
    m = build_model(cfg(pe, encoder_free=True, pe_options={"tau": 1} if len(pe) > 1 else {}))
    assert m.cfg.enc_layers == 0
    src, tgt = batch()
    chan = xl_channel([[4, 3, 2, 1, 0], [1, 0, 3, 2, 4]])
    m(src, tgt, {"xl": chan}).sum().backward()
    assert all(p.grad is not None for n, p in m.named_parameters() if "fusion" in n)
    m.eval()
    from xlpe.infer.beam import beam_search, greedy
    g = greedy(m, src, {"xl": chan}, max_len_a=0, max_len_b=4)
    b = beam_search(m, src, {"xl": chan}, beam=1, max_len_a=0, max_len_b=4)
    assert [h.tokens for h in g] == [h.tokens for h in b]


def test_encoder_free_headxl_identities():
    """Encoder-free HeadXL: the XL heads' keys/values come from X + PE_XL in every cross-attention [I];
    tau=H with the identity order, and tau=0, are the encoder-free APE model."""
    torch.manual_seed(0)
    ape = build_model(cfg(["ape"], encoder_free=True)).eval()
    src, tgt = batch()
    ref = ape(src, tgt)
    ident, other = xl_channel([[0, 1, 2, 3, 4]] * 2), xl_channel([[4, 3, 2, 1, 0], [1, 0, 3, 2, 4]])
    for tau, chan, same in ((2, ident, True), (0, other, True), (1, other, False)):
        m = build_model(cfg(["ape", "headxl"], encoder_free=True, pe_options={"tau": tau})).eval()
        m.load_state_dict(ape.state_dict())
        assert torch.allclose(m(src, tgt, {"xl": chan}), ref, atol=1e-5) == same
