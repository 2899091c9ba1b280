"""Training losses: label-smoothed cross-entropy, and the sum with the model's auxiliary losses.

Label smoothing (Szegedy et al. 2016, used by Vaswani et al. 2017 with ε = 0.1) trains against the target
distribution ``q = (1 − ε)·onehot(y) + ε·uniform(V)``, i.e. per token

    loss = (1 − ε)·(−log p_y) + ε·mean_v(−log p_v)

where the mean runs over the whole vocabulary V. This is the form of PyTorch's
``F.cross_entropy(label_smoothing=ε)``, which the tests check it against. (fairseq spreads ε over the V − 1
wrong classes instead: the two differ by O(ε/V).)

Aux losses: a model called with ``return_aux=True`` returns a dict of scalar tensors (e.g. ``loss_dpe``, the
DPE reordering MSE of SPEC §6.3). The training objective is ``loss + Σ_k w_k·aux_k`` with weights from
:class:`xlpe.train.trainer.TrainConfig` (``aux_weights``); :func:`combine_losses` refuses an aux loss
without a weight rather than silently ignoring or adding it.
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F

from xlpe.errors import ConfigError


def label_smoothed_nll(logits: torch.Tensor, target: torch.Tensor, epsilon: float = 0.1, *,
                       ignore_index: int = 0, reduction: str = "mean") -> tuple[torch.Tensor, torch.Tensor]:
    """Label-smoothed cross-entropy and the plain NLL over non-pad target tokens.

    Args:
        logits: (..., V) unnormalised scores (any float dtype; computed in float32).
        target: (...) gold ids; positions equal to ``ignore_index`` count nowhere.
        epsilon: the smoothing mass ε in [0, 1).
        reduction: ``"mean"`` (per non-pad token) or ``"sum"``.

    Returns:
        ``(loss, nll)``: the smoothed loss (what is trained) and the NLL (for logging / perplexity).
    """
    if not 0.0 <= epsilon < 1.0:
        raise ConfigError(f"label smoothing must be in [0, 1), got {epsilon}")
    lprobs = F.log_softmax(logits.float(), dim=-1)
    mask = target != ignore_index
    tgt = target.masked_fill(~mask, 0).unsqueeze(-1)
    nll = -lprobs.gather(-1, tgt).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    loss = loss.masked_fill(~mask, 0.0).sum()
    nll = nll.masked_fill(~mask, 0.0).sum()
    if reduction == "sum":
        return loss, nll
    if reduction != "mean":
        raise ConfigError(f"reduction must be 'mean' or 'sum', not {reduction!r}")
    n = mask.sum().clamp(min=1)
    return loss / n, nll / n


def combine_losses(loss: torch.Tensor, aux: Mapping[str, torch.Tensor] | None,
                   weights: Mapping[str, float]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``loss + Σ_k weights[k]·aux[k]``, and the weighted terms for logging.

    Every aux loss the model returns needs a weight (0 switches it off explicitly); an aux loss without
    one raises :class:`ConfigError` naming it.
    """
    total = loss
    parts: dict[str, torch.Tensor] = {}
    for k, v in (aux or {}).items():
        if not torch.is_tensor(v) or v.dim() != 0:
            continue          # aux may also carry non-loss outputs (e.g. attention); only scalars are losses
        if k not in weights:
            raise ConfigError(f"the model returned the auxiliary loss {k!r} but no weight is configured for it "
                              f"(set aux_weights, e.g. --aux-weight {k}=0.5, or 0 to switch it off)")
        w = float(weights[k])
        parts[k] = v.detach()
        if w != 0.0:
            total = total + w * v.float()
    return total, parts
