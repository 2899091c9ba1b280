"""Cross-Align extraction (Lai et al. 2022, SPEC §7.2): from two streams' layer states to word links.

:class:`Extraction` is one extraction's settings as a value (method, τ, null sink, join, states, layer), with a short
text form (``str`` / :meth:`Extraction.parse`); :func:`extract` (and :func:`extract_many` for several extractions
of the same states) is the one pipeline every user runs on a layer's states: optional mean word states, each
direction's links, their join. :meth:`xlpe.align.crossalign.CrossAligner.align`, the SSA labels of
:mod:`xlpe.align.crossalign_data`, the recipe's dev sweeps and the benchmarks call it; the pure tensor functions
below are its pieces (what the tests check directly).

Extraction (SPEC §7.2, paper Eq. 10): raw dot products ``S = s tᵀ`` of the layer-``c`` states (no scaling), a
softmax over target keys (``P^f``) and over source keys (``P^b``), links where both exceed τ. ``null_sink='cls'``
keeps the other side's [CLS] among the keys (unaligned tokens can put their mass there; the stage-2 code path,
default) and ``'none'`` removes it (the stage-1 code path); [SEP] and pads are never keys, and the [CLS] row and
column are never read. Subword links become word links by the "any" rule (SPEC §8.3): WordPiece runs per
whitespace word, so no piece crosses a word boundary. ``method='argmax'`` is the SimAlign / awesome-align
mutual-argmax extractor for an untrained encoder at any layer. Optional probabilities follow awesome-align:
``2 P^f' P^b' / (P^f' + P^b')`` with ``P' = softmax(S / sqrt(len))``, the word's value the max over its pieces.
``symmetrize`` (``[I]``, not in the paper): instead of keeping a link where both directions pass at the piece level
(``"pieces"``, the paper's Eq. 10 and mutual argmax), take each direction's word links alone (``P^f > τ`` and
``P^b > τ``, or each piece's argmax) and join them with a word-level symmetrisation of :mod:`xlpe.align.symmetrize`
(``grow-diag-final-and`` as for eflomal; ``intersection`` differs from ``"pieces"`` only where a word has several
pieces).
``word_vectors = "mean"`` (``[I]``, SimAlign's word-level option, not the paper's): each word's state is the mean of its
pieces' states (:func:`word_states`) and the softmaxes run over words, the other side's [CLS] still the null sink;
the default ``"pieces"`` keeps the paper's piece-level extraction and the "any" rule.
"""

from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
import torch
from torch import Tensor

from xlpe.align.symmetrize import METHODS as SYM_METHODS
from xlpe.align.symmetrize import canonical_method, symmetrize_batch
from xlpe.errors import ConfigError

NULL_SINKS = ("cls", "none")
METHODS = ("softmax", "argmax")
#: the states the softmaxes compare: each word piece's (the paper) or each word's, its pieces' mean [I]
WORD_VECTORS = ("pieces", "mean")
#: how the two directions' links are joined: at the piece level (the paper) or by a word-level symmetrisation [I]
SYMMETRIZE = ("pieces",) + SYM_METHODS
#: the text form's names of the fields after the method (:meth:`Extraction.parse`)
TEXT_FIELDS = {"tau": "threshold", "sink": "null_sink", "join": "symmetrize", "states": "word_vectors",
               "layer": "layer"}


def check_layer(layer: int, layers: int) -> None:
    """An alignment layer of a model with ``layers`` layers: 0 (the embeddings) .. ``layers``."""
    if not 0 <= layer <= layers:
        raise ConfigError(f"alignment layer must be in 0..{layers} (0 = embeddings, c = output of layer c), "
                          f"not {layer}")


def check_symmetrize(symmetrize: str) -> str:
    """The canonical name of a :data:`SYMMETRIZE` choice (short forms such as ``gdfa`` accepted)."""
    if symmetrize == "pieces":
        return symmetrize
    try:
        return canonical_method(symmetrize)
    except ConfigError:
        raise ConfigError(f"symmetrize must be one of {', '.join(SYMMETRIZE)} (or gd, gdf, gdfa), "
                          f"not {symmetrize!r}") from None


