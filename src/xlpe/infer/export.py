"""Deployment: a trained model as a CTranslate2 model directory (``xlpe export --format ctranslate2``).

CTranslate2 is the engine users pick for fast CPU inference. Its Transformer specification
(``ctranslate2.specs.TransformerSpec``) expresses xlpe's encoder-decoder when the source position encodings are
absolute tables of the position alone or Shaw's relative positions alone:

* ``ape``, ``learned``, both, or ``none``: one encoder position table, the sum of their terms at positions
  ``0..max_len-1`` (xlpe's sinusoid layout, base and frequencies; the learned rows as trained; zeros for none);
* ``rpe``: every encoder layer's relative key and value tables (:func:`source_positions`), written as they are:
  both engines index them by ``clip(j - i, k) + k`` (key minus query), and the K-only variant gets zero values.

The decoder's position table is xlpe's sinusoid. Embeddings are scaled by √d, layers are post- or pre-norm as
trained, the self-attention projections are fused as [Q; K; V] and the encoder-decoder ones as Q and [K; V], and
the output projection is the tied target embedding. The vocabulary is the subword model's pieces; the source
gets EOS appended and decoding starts from BOS, as in :func:`xlpe.infer.translate.translate_lines`. The
exported model reads positions ``0..T-1``: a ``seq`` channel given to xlpe at translation has no counterpart.

Other encodings are refused with the reason (:func:`exportable`): XL PE, structural PE and DPE read channels or
layers CTranslate2 has no place for, DiSAN masks attention heads by direction, which it cannot, and a CTranslate2
encoder with relative positions has no position table (one written beside relative tables is ignored: the scores
then equal those of the model without its absolute term), so ``ape + rpe`` and ``learned + rpe`` have no exact
counterpart.

``tests/test_export.py`` checks, for every expressible encoding on random weights, that CTranslate2's score of
every target token equals xlpe's teacher-forced log-probability (and that reversed relative tables would not),
and that CTranslate2's greedy output of an exported model equals
:func:`xlpe.infer.translate.translate_lines`'s on small trained models (APE, pre-norm RPE, learned). Beam search
agrees on most sentences but not all: CTranslate2 normalises by the same ``(n + EOS)^α`` but finishes hypotheses
by its own rule, closest to xlpe's ``beam_stop='fairseq'`` (12 of 12 toy sentences at beam 3 and 5, α = 0.6;
11 of 12 at α = 1), while xlpe's default ``'exhaust'`` rule agrees on 9-11 of 12.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch

from xlpe.errors import ConfigError, XlpeError
from xlpe.nn.positions.sinusoid import model_sinusoid

FORMATS = ("ctranslate2",)
#: CTranslate2's weight types (``--quantization``)
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")


def _ct2():
    try:
        import ctranslate2  # noqa: F401
        from ctranslate2.specs import common_spec, transformer_spec
    except ImportError as e:  # pragma: no cover  (the export extra is part of the set-up)
        raise ConfigError("exporting to CTranslate2 needs the ctranslate2 package: pip install 'xlpe[export]'") from e
    return common_spec, transformer_spec


#: source encodings whose terms are functions of the position ``0..T-1`` alone, added to the embeddings: their sum
#: is one table, CTranslate2's ``position_encodings``
ABSOLUTE = ("ape", "learned")


def exportable(cfg) -> str | None:
    """Why ``cfg`` cannot be exported to CTranslate2, or None if it can."""
    if cfg.encoder_free:
        return "the encoder-free model (no encoder layers) has no CTranslate2 counterpart"
    names = [p for p in cfg.pe if p != "none"]
    other = [p for p in names if p not in (*ABSOLUTE, "rpe")]
    if other:
        return (f"CTranslate2 can express the absolute encodings {list(ABSOLUTE)} (one position table) or Shaw's "
                f"relative positions ('rpe') alone; this model has pe={list(cfg.pe)}: {other} read channels, "
                "add layers or mask attention heads (disan), which CTranslate2 has no place for")
    if "rpe" in names and len(names) > 1:
        return (f"pe={list(cfg.pe)}: CTranslate2's Shaw relative positions replace the absolute encoding of the "
                "encoder instead of adding to it (a model with relative positions has no position table), so "
                "'rpe' exports only alone")
    if cfg.activation not in ("relu", "gelu"):
        return f"activation {cfg.activation!r} has no CTranslate2 counterpart"
    return None


def _linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = weight.detach().float().numpy().copy()
    if bias is not None:
        spec.bias = bias.detach().float().numpy().copy()


def _fused(spec, mods) -> None:
    _linear(spec, torch.cat([m.weight for m in mods]), torch.cat([m.bias for m in mods]))


def _norm(spec, ln) -> None:
    spec.gamma = ln.weight.detach().float().numpy().copy()
    spec.beta = ln.bias.detach().float().numpy().copy()


def _ffn(spec, ffn, ln) -> None:
    lin = [m for m in ffn.net if isinstance(m, torch.nn.Linear)]
    _linear(spec.linear_0, lin[0].weight, lin[0].bias)
    _linear(spec.linear_1, lin[1].weight, lin[1].bias)
    _norm(spec.layer_norm, ln)


def source_positions(model: torch.nn.Module) -> tuple[np.ndarray | None, list[tuple[np.ndarray, np.ndarray]]]:
    """The encoder's positions as CTranslate2 holds them: ``(table, [])`` with the ``(max_len, d)`` sum of the
    absolute encodings' terms at positions ``0..max_len-1`` (zeros for ``pe=['none']``), or ``(None, tables)``
    for ``pe=['rpe']`` with each encoder layer's ``(relative_position_keys, relative_position_values)``.

    xlpe's Shaw tables are indexed by ``clip(j - i, k) + k`` (key minus query, :func:`relative_index`), CTranslate2's
    by the same expression (its ``make_relative_positions``), so the rows are written as they are; both scale the
    key term with the content term by ``1/sqrt(d_k)``. The K-only variant (``rpe_values=False``) gets a zero value
    table: ``sum_j alpha_ij 0 = 0``."""
    cfg = model.cfg
    pe = {p.name: p for p in model.encoder.pe}
    if "rpe" in pe:
        rpe = pe["rpe"]
        keys = rpe.table_k.detach().float().numpy()
        values = np.zeros_like(keys) if rpe.table_v is None else rpe.table_v.detach().float().numpy()
        return None, [(k.copy(), v.copy()) for k, v in zip(keys, values)]
    pos = torch.arange(cfg.max_len)
    table = torch.zeros(cfg.max_len, cfg.d_model)
    if "ape" in pe:
        table += model_sinusoid(pos, cfg).float()
    if "learned" in pe:
        table += pe["learned"].table(pos).detach().float()
    return table.numpy(), []


def _encoder(spec, enc, table: np.ndarray | None, relative: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Fill the encoder ``spec`` from xlpe's encoder ``enc`` and its positions (:func:`source_positions`)."""
    spec.embeddings[0].weight = enc.embed.weight.detach().float().numpy().copy()
    spec.scale_embeddings = True
    if table is not None:
        spec.position_encodings.encodings = table
    for i, (s, layer) in enumerate(zip(spec.layer, enc.layers)):
        a = layer.self_attn
        if relative:
            s.self_attention.relative_position_keys, s.self_attention.relative_position_values = relative[i]
        _fused(s.self_attention.linear[0], (a.q_proj, a.k_proj, a.v_proj))
        _linear(s.self_attention.linear[1], a.out_proj.weight, a.out_proj.bias)
        _norm(s.self_attention.layer_norm, layer.norm1)
        _ffn(s.ffn, layer.ffn, layer.norm2)
    if enc.norm is not None:
        _norm(spec.layer_norm, enc.norm)


