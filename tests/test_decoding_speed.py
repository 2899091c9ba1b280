"""Decoding's speed options and internals: vocabulary shortlists (xlpe.infer.shortlist), int8 linear layers and
the stacked projections of a decoding step."""

import copy as copy_module
import dataclasses
import pickle

import pytest
import torch

from _nmt_toy import toy, trained_checkpoint  # noqa: F401  (toy is a fixture)
from xlpe.errors import ConfigError, FormatError
from xlpe.infer.beam import beam_search, greedy
from xlpe.infer.translate import check_dtype, decoding_model, is_quantized
from xlpe.infer.shortlist import build_shortlist, load_shortlist, prepare_shortlist
from xlpe.nn.checkpoint import load_model
from xlpe.nn import transformer as transformer_module
from xlpe.nn.device import device_policy
from xlpe.nn.transformer import TransformerConfig, build_model


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return build_model(TransformerConfig.from_preset("tiny", src_vocab_size=40)).eval()


def batch(cfg, seed=1, B=5, S=7):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, cfg.src_vocab_size, (B, S), generator=g)
    src[:, -1] = cfg.eos_id
    src[0, 4:] = cfg.pad_id
    src[0, 3] = cfg.eos_id
    return src


def test_table_ranks_cooccurrence_and_keeps_the_frequent_pieces():
    # source 5 always meets target 9, once target 8; target 7 is in every sentence (the most frequent one)
    pairs = [([5, 6], [7, 9]), ([5], [7, 9, 8]), ([6], [7, 8]), ([4], [7, 10])]
    sl = build_shortlist(pairs, 12, 12, per_source=2, frequent=1, exclude=(0, 2))
    assert sl.frequent.tolist() == [7]
    assert sl.table[5].tolist() == [9, 8]           # 2/2 before 1/2; 7 is left to the frequent list
    assert sl.table[6].tolist() == [8, 9]           # 1/2 each: the smaller id first
    assert sl.table[4].tolist() == [10, -1]
    assert sl.table[0].tolist() == [-1, -1]         # PAD (never in a source) lists nothing
    w = torch.randn(12, 3)
    v = sl.batch(torch.tensor([[5, 3, 0]]), w, (0, 2, 3))
    assert v.ids.tolist() == [3, 7, 8, 9]           # the lists of 5 and EOS(3, none), the frequent piece, EOS
    assert v.ids[v.eos_col] == 3 and torch.equal(v.weight, w[v.ids])


