"""``learned``: a learned absolute position table (Gehring et al. 2017 style; fairseq ``learned_pos``)."""

from __future__ import annotations

from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.positions.base import EncodingContext, PositionEncoding


class LearnedPositionEncoding(PositionEncoding):
    """``Z = X + P[seq]`` with a trainable table ``P`` of ``max_len`` rows, initialised ``N(0, d^-1/2)`` like
    the token embeddings. ``seq`` is the batch's ``seq`` channel or ``0..T-1``; a position ``>= max_len`` is a
    :class:`ConfigError` (raise ``max_len``).

    Verified in ``tests/test_nn_positions.py``: term equals the table rows, padding invariance, gradients flow.
    """

    name = "learned"

    def __init__(self, cfg):
        super().__init__(cfg)
        self.table = nn.Embedding(cfg.max_len, cfg.d_model)
        nn.init.normal_(self.table.weight, mean=0.0, std=cfg.d_model ** -0.5)

    def input_term(self, ctx: EncodingContext) -> Tensor:
        pos = ctx.seq()
        top = int(pos.max()) if pos.numel() else 0
        if top >= self.cfg.max_len or (pos.numel() and int(pos.min()) < 0):
            raise ConfigError(f"learned position encoding: position {top} is outside the table of max_len="
                              f"{self.cfg.max_len} rows; raise max_len or shorten the sentences")
        return self.table(pos)
