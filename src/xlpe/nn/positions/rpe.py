"""``rpe``: relative position representations (Shaw, Uszkoreit, Vaswani 2018; SPEC §2)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.positions.base import EncodingContext, PositionEncoding, RelativeTerms


def relative_index(T: int, k: int, device: torch.device | None = None) -> Tensor:
    """Table rows ``clip(j - i, k) + k`` for query ``i`` and key ``j`` (key minus query, as tensor2tensor's
    ``_generate_relative_positions_matrix``), shape ``(T, T)``, values in ``[0, 2k]``."""
    r = torch.arange(T, device=device)
    return (r[None, :] - r[:, None]).clamp(-k, k) + k


class ShawRelativePositionEncoding(PositionEncoding):
    """Shaw et al. (2018) relative keys and values inside every encoder self-attention layer (SPEC §2).

    ``e_ij = q_i . (k_j + a^K_ij) / sqrt(d_k)`` and ``z_i = sum_j alpha_ij (v_j + a^V_ij)`` with
    ``a^{K,V}_ij = w^{K,V}[clip(j - i, k) + k]``. Tables ``w^K, w^V`` of shape ``(2k+1, d_k)`` exist once per
    encoder layer and are shared by all heads; ``xavier_uniform`` initialisation (SPEC §2, [I]). The distance
    is between token indices ``0..T-1`` (the ``seq`` channel is not read); ``k = cfg.rpe_k`` (default 16).

    Options (``cfg.pe_options``): ``rpe_values`` (default True); False keeps the key term only (the "K-only"
    variant of SPEC §10).

    Verified in ``tests/test_nn_rpe.py`` against a naive double loop over ``(i, j)`` written from the formulas
    above, for shared and for per-sentence (``(B, T, T)``) indices, with and without padding.
    """

    name = "rpe"
    options = {"rpe_values": True}

    def __init__(self, cfg):
        super().__init__(cfg)
        if cfg.rpe_k < 0:
            raise ConfigError(f"rpe_k must be >= 0, got {cfg.rpe_k}")
        d_k = cfg.d_model // cfg.n_heads
        rows = 2 * cfg.rpe_k + 1
        self.table_k = nn.Parameter(torch.empty(cfg.enc_layers, rows, d_k))
        self.table_v = nn.Parameter(torch.empty(cfg.enc_layers, rows, d_k)) if self.option("rpe_values") else None
        for t in (self.table_k, self.table_v):
            for layer in range(cfg.enc_layers) if t is not None else ():
                nn.init.xavier_uniform_(t.data[layer])

    def relative(self, ctx: EncodingContext, layer: int) -> RelativeTerms:
        index = relative_index(ctx.tokens.shape[1], self.cfg.rpe_k, ctx.tokens.device)
        return RelativeTerms(index, self.table_k[layer], None if self.table_v is None else self.table_v[layer])
