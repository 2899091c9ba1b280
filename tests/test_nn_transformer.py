"""The Transformer: config, padding invariance for every encoding, incremental decoding, variants."""

import pytest
import torch

from xlpe.errors import ConfigError
from xlpe.nn.transformer import PRESETS, DecoderCache, TransformerConfig, build_model, count_parameters




def tiny(**kw):
    kw.setdefault("src_vocab_size", 16)
    return TransformerConfig.from_preset("tiny", **kw)


def pad_right(x, n, pad=0):
    return torch.cat((x, torch.full((x.shape[0], n), pad, dtype=x.dtype)), 1)


def toy_batch(seed=0, B=3, S=7, T=6, V=16):
    """Right-padded sources with EOS (3) and different lengths; decoder inputs starting with BOS (2)."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    for b, n in enumerate([S, S - 2, S - 4][:B]):
        src[b, n - 1] = 3
        src[b, n:] = 0
    tgt_in = torch.randint(4, V, (B, T), generator=g)
    tgt_in[:, 0] = 2
    return src, tgt_in


# --- config -------------------------------------------------------------------------------------------------

def test_presets_and_round_trip():
    assert set(PRESETS) == {"tiny", "small", "base", "big"}
    big = TransformerConfig.from_preset("big", src_vocab_size=100)
    assert (big.d_model, big.n_heads, big.enc_layers, big.d_ff, big.dropout) == (1024, 16, 6, 4096, 0.3)
    cfg = tiny(pe=["ape", "rpe"], rpe_k=4, tgt_vocab_size=20, pre_norm=True)
    d = cfg.to_dict()
    assert TransformerConfig.from_dict(d) == cfg and d["pe"] == ["ape", "rpe"]
    with pytest.raises(ConfigError, match="unknown TransformerConfig field"):
        TransformerConfig.from_dict({**d, "n_layers": 3})
    with pytest.raises(ConfigError, match="unknown preset"):
        TransformerConfig.from_preset("huge")
    with pytest.raises(ConfigError, match="divisible"):
        tiny(n_heads=3)
    with pytest.raises(ConfigError, match="share_embeddings"):
        tiny(tgt_vocab_size=20, share_embeddings=True)


def test_weight_initialisations():
    """``init="xavier"``: Glorot-uniform everywhere, zero biases; ``init="fairseq"``: Q/K/V Glorot with gain
    1/sqrt(2), output projection Glorot, feed-forward PyTorch's default ±1/sqrt(fan_in) (biases included)."""
    torch.manual_seed(0)
    d, ff = 64, 256
    glorot = (6 / (d + d)) ** 0.5
    for init in ("xavier", "fairseq"):
        layer = build_model(tiny(d_model=d, n_heads=4, d_ff=ff, init=init)).encoder.layers[0]
        a, f = layer.self_attn, layer.ffn.net
        q_bound = glorot * (2 ** -0.5 if init == "fairseq" else 1.0)
        for lin, bound in ((a.q_proj, q_bound), (a.v_proj, q_bound), (a.out_proj, glorot)):
            w = lin.weight.abs().max().item()
            assert 0.95 * bound < w <= bound and not lin.bias.any()
        fc1, fc2 = f[0], f[3]
        if init == "xavier":
            assert 0.95 * (6 / (d + ff)) ** 0.5 < fc2.weight.abs().max() <= (6 / (d + ff)) ** 0.5
            assert not fc1.bias.any() and not fc2.bias.any()
        else:
            assert 0.95 * ff ** -0.5 < fc2.weight.abs().max() <= ff ** -0.5
            assert 0.9 * d ** -0.5 < fc1.bias.abs().max() <= d ** -0.5
    with pytest.raises(ConfigError, match="init must be one of"):
        tiny(init="kaiming")


