"""Validation during training: the dev loss (:func:`evaluate_loss`) and the check that decides
``checkpoint_best.pt`` and early stopping (:func:`validate`)."""

from __future__ import annotations

import contextlib
import math

import torch

from xlpe.data.batching import TokenBatchSampler, collate
from xlpe.data.corpus import ParallelData
from xlpe.data.subword import PAD_ID
from xlpe.runtime import Distributed, unwrap
from xlpe.train.config import TrainConfig
from xlpe.train.losses import projected_label_smoothed_nll


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, data: ParallelData, *, max_tokens: int, device: torch.device,
                  label_smoothing: float = 0.0, autocast=contextlib.nullcontext) -> dict[str, float]:
    """Per-token label-smoothed loss, NLL and perplexity of ``model`` on ``data`` (eval mode, no dropout)."""
    was_training = model.training
    model.eval()
    budget = max(max_tokens, int(data.num_tokens.max()))
    loss = nll = 0.0
    ntok = 0
    for idx in TokenBatchSampler(data.num_tokens, budget, shuffle=False):
        b = collate([data[i] for i in idx]).to(device)
        with autocast():
            hidden = model(b.src, b.tgt_in, b.channels, features_only=True)
            l, n = projected_label_smoothed_nll(hidden, unwrap(model).output_weight, b.tgt_out, label_smoothing,
                                                ignore_index=PAD_ID)
        loss, nll, ntok = loss + l.item(), nll + n.item(), ntok + b.ntokens
    model.train(was_training)
    return {"valid_loss": loss / ntok, "valid_nll": nll / ntok, "valid_ppl": math.exp(min(nll / ntok, 50.0))}


def validate(net, dev_data, dev_refs, tgt_sw, cfg: TrainConfig, device, autocast, d: Distributed, best, bad_vals):
    """Validation on rank 0, its outcome shared with all ranks: ``(metrics, improved, bad_vals, best)``."""
    out = None
    if d.is_main:
        metrics = evaluate_loss(net, dev_data, max_tokens=cfg.max_tokens, device=device,
                                label_smoothing=cfg.label_smoothing, autocast=autocast)
        if cfg.dev_bleu:
            import sacrebleu
            from xlpe.infer.translate import translate_data
            hyps = translate_data(net, dev_data, tgt_sw, greedy=True, max_tokens=cfg.max_tokens, device=device)
            metrics["valid_bleu"] = sacrebleu.corpus_bleu(hyps, [dev_refs]).score
        value = metrics["valid_bleu"] if cfg.best_metric == "bleu" else metrics["valid_loss"]
        improved = best is None or (value > best if cfg.best_metric == "bleu" else value < best)
        out = (metrics, improved, 0 if improved else bad_vals + 1, value if improved else best)
    return d.broadcast(out)
