"""``dpe``: dynamic position encoding (Zheng et al.; SPEC §6.1-§6.3).

``N_dpe`` standard encoder layers (``dpe_layers``, default 2; the encoder's own layer type, dropout and padding
mask) read ``dropout(e + PE_abs)`` and give ``z``; the encoder input becomes ``dropout(e) + z``: PE_abs is *not*
added again, it reaches the encoder through the DPE residuals, and the two dropouts are independent draws.
In training the batch's ``dpe_target`` channel (the target-order rank ``p(i)`` of each aligned source token,
-1 where none, SPEC §6.2) supervises ``z`` with ``MSE(z_i, PE(p(i)))`` over the aligned tokens and all ``d``
dimensions, ``PE`` being the model's own sinusoid; the loss ``loss_dpe`` enters the objective with weight
λ = 0.5 by default (``L = L_nll_mean + λ·L_pe``, SPEC §6.3 ``'paper'`` mode; the trainer's ``aux_weights``
sets λ). At inference no alignment is needed.

Composition: DPE carries the absolute position itself, so it refuses the other input-level encodings (``ape``,
``learned``, ``xl``, ``inxl``, ``headxl``, ``combination``, ``struct_abs``); relative ones (``rpe``,
``struct_rel``) act inside the encoder layers and combine with it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.attention import Dropout, EncoderLayer
from xlpe.nn.positions.base import EncodingContext, PositionEncoding
from xlpe.nn.positions.sinusoid import model_sinusoid

#: input-level encodings that DPE replaces
EXCLUSIVE = ("ape", "learned", "xl", "inxl", "headxl", "combination", "struct_abs")


class DynamicPositionEncoding(PositionEncoding):
    """``dpe``: ``z = DPE_layers(dropout(e + PE_abs))`` added after the input dropout; ``loss_dpe`` on aligned
    tokens. Option ``dpe_layers`` (N_dpe, default 2)."""

    name = "dpe"
    after_dropout = True
    targets = ("dpe_target",)
    aux_losses = {"loss_dpe": 0.5}
    options = {"dpe_layers": 2}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(int(self.option("dpe_layers"))))
        self.drop = Dropout(cfg.dropout)
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else None

    @classmethod
    def check(cls, cfg) -> None:
        n = cfg.pe_options.get("dpe_layers", 2)
        if not isinstance(n, int) or n < 1:
            raise ConfigError(f"dpe_layers must be an integer >= 1, not {n!r}")
        clash = [p for p in cfg.pe if p in EXCLUSIVE]
        if clash:
            raise ConfigError(f"'dpe' carries the absolute position itself (its input is e + PE_abs, SPEC §6.1) and "
                              f"replaces input-level encodings: remove {clash} from pe={list(cfg.pe)} (relative "
                              "ones, rpe and struct_rel, combine with it)")

    def _pe(self, pos: Tensor, ctx: EncodingContext) -> Tensor:
        return model_sinusoid(pos, self.cfg).to(ctx.emb.dtype)

    def input_term(self, ctx: EncodingContext) -> Tensor:
        z = self.drop(ctx.emb + self._pe(ctx.seq(), ctx))
        for layer in self.layers:
            z = layer(z, ctx.pad_mask)
        if self.norm is not None:
            z = self.norm(z)
        ctx.aux["dpe_z"] = z                                       # what the DPE layers predict (probes read it)
        target = ctx.channels.get("dpe_target")
        if target is not None:
            ctx.channel("dpe_target", who=self.name)               # shape check
            aligned = (target >= 0) & ~ctx.pad_mask
            if aligned.any():
                ctx.aux["loss_dpe"] = (z[aligned] - self._pe(target[aligned], ctx)).pow(2).mean()
            else:                                                  # no aligned token: a zero that keeps the graph
                ctx.aux["loss_dpe"] = z.sum() * 0.0
        return z


def decode_positions(z: Tensor, cfg, max_len: int) -> Tensor:
    """The position whose sinusoid row is nearest to each ``z_i`` (``(..., d)`` -> ``(...)``), over ``0..max_len-1``:
    how well the DPE layers learned the order (compare its ranks with the oracle order's)."""
    rows = model_sinusoid(torch.arange(max_len, device=z.device), cfg).to(z.dtype)
    return torch.cdist(z.reshape(-1, z.shape[-1]), rows).argmin(-1).reshape(z.shape[:-1])