def test_save_load_and_the_errors(tmp_path):
    sl = build_shortlist([([5], [9])], 12, 12, per_source=1, frequent=0)
    sl.save(tmp_path / "t.pt")
    back = load_shortlist(tmp_path / "t.pt")
    assert torch.equal(back.table, sl.table) and back.tgt_vocab == 12
    torch.save({"x": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(FormatError, match="not a shortlist"):
        load_shortlist(tmp_path / "other.pt")
    cfg = tiny_model().cfg
    with pytest.raises(ConfigError, match="shortlist-build"):
        prepare_shortlist(tmp_path / "missing.pt", cfg, (None, None))
    with pytest.raises(ConfigError, match="vocabularies of 12 source"):
        prepare_shortlist(tmp_path / "t.pt", cfg, (None, None))


def test_decoding_with_a_shortlist_stays_inside_it_and_with_every_piece_picks_the_same_tokens():
    m = tiny_model()
    cfg = m.cfg
    src = batch(cfg)
    every = build_shortlist([([4], list(range(cfg.tgt_vocab)))], cfg.src_vocab_size, cfg.tgt_vocab,
                            per_source=0, frequent=cfg.tgt_vocab, exclude=(cfg.pad_id, cfg.bos_id))
    # greedy's choice per step is the row's argmax, which a normaliser without PAD and BOS does not move
    assert [h.tokens for h in greedy(m, src, shortlist=every)] == [h.tokens for h in greedy(m, src)]
    pairs = [([s], [(3 * s) % cfg.tgt_vocab, (5 * s) % cfg.tgt_vocab]) for s in range(4, cfg.src_vocab_size)]
    small = build_shortlist(pairs, cfg.src_vocab_size, cfg.tgt_vocab, per_source=2, frequent=3,
                            exclude=(cfg.pad_id, cfg.bos_id))
    allowed = set(small.batch(src, m.output_weight, (cfg.pad_id, cfg.bos_id, cfg.eos_id)).ids.tolist())
    assert len(allowed) < cfg.tgt_vocab - 2
    for stop in ("exhaust", "fairseq"):
        for h in beam_search(m, src, beam=3, stop=stop, shortlist=small):
            assert set(h.tokens) <= allowed and h.score <= 0
    assert all(set(h.tokens) <= allowed for h in greedy(m, src, shortlist=small))


def test_stacked_projections_follow_weight_changes():
    m = tiny_model()
    src = batch(m.cfg)
    with torch.no_grad():
        before = m.decode(src[:, :4], m.encode(src))
        for p in m.parameters():           # an in-place update, as an optimiser step or load_state_dict makes
            p.mul_(1.5)
        after = m.decode(src[:, :4], m.encode(src))
    with torch.enable_grad():              # the separate projections (autograd on): the reference
        expect = m.decode(src[:, :4], m.encode(src))
    assert not torch.allclose(before, after)
    assert torch.allclose(after, expect, atol=1e-5)


def test_output_projection_at_inference_is_onednn_with_a_packed_weight_that_follows_updates(monkeypatch):
    m = tiny_model()
    src = batch(m.cfg)
    if not device_policy("cpu").packed_output_projection:
        pytest.skip("this PyTorch has no oneDNN linear kernel: the plain product is the only path")
    calls = []
    real = torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(transformer_module.torch.ops.mkldnn, "_linear_pointwise",
                        lambda *a: calls.append(a[0].shape) or real(*a), raising=False)
    with torch.no_grad():
        packed = m.decode(src[:, :4], m.encode(src))
        assert calls == [(src.shape[0] * 4, m.cfg.d_model)]
        with torch.enable_grad():
            plain = m.decode(src[:, :4], m.encode(src))     # autograd on: the plain product
        assert len(calls) == 1 and torch.allclose(packed, plain, atol=1e-5)
        m.output_weight.mul_(1.5)                            # packed again after an in-place update
        with torch.enable_grad():
            expect = m.decode(src[:, :4], m.encode(src))
        assert torch.allclose(m.decode(src[:, :4], m.encode(src)), expect, atol=1e-5)
        assert not torch.allclose(expect, plain)
        n = len(calls)
        m.bfloat16()                                         # a bf16-cast model: the plain product
        m.decode(src[:, :4], m.encode(src))
        assert len(calls) == n
    m.float()
    for copy in (copy_module.deepcopy(m), pickle.loads(pickle.dumps(m))):   # the packed copy stays outside
        with torch.no_grad():
            out = copy.decode(src[:, :4], copy.encode(src))
        assert torch.allclose(out, copy.decode(src[:, :4], copy.encode(src)), atol=1e-5)
    assert m.state_dict().keys() == tiny_model().state_dict().keys()


def test_without_the_policy_the_output_projection_is_the_plain_product(monkeypatch):
    m = tiny_model()
    src = batch(m.cfg)
    off = dataclasses.replace(device_policy("cpu"), packed_output_projection=False)
    monkeypatch.setattr(transformer_module, "device_policy", lambda device: off)
    monkeypatch.setattr(transformer_module.torch.ops.mkldnn, "_linear_pointwise",
                        lambda *a: pytest.fail("the oneDNN kernel was called"), raising=False)
    with torch.no_grad():
        out = m.decode(src[:, :4], m.encode(src))
    with torch.enable_grad():
        assert torch.equal(out, m.decode(src[:, :4], m.encode(src)))


def test_cli_builds_the_table_once_and_decodes_inside_the_shortlist(toy, tmp_path, capsys):  # noqa: F811
    from xlpe.cli import main
    ckpt = trained_checkpoint(toy, tmp_path)
    model, cfg, (sw, _) = load_model(ckpt)
    inp, out, table = tmp_path / "in.txt", tmp_path / "out.txt", tmp_path / "shortlist.pt"
    inp.write_text("w1 w2 w3\nw4 w5\n", encoding="utf-8")
    args = ["translate", "--checkpoint", str(ckpt), "--input", str(inp), "--output", str(out), "--threads", "1",
            "--shortlist", str(table)]
    assert main(args + ["--shortlist-build", str(toy["src"]), str(toy["tgt"]), "--shortlist-size", "2", "5"]) == 0
    sl = load_shortlist(table)
    assert sl.table.shape == (cfg.src_vocab_size, 2) and sl.frequent.numel() == 5
    lines = out.read_text(encoding="utf-8").splitlines()
    allowed = set(sw.sp.id_to_piece(i) for i in sl.frequent.tolist() + sl.table.flatten().tolist() if i >= 0)
    assert len(lines) == 2 and all(set(sw.encode(line.split()).pieces) <= allowed for line in lines if line)
    table.write_bytes(b"not a table")             # an existing table is read, never built again
    assert main(args + ["--shortlist-build", str(toy["src"]), str(toy["tgt"])]) != 0
    assert "not a shortlist table" in capsys.readouterr().err


def test_int8_decoding_quantises_a_copy_of_the_linear_layers_once():
    m = tiny_model()
    src = batch(m.cfg)
    q = decoding_model(m, "int8")
    assert is_quantized(q) and not is_quantized(m) and decoding_model(q, "int8") is q
    with pytest.raises(ConfigError, match="quantised"):
        decoding_model(q, "bfloat16")
    with pytest.raises(ConfigError, match="CPU only"):
        check_dtype("int8", torch.device("cuda"))
    # int8 weights move the log-probabilities a little, not a lot
    tgt = torch.full((src.shape[0], 1), m.cfg.bos_id)
    with torch.inference_mode():
        lp_f, lp_q = (torch.log_softmax(x.decode(tgt, x.encode(src)), -1) for x in (m, q))
    assert 0 < float((lp_f - lp_q).abs().max()) < 0.2
    assert len(greedy(q, src)) == src.shape[0]


def test_bf16_decoding_on_cpu_runs_every_linear_layer_as_a_packed_bf16_product(monkeypatch):
    """``decoding_model(m, "bfloat16")`` on CPU keeps the weights float32 and runs every linear layer (stacked Q/K/V
    and K/V, queries, outputs, both feed-forward layers with ReLU fused, the output projection) as a bf16 product
    through oneDNN, each weight packed once and again after an in-place update; the logits are float32's within
    bf16 rounding; training and float32 decoding never take it."""
    import xlpe.nn.device as device
    if not device_policy("cpu").bf16_products:
        pytest.skip("oneDNN's linear kernel takes no bf16 with this PyTorch or CPU: bf16 decoding casts the model")
    m = tiny_model()
    src = batch(m.cfg)
    mb = decoding_model(m, "bfloat16")
    assert next(mb.parameters()).dtype == torch.float32 and decoding_model(mb, "bfloat16") is mb
    with torch.no_grad():
        expect = m.decode(src[:, :4], m.encode(src))
    calls, plain, packs = [], [], []
    real, real_linear, real_pack = (torch.ops.mkldnn._linear_pointwise, torch.nn.functional.linear,
                                    torch.ops.mkldnn._reorder_linear_weight)
    monkeypatch.setattr(device.torch.ops.mkldnn, "_linear_pointwise",
                        lambda *a: calls.append((a[0].dtype, a[3])) or real(*a), raising=False)
    monkeypatch.setattr(device.F, "linear", lambda *a: plain.append(1) or real_linear(*a))
    monkeypatch.setattr(device.torch.ops.mkldnn, "_reorder_linear_weight",
                        lambda w: packs.append(w.dtype) or real_pack(w), raising=False)
    layers = m.cfg.enc_layers * 4 + m.cfg.dec_layers * 7 + 1     # products of one encoding and one decoding step
    with torch.no_grad():
        beam_search(mb, src, beam=3, lenpen=1.0)
        calls.clear()
        out = mb.decode(src[:, :4], mb.encode(src))
    assert len(calls) == layers and all(dt == torch.bfloat16 for dt, _ in calls)
    assert [a for _, a in calls].count("relu") == m.cfg.enc_layers + m.cfg.dec_layers
    assert not plain and packs == [torch.bfloat16] * layers         # each weight packed once
    assert out.dtype == torch.float32 and torch.allclose(out, expect, atol=0.05)
    with torch.no_grad():
        for p in mb.parameters():                                   # an in-place update: packed again
            p.mul_(1.5)
        after = mb.decode(src[:, :4], mb.encode(src))
        fp32 = decoding_model(mb, "float32")                        # unmarked: float32 products
        calls.clear()
        assert torch.allclose(after, fp32.decode(src[:, :4], fp32.encode(src)), atol=0.1)
    assert all(dt == torch.float32 for dt, _ in calls) and not torch.allclose(after, out, atol=0.1)
    calls.clear()
    q = decoding_model(mb, "int8")                                  # int8 from a marked model: no bf16 product
    with torch.no_grad():
        q.decode(src[:, :4], q.encode(src))
    assert all(dt == torch.float32 for dt, _ in calls)
    calls.clear()
    mb.train()(src, src[:, :4]).float().sum().backward()            # training: the plain products
    assert not calls and plain
