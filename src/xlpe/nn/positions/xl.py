"""Cross-lingual position encoding (Ding, Wang, Tao 2020; SPEC §4): ``xl``, ``inxl``, ``headxl``, ``combination``.

The whole method is in this file. Each variant is a plugin of the NMT core's position interface. They all read
the ``xl`` channel ``(B, T)``: ``pos_XL[i] = o⁻¹(i)``, the position of source token ``x_i`` in the BTG-reordered
sentence. lader's ``order`` output ``o`` is inverted, per subword, and EOS keeps its own index (SPEC §4.1;
:func:`xlpe.data.batching.expand_channel` builds it). ``PE_XL = sinusoid(pos_XL)`` with the model's sinusoid
settings, so the identity order gives ``PE_XL == PE_abs`` bit for bit.

========================  ==================================================================  ==============
``pe`` list               source input / first-layer heads                                    extra params
========================  ==================================================================  ==============
``["xl"]``                ``Z = X + PE_XL`` (Eq. 6, XL PE in place of APE)                    0
``["inxl"]``              ``Z = X + tanh(PE_abs U + PE_XL V)`` (Eq. 7-8; replaces APE)        2d² or 2d
``["ape", "headxl"]``     heads ``< τ`` of layer 1 read ``X + PE_XL``, others ``X + PE_abs``  0
``["ape", "combination"]``  heads ``< τ`` of layer 1 read ``X + PE_IN-XL``, others ``Z_abs``  2d² or 2d
========================  ==================================================================  ==============

Options (``cfg.pe_options``):

* ``xl_fusion_param``: ``full`` (default: ``U, V ∈ R^{d×d}``, no bias, xavier_uniform, as Eq. 8 is written) or
  ``diag`` (element-wise vectors ``u, v ∈ R^d`` initialised to 1). The paper's ``+0.01M`` for InXL on BIG
  fits neither form. SPEC §4.3 keeps ``full`` as the default and flags ``diag`` as ``[I]``.
* ``tau``: the number of XL heads, ``0 ≤ τ ≤ H``. Leave it unset to use ``tau_ratio``.
* ``tau_ratio``: used when ``tau`` is unset (default 0.25, the paper's 4 of 16 heads, SPEC §4.4). It gives
  ``τ = round_half_up(H · tau_ratio)`` and at least 1 head when the ratio is positive: H=8 → 2 and H=4 → 1.

Choices the paper leaves open (SPEC §4.4, ``[I]``):

* HeadXL acts on the first encoder layer's self-attention only (option ``layers = "first"``, the default). The
  residual stream stays ``Z_abs``. SPEC §10 keeps "all layers" as the alternative: with ``layers = "all"`` the τ
  heads of every later layer ``l`` read ``H^{l-1} + PE_XL`` (``+ PE_IN-XL`` for Combination) while the other
  heads read ``H^{l-1}``: PE_abs cannot be swapped out of a hidden state, so the XL term is added ``[I]``.
* The XL heads read the layer input with ``PE_abs`` swapped for ``PE_XL`` (``PE_IN-XL`` for Combination). Input
  terms of other encodings, such as structural PE, stay in both inputs. The XL input gets its own dropout draw.
* **Encoder-free models (SPEC §4.7).** ``xl`` and ``inxl`` are input terms and work unchanged. For ``headxl``
  and ``combination`` there is no encoder self-attention, so the τ heads of every decoder cross-attention take
  their keys and values from the XL input instead ``[I]``.

Verified in ``tests/test_nn_xl.py``:

* SPEC §12.3, index direction: ``pos_XL`` is the inverse of the order. The identity order reproduces APE
  bit for bit.
* SPEC §12.7: HeadXL with τ=0 is vanilla. So is τ=H with ``PE_XL = PE_abs``. Combination with
  ``PE_XL = PE_abs`` equals HeadXL fed ``tanh(PE_abs (U+V))``.
* InXL parameter counts for ``full`` and ``diag``.
* The XL heads use the full projections' columns (no new weights).
* Padding invariance. The encoder-free variants run.
"""