def expected_parameters(c: TransformerConfig) -> int:
    """Parameter count written out from the architecture (Vaswani §3), for a config without plugins but rpe."""
    d, ff = c.d_model, c.d_ff
    mha, ffn, ln = 4 * (d * d + d), 2 * d * ff + ff + d, 2 * d
    n = c.src_vocab_size * d + (0 if c.share_embeddings else c.tgt_vocab * d) + (0 if c.tie_output else c.tgt_vocab * d)
    n += c.enc_layers * (mha + ffn + 2 * ln) + c.dec_layers * (2 * mha + ffn + 3 * ln)
    n += 2 * ln if c.pre_norm else 0
    n += c.enc_layers * 2 * (2 * c.rpe_k + 1) * (d // c.n_heads) if "rpe" in c.pe else 0
    return n


def test_parameter_count_matches_the_architecture():
    for kw in ({}, {"pe": ["ape", "rpe"], "pre_norm": True}, {"tgt_vocab_size": 20, "tie_output": False},
               {"share_embeddings": True}):
        cfg = tiny(**kw)
        assert count_parameters(build_model(cfg)) == expected_parameters(cfg)
    # Transformer base, shared 37k vocabulary: 63.1M by this count (Vaswani Table 3 reports 65M)
    assert 60e6 < expected_parameters(TransformerConfig.from_preset("base", src_vocab_size=37000,
                                                                    share_embeddings=True)) < 66e6


def test_embedding_sharing_and_tying():
    m = build_model(tiny(share_embeddings=True, tie_output=True))
    assert m.encoder.embed is m.decoder.embed and m.decoder.out is None
    untied = build_model(tiny(tgt_vocab_size=20, tie_output=False))
    assert count_parameters(untied) == count_parameters(build_model(tiny(tgt_vocab_size=20))) + 20 * 32
    src, tgt_in = toy_batch()
    assert untied(src, tgt_in).shape == (3, 6, 20)
    # features_only: the decoder outputs before the projection, and logits = features @ output_weight.T
    for model, table in ((m, m.decoder.embed.weight), (untied, untied.decoder.out.weight)):
        model.eval()
        feats, aux = model(src, tgt_in, return_aux=True, features_only=True)
        assert feats.shape == (3, 6, 32) and model.output_weight is table
        assert aux == model(src, tgt_in, return_aux=True)[1]
        torch.testing.assert_close(feats @ model.output_weight.t(), model(src, tgt_in))


# --- padding invariance -------------------------------------------------------------------------------------

@pytest.mark.parametrize("pe", [["none"], ["ape"], ["learned"], ["rpe"], ["ape", "rpe"], ["learned", "rpe"],
                                ["disan"], ["ape", "disan"], ["rpe", "disan"]])
@pytest.mark.parametrize("pre_norm", [False, True])
def test_padding_never_changes_real_positions(pe, pre_norm):
    torch.manual_seed(0)
    m = build_model(tiny(pe=pe, pre_norm=pre_norm)).eval()
    src, tgt_in = toy_batch()
    real = src.ne(0)
    enc = m.encode(src)
    ref = m.decode(tgt_in, enc)
    for channels in (None, {"seq": torch.arange(10).expand(3, 10)}):
        enc2 = m.encode(pad_right(src, 3), channels)           # 3 more pad columns everywhere
        assert torch.allclose(enc2.memory[:, :7][real], enc.memory[real], atol=1e-5)
        out = m.decode(pad_right(tgt_in, 2), enc2)[:, :6]     # padded target too (causal: no effect)
        assert torch.allclose(out, ref, atol=1e-5)
    # a sentence decoded alone equals the same sentence in a padded batch
    alone = m(src[2:, :3], tgt_in[2:])
    assert torch.allclose(alone, ref[2:], atol=1e-5)


def test_encoder_free_forward_backward_and_padding():
    torch.manual_seed(0)
    for pe in (["none"], ["ape"], ["learned"]):
        cfg = tiny(pe=pe, encoder_free=True)
        assert cfg.enc_layers == 0
        m = build_model(cfg)
        assert len(m.encoder.layers) == 0
        src, tgt_in = toy_batch()
        m(src, tgt_in).logsumexp(-1).sum().backward()
        assert m.encoder.embed.weight.grad.abs().sum() > 0
        m.eval()
        assert torch.allclose(m(pad_right(src, 2), tgt_in), m(src, tgt_in), atol=1e-5)
    with pytest.raises(ConfigError, match="encoder_free"):
        tiny(enc_layers=0)


# --- decoding API -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pre_norm", [False, True])
def test_incremental_decoding_equals_full_recompute(pre_norm):
    torch.manual_seed(0)
    m = build_model(tiny(pe=["ape", "rpe"], pre_norm=pre_norm)).eval()
    src, tgt_in = toy_batch()
    enc = m.encode(src)
    full, full_attn = m.decode(tgt_in, enc, need_attn_layer=-1)
    cache = DecoderCache()
    steps = [m.decode(tgt_in[:, t:t + 1], enc, need_attn_layer=1, cache=cache) for t in range(6)]
    assert cache.length == 6
    assert torch.allclose(torch.cat([s[0] for s in steps], 1), full, atol=1e-5)
    assert torch.allclose(torch.cat([s[1] for s in steps], 2), full_attn, atol=1e-5)
    # chunks of several tokens after a cache, and reordering the batch
    cache = DecoderCache()
    a = m.decode(tgt_in[:, :4], enc, cache=cache)
    cache.reorder(torch.tensor([2, 0, 1]))
    b = m.decode(tgt_in[[2, 0, 1], 4:], enc.index_select(torch.tensor([2, 0, 1])), cache=cache)
    assert torch.allclose(torch.cat((a[[2, 0, 1]], b), 1), full[[2, 0, 1]], atol=1e-5)


@pytest.mark.parametrize("grad", [False, True])
def test_cache_reorders_compose_before_the_next_step(grad):
    """Reorders are noted and applied as the next step appends its keys (one gather, no second copy); two in a row
    (beams re-ranked, then a sentence dropped) equal their composition, with autograd recording or not."""
    torch.manual_seed(0)
    m = build_model(tiny(pe=["ape"])).eval()
    src, tgt_in = toy_batch()
    enc = m.encode(src)
    with torch.set_grad_enabled(grad):
        full = m.decode(tgt_in, enc)
        cache = DecoderCache()
        m.decode(tgt_in[:, :3], enc, cache=cache)
        first, then = torch.tensor([2, 2, 0]), torch.tensor([2, 0])
        cache.reorder_self(first)
        rows = first[then]                          # the sentences whose histories the rows now hold
        cache.reorder(then, cross_index=rows)       # the cross-attention rows follow them (at once)
        assert torch.equal(cache.layers[0]["self"]["rows"], rows)
        b = m.decode(tgt_in[rows, 3:4], enc.index_select(rows), cache=cache)
    assert "rows" not in cache.layers[0]["self"] and cache.layers[0]["self"]["k"].shape[::2] == (2, 4)
    assert torch.allclose(b[:, 0], full[rows, 3], atol=1e-5)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_beams_sharing_one_memory_row_equal_repeated_memory(pre_norm):
    """Beam search keeps one memory row per sentence for its K decoder rows: logits, attention and cached steps
    equal those of the memory repeated K times; reordering the cache keeps the two in step."""
    torch.manual_seed(0)
    m = build_model(tiny(pe=["ape", "rpe"], pre_norm=pre_norm)).eval()
    src, _ = toy_batch()
    K = 3
    enc = m.encode(src)
    rep = enc.index_select(torch.arange(3).repeat_interleave(K))
    tgt = torch.randint(4, 16, (3 * K, 4))
    with torch.no_grad():
        full, full_attn = m.decode(tgt, rep, need_attn_layer=-1)
        shared, shared_attn = m.decode(tgt, enc, need_attn_layer=-1)
        assert torch.allclose(shared, full, atol=1e-5) and torch.allclose(shared_attn, full_attn, atol=1e-6)
        c_rep, c_sh = DecoderCache(), DecoderCache()
        m.decode(tgt[:, :2], rep, cache=c_rep)
        m.decode(tgt[:, :2], enc, cache=c_sh)
        assert c_sh.layers[0]["cross"]["k"].shape[0] == 3 and c_rep.layers[0]["cross"]["k"].shape[0] == 9
        perm = torch.tensor([2, 0, 1, 5, 5, 4, 6, 8, 7])    # beams re-ranked within their sentences
        c_rep.reorder(perm)
        c_sh.reorder_self(perm)
        a = m.decode(tgt[perm, 2:3], rep, cache=c_rep)
        b = m.decode(tgt[perm, 2:3], enc, cache=c_sh)
        assert torch.allclose(a, b, atol=1e-5)
        keep = torch.tensor([0, 1, 2, 6, 7, 8])              # sentence 1 is done and leaves
        c_rep.reorder(keep)
        c_sh.reorder(keep, cross_index=torch.tensor([0, 2]))
        a = m.decode(tgt[keep, 3:4], rep.index_select(keep), cache=c_rep)
        b = m.decode(tgt[keep, 3:4], enc.index_select(torch.tensor([0, 2])), cache=c_sh)
        assert torch.allclose(a, b, atol=1e-5)
    with pytest.raises(ConfigError, match="cannot share"):
        m.decode(tgt[:7], enc)


def test_decoding_only_some_slots_of_the_beam_grid_equals_decoding_all():
    """memory_slots: decoder rows that are slots of a grid of K per memory row (beam search decodes only its live
    beams) give the same logits and attention as the full grid, for any subset and order of slots."""
    torch.manual_seed(1)
    m = build_model(tiny(pe=["ape"])).eval()
    src, _ = toy_batch()
    K = 4
    enc = m.encode(src)
    tgt = torch.randint(4, 16, (3 * K, 1))
    slots = torch.tensor([0, 2, 3, 5, 11])                   # sentence 0: beams 0, 2, 3; 1: beam 1; 2: beam 3
    with torch.no_grad():
        full, full_attn = m.decode(tgt, enc, need_attn_layer=0)
        part, part_attn = m.decode(tgt[slots], enc, need_attn_layer=0, memory_slots=(slots, K))
    assert torch.allclose(part, full[slots], atol=1e-5) and torch.allclose(part_attn, full_attn[slots], atol=1e-6)


def test_attention_output_shape_and_layer_check():
    m = build_model(tiny()).eval()
    src, tgt_in = toy_batch()
    logits, attn = m.decode(tgt_in, m.encode(src), need_attn_layer=0)
    assert attn.shape == (3, 2, 6, 7)
    assert torch.allclose(attn.sum(-1), torch.ones(3, 2, 6))
    assert torch.all(attn[2, :, :, 3:] == 0)                    # source padding gets no attention
    with pytest.raises(ConfigError, match="need_attn_layer"):
        m.decode(tgt_in, m.encode(src), need_attn_layer=2)


def test_training_mode_dropout_and_gradients():
    torch.manual_seed(0)
    m = build_model(tiny(pe=["ape", "rpe"], dropout=0.3, attn_dropout=0.1, activation_dropout=0.1))
    src, tgt_in = toy_batch()
    a, b = m(src, tgt_in), m(src, tgt_in)
    assert not torch.allclose(a, b)                            # dropout is active in train mode
    a.logsumexp(-1).mean().backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None]
    assert missing == []
