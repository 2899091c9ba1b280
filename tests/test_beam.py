"""Greedy and batched beam search, teacher-forced attention (xlpe.infer.beam)."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from xlpe.errors import ConfigError
from xlpe.infer import beam_search, force_decode, greedy, length_penalty
from xlpe.infer.translate import decoding_model
from xlpe.nn.transformer import TransformerConfig, build_model




V = 16


def pad_batch(rows, bos=False, eos=True):
    rows = [([2] if bos else []) + list(r) + ([3] if eos else []) for r in rows]
    n = max(map(len, rows))
    return torch.tensor([r + [0] * (n - len(r)) for r in rows])


def random_sentences(n, lo, hi, seed):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(4, V, (int(torch.randint(lo, hi + 1, (1,), generator=g)),), generator=g).tolist()
            for _ in range(n)]


def random_model(seed=0, **kw):
    torch.manual_seed(seed)
    return build_model(TransformerConfig.from_preset("tiny", src_vocab_size=V, **kw))


def test_candidates_are_the_log_softmax_top_k_with_forced_eos_and_never_pad_or_bos():
    from xlpe.infer.beam import _next_candidates
    from xlpe.nn.transformer import DecoderCache
    m = random_model(3, tgt_vocab_size=300).eval()      # 300 pieces: the chunked top-k path
    src = pad_batch(random_sentences(4, 2, 6, seed=5))
    tokens = torch.tensor([[2], [7], [9], [11]])
    max_len = torch.tensor([5, 0, 5, 0])                 # rows 1 and 3 are at their maximum length: EOS alone
    with torch.inference_mode():
        enc = m.encode(src)
        lp = F.log_softmax(m.decode(tokens, enc)[:, -1], -1)
        top, ids, _ = _next_candidates(m, tokens, enc, DecoderCache(), None, 0, max_len, 6)
        want, want_ids = lp.index_fill(1, torch.tensor([0, 2]), float("-inf")).topk(6, -1)
    for i in (0, 2):
        assert ids[i].tolist() == want_ids[i].tolist()
        assert torch.allclose(top[i], want[i], atol=1e-5)
    for i in (1, 3):
        assert ids[i, 0] == 3 and torch.allclose(top[i, 0], lp[i, 3], atol=1e-5)
        assert torch.isinf(top[i, 1:]).all()


def test_length_penalty_formulas():
    assert length_penalty(4, 0.6) == pytest.approx(4 ** 0.6)
    assert length_penalty(4, 0.6, "gnmt") == pytest.approx((9 / 6) ** 0.6)
    with pytest.raises(ConfigError):
        length_penalty(4, 0.6, "marian")


@pytest.mark.parametrize("pe", [["ape"], ["ape", "rpe"]])
@pytest.mark.parametrize("stop", ["fairseq", "exhaust"])
def test_beam1_equals_greedy(pe, stop):
    m = random_model(pe=pe)
    src = pad_batch(random_sentences(6, 2, 7, seed=1))
    g = greedy(m, src, max_len_a=1.0, max_len_b=3)
    for lenpen in (0.0, 0.6, 1.0):
        b = beam_search(m, src, beam=1, lenpen=lenpen, max_len_a=1.0, max_len_b=3, stop=stop)
        assert [h.tokens for h in b] == [h.tokens for h in g]
        assert [h.logprob for h in b] == pytest.approx([h.logprob for h in g], abs=1e-4)
    assert all(len(h.tokens) <= int(1.0 * n + 3) for h, n in zip(g, src.ne(0).sum(1).tolist()))


@pytest.mark.parametrize("stop", ["fairseq", "exhaust"])
def test_batched_beam_equals_sentence_by_sentence(stop):
    m = random_model(pe=["ape", "rpe"])
    sents = random_sentences(5, 2, 7, seed=2)
    src = pad_batch(sents)
    batched = beam_search(m, src, beam=4, lenpen=1.0, return_attn_layer=-1, stop=stop)
    for s, hb in zip(sents, batched):
        (h1,) = beam_search(m, pad_batch([s]), beam=4, lenpen=1.0, return_attn_layer=-1, stop=stop)
        assert h1.tokens == hb.tokens
        assert h1.score == pytest.approx(hb.score, abs=1e-4)
        assert torch.allclose(h1.attn, hb.attn, atol=1e-4)
        assert hb.attn.shape == (len(hb.tokens) + 1, len(s) + 1)
        assert torch.allclose(hb.attn.sum(-1), torch.ones(len(hb.tokens) + 1), atol=1e-4)


def test_decoding_steps_give_the_same_beams_with_sdpa_or_the_explicit_product(monkeypatch):
    """``SDPA_FOR_ONE_QUERY`` only picks the kernel of a decoding step's attention on the layers' general path (the
    lean step, :mod:`xlpe.nn.decoding_step`, turned off): hypotheses and scores agree."""
    from xlpe.nn import attention
    monkeypatch.setattr(attention, "lean_plan", lambda *a, **k: None)
    m = random_model(pe=["ape"])
    src = pad_batch(random_sentences(6, 2, 9, seed=4))
    out = {}
    for flag in (True, False):
        monkeypatch.setattr(attention, "SDPA_FOR_ONE_QUERY", flag)
        out[flag] = beam_search(m, src, beam=4, lenpen=0.6)
    assert [h.tokens for h in out[True]] == [h.tokens for h in out[False]]
    assert [h.score for h in out[True]] == pytest.approx([h.score for h in out[False]], abs=1e-5)


@pytest.mark.parametrize("lenpen,style", [(0.0, "fairseq"), (1.0, "fairseq"), (0.6, "gnmt")])
def test_wide_beam_finds_the_exhaustive_optimum(lenpen, style):
    """Three generable tokens (UNK=1, 4, 5) and at most 2 of them: a beam of 16 keeps every prefix, so it must
    return the best of all 13 hypotheses under ``logprob / lp(n)``, with logprobs recomputed by teacher forcing."""
    import itertools

    torch.manual_seed(5)
    m = build_model(TransformerConfig.from_preset("tiny", src_vocab_size=6, dropout=0.0)).eval()
    src = torch.tensor([[4, 5, 4, 3], [5, 5, 3, 0]])
    hyps = beam_search(m, src, beam=16, lenpen=lenpen, lenpen_style=style, max_len_a=0.0, max_len_b=2,
                       stop="exhaust")
    for i, h in enumerate(hyps):
        best = None
        for n in range(3):
            for ys in itertools.product([1, 4, 5], repeat=n):
                with torch.no_grad():
                    lp = F.log_softmax(m(src[i:i + 1], torch.tensor([[2, *ys]])), -1)[0]
                logprob = lp[torch.arange(n + 1), torch.tensor([*ys, 3])].sum().item()
                score = logprob / length_penalty(n + 1, lenpen, style)
                if best is None or score > best[0]:
                    best = (score, list(ys), logprob)
        assert h.tokens == best[1]
        assert h.score == pytest.approx(best[0], abs=1e-4) and h.logprob == pytest.approx(best[2], abs=1e-4)


def _fairseq_rule_reference(m, src, K, lenpen, max_len):
    """fairseq's stopping rule for one sentence, written plainly: full recompute at every step, every (beam,
    token) candidate ranked, the 2K best kept; EOS among the K best finishes; the first K others live on; stop at
    K finished (EOS forced at max_len); return the best finished by logprob / n**lenpen."""
    live, fin = [([], 0.0)], []
    for t in range(max_len + 1):
        cands = []
        for ys, sc in live:
            with torch.no_grad():
                lp = F.log_softmax(m(src, torch.tensor([[2, *ys]]))[0, -1], -1)
            lp[0] = lp[2] = float("-inf")
            if t >= max_len:
                lp[torch.arange(len(lp)) != 3] = float("-inf")
            cands += [(sc + lp[v].item(), ys, v) for v in range(len(lp)) if lp[v] > float("-inf")]
        cands = sorted(cands, key=lambda c: -c[0])[:2 * K]
        fin += [(s / (t + 1) ** lenpen, ys, s) for r, (s, ys, v) in enumerate(cands) if v == 3 and r < K]
        live = [(ys + [v], s) for s, ys, v in cands if v != 3][:K]
        if len(fin) >= K or not live:
            break
    return max(fin, key=lambda f: f[0])


@pytest.mark.parametrize("lenpen", [0.0, 1.0])
def test_fairseq_stop_rule_matches_a_plain_reference(lenpen):
    m = random_model(seed=7).eval()
    for i, s in enumerate(random_sentences(4, 2, 6, seed=7)):
        src = pad_batch([s])
        max_len = int(1.2 * src.shape[1] + 2)
        (h,) = beam_search(m, src, beam=3, lenpen=lenpen, max_len_a=1.2, max_len_b=2, stop="fairseq")
        score, ys, logprob = _fairseq_rule_reference(m, src, 3, lenpen, max_len)
        assert h.tokens == ys and h.score == pytest.approx(score, abs=1e-4)
    with pytest.raises(ConfigError, match="stop rule"):
        beam_search(m, src, stop="marian")


def test_greedy_attention_and_force_decode_agree():
    m = random_model(seed=4)
    src = pad_batch(random_sentences(3, 3, 6, seed=4))
    hyps = greedy(m, src, return_attn_layer=0)
    tgt = pad_batch([h.tokens for h in hyps])              # y_1..y_n EOS, right-padded
    attn = force_decode(m, src, tgt, layer=0)               # (B, H, T, S)
    assert attn.shape[:2] == (3, 2) and m.training          # training flag restored
    for i, h in enumerate(hyps):
        n, s = len(h.tokens) + 1, int(src[i].ne(0).sum())
        assert torch.allclose(attn[i].mean(0)[:n, :s], h.attn, atol=1e-5)


def test_overfit_tiny_model_then_decode_exactly():
    """A tiny model learns to reproduce 20 random short pairs; greedy and beam search both return them."""
    torch.manual_seed(0)
    src_s, tgt_s = random_sentences(20, 3, 6, seed=10), random_sentences(20, 3, 6, seed=11)
    src, tgt_in, tgt_out = pad_batch(src_s), pad_batch(tgt_s, bos=True, eos=False), pad_batch(tgt_s)
    tgt_in = torch.cat((tgt_in, torch.zeros(20, tgt_out.shape[1] - tgt_in.shape[1], dtype=torch.long)), 1)
    m = build_model(TransformerConfig.from_preset("tiny", src_vocab_size=V, dropout=0.0, pe=["ape", "rpe"]))
    opt = torch.optim.Adam(m.parameters(), lr=5e-3)
    for step in range(400):
        loss = F.cross_entropy(m(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=0)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.005:
            break
    assert loss.item() < 0.02
    assert [h.tokens for h in greedy(m, src)] == tgt_s
    assert [h.tokens for h in beam_search(m, src, beam=4, lenpen=0.6)] == tgt_s
    assert [h.tokens for h in beam_search(m, src, beam=3, lenpen=1.0, lenpen_style="gnmt")] == tgt_s
    # bf16 decoding (weights cast once, or bf16 products on CPU; log-probabilities summed in float) gives the same
    # hypotheses, with either way of bf16 weights
    import xlpe.nn.device as device
    on = device.device_policy("cpu")
    for products in (True, False) if on.bf16_products else (False,):     # products: a CPU whose oneDNN takes bf16
        with pytest.MonkeyPatch.context() as mp:
            mp.setitem(device._POLICIES, "cpu", dataclasses.replace(on, bf16_products=products))
            mb = decoding_model(m, "bfloat16")
            assert next(m.parameters()).dtype == torch.float32
            assert next(mb.parameters()).dtype == (torch.float32 if products else torch.bfloat16)
            assert [h.tokens for h in greedy(mb, src)] == tgt_s
            assert [h.tokens for h in beam_search(mb, src, beam=4, lenpen=0.6)] == tgt_s
            assert decoding_model(mb, "bfloat16") is mb


@pytest.mark.parametrize("stop", ["fairseq", "exhaust"])
def test_beam_decodes_only_live_beams(stop, monkeypatch):
    """Dead beams are not decoded: one row per sentence at the first step, and with the exhaust rule fewer rows
    than K per sentence once hypotheses finish; the hypotheses are those of the plain per-sentence search."""
    from xlpe.nn.transformer import Transformer
    m = random_model(seed=8).eval()
    sents = random_sentences(6, 2, 7, seed=8)
    rows = []
    orig = Transformer.decode
    monkeypatch.setattr(Transformer, "decode", lambda self, tgt, *a, **k: rows.append(tgt.shape[0]) or
                        orig(self, tgt, *a, **k))
    hyps = beam_search(m, pad_batch(sents), beam=4, lenpen=1.0, stop=stop)
    assert rows[0] == 6 and max(rows) <= 24
    if stop == "exhaust":
        assert any(r % 4 for r in rows[1:])                 # some step decoded a shrunken beam
    monkeypatch.setattr(Transformer, "decode", orig)
    for s, h in zip(sents, hyps):
        (h1,) = beam_search(m, pad_batch([s]), beam=4, lenpen=1.0, stop=stop)
        assert h1.tokens == h.tokens and h1.score == pytest.approx(h.score, abs=1e-4)


def test_decoding_dtype_is_checked():
    m = random_model()
    with pytest.raises(ConfigError, match="unknown decoding dtype 'int4'"):
        decoding_model(m, "int4")
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        decoding_model(m, "float16")


def test_beam_outputs_are_plain_tensors():
    """Decoding runs under inference mode; what it returns must still be usable with autograd and in place."""
    m = random_model(seed=3)
    src = pad_batch(random_sentences(2, 2, 5, seed=3))
    for h in beam_search(m, src, beam=3, return_attn_layer=-1) + greedy(m, src, return_attn_layer=-1):
        assert not h.attn.is_inference()
        h.attn.mul_(2)


@pytest.mark.parametrize("V_", [16, 200, 1003])
@pytest.mark.parametrize("chunk", [4, 7, 64])
def test_chunked_topk_is_a_topk(V_, chunk):
    """Values equal ``topk``'s exactly, best first; ids point at them, distinct per row, valid even among ties
    (bf16-rounded rows have many) and in rows with fewer finite values than k."""
    from xlpe.infer.beam import chunked_topk
    g = torch.Generator().manual_seed(V_ + chunk)
    x = (torch.randn(40, V_, generator=g) * 4).bfloat16().float()
    x[3] = float("-inf")
    x[3, 5] = 0.5
    x[4, : V_ // 2] = float("-inf")
    for k in (1, 2, 5, 10):
        v, ids = chunked_topk(x, k, chunk)
        ref, _ = x.topk(k, dim=-1)
        assert torch.equal(v, ref)
        assert ids.min() >= 0 and ids.max() < V_
        fin = torch.isfinite(v)
        assert torch.equal(x.gather(1, ids)[fin], v[fin])
        assert all(len(set(r[f].tolist())) == int(f.sum()) for r, f in zip(ids, fin))


@pytest.mark.parametrize("stop", ["fairseq", "exhaust"])
def test_beam_with_chunked_topk_equals_plain_topk(stop, monkeypatch):
    """The decoders pick candidates through chunk maxima (xlpe.infer.beam.chunked_topk); with chunks small
    enough to take that path on a 200-piece vocabulary (with and without a short last chunk), beam search and
    greedy give what plain ``topk`` gives."""
    import xlpe.infer.beam as beam_mod
    torch.manual_seed(3)
    m = build_model(TransformerConfig.from_preset("tiny", src_vocab_size=200))
    g = torch.Generator().manual_seed(4)
    src = pad_batch([torch.randint(4, 200, (n,), generator=g).tolist() for n in (3, 6, 4, 8, 5)])
    runs = {}
    for chunk in (10 ** 6, 4, 7):          # 10**6: no full chunk, so plain topk
        monkeypatch.setattr(beam_mod, "TOPK_CHUNK", chunk)
        b = beam_search(m, src, beam=4, lenpen=1.0, stop=stop)
        gr = greedy(m, src)
        runs[chunk] = ([h.tokens for h in b], [h.score for h in b], [h.tokens for h in gr])
    assert runs[4] == runs[10 ** 6] and runs[7] == runs[10 ** 6]


def test_row_buckets():
    from xlpe.nn.device import row_bucket
    assert [row_bucket(n) for n in (0, 1, 7, 8, 9, 33, 64, 65, 128, 129, 320, 321)] == \
        [8, 8, 8, 8, 16, 64, 64, 128, 128, 192, 320, 384]


def test_bf16_decoding_runs_linear_layers_on_bucketed_rows(monkeypatch):
    """In bf16 at inference every linear layer of a decoding step sees one of a few row counts (oneDNN builds a
    primitive per product shape; the live beams' count changes at every step): the padding rows are cut off, the
    hypotheses are those of the unpadded products, and float32 or training products are never padded."""
    import xlpe.nn.device as device
    m = random_model(seed=5, pe=["ape"]).eval()
    src = pad_batch(random_sentences(7, 2, 9, seed=5))
    mb = decoding_model(m, "bfloat16")                 # bf16 products on CPU (every linear layer packed)
    seen = []
    orig_linear, orig_packed = F.linear, torch.ops.mkldnn._linear_pointwise
    monkeypatch.setattr(F, "linear", lambda x, *a: seen.append(x.numel() // x.shape[-1]) or orig_linear(x, *a))
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise",
                        lambda x, *a: seen.append(x.shape[0]) or orig_packed(x, *a), raising=False)
    bucketed = beam_search(mb, src, beam=4, lenpen=1.0)
    buckets = {device.row_bucket(n) for n in range(1, 1000)}
    assert seen and set(seen) <= buckets
    seen.clear()
    beam_search(m, src, beam=4, lenpen=1.0)                                     # float32: the rows as they are
    assert set(seen) - buckets
    seen.clear()
    policy = device.device_policy
    monkeypatch.setattr(device, "device_policy", lambda d: dataclasses.replace(policy(d), bucketed_rows=False))
    plain = beam_search(mb, src, beam=4, lenpen=1.0)
    assert set(seen) - buckets
    assert [h.tokens for h in bucketed] == [h.tokens for h in plain]
    for a, b in zip(bucketed, plain):
        assert a.score == pytest.approx(b.score, abs=1e-3)
    x = torch.randn(3, 5, 32, dtype=torch.bfloat16, requires_grad=True)         # training: fn(x) itself
    assert device.bucketed_rows(lambda t: t, x) is x