def check_word_vectors(word_vectors: str) -> str:
    if word_vectors not in WORD_VECTORS:
        raise ConfigError(f"word_vectors must be one of {', '.join(WORD_VECTORS)}, not {word_vectors!r}")
    return word_vectors


@dataclass(frozen=True)
class Extraction:
    """How word links are read off a Cross-Align model (SPEC §7.2): one value, checked when made.

    ``method``: ``"softmax"`` (the paper: ``P^f > τ`` and ``P^b > τ``) or ``"argmax"`` (mutual argmax, SimAlign);
    ``threshold``: τ of the softmaxes (unused by argmax, which stores 0); ``null_sink``: ``"cls"`` (the other
    side's [CLS] among the keys) or ``"none"``; ``symmetrize``: the join of the two directions, ``"pieces"``
    (the paper) or a word-level symmetrisation (canonical name kept: ``gdfa`` becomes ``grow-diag-final-and``);
    ``word_vectors``: ``"pieces"`` (the paper) or ``"mean"``; ``layer``: the alignment layer (0 = embeddings),
    ``None`` = the model's. The defaults are the paper's inference settings. ``str()`` gives the text form
    :meth:`parse` reads, e.g. ``softmax tau=0.15 sink=cls join=pieces states=pieces layer=7``.
    """

    method: str = "softmax"
    threshold: float = 0.15
    null_sink: str = "cls"
    symmetrize: str = "pieces"
    word_vectors: str = "pieces"
    layer: int | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ConfigError(f"extraction method must be one of {', '.join(METHODS)}, not {self.method!r}")
        t = self.threshold
        if isinstance(t, bool) or not isinstance(t, Real) or not 0.0 <= t < 1.0:
            raise ConfigError(f"threshold must be in [0, 1), not {t!r}")
        if self.null_sink not in NULL_SINKS:
            raise ConfigError(f"null_sink must be one of {', '.join(NULL_SINKS)}, not {self.null_sink!r}")
        check_word_vectors(self.word_vectors)
        if self.layer is not None and (isinstance(self.layer, bool) or not isinstance(self.layer, Integral)
                                       or self.layer < 0):
            raise ConfigError(f"layer must be an integer >= 0 (0 = embeddings) or None (the model's alignment "
                              f"layer), not {self.layer!r}")
        object.__setattr__(self, "symmetrize", check_symmetrize(self.symmetrize))
        if self.method == "argmax":
            object.__setattr__(self, "threshold", 0.0)

    def __str__(self) -> str:
        tau = f" tau={float(self.threshold)!r}" if self.method == "softmax" else ""
        layer = "" if self.layer is None else f" layer={self.layer}"
        return (f"{self.method}{tau} sink={self.null_sink} join={self.symmetrize} states={self.word_vectors}"
                f"{layer}")

    @classmethod
    def parse(cls, text: str) -> "Extraction":
        """The extraction a text form names: an optional method first, then ``name=value`` items of
        :data:`TEXT_FIELDS` in any order; what is not named keeps its default."""
        words = text.split()
        kw: dict = {}
        if words and "=" not in words[0]:
            kw["method"] = words.pop(0)
        for w in words:
            name, eq, value = w.partition("=")
            if not eq or name not in TEXT_FIELDS or TEXT_FIELDS[name] in kw:
                raise ConfigError(f"extraction {text!r}: {w!r} is not one of {', '.join(TEXT_FIELDS)} given once "
                                  "as name=value (after an optional method, softmax or argmax)")
            kw[TEXT_FIELDS[name]] = _parse_value(name, value, text)
        return cls(**kw)


def _parse_value(name: str, value: str, text: str):
    if name not in ("tau", "layer"):
        return value
    try:
        return float(value) if name == "tau" else int(value)
    except ValueError:
        raise ConfigError(f"extraction {text!r}: {name} must be a number, not {value!r}") from None


# -- extraction: pure tensor functions -------------------------------------------------------------------

