"""How well a trained DPE model's position layers learned the target order (Zheng et al.; SPEC §6.1-§6.3).

For every source subword with a DPE target ``p(i)`` (the target-order rank from the alignments, SPEC §6.2) the
probe compares the DPE layers' output ``z_i`` with ``PE(p(i))``, the model's own sinusoid row:

* ``mse``: the training loss's quantity, ``mean((z_i - PE(p(i)))²)`` over the aligned tokens and the ``d``
  dimensions, on the given (test) sentences;
* ``tau``: each ``z_i`` decoded back to the position whose sinusoid row is nearest
  (:func:`xlpe.nn.positions.dpe.decode_positions`); the aligned tokens sorted by that position (ties: source
  order) give an order, scored with lader's Kendall τ accuracy against the ranks ``p(i)``
  (:func:`xlpe.evaluate.reorder_metrics.corpus_reorder_scores`, micro average);
* ``tau_identity``: the same for the source order itself, the score of a model that learned nothing;
* ``mse_identity``: the MSE of ``z_i = PE(i)``, the layers passing the sequential position through unchanged (what
  the MSE would be without any reordering learned).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from xlpe.data.batching import TokenBatchSampler, collate
from xlpe.data.corpus import ParallelData
from xlpe.data.subword import SubwordModel
from xlpe.errors import ConfigError
from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
from xlpe.infer.translate import model_device
from xlpe.nn.positions.dpe import decode_positions, model_sinusoid
from xlpe.sources import open_source


@torch.inference_mode()
def dpe_order_quality(model: torch.nn.Module, subword: SubwordModel, src_lines: Sequence[str], targets: str, *,
                      max_tokens: int = 4000) -> dict:
    """Probe a DPE model on ``src_lines`` whose DPE targets are the file ``targets`` (``i-p`` lines over subword
    indices, as :func:`xlpe.reorder.targets.format_dpe_line` writes them). Returns ``{mse, mse_identity, tau,
    tau_identity, chunk, chunk_identity, tokens, sentences}``."""
    if "dpe" not in model.cfg.pe:
        raise ConfigError(f"the model has no DPE layers (pe={list(model.cfg.pe)}): nothing to probe")
    model.eval()
    data = ParallelData.from_sentences(list(src_lines), None, subword, max_src_len=model.cfg.max_len,
                                       channels={"dpe_target": open_source("dpe_target", "dpe:" + str(targets))},
                                       names=("<source>", None))
    dev = model_device(model)
    sq, sq_id, n_tok = 0.0, 0.0, 0
    orders, ident, ranks = [], [], []
    for idx in TokenBatchSampler(data.num_tokens, max(max_tokens, int(data.num_tokens.max())), shuffle=False):
        b = collate([data[i] for i in idx]).to(dev)
        enc = model.encoder(b.src, b.channels)
        z, target = enc.aux["dpe_z"].float(), b.channels["dpe_target"]
        aligned = (target >= 0) & ~enc.src_pad_mask
        rows = model_sinusoid(target.clamp(min=0), model.cfg).float()
        sq += float((z - rows).pow(2)[aligned].sum())
        seq = model_sinusoid(torch.arange(z.shape[1], device=dev), model.cfg).float()[None]
        sq_id += float((seq - rows).pow(2)[aligned].sum())
        n_tok += int(aligned.sum())
        decoded = decode_positions(z, model.cfg, model.cfg.max_len).cpu().numpy()
        t, a = target.cpu().numpy(), aligned.cpu().numpy()
        for k in range(len(idx)):
            keep = np.flatnonzero(a[k])
            r = t[k, keep]
            orders.append(np.argsort(decoded[k, keep], kind="stable").tolist())
            ident.append(list(range(len(keep))))
            ranks.append(r.tolist())
    if not n_tok:
        raise ConfigError(f"{targets}: no source token has a DPE target; nothing to probe")
    learned, base = corpus_reorder_scores(orders, ranks), corpus_reorder_scores(ident, ranks)
    return {"mse": sq / (n_tok * model.cfg.d_model), "mse_identity": sq_id / (n_tok * model.cfg.d_model),
            "tau": learned["tau"], "tau_identity": base["tau"],
            "chunk": learned["chunk"], "chunk_identity": base["chunk"], "tokens": n_tok, "sentences": len(data)}

