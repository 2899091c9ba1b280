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