def word_states(h: Tensor, words: Tensor) -> tuple[Tensor, Tensor]:
    """Word-level states from piece states ``h (B, T, d)`` with word indices ``words (B, T)`` (-1: [CLS], [SEP],
    pads): ``(B, 1 + W, d)`` with the [CLS] state at position 0 and word ``w``'s mean piece state at ``1 + w``,
    and their word indices ``(B, 1 + W)`` (-1 at 0 and where a sentence has fewer words), the input of
    :func:`directional_links` and :func:`word_links` as piece states are."""
    B, _, d = h.shape
    W = int(words.max().item()) + 1 if words.numel() else 0
    slot = torch.where(words >= 0, words + 1, torch.zeros_like(words)).long()      # specials and pads -> 0
    total = torch.zeros(B, W + 1, d, dtype=torch.float32, device=h.device)
    total.scatter_add_(1, slot[:, :, None].expand(-1, -1, d), h.float())
    count = torch.zeros(B, W + 1, dtype=torch.float32, device=h.device)
    count.scatter_add_(1, slot, (words >= 0).float())
    out = total / count.clamp(min=1)[:, :, None]
    out[:, 0] = h[:, 0].float()                                                 # [CLS] stays the sink
    ids = torch.arange(-1, W, device=h.device).expand(B, -1)
    return out, torch.where(count > 0, ids, torch.full_like(ids, -1))


def key_mask(words: Tensor, null_sink: str) -> Tensor:
    """Positions allowed as softmax keys: the word pieces (``words >= 0``), plus [CLS] (position 0) as a sink."""
    keys = words >= 0
    if null_sink == "cls":
        keys = keys.clone()
        keys[:, 0] = True
    return keys


def softmax_both_ways(scores: Tensor, src_keys: Tensor, tgt_keys: Tensor) -> tuple[Tensor, Tensor]:
    """``P^f`` (softmax over target keys, rows sum to 1) and ``P^b`` (over source keys, columns sum to 1)."""
    s = scores.float()
    pf = torch.softmax(s.masked_fill(~tgt_keys[:, None, :], float("-inf")), dim=-1)
    pb = torch.softmax(s.masked_fill(~src_keys[:, :, None], float("-inf")), dim=1)
    return pf, pb


def directional_links(hs: Tensor, ht: Tensor, src_words: Tensor, tgt_words: Tensor, *, method: str = "softmax",
                      threshold: float = 0.15, null_sink: str = "cls") -> tuple[Tensor, Tensor]:
    """Each direction's subword links ``(B, Ts, Tt)`` (bool) from layer states ``hs (B, Ts, d)``, ``ht (B, Tt, d)``:
    ``P^f > τ`` and ``P^b > τ`` (softmax), or each source piece's best target piece and each target piece's best
    source piece (argmax).

    ``src_words``/``tgt_words`` give each position's word index, -1 for [CLS] (position 0), [SEP] and pads.
    """
    scores = torch.bmm(hs.float(), ht.float().transpose(1, 2))
    sk, tk = key_mask(src_words, null_sink), key_mask(tgt_words, null_sink)
    if method == "softmax":
        pf, pb = softmax_both_ways(scores, sk, tk)
        return pf > threshold, pb > threshold
    s_row = scores.masked_fill(~tk[:, None, :], float("-inf"))
    s_col = scores.masked_fill(~sk[:, :, None], float("-inf"))
    keys = tk[:, None, :] & sk[:, :, None]
    return (s_row == s_row.amax(-1, keepdim=True)) & keys, (s_col == s_col.amax(1, keepdim=True)) & keys


def link_matrix(hs: Tensor, ht: Tensor, src_words: Tensor, tgt_words: Tensor, *, method: str = "softmax",
                threshold: float = 0.15, null_sink: str = "cls") -> Tensor:
    """Subword links ``(B, Ts, Tt)`` (bool) where both directions agree (SPEC §7.2; mutual argmax for
    ``method='argmax'``); arguments as :func:`directional_links`."""
    fwd, bwd = directional_links(hs, ht, src_words, tgt_words, method=method, threshold=threshold,
                                 null_sink=null_sink)
    return fwd & bwd


