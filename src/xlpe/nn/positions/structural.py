"""Structural position encoding (Wang, Tu, Wang, Shi 2019; SPEC §3): ``struct_abs`` and ``struct_rel``.

Both read the dependency tree of the source through per-token channels (:mod:`xlpe.data.channels`): ``depth``
(the absolute structural position, SPEC §3.2: edges from the root, subwords share their word's, EOS = max + 1),
and for the relative form ``tree_word`` (the word a token belongs to; EOS its own) and ``tree_head`` (the word
of its head; -1 for roots and EOS). The relative positions are derived on the device
(:func:`xlpe.syntax.trees.tree_relative`), so a batch carries three integers per token instead of a T×T matrix.

========================  ==============================================================  ================
``pe`` list               source input / attention                                        extra params
========================  ==============================================================  ================
``["struct_abs"]``        ``Z = X + PE_stru`` ("abs-stru only")                           0
``["ape", "struct_abs"]`` ``Z = X + tanh(PE_seq U + PE_stru V)`` (SPEC §3.4, replaces APE)  2d²
                          or ``X + PE_seq + PE_stru`` with ``struct_fusion = "add"``      0
``[..., "struct_rel"]``   Shaw terms indexed by ``clip(rel_stru, k) + k`` in every layer,  2·L·(2k+1)·d_k
                          summed with ``rpe``'s when both are listed (SPEC §3.3)
========================  ==============================================================  ================

``PE_stru = sinusoid(depth)`` with the model's sinusoid settings (SPEC §3.2, "inherit[s] position encoding
functions from sequential approaches"). Options: ``struct_fusion`` (``tanh_linear`` | ``add``), ``struct_k``
(clipping distance, default 16, SPEC §3.3), ``struct_rel_sign`` (``key_minus_query`` | ``query_minus_key``,
flips both rules) and ``struct_values`` (value tables too, default True). The fusion form, the signs and the
sum with sequential tables are SPEC's reconstruction ``[I]`` (the paper's equations were lost).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.positions.base import EncodingContext, PositionEncoding, RelativeTerms
from xlpe.nn.positions.sinusoid import model_sinusoid
from xlpe.syntax.trees import tree_relative

FUSIONS = ("tanh_linear", "add")
SIGNS = ("key_minus_query", "query_minus_key")


class StructuralAbsoluteEncoding(PositionEncoding):
    """``struct_abs``: ``PE_stru = sinusoid(depth)``. Alone it is the whole source PE; with ``ape`` it is fused
    with ``PE_seq``: ``tanh(PE_seq U + PE_stru V)`` (``U, V`` d×d, no bias, xavier; replaces APE's term) or the
    footnote's element-wise addition (SPEC §3.4)."""

    name = "struct_abs"
    inputs = ("depth",)
    options = {"struct_fusion": "tanh_linear"}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.fuse = "ape" in cfg.pe and self.option("struct_fusion") == "tanh_linear"
        if self.fuse:
            d = cfg.d_model
            self.U, self.V = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            nn.init.xavier_uniform_(self.U.weight)
            nn.init.xavier_uniform_(self.V.weight)

    @classmethod
    def check(cls, cfg) -> None:
        fusion = cfg.pe_options.get("struct_fusion", "tanh_linear")
        if fusion not in FUSIONS:
            raise ConfigError(f"struct_fusion must be one of {', '.join(FUSIONS)}, not {fusion!r}")

    def _sinusoid(self, pos: Tensor, ctx: EncodingContext) -> Tensor:
        return model_sinusoid(pos, self.cfg).to(ctx.emb.dtype)

    def input_term(self, ctx: EncodingContext) -> Tensor:
        pe_stru = self._sinusoid(ctx.channel("depth", who=self.name), ctx)
        if not self.fuse:
            return pe_stru
        return torch.tanh(self.U(self._sinusoid(ctx.seq(), ctx)) + self.V(pe_stru))

    def replaces(self) -> set[str]:
        return {"ape"} if self.fuse else set()


class StructuralRelativeEncoding(PositionEncoding):
    """``struct_rel``: Shaw key (and value) tables ``(2k+1, d_k)`` per encoder layer, shared by the heads,
    indexed by the clipped structural relative position of each token pair (SPEC §3.3). With ``rpe`` listed too,
    the attention sums both encodings' terms: ``a^K_ij = w^K_seq[..] + w^K_stru[..]``."""

    name = "struct_rel"
    inputs = ("depth", "tree_word", "tree_head")
    options = {"struct_k": 16, "struct_rel_sign": "key_minus_query", "struct_values": True}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.k = int(self.option("struct_k"))
        d_k, rows = cfg.d_model // cfg.n_heads, 2 * self.k + 1
        self.table_k = nn.Parameter(torch.empty(cfg.enc_layers, rows, d_k))
        self.table_v = nn.Parameter(torch.empty(cfg.enc_layers, rows, d_k)) if self.option("struct_values") else None
        for t in (self.table_k, self.table_v):
            for layer in range(cfg.enc_layers) if t is not None else ():
                nn.init.xavier_uniform_(t.data[layer])

    @classmethod
    def check(cls, cfg) -> None:
        k = cfg.pe_options.get("struct_k", 16)
        if not isinstance(k, int) or k < 0:
            raise ConfigError(f"struct_k must be an integer >= 0, not {k!r}")
        sign = cfg.pe_options.get("struct_rel_sign", "key_minus_query")
        if sign not in SIGNS:
            raise ConfigError(f"struct_rel_sign must be one of {', '.join(SIGNS)}, not {sign!r}")

    def relative(self, ctx: EncodingContext, layer: int) -> RelativeTerms:
        index = ctx.cache.get(self.name)
        if index is None:
            rel = tree_relative(ctx.channel("depth", who=self.name), ctx.channel("tree_word", who=self.name),
                                ctx.channel("tree_head", who=self.name), ctx.pad_mask, k=self.k,
                                sign=self.option("struct_rel_sign"))
            index = ctx.cache[self.name] = rel.clamp(-self.k, self.k) + self.k
        return RelativeTerms(index, self.table_k[layer], None if self.table_v is None else self.table_v[layer])
