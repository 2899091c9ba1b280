"""``disan``: directional self-attention masks over the encoder's heads (Shen et al. 2018, DiSAN; the baseline of
Ding et al. 2020 Table 1; docs/spec-additions.md §13)."""

from __future__ import annotations

import torch
from torch import Tensor

from xlpe.errors import ConfigError
from xlpe.nn.positions.base import EncodingContext, PositionEncoding


def directional_masks(T: int, n_heads: int, diagonal: bool = False, device: torch.device | None = None) -> Tensor:
    """Bool ``(H, T, T)``, True = query ``i`` (row) may attend key ``j`` (column): heads ``0 .. ceil(H/2)-1``
    forward (``j < i``), the others backward (``j > i``); with ``diagonal`` also ``j = i`` (spec-additions §13.2)."""
    r = torch.arange(T, device=device)
    diff = r[None, :] - r[:, None]                     # key minus query
    forward = diff <= 0 if diagonal else diff < 0
    backward = diff >= 0 if diagonal else diff > 0
    n_forward = (n_heads + 1) // 2
    return torch.stack([forward] * n_forward + [backward] * (n_heads - n_forward))


class DiSANPositionEncoding(PositionEncoding):
    """DiSAN's forward and backward masks on the heads of the encoder's self-attention (docs/spec-additions.md
    §13, every detail ``[I]``): half the heads (the first ``ceil(H/2)``) read only the tokens before the query, the
    others only the tokens after it; a query with nothing to read gets zero from that head. No parameters; reads
    no channel (token indices ``0..T-1``). ``ape+disan`` is Ding et al.'s "+ DiSAN" row; ``disan`` alone gives
    order by the masks only, as DiSAN does.

    Options (``cfg.pe_options``): ``disan_diagonal`` (default False: a token never attends itself, DiSAN's
    "diag-disabled" masks; True: it does, the decoder's causal convention), ``disan_layers`` (default 0 = every
    encoder layer; ``n`` = the lowest ``n`` layers only).

    Verified in ``tests/test_nn_disan.py`` against the worked example of spec-additions §13.3.
    """

    name = "disan"
    options = {"disan_diagonal": False, "disan_layers": 0}

    @classmethod
    def check(cls, cfg) -> None:
        layers = cfg.pe_options.get("disan_layers", 0)
        if isinstance(layers, bool) or not isinstance(layers, int) or not 0 <= layers <= max(cfg.enc_layers, 0):
            raise ConfigError(f"disan_layers must be an integer in 0..enc_layers={cfg.enc_layers} "
                              f"(0 = every layer), got {layers!r}")
        if not isinstance(cfg.pe_options.get("disan_diagonal", False), bool):
            raise ConfigError(f"disan_diagonal must be true or false, got {cfg.pe_options['disan_diagonal']!r}")

    def head_mask(self, ctx: EncodingContext, layer: int) -> Tensor | None:
        n = self.option("disan_layers")
        if n and layer >= n:
            return None
        T = ctx.tokens.shape[1]
        key = f"disan_mask_{T}"
        if key not in ctx.cache:
            ctx.cache[key] = directional_masks(T, self.cfg.n_heads, self.option("disan_diagonal"), ctx.tokens.device)
        return ctx.cache[key]