def _decoder(spec, dec, table: np.ndarray) -> None:
    """Fill the decoder ``spec`` from xlpe's decoder ``dec`` and its sinusoidal ``table``."""
    spec.embeddings.weight = dec.embed.weight.detach().float().numpy().copy()
    spec.scale_embeddings = True
    spec.position_encodings.encodings = table
    for s, layer in zip(spec.layer, dec.layers):
        a, c = layer.self_attn, layer.cross_attn
        _fused(s.self_attention.linear[0], (a.q_proj, a.k_proj, a.v_proj))
        _linear(s.self_attention.linear[1], a.out_proj.weight, a.out_proj.bias)
        _norm(s.self_attention.layer_norm, layer.norm1)
        _linear(s.attention.linear[0], c.q_proj.weight, c.q_proj.bias)
        _fused(s.attention.linear[1], (c.k_proj, c.v_proj))
        _linear(s.attention.linear[2], c.out_proj.weight, c.out_proj.bias)
        _norm(s.attention.layer_norm, layer.norm2)
        _ffn(s.ffn, layer.ffn, layer.norm3)
    if dec.norm is not None:
        _norm(spec.layer_norm, dec.norm)
    out_w = dec.embed.weight if dec.out is None else dec.out.weight
    spec.projection.weight = out_w.detach().float().numpy().copy()


