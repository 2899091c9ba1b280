"""The plugin interface of source position encodings, and the factory that builds them by name.

DESIGN.md "position channels": a batch carries integer *channels* (``seq``, ``xl``, ``depth``, ``tree_rel``,
``dpe_target``, ...). A source position encoding is an ``nn.Module`` that reads them and contributes any of

(a) an additive **input term** ``(B, T, d)``: ``X = dropout(sqrt(d) E[x] + sum of terms)`` (APE, learned, XL PE,
    InXL, structural absolute). A plugin with ``after_dropout = True`` is added after the dropout instead
    (DPE: ``dropout(e) + z``, SPEC §6.1);
(b) **per-head inputs** for an encoder layer's self-attention: a tensor that a subset of heads reads for their
    Q/K/V projections instead of the layer input (HeadXL / Combination, SPEC §4.4-4.5). The attention projects
    both inputs with the same full weight and picks heads, so this adds no parameter;
(c) **relative key/value terms** ``(index, table_k, table_v)`` inside every encoder self-attention layer (Shaw
    RPE, SPEC §2; structural relative PE with ``index`` from channel ``tree_rel``, SPEC §3.3). Terms of several
    encodings are summed: ``a^K_ij = sum_p table_k_p[index_p[i, j]]`` (SPEC §3.3 default);
(d) **auxiliary losses** or diagnostics, written to ``ctx.aux`` (DPE's MSE, SPEC §6.3); the encoder returns
    that dict and the training loop adds what it finds there;
(e) **per-head attention masks** for an encoder layer's self-attention: which keys each head's queries may attend
    (DiSAN's directional masks, docs/spec-additions.md §13). Masks of several encodings are combined by "and".

Each hook receives an :class:`EncodingContext`. New encodings are new files in this folder plus one line in the
name -> class mapping ``ENCODINGS`` of ``xlpe/nn/positions/__init__.py``; the Transformer never changes. The
channels an encoding reads are declared as ``inputs`` (needed at inference too) or ``targets`` (training only).

Hooks (b) and (c) return a :class:`HeadInput` and :class:`RelativeTerms`, the inputs the attention reads: they are
defined in ``xlpe.nn.attention`` (which encodings with layers of their own import) and importable from here.
Encodings (and the layers of ``xlpe.nn.attention``) receive the model's ``TransformerConfig`` as ``cfg`` without
importing it: ``xlpe.nn.config`` checks ``pe`` against ``ENCODINGS``, so it is built on top of the encodings.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.attention import HeadInput, RelativeTerms


@dataclass
class EncodingContext:
    """What a position-encoding hook may read (and ``aux``, which it may write).

    Attributes:
        tokens: source token ids ``(B, T)``.
        emb: ``sqrt(d) * E[tokens]``, before dropout, ``(B, T, d)``.
        pad_mask: ``(B, T)``, True = pad.
        channels: the batch's position channels (possibly empty).
        terms: input terms computed so far, by encoding name (complete when head/relative hooks run).
        aux: auxiliary losses and diagnostics, by name; returned by ``Transformer.encode``.
        after_dropout: names of the encodings whose term is added after the input dropout.
        cache: tensors an encoding derives once per forward pass and reads in every layer (e.g. an index).
    """

    tokens: Tensor
    emb: Tensor
    pad_mask: Tensor
    channels: dict[str, Tensor] = field(default_factory=dict)
    terms: dict[str, Tensor] = field(default_factory=dict)
    aux: dict[str, Tensor] = field(default_factory=dict)
    after_dropout: set[str] = field(default_factory=set)
    cache: dict[str, Tensor] = field(default_factory=dict)

    def channel(self, name: str, *, who: str = "this encoding") -> Tensor:
        """Channel ``name``, checked against the batch shape; a missing one is a :class:`ConfigError`."""
        if name not in self.channels:
            if name == "seq":
                return self.seq()
            raise ConfigError(f"{who} needs position channel {name!r} in the batch; "
                              f"the batch has: {sorted(self.channels) or 'none'}")
        value = self.channels[name]
        B, T = self.tokens.shape
        if tuple(value.shape[:2]) != (B, T) or (value.dim() == 3 and value.shape[2] != T):
            raise ConfigError(f"position channel {name!r} has shape {tuple(value.shape)}, "
                              f"expected (B, T) or (B, T, T) with B={B}, T={T}")
        return value

    def seq(self) -> Tensor:
        """Channel ``seq``, or ``0..T-1`` for every sentence when the batch has none, ``(B, T)``."""
        if "seq" in self.channels:
            return self.channel("seq")
        B, T = self.tokens.shape
        return torch.arange(T, device=self.tokens.device).expand(B, T)


class PositionEncoding(nn.Module):
    """Base class of source position encodings: override any of the hooks, leave the rest.

    Args:
        cfg: the model's ``TransformerConfig`` (read ``d_model``, ``n_heads``, ``enc_layers``, ``max_len``,
            ``rpe_k``, the sinusoid settings, and plugin options with :meth:`option`).

    Class attributes:
        name: the name used in ``cfg.pe``.
        options: plugin options read from ``cfg.pe_options`` with their defaults; an option that no selected
            encoding declares is a :class:`ConfigError`, never silently ignored.
        after_dropout: add the input term after the input dropout instead of before it.
        inputs: the channels the encoding reads in training *and* at inference (besides ``seq``, which
            defaults to ``0..T-1``); ``xlpe train``, ``translate`` and ``align-from-model`` check that their data
            provides them before any work starts (channel descriptions: :mod:`xlpe.data.channels`).
        targets: channels read only in training (supervision, e.g. DPE's ``dpe_target``); never asked of the
            data at inference.
        aux_losses: the auxiliary losses the encoding writes to ``ctx.aux``, with their default weights in the
            training objective (the trainer's ``aux_weights`` overrides them).
    """

    name: ClassVar[str] = "?"
    options: ClassVar[dict[str, Any]] = {}
    after_dropout: ClassVar[bool] = False
    inputs: ClassVar[tuple[str, ...]] = ()
    targets: ClassVar[tuple[str, ...]] = ()
    aux_losses: ClassVar[dict[str, float]] = {}

    @classmethod
    def check(cls, cfg) -> None:
        """Raise :class:`ConfigError` if ``cfg`` cannot work with this encoding (called when a config is made)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg

    def option(self, key: str) -> Any:
        """Plugin option ``key`` from ``cfg.pe_options``, else its default in :attr:`options`."""
        return self.cfg.pe_options.get(key, self.options[key])

    # (a) ------------------------------------------------------------------------------------------------------
    def input_term(self, ctx: EncodingContext) -> Tensor | None:
        """An additive term broadcastable to ``(B, T, d)``, or None."""
        return None

    def replaces(self) -> set[str]:
        """Encodings whose input term this one's term replaces (e.g. a fusion of ``PE_abs`` with another PE);
        the encoder leaves their terms out of the sum."""
        return set()

    # (b) ------------------------------------------------------------------------------------------------------
    def head_input(self, ctx: EncodingContext, layer: int, x: Tensor | None = None) -> HeadInput | None:
        """Replacement Q/K/V input for some heads of encoder layer ``layer`` (0-based), or None; ``x`` is that
        layer's input ``(B, T, d)`` (None for an encoder-free model). In an encoder-free model the ``layer=0``
        input replaces the memory's keys and values of those heads in every decoder cross-attention
        (SPEC §4.7, [I])."""
        return None

    # (c) ------------------------------------------------------------------------------------------------------
    def relative(self, ctx: EncodingContext, layer: int) -> RelativeTerms | None:
        """Relative key/value terms for the self-attention of encoder layer ``layer`` (0-based), or None."""
        return None

    # (e) ------------------------------------------------------------------------------------------------------
    def head_mask(self, ctx: EncodingContext, layer: int) -> Tensor | None:
        """Which keys each head of encoder layer ``layer`` (0-based) may attend: bool ``(H, T, T)`` or
        ``(B, H, T, T)``, True = may attend (query rows, key columns), or None. Padding is masked besides."""
        return None

    @classmethod
    def needs_encoder_layers(cls) -> bool:
        """True when the encoding has relative terms (hook c) or head masks (hook e), which are undefined without
        encoder self-attention (SPEC §4.7). Per-head inputs (hook b) carry over to the decoder's cross-attention."""
        return cls.relative is not PositionEncoding.relative or cls.head_mask is not PositionEncoding.head_mask


class NoPositionEncoding(PositionEncoding):
    """``none``: no source position information at all (the "noPos" rows of Ding et al. Table 4, SPEC §4.7;
    Wang et al. Table 1 "no PE"). Contributes nothing."""

    name = "none"
