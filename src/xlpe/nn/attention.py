"""Multi-head attention and the Transformer sub-layers built on it (Vaswani et al. 2017, §3.2-3.3).

:class:`MultiheadAttention` takes two optional position-encoding inputs (hooks (c) and (b) of
``xlpe.nn.positions.base``; their types :class:`RelativeTerms` and :class:`HeadInput` are defined here, below
the encodings):

* ``rel``: Shaw-style relative key/value terms (SPEC §2), summed over encodings (SPEC §3.3). With them, when
  the attention weights are requested, or in bf16/fp16 on CPU (SDPA's CPU kernel is several times slower there
  at these lengths; the softmax then computes in float32), scores are computed explicitly; otherwise
  ``torch.nn.functional.scaled_dot_product_attention`` does the work.
* ``head_inputs``: other inputs for a subset of heads (HeadXL, SPEC §4.4). Q, K and V of those heads are the
  same projections applied to the other input: no extra parameter. Only those heads' rows of each projection
  are applied to it, so τ of H heads cost τ/H of a projection more, not a whole one.

Dropout everywhere in the model is :func:`dropout` (on CPU a mask from :func:`splitmix64`'s 16-bit lanes,
several times faster than ``F.dropout``'s sampler).

The layers live here rather than in ``transformer.py`` so that position encodings that contain Transformer
layers (DPE, SPEC §6.1) can build them without an import cycle.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.decoding_step import appended, lean_plan, lean_step
from xlpe.nn.device import bf16_products, bucketed_rows, derived, device_policy, packed_linear


#: decoding steps (one query row at inference) use SDPA too; False = the explicit product q·kᵀ, softmax, ·v
#: (benchmarks/bench_decode_attention.py compares the two in one run; both give the same hypotheses)
SDPA_FOR_ONE_QUERY = True


@dataclass
class HeadInput:
    """Hook (b) of a position encoding: heads ``heads`` of one layer's self-attention read ``x`` for Q, K and V.

    ``x`` is used as is (``(B, T, d)``, the plugin applies any dropout itself); the residual stream keeps the
    layer's normal input. ``heads`` is a bool tensor ``(H,)``.
    """

    x: Tensor
    heads: Tensor


@dataclass
class RelativeTerms:
    """Hook (c) of a position encoding: relative key/value terms ``a^K_ij = table_k[index[.., i, j]]`` (and
    ``a^V`` likewise).

    ``index`` is ``(T, T)`` (the same for every sentence, Shaw) or ``(B, T, T)`` (per sentence, structural),
    with values in ``[0, R)``; ``table_k``/``table_v`` are ``(R, d_k)``, shared by all heads, or None.
    """

    index: Tensor
    table_k: Tensor | None
    table_v: Tensor | None


def relative_scores(q: Tensor, rel: Sequence[RelativeTerms]) -> Tensor | None:
    """``q_i · a^K_ij`` with ``a^K_ij = sum_p table_k_p[index_p[.., i, j]]`` ``(B, H, T, T)``, without building the
    ``(.., T, T, d_k)`` tables: ``q · table_kᵀ`` gives ``(B, H, T, R)``, gathered by the index (SPEC §2-§3.3).
    Memory ``O(B·H·T·R)`` besides the scores themselves."""
    out = None
    for r in rel:
        if r.table_k is None:
            continue
        qt = q @ r.table_k.t().to(q.dtype)                                     # (B, H, T, R)
        s = qt.gather(-1, _index(r.index, qt))
        out = s if out is None else out + s
    return out


def relative_values(alpha: Tensor, rel: Sequence[RelativeTerms]) -> Tensor | None:
    """``sum_j alpha_ij a^V_ij`` ``(B, H, T, d_k)``: the weights are scatter-added into ``(B, H, T, R)`` buckets of
    equal relative index, then multiplied by ``table_v`` (``O(B·H·T·R)`` memory, not ``O(B·T²·d_k)``)."""
    out = None
    for r in rel:
        if r.table_v is None:
            continue
        R = r.table_v.shape[0]
        buckets = alpha.new_zeros(*alpha.shape[:-1], R).scatter_add_(-1, _index(r.index, alpha), alpha)
        o = buckets @ r.table_v.to(alpha.dtype)
        out = o if out is None else out + o
    return out


def _index(index: Tensor, like: Tensor) -> Tensor:
    """A ``(T, T)`` or per-sentence ``(B, T, T)`` relative index broadcast to ``like``'s ``(B, H, Tq, Tk)``."""
    B, H, Tq = like.shape[:3]
    Tk = index.shape[-1]
    idx = index if index.dim() == 3 else index.unsqueeze(0)
    return idx.unsqueeze(1).expand(B, H, Tq, Tk)


