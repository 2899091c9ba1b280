"""MultiheadAttention: SDPA and explicit paths against Vaswani Eq. 1 per head; causal masks; per-head inputs."""

import math

import torch

from xlpe.nn.attention import MultiheadAttention
from xlpe.nn.positions import HeadInput




def reference(mha, xq, xkv, pad=None, causal=False):
    B, Tq, d = xq.shape
    Tk = xkv.shape[1]
    outs = []
    for h in range(mha.n_heads):
        cols = slice(h * mha.d_k, (h + 1) * mha.d_k)
        q = xq @ mha.q_proj.weight[cols].T + mha.q_proj.bias[cols]
        k = xkv @ mha.k_proj.weight[cols].T + mha.k_proj.bias[cols]
        v = xkv @ mha.v_proj.weight[cols].T + mha.v_proj.bias[cols]
        e = q @ k.transpose(1, 2) / math.sqrt(mha.d_k)
        if pad is not None:
            e = e.masked_fill(pad[:, None, :], float("-inf"))
        if causal:
            e = e.masked_fill(torch.ones(Tq, Tk, dtype=torch.bool).triu(1), float("-inf"))
        outs.append(e.softmax(-1) @ v)
    return mha.out_proj(torch.cat(outs, -1))


def test_self_cross_and_causal_against_reference():
    torch.manual_seed(0)
    mha = MultiheadAttention(16, 4).eval()
    x, mem = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[0, 5:] = True
    for need in (False, True):   # SDPA path and explicit path
        assert torch.allclose(mha(x, need_weights=need)[0], reference(mha, x, x), atol=1e-5)
        assert torch.allclose(mha(x, mem, key_pad_mask=pad, need_weights=need)[0], reference(mha, x, mem, pad),
                              atol=1e-5)
        assert torch.allclose(mha(x, causal=True, need_weights=need)[0], reference(mha, x, x, causal=True),
                              atol=1e-5)
    _, w = mha(x, mem, key_pad_mask=pad, need_weights=True)
    assert w.shape == (2, 4, 5, 7) and torch.all(w[0, :, :, 5:] == 0)


def test_bf16_on_cpu_takes_the_explicit_product_with_a_float_softmax(monkeypatch):
    """bf16 (autocast in training, bf16 weights in decoding) bypasses SDPA on CPU; results stay those of fp32
    within bf16 rounding, with padding and causal masks, and gradients flow."""
    import torch.nn.functional as F
    calls = []
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda *a, _f=F.scaled_dot_product_attention, **k: calls.append(1) or _f(*a, **k))
    torch.manual_seed(2)
    mha = MultiheadAttention(32, 4)
    x, mem = torch.randn(3, 6, 32), torch.randn(3, 9, 32)
    pad = torch.zeros(3, 9, dtype=torch.bool)
    pad[1, 4:] = True
    for training in (True, False):
        mha.train(training)
        ref_self, ref_cross = mha(x, causal=True)[0], mha(x, mem, key_pad_mask=pad)[0]
        assert calls                                      # fp32 uses SDPA
        calls.clear()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out_self, out_cross = mha(x, causal=True)[0], mha(x, mem, key_pad_mask=pad)[0]
        assert not calls and out_self.dtype == torch.bfloat16
        assert torch.allclose(out_self.float(), ref_self, atol=0.05) and torch.allclose(out_cross.float(), ref_cross,
                                                                                       atol=0.05)
        if training:
            out_cross.float().sum().backward()
            assert mha.q_proj.weight.grad is not None and torch.isfinite(mha.q_proj.weight.grad).all()
    mb = MultiheadAttention(32, 4).to(torch.bfloat16).eval()
    mb.load_state_dict({k: v.to(torch.bfloat16) for k, v in mha.state_dict().items()})
    out = mb(x.bfloat16(), mem.bfloat16(), key_pad_mask=pad)[0]
    assert not calls and torch.allclose(out.float(), mha.eval()(x, mem, key_pad_mask=pad)[0], atol=0.05)


