"""Source position encodings, one file per encoding (DESIGN.md "position channels", SPEC §0-§6).

To add an encoding: write ``xlpe/nn/positions/<name>.py`` with a :class:`PositionEncoding` subclass that
overrides the hooks it needs (input term, per-head input, relative terms; aux losses via ``ctx.aux``), import
it here and add one line to :data:`ENCODINGS`. ``TransformerConfig.pe`` then accepts the name.
"""

from xlpe.nn.positions.ape import SinusoidalPositionEncoding
from xlpe.nn.positions.base import (EncodingContext, HeadInput, NoPositionEncoding, PositionEncoding, RelativeTerms,
                                    build_encodings, check_encodings, required_channels)
from xlpe.nn.positions.learned import LearnedPositionEncoding
from xlpe.nn.positions.rpe import ShawRelativePositionEncoding, relative_index
from xlpe.nn.positions.sinusoid import sinusoid
from xlpe.nn.positions.xl import (CombinationPositionEncoding, HeadXLPositionEncoding, InXLPositionEncoding,
                                  XLPositionEncoding)

#: The one name -> class mapping (no decorators, no registry): ``cfg.pe`` names index it.
ENCODINGS: dict[str, type[PositionEncoding]] = {
    "none": NoPositionEncoding,
    "ape": SinusoidalPositionEncoding,
    "learned": LearnedPositionEncoding,
    "rpe": ShawRelativePositionEncoding,
    "xl": XLPositionEncoding,
    "inxl": InXLPositionEncoding,
    "headxl": HeadXLPositionEncoding,
    "combination": CombinationPositionEncoding,
}

__all__ = [
    "ENCODINGS", "EncodingContext", "HeadInput", "LearnedPositionEncoding", "NoPositionEncoding", "PositionEncoding",
    "RelativeTerms", "ShawRelativePositionEncoding", "SinusoidalPositionEncoding", "build_encodings",
    "check_encodings", "relative_index", "required_channels", "sinusoid",
]
