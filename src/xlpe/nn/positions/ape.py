"""``ape``: absolute sinusoidal position encoding (Vaswani et al. 2017; SPEC §1)."""

from __future__ import annotations

from torch import Tensor

from xlpe.nn.positions.base import EncodingContext, PositionEncoding
from xlpe.nn.positions.sinusoid import model_sinusoid


class SinusoidalPositionEncoding(PositionEncoding):
    """``Z = X + PE_abs`` with ``PE_abs = sinusoid(seq)`` and ``seq = 0..T-1`` unless the batch carries a
    ``seq`` channel (SPEC §1, §0.1). No parameters. Layout, frequencies and base come from the config
    (``sinusoid_layout``, ``sinusoid_freq``, ``sinusoid_base``); the decoder uses the same function.

    Verified in ``tests/test_nn_positions.py``: the term equals :func:`sinusoid` of ``arange(T)`` row by row, and
    padding the batch does not change outputs at real positions.
    """

    name = "ape"

    def input_term(self, ctx: EncodingContext) -> Tensor:
        return model_sinusoid(ctx.seq(), self.cfg).to(ctx.emb.dtype)
