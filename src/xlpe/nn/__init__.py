"""Neural network modules: the model config (``config``), the Transformer (``transformer``), attention and
layers (``attention``), the source position encodings (``positions``) and checkpoints (``checkpoint``)."""

from xlpe.nn.config import PRESETS, TransformerConfig
from xlpe.nn.positions import ENCODINGS, sinusoid
from xlpe.nn.transformer import DecoderCache, EncoderOut, Transformer, build_model, count_parameters

__all__ = ["DecoderCache", "ENCODINGS", "EncoderOut", "PRESETS", "Transformer", "TransformerConfig", "build_model",
           "count_parameters", "sinusoid"]
