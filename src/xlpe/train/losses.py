"""Training losses: label-smoothed cross-entropy, and the sum with the model's auxiliary losses.

Label smoothing (Szegedy et al. 2016, used by Vaswani et al. 2017 with ε = 0.1) trains against the target
distribution ``q = (1 − ε)·onehot(y) + ε·uniform(V)``, i.e. per token

    loss = (1 − ε)·(−log p_y) + ε·mean_v(−log p_v)

where the mean runs over the whole vocabulary V. This is the form of PyTorch's
``F.cross_entropy(label_smoothing=ε)``, which the tests check it against. (fairseq spreads ε over the V − 1
wrong classes instead: the two differ by O(ε/V).)

Aux losses: a model called with ``return_aux=True`` returns a dict of scalar tensors (e.g. ``loss_dpe``, the
DPE reordering MSE of SPEC §6.3). The training objective is ``loss + Σ_k w_k·aux_k``: each position encoding
declares its losses with default weights, :class:`xlpe.train.config.TrainConfig` (``aux_weights``) overrides
them; :func:`combine_losses` refuses an aux loss without a weight rather than silently ignoring or adding it.
"""

from __future__ import annotations

from typing import Mapping

import torch

from xlpe.errors import ConfigError


_LSE_ROWS = 512


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Sums of the label-smoothed loss and of the NLL over non-pad rows of ``x (N, V)``, with a hand-written
    backward that keeps one ``(N, V)`` float32 buffer (the softmax) instead of autograd's log-probabilities and
    their gradients: the peak memory of the loss is about a third of the plain autograd version's.

    ``d/dx_v [(1-ε)(lse - x_y) + ε(lse - mean(x))] = p_v - (1-ε)[v=y] - ε/V`` and
    ``d/dx_v (lse - x_y) = p_v - [v=y]``.
    The backward writes the gradient into the saved softmax in place, so a second backward through the same
    graph (``retain_graph=True``) is refused by autograd's version check rather than silently wrong."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, target: torch.Tensor, epsilon: float, ignore_index: int, overwrite: bool):
        xf = x.float()
        mask = target != ignore_index
        tgt = target.masked_fill(~mask, 0)
        # row blocks bound logsumexp's (rows, V) temporary to a few MB
        lse = torch.cat([torch.logsumexp(c, dim=-1) for c in xf.split(_LSE_ROWS)]) if len(xf) else xf.new_zeros(0)
        nll = (lse - xf.gather(1, tgt[:, None]).squeeze(1)).masked_fill(~mask, 0.0)
        smooth = (lse - xf.mean(dim=-1)).masked_fill(~mask, 0.0)
        loss = ((1.0 - epsilon) * nll + epsilon * smooth).sum()
        if ctx.needs_input_grad[0]:
            # the softmax goes into the scores' own buffer when the caller allows it (or when xf is a copy)
            probs = (xf.sub_(lse[:, None]) if overwrite or xf is not x else torch.sub(xf, lse[:, None])).exp_()
            ctx.save_for_backward(probs, tgt, mask)
            ctx.epsilon, ctx.dtype = epsilon, x.dtype
        return loss, nll.sum()

    @staticmethod
    def backward(ctx, g_loss: torch.Tensor, g_nll: torch.Tensor):
        probs, tgt, mask = ctx.saved_tensors
        eps, V = ctx.epsilon, probs.shape[1]
        gl, gn = g_loss.float(), g_nll.float()
        grad = probs.mul_(gl + gn)
        grad.sub_(gl * (eps / V))
        grad.scatter_add_(1, tgt[:, None], (-(gl * (1.0 - eps) + gn)).expand(len(tgt), 1).contiguous())
        grad.masked_fill_(~mask[:, None], 0.0)
        return grad.to(ctx.dtype), None, None, None, None


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float = 0.1, *,
                       ignore_index: int = 0, reduction: str = "mean",
                       overwrite_logits: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy and the plain NLL over non-pad target tokens.

    Args:
        logits: (..., V) unnormalised scores (any float dtype; computed in float32).
        target: (...) gold ids; positions equal to ``ignore_index`` count nowhere.
        epsilon: the smoothing mass ε in [0, 1).
        reduction: ``"mean"`` (per non-pad token) or ``"sum"``.
        overwrite_logits: let the backward's softmax reuse the memory of ``logits`` (float32 only), which then
            hold garbage. The training loop sets it: nothing else reads the scores, and the loss's peak memory
            drops to one ``(N, V)`` buffer.

    Returns:
        ``(loss, nll)``: the smoothed loss (what is trained) and the NLL (for logging / perplexity), both
        differentiable. The gradient is computed by :class:`_SmoothedCrossEntropy` (memory-lean; tested
        against autograd through ``log_softmax``).
    """
    if not 0.0 <= epsilon < 1.0:
        raise ConfigError(f"label smoothing must be in [0, 1), got {epsilon}")
    if reduction not in ("mean", "sum"):
        raise ConfigError(f"reduction must be 'mean' or 'sum', not {reduction!r}")
    V = logits.shape[-1]
    loss, nll = _SmoothedCrossEntropy.apply(logits.reshape(-1, V), target.reshape(-1), float(epsilon),
                                            int(ignore_index), bool(overwrite_logits))
    if reduction == "sum":
        return loss, nll
    n = (target != ignore_index).sum().clamp(min=1)
    return loss / n, nll / n


#: rows of the (rows, V) score block that :func:`projected_label_smoothed_nll` computes at a time: ~2M scores
#: (8 MB in float32), small enough for the elementwise passes to run in cache
_PROJ_BLOCK = 1 << 21
#: bytes of the score gradients ``g`` kept for the two gradient products (a whole number of score blocks, at least
#: one): 24 MiB hold 1,572 rows of an 8k vocabulary in bf16, so a Multi30k batch takes 3 products each instead of
#: one per score block (larger products, fewer float32 partial sums of dW to add; docs/results/speed.md). Below
#: glibc's 32 MiB mmap threshold, so the buffer comes from the heap (xlpe.runtime.retain_freed_memory), not from
#: fresh pages at every update.
_GRAD_BYTES = 24 << 20


class _ProjectedSmoothedCrossEntropy(torch.autograd.Function):
    """Output projection and label-smoothed loss in row blocks (see :func:`projected_label_smoothed_nll`).

    Forward computes, block by block, the scores ``h W^T``, the loss sums and, when a gradient is wanted, the
    gradients of the smoothed loss sum with respect to ``h`` and ``W`` (``g = p - (1-ε)·onehot(y) - ε/V``;
    ``dh = g W``, ``dW = gᵀ h``): the blocks' ``g`` fill a buffer of at most ``_GRAD_BYTES``, and each full buffer
    goes through the two products at once. No float32 ``(N, V)`` tensor outlives a block, and the backward only
    scales the gradients."""

    @staticmethod
    def forward(ctx, h, weight, target, epsilon: float, ignore_index: int, cdtype, grad_mode: bool):
        with torch.autocast(h.device.type, enabled=False):
            # forward runs with grad mode off: whether a backward can follow is the caller's grad mode
            want = grad_mode and (ctx.needs_input_grad[0] or ctx.needs_input_grad[1])
            keep = (target != ignore_index).nonzero().squeeze(1)
            hs, ts = h.index_select(0, keep).to(cdtype), target.index_select(0, keep)
            wc = weight.to(cdtype)
            # the gradient products run in bf16 like autocast's backward; fp16 (GPU) would flush the small
            # softmax gradients to zero without the loss scaler's help, so they run in float32 there
            gdtype = torch.float32 if cdtype == torch.float16 else cdtype
            wg = wc if gdtype == cdtype else weight.float()
            V, n = weight.shape[0], len(ts)
            rows = max(1, _PROJ_BLOCK // V)
            # rows per buffer; in float32 the block's softmax already is its gradient block: no buffer, no copy
            buffered = gdtype != torch.float32
            span = rows * max(1, _GRAD_BYTES // (rows * V * gdtype.itemsize)) if buffered else rows
            # in 16 bits the rows are padded (zero rows, zero gradients) to whole blocks, so that every product has
            # one of a few shapes: oneDNN builds a primitive for every new shape (milliseconds each), and the count
            # of target tokens differs in every batch (docs/results/speed.md)
            pad = (-n) % rows if buffered else 0
            if pad:
                hs = torch.cat([hs, hs.new_zeros(pad, hs.shape[1])])
            loss = h.new_zeros((), dtype=torch.float32)
            nll_total = loss.clone()
            dh = (torch.empty(hs.shape, dtype=torch.float32, device=h.device)
                  if want and ctx.needs_input_grad[0] else None)
            want_dw, dw = want and ctx.needs_input_grad[1], None
            for s0 in range(0, len(hs), span):
                e0 = min(s0 + span, len(hs))
                grads = torch.empty((e0 - s0, V), dtype=gdtype, device=h.device) if want and buffered else None
                for s in range(s0, e0, rows):
                    hb, tb = hs[s:min(s + rows, e0)], ts[s:min(s + rows, e0)]
                    z = (hb @ wc.t())[:len(tb)].float()
                    z.sub_(z.amax(dim=1, keepdim=True))
                    zy = z.gather(1, tb[:, None]).squeeze(1)
                    zmean = z.mean(dim=1)
                    sumexp = z.exp_().sum(dim=1)
                    lse = sumexp.log()
                    nll = lse - zy
                    nll_total += nll.sum()
                    loss += ((1.0 - epsilon) * nll + epsilon * (lse - zmean)).sum()
                    if want:
                        g = z.mul_(sumexp.reciprocal_()[:, None]).sub_(epsilon / V)       # the softmax, shifted
                        g.scatter_add_(1, tb[:, None], g.new_full((len(tb), 1), -(1.0 - epsilon)))
                        if grads is None:
                            grads = g                                                     # float32: the block itself
                        else:
                            grads[s - s0:s - s0 + len(tb)] = g                           # rounded to gdtype
                if grads is not None and e0 > n:
                    grads[n - s0:].zero_()                                                # the padding rows
                if dh is not None:
                    dh[s0:e0] = grads @ wg
                if want_dw:
                    part = grads.t() @ (hs[s0:e0] if gdtype == cdtype else hs[s0:e0].float())
                    dw = part.float() if dw is None else dw.add_(part)
            if dh is not None:
                dh = dh[:n]
            if want_dw and dw is None:          # no target token in the batch
                dw = torch.zeros(weight.shape, dtype=torch.float32, device=h.device)
            if want:
                ctx.save_for_backward(keep, dh, dw)
                ctx.h_shape, ctx.h_dtype, ctx.w_dtype = h.shape, h.dtype, weight.dtype
        ctx.mark_non_differentiable(nll_total)
        return loss, nll_total

    @staticmethod
    def backward(ctx, g_loss, g_nll):
        keep, dh, dw = ctx.saved_tensors
        g = g_loss.float()
        grad_h = grad_w = None
        if dh is not None:
            grad_h = dh.new_zeros(ctx.h_shape).index_copy_(0, keep, dh.mul_(g)).to(ctx.h_dtype)
        if dw is not None:
            grad_w = dw.mul_(g).to(ctx.w_dtype)
        return grad_h, grad_w, None, None, None, None, None


def projected_label_smoothed_nll(hidden: torch.Tensor, weight: torch.Tensor, target: torch.Tensor,
                                 epsilon: float = 0.1, *, ignore_index: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`label_smoothed_nll` of the scores ``hidden @ weight.T`` (the output projection, no bias), fused:
    the scores are computed for non-pad target positions only, a block of rows at a time, and never stored.

    Against the projection followed by :func:`label_smoothed_nll` this skips the padding rows' share of the
    output projection and keeps the loss's memory at one float32 block and a gradient buffer of at most 24 MB
    (``_GRAD_BYTES``) instead of several ``(N, V)`` buffers (scores, their float32 copy, the softmax, the
    gradient). Under CPU or GPU autocast the matrix products run in the autocast dtype (like ``F.linear``
    there) and the softmax in float32; under fp16 autocast the two gradient products run in float32 (they are
    computed before any loss scaling, so fp16 would flush small gradients to zero).

    Args:
        hidden: ``(..., d)`` decoder outputs before the output projection.
        weight: ``(V, d)`` output projection (the tied embedding table, or the separate output layer's weight).
        target: ``(...)`` gold ids; ``ignore_index`` positions count nowhere.
        epsilon: the smoothing mass ε in [0, 1).

    Returns:
        ``(loss, nll)``: the *sums* of the smoothed loss (differentiable, with respect to ``hidden`` and
        ``weight``) and of the plain NLL (for logging; not differentiable: its gradient is never needed in
        training). The gradients are computed in the forward pass (tested against autograd through the
        unfused path); a second backward through the same graph is not supported.
    """
    if not 0.0 <= epsilon < 1.0:
        raise ConfigError(f"label smoothing must be in [0, 1), got {epsilon}")
    d = hidden.shape[-1]
    if weight.dim() != 2 or weight.shape[1] != d:
        raise ConfigError(f"output weight of shape {tuple(weight.shape)} does not match hidden size {d}")
    dev = hidden.device.type
    cdtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden.dtype
    return _ProjectedSmoothedCrossEntropy.apply(hidden.reshape(-1, d), weight, target.reshape(-1), float(epsilon),
                                                int(ignore_index), cdtype, torch.is_grad_enabled())


