"""Structural position encoding plug-ins (Wang et al. 2019; SPEC §3): struct_abs closed forms."""

import pytest
import torch

from xlpe.errors import ConfigError
from xlpe.nn.positions import sinusoid
from xlpe.nn.transformer import TransformerConfig, build_model


def cfg(pe, **kw):
    kw.setdefault("src_vocab_size", 16)
    kw.setdefault("dropout", 0.0)
    return TransformerConfig.from_preset("tiny", pe=pe, **kw)


def batch():
    torch.manual_seed(1)
    src = torch.randint(4, 16, (2, 6))
    src[:, -1] = 3
    return src, torch.randint(4, 16, (2, 5))


def test_structural_only_with_depth_equal_to_position_is_ape():
    src, tgt = batch()
    seq = torch.arange(6).expand(2, 6)
    ape = build_model(cfg(["ape"])).eval()
    stru = build_model(cfg(["struct_abs"])).eval()
    stru.load_state_dict(ape.state_dict())
    assert torch.allclose(stru(src, tgt, {"depth": seq}), ape(src, tgt), atol=1e-6)


def test_add_fusion_with_pe_stru_equal_to_pe_seq_doubles_it():
    src, _ = batch()
    m = build_model(cfg(["ape", "struct_abs"], pe_options={"struct_fusion": "add"})).eval()
    seq = torch.arange(6).expand(2, 6)
    from xlpe.nn.positions import EncodingContext
    ctx = EncodingContext(src, torch.zeros(2, 6, 32), src.eq(0), {"depth": seq})
    total = sum(p.input_term(ctx) for p in m.encoder.pe)
    assert torch.allclose(total, 2 * sinusoid(seq, 32))
    assert m.encoder.pe[1].replaces() == set()


def test_tanh_fusion_replaces_ape_and_with_zero_weights_gives_no_position():
    src, tgt = batch()
    depth = torch.tensor([[1, 0, 2, 2, 1, 3], [0, 1, 1, 2, 3, 4]])
    fused = build_model(cfg(["ape", "struct_abs"])).eval()
    assert fused.encoder.pe[1].replaces() == {"ape"}
    with torch.no_grad():
        fused.encoder.pe[1].U.weight.zero_()
        fused.encoder.pe[1].V.weight.zero_()
    none = build_model(cfg(["none"])).eval()
    none.load_state_dict({k: v for k, v in fused.state_dict().items() if ".pe." not in k})
    assert torch.allclose(fused(src, tgt, {"depth": depth}), none(src, tgt), atol=1e-6)   # tanh(0) = 0, no APE
    with pytest.raises(ConfigError, match="struct_fusion"):
        cfg(["ape", "struct_abs"], pe_options={"struct_fusion": "mul"})
    with pytest.raises(ConfigError, match="depth"):
        fused(src, tgt)                      # the channel is required
