"""Neural network modules: the Transformer (``transformer``), attention and layers (``attention``) and the
source position encodings (``positions``)."""

from xlpe.nn.positions import ENCODINGS, sinusoid
from xlpe.nn.transformer import (DecoderCache, EncoderOut, PRESETS, Transformer, TransformerConfig, build_model,
                                 count_parameters)

__all__ = ["DecoderCache", "ENCODINGS", "EncoderOut", "PRESETS", "Transformer", "TransformerConfig", "build_model",
           "count_parameters", "sinusoid"]