#: how auxiliary losses enter the objective (TrainConfig.aux_loss_mode; SPEC §6.3's dpe_loss_mode)
AUX_LOSS_MODES = ("paper", "fairseq")


def combine_losses(loss: torch.Tensor, aux: Mapping[str, torch.Tensor] | None, weights: Mapping[str, float], *,
                   mode: str = "paper", ntokens: int | float = 1) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The training objective from the translation loss and the model's auxiliary losses, and the aux terms
    for logging.

    ``loss`` is the translation loss *summed* over ``ntokens`` target tokens (or a mean with ``ntokens=1``); the
    caller divides the result by the token count. ``mode='paper'`` (Zheng et al.'s "summed with the standard
    Transformer loss"): ``loss + ntokens·Σ_k w_k·aux_k``, i.e. per token ``L_nll + Σ λ·L_aux``. ``mode='fairseq'``
    (the DPE code's criterion): ``(1 − Σ_k w_k)·loss + Σ_k w_k·aux_k``, so after the division by the token count
    an aux loss weighs about ``λ/ntokens`` against the per-token NLL (SPEC §6.3).

    Every aux loss the model returns needs a weight (0 switches it off explicitly); an aux loss without
    one raises :class:`ConfigError` naming it.
    """
    if mode not in AUX_LOSS_MODES:
        raise ConfigError(f"aux loss mode must be one of {', '.join(AUX_LOSS_MODES)}, not {mode!r}")
    terms: dict[str, tuple[float, torch.Tensor]] = {}
    for k, v in (aux or {}).items():
        if not torch.is_tensor(v) or v.dim() != 0:
            continue          # aux may also carry non-loss outputs (e.g. attention); only scalars are losses
        if k not in weights:
            raise ConfigError(f"the model returned the auxiliary loss {k!r} but no weight is configured for it "
                              f"(set aux_weights, e.g. --aux-weight {k}=0.5, or 0 to switch it off)")
        terms[k] = (float(weights[k]), v)
    lam = sum(w for w, _ in terms.values())
    if mode == "fairseq" and lam > 1:
        raise ConfigError(f"aux loss mode 'fairseq' weighs the translation loss by 1 - {lam:g}: the weights "
                          f"{ {k: w for k, (w, _) in terms.items()} } must sum to at most 1")
    total = loss if mode == "paper" or lam == 0 else (1.0 - lam) * loss
    scale = float(ntokens) if mode == "paper" else 1.0
    parts: dict[str, torch.Tensor] = {}
    for k, (w, v) in terms.items():
        parts[k] = v.detach()
        if w != 0.0:
            total = total + (w * scale) * v.float()
    return total, parts
