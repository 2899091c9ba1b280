"""Deployment: a trained model as a CTranslate2 model directory (``xlpe export --format ctranslate2``).

CTranslate2 is the engine users pick for fast CPU inference. Its Transformer specification
(``ctranslate2.specs.TransformerSpec``) expresses xlpe's encoder-decoder when the source position encoding is
the sinusoidal one alone (``pe = ['ape']``): the table is written explicitly (xlpe's layout, base and
frequencies, positions from 0), embeddings are scaled by √d, layers are post- or pre-norm as trained, the
self-attention projections are fused as [Q; K; V] and the encoder-decoder ones as Q and [K; V], and the output
projection is the tied target embedding. The vocabulary is the subword model's pieces; the source gets EOS
appended and decoding starts from BOS, as in :func:`xlpe.infer.translate.translate_lines`.

Other encodings are refused with the reason: XL PE, structural PE and DPE read channels or layers CTranslate2
has no place for, and CTranslate2's Shaw relative positions replace the absolute encoding instead of adding to
it, so ``ape + rpe`` has no exact counterpart.

``tests/test_export.py`` checks that CTranslate2's greedy output of an exported model equals
:func:`xlpe.infer.translate.translate_lines`'s on a small trained model. Beam search agrees on most sentences
but not all: CTranslate2 normalises by the same ``(n + EOS)^α`` but finishes hypotheses by its own rule, closest
to xlpe's ``beam_stop='fairseq'`` (12 of 12 toy sentences at beam 3 and 5, α = 0.6; 11 of 12 at α = 1), while
xlpe's default ``'exhaust'`` rule agrees on 9-11 of 12.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

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


def exportable(cfg) -> str | None:
    """Why ``cfg`` cannot be exported to CTranslate2, or None if it can."""
    if cfg.encoder_free:
        return "the encoder-free model (no encoder layers) has no CTranslate2 counterpart"
    if list(cfg.pe) != ["ape"]:
        other = [p for p in cfg.pe if p != "ape"] or list(cfg.pe)
        return (f"CTranslate2 can express the sinusoidal encoding alone (pe=['ape']); this model has pe="
                f"{list(cfg.pe)}: {other} read channels or layers CTranslate2 has no place for, or (rpe) replace the "
                "absolute encoding there instead of adding to it")
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


def ctranslate2_spec(model: torch.nn.Module, subwords):
    """The ``ctranslate2.specs.TransformerSpec`` of a loaded xlpe model and its subword model(s)."""
    from ctranslate2.specs.common_spec import Activation

    common_spec, transformer_spec = _ct2()
    cfg = model.cfg
    why = exportable(cfg)
    if why:
        raise ConfigError(f"cannot export to CTranslate2: {why}")
    src_sw, tgt_sw = subwords if isinstance(subwords, tuple) else (subwords, subwords)
    act = {"relu": Activation.RELU, "gelu": Activation.GELU}[cfg.activation]
    spec = transformer_spec.TransformerSpec.from_config((cfg.enc_layers, cfg.dec_layers), cfg.n_heads,
                                                       pre_norm=cfg.pre_norm, activation=act)
    table = model_sinusoid(torch.arange(cfg.max_len), cfg).float().numpy()
    enc, dec = model.encoder, model.decoder
    spec.encoder.embeddings[0].weight = enc.embed.weight.detach().float().numpy().copy()
    spec.encoder.scale_embeddings = True
    spec.encoder.position_encodings.encodings = table
    for s, layer in zip(spec.encoder.layer, enc.layers):
        a = layer.self_attn
        _fused(s.self_attention.linear[0], (a.q_proj, a.k_proj, a.v_proj))
        _linear(s.self_attention.linear[1], a.out_proj.weight, a.out_proj.bias)
        _norm(s.self_attention.layer_norm, layer.norm1)
        _ffn(s.ffn, layer.ffn, layer.norm2)
    spec.decoder.embeddings.weight = dec.embed.weight.detach().float().numpy().copy()
    spec.decoder.scale_embeddings = True
    spec.decoder.position_encodings.encodings = table
    for s, layer in zip(spec.decoder.layer, dec.layers):
        a, c = layer.self_attn, layer.cross_attn
        _fused(s.self_attention.linear[0], (a.q_proj, a.k_proj, a.v_proj))
        _linear(s.self_attention.linear[1], a.out_proj.weight, a.out_proj.bias)
        _norm(s.self_attention.layer_norm, layer.norm1)
        _linear(s.attention.linear[0], c.q_proj.weight, c.q_proj.bias)
        _fused(s.attention.linear[1], (c.k_proj, c.v_proj))
        _linear(s.attention.linear[2], c.out_proj.weight, c.out_proj.bias)
        _norm(s.attention.layer_norm, layer.norm2)
        _ffn(s.ffn, layer.ffn, layer.norm3)
    if cfg.pre_norm:
        _norm(spec.encoder.layer_norm, enc.norm)
        _norm(spec.decoder.layer_norm, dec.norm)
    out_w = dec.embed.weight if dec.out is None else dec.out.weight
    spec.decoder.projection.weight = out_w.detach().float().numpy().copy()
    src_vocab = [src_sw.sp.id_to_piece(i) for i in range(src_sw.vocab_size)]
    tgt_vocab = [tgt_sw.sp.id_to_piece(i) for i in range(tgt_sw.vocab_size)]
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token = tgt_vocab[cfg.unk_id]
    spec.config.bos_token = tgt_vocab[cfg.bos_id]
    spec.config.eos_token = tgt_vocab[cfg.eos_id]
    spec.config.decoder_start_token = tgt_vocab[cfg.bos_id]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = layer.norm1.eps
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
