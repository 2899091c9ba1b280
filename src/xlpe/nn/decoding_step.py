"""A decoder layer's incremental step at inference in few operations (one new token per row, keys and values cached).

:class:`xlpe.nn.attention.DecoderLayer` takes this path for a beam or greedy step where the device's policy says so
(:attr:`~xlpe.nn.device.DevicePolicy.lean_decoding_step`, the CPU) and the layer is plain: eval mode, no autograd,
float32 (no bf16 products), ``nn.Linear`` projections (not int8), no per-head memories, no attention weights asked
for (decided at a decoding's first step and kept, with the layer's :class:`LeanPlan`, in its cache). It computes
what the general path computes, Vaswani §3.1 post- or pre-norm, in fewer and larger operations:

* the rows as a matrix ``(B, d)``, each linear layer one ``addmm``; self-attention's Q, K and V one product;
* both attentions as the explicit product ``q·kᵀ``, softmax, ``·v`` (PyTorch's batched products): at one query
  row per decoder row, and a sentence's beams as one row of queries over its memory, SDPA's CPU kernel pays a fixed
  cost per head and row block that is larger than the products themselves;
* the cross-attention's keys stored transposed and contiguous, ``(B_m, H, d_k, S)``, and its values contiguous,
  once per decoding (under their own names in the cache), so no step copies them again;
* no module calls, masks or dropout built per step, and the weights looked up once per decoding.

The self-attention cache has the general path's layout (``k``, ``v``: ``(B, H, t, d_k)``, reordered lazily through
``rows``, :meth:`xlpe.nn.transformer.DecoderCache.reorder_self`). Verified against the general path in
``tests/test_decoding_step.py`` (the same logits step by step; the same hypotheses and scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from xlpe.nn.device import bf16_products, device_policy


def appended(cached: Tensor, new: Tensor, rows: Tensor | None) -> Tensor:
    """``cat((cached[rows], new), 2)`` (``rows`` None: all, in order) in one pass: the rows are gathered straight
    into the new tensor, not into a copy that ``cat`` then copies again (the cache's reorder is deferred to here,
    :meth:`xlpe.nn.transformer.DecoderCache.reorder_self`). With autograd recording, as two differentiable steps."""
    if torch.is_grad_enabled() and (cached.requires_grad or new.requires_grad):
        return torch.cat((cached if rows is None else cached.index_select(0, rows), new), 2)
    t = cached.shape[2]
    out = new.new_empty(new.shape[0], new.shape[1], t + new.shape[2], new.shape[3])
    rows = torch.arange(cached.shape[0], device=cached.device) if rows is None else rows
    torch.index_select(cached, 0, rows, out=out[:, :, :t])
    out[:, :, t:] = new
    return out


@dataclass(frozen=True)
class LeanPlan:
    """What :func:`lean_step` reads of one decoder layer, gathered once per decoding: each linear layer's weight
    transposed (a view) and bias, self-attention's Q, K, V and cross-attention's K, V stacked, the layer norms, the
    activation, the heads."""

    qkv: tuple[Tensor, Tensor]
    self_out: tuple[Tensor, Tensor]
    cross_q: tuple[Tensor, Tensor]
    cross_kv: tuple[Tensor, Tensor]
    cross_out: tuple[Tensor, Tensor]
    ffn_in: tuple[Tensor, Tensor]
    ffn_out: tuple[Tensor, Tensor]
    norms: tuple[nn.LayerNorm, nn.LayerNorm, nn.LayerNorm]
    relu: bool
    act: nn.Module
    pre_norm: bool
    heads: int
    d_k: int


def lean_plan(layer: nn.Module, x: Tensor, need_weights: bool, memory_heads) -> LeanPlan | None:
    """The :class:`LeanPlan` of ``layer`` (a :class:`~xlpe.nn.attention.DecoderLayer`) for steps on rows like
    ``x (B, 1, d)``, or None where :func:`lean_step` does not apply (see the module docstring)."""
    if (need_weights or memory_heads or x.shape[1] != 1 or layer.training or torch.is_grad_enabled()
            or x.dtype != torch.float32 or not device_policy(x.device).lean_decoding_step):
        return None
    sa, ca = layer.self_attn, layer.cross_attn
    first, act, _, second = layer.ffn.net
    lins = (first, second, sa.out_proj, ca.q_proj, ca.out_proj)
    if (not all(type(lin) is nn.Linear and lin.weight.dtype == torch.float32 for lin in lins)
            or not isinstance(act, (nn.ReLU, nn.GELU)) or bf16_products(layer.ffn, x, first.weight)):
        return None
    qkv, kv = sa._stacked("qkv"), ca._stacked("kv")
    if qkv is None or kv is None:
        return None
    t = lambda w, b: (w.t(), b)                                   # noqa: E731
    return LeanPlan(qkv=t(*qkv), self_out=t(sa.out_proj.weight, sa.out_proj.bias),
                    cross_q=t(ca.q_proj.weight, ca.q_proj.bias), cross_kv=t(*kv),
                    cross_out=t(ca.out_proj.weight, ca.out_proj.bias), ffn_in=t(first.weight, first.bias),
                    ffn_out=t(second.weight, second.bias), norms=(layer.norm1, layer.norm2, layer.norm3),
                    relu=type(act) is nn.ReLU, act=act, pre_norm=layer.pre_norm, heads=sa.n_heads, d_k=sa.d_k)


def _linear(wb: tuple[Tensor, Tensor], x: Tensor) -> Tensor:
    return torch.addmm(wb[1], x, wb[0])


def _norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def _residual(plan: LeanPlan, x: Tensor, a: Tensor, i: int) -> tuple[Tensor, Tensor | None]:
    """``(x, the next sublayer's input)`` after adding sublayer ``i``'s output ``a``: post-norm ``LN_i(x + a)``
    both; pre-norm ``x + a`` and ``LN_{i+1}`` of it (None after the last sublayer)."""
    if not plan.pre_norm:
        x = _norm(plan.norms[i], x + a)
        return x, x
    x = x + a
    return x, _norm(plan.norms[i + 1], x) if i < 2 else None


def lean_step(plan: LeanPlan, x: Tensor, memory: Tensor, memory_pad_mask: Tensor | None,
              cache: dict[str, dict[str, Tensor]], memory_slots: tuple[Tensor, int] | None) -> Tensor:
    """The layer of ``plan`` on ``x (B, 1, d)``, one step; the arguments and the result as
    :meth:`~xlpe.nn.attention.DecoderLayer.forward`'s (without attention weights)."""
    B, _, d = x.shape
    H, dk = plan.heads, plan.d_k
    scale = dk ** -0.5
    x = x.view(B, d)
    h = _norm(plan.norms[0], x) if plan.pre_norm else x

    # self-attention over the cached keys and this step's
    qkv = _linear(plan.qkv, h).view(B, 3, H, 1, dk)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    kv = cache.setdefault("self", {})
    if "k" in kv:
        rows = kv.pop("rows", None)
        k, v = appended(kv["k"], k, rows), appended(kv["v"], v, rows)
    kv["k"], kv["v"] = k, v
    alpha = torch.matmul(q, k.transpose(-1, -2)).mul_(scale).softmax(-1)
    x, h = _residual(plan, x, _linear(plan.self_out, torch.matmul(alpha, v).view(B, d)), 0)

    # cross-attention: a memory row's decoder rows (its beams) are one row of queries
    kv = cache.setdefault("cross", {})
    if "kt" not in kv:
        mem = _linear(plan.cross_kv, memory.reshape(-1, d)).view(*memory.shape[:2], 2, H, dk)
        kv["kt"] = mem[:, :, 0].permute(0, 2, 3, 1).contiguous()        # (B_m, H, d_k, S)
        kv["vc"] = mem[:, :, 1].transpose(1, 2).contiguous()            # (B_m, H, S, d_k)
    B_m = kv["kt"].shape[0]
    q = _linear(plan.cross_q, h)
    slots, group = memory_slots if memory_slots is not None else (None, B // B_m)
    if slots is not None:   # the rows into their slots of the grid of `group` per memory row
        q = q.new_zeros(B_m * group, d).index_copy_(0, slots, q)
    scores = torch.matmul(q.view(B_m, group, H, dk).transpose(1, 2), kv["kt"]).mul_(scale)
    if memory_pad_mask is not None:
        scores.masked_fill_(memory_pad_mask[:, None, None, :], float("-inf"))
    a = torch.matmul(scores.softmax(-1), kv["vc"]).transpose(1, 2).reshape(B_m * group, d)
    if slots is not None:
        a = a.index_select(0, slots)
    x, h = _residual(plan, x, _linear(plan.cross_out, a), 1)

    # feed-forward
    f = _linear(plan.ffn_in, h)
    f = f.relu_() if plan.relu else plan.act(f)
    x, _ = _residual(plan, x, _linear(plan.ffn_out, f), 2)
    return x.view(B, 1, d)
