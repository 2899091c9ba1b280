"""Word alignments from a trained model's encoder-decoder attention: the AER protocol of SPEC §4.6.

Steps (SPEC §4.6, after fairseq's ``extract_hard_alignment`` as read in the DPE fork):

1. Force-decode the reference target (:func:`xlpe.infer.beam.force_decode`): row ``t`` of the attention is the
   one used when *predicting* ``y_t``; the last real row predicts EOS.
2. Take decoder layer ``layer`` (default ``-2``, the penultimate one, as Ding et al. after Garg et al. 2019)
   and average its heads: ``A (T, S)``.
3. :func:`hard_alignment`: every target token that is neither EOS nor pad is linked to
   ``argmax_s A[t, s]`` over the source tokens that are neither EOS nor pad (ties: the first, i.e. leftmost,
   maximum). The EOS row gives no link; attention mass on the source EOS is ignored, so a row whose maximum
   sits on EOS links its best *real* source token.
4. Subword -> word, ``merge``:

   * ``'any'`` (default, Garg §5.1): words are linked if any of their subword pairs is
     (:func:`xlpe.data.subword.word_alignment_from_subword`).
   * ``'attn_merge'`` ``[I]`` (SPEC §4.6 flags it as our own choice, since Tang et al.'s rule could not be
     recovered): the attention is *summed* over the subwords of a source word and *averaged* over the subwords
     of a target word (raw weights, not renormalised after dropping EOS), then each target word takes the
     argmax over source words (:func:`word_attention`).

5. Score AER / precision / recall with :mod:`xlpe.evaluate.aer` (SPEC §8.1), e.g. against the RWTH De-En gold
   read 1-based and reversed to En-De.

The API mirrors ``xlpe translate``: :func:`align_lines` takes a loaded model, :func:`align_from_model` takes
checkpoint path(s) and lines, :func:`align_from_model_files` streams files in chunks, writes Pharaoh ``i-j``
(0-based, word level) atomically and optionally scores against gold, draws heat maps and writes a JSON report.
The CLI ``xlpe align-from-model`` is a thin layer over the last one.

Verified in ``tests/test_attention_align.py``: hand-built attention tensors (EOS column maximum -> best real
source token; EOS and pad rows give no link; pad columns never chosen), the any rule through word maps, an
``attn_merge`` case whose answer differs from the any rule, batch-size invariance of a tiny random model's
alignments, and an end-to-end CLI run whose printed AER equals :func:`xlpe.evaluate.aer.corpus_aer` of the
written file. There is no reference implementation output here to compare numbers with.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Iterable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from xlpe.data.batching import TokenBatchSampler, collate
from xlpe.data.corpus import ParallelData
from xlpe.data.channels import ChannelSource
from xlpe.data.subword import subword_alignment_from_word, word_alignment_from_subword
from xlpe.errors import ConfigError, FormatError
from xlpe.evaluate.aer import AERCounter
from xlpe.evaluate.plots import attention_heatmap
from xlpe.infer.beam import force_decode
from xlpe.infer.translate import Subwords, model_device, subword_sides
from xlpe.runtime import resolve_device, versions
from xlpe.sources import SourceSpec, channel_specs, check_channels, check_read, open_sources, source_paths
from xlpe.io.alignments import Alignment, format_alignment, read_alignments
from xlpe.io.atomic import atomic_write, check_outputs
from xlpe.io.bitext import read_bitext
from xlpe.nn.checkpoint import load_model
from xlpe.nn.positions import required_inputs
from xlpe.io.text import read_lines, tokenize

log = logging.getLogger(__name__)

MERGES = ("any", "attn_merge")


# --------------------------------------------------------------------------------------------------
# extraction from attention tensors
# --------------------------------------------------------------------------------------------------

def _check_masks(attn: Tensor, src_mask: Tensor, tgt_mask: Tensor) -> Tensor:
    if attn.dim() == 4:
        attn = attn.mean(1)
    if attn.dim() != 3:
        raise ConfigError(f"attention must be (B, T, S) or (B, H, T, S), got shape {tuple(attn.shape)}")
    B, T, S = attn.shape
    if tuple(src_mask.shape) != (B, S) or tuple(tgt_mask.shape) != (B, T):
        raise ConfigError(f"masks must be (B, S)=({B}, {S}) and (B, T)=({B}, {T}), got {tuple(src_mask.shape)} "
                          f"and {tuple(tgt_mask.shape)}")
    if src_mask.dtype != torch.bool or tgt_mask.dtype != torch.bool:
        raise ConfigError("src_mask and tgt_mask must be bool tensors (True = a real token)")
    return attn


def _links_per_sentence(best: Tensor, valid: Tensor) -> list[frozenset]:
    """``{(best[b, r], r) for every r with valid[b, r]}`` for each row ``b`` (one tensor pass, then a split)."""
    b, r = valid.nonzero(as_tuple=True)
    pairs = torch.stack((best[b, r], r), 1).tolist()
    out, k = [], 0
    for n in valid.sum(1).tolist():
        out.append(frozenset(map(tuple, pairs[k:k + n])))
        k += n
    return out


def _word_index(word_of: Sequence[Sequence[int]], mask: Tensor, side: str) -> Tensor:
    """Word index of every position, ``(B, L)``, -1 where the mask is False (EOS, pad)."""
    B, L = mask.shape
    n = mask.sum(1)
    if len(word_of) != B:
        raise ConfigError(f"{side} word maps: {len(word_of)} sentences for a batch of {B}")
    if not torch.equal(mask, torch.arange(L, device=mask.device)[None, :] < n[:, None]):
        raise ConfigError(f"{side} mask: the real tokens must come first in every row (right padding, EOS after "
                          "them) for word maps to index them")
    out = torch.full((B, L), -1, dtype=torch.long, device=mask.device)
    for b, (wo, k) in enumerate(zip(word_of, n.tolist())):
        if len(wo) != k:
            raise ConfigError(f"{side} word map of sentence {b} has {len(wo)} entries for {k} real tokens")
        out[b, :k] = torch.as_tensor(list(wo), dtype=torch.long)
    return out


def word_attention(attn: Tensor, src_mask: Tensor, tgt_mask: Tensor, src_word_of: Sequence[Sequence[int]],
                   tgt_word_of: Sequence[Sequence[int]]) -> tuple[Tensor, Tensor, Tensor]:
    """Word-level attention of ``attn_merge`` ``[I]`` (SPEC §4.6): summed over a source word's subwords,
    averaged over a target word's subwords; EOS and pad excluded.

    Args:
        attn: head-averaged attention ``(B, T, S)`` (or ``(B, H, T, S)``, averaged here).
        src_mask, tgt_mask: bool ``(B, S)`` / ``(B, T)``, True = a real token (not EOS, not pad); the real tokens
            must be the first positions of each row, as in every xlpe batch.
        src_word_of, tgt_word_of: per sentence, the word index of each real token
            (:attr:`xlpe.data.subword.Encoded.word_of`).

    Returns:
        ``(W, src_words, tgt_words)``: ``W (B, Wt, Ws)`` with ``W[b, v, u]`` the attention of target word ``v``
        on source word ``u``, and bool ``(B, Ws)`` / ``(B, Wt)`` masks of the words each sentence has.
    """
    attn = _check_masks(attn, src_mask, tgt_mask).float()
    sw = _word_index(src_word_of, src_mask, "source")
    tw = _word_index(tgt_word_of, tgt_mask, "target")
    n_src, n_tgt = int(sw.max()) + 1, int(tw.max()) + 1
    Ms = F.one_hot(sw.clamp(min=0), max(n_src, 1)).float() * (sw >= 0)[..., None]      # (B, S, Ws)
    Mt = F.one_hot(tw.clamp(min=0), max(n_tgt, 1)).float() * (tw >= 0)[..., None]      # (B, T, Wt)
    counts = Mt.sum(1)                                                                  # (B, Wt)
    W = Mt.transpose(1, 2) @ attn @ Ms / counts.clamp(min=1)[..., None]
    return W, Ms.sum(1) > 0, counts > 0


def hard_alignment(attn: Tensor, src_mask: Tensor, tgt_mask: Tensor, *,
                   src_word_of: Sequence[Sequence[int]] | None = None,
                   tgt_word_of: Sequence[Sequence[int]] | None = None, merge: str = "any") -> list[Alignment]:
    """Hard alignments from attention, one :class:`Alignment` (links ``(source, target)``, 0-based) per sentence.

    Without word maps the links are between subword positions: every real target token ``t`` is linked to
    ``argmax_s attn[b, t, s]`` over the real source tokens (SPEC §4.6 step 3). With word maps they are between
    words, by ``merge`` (``'any'``: the any rule on those subword links; ``'attn_merge'`` ``[I]``: argmax over the
    :func:`word_attention` matrix). Vectorised over the batch: no Python loop over tokens.

    Args:
        attn: head-averaged attention ``(B, T, S)``; ``(B, H, T, S)`` is averaged over heads first.
        src_mask: bool ``(B, S)``, True = a real source token (False for EOS and pad). Note the polarity: the
            opposite of the model's padding masks.
        tgt_mask: bool ``(B, T)``, True = a real target token (False for the EOS row and pad rows).
        src_word_of, tgt_word_of: optional word maps (see :func:`word_attention`); give both or neither.
        merge: ``'any'`` or ``'attn_merge'``; ``'attn_merge'`` needs the word maps.
    """
    if merge not in MERGES:
        raise ConfigError(f"unknown merge {merge!r}; valid: {', '.join(MERGES)}")
    if (src_word_of is None) != (tgt_word_of is None):
        raise ConfigError("give both src_word_of and tgt_word_of, or neither")
    if merge == "attn_merge":
        if src_word_of is None:
            raise ConfigError("merge='attn_merge' works on words: give src_word_of and tgt_word_of")
        W, src_words, tgt_words = word_attention(attn, src_mask, tgt_mask, src_word_of, tgt_word_of)
        best = W.masked_fill(~src_words[:, None, :], float("-inf")).argmax(-1)
        links = _links_per_sentence(best, tgt_words & src_words.any(1, keepdim=True))
        return [Alignment(sure=l) for l in links]
    attn = _check_masks(attn, src_mask, tgt_mask)
    best = attn.float().masked_fill(~src_mask[:, None, :], float("-inf")).argmax(-1)    # (B, T)
    links = _links_per_sentence(best, tgt_mask & src_mask.any(1, keepdim=True))
    out = [Alignment(sure=l) for l in links]
    if src_word_of is None:
        return out
    for side, maps, mask in (("source", src_word_of, src_mask), ("target", tgt_word_of, tgt_mask)):
        _word_index(maps, mask, side)           # validates the maps against the masks
    return [word_alignment_from_subword(a, sw, tw) for a, sw, tw in zip(out, src_word_of, tgt_word_of)]


# --------------------------------------------------------------------------------------------------
# from a model
# --------------------------------------------------------------------------------------------------

@dataclass
class SentenceAttention:
    """What a heat map of one sentence needs.

    Attributes:
        attn: head-averaged attention ``(m + 1, n + 1)`` on the CPU: rows predict ``y_1 .. y_m, EOS``, columns are
            ``x_1 .. x_n, EOS`` (subwords).
        src_pieces, tgt_pieces: the subword pieces (without EOS).
        src_word_of, tgt_word_of: piece -> word maps.
        src_words, tgt_words: the words of the input lines.
        subword: the subword-level hard alignment.
        word: the word-level alignment (the one written out).
    """
    attn: Tensor
    src_pieces: list[str]
    tgt_pieces: list[str]
    src_word_of: list[int]
    tgt_word_of: list[int]
    src_words: list[str]
    tgt_words: list[str]
    subword: Alignment
    word: Alignment


@dataclass
class AttentionAlignments:
    """Result of :func:`align_lines`: ``alignments`` (word level, one per line) and ``views`` for the first
    ``keep_attention`` lines."""
    alignments: list[Alignment]
    views: list[SentenceAttention] = field(default_factory=list)


def _check_model(model: torch.nn.Module, layer: int, merge: str, channel_names: Iterable[str]) -> None:
    if merge not in MERGES:
        raise ConfigError(f"unknown merge {merge!r}; valid: {', '.join(MERGES)}")
    n = model.cfg.dec_layers
    if not -n <= layer < n:
        raise ConfigError(f"layer={layer} but the model has {n} decoder layer(s): valid are {-n}..{n - 1} "
                          f"(0-based; -2 = the penultimate layer of SPEC §4.6 needs at least 2 layers)")
    check_channels(model.cfg, channel_names, "input", training=False)


def _strip(lines: Iterable[str]) -> list[str]:
    return [line.rstrip("\n").rstrip("\r") for line in lines]


def align_lines(model: torch.nn.Module, subwords: Subwords, src_lines: Iterable[str], tgt_lines: Iterable[str], *,
                layer: int = -2, merge: str = "any", channels: Mapping[str, ChannelSource | Iterable] | None = None,
                channel_level: str | Mapping[str, str] = "word", batch_size: int = 64, max_tokens: int | None = None,
                device: torch.device | str | None = None, names: tuple[str, str] = ("<source>", "<target>"),
                first_line: int = 1, keep_attention: int = 0, finish_channels: bool = True) -> AttentionAlignments:
    """Word alignments of line-aligned sentence pairs from a loaded model's attention (SPEC §4.6).

    Args:
        model: a Transformer (e.g. from :func:`xlpe.nn.checkpoint.load_model`).
        subwords: the joint subword model, or ``(source, target)`` models.
        src_lines, tgt_lines: pre-tokenised sentences (words split on ASCII space), one pair per line.
        layer: decoder layer whose encoder-decoder attention is used (0-based, negative from the top; default
            -2 = penultimate).
        merge: subword -> word rule, ``'any'`` or ``'attn_merge'`` ``[I]`` (see :func:`hard_alignment`).
        channels: position channels: name -> a :class:`~xlpe.data.channels.ChannelSource` (its next values are
            taken; ``finish_channels=False`` leaves the rest for the next chunk) or one item per line (``xl`` =
            inverted orders) at ``channel_level`` (``word`` or ``subword``, for all or per channel name).
        batch_size: most sentence pairs per batch; ``max_tokens``: optional cap on padded tokens per batch.
        device: where to run (default: the model's device).
        names, first_line: how errors name the inputs (``file:line``).
        keep_attention: keep a :class:`SentenceAttention` of the first this-many lines (for heat maps).

    Raises:
        FormatError: line counts differ, a line is empty, or a line is longer than the model's ``max_len``
            (naming the file and line).
    """
    src_sw, tgt_sw = subword_sides(subwords)
    src_lines, tgt_lines = _strip(src_lines), _strip(tgt_lines)
    src_name, tgt_name = names
    channels = dict(channels or {})
    _check_model(model, layer, merge, channels)
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if len(src_lines) != len(tgt_lines):
        n = min(len(src_lines), len(tgt_lines))
        short, long_ = (src_name, tgt_name) if len(src_lines) < len(tgt_lines) else (tgt_name, src_name)
        raise FormatError(f"{short} has {first_line - 1 + n} lines but {long_} has more", long_, first_line + n,
                          "line-aligned files with equal line counts")
    if not src_lines:
        return AttentionAlignments([])
    cfg = model.cfg
    data = ParallelData.from_sentences(src_lines, tgt_lines, src_sw, tgt_sw, max_src_len=cfg.max_len,
                                       max_tgt_len=cfg.max_len, channels=channels, channel_level=channel_level,
                                       names=names, first_line=first_line, finish_channels=finish_channels)
    src_enc = list(src_sw.encode_many(src_lines))
    tgt_enc = list(tgt_sw.encode_many(tgt_lines))

    dev = torch.device(device) if device is not None else model_device(model)
    lengths = data.num_tokens
    longest = int(lengths.max())
    budget = longest * batch_size if max_tokens is None else max(max_tokens, longest)
    sampler = TokenBatchSampler(lengths, budget, max_sentences=batch_size, shuffle=False, bucket=True)
    out: list[Alignment | None] = [None] * len(data)
    views: dict[int, SentenceAttention] = {}
    for idx in sampler:
        b = collate([data[i] for i in idx]).to(dev)
        attn = force_decode(model, b.src, b.tgt_out, b.channels, layer).float().mean(1)      # (B, T, S)
        B, T, S = attn.shape
        n_src = torch.as_tensor(data.src_lengths[idx] - 1, device=dev)     # real source tokens (EOS excluded)
        n_tgt = torch.as_tensor(data.tgt_lengths[idx], device=dev)         # real target tokens (EOS row excluded)
        src_mask = torch.arange(S, device=dev)[None, :] < n_src[:, None]
        tgt_mask = torch.arange(T, device=dev)[None, :] < n_tgt[:, None]
        sw = [src_enc[i].word_of for i in idx]
        tw = [tgt_enc[i].word_of for i in idx]
        words = hard_alignment(attn, src_mask, tgt_mask, src_word_of=sw, tgt_word_of=tw, merge=merge)
        want = [k for k, i in enumerate(idx) if i < keep_attention]
        sub = hard_alignment(attn[want], src_mask[want], tgt_mask[want]) if want else []
        for k, i in enumerate(idx):
            out[i] = words[k]
        for k, a in zip(want, sub):
            i = idx[k]
            n, m = len(src_enc[i].ids), len(tgt_enc[i].ids)
            views[i] = SentenceAttention(attn[k, :m + 1, :n + 1].cpu(), src_enc[i].pieces, tgt_enc[i].pieces,
                                         src_enc[i].word_of, tgt_enc[i].word_of, tokenize(src_lines[i]),
                                         tokenize(tgt_lines[i]), a, words[k])
    return AttentionAlignments(out, [views[i] for i in sorted(views)])  # type: ignore[arg-type]


def align_from_model(checkpoint: str | os.PathLike | Sequence[str | os.PathLike], src_lines: Iterable[str],
                     tgt_lines: Iterable[str], *, layer: int = -2, merge: str = "any",
                     sources: Sequence[SourceSpec] = (),
                     channels: Mapping[str, str | os.PathLike | ChannelSource | Sequence] | None = None,
                     batch_size: int = 64, max_tokens: int | None = None, device: str | torch.device = "auto",
                     src_name: str = "<source>", tgt_name: str = "<target>") -> list[Alignment]:
    """Word alignments (0-based, one per line pair) from a checkpoint's attention (SPEC §4.6).

    Args:
        checkpoint: a checkpoint path, or several to average (:func:`xlpe.nn.checkpoint.load_model`).
        src_lines, tgt_lines: pre-tokenised sentence pairs, one per line.
        layer, merge, batch_size, max_tokens: see :func:`align_lines`.
        sources: the source side's channel sources, ``[NAME=][KIND:]PATH`` specs or
            :class:`~xlpe.data.channels.Source` objects (:mod:`xlpe.sources`), e.g. ``orders:gold.order`` (lader
            order lines -> ``xl``, for XL-PE models; ``subword-orders:`` when they index subwords, as a
            preorderer trained on subword text, SPEC §4.1) or ``conllu:gold.conllu`` (the tree channels).
        channels: channel by channel, ``{name: spec, ChannelSource or per-line values}`` (values at word level).
        device: ``cpu``, ``cuda``, ``cuda:N`` or ``auto``.
        src_name, tgt_name: how errors name the inputs.
    """
    dev = resolve_device(device)
    model, _, subwords = load_model(checkpoint, device=dev)
    ch = open_sources(sources, channels, reads=required_inputs(model.cfg))
    return align_lines(model, subwords, src_lines, tgt_lines, layer=layer, merge=merge, channels=ch,
                       batch_size=batch_size, max_tokens=max_tokens, device=dev,
                       names=(src_name, tgt_name)).alignments


@dataclass(frozen=True)
class GoldFile:
    """A gold alignment file to score against: ``path`` (``i-j`` sure, ``ipj`` possible), its index ``base`` (0 or
    1; most gold sets, e.g. RWTH De-En, are 1-based) and ``reverse`` (swap its sides, e.g. the De-En gold scored
    for an En-De model)."""

    path: str | os.PathLike
    base: int | None
    reverse: bool = False

    def __post_init__(self):
        if self.base not in (0, 1):
            raise ConfigError("a gold file needs its index base: gold_base 0 or 1 (--gold-base; most gold sets "
                              "are 1-based)")


@dataclass(frozen=True)
class Heatmaps:
    """PNG heat maps of the attention: in ``folder``, of the first ``count`` sentences, at ``level`` ``'word'``
    (the attn_merge matrix) or ``'subword'`` (the raw matrix with EOS), gold links (if any) and predicted ones
    marked."""

    folder: str | os.PathLike
    count: int = 10
    level: str = "word"

    def __post_init__(self):
        if self.level not in ("word", "subword"):
            raise ConfigError(f"heatmap_level must be 'word' or 'subword', not {self.level!r}")
        if self.count < 0:
            raise ConfigError("heatmap_count must be >= 0")

    def write(self, views: list[SentenceAttention], merge: str, gold: list[Alignment] | None) -> list[str]:
        """The heat maps of ``views`` (with the gold alignments of the same sentences, if any); their paths."""
        os.makedirs(self.folder, exist_ok=True)
        paths = []
        for k, v in enumerate(views):
            p = os.path.join(os.fspath(self.folder), f"attn_{k + 1:04d}.png")
            _heatmap(v, p, self.level, merge, None if gold is None else gold[k])
            paths.append(p)
        return paths


def _read_gold(gold: GoldFile, src: str | os.PathLike, tgt: str | os.PathLike) -> list[Alignment]:
    """The gold file in the (source, target) orientation, every index checked against the word counts."""
    lens = [(len(s), len(t)) for s, t in read_bitext(src, tgt)]
    if gold.reverse:
        lens = [(t, s) for s, t in lens]
    refs = list(read_alignments(gold.path, gold.base, lengths=lens, check_base=True))
    return [a.reversed() for a in refs] if gold.reverse else refs


def _heatmap(view: SentenceAttention, path: str, level: str, merge: str, gold: Alignment | None) -> None:
    if level == "subword":
        g = None if gold is None else subword_alignment_from_word(gold, view.src_word_of, view.tgt_word_of)
        attention_heatmap(view.attn, view.src_pieces + ["</s>"], view.tgt_pieces + ["</s>"], path, gold=g,
                          predicted=view.subword.links, title="subword attention; x = argmax")
        return
    n, m = len(view.src_pieces), len(view.tgt_pieces)
    W, _, _ = word_attention(view.attn[None], (torch.arange(n + 1) < n)[None], (torch.arange(m + 1) < m)[None],
                             [view.src_word_of], [view.tgt_word_of])

    attention_heatmap(W[0], view.src_words, view.tgt_words, path, gold=gold, predicted=view.word.links,
                      title=f"word attention (attn_merge); x = {merge}")


def _write_chunks(f, model, subwords: Subwords, names: tuple[str, str], channels: Mapping[str, ChannelSource],
                  counter, refs: list[Alignment] | None, *, chunk_size: int, keep: int,
                  **options) -> tuple[int, list[SentenceAttention]]:
    """Align the files ``names`` ``chunk_size`` lines at a time (:func:`align_lines` with ``options``), writing
    Pharaoh lines to ``f`` and, with an AER ``counter``, counting each against its ``refs`` entry. Returns the
    number of pairs and the attention views of the first ``keep``."""
    src_it = (t for _, t in read_lines(names[0]))
    tgt_it = (t for _, t in read_lines(names[1]))
    views: list[SentenceAttention] = []
    n = 0
    while True:
        s_chunk = list(islice(src_it, chunk_size))
        t_chunk = list(islice(tgt_it, len(s_chunk) if s_chunk else 1))
        if not s_chunk and not t_chunk:
            break
        res = align_lines(model, subwords, s_chunk, t_chunk, channels=channels, names=names, first_line=n + 1,
                          keep_attention=max(0, keep - n), finish_channels=False, **options)
        views += res.views
        for k, a in enumerate(res.alignments):
            f.write(format_alignment(a, 0, possible=False) + "\n")
            if counter is not None:
                counter.update(a, refs[n + k])
        n += len(s_chunk)
    return n, views


def align_from_model_files(checkpoint: str | os.PathLike | Sequence[str | os.PathLike], src: str | os.PathLike,
                           tgt: str | os.PathLike, out: str | os.PathLike, *, gold: GoldFile | None = None,
                           layer: int = -2, merge: str = "any", sources: Sequence[SourceSpec] = (),
                           channels: Mapping[str, str | os.PathLike | ChannelSource] | None = None,
                           heatmaps: Heatmaps | None = None, report: str | os.PathLike | None = None,
                           batch_size: int = 64, max_tokens: int | None = None, chunk_size: int = 10000,
                           device: str = "auto") -> dict[str, Any]:
    """Align the bitext ``src``/``tgt`` with a checkpoint's attention and write Pharaoh ``i-j`` lines (0-based,
    word level) to ``out`` atomically, ``chunk_size`` lines at a time.

    Args:
        gold: an optional gold file to score against (:class:`GoldFile`).
        heatmaps: optional PNG heat maps of the first sentences (:class:`Heatmaps`).
        report: a JSON file for the options, counts and scores (written atomically).
        sources, channels: the source side's channels, as for :func:`xlpe.infer.translate.translate_file`.
        Others: see :func:`align_from_model` and :func:`align_lines`.

    Returns:
        A summary dict: ``sentences``, ``out``, ``aer`` (:meth:`AERScore.to_dict` or None), ``heatmaps``
        (the PNG paths) and the options.
    """
    if chunk_size < 1:
        raise ConfigError("chunk_size must be >= 1")
    check_outputs([out, report], [src, tgt, None if gold is None else gold.path, *source_paths(sources, channels)])
    refs = None
    if gold is not None:
        refs = _read_gold(gold, src, tgt)                           # fails fast, before the model runs
    dev = resolve_device(device)
    model, _, subwords = load_model(checkpoint, device=dev)
    reads, who = required_inputs(model.cfg), f"the model (pe={list(model.cfg.pe)})"
    specs = channel_specs(sources, channels, reads=reads, who=who)
    _check_model(model, layer, merge, specs)
    check_read(channels or {}, reads, who)
    opened = open_sources(specs)
    names = tuple(os.fspath(p) for p in (src, tgt))
    keep = heatmaps.count if heatmaps is not None else 0
    counter = AERCounter() if refs is not None else None
    with atomic_write(out) as f:
        n, views = _write_chunks(f, model, subwords, names, opened, counter, refs, chunk_size=chunk_size, keep=keep,
                                 layer=layer, merge=merge, batch_size=batch_size, max_tokens=max_tokens, device=dev)
        if n == 0:
            raise FormatError("input is empty", names[0], expected="at least one sentence pair")
        for source in opened.values():
            source.finish(n)
    score = counter.score() if counter is not None else None
    pngs = heatmaps.write(views, merge, refs) if heatmaps is not None else []
    ckpts = ([os.fspath(checkpoint)] if isinstance(checkpoint, (str, os.PathLike))
             else [os.fspath(c) for c in checkpoint])
    summary = {"command": "align-from-model", "checkpoint": ckpts, "src": names[0], "tgt": names[1],
               "out": os.fspath(out), "sentences": n, "layer": layer, "merge": merge,
               "gold": None if gold is None else os.fspath(gold.path), "gold_base": None if gold is None else gold.base,
               "gold_reverse": gold is not None and gold.reverse, "aer": None if score is None else score.to_dict(),
               "heatmaps": pngs}
    if report is not None:
        full = {**summary, "argv": sys.argv, "versions": versions()}
        with atomic_write(report) as rf:
            json.dump(full, rf, indent=2)
            rf.write("\n")
    return summary