def ctranslate2_spec(model: torch.nn.Module, subwords):
    """The ``ctranslate2.specs.TransformerSpec`` of a loaded xlpe model and its subword model(s)."""
    from ctranslate2.specs.common_spec import Activation

    _, transformer_spec = _ct2()
    cfg = model.cfg
    why = exportable(cfg)
    if why:
        raise ConfigError(f"cannot export to CTranslate2: {why}")
    src_sw, tgt_sw = subwords if isinstance(subwords, tuple) else (subwords, subwords)
    act = {"relu": Activation.RELU, "gelu": Activation.GELU}[cfg.activation]
    src_table, relative = source_positions(model)
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(cfg.enc_layers, cfg.n_heads, pre_norm=cfg.pre_norm, activation=act,
                                                relative_position=bool(relative)),
        transformer_spec.TransformerDecoderSpec(cfg.dec_layers, cfg.n_heads, pre_norm=cfg.pre_norm, activation=act))
    _encoder(spec.encoder, model.encoder, src_table, relative)
    _decoder(spec.decoder, model.decoder, model_sinusoid(torch.arange(cfg.max_len), cfg).float().numpy())
    src_vocab = [src_sw.sp.id_to_piece(i) for i in range(src_sw.vocab_size)]
    tgt_vocab = [tgt_sw.sp.id_to_piece(i) for i in range(tgt_sw.vocab_size)]
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token = tgt_vocab[cfg.unk_id]
    spec.config.bos_token = tgt_vocab[cfg.bos_id]
    spec.config.eos_token = tgt_vocab[cfg.eos_id]
    spec.config.decoder_start_token = tgt_vocab[cfg.bos_id]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = model.decoder.layers[-1].norm1.eps
    return spec


def export_model(checkpoint: str | os.PathLike, output: str | os.PathLike, *, format: str = "ctranslate2",
                 quantization: str | None = None, force: bool = False) -> Path:
    """Write the model of ``checkpoint`` to the directory ``output`` in ``format``; the directory appears whole or
    not at all. ``quantization``: a CTranslate2 weight type (``int8``, ``int8_float32``, ``float16``, ...)."""
    from xlpe.nn.checkpoint import load_model

    if format not in FORMATS:
        raise ConfigError(f"unknown export format {format!r}; valid: {', '.join(FORMATS)}")
    if quantization and quantization not in QUANTIZATIONS:
        raise ConfigError(f"unknown quantization {quantization!r}; valid: {', '.join(QUANTIZATIONS)}")
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output {out} is a file; give a directory path")
    if out.resolve() == Path(checkpoint).resolve().parent:
        raise ConfigError(f"output {out} holds the checkpoint {checkpoint}; choose another directory")
    if out.exists() and not force:
        raise ConfigError(f"output {out} exists; give another directory or --force to replace it")
    model, _, sw = load_model(checkpoint)
    spec = ctranslate2_spec(model, sw)
    spec.validate()
    if quantization:
        spec.optimize(quantization=quantization)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent if out.parent.exists() else None))
    try:
        spec.save(str(tmp))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, XlpeError):
            raise
        raise XlpeError(f"writing the CTranslate2 model to {out} failed: {e}") from e
    return out
