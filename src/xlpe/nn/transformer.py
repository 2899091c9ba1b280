"""The encoder-decoder Transformer (Vaswani et al. 2017) with pluggable source position encodings.

Read top to bottom (the config is in ``xlpe.nn.config``): the encoder (embeddings, position encodings,
layers), the decoder (embeddings, sinusoidal PE, causal layers, output projection), the model. Source position
encodings are plugins from ``xlpe.nn.positions`` chosen by ``cfg.pe`` (DESIGN.md "position channels"); the
decoder is the unchanged Transformer (SPEC §0). ``encoder_free=True`` is Ding et al.'s context-free model: the
decoder attends directly to ``dropout(sqrt(d) E[x] + source PE)`` (SPEC §4.7).

    cfg = TransformerConfig.from_preset("tiny", src_vocab_size=100, pe=["ape", "rpe"])
    model = build_model(cfg)
    logits = model(src, tgt_in, channels={"seq": seq})       # (B, T_tgt, V)

Verified in ``tests/test_nn_transformer.py``: padding never changes outputs at real positions (for every
encoding), incremental decoding with the cache equals a full recompute, pre/post-norm and encoder-free variants
train, and a tiny model overfits a toy data set.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from xlpe.errors import ConfigError
from xlpe.nn.attention import DecoderLayer, Dropout, EncoderLayer
# PRESETS is re-exported: one import for the model and its config
from xlpe.nn.config import PRESETS, TransformerConfig  # noqa: F401
from xlpe.nn.device import bf16_products, bucketed_rows, derived, device_policy, packed_linear
from xlpe.nn.positions import EncodingContext, HeadInput, build_encodings
from xlpe.nn.positions.sinusoid import model_sinusoid


@dataclass
class EncoderOut:
    """``memory (B, S, d)``, ``src_pad_mask (B, S)`` (True = pad), ``aux``: losses/diagnostics of the encodings,
    ``memory_heads``: per-head replacement memories of an encoder-free model (HeadXL, SPEC §4.7 [I])."""

    memory: Tensor
    src_pad_mask: Tensor
    aux: dict[str, Tensor] = field(default_factory=dict)
    memory_heads: list[HeadInput] = field(default_factory=list)

    def index_select(self, index: Tensor) -> "EncoderOut":
        """Rows ``index`` of the batch (e.g. ``arange(B).repeat_interleave(beam)``); ``aux`` is kept as is."""
        heads = [HeadInput(h.x.index_select(0, index), h.heads) for h in self.memory_heads]
        return EncoderOut(self.memory.index_select(0, index), self.src_pad_mask.index_select(0, index), self.aux,
                          heads)


@dataclass
class DecoderCache:
    """Keys and values of every decoder layer for incremental decoding; ``length`` = target positions done."""

    length: int = 0
    layers: list[dict[str, dict[str, Tensor]]] = field(default_factory=list)
    positions: Tensor | None = None      # the decoder's sinusoids of positions 0, 1, ... (computed once, grown)

    def reorder(self, index: Tensor, cross_index: Tensor | None = None) -> None:
        """Keep batch rows ``index``, in place: of the self-attention keys/values (one row per decoder row) and,
        by ``cross_index`` (default ``index``), of the cross-attention ones (one row per memory row; beam search
        keeps one memory row per sentence, so its beams share it)."""
        self.reorder_self(index)
        cross_index = index if cross_index is None else cross_index
        for layer in self.layers:
            kv = layer.get("cross", {})
            for name in kv:
                kv[name] = kv[name].index_select(0, cross_index)

    def reorder_self(self, index: Tensor) -> None:
        """Keep rows ``index`` of the self-attention keys/values only (beams re-ranked within their sentences,
        whose memory rows stay as they are). The rows are noted, not copied: the next step gathers them as it
        appends its own keys and values (one copy of the cache per step instead of two); reorders before that
        step compose."""
        for layer in self.layers:
            kv = layer.get("self", {})
            if "k" in kv:
                kv["rows"] = index if "rows" not in kv else kv["rows"][index]


def _embedding(vocab: int, d: int, pad_id: int) -> nn.Embedding:
    emb = nn.Embedding(vocab, d, padding_idx=pad_id)
    nn.init.normal_(emb.weight, mean=0.0, std=d ** -0.5)   # so that sqrt(d) * E[x] has unit scale
    with torch.no_grad():
        emb.weight[pad_id].zero_()
    return emb


class Encoder(nn.Module):
    """``X = dropout(sqrt(d) E[x] + sum of input terms) (+ after-dropout terms)``, then the layers; each
    layer's self-attention receives the encodings' relative terms, per-head inputs and head masks for that
    layer."""

    def __init__(self, cfg: TransformerConfig, embed: nn.Embedding):
        super().__init__()
        self.cfg, self.embed = cfg, embed
        self.pe = build_encodings(cfg)
        self.drop = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.enc_layers))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm and cfg.enc_layers else None

    def forward(self, src: Tensor, channels: dict[str, Tensor] | None = None) -> EncoderOut:
        pad = src.eq(self.cfg.pad_id)
        ctx = EncodingContext(src, self.embed(src) * math.sqrt(self.cfg.d_model), pad, dict(channels or {}))
        for p in self.pe:
            term = p.input_term(ctx)
            if term is not None:
                ctx.terms[p.name] = term
                if p.after_dropout:
                    ctx.after_dropout.add(p.name)
        for name in {r for p in self.pe for r in p.replaces()}:
            ctx.terms.pop(name, None)
        x = ctx.emb
        for p in self.pe:
            if p.name in ctx.terms and not p.after_dropout:
                x = x + ctx.terms[p.name]
        x = self.drop(x)
        for p in self.pe:
            if p.name in ctx.terms and p.after_dropout:
                x = x + ctx.terms[p.name]
        for i, layer in enumerate(self.layers):
            rel = [r for p in self.pe if (r := p.relative(ctx, i)) is not None]
            heads = [h for p in self.pe if (h := p.head_input(ctx, i, x)) is not None]
            x = layer(x, pad, rel, heads, _all_of(p.head_mask(ctx, i) for p in self.pe))
        if self.norm is not None:
            x = self.norm(x)
        # encoder-free: per-head inputs of "layer 0" become per-head memories of the cross-attention (SPEC §4.7)
        heads = [h for p in self.pe if (h := p.head_input(ctx, 0)) is not None] if not self.layers else []
        return EncoderOut(x, pad, ctx.aux, heads)


def _all_of(masks) -> Tensor | None:
    """The "and" of the head masks that are not None (hook (e)), or None."""
    out = None
    for m in masks:
        if m is not None:
            out = m if out is None else out & m
    return out


class Decoder(nn.Module):
    """``Y = dropout(sqrt(d) E[y] + sinusoid(t))``, causal layers with cross-attention, output projection."""

    def __init__(self, cfg: TransformerConfig, embed: nn.Embedding):
        super().__init__()
        self.cfg, self.embed = cfg, embed
        self.drop = Dropout(cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.dec_layers))
        self.norm = nn.LayerNorm(cfg.d_model) if cfg.pre_norm else None
        self.out = None if cfg.tie_output else nn.Linear(cfg.d_model, cfg.tgt_vocab, bias=False)
        if self.out is not None:
            nn.init.normal_(self.out.weight, mean=0.0, std=cfg.d_model ** -0.5)

    def forward(self, tgt_in: Tensor, enc: EncoderOut, need_attn_layer: int | None = None,
                cache: DecoderCache | None = None,
                memory_slots: tuple[Tensor, int] | None = None, project: bool = True,
                output: Tensor | None = None) -> tuple[Tensor, Tensor | None]:
        c = self.cfg
        start = 0 if cache is None else cache.length
        end = start + tgt_in.shape[1]
        if cache is None:
            pe = model_sinusoid(torch.arange(start, end, device=tgt_in.device), c)
        else:       # a table of positions, not one sinusoid per step
            if cache.positions is None or cache.positions.shape[0] < end:
                cache.positions = model_sinusoid(torch.arange(max(64, 2 * end), device=tgt_in.device), c)
            pe = cache.positions[start:end]
        x = self.drop(self.embed(tgt_in) * math.sqrt(c.d_model) + pe.to(enc.memory.dtype))
        if cache is not None and not cache.layers:
            cache.layers = [{} for _ in self.layers]
        attn = None
        for i, layer in enumerate(self.layers):
            x, w = layer(x, enc.memory, enc.src_pad_mask, cache=None if cache is None else cache.layers[i],
                         need_weights=i == need_attn_layer, memory_heads=enc.memory_heads,
                         memory_slots=memory_slots)
            attn = w if w is not None else attn
        if self.norm is not None:
            x = self.norm(x)
        if cache is not None:
            cache.length += tgt_in.shape[1]
        if not project:
            return x, attn
        return self._project(x) if output is None else x @ output.t(), attn

    def _project(self, x: Tensor) -> Tensor:
        """``x @ output_weight.T``; at inference (eval mode, no autograd) in float32 on a device whose policy says so
        (CPU, :mod:`xlpe.nn.device`), through oneDNN's linear kernel with the weight packed once (a copy the size
        of the weight, kept by :func:`~xlpe.nn.device.derived` and packed again after any update)."""
        w = self.output_weight
        if bf16_products(self, x, w):
            return packed_linear(self, "output", x, w)
        if (self.training or torch.is_grad_enabled() or w.dtype != torch.float32 or x.dtype != torch.float32
                or w.is_inference() or not device_policy(w.device).packed_output_projection):
            return bucketed_rows(lambda t: t @ w.t(), x)
        packed = derived(self, "output", (w,), lambda: torch.ops.mkldnn._reorder_linear_weight(w.detach()))
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, None, "none", [], "")
        return y.view(*x.shape[:-1], w.shape[0])

    @property
    def output_weight(self) -> Tensor:
        """The ``(V, d)`` output projection: the tied embedding table or the separate output layer's weight."""
        return self.embed.weight if self.out is None else self.out.weight


