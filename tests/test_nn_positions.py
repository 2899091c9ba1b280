"""The position-encoding plugin interface: names, options, channels, and drop-in plugins written here the way
later encodings (HeadXL, structural relative PE, DPE) will be written, without touching transformer.py."""

import pytest
import torch
from torch import nn

from xlpe.errors import ConfigError
from xlpe.nn import positions
from xlpe.nn.positions import HeadInput, PositionEncoding, RelativeTerms, sinusoid
from xlpe.nn.transformer import TransformerConfig, build_model




def tiny(**kw):
    kw.setdefault("src_vocab_size", 16)
    kw.setdefault("dropout", 0.0)
    return TransformerConfig.from_preset("tiny", **kw)


def batch(B=2, T=6, V=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, T), generator=g)
    src[:, -1] = 3
    tgt = torch.randint(4, V, (B, T - 1), generator=g)
    return src, tgt


# --- names and options --------------------------------------------------------------------------------------

def test_unknown_name_lists_valid_names():
    with pytest.raises(ConfigError, match=r"unknown position encoding 'bogus'.*ape.*rpe"):
        tiny(pe=["ape", "bogus"])


@pytest.mark.parametrize("pe", [["ape", "ape"], ["none", "ape"], "ape"])
def test_bad_lists(pe):
    with pytest.raises(ConfigError):
        tiny(pe=pe)


def test_options_are_checked_and_read():
    with pytest.raises(ConfigError, match="tau"):
        tiny(pe=["ape"], pe_options={"tau": 2})
    m = build_model(tiny(pe=["rpe"], pe_options={"rpe_values": False}))
    assert m.encoder.pe[0].table_v is None
    m = build_model(tiny(pe=["rpe"], rpe_k=3))
    assert m.encoder.pe[0].table_k.shape == (2, 7, 16)      # (layers, 2k+1, d_k): shared by the 2 heads


def test_encoder_free_rejects_rpe():
    with pytest.raises(ConfigError, match="not defined for encoder-free"):
        tiny(pe=["ape", "rpe"], encoder_free=True)


def test_ape_term_is_sinusoid_of_seq_or_channel():
    m = build_model(tiny())
    src, _ = batch()
    ctx = positions.EncodingContext(src, torch.zeros(2, 6, 32), src.eq(0))
    assert torch.equal(m.encoder.pe[0].input_term(ctx), sinusoid(torch.arange(6), 32).expand(2, 6, 32))
    seq = torch.tensor([[5, 4, 3, 2, 1, 0], [0, 1, 2, 3, 4, 5]])
    ctx.channels["seq"] = seq
    assert torch.equal(m.encoder.pe[0].input_term(ctx), sinusoid(seq, 32))


def test_learned_positions_and_max_len():
    m = build_model(tiny(pe=["learned"], max_len=8))
    src, tgt = batch()
    m(src, tgt).sum().backward()
    assert m.encoder.pe[0].table.weight.grad[:6].abs().sum() > 0
    with pytest.raises(ConfigError, match="max_len"):
        m(torch.full((1, 9), 5), tgt[:1])


def test_missing_or_misshapen_channel(monkeypatch):
    monkeypatch.setitem(positions.ENCODINGS, "toy_xl", ToyXL)
    m = build_model(tiny(pe=["toy_xl"]))
    src, tgt = batch()
    with pytest.raises(ConfigError, match="needs position channel 'xl'"):
        m(src, tgt)
    with pytest.raises(ConfigError, match="shape"):
        m(src, tgt, channels={"xl": torch.zeros(2, 5, dtype=torch.long)})
    m(src, tgt, channels={"xl": torch.arange(6).flip(0).expand(2, 6)})


# --- drop-in plugins ----------------------------------------------------------------------------------------

class ToyXL(PositionEncoding):
    """Input term from a channel (XL PE shape)."""
    name = "toy_xl"

    def input_term(self, ctx):
        return sinusoid(ctx.channel("xl"), self.cfg.d_model)