def test_cache_equals_full_causal():
    torch.manual_seed(1)
    mha = MultiheadAttention(8, 2).eval()
    x = torch.randn(2, 6, 8)
    full, _ = mha(x, causal=True)
    cache = {}
    a, _ = mha(x[:, :2], causal=True, cache=cache)       # a chunk of 2 ...
    b, _ = mha(x[:, 2:5], causal=True, cache=cache)      # ... a chunk of 3 after the cache (offset mask) ...
    c, _ = mha(x[:, 5:], causal=True, cache=cache)       # ... and one token
    assert torch.allclose(torch.cat((a, b, c), 1), full, atol=1e-5)


def test_head_inputs_select_heads_without_parameters():
    """HeadXL mechanics (SPEC §4.4): heads in the mask read the other input for Q, K and V; nothing else."""
    torch.manual_seed(2)
    mha = MultiheadAttention(16, 4).eval()
    n_params = sum(p.numel() for p in mha.parameters())
    x, x_alt = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    none = HeadInput(x_alt, torch.tensor([False] * 4))
    every = HeadInput(x_alt, torch.tensor([True] * 4))
    assert torch.allclose(mha(x, head_inputs=[none])[0], mha(x)[0])
    assert torch.allclose(mha(x, head_inputs=[every])[0], mha(x_alt)[0], atol=1e-6)
    # tau = 1: head 0 from x_alt, heads 1-3 from x; compare the concatenated head outputs before W_O
    captured = {}
    mha.out_proj.register_forward_hook(lambda m, i, o: captured.setdefault("heads", []).append(i[0]))
    mha(x, head_inputs=[HeadInput(x_alt, torch.tensor([True, False, False, False]))])
    mha(x_alt)
    mha(x)
    mixed, alt, plain = captured["heads"]
    assert torch.allclose(mixed[..., :4], alt[..., :4], atol=1e-6)
    assert torch.allclose(mixed[..., 4:], plain[..., 4:], atol=1e-6)
    assert sum(p.numel() for p in mha.parameters()) == n_params


def test_head_inputs_any_head_subset_in_self_and_cross_attention_with_gradients():
    """Heads 1 and 3 (not a prefix) read the other input, in self-attention (Q, K, V) and in cross-attention
    (K, V of the memory); the result is each head computed from its own input, and gradients reach the
    projections through both inputs."""
    torch.manual_seed(3)
    mha = MultiheadAttention(16, 4).eval()
    x, x_alt = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    mem, mem_alt = torch.randn(2, 7, 16), torch.randn(2, 7, 16)
    sel = torch.tensor([False, True, False, True])
    cols = torch.arange(16).view(4, 4)[sel].flatten()
    keep = torch.arange(16).view(4, 4)[~sel].flatten()
    captured = []
    mha.out_proj.register_forward_hook(lambda m, i, o: captured.append(i[0]))
    mha(x, head_inputs=[HeadInput(x_alt, sel)])
    mha(x_alt)
    mha(x)
    mixed, alt, plain = captured
    assert torch.allclose(mixed[..., cols], alt[..., cols], atol=1e-6)
    assert torch.allclose(mixed[..., keep], plain[..., keep], atol=1e-6)
    captured.clear()
    mha(x, memory=mem, head_inputs=[HeadInput(mem_alt, sel)])
    mha(x, memory=mem_alt)
    mha(x, memory=mem)
    mixed, alt, plain = captured
    assert torch.allclose(mixed[..., cols], alt[..., cols], atol=1e-6)
    assert torch.allclose(mixed[..., keep], plain[..., keep], atol=1e-6)
    x_alt.requires_grad_(True)
    mha(x, head_inputs=[HeadInput(x_alt, sel)])[0].sum().backward()
    assert x_alt.grad.abs().sum() > 0
    # the Q weight rows of heads 1 and 3 are reached (through x_alt), and so are those of heads 0 and 2 (x)
    g = mha.q_proj.weight.grad.abs().sum(1).view(4, 4).sum(1)
    assert (g > 0).all()


