"""The model's configuration: :class:`TransformerConfig` (every field that defines a model, round-tripped
through checkpoints) and the size presets ``PRESETS``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from xlpe.config import option
from xlpe.errors import ConfigError
from xlpe.nn.attention import INITS
from xlpe.nn.positions import check_encodings
from xlpe.nn.positions.sinusoid import FREQS, LAYOUTS


@dataclass
class TransformerConfig:
    """Everything that defines a model; ``to_dict``/``from_dict`` round-trip it through checkpoints.

    ``pe`` lists the source position encodings (names of ``xlpe.nn.positions.ENCODINGS``); their input terms
    are summed and their relative tables summed (SPEC §3.3). ``pe_options`` holds options of plugin encodings
    (each declares the ones it reads; anything else is an error). ``tgt_vocab_size=None`` means "same as the
    source". ``encoder_free=True`` sets ``enc_layers=0``. Special ids follow ``xlpe.data.subword``.

    ``init`` chooses the initialisation of the attention and feed-forward weights (``xlpe.nn.attention``):
    ``"fairseq"`` (default; Q/K/V Glorot-uniform with gain 1/sqrt(2), PyTorch's default for the feed-forward
    layers) or ``"xavier"`` (Glorot-uniform everywhere, zero biases; OpenNMT-py and tensor2tensor). Embeddings
    are N(0, d^-1/2) in both (why fairseq is the default: ``docs/results/nn.md``).
    """

    src_vocab_size: int = option(1000, 'source vocabulary size (set from the subword model)')
    tgt_vocab_size: int | None = option(None, "target vocabulary size, None = the source's (set from the subword "
                                              "models)")
    d_model: int = option(512, 'model width')
    n_heads: int = option(8, 'attention heads')
    d_ff: int = option(2048, 'feed-forward inner width')
    enc_layers: int = option(6, 'encoder layers')
    dec_layers: int = option(6, 'decoder layers')
    dropout: float = option(0.1, 'dropout rate')
    attn_dropout: float = option(0.0, 'dropout on attention weights')
    activation_dropout: float = option(0.0, 'dropout inside the feed-forward block')
    activation: str = option("relu", 'feed-forward activation (relu | gelu)')
    init: str = option("fairseq", 'initialisation of attention/FFN weights (xavier | fairseq)')
    pre_norm: bool = option(False, 'pre-LayerNorm instead of post-LN')
    share_embeddings: bool = option(False, 'one embedding table for source and target (needs a joint vocabulary)')
    tie_output: bool = option(True, 'tie the decoder output projection to its input embedding')
    pad_id: int = option(0, 'pad id')
    unk_id: int = option(1, 'unknown-token id')
    bos_id: int = option(2, 'BOS id')
    eos_id: int = option(3, 'EOS id')
    max_len: int = option(1024, 'longest sequence (subwords incl. EOS) the model accepts')
    pe: list[str] = option(help='source position encodings, e.g. --pe ape rpe (see xlpe.nn.positions)',
                           factory=lambda: ["ape"])
    pe_options: dict[str, Any] = option(help='options of the position-encoding plugins, KEY=VALUE (VALUE parsed as '
                                             'TOML)', factory=dict)
    rpe_k: int = option(16, 'Shaw relative-position clipping distance k')
    sinusoid_layout: str = option("interleave", 'sinusoid layout (interleave | concat)')
    sinusoid_freq: str = option("paper", 'sinusoid frequencies (paper | t2t)')
    sinusoid_base: float = option(1e4, 'sinusoid base (10000)')
    encoder_free: bool = option(False, 'encoder-free (context-free) model')

    def __post_init__(self):
        self.pe = list(self.pe)
        self.pe_options = dict(self.pe_options)
        if self.encoder_free:
            self.enc_layers = 0
        bad = []
        if min(self.src_vocab_size, self.tgt_vocab, self.d_model, self.n_heads, self.d_ff, self.dec_layers,
               self.max_len) < 1:
            bad.append("vocab sizes, d_model, n_heads, d_ff, dec_layers and max_len must be >= 1")
        if self.d_model % self.n_heads:
            bad.append(f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}")
        if self.enc_layers < 1 and not self.encoder_free:
            bad.append("enc_layers must be >= 1 (set encoder_free=True for a model without encoder)")
        if not all(0.0 <= p < 1.0 for p in (self.dropout, self.attn_dropout, self.activation_dropout)):
            bad.append("dropout rates must lie in [0, 1)")
        if self.share_embeddings and self.tgt_vocab != self.src_vocab_size:
            bad.append(f"share_embeddings needs one vocabulary, got {self.src_vocab_size} and {self.tgt_vocab}")
        if self.sinusoid_layout not in LAYOUTS or self.sinusoid_freq not in FREQS:
            bad.append(f"sinusoid_layout must be one of {LAYOUTS} and sinusoid_freq one of {FREQS}")
        if self.init not in INITS:
            bad.append(f"init must be one of {INITS}, got {self.init!r}")
        if self.activation not in ("relu", "gelu"):
            bad.append(f"activation must be 'relu' or 'gelu', got {self.activation!r}")
        if bad:
            raise ConfigError("invalid TransformerConfig: " + "; ".join(bad))
        check_encodings(self)

    @property
    def tgt_vocab(self) -> int:
        return self.src_vocab_size if self.tgt_vocab_size is None else self.tgt_vocab_size

    @classmethod
    def from_preset(cls, name: str, **overrides: Any) -> "TransformerConfig":
        """A named size (``tiny``, ``small``, ``base``, ``big``; see ``PRESETS``) with fields overridden."""
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; valid: {', '.join(PRESETS)}")
        return cls.from_dict({**PRESETS[name], **overrides})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TransformerConfig":
        """Inverse of :meth:`to_dict`; unknown keys are a :class:`ConfigError` that lists the valid ones."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise ConfigError(f"unknown TransformerConfig field(s) {unknown}; valid: {', '.join(names)}")
        return cls(**d)


PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(d_model=32, n_heads=2, d_ff=64, enc_layers=2, dec_layers=2, dropout=0.1, max_len=256),
    "small": dict(d_model=256, n_heads=4, d_ff=1024, enc_layers=3, dec_layers=3, dropout=0.3),
    "base": dict(d_model=512, n_heads=8, d_ff=2048, enc_layers=6, dec_layers=6, dropout=0.1),
    "big": dict(d_model=1024, n_heads=16, d_ff=4096, enc_layers=6, dec_layers=6, dropout=0.3),
}
