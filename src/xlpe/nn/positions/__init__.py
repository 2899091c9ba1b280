"""Source position encodings, one file per encoding (DESIGN.md "position channels", SPEC §0-§6).

To add an encoding: write ``xlpe/nn/positions/<name>.py`` with a :class:`PositionEncoding` subclass that
overrides the hooks it needs (input term, per-head input, relative terms, head masks; aux losses via
``ctx.aux``), import it here and add one line to :data:`ENCODINGS`. ``TransformerConfig.pe`` then accepts the
name. The helpers that read the mapping (build, check, the channels and auxiliary losses of a config) live beside
it, here.
"""

from typing import Mapping, Sequence

from torch import nn

from xlpe.errors import ConfigError
from xlpe.nn.positions.ape import SinusoidalPositionEncoding
from xlpe.nn.positions.base import EncodingContext, HeadInput, NoPositionEncoding, PositionEncoding, RelativeTerms
from xlpe.nn.positions.disan import DiSANPositionEncoding, directional_masks
from xlpe.nn.positions.dpe import DynamicPositionEncoding
from xlpe.nn.positions.learned import LearnedPositionEncoding
from xlpe.nn.positions.rpe import ShawRelativePositionEncoding, relative_index
from xlpe.nn.positions.sinusoid import sinusoid
from xlpe.nn.positions.structural import StructuralAbsoluteEncoding, StructuralRelativeEncoding
from xlpe.nn.positions.xl import (CombinationPositionEncoding, HeadXLPositionEncoding, InXLPositionEncoding,
                                  XLPositionEncoding)

#: The one name -> class mapping (no decorators, no registry): ``cfg.pe`` names index it.
ENCODINGS: dict[str, type[PositionEncoding]] = {
    "none": NoPositionEncoding,
    "ape": SinusoidalPositionEncoding,
    "learned": LearnedPositionEncoding,
    "rpe": ShawRelativePositionEncoding,
    "disan": DiSANPositionEncoding,
    "xl": XLPositionEncoding,
    "inxl": InXLPositionEncoding,
    "headxl": HeadXLPositionEncoding,
    "combination": CombinationPositionEncoding,
    "struct_abs": StructuralAbsoluteEncoding,
    "struct_rel": StructuralRelativeEncoding,
    "dpe": DynamicPositionEncoding,
}


def build_encodings(cfg) -> nn.ModuleList:
    """Build the source position encodings named in ``cfg.pe``, in order (after :func:`check_encodings`)."""
    check_encodings(cfg)
    return nn.ModuleList(ENCODINGS[n](cfg) for n in cfg.pe if n != "none")


def required_inputs(cfg) -> set[str]:
    """The channels the encodings of ``cfg`` read in training and at inference (``seq`` excepted: it
    defaults to ``0..T-1``)."""
    return inputs_of(cfg.pe)


def inputs_of(encodings: Sequence[str]) -> set[str]:
    """The channels that the encodings named read in training and at inference."""
    return {ch for n in encodings for ch in ENCODINGS[n].inputs}


def required_targets(cfg) -> set[str]:
    """The channels the encodings of ``cfg`` read only in training (supervision targets)."""
    return {ch for n in cfg.pe for ch in ENCODINGS[n].targets}


def aux_loss_weights(cfg, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
    """The weight of every auxiliary loss the encodings of ``cfg`` declare, ``overrides`` applied; an
    override of a loss that no selected encoding returns is a :class:`ConfigError` (never silently unused)."""
    weights = {k: float(w) for n in cfg.pe for k, w in ENCODINGS[n].aux_losses.items()}
    unknown = sorted(set(overrides or {}) - set(weights))
    if unknown:
        raise ConfigError(f"aux_weights {unknown}: no encoding of pe={list(cfg.pe)} returns such a loss; "
                          f"they return: {sorted(weights) or 'none'}")
    return {**weights, **{k: float(v) for k, v in (overrides or {}).items()}}


def check_encodings(cfg) -> None:
    """Raise :class:`ConfigError` for what cannot work in ``cfg.pe`` / ``cfg.pe_options``.

    That is: unknown names (the message lists the valid ones), duplicates, ``none`` combined with others,
    ``pe_options`` that no selected encoding reads, each encoding's own :meth:`PositionEncoding.check`, and
    relative terms on an encoder-free model (SPEC §4.7).
    """
    names = cfg.pe
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ConfigError(f"pe must be a list of encoding names, got {names!r}")
    for n in names:
        if n not in ENCODINGS:
            raise ConfigError(f"unknown position encoding {n!r}; valid names: {', '.join(ENCODINGS)}")
        if ENCODINGS[n].name != n:
            raise ConfigError(f"ENCODINGS maps {n!r} to {ENCODINGS[n].__name__}, whose name is {ENCODINGS[n].name!r}")
    if len(set(names)) != len(names):
        raise ConfigError(f"a position encoding is listed twice in pe={list(names)}")
    if "none" in names and len(names) > 1:
        raise ConfigError(f"'none' cannot be combined with other position encodings: pe={list(names)}")
    classes = [ENCODINGS[n] for n in names]
    declared = {k for c in classes for k in c.options}
    unknown = sorted(set(cfg.pe_options) - declared)
    if unknown:
        raise ConfigError(f"pe_options {unknown} are not read by any of the encodings pe={list(names)}; "
                          f"they read: {sorted(declared) or 'nothing'}")
    for c in classes:
        c.check(cfg)
    if cfg.encoder_free:
        for c in classes:
            if c.needs_encoder_layers():
                raise ConfigError(f"position encoding {c.name!r} is not defined for encoder-free models: it acts "
                                  "inside encoder self-attention, which an encoder-free model does not have "
                                  "(SPEC §4.7)")


__all__ = [
    "DiSANPositionEncoding", "ENCODINGS", "EncodingContext", "HeadInput", "LearnedPositionEncoding",
    "NoPositionEncoding", "PositionEncoding", "RelativeTerms", "ShawRelativePositionEncoding",
    "SinusoidalPositionEncoding", "aux_loss_weights", "build_encodings", "check_encodings", "directional_masks",
    "relative_index", "required_inputs", "required_targets", "sinusoid",
]