def test_dropout_mask_rate_scale_and_gradient():
    """xlpe's CPU dropout: zero with probability p, survivors scaled by 1/(1-p), the gradient through the same
    mask; identity in eval mode and at p=0, zeros at p=1; fp32 and bf16."""
    from xlpe.nn.attention import Dropout, dropout
    torch.manual_seed(3)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.ones(200, 500, dtype=dtype, requires_grad=True)
        y = dropout(x, 0.3, True)
        zero = y.detach().float() == 0
        assert abs(zero.float().mean().item() - 0.3) < 0.01
        assert torch.allclose(y.detach().float()[~zero], torch.tensor(1 / 0.7), rtol=1e-2)
        y.sum().backward()
        assert torch.equal(x.grad.float() == 0, zero)
        assert y.dtype == dtype
    x = torch.randn(4, 5)
    assert torch.equal(dropout(x, 0.3, False), x) and torch.equal(dropout(x, 0.0, True), x)
    assert torch.equal(dropout(x, 1.0, True), torch.zeros(4, 5))
    d = Dropout(0.5)
    assert torch.equal(d.eval()(x), x) and (d.train()(x) == 0).any()
    # any element count (the mask is drawn four elements per 64-bit integer); every lane of the draw is uniform
    y = dropout(torch.ones(3, 7, 5), 0.5, True)
    assert y.shape == (3, 7, 5) and set(y.unique().tolist()) <= {0.0, 2.0}
    kept = dropout(torch.ones(40000, 4), 0.1, True) != 0
    assert ((kept.float().mean(0) - 0.9).abs() < 0.01).all()


def _splitmix64_reference(state: int, n: int) -> list[int]:
    """Vigna's splitmix64.c in Python integers (uint64), as signed int64 values."""
    out, m = [], (1 << 64) - 1
    for _ in range(n):
        state = (state + 0x9E3779B97F4A7C15) & m
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
        z ^= z >> 31
        out.append(z - (1 << 64) if z >> 63 else z)
    return out


def test_splitmix64_is_the_reference_generator_from_a_seeded_start():
    """Dropout's random bits: SplitMix64 from a start state drawn from torch's generator, equal to the reference
    code for that state (from state 0 its first output is Vigna's 0xE220A8397B1DCDAF), reproducible by seed."""
    from xlpe.nn.attention import splitmix64
    assert _splitmix64_reference(0, 1) == [0xE220A8397B1DCDAF - (1 << 64)]
    g = torch.Generator().manual_seed(11)
    start = int(torch.empty((), dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1, generator=g))
    g.manual_seed(11)
    got = splitmix64(70000, generator=g)          # longer than the first counter buffer: it grows
    assert got.dtype == torch.int64
    ref = _splitmix64_reference(start % (1 << 64), 70000)
    assert got[:50].tolist() == ref[:50] and got[-50:].tolist() == ref[-50:]
    assert torch.equal(got[:5], splitmix64(5, generator=torch.Generator().manual_seed(11)))
    assert not torch.equal(got[:5], splitmix64(5, generator=torch.Generator().manual_seed(12)))
    torch.manual_seed(5)
    a = splitmix64(100)
    torch.manual_seed(5)
    assert torch.equal(a, splitmix64(100))      # the default generator: torch.manual_seed reproduces dropout
    # every 16-bit lane is uniform: mean 0 and std 65536/sqrt(12) over [-32768, 32767]
    lanes = splitmix64(1 << 18, generator=g).view(torch.int16).view(-1, 4).float()
    assert (lanes.mean(0).abs() < 150).all()
    assert ((lanes.std(0) / (65536 / 12 ** 0.5) - 1).abs() < 0.01).all()


def test_bf16_softmax_is_the_float32_softmax_rounded():
    """The explicit bf16 attention path calls torch's softmax on bf16 scores, relying on it to compute in float32
    and round once: the same weights as a float32 softmax rounded to bf16 (masked keys included)."""
    torch.manual_seed(0)
    s = (torch.randn(64, 4, 14, 14) * 4).bfloat16()
    s = s.masked_fill(torch.rand(64, 1, 1, 14) < 0.2, float("-inf"))
    s[..., 0] = 0.5
    assert torch.equal(s.softmax(-1), s.float().softmax(-1).bfloat16())