from __future__ import annotations

import math
import torch
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.attention import Dropout
from xlpe.nn.positions.base import EncodingContext, HeadInput, PositionEncoding
from xlpe.nn.positions.sinusoid import model_sinusoid

FUSION_PARAMS = ("full", "diag")
#: the encodings that put an absolute term at the input, which HeadXL's APE heads read
_ABS_BASES = ("ape",)


def pe_xl(ctx: EncodingContext, cfg, who: str) -> Tensor:
    """``PE_XL = sinusoid(pos_XL)`` ``(B, T, d)`` from the batch's ``xl`` channel (SPEC §4.2)."""
    pos = ctx.channel("xl", who=who)
    return model_sinusoid(pos, cfg).to(ctx.emb.dtype)


def pe_abs(ctx: EncodingContext, cfg) -> Tensor:
    """``PE_abs = sinusoid(seq)`` ``(B, T, d)`` (SPEC §1)."""
    return model_sinusoid(ctx.seq(), cfg).to(ctx.emb.dtype)


def resolve_tau(cfg, options: dict) -> int:
    """The number of XL heads from ``tau`` / ``tau_ratio`` (module docstring); a :class:`ConfigError` if out of
    range."""
    H = cfg.n_heads
    tau, ratio = options.get("tau"), options.get("tau_ratio", 0.25)
    if tau is None:
        if not isinstance(ratio, (int, float)) or not 0.0 <= ratio <= 1.0:
            raise ConfigError(f"tau_ratio must be a number in [0, 1], got {ratio!r}")
        tau = max(1, math.floor(H * ratio + 0.5)) if ratio > 0 else 0
    if isinstance(tau, bool) or not isinstance(tau, int) or not 0 <= tau <= H:
        raise ConfigError(f"tau (the number of XL heads) must be an integer in [0, n_heads={H}], got {tau!r}")
    return tau


class XLFusion(nn.Module):
    """``tanh(PE_abs U + PE_XL V)`` (Ding et al. Eq. 8), ``full`` d×d matrices or ``diag`` vectors (SPEC §4.3)."""

    def __init__(self, d: int, param: str):
        super().__init__()
        if param not in FUSION_PARAMS:
            raise ConfigError(f"xl_fusion_param must be one of {FUSION_PARAMS}, got {param!r}")
        self.param = param
        if param == "full":
            self.U, self.V = nn.Linear(d, d, bias=False), nn.Linear(d, d, bias=False)
            nn.init.xavier_uniform_(self.U.weight)
            nn.init.xavier_uniform_(self.V.weight)
        else:
            self.u, self.v = nn.Parameter(torch.ones(d)), nn.Parameter(torch.ones(d))

    def forward(self, pe_abs_: Tensor, pe_xl_: Tensor) -> Tensor:
        if self.param == "full":
            return torch.tanh(self.U(pe_abs_) + self.V(pe_xl_))
        return torch.tanh(pe_abs_ * self.u + pe_xl_ * self.v)


class XLPositionEncoding(PositionEncoding):
    """``xl``: ``Z = X + PE_XL`` with ``PE_XL = sinusoid(pos_XL)`` (Ding et al. Eq. 6, SPEC §4.2). No parameters.
    Alone it replaces APE. With ``ape`` both terms are summed."""

    name = "xl"
    inputs = ("xl",)

    def input_term(self, ctx: EncodingContext) -> Tensor:
        return pe_xl(ctx, self.cfg, self.name)


class InXLPositionEncoding(PositionEncoding):
    """``inxl``: ``Z = X + tanh(PE_abs U + PE_XL V)``, which replaces APE (Ding et al. Eq. 7-8, SPEC §4.3).
    Option ``xl_fusion_param`` (``full`` | ``diag``)."""

    name = "inxl"
    inputs = ("xl",)
    options = {"xl_fusion_param": "full"}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.fusion = XLFusion(cfg.d_model, self.option("xl_fusion_param"))

    @classmethod
    def check(cls, cfg) -> None:
        if "ape" in cfg.pe:
            raise ConfigError("'inxl' replaces 'ape' at the input (Z = X + tanh(PE_abs U + PE_XL V), SPEC §4.3); "
                              f"remove 'ape' from pe={list(cfg.pe)}")

    def input_term(self, ctx: EncodingContext) -> Tensor:
        return self.fusion(pe_abs(ctx, self.cfg), pe_xl(ctx, self.cfg, self.name))


