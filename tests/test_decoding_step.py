"""The decoder layer's lean incremental step (xlpe.nn.decoding_step) against the layer's general path."""

import pytest
import torch

from xlpe.infer import beam_search, greedy
from xlpe.infer.translate import decoding_model
from xlpe.nn import attention, decoding_step
from xlpe.nn.transformer import DecoderCache, TransformerConfig, build_model

V = 16


def model(seed=0, **kw):
    torch.manual_seed(seed)
    return build_model(TransformerConfig.from_preset("tiny", src_vocab_size=V, **kw)).eval()


def batch(n, seed, lo=2, hi=9):
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(4, V, (int(torch.randint(lo, hi + 1, (1,), generator=g)),), generator=g).tolist() + [3]
            for _ in range(n)]
    width = max(map(len, rows))
    return torch.tensor([r + [0] * (width - len(r)) for r in rows])


def general_path(monkeypatch):
    monkeypatch.setattr(attention, "lean_plan", lambda *a, **k: None)


def steps(m, src, K, slots=None):
    """Four incremental steps of K rows per sentence, the beams reordered after each: the logits of every step."""
    torch.manual_seed(1)
    enc = m.encode(src)
    B = src.shape[0]
    rows = B * K if slots is None else slots.numel()
    cache, out = DecoderCache(), []
    for t in range(4):
        tokens = torch.randint(4, V, (rows, 1))
        out.append(m.decode(tokens, enc, cache=cache, memory_slots=None if slots is None else (slots, K)))
        cache.reorder_self(torch.randperm(rows))
    return torch.stack(out)


@pytest.mark.parametrize("kw", [{}, {"pre_norm": True}, {"activation": "gelu"}])
@pytest.mark.parametrize("live", [False, True])
def test_lean_step_computes_the_general_layer(kw, live, monkeypatch):
    """Logits of four cached steps (beams reordered between them; with ``live``, only some slots of the grid
    decoded, as beam search's exhaust rule does): the lean step and the general path agree."""
    m = model(**kw)
    src = batch(5, seed=2)
    slots = torch.tensor([0, 1, 3, 4, 8, 12, 13, 14, 15, 17]) if live else None
    calls = []
    lean = decoding_step.lean_step
    monkeypatch.setattr(attention, "lean_step", lambda *a: calls.append(1) or lean(*a))
    with torch.inference_mode():
        fast = steps(m, src, 4, slots)
        assert len(calls) == 4 * m.cfg.dec_layers
        general_path(monkeypatch)
        slow = steps(m, src, 4, slots)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("stop", ["fairseq", "exhaust"])
def test_beam_and_greedy_give_the_same_hypotheses_on_either_path(stop, monkeypatch):
    m = model(seed=3)
    src = batch(7, seed=5)
    with torch.inference_mode():
        fast_b, fast_g = beam_search(m, src, beam=4, lenpen=0.6, stop=stop), greedy(m, src)
        general_path(monkeypatch)
        slow_b, slow_g = beam_search(m, src, beam=4, lenpen=0.6, stop=stop), greedy(m, src)
    assert [h.tokens for h in fast_b] == [h.tokens for h in slow_b]
    assert [h.score for h in fast_b] == pytest.approx([h.score for h in slow_b], abs=1e-5)
    assert [h.tokens for h in fast_g] == [h.tokens for h in slow_g]


def test_the_lean_step_applies_only_to_a_plain_inference_step():
    m = model()
    layer = m.decoder.layers[0]
    x = torch.randn(4, 1, m.cfg.d_model)
    plan = decoding_step.lean_plan
    with torch.no_grad():
        assert plan(layer, x, False, ()) is not None
        assert plan(layer, x, True, ()) is None                           # attention weights asked for
        assert plan(layer, x.expand(4, 2, -1), False, ()) is None         # two tokens
        assert plan(layer, x.bfloat16(), False, ()) is None
        assert plan(decoding_model(m, "int8").decoder.layers[0], x, False, ()) is None
        m.train()
        assert plan(layer, x, False, ()) is None                          # training
    m.eval()
    assert plan(layer, x, False, ()) is None                              # autograd on


def test_the_lean_step_follows_the_device_policy(monkeypatch):
    """Under CUDA's policy (applied to CPU tensors) a decoding step takes the layer's general path (fused SDPA)."""
    from xlpe.nn.device import policy_for
    m = model()
    x = torch.randn(4, 1, m.cfg.d_model)
    monkeypatch.setattr(decoding_step, "device_policy", lambda device: policy_for("cuda"))
    with torch.no_grad():
        assert decoding_step.lean_plan(m.decoder.layers[0], x, False, ()) is None
