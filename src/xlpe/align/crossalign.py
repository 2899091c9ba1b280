"""Cross-Align (Lai, Liu, Huang, Zhou, Wang, Zhang, EMNLP 2022): the model and alignment extraction.

Architecture (SPEC §7.1): ``m`` shared self-attention BERT layers run on the source and the target separately,
then ``n`` cross-attention layers in which the queries come from a stream's own states and the keys and values
from the other stream (masked by its padding); a cross layer is transformers' ``BertAttention`` with
``is_cross_attention`` then ``BertIntermediate``/``BertOutput`` (residual + LayerNorm each) and has **no**
self-attention sub-layer; one set of weights ``W_c`` serves both directions. The update is simultaneous (paper
Eq. 4-5) unless ``sequential_cross_update`` (the authors' code: the target attends to the *updated* source,
SPEC §7.6). An MLM head (``BertOnlyMLMHead``) is tied to the word embeddings. Everything is built from
transformers' BERT modules; transformers (the ``xlpe[crossalign]`` extra) is imported only when a model is built
(:mod:`xlpe.align.crossalign_hf` reads model directories and tokenizers).

Extraction (SPEC §7.2: the :class:`~xlpe.align.crossalign_extract.Extraction` settings and the one pipeline from a
layer's states to word links) lives in :mod:`xlpe.align.crossalign_extract`; :meth:`CrossAligner.align` runs it over
batches of a bitext, :func:`layer_states` giving it the states.

Long sentences are truncated to ``max_len`` subwords ([CLS] and [SEP] included; SPEC §7.2 ``max_len=256``):
words cut off get no links, and every call logs a warning with the number of truncated sentences (also counted
in :attr:`CrossAligner.truncated`). Training lives in :mod:`xlpe.align.crossalign_train`.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from xlpe.align.crossalign_extract import NULL_SINKS, SYMMETRIZE, WORD_VECTORS, Extraction, check_layer, extract
from xlpe.align.crossalign_hf import BERT_LIKE, import_transformers, load_tokenizer, quiet_hf, read_hf_config
from xlpe.config import option
from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import Alignment
from xlpe.io.atomic import atomic_dir, atomic_write
from xlpe.io.text import tokenize

logger = logging.getLogger(__name__)

CONFIG_NAME = "crossalign.json"
FORMAT = "xlpe-crossalign"
VERSION = 1


@dataclass
class CrossAlignConfig:
    """What a Cross-Align directory records beside the BERT weights (``crossalign.json``): the architecture
    (``m``, ``n``, the update order), the extraction defaults and how it was trained."""

    m: int | None = option(None, "self-attention layers taken from the encoder (default: its layers - n)")
    n: int = option(2, "cross-attention layers (SPEC §7.1; the paper's best is 2 of 12)")
    align_layer: int | None = option(None, "alignment layer c, 1-based output of layer c; 0 = embeddings "
                                           "(default: m + 1, the first cross layer)")
    threshold: float = option(0.15, "extraction threshold tau on both softmaxes (0.15 at inference, SPEC §7.2)")
    null_sink: str = option("cls", "'cls': the other side's [CLS] stays among the softmax keys as a null sink "
                                   "(stage-2 code path); 'none': removed (stage-1 code path)", choices=NULL_SINKS)
    symmetrize: str = option("pieces", "'pieces': a link where both directions pass, piece by piece (SPEC §7.2); "
                                       "or a word-level symmetrisation of the two directions' links, e.g. "
                                       "grow-diag-final-and [I]", choices=SYMMETRIZE)
    word_vectors: str = option("pieces", "'pieces': softmaxes over word pieces, words linked by the 'any' rule "
                                         "(SPEC §8.3); 'mean': over words, each its pieces' mean state [I]",
                               choices=WORD_VECTORS)
    sequential_cross_update: bool = option(False, "the authors' code: the target attends to the already "
                                                  "updated source (default: simultaneous, paper Eq. 4-5)")
    max_len: int = option(256, "subwords per sentence incl. [CLS] and [SEP]; longer ones are truncated with a "
                               "warning and a count")
    stages: list = field(default_factory=list)
    init: str | None = None

    def __post_init__(self):
        self.symmetrize = self.extraction().symmetrize           # checks the extraction's settings
        if self.m is None:                       # resolved by CrossAligner.from_encoder
            return
        if self.m < 0 or self.n < 0 or self.m + self.n < 1:
            raise ConfigError(f"need m >= 0 self layers and n >= 0 cross layers, m + n >= 1 "
                              f"(got m={self.m}, n={self.n})")
        if self.align_layer is None:
            self.align_layer = self.m + 1 if self.n else self.m
        check_layer(self.align_layer, self.m + self.n)
        if self.max_len < 3:
            raise ConfigError(f"max_len must be >= 3 ([CLS] + one piece + [SEP]), not {self.max_len}")

    def extraction(self) -> Extraction:
        """The extraction these settings name: softmax at ``threshold`` on the alignment layer."""
        return Extraction(threshold=self.threshold, null_sink=self.null_sink, symmetrize=self.symmetrize,
                          word_vectors=self.word_vectors, layer=self.align_layer)


# -- the model (built lazily: transformers is optional) ---------------------------------------------------

@functools.cache
def model_class():
    """``CrossAlignModel``, a ``BertPreTrainedModel`` (so ``save_pretrained``/``from_pretrained`` and BERT's
    N(0, 0.02) init apply). Its config is a ``BertConfig`` with ``num_hidden_layers = m + n`` and two extra
    fields, ``cross_layers`` (n) and ``sequential_cross_update``."""
    import_transformers()
    from torch import nn
    from transformers.masking_utils import create_bidirectional_mask
    from transformers.models.bert.modeling_bert import (BertAttention, BertEmbeddings, BertIntermediate, BertLayer,
                                                        BertOnlyMLMHead, BertOutput, BertPreTrainedModel)

    class CrossLayer(nn.Module):
        """Cross-attention (queries: own stream; keys/values: the other) + FFN, residual + LayerNorm each."""

        def __init__(self, config):
            super().__init__()
            self.crossattention = BertAttention(config, is_cross_attention=True)
            self.intermediate = BertIntermediate(config)
            self.output = BertOutput(config)

        def forward(self, h: Tensor, other: Tensor, other_mask) -> Tensor:
            a = self.crossattention(h, encoder_hidden_states=other, encoder_attention_mask=other_mask)[0]
            return self.output(self.intermediate(a), a)

    class CrossAlignModel(BertPreTrainedModel):
        _tied_weights_keys = {"cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
                              "cls.predictions.decoder.bias": "cls.predictions.bias"}

        def __init__(self, config):
            super().__init__(config)
            n = int(getattr(config, "cross_layers", 0))
            self.embeddings = BertEmbeddings(config)
            self.self_layers = nn.ModuleList(BertLayer(config, layer_idx=i)
                                             for i in range(config.num_hidden_layers - n))
            self.cross_layers = nn.ModuleList(CrossLayer(config) for _ in range(n))
            self.cls = BertOnlyMLMHead(config)
            self.post_init()

        def get_input_embeddings(self):
            return self.embeddings.word_embeddings

        def get_output_embeddings(self):
            return self.cls.predictions.decoder

        def set_output_embeddings(self, new):
            self.cls.predictions.decoder = new

        def forward(self, input_ids: Tensor, attention_mask: Tensor, layer: int | None = None,
                    mlm_labels: Tensor | None = None):
            """``input_ids``/``attention_mask`` ``(2B, T)``: the B sources then the B targets, padded to one
            length. Returns the states after ``layer`` (default: the last), or with ``mlm_labels`` (-100 where not
            masked) the TLM loss ``CE_mean(src) + CE_mean(tgt)`` from the last layer (SPEC §7.3)."""
            m, n = len(self.self_layers), len(self.cross_layers)
            layer = m + n if layer is None or mlm_labels is not None else layer
            h = self.embeddings(input_ids=input_ids)
            if layer > 0 and m:
                mask = create_bidirectional_mask(config=self.config, inputs_embeds=h, attention_mask=attention_mask)
                for blk in self.self_layers[:layer]:
                    h = blk(h, attention_mask=mask)
            if layer > m:
                B = input_ids.shape[0] // 2
                other = torch.cat([attention_mask[B:], attention_mask[:B]])
                xmask = create_bidirectional_mask(config=self.config, inputs_embeds=h, attention_mask=other,
                                                  encoder_hidden_states=h)
                for blk in self.cross_layers[:layer - m]:
                    if self.config.sequential_cross_update:      # the code: y attends to the updated x
                        mx, my = (None, None) if xmask is None else (xmask[:B], xmask[B:])
                        hx = blk(h[:B], h[B:], mx)
                        h = torch.cat([hx, blk(h[B:], hx, my)])
                    else:                                        # the paper: both read layer l-1
                        h = blk(h, torch.cat([h[B:], h[:B]]), xmask)
            if mlm_labels is None:
                return h
            return tlm_loss(self.cls, h, mlm_labels)

    return CrossAlignModel


def tlm_loss(head, h: Tensor, labels: Tensor) -> Tensor:
    """``CE_mean(src masked) + CE_mean(tgt masked)``; the head runs on masked positions only. A side with no
    masked position in the batch contributes 0."""
    B = labels.shape[0] // 2
    total = h.new_zeros((), dtype=torch.float32)
    for part in (slice(0, B), slice(B, None)):
        sel = labels[part] != -100
        if sel.any():
            logits = head(h[part][sel]).float()
            total = total + torch.nn.functional.cross_entropy(logits, labels[part][sel])
        else:
            total = total + 0.0 * h[part].sum()          # keeps every parameter in the graph (DDP)
    return total


# -- batches ----------------------------------------------------------------------------------------------

@dataclass
class Batch:
    """B sentence pairs as one ``(2B, T)`` tensor: sources first, then targets. ``words`` is each position's
    word index (-1 for [CLS], [SEP] and pads)."""

    ids: Tensor
    attention: Tensor
    words: Tensor
    size: int
    truncated: int = 0

    def to(self, device) -> "Batch":
        return dataclasses.replace(self, ids=self.ids.to(device), attention=self.attention.to(device),
                                   words=self.words.to(device))


def _words(sentence: str | Sequence[str]) -> list[str]:
    return tokenize(sentence) if isinstance(sentence, str) else list(sentence)


class CrossAligner:
    """A Cross-Align model with its tokenizer and extraction settings.

    Build it with :meth:`from_pretrained` (a saved Cross-Align directory), :meth:`from_encoder` (initialise from
    any local BERT-like Hugging Face directory, SPEC §7.1), :meth:`from_config` (random weights) or :meth:`load`
    (either kind of directory: a plain encoder becomes ``m = all its layers, n = 0``, the untrained baseline).
    """

    def __init__(self, model, tokenizer, config: CrossAlignConfig, *, source: str = "<memory>"):
        self.model, self.tokenizer, self.config, self.source = model, tokenizer, config, source
        self.truncated = 0
        _check_tokenizer(tokenizer, model.config.vocab_size, source)
        if config.m != len(model.self_layers) or config.n != len(model.cross_layers):
            raise ConfigError(f"{source}: {CONFIG_NAME} says m={config.m}, n={config.n} but the weights have "
                              f"{len(model.self_layers)} self and {len(model.cross_layers)} cross layers")

    # -- construction ---------------------------------------------------------------------------------

    @classmethod
    def from_config(cls, bert_config, tokenizer, *, m: int, n: int, attn_implementation: str = "sdpa",
                    **options) -> "CrossAligner":
        """Random weights (BERT init, N(0, 0.02)) for a ``BertConfig``; ``m + n`` layers replace its count."""
        options.setdefault("max_len", min(256, bert_config.max_position_embeddings))
        cfg = CrossAlignConfig(m=m, n=n, **options)
        bert_config = _model_config(bert_config, cfg, attn_implementation)
        return cls(model_class()(bert_config), tokenizer, cfg)

    @classmethod
    def from_encoder(cls, path: str | os.PathLike, *, m: int | None = None, n: int | None = 2,
                     attn_implementation: str = "sdpa", **options) -> "CrossAligner":
        """Initialise from a local BERT-like directory (SPEC §7.1): its layers ``0..m-1`` become the self layers,
        the next ``n`` supply the cross layers' FFNs, cross-attention is random N(0, 0.02); the MLM head is the
        directory's when it has one, else a new one tied to the embeddings. ``m`` defaults to ``layers - n``."""
        tf = import_transformers()
        path = os.fspath(path)
        info = read_hf_config(path)
        layers = int(info.get("num_hidden_layers", 0))
        n = 2 if n is None else n
        m = layers - n if m is None else m
        if m < 0 or n < 0 or m + n > layers:
            raise ConfigError(f"{path} has {layers} layers: cannot take m={m} self and n={n} cross layers from it")
        tokenizer = load_tokenizer(path)
        with quiet_hf():
            src, loading = tf.BertForMaskedLM.from_pretrained(path, output_loading_info=True,
                                                              attn_implementation="eager")
        if any(k.startswith("cls.") for k in loading.get("missing_keys", ())):
            logger.info("%s has no MLM head: a new one is initialised, tied to the word embeddings", path)
        options.setdefault("max_len", min(256, src.config.max_position_embeddings))
        cfg = CrossAlignConfig(m=m, n=n, init=path, **options)
        model = model_class()(_model_config(src.config, cfg, attn_implementation))
        model.embeddings.load_state_dict(src.bert.embeddings.state_dict())
        for i, blk in enumerate(model.self_layers):
            blk.load_state_dict(src.bert.encoder.layer[i].state_dict())
        for j, blk in enumerate(model.cross_layers):
            old = src.bert.encoder.layer[m + j]
            blk.intermediate.load_state_dict(old.intermediate.state_dict())
            blk.output.load_state_dict(old.output.state_dict())
        model.cls.predictions.transform.load_state_dict(src.cls.predictions.transform.state_dict())
        with torch.no_grad():
            model.cls.predictions.bias.copy_(src.cls.predictions.bias)
        model.tie_weights()
        model.eval()
        return cls(model, tokenizer, cfg, source=path)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, attn_implementation: str = "sdpa",
                        device: str | torch.device = "cpu") -> "CrossAligner":
        """Load a directory written by :meth:`save_pretrained`."""
        tf = import_transformers()
        path = os.fspath(path)
        meta = Path(path) / CONFIG_NAME
        if not meta.is_file():
            raise ConfigError(f"{path}: no {CONFIG_NAME}: not a Cross-Align directory (a plain BERT-like "
                              "encoder loads with CrossAligner.load or from_encoder)")
        try:
            doc = json.loads(meta.read_text(encoding="utf-8"))
        except ValueError as e:
            raise FormatError(f"invalid JSON ({e})", meta) from None
        if doc.pop("format", None) != FORMAT or int(doc.pop("version", 0)) > VERSION:
            raise FormatError(f"not a {FORMAT} file of version <= {VERSION}", meta)
        try:
            cfg = CrossAlignConfig(**doc)
        except TypeError as e:
            raise FormatError(f"unexpected keys ({e})", meta) from None
        read_hf_config(path)
        bert = _model_config(tf.BertConfig.from_pretrained(path), cfg, attn_implementation)
        tokenizer = load_tokenizer(path)
        with quiet_hf():
            model = model_class().from_pretrained(path, config=bert)
        model.to(device).eval()
        return cls(model, tokenizer, cfg, source=path)

    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs) -> "CrossAligner":
        """A Cross-Align directory, or a plain encoder as the untrained baseline (all layers self layers)."""
        if (Path(path) / CONFIG_NAME).is_file():
            return cls.from_pretrained(path, **kwargs)
        al = cls.from_encoder(path, n=0, attn_implementation=kwargs.get("attn_implementation", "sdpa"),
                              threshold=1e-3, null_sink="none", align_layer=None)
        al.config.align_layer = min(8, al.config.m)           # awesome-align's default layer
        return al.to(kwargs.get("device", "cpu"))

    def save_pretrained(self, path: str | os.PathLike) -> None:
        """Write weights + ``config.json`` (``save_pretrained``), the tokenizer and ``crossalign.json``; the
        directory appears complete or not at all."""
        with atomic_dir(path, CONFIG_NAME, "a Cross-Align model") as tmp:
            with quiet_hf():
                self.model.save_pretrained(tmp)
            self.tokenizer.save_pretrained(tmp)
            with atomic_write(tmp / CONFIG_NAME) as f:
                json.dump({"format": FORMAT, "version": VERSION, **dataclasses.asdict(self.config)}, f, indent=1)

    def to(self, device) -> "CrossAligner":
        self.model.to(device)
        return self

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    # -- tokenisation ---------------------------------------------------------------------------------

    def encode(self, src: Sequence[str | Sequence[str]], tgt: Sequence[str | Sequence[str]], *,
               names: tuple[str, str] = ("<source>", "<target>"), first_line: int = 1) -> Batch:
        """Tokenise sentence pairs (whitespace-split words, WordPiece per word) into a :class:`Batch`."""
        if len(src) != len(tgt):
            raise ConfigError(f"{len(src)} source sentences but {len(tgt)} target sentences")
        sides = []
        for sents, name in zip((src, tgt), names):
            words = [_words(s) for s in sents]
            for k, w in enumerate(words):
                if not w:
                    raise FormatError("empty sentence", name, first_line + k, "at least one token")
            sides.append(words)
        ids, wids, cut = encode_words(self.tokenizer, sides[0] + sides[1], self.config.max_len)
        return collate(ids, wids, self.tokenizer.pad_token_id, truncated=cut)

    # -- inference ------------------------------------------------------------------------------------

    def states(self, batch: Batch, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """:func:`layer_states` of a batch with this model (in eval mode, on its device)."""
        self.model.eval()
        return layer_states(self.model, batch.to(self.device), layer)

    def extraction(self, **changes) -> Extraction:
        """The directory's extraction settings (:meth:`CrossAlignConfig.extraction`) with ``changes``, e.g.
        ``threshold=0.1``; what :meth:`align` uses without an ``extraction``."""
        return dataclasses.replace(self.config.extraction(), **changes)

    def align(self, src: Sequence[str | Sequence[str]], tgt: Sequence[str | Sequence[str]], *,
              extraction: Extraction | None = None, probabilities: bool = False, batch_size: int = 32,
              first_line: int = 1) -> list:
        """Word alignments (0-based) of sentence pairs (strings split on ASCII space, or token lists).

        ``extraction`` defaults to the directory's settings (:meth:`extraction`); its ``layer`` ``None`` is the
        model's alignment layer. Returns one :class:`~xlpe.io.alignments.Alignment` per pair; with
        ``probabilities`` one ``(Alignment, {link: p})``.
        """
        cfg, ext = self.config, self.extraction() if extraction is None else extraction
        ext = ext if ext.layer is not None else dataclasses.replace(ext, layer=cfg.align_layer)
        check_layer(ext.layer, cfg.m + cfg.n)
        if len(src) != len(tgt):
            raise ConfigError(f"{len(src)} source sentences but {len(tgt)} target sentences")
        out: list = [None] * len(src)
        order = np.argsort([len(s) if not isinstance(s, str) else s.count(" ") for s in src], kind="stable")
        cut = 0
        for k in range(0, len(order), batch_size):      # similar lengths together: less padding
            idx = order[k:k + batch_size].tolist()
            batch = self._encode_subset(src, tgt, idx, first_line)
            cut += batch.truncated
            for i, links in zip(idx, extract(*self.states(batch, ext.layer), ext, probabilities=probabilities)):
                a = Alignment.from_links((x[0], x[1]) for x in links)
                out[i] = (a, {(x[0], x[1]): x[2] for x in links}) if probabilities else a
        if cut:
            self.truncated += cut
            logger.warning("%d sentences (of the %d pairs' %d sides) were longer than max_len=%d subwords and were "
                           "truncated: the words cut off get no links", cut, len(src), 2 * len(src), cfg.max_len)
        return out

    def _encode_subset(self, src, tgt, idx, first_line):
        try:
            return self.encode([src[i] for i in idx], [tgt[i] for i in idx])
        except FormatError as e:                          # name the line in the caller's numbering
            bad = idx[e.line - 1]
            raise FormatError(e.message, e.path, first_line + bad, e.expected) from None


@torch.inference_mode()
def layer_states(model, batch: Batch, layer: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The states after ``layer`` (0 = embeddings) of a batch already on the model's device: source states, target
    states and their word indices, the input of :func:`~xlpe.align.crossalign_extract.extract`."""
    h = model(batch.ids, batch.attention, layer=layer)
    B = batch.size
    return h[:B], h[B:], batch.words[:B], batch.words[B:]


def encode_words(tokenizer, sentences: list[list[str]], max_len: int) -> tuple[list[list[int]], list[list[int]], int]:
    """``[CLS] pieces [SEP]`` ids and word indices (-1 for specials) per sentence; pieces beyond
    ``max_len - 2`` are cut. Returns ``(ids, words, number of truncated sentences)``."""
    enc = tokenizer(sentences, is_split_into_words=True, add_special_tokens=False)
    cls_id, sep_id, keep = tokenizer.cls_token_id, tokenizer.sep_token_id, max_len - 2
    ids, words, cut = [], [], 0
    for k, pieces in enumerate(enc["input_ids"]):
        wid = enc.word_ids(k)
        if len(pieces) > keep:
            cut += 1
            pieces, wid = pieces[:keep], wid[:keep]
        ids.append([cls_id, *pieces, sep_id])
        words.append([-1, *wid, -1])
    return ids, words, cut


def collate(ids: list[list[int]], words: list[list[int]], pad_id: int, *, truncated: int = 0) -> Batch:
    """Pad ``2B`` sequences (B sources then B targets) to one length."""
    T = max(len(x) for x in ids)
    a = np.full((len(ids), T), pad_id, dtype=np.int64)
    w = np.full((len(ids), T), -1, dtype=np.int64)
    att = np.zeros((len(ids), T), dtype=np.int64)
    for k, (x, y) in enumerate(zip(ids, words)):
        a[k, :len(x)], w[k, :len(y)], att[k, :len(x)] = x, y, 1
    return Batch(torch.from_numpy(a), torch.from_numpy(att), torch.from_numpy(w), len(ids) // 2, truncated)


# -- helpers ----------------------------------------------------------------------------------------------

def _model_config(bert_config, cfg: CrossAlignConfig, attn_implementation: str):
    if getattr(bert_config, "model_type", "bert") not in BERT_LIKE:
        raise ConfigError(f"model_type {bert_config.model_type!r} is not BERT-like (expected {BERT_LIKE})")
    c = copy.deepcopy(bert_config)
    c.num_hidden_layers = cfg.m + cfg.n
    c.cross_layers = cfg.n
    c.sequential_cross_update = bool(cfg.sequential_cross_update)
    c.is_decoder = c.add_cross_attention = False
    c.tie_word_embeddings = True
    c._attn_implementation = attn_implementation
    if cfg.max_len > c.max_position_embeddings:
        raise ConfigError(f"max_len={cfg.max_len} exceeds the model's {c.max_position_embeddings} positions")
    return c


def _check_tokenizer(tok, vocab_size: int, where: str) -> None:
    for name in ("cls_token_id", "sep_token_id", "pad_token_id"):
        if getattr(tok, name, None) is None:
            raise ConfigError(f"{where}: the tokenizer has no {name[:-3]} (Cross-Align needs [CLS], [SEP], [PAD])")
    if len(tok) > vocab_size:
        raise ConfigError(f"{where}: the tokenizer has {len(tok)} entries but the word embeddings only {vocab_size}: "
                          "they do not belong together")
    if len(tok) < vocab_size:
        logger.info("%s: tokenizer has %d entries, embeddings %d rows (padded vocabulary?)", where, len(tok),
                    vocab_size)