class HeadXLPositionEncoding(PositionEncoding):
    """``headxl``: τ of the H first-layer self-attention heads read ``X + PE_XL``, the rest ``X + PE_abs``
    (Ding et al. Eq. 9-11, SPEC §4.4). No extra parameters. The attention projects both inputs with its full
    W^Q, W^K, W^V and keeps each head's columns from its own input. Needs ``ape`` in ``pe`` (the APE heads'
    input). Options ``tau`` and ``tau_ratio``."""

    name = "headxl"
    inputs = ("xl",)
    options = {"tau": None, "tau_ratio": 0.25, "layers": "first"}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.tau = resolve_tau(cfg, {k: self.option(k) for k in ("tau", "tau_ratio")})
        self.all_layers = self.option("layers") == "all"
        self.register_buffer("heads", torch.arange(cfg.n_heads) < self.tau, persistent=False)
        self.drop = Dropout(cfg.dropout)

    @classmethod
    def check(cls, cfg) -> None:
        if not any(b in cfg.pe for b in _ABS_BASES):
            raise ConfigError(f"'{cls.name}' splits the first layer's heads between X + PE_XL and X + PE_abs; "
                              f"list 'ape' too, e.g. pe=['ape', '{cls.name}'] (got pe={list(cfg.pe)})")
        if "headxl" in cfg.pe and "combination" in cfg.pe:
            raise ConfigError("'headxl' and 'combination' both assign the XL heads; list one of them")
        resolve_tau(cfg, {k: cfg.pe_options.get(k, v) for k, v in cls.options.items()})
        if cfg.pe_options.get("layers", "first") not in ("first", "all"):
            raise ConfigError(f"{cls.name}: layers must be 'first' or 'all', not {cfg.pe_options['layers']!r}")

    def xl_term(self, ctx: EncodingContext) -> Tensor:
        """What the XL heads see in place of ``PE_abs``."""
        return pe_xl(ctx, self.cfg, self.name)

    def head_input(self, ctx: EncodingContext, layer: int, x: Tensor | None = None) -> HeadInput | None:
        if self.tau == 0 or (layer != 0 and not self.all_layers):
            return None
        if layer != 0:
            return HeadInput(x + self.xl_term(ctx), self.heads)
        others = {n: t for n, t in ctx.terms.items() if n not in _ABS_BASES and n != self.name}
        x = ctx.emb + self.xl_term(ctx)
        for name, term in others.items():   # other encodings' terms stay; PE_abs is swapped out (docstring)
            if name not in ctx.after_dropout:
                x = x + term
        x = self.drop(x)
        for name, term in others.items():
            if name in ctx.after_dropout:
                x = x + term
        return HeadInput(x, self.heads)


class CombinationPositionEncoding(HeadXLPositionEncoding):
    """``combination``: HeadXL whose τ XL heads read ``X + tanh(PE_abs U + PE_XL V)``. The APE heads keep
    ``Z_abs`` (Ding et al. Table 1 "+Combination" and fn. 2, SPEC §4.5). Options ``tau``, ``tau_ratio`` and
    ``xl_fusion_param``."""

    name = "combination"
    options = {"tau": None, "tau_ratio": 0.25, "layers": "first", "xl_fusion_param": "full"}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.fusion = XLFusion(cfg.d_model, self.option("xl_fusion_param"))

    def xl_term(self, ctx: EncodingContext) -> Tensor:
        return self.fusion(pe_abs(ctx, self.cfg), pe_xl(ctx, self.cfg, self.name))
