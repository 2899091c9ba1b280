"""A decoder layer's incremental step at inference in few operations (one new token per row, keys and values cached).

:class:`xlpe.nn.attention.DecoderLayer` takes this path for a beam or greedy step where the device's policy says so
(:attr:`~xlpe.nn.device.DevicePolicy.lean_decoding_step`, the CPU) and the layer is plain: eval mode, no autograd,
float32 (no bf16 products), ``nn.Linear`` projections (not int8), no per-head memories, no attention weights asked
for. It computes what the general path computes, Vaswani §3.1 post- or pre-norm, in fewer and larger operations:

* the rows as a matrix ``(B, d)``, each linear layer one ``addmm``; self-attention's Q, K and V one product;
* both attentions as the explicit product ``q·kᵀ``, softmax, ``·v`` (PyTorch's batched products): at one query
  row per decoder row, and a sentence's beams as one row of queries over its memory, SDPA's CPU kernel pays a fixed
  cost per head and row block that is larger than the products themselves;
* the cross-attention's keys stored transposed and contiguous, ``(B_m, H, d_k, S)``, and its values contiguous,
  once per decoding (under their own names in the cache), so no step copies them again;
* no module calls, masks or dropout built per step.

The self-attention cache has the general path's layout (``k``, ``v``: ``(B, H, t, d_k)``, reordered lazily through
``rows``, :meth:`xlpe.nn.transformer.DecoderCache.reorder_self`). Verified against the general path in
``tests/test_beam.py`` (same hypotheses and scores).
"""

from __future__ import annotations

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


def lean_step_applies(layer: nn.Module, x: Tensor, cache: dict | None, need_weights: bool, memory_heads) -> bool:
    """Whether :func:`lean_step` computes ``layer``'s step on ``x (B, 1, d)`` (see the module docstring)."""
    if (cache is None or need_weights or memory_heads or x.shape[1] != 1 or layer.training
            or torch.is_grad_enabled() or x.dtype != torch.float32
            or not device_policy(x.device).lean_decoding_step):
        return False
    first, act, _, second = layer.ffn.net
    lins = (first, second, layer.self_attn.out_proj, layer.cross_attn.q_proj, layer.cross_attn.out_proj)
    return (all(type(lin) is nn.Linear and lin.weight.dtype == torch.float32 for lin in lins)
            and isinstance(act, (nn.ReLU, nn.GELU)) and not bf16_products(layer.ffn, x, first.weight)
            and layer.self_attn._stacked("qkv") is not None and layer.cross_attn._stacked("kv") is not None)


def _linear(lin: nn.Linear, x: Tensor) -> Tensor:
    return torch.addmm(lin.bias, x, lin.weight.t())


def _norm(norm: nn.LayerNorm, x: Tensor) -> Tensor:
    return F.layer_norm(x, norm.normalized_shape, norm.weight, norm.bias, norm.eps)


def _residual(layer: nn.Module, x: Tensor, a: Tensor, norm: nn.LayerNorm, next_norm: nn.LayerNorm | None):
    """``(x, the next sublayer's input)`` after adding sublayer output ``a``: post-norm ``LN(x + a)`` both;
    pre-norm ``x + a`` and its ``next_norm`` (None: the last sublayer)."""
    if not layer.pre_norm:
        x = _norm(norm, x + a)
        return x, x
    x = x + a
    return x, None if next_norm is None else _norm(next_norm, x)


def lean_step(layer: nn.Module, x: Tensor, memory: Tensor, memory_pad_mask: Tensor | None,
              cache: dict[str, dict[str, Tensor]], memory_slots: tuple[Tensor, int] | None) -> Tensor:
    """``layer`` (a :class:`~xlpe.nn.attention.DecoderLayer`) on ``x (B, 1, d)``, one step; the arguments and
    the result as :meth:`~xlpe.nn.attention.DecoderLayer.forward`'s (without attention weights)."""
    B, _, d = x.shape
    sa, ca = layer.self_attn, layer.cross_attn
    H, dk = sa.n_heads, sa.d_k
    scale = dk ** -0.5
    x = x.view(B, d)
    h = _norm(layer.norm1, x) if layer.pre_norm else x

    # self-attention over the cached keys and this step's
    w, b = sa._stacked("qkv")
    qkv = torch.addmm(b, h, w.t()).view(B, 3, H, 1, dk)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    kv = cache.setdefault("self", {})
    if "k" in kv:
        rows = kv.pop("rows", None)
        k, v = appended(kv["k"], k, rows), appended(kv["v"], v, rows)
    kv["k"], kv["v"] = k, v
    alpha = torch.matmul(q, k.transpose(-1, -2)).mul_(scale).softmax(-1)
    a = _linear(sa.out_proj, torch.matmul(alpha, v).view(B, d))
    x, h = _residual(layer, x, a, layer.norm1, layer.norm2)

    # cross-attention: a memory row's decoder rows (its beams) are one row of queries
    kv = cache.setdefault("cross", {})
    if "kt" not in kv:
        w, b = ca._stacked("kv")
        mem = torch.addmm(b, memory.reshape(-1, d), w.t()).view(*memory.shape[:2], 2, H, dk)
        kv["kt"] = mem[:, :, 0].permute(0, 2, 3, 1).contiguous()        # (B_m, H, d_k, S)
        kv["vc"] = mem[:, :, 1].transpose(1, 2).contiguous()            # (B_m, H, S, d_k)
    B_m = kv["kt"].shape[0]
    q = _linear(ca.q_proj, h)
    slots, group = memory_slots if memory_slots is not None else (None, B // B_m)
    if slots is not None:   # the rows into their slots of the grid of `group` per memory row
        q = q.new_zeros(B_m * group, d).index_copy_(0, slots, q)
    scores = torch.matmul(q.view(B_m, group, H, dk).transpose(1, 2), kv["kt"]).mul_(scale)
    if memory_pad_mask is not None:
        scores.masked_fill_(memory_pad_mask[:, None, None, :], float("-inf"))
    a = torch.matmul(scores.softmax(-1), kv["vc"]).transpose(1, 2).reshape(B_m * group, d)
    if slots is not None:
        a = a.index_select(0, slots)
    x, h = _residual(layer, x, _linear(ca.out_proj, a), layer.norm2, layer.norm3)

    # feed-forward
    first, act, _, second = layer.ffn.net
    f = _linear(first, h)
    f = f.relu_() if type(act) is nn.ReLU else act(f)
    x, _ = _residual(layer, x, _linear(second, f), layer.norm3, None)
    return x.view(B, 1, d)