def link_probabilities(hs: Tensor, ht: Tensor, src_words: Tensor, tgt_words: Tensor, null_sink: str = "cls") -> Tensor:
    """awesome-align's link probability ``2 P^f' P^b' / (P^f' + P^b')`` with ``P^f' = softmax(S/sqrt(len_tgt))``
    and ``P^b' = softmax(S/sqrt(len_src))``, len = the sentence's number of word pieces [I]."""
    scores = torch.bmm(hs.float(), ht.float().transpose(1, 2))
    ls = (src_words >= 0).sum(1).clamp(min=1).float().sqrt()[:, None, None]
    lt = (tgt_words >= 0).sum(1).clamp(min=1).float().sqrt()[:, None, None]
    sk, tk = key_mask(src_words, null_sink), key_mask(tgt_words, null_sink)
    pf = softmax_both_ways(scores / lt, sk, tk)[0]
    pb = softmax_both_ways(scores / ls, sk, tk)[1]
    den = pf + pb
    return torch.where(den > 0, 2 * pf * pb / den.clamp(min=1e-30), torch.zeros_like(den))


def _pair_keys(src_words: Tensor, tgt_words: Tensor) -> tuple[int, Tensor, Tensor]:
    """``W`` (words per sentence, at most), the word-pair key ``(b * W + i) * W + j`` of every piece pair
    ``(B, Ts, Tt)`` and the mask of the real ones (both pieces in a word)."""
    sw, tw = src_words.long(), tgt_words.long()
    W = int(max(sw.max().item(), tw.max().item(), 0)) + 1
    valid = (sw >= 0)[:, :, None] & (tw >= 0)[:, None, :]
    bidx = torch.arange(sw.shape[0], device=sw.device)[:, None, None]
    pair_key = (bidx * W + sw.clamp(min=0)[:, :, None]) * W + tw.clamp(min=0)[:, None, :]
    return W, pair_key, valid


def _word_probs(probs: Tensor, pair_key: Tensor, valid: Tensor, W: int) -> Tensor:
    """Each word pair's probability, the max over its piece pairs, indexed by word-pair key."""
    best = torch.full((probs.shape[0] * W * W,), float("-inf"), device=probs.device)
    best.scatter_reduce_(0, pair_key[valid], probs[valid].float(), reduce="amax")
    return best


def _rows(B: int, b: Tensor, cols: list[Tensor]) -> list[list[tuple]]:
    counts = torch.bincount(b, minlength=B).tolist()
    rows = list(zip(*[c.tolist() for c in cols])) if b.numel() else []
    out, k = [], 0
    for c in counts:
        out.append(rows[k:k + c])
        k += c
    return out