def _mask(key_pad_mask: Tensor | None, causal: bool, Tq: int, Tk: int, offset: int,
          device: torch.device) -> tuple[Tensor | None, bool]:
    """The boolean mask (True = may attend; None = everything) of padding and causality, and whether SDPA's own
    ``is_causal`` stands for it (only when nothing else is masked)."""
    mask, sdpa_causal = None, False
    if key_pad_mask is not None:
        mask = ~key_pad_mask[:, None, None, :]
    if causal and Tq > 1:
        if mask is None and offset == 0 and Tq == Tk:
            sdpa_causal = True
        else:
            ar = torch.arange(Tq, device=device)[:, None] + offset
            tri = torch.arange(Tk, device=device)[None, :] <= ar
            mask = tri if mask is None else mask & tri
    return mask, sdpa_causal


def _with_head_mask(mask: Tensor | None, head_mask: Tensor | None) -> tuple[Tensor | None, Tensor | None]:
    """``mask`` (True = may attend) and'ed with per-head masks ``(H, Tq, Tk)`` / ``(B, H, Tq, Tk)``, and the rows
    ``(B, H, Tq, 1)`` left with no key (None when there are none). Such a row is let attend its own position so
    that the softmax stays finite; the caller zeroes its output."""
    if head_mask is None:
        return mask, None
    hm = head_mask if head_mask.dim() == 4 else head_mask.unsqueeze(0)
    mask = hm if mask is None else mask & hm
    empty = ~mask.any(-1, keepdim=True)
    if not bool(empty.any()):
        return mask, None
    Tq, Tk = mask.shape[-2:]
    return mask | (empty & torch.eye(Tq, Tk, dtype=torch.bool, device=mask.device)), empty


#: weight initialisations of the attention and feed-forward projections (``TransformerConfig.init``)
INITS = ("xavier", "fairseq")


#: SplitMix64's constants as signed 64-bit integers (torch has no uint64 arithmetic): the golden-ratio increment
#: 0x9E3779B97F4A7C15 and the two multipliers of its finaliser, 0xBF58476D1CE4E5B9 and 0x94D049BB133111EB
_GOLDEN, _MIX1, _MIX2 = -7046029254386353131, -4658895280553007687, -7723592293110705685
_COUNTERS: dict[torch.device, Tensor] = {}   # per device: (i + 1)·golden for i = 0, 1, ... (grown on demand)