class Transformer(nn.Module):
    """Encoder-decoder Transformer; see the module docstring. Construct with :func:`build_model`."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        src_embed = _embedding(cfg.src_vocab_size, cfg.d_model, cfg.pad_id)
        tgt_embed = src_embed if cfg.share_embeddings else _embedding(cfg.tgt_vocab, cfg.d_model, cfg.pad_id)
        self.encoder = Encoder(cfg, src_embed)
        self.decoder = Decoder(cfg, tgt_embed)

    def forward(self, src: Tensor, tgt_in: Tensor, channels: dict[str, Tensor] | None = None,
                return_aux: bool = False, features_only: bool = False) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Teacher-forced logits ``(B, T_tgt, V)`` for source ``(B, S)`` and decoder input ``(B, T_tgt)``
        (``[BOS, y_1, ...]``); with ``return_aux`` also the encoder's aux dict (auxiliary losses). With
        ``features_only`` the decoder's outputs ``(B, T_tgt, d)`` before the output projection
        (:attr:`output_weight`) instead of the logits: the trainer fuses the projection into its loss
        (:func:`xlpe.train.losses.projected_label_smoothed_nll`)."""
        enc = self.encode(src, channels)
        if features_only:
            out, _ = self.decoder(tgt_in, enc, project=False)
        else:
            out = self.decode(tgt_in, enc)
        return (out, enc.aux) if return_aux else out

    @property
    def output_weight(self) -> Tensor:
        """The ``(V, d)`` output projection weight (logits are ``features @ output_weight.T``, no bias)."""
        return self.decoder.output_weight

    def encode(self, src: Tensor, channels: dict[str, Tensor] | None = None) -> EncoderOut:
        """Encode a right-padded source batch ``(B, S)`` (EOS-terminated) with its position channels.
        Encoder-free models have zero layers, so the memory is the encoded input itself (SPEC §4.7)."""
        return self.encoder(src, channels)

    def decode(self, tgt_in: Tensor, enc_out: EncoderOut, need_attn_layer: int | None = None,
               cache: DecoderCache | None = None,
               memory_slots: tuple[Tensor, int] | None = None,
               output: Tensor | None = None) -> Tensor | tuple[Tensor, Tensor]:
        """Logits ``(B, T, V)`` for decoder input ``tgt_in`` (only the new tokens when ``cache`` is given; the
        cache is updated in place). With ``need_attn_layer`` (0-based, negative counts from the top) also that
        layer's encoder-decoder attention per head, ``(B, H, T, S)``: returns ``(logits, attn)``.

        ``enc_out`` may have fewer rows than ``tgt_in``: with ``memory_slots = None`` each memory row serves
        ``B / B_m`` consecutive decoder rows (the beams of a sentence); with ``memory_slots = (slots, g)`` decoder
        row ``i`` is slot ``slots[i]`` of ``B_m * g`` (beam search decoding only the live beams). ``output``: rows
        of :attr:`output_weight` to score instead of all of them (a vocabulary shortlist): logits ``(B, T, V')``."""
        layer = None
        if need_attn_layer is not None:
            n = self.cfg.dec_layers
            if not -n <= need_attn_layer < n:
                raise ConfigError(f"need_attn_layer={need_attn_layer} but the decoder has {n} layers")
            layer = need_attn_layer % n
        logits, attn = self.decoder(tgt_in, enc_out, layer, cache, memory_slots, output=output)
        return logits if layer is None else (logits, attn)


def build_model(cfg: TransformerConfig) -> Transformer:
    """The model for ``cfg`` (a plain constructor call; kept as the stable entry point)."""
    return Transformer(cfg)


def count_parameters(model: nn.Module, trainable_only: bool = True) -> int:
    """Number of (shared parameters counted once) parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)