def word_links(links: Tensor, src_words: Tensor, tgt_words: Tensor,
               probs: Tensor | None = None) -> list[list[tuple]]:
    """Subword links -> sorted word links per pair by the "any" rule; with ``probs`` each link is ``(i, j, p)``
    with ``p`` the max over all piece pairs of the two words. Vectorised over the batch."""
    W, pair_key, valid = _pair_keys(src_words, tgt_words)
    keys = torch.unique(pair_key[links & valid])                       # sorted: (b, i, j) order
    b, rest = keys // (W * W), keys % (W * W)
    cols = [rest // W, rest % W]
    if probs is not None:
        cols.append(_word_probs(probs, pair_key, valid, W)[keys])
    return _rows(links.shape[0], b, cols)


def symmetrized_word_links(fwd: Tensor, bwd: Tensor, src_words: Tensor, tgt_words: Tensor, method: str,
                           probs: Tensor | None = None) -> list[list[tuple]]:
    """The two directions' subword links of :func:`directional_links` -> word links ("any" rule) each, joined per
    pair by the word-level symmetrisation ``method`` (:func:`xlpe.align.symmetrize.symmetrize_batch`). ``bwd``
    (each target piece's sources, ``P^b``) plays the forward links of an IBM-style source→target model, ``fwd``
    (each source piece's targets, ``P^f``) the reverse ones. Output as :func:`word_links`."""
    B = fwd.shape[0]
    b, i, j = symmetrized_word_arrays(fwd, bwd, src_words, tgt_words, method)
    b, i, j = torch.from_numpy(b), torch.from_numpy(i), torch.from_numpy(j)
    cols = [i, j]
    if probs is not None:
        W, pair_key, valid = _pair_keys(src_words, tgt_words)
        best = _word_probs(probs, pair_key, valid, W).cpu()
        cols.append(best[(b * W + i) * W + j])
    return _rows(B, b, cols)


def symmetrized_word_arrays(fwd: Tensor, bwd: Tensor, src_words: Tensor, tgt_words: Tensor,
                            method: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`symmetrized_word_links` as flat int64 arrays ``(pair, i, j)``, sorted by pair (no probabilities)."""
    B = fwd.shape[0]
    W, pair_key, valid = _pair_keys(src_words, tgt_words)
    csr = []
    for links in (fwd, bwd):
        keys = torch.unique(pair_key[links & valid])
        b = (keys // (W * W)).cpu().numpy()
        ptr = np.zeros(B + 1, dtype=np.int64)
        ptr[1:] = np.cumsum(np.bincount(b, minlength=B))
        rest = (keys % (W * W)).cpu().numpy()
        csr.append((ptr, rest // W, rest % W))
    ptr, i, j = symmetrize_batch(csr[1], csr[0], method)
    return np.repeat(np.arange(B), np.diff(ptr)), np.asarray(i, dtype=np.int64), np.asarray(j, dtype=np.int64)


# -- the pipeline ---------------------------------------------------------------------------------------------

def join(fwd: Tensor, bwd: Tensor, src_words: Tensor, tgt_words: Tensor, symmetrize: str,
         probs: Tensor | None = None) -> list[list[tuple]]:
    """The two directions' subword links joined into word links per pair: where both pass, piece by piece
    (``"pieces"``, :func:`word_links`), or each direction's word links by a word-level symmetrisation
    (:func:`symmetrized_word_links`)."""
    if symmetrize == "pieces":
        return word_links(fwd & bwd, src_words, tgt_words, probs)
    return symmetrized_word_links(fwd, bwd, src_words, tgt_words, symmetrize, probs)


def extract(hs: Tensor, ht: Tensor, src_words: Tensor, tgt_words: Tensor, extraction: Extraction, *,
            probabilities: bool = False) -> list[list[tuple]]:
    """Word links of a batch by ``extraction`` from the states of its layer (``hs (B, Ts, d)``, ``ht (B, Tt, d)``,
    word indices -1 for [CLS] at 0, [SEP] and pads): sorted ``(i, j)`` per pair, ``(i, j, p)`` with
    ``probabilities``."""
    return extract_many(hs, ht, src_words, tgt_words, [extraction], probabilities=probabilities)[0]


def extract_many(hs: Tensor, ht: Tensor, src_words: Tensor, tgt_words: Tensor, extractions, *,
                 probabilities: bool = False) -> list[list[list[tuple]]]:
    """:func:`extract` for each of ``extractions`` from the same layer states (their ``layer`` is the caller's
    business): the word states of each ``word_vectors`` and the directional links of each (states, method, τ,
    null sink) are computed once, then joined as each extraction says."""
    states: dict[str, tuple] = {}
    directions: dict[tuple, tuple[Tensor, Tensor]] = {}
    out = []
    for ext in extractions:
        if ext.word_vectors not in states:
            states[ext.word_vectors] = ((hs, ht, src_words, tgt_words) if ext.word_vectors == "pieces" else
                                        _mean_states(hs, ht, src_words, tgt_words))
        a, b, aw, bw = states[ext.word_vectors]
        key = (ext.word_vectors, ext.method, ext.threshold, ext.null_sink)
        if key not in directions:
            directions[key] = directional_links(a, b, aw, bw, method=ext.method, threshold=ext.threshold,
                                                null_sink=ext.null_sink)
        p = link_probabilities(a, b, aw, bw, ext.null_sink) if probabilities else None
        out.append(join(*directions[key], aw, bw, ext.symmetrize, p))
    return out


def _mean_states(hs: Tensor, ht: Tensor, src_words: Tensor, tgt_words: Tensor) -> tuple:
    (a, aw), (b, bw) = word_states(hs, src_words), word_states(ht, tgt_words)
    return a, b, aw, bw