def splitmix64(n: int, device: torch.device | str = "cpu", generator: torch.Generator | None = None) -> Tensor:
    """``n`` uniform 64-bit integers (int64): SplitMix64 (Steele, Lea & Flood 2014; Vigna's ``splitmix64.c``)
    from a start state drawn from torch's generator (``generator``, or the default one: ``torch.manual_seed``
    and saved RNG states reproduce it). Output ``i`` is the generator's ``(i+1)``-th output from that state, so the
    draws are a counter hashed by the finaliser: a dozen in-place integer passes, about 1.5x faster on CPU
    than ``Tensor.random_``'s Mersenne twister for the same number of bits. Tested against a Python reference."""
    device = torch.device(device)
    seed = int(torch.empty((), dtype=torch.int64).random_(-2 ** 63, 2 ** 63 - 1, generator=generator))
    counter = _COUNTERS.get(device)
    if counter is None or len(counter) < n:
        counter = torch.arange(1, max(n, 1 << 16) + 1, dtype=torch.int64, device=device).mul_(_GOLDEN)
        _COUNTERS[device] = counter
    z = counter[:n].add(seed)                # wraps modulo 2**64, like the C code's uint64_t
    t = torch.empty_like(z)
    for shift, mul in ((30, _MIX1), (27, _MIX2), (31, None)):
        # z ^= z >> shift, a logical shift: torch's is arithmetic, so the sign-extended bits are masked off
        torch.bitwise_right_shift(z, shift, out=t).bitwise_and_((1 << (64 - shift)) - 1)
        z.bitwise_xor_(t)
        if mul is not None:
            z.mul_(mul)
    return z


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout`` (inverted dropout: zero with probability ``p``, scale the rest by ``1/(1-p)``), with a faster
    mask on CPU, where ``F.dropout``'s Bernoulli sampler is slow (fp32 and bf16 alike;
    ``benchmarks/bench_attention_kernels.py``). The mask comes from 16-bit uniform integers, four per 64-bit draw
    of :func:`splitmix64`: an element survives when its integer is at least ``k − 32768`` with
    ``k = round(p·65536)``, i.e. ``p`` is quantised to a multiple of 1/65536 (an error below 8e-6) and the
    survivors are scaled by ``65536/(65536 − k)`` (rounded to ``x``'s dtype), so the expectation is ``x``.
    Other random numbers than ``F.dropout``'s for the same seed."""
    if not training or p == 0.0 or not device_policy(x.device).fast_dropout_mask:
        return F.dropout(x, p, training)
    k = round(p * 65536)
    if p == 1.0 or k == 65536:
        return x * 0.0
    n = x.numel()
    bits = splitmix64((n + 3) // 4, x.device)
    keep = bits.view(torch.int16)[:n].view(x.shape) >= k - 32768
    return x * keep.to(x.dtype).mul_(65536.0 / (65536 - k))


class Dropout(nn.Dropout):
    """``nn.Dropout`` through :func:`dropout` (the faster CPU mask)."""

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def _linear(lin: nn.Module, x: Tensor) -> Tensor:
    """``lin(x)`` on :func:`~xlpe.nn.device.bucketed_rows`; a plain ``nn.Linear`` whose products run in bf16
    (:func:`~xlpe.nn.device.bf16_products`) through :func:`~xlpe.nn.device.packed_linear`, without its hooks."""
    if type(lin) is nn.Linear and bf16_products(lin, x, lin.weight):
        return packed_linear(lin, "packed", x, lin.weight, lin.bias)
    return bucketed_rows(lin, x)


class MultiheadAttention(nn.Module):
    """Scaled dot-product attention over ``n_heads`` heads, batch first.

    Args:
        d_model: model width ``d``; ``d_k = d_v = d / n_heads``.
        n_heads: number of heads ``H``.
        dropout: dropout on the attention weights.
        init: ``"xavier"`` (Glorot-uniform for all four projections, as tensor2tensor) or ``"fairseq"``
            (fairseq 0.12: Q, K, V Glorot-uniform with gain 1/sqrt(2), output projection Glorot-uniform).
            Biases start at zero in both.

    Verified in ``tests/test_nn_attention.py`` against a per-head loop written from Vaswani Eq. 1 (SDPA and
    explicit paths agree), and in ``tests/test_nn_rpe.py`` against a naive loop over (i, j) for Shaw's terms.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, init: str = "fairseq"):
        super().__init__()
        if d_model % n_heads:
            raise ConfigError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        if init not in INITS:
            raise ConfigError(f"unknown init {init!r}; valid: {', '.join(INITS)}")
        self.n_heads, self.d_k, self.dropout = n_heads, d_model // n_heads, dropout
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(d_model, d_model) for _ in range(4))
        qkv_gain = 2 ** -0.5 if init == "fairseq" else 1.0
        for lin in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(lin.weight, gain=1.0 if lin is self.out_proj else qkv_gain)
            nn.init.zeros_(lin.bias)

    def _split(self, x: Tensor) -> Tensor:  # (B, T, d) -> (B, H, T, d_k)
        B, T, _ = x.shape
        return x.view(B, T, -1, self.d_k).transpose(1, 2)

    def _project(self, lin: nn.Linear, x: Tensor, head_inputs: Sequence[HeadInput]) -> Tensor:
        """``lin`` applied per head, ``(B, H, T, d_k)``: to ``x``, and for the heads of each head input, to its
        own ``x``. Those heads' rows of the weight are applied to the other input alone."""
        out = self._split(lin(x))
        for hi in head_inputs:
            idx = hi.heads.to(x.device).nonzero().flatten()
            rows = (idx[:, None] * self.d_k + torch.arange(self.d_k, device=x.device)).flatten()
            part = F.linear(hi.x, lin.weight[rows], lin.bias[rows])
            out = out.index_copy(1, idx, self._split(part))
        return out

    def forward(self, x: Tensor, memory: Tensor | None = None, *, key_pad_mask: Tensor | None = None,
                causal: bool = False, rel: Sequence[RelativeTerms] = (), head_inputs: Sequence[HeadInput] = (),
                head_mask: Tensor | None = None, need_weights: bool = False, cache: dict[str, Tensor] | None = None,
                memory_slots: tuple[Tensor, int] | None = None) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` to ``memory`` (cross-attention) or to ``x`` itself (``memory=None``).

        Args:
            x: queries ``(B, Tq, d)`` (and keys/values in self-attention).
            memory: keys/values ``(B_m, S, d)`` for cross-attention; ``B_m`` may divide ``B``: memory row ``b``
                then serves query rows ``b*g .. b*g+g-1`` (``g = B / B_m``; beam search keeps one memory per
                sentence for its beams, so keys and values are projected, stored and read once).
            key_pad_mask: ``(B, Tk)``, True = pad key (never attended).
            causal: query ``i`` sees keys ``<= i`` (counting cached keys first).
            rel: relative terms (self-attention without cache only).
            head_inputs: per-head replacement inputs: of Q, K and V in self-attention; of K and V (the memory)
                in cross-attention.
            head_mask: which keys each head may attend, bool ``(H, Tq, Tk)`` or ``(B, H, Tq, Tk)``, True = may
                (hook (e), DiSAN's directional masks; self-attention without cache). A query row that may attend
                no key at all gets the zero vector as that head's output (and zero weights).
            need_weights: also return the attention weights ``(B, H, Tq, Tk)`` (before dropout).
            cache: incremental decoding state owned by this module: self-attention appends this step's keys and
                values to ``cache['k'], cache['v']``; cross-attention projects ``memory`` once and reuses it.
            memory_slots: ``(slots, g)`` for cross-attention: query row ``i`` is slot ``slots[i]`` of a grid of
                ``B_m * g`` rows, memory row ``b`` serving slots ``b*g .. b*g+g-1`` (beam search decoding only its
                live beams; the empty slots are attended for nothing and dropped).

        Returns:
            ``(out (B, Tq, d), weights or None)``.
        """
        B, Tq, _ = x.shape
        offset, group, slots = 0, 1, None
        if memory_slots is not None:
            slots, group = memory_slots
        elif memory is not None and memory.shape[0] != B:
            group = B // memory.shape[0]
            if group * memory.shape[0] != B:
                raise ConfigError(f"cross-attention: {B} query rows cannot share {memory.shape[0]} memory rows")
        if memory is None:
            q, k, v, offset = self._self_qkv(x, head_inputs, cache)
        else:
            q, k, v = self._cross_qkv(x, memory, head_inputs, cache, slots, group)
        Tk, Tq_rows = k.shape[2], q.shape[2]

        mask, sdpa_causal = _mask(key_pad_mask, causal, Tq, Tk, offset, x.device)
        mask, empty = _with_head_mask(mask, head_mask)
        p = self.dropout if self.training else 0.0

        # SDPA, except in bf16/fp16 on CPU (bf16 autocast in training, bf16 weights in decoding), where its kernel
        # is several times slower than the explicit product at these lengths (benchmarks/bench_attention_kernels.py),
        # and for one query row at inference unless SDPA_FOR_ONE_QUERY is set
        low_precision = q.dtype != torch.float32
        explicit = low_precision and device_policy(q.device).explicit_low_precision_attention
        if not rel and not need_weights and not explicit and (
                Tq_rows > 1 or self.training or SDPA_FOR_ONE_QUERY):
            out, weights = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p,
                                                          is_causal=sdpa_causal), None
        else:
            if sdpa_causal:
                mask = torch.ones(Tq, Tk, dtype=torch.bool, device=x.device).tril()
            out, weights = self._explicit(q, k, v, mask, rel, p)
            if not need_weights:
                weights = None
        if empty is not None:                   # rows with no key to attend: nothing read
            out = out.masked_fill(empty, 0.0)
            weights = None if weights is None else weights.masked_fill(empty, 0.0)
        rows = q.shape[0] * group               # B, or the grid's rows with memory_slots
        out = out.transpose(1, 2).reshape(rows, Tq, self.n_heads * self.d_k)
        if weights is not None and group > 1:   # (rows/group, H, group*Tq, S) -> (rows, H, Tq, S)
            weights = weights.unflatten(2, (group, Tq)).transpose(1, 2).reshape(rows, self.n_heads, Tq, -1)
        if slots is not None:                   # back from the grid to the query rows
            out = out.index_select(0, slots)
            weights = None if weights is None else weights.index_select(0, slots)
        return _linear(self.out_proj, out), weights

    def _stacked(self, names: str) -> tuple[Tensor, Tensor] | None:
        """The weights and biases of the projections ``names`` (``"qkv"`` or ``"kv"``) stacked along the output, so
        that one product replaces two or three; only at inference (eval mode, no autograd) and for plain
        ``nn.Linear`` projections, else None. The stack is kept by :func:`derived`, so it never goes stale."""
        if self.training or torch.is_grad_enabled():
            return None
        lins = [getattr(self, f"{n}_proj") for n in names]
        params = [p for lin in lins if type(lin) is nn.Linear for p in (lin.weight, lin.bias)]
        if len(params) != 2 * len(lins) or any(p.is_inference() for p in params):
            return None
        return derived(self, names, params, lambda: (torch.cat([lin.weight for lin in lins]),
                                                     torch.cat([lin.bias for lin in lins])))

    def _self_qkv(self, x: Tensor, head_inputs: Sequence[HeadInput],
                  cache: dict[str, Tensor] | None) -> tuple[Tensor, Tensor, Tensor, int]:
        """Self-attention's Q, K, V ``(B, H, T, d_k)`` (K and V after the cached ones, which they join) and the
        number of keys cached before this step."""
        B, T, _ = x.shape
        stacked = None if head_inputs else self._stacked("qkv")
        if stacked is not None:      # one product; (B, T, 3, H, d_k) -> per projection (B, H, T, d_k)
            qkv = packed_linear(self, "qkv_packed", x, *stacked).view(B, T, 3, self.n_heads, self.d_k)
            q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        else:
            q, k, v = (self._project(lin, x, head_inputs) for lin in (self.q_proj, self.k_proj, self.v_proj))
        offset = 0
        if cache is not None:
            if "k" in cache:
                offset, rows = cache["k"].shape[2], cache.pop("rows", None)
                k, v = appended(cache["k"], k, rows), appended(cache["v"], v, rows)
            cache["k"], cache["v"] = k, v
        return q, k, v, offset

    def _cross_qkv(self, x: Tensor, memory: Tensor, head_inputs: Sequence[HeadInput], cache: dict[str, Tensor] | None,
                   slots: Tensor | None, group: int) -> tuple[Tensor, Tensor, Tensor]:
        """Cross-attention's Q ``(B_m, H, group * Tq, d_k)`` (query rows in their ``slots`` of the grid, ``group``
        rows per memory row) and K, V ``(B_m, H, S, d_k)`` of ``memory``, projected once per cache."""
        Tq = x.shape[1]
        q = _linear(self.q_proj, x)
        if slots is not None:               # the query rows into their slots of the grid
            q = q.new_zeros(memory.shape[0] * group, Tq, q.shape[-1]).index_copy_(0, slots, q)
        if group > 1:
            # each memory row serves `group` consecutive (grid) rows, e.g. the beams of one sentence: they
            # become one row of group*Tq queries, so memory, keys and values are stored and projected once
            q = q.reshape(memory.shape[0], group * Tq, -1)
        q = self._split(q)
        if cache is not None and "k" in cache:
            k, v = cache["k"], cache["v"]
        else:
            stacked = None if head_inputs else self._stacked("kv")
            if stacked is not None:  # one product; (B_m, S, 2, H, d_k) -> per projection (B_m, H, S, d_k)
                kv = packed_linear(self, "kv_packed", memory, *stacked)
                kv = kv.view(*memory.shape[:2], 2, self.n_heads, self.d_k)
                k, v = kv[:, :, 0].transpose(1, 2), kv[:, :, 1].transpose(1, 2)
            else:
                k, v = (self._project(lin, memory, head_inputs) for lin in (self.k_proj, self.v_proj))
            if cache is not None:
                cache["k"], cache["v"] = k, v
        return q, k, v

    def _explicit(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, rel: Sequence[RelativeTerms],
                  p: float) -> tuple[Tensor, Tensor]:
        """Attention as the explicit product q·kᵀ (+ Shaw's key terms), softmax, dropout ``p``, ·v (+ Shaw's value
        terms): ``(out, weights before dropout)``; ``mask`` True = may attend."""
        scores = q @ k.transpose(-1, -2)                                           # (B, H, Tq, Tk)
        rel_k = relative_scores(q, rel)
        if rel_k is not None:   # Shaw: q_i . a^K_ij
            scores = scores + rel_k
        scores = scores / math.sqrt(self.d_k)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        # in bf16/fp16, torch's softmax computes in float32 and rounds once: the values of a float32 softmax
        # rounded to bf16, at half its cost (no float32 copy of the scores; its backward reads the rounded weights)
        weights = scores.softmax(-1)
        alpha = dropout(weights, p, self.training)
        out = alpha @ v
        rel_v = relative_values(alpha, rel)
        if rel_v is not None:   # Shaw: sum_j alpha_ij a^V_ij
            out = out + rel_v
        return out, weights


class FeedForward(nn.Module):
    """Position-wise feed-forward network ``W_2 act(W_1 x + b_1) + b_2`` (Vaswani Eq. 2).

    ``init``: ``"xavier"`` (Glorot-uniform weights, zero biases) or ``"fairseq"`` (PyTorch's default
    ``nn.Linear`` initialisation, which fairseq 0.12's Transformer layers keep: weights and biases
    uniform in ``±1/sqrt(fan_in)``)."""

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", activation_dropout: float = 0.0,
                 init: str = "fairseq"):
        super().__init__()
        acts = {"relu": nn.ReLU, "gelu": nn.GELU}
        if activation not in acts:
            raise ConfigError(f"unknown activation {activation!r}; valid: {', '.join(acts)}")
        if init not in INITS:
            raise ConfigError(f"unknown init {init!r}; valid: {', '.join(INITS)}")
        self.net = nn.Sequential(nn.Linear(d_model, d_ff), acts[activation](), Dropout(activation_dropout),
                                 nn.Linear(d_ff, d_model))
        if init == "xavier":
            for lin in (self.net[0], self.net[3]):
                nn.init.xavier_uniform_(lin.weight)
                nn.init.zeros_(lin.bias)

    def forward(self, x: Tensor) -> Tensor:
        first, act, _, second = self.net
        if type(first) is type(second) is nn.Linear and bf16_products(self, x, first.weight):   # eval: no dropout
            relu = type(act) is nn.ReLU
            h = packed_linear(first, "packed", x, first.weight, first.bias, relu=relu)
            return packed_linear(second, "packed", h if relu else act(h), second.weight, second.bias)
        return bucketed_rows(self.net, x)


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each with residual and LayerNorm: post-norm ``LN(x + sublayer(x))``
    (Vaswani, default) or pre-norm ``x + sublayer(LN(x))`` (``cfg.pre_norm``)."""

    def __init__(self, cfg):
        super().__init__()
        self.pre_norm = cfg.pre_norm
        self.self_attn = MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cfg.init)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.activation_dropout, cfg.init)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: Tensor, pad_mask: Tensor | None, rel: Sequence[RelativeTerms] = (),
                head_inputs: Sequence[HeadInput] = (), head_mask: Tensor | None = None) -> Tensor:
        if self.pre_norm:
            heads = [dataclasses.replace(h, x=self.norm1(h.x)) for h in head_inputs]
            a, _ = self.self_attn(self.norm1(x), key_pad_mask=pad_mask, rel=rel, head_inputs=heads,
                                  head_mask=head_mask)
            x = x + self.drop(a)
            return x + self.drop(self.ffn(self.norm2(x)))
        a, _ = self.self_attn(x, key_pad_mask=pad_mask, rel=rel, head_inputs=head_inputs, head_mask=head_mask)
        x = self.norm1(x + self.drop(a))
        return self.norm2(x + self.drop(self.ffn(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention, encoder-decoder attention, feed-forward (Vaswani §3.1), post- or pre-norm."""

    def __init__(self, cfg):
        super().__init__()
        self.pre_norm = cfg.pre_norm
        self.self_attn = MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cfg.init)
        self.cross_attn = MultiheadAttention(cfg.d_model, cfg.n_heads, cfg.attn_dropout, cfg.init)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.activation, cfg.activation_dropout, cfg.init)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: Tensor, memory: Tensor, memory_pad_mask: Tensor | None, *,
                cache: dict[str, dict[str, Tensor]] | None = None, need_weights: bool = False,
                memory_heads: Sequence[HeadInput] = (),
                memory_slots: tuple[Tensor, int] | None = None) -> tuple[Tensor, Tensor | None]:
        """Returns ``(x, cross-attention weights (B, H, T, S) or None)``. ``memory_heads``: per-head memories
        (encoder-free HeadXL, SPEC §4.7 [I]); ``memory_slots``: see :meth:`MultiheadAttention.forward`. A plain
        decoding step at inference takes :func:`xlpe.nn.decoding_step.lean_step` where the device's policy says so."""
        if cache is not None:
            if "lean" not in cache:      # decided once per decoding
                cache["lean"] = lean_plan(self, x, need_weights, memory_heads)
            if cache["lean"] is not None and x.shape[1] == 1:
                return lean_step(cache["lean"], x, memory, memory_pad_mask, cache, memory_slots), None
        self_cache = None if cache is None else cache.setdefault("self", {})
        cross_cache = None if cache is None else cache.setdefault("cross", {})
        pre = self.pre_norm
        a, _ = self.self_attn(self.norm1(x) if pre else x, causal=True, cache=self_cache)
        x = x + self.drop(a) if pre else self.norm1(x + self.drop(a))
        a, w = self.cross_attn(self.norm2(x) if pre else x, memory, key_pad_mask=memory_pad_mask,
                               need_weights=need_weights, cache=cross_cache, head_inputs=memory_heads,
                               memory_slots=memory_slots)
        x = x + self.drop(a) if pre else self.norm2(x + self.drop(a))
        f = self.ffn(self.norm3(x) if pre else x)
        x = x + self.drop(f) if pre else self.norm3(x + self.drop(f))
        return x, w