class ToyHeadXL(PositionEncoding):
    """HeadXL shape (SPEC §4.4): heads < tau of layer 0 read X + PE(xl); no parameters."""
    name = "toy_headxl"
    options = {"tau": 1}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def head_input(self, ctx, layer, x=None):
        if layer != 0:
            return None
        heads = torch.arange(self.cfg.n_heads) < self.option("tau")
        return HeadInput(self.drop(ctx.emb + sinusoid(ctx.channel("xl"), self.cfg.d_model)), heads)


class ToyStructRel(PositionEncoding):
    """Structural relative shape (SPEC §3.3): a per-sentence index from channel tree_rel, own tables."""
    name = "toy_struct_rel"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.k = 2
        self.table_k = nn.Parameter(torch.randn(cfg.enc_layers, 2 * self.k + 1, cfg.d_model // cfg.n_heads))
        self.table_v = nn.Parameter(torch.randn(cfg.enc_layers, 2 * self.k + 1, cfg.d_model // cfg.n_heads))

    def relative(self, ctx, layer):
        index = ctx.channel("tree_rel").clamp(-self.k, self.k) + self.k
        return RelativeTerms(index, self.table_k[layer], self.table_v[layer])


class ToyDPE(PositionEncoding):
    """DPE shape (SPEC §6.1-6.3): a term added after the input dropout, and an auxiliary MSE loss in ctx.aux."""
    name = "toy_dpe"
    after_dropout = True

    def __init__(self, cfg):
        super().__init__(cfg)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def input_term(self, ctx):
        z = self.proj(ctx.emb + sinusoid(ctx.seq(), self.cfg.d_model))
        target = ctx.channel("dpe_target")
        ok = target.ge(0) & ~ctx.pad_mask
        ctx.aux["dpe_mse"] = ((z - sinusoid(target.clamp(min=0), self.cfg.d_model)) ** 2)[ok].mean()
        return z


@pytest.fixture
def toys(monkeypatch):
    for cls in (ToyXL, ToyHeadXL, ToyStructRel, ToyDPE):
        monkeypatch.setitem(positions.ENCODINGS, cls.name, cls)


def test_headxl_plugin_tau0_and_identity_reproduce_vanilla(toys):
    """SPEC §12.7: tau=0 is the vanilla model; tau=H with PE_XL = PE_abs too; tau=1 with another order differs."""
    torch.manual_seed(0)
    vanilla = build_model(tiny()).eval()
    src, tgt = batch()
    ref = vanilla(src, tgt)
    seq = torch.arange(6).expand(2, 6)
    for tau, xl, same in ((0, seq.flip(1), True), (2, seq, True), (1, seq.flip(1), False)):
        m = build_model(tiny(pe=["ape", "toy_headxl"], pe_options={"tau": tau})).eval()
        m.load_state_dict(vanilla.state_dict())     # no extra parameters
        out = m(src, tgt, channels={"xl": xl})
        assert torch.allclose(out, ref, atol=1e-5) == same


def test_struct_rel_plugin_combines_with_rpe(toys):
    torch.manual_seed(0)
    m = build_model(tiny(pe=["ape", "rpe", "toy_struct_rel"]))
    src, tgt = batch()
    tree_rel = torch.randint(-4, 5, (2, 6, 6))
    m(src, tgt, channels={"tree_rel": tree_rel}).sum().backward()
    assert m.encoder.pe[1].table_k.grad.abs().sum() > 0 and m.encoder.pe[2].table_k.grad.abs().sum() > 0


def test_dpe_plugin_aux_loss_reaches_the_caller(toys):
    torch.manual_seed(0)
    m = build_model(tiny(pe=["toy_dpe"], dropout=0.3))
    src, tgt = batch()
    target = torch.tensor([[1, 0, 2, -1, 3, 4], [0, 1, 2, 3, 4, 5]])
    logits, aux = m(src, tgt, channels={"dpe_target": target}, return_aux=True)
    assert set(aux) == {"dpe_mse"}
    (logits.logsumexp(-1).mean() + aux["dpe_mse"]).backward()
    assert m.encoder.pe[0].proj.weight.grad.abs().sum() > 0
    assert build_model(tiny()).forward(src, tgt, return_aux=True)[1] == {}
