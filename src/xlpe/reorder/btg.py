"""A BTG preorderer after Neubig, Watanabe & Mori (EMNLP 2012) and their ``lader`` tool (SPEC §5).

The model is a discriminative bracketing-transduction-grammar parser over the source sentence. A
derivation is a binary tree whose nodes are *straight* (``S``: left child then right child) or
*inverted* (``I``: right child then left child) and whose leaves are *forward terminals* (``F``: a span
of at most ``max_term`` words kept in order) or, optionally, *backward terminals* (``B``: the span
reversed). Its yield is the reordered sentence (SPEC §5.1). The score is linear, ``Σ_edges w·φ(edge)``.

How this implementation is organised (SPEC §5.6):

* **Features** — lader's template language ``NAME%item%…%ET`` (SPEC §5.1) over one or more factor columns
  (``word|class|pos`` tokens; factor 0 gets :data:`DEFAULT_TEMPLATES`, the others
  :data:`FACTOR_TEMPLATES`, as in lader's ``example/train-model.sh``). Every feature is hashed into a
  fixed-size weight vector (``2**hash_bits``). Each supported template depends on the edge only through
  its span ``(l, r)``, only through the split point ``c`` or only through the shape ``(length, left
  length)``, so an edge score decomposes as ``span[l, r, type] + split[c, type] + shape[L, a, type]``.
  The index arrays of the three tables are computed once per sentence with vectorised 64-bit hashing and
  cached; scoring a sentence is a handful of numpy gathers.
* **Inference** — CKY over spans, one numpy step per span *length* that scores all
  (span, split, S/I, left hypothesis, right hypothesis) combinations at once. Prediction keeps the single
  best hypothesis per span, which is exact because model scores do not depend on the order inside a
  child. Loss-augmented search keeps up to ``beam`` hypotheses per span, recombined on the ranks of
  their first and last output words (all the chunk loss can see).
* **Losses** (SPEC §5.3), factored over hyperedges exactly as lader: chunk (junction of the two children
  in output order, words inside a terminal, two root boundaries) and Kendall τ (pairs first separated at
  a node). Their sum over a derivation equals :func:`xlpe.evaluate.reorder_metrics.chunk_loss` /
  ``tau_loss`` of its order (tested).
* **Training** (SPEC §5.4) — online, shuffled with a seed. Per sentence: the *model* derivation is the
  loss-augmented argmax (score + loss), the *oracle* the best-scoring among minimum-loss derivations
  (score − 1e6·loss, a latent derivation); when their losses differ, Pegasos (default; ``λ = cost =
  1e-3``, ``η = 1/(λt)``, projection onto ``‖w‖² ≤ 1/λ``, scaled-vector form as in lader) or the
  perceptron moves ``w`` towards ``φ(oracle) − φ(model)``. Sentences longer than ``max_len`` (40) are
  skipped and counted; training stops early when an iteration's model loss equals its oracle loss.

Options beyond lader (all off by default): ``average`` (predict with the mean of all iterates: the averaged
perceptron, or averaged Pegasos), ``loss_augmented=False`` (plain structured perceptron updates) and the
template item ``SP`` (punctuation count inside the span, e.g. ``"P%SP%ET"``).

Measured on Europarl De→En (``benchmarks/bench_btg.py``, 23.5k training sentences with automatic
alignments, RWTH gold test): lader's defaults (Pegasos λ=1e-3, chunk loss) stay at the identity order for
the few iterations we can afford — with structured losses of size ~n (chunk) or ~n² (τ) the Pegasos
ball ``‖w‖² ≤ 1/λ`` is too small for w to outweigh the loss augmentation. The averaged perceptron with
the τ loss (``learner='perceptron', average=True, loss='tau=1'``) learns: gold τ 0.925 (identity) → 0.931
with words only, 0.935 with induced word classes, a case/suffix factor and ``P%SP%ET`` (4 iterations,
~2 min each on one core). MIRA (``learner='mira'``) and averaged Pegasos with a small λ did no better.

Verified against: the oracle reproduces random binarisable permutations exactly (loss 0); edge-factored
losses equal the sentence-level lader losses on random derivations; a toy SVO→SOV corpus is learnt;
saved/loaded models and 1 vs 2 processes give identical orders (``tests/test_btg.py``). Quality and speed
on Europarl De→En are measured by ``benchmarks/bench_btg.py``.

Outputs: lader ``order`` lines (space-separated 0-based original indices, ``reordered[k] = x[order[k]]``)
and ``string`` lines (the reordered words); :func:`xlpe.reorder.oracle.invert_order` turns an order
into ``pos_XL`` (SPEC §4.1).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import multiprocessing as mp
import os
import time
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Literal, Sequence

import numpy as np

from xlpe.errors import ConfigError, FormatError

__all__ = ["BTGConfig", "BTGPreorderer", "Derivation", "DEFAULT_TEMPLATES", "FACTOR_TEMPLATES",
           "format_order", "reorder_tokens", "parse_loss_profile"]

# lader's default feature profile for the words (SPEC §5.1) and for tag-like factor columns
# (example/train-model.sh: "for all tag-based annotations (class, POS)").
DEFAULT_TEMPLATES: tuple[str, ...] = (
    "LL%SL%ET", "RR%SR%ET", "LR%LR%ET", "RL%RL%ET", "O%SL%SR%ET", "I%LR%RL%ET",
    "CL%CL%ET", "B%SB%ET", "A%SA%ET", "N%SN%ET", "BIAS%ET",
)
FACTOR_TEMPLATES: tuple[str, ...] = (
    "LL%SL%ET", "RR%SR%ET", "LR%LR%ET", "RL%RL%ET", "B%SB%ET", "A%SA%ET", "O%SL%SR%ET", "I%LR%RL%ET",
)

FORMAT_VERSION = 1
_ORACLE_LOSS_WEIGHT = -1e6  # lader: "penalizing loss heavily (oracle)"

# Edge types and their slot in the span table; S and I are slots 0 and 1 of the split/shape tables.
F, S, I, B = 0, 1, 2, 3
_TYPE_CHARS = "FSIB"

# ------------------------------------------------------------------------------------------------
# hashing

_U64 = np.uint64
_M1 = _U64(0x9E3779B97F4A7C15)
_M2 = _U64(0xBF58476D1CE4E5B9)
_S29, _S31, _S32 = _U64(29), _U64(31), _U64(32)


def _hash_str(s: str) -> int:
    """A stable 64-bit hash of a string (Python's own ``hash`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(s.encode("utf-8"), digest_size=8).digest(), "little")


def _mix(h: np.ndarray | np.uint64, x: np.ndarray | np.uint64) -> np.ndarray:
    """Fold value(s) ``x`` into hash(es) ``h`` (broadcasting, wrap-around uint64 arithmetic)."""
    h = (np.asarray(h, dtype=_U64) ^ np.asarray(x, dtype=_U64)) * _M1
    return h ^ (h >> _S29)


def _finish(h: np.ndarray, bits: int) -> np.ndarray:
    h = (h ^ (h >> _S31)) * _M2
    h = h ^ (h >> _S32)
    return (h >> _U64(64 - bits)).astype(np.int64)


# ------------------------------------------------------------------------------------------------
# templates

# word-position items of the span scope: which end of the span, and the offset from it
_POS_L = {"SL": 0, "SB": -1, "LL": 0, "LB": -1}
_POS_R = {"SR": 0, "SA": 1, "RR": 0, "RA": 1}
# word-position items of the split scope (c = first word of the right child): offset from c
_POS_C = {"LR": -1, "RL": 0, "RB": -1, "LA": 0}
# items that depend on the node shape (length L, left-child length a)
_SHAPE = {"CL", "CB", "CD", "LN", "RN"}
# xlpe extension (not in lader): "SP" = number of punctuation words inside the span, capped at 3. With it,
# e.g. "P%SP%ET", the model can learn not to invert spans across clause boundaries.
_SPAN_PUNCT = "SP"


def _is_punct(word: str) -> bool:
    return bool(word) and all(unicodedata.category(ch)[0] in "PS" for ch in word)


@dataclass(frozen=True)
class _Template:
    name: str
    items: tuple[str, ...]
    scope: str            # 'span' | 'split' | 'shape'
    nonterm_only: bool    # lader: a template with an L, R or C item fires on S/I edges only
    factor: int

    @property
    def seed(self) -> int:
        return _hash_str(f"{self.name}%{'%'.join(self.items)}@{self.factor}")


def _parse_template(spec: str, factor: int) -> _Template:
    parts = spec.split("%")
    if len(parts) < 2 or not parts[0]:
        raise ConfigError(f"feature template {spec!r} is malformed (expected NAME%item%...)")
    name, items = parts[0], tuple(parts[1:])
    kinds = set()
    for it in items:
        if it == "ET":
            continue
        if it in _POS_L or it in _POS_R or it in ("SN", _SPAN_PUNCT):
            kinds.add("span")
        elif it in _POS_C:
            kinds.add("split")
        elif it in _SHAPE:
            kinds.add("shape")
        else:
            raise ConfigError(
                f"feature template {spec!r}: item {it!r} is not supported (supported: "
                f"{sorted([*_POS_L, *_POS_R, 'SN', _SPAN_PUNCT, *_POS_C, *_SHAPE, 'ET'])}; phrase-dictionary 'Q', span "
                f"string 'SS' and parse items are not implemented)")
    if len(kinds) > 1:
        raise ConfigError(f"feature template {spec!r} mixes span, split-point and shape items; each template "
                          f"must depend on only one of them (edge scores are decomposed that way)")
    scope = kinds.pop() if kinds else "span"
    nonterm_only = any(it[0] in "LRC" for it in items)
    return _Template(name, items, scope, nonterm_only, factor)


def parse_loss_profile(profile: str | dict) -> dict[str, float]:
    """lader's ``loss_profile`` (``"chunk=1"``, ``"chunk=1|tau=1"``) as ``{'chunk': w, 'tau': w}``."""
    if isinstance(profile, dict):
        out = {str(k): float(v) for k, v in profile.items()}
    else:
        out = {}
        for part in str(profile).split("|"):
            name, sep, val = part.partition("=")
            try:
                out[name.strip()] = float(val) if sep else 1.0
            except ValueError:
                raise ConfigError(f"loss profile {profile!r}: weight {val!r} is not a number") from None
    for k in out:
        if k not in ("chunk", "tau"):
            raise ConfigError(f"loss profile {profile!r}: unknown loss {k!r} (known: chunk, tau)")
    return {"chunk": out.get("chunk", 0.0), "tau": out.get("tau", 0.0)}


# ------------------------------------------------------------------------------------------------
# configuration


@dataclass
class BTGConfig:
    """Options of :class:`BTGPreorderer` (lader names in brackets; SPEC §5.1, §5.4).

    Args:
        max_term: longest forward (and backward) terminal span [``max_term``, 5].
        use_reverse: allow backward terminals [``use_reverse``, false].
        templates: feature templates of factor 0 (the words) [``feature_profile``].
        factor_templates: templates of every further factor column (word classes, POS, …).
        factors: factor columns per token; with ``factors > 1`` every token must be
            ``word<sep>class<sep>…`` with exactly that many parts. 1 = tokens are used whole.
        factor_sep: the separator inside a token (``|``).
        hash_bits: the weight vector has ``2**hash_bits`` entries (feature hashing).
        loss: loss profile, ``"chunk=1"`` (lader default), ``"tau=1"`` or ``"chunk=1|tau=1"`` [``loss_profile``].
        learner: ``"pegasos"`` (lader default), ``"perceptron"`` [``learner``] or ``"mira"`` (1-best
            passive-aggressive, PA-I: the step is the smallest that makes the oracle beat the
            loss-augmented model by its loss, capped at ``mira_c``; not in lader).
        cost: Pegasos λ [``cost``, 1e-3].
        beam: hypotheses per span kept in loss-augmented (training) search [``beam``]; prediction
            is exact with one. 1 is exact for ``tau`` alone, and for the oracle of binarisable orders.
        max_len: training sentences longer than this are skipped and counted (40, SPEC §5.2).
        seed: shuffling seed.
        shuffle: visit the training sentences in a new random order every iteration.
        cache_features: keep the per-sentence feature index arrays between iterations.
        loss_augmented: the model derivation maximises score + loss (lader
            ``loss_augmented_inference``, true); false: the plain best-scoring derivation.
        average: predict with the average of the weights after every training step (averaged
            perceptron / averaged Pegasos iterates; not in lader, off by default).
        mira_c: the largest MIRA step.
    """

    max_term: int = 5
    use_reverse: bool = False
    templates: tuple[str, ...] = DEFAULT_TEMPLATES
    factor_templates: tuple[str, ...] = FACTOR_TEMPLATES
    factors: int = 1
    factor_sep: str = "|"
    hash_bits: int = 22
    loss: str = "chunk=1"
    learner: Literal["pegasos", "perceptron", "mira"] = "pegasos"
    cost: float = 1e-3
    beam: int = 4
    max_len: int = 40
    seed: int = 0
    shuffle: bool = True
    cache_features: bool = True
    loss_augmented: bool = True
    average: bool = False
    mira_c: float = 1.0

    def validate(self) -> "BTGConfig":
        if self.max_term < 1:
            raise ConfigError(f"max_term must be >= 1, not {self.max_term}")
        if self.factors < 1:
            raise ConfigError(f"factors must be >= 1, not {self.factors}")
        if not 8 <= self.hash_bits <= 30:
            raise ConfigError(f"hash_bits must be in 8..30, not {self.hash_bits}")
        if self.learner not in ("pegasos", "perceptron", "mira"):
            raise ConfigError(f"learner must be 'pegasos', 'perceptron' or 'mira', not {self.learner!r}")
        if self.learner == "mira" and not self.mira_c > 0:
            raise ConfigError(f"mira_c must be > 0, not {self.mira_c}")
        if self.learner == "pegasos" and not self.cost > 0:
            raise ConfigError(f"cost (Pegasos lambda) must be > 0, not {self.cost}")
        if self.beam < 1:
            raise ConfigError(f"beam must be >= 1, not {self.beam}")
        if self.max_len < 1:
            raise ConfigError(f"max_len must be >= 1, not {self.max_len}")
        if self.factors > 1 and not self.factor_sep:
            raise ConfigError("factor_sep must not be empty when factors > 1")
        lw = parse_loss_profile(self.loss)
        if lw["chunk"] < 0 or lw["tau"] < 0 or lw["chunk"] + lw["tau"] == 0:
            raise ConfigError(f"loss profile {self.loss!r} needs a positive weight")
        self.templates = tuple(self.templates)
        self.factor_templates = tuple(self.factor_templates)
        for f in range(self.factors):
            for t in (self.templates if f == 0 else self.factor_templates):
                _parse_template(t, f)
        return self

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["templates"], d["factor_templates"] = list(self.templates), list(self.factor_templates)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "BTGConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ConfigError(f"unknown BTGConfig options: {sorted(unknown)}")
        d = dict(d)
        for k in ("templates", "factor_templates"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d).validate()


# ------------------------------------------------------------------------------------------------
# feature extraction


class _Features:
    """Per-sentence feature index tables (indices into the weight vector; ``null`` = no feature).

    ``span_l[l, t, k]``, ``span_r[r, t, k]``, ``span_lr[l, r, t, k]``, ``span_len[L, t, k]`` with t in
    ``F, S, I(, B)``; ``split[c, t, k]`` and ``shape[L, a, t, k]`` with t in ``S, I``.
    """

    __slots__ = ("n", "span_l", "span_r", "span_lr", "span_len", "split", "shape")

    def nbytes(self) -> int:
        return sum(getattr(self, k).nbytes for k in self.__slots__[1:])


class _Extractor:
    """Computes :class:`_Features` with vectorised hashing (stable across processes and runs)."""

    def __init__(self, cfg: BTGConfig):
        self.cfg = cfg
        self.bits = cfg.hash_bits
        self.null = 1 << cfg.hash_bits  # an always-zero slot at the end of the weight vector
        self.ntypes = 4 if cfg.use_reverse else 3
        self.templates = [_parse_template(t, f) for f in range(cfg.factors)
                          for t in (cfg.templates if f == 0 else cfg.factor_templates)]
        self.idx_dtype = np.int32
        self._tok: dict[str, int] = {}
        self._bos = _U64(_hash_str("<s>"))
        self._etype = np.array([_hash_str(f"ET={c}") for c in _TYPE_CHARS[: self.ntypes]], dtype=_U64)
        self._shape_cache: dict[int, np.ndarray] = {}
        by = {"span": [], "split": [], "shape": []}
        for t in self.templates:
            by[t.scope].append(t)
        self.span_l = [t for t in by["span"] if self._axes(t) == {"l"}]
        self.span_r = [t for t in by["span"] if self._axes(t) == {"r"}]
        self.span_lr = [t for t in by["span"] if self._axes(t) >= {"l", "r"} or
                        ("len" in self._axes(t) and self._axes(t) & {"l", "r"})]
        self.span_len = [t for t in by["span"] if self._axes(t) <= {"len"}]
        self.split = by["split"]
        self.shape = by["shape"]

    @staticmethod
    def _axes(t: _Template) -> set[str]:
        ax = set()
        for it in t.items:
            if it in _POS_L:
                ax.add("l")
            elif it in _POS_R:
                ax.add("r")
            elif it == "SN":
                ax.add("len")
            elif it == _SPAN_PUNCT:
                ax.update(("l", "r"))
        return ax

    # -- tokens

    def split_factors(self, sentence: Sequence[str]) -> list[list[str]]:
        """Factor columns of a sentence: ``cols[f][i]``."""
        k = self.cfg.factors
        if k == 1:
            return [list(sentence)]
        cols: list[list[str]] = [[] for _ in range(k)]
        for pos, tok in enumerate(sentence):
            parts = tok.split(self.cfg.factor_sep)
            if len(parts) != k:
                raise FormatError(f"token {pos + 1} {tok!r} has {len(parts)} factor(s)",
                                  expected=f"{k} factors joined by {self.cfg.factor_sep!r}")
            for f in range(k):
                cols[f].append(parts[f])
        return cols

    def _hashes(self, words: Sequence[str]) -> np.ndarray:
        """Padded token hashes: ``out[p + 1]`` for word p, ``<s>`` at both ends."""
        tok = self._tok
        out = np.empty(len(words) + 2, dtype=_U64)
        out[0] = out[-1] = self._bos
        for p, w in enumerate(words):
            h = tok.get(w)
            if h is None:
                if len(tok) > 2_000_000:
                    tok.clear()
                h = tok[w] = _hash_str(w)
            out[p + 1] = h
        return out

    # -- tables

    def _table(self, templates: list[_Template], values: Callable[[_Template, str], np.ndarray],
               etype: np.ndarray, shape: tuple[int, ...], type_axis_mask: np.ndarray | None) -> np.ndarray:
        """Stack the hashed indices of ``templates`` into an int array ``shape + (ntypes, len(templates))``."""
        nt = len(etype)
        out = np.empty(shape + (nt, max(len(templates), 0)), dtype=self.idx_dtype)
        for k, t in enumerate(templates):
            h = _U64(t.seed)
            for it in t.items:
                h = _mix(h, values(t, it))
            h = np.broadcast_to(h, shape + (nt,))
            idx = _finish(np.ascontiguousarray(h), self.bits)
            if t.nonterm_only and type_axis_mask is not None:
                idx = np.where(type_axis_mask, idx, self.null)
            out[..., k] = idx
        return out

    def extract(self, sentence: Sequence[str]) -> _Features:
        cols = self.split_factors(sentence)
        n = len(cols[0])
        H = [self._hashes(c) for c in cols]
        nt = self.ntypes
        nonterm_mask = np.zeros(nt, dtype=bool)
        nonterm_mask[[S, I]] = True
        ar = np.arange(n)
        sn_salt = _U64(_hash_str("SN"))
        sp_salt = _U64(_hash_str(_SPAN_PUNCT))

        def span_values(mode: str):
            """Item values on the grid of a span table: mode 'l' (n,), 'r' (n,), 'lr' (n, n), 'len' (n+1,)."""
            ndim = 2 if mode == "lr" else 1

            def values(t: _Template, it: str) -> np.ndarray:
                if it == "ET":
                    return self._etype.reshape((1,) * ndim + (nt,))
                h = H[t.factor]
                if it in _POS_L:  # only in modes 'l' and 'lr'
                    return h[ar + 1 + _POS_L[it]].reshape((n,) + (1,) * ndim)
                if it in _POS_R:  # only in modes 'r' and 'lr'
                    v = h[ar + 1 + _POS_R[it]]
                    return v.reshape(n, 1) if mode == "r" else v.reshape(1, n, 1)
                if it == "SN":
                    if mode == "len":
                        return _mix(sn_salt, np.arange(n + 1, dtype=_U64)).reshape(n + 1, 1)
                    lens = (ar[None, :] - ar[:, None] + 1).clip(0).astype(_U64)
                    return _mix(sn_salt, lens).reshape(n, n, 1)
                if it == _SPAN_PUNCT:  # only in mode 'lr'
                    pp = np.concatenate(([0], np.cumsum([_is_punct(w) for w in cols[0]])))
                    cnt = (pp[None, 1:] - pp[:-1, None]).clip(0, 3).astype(_U64)  # [l, r] for r >= l
                    return _mix(sp_salt, cnt).reshape(n, n, 1)
                raise AssertionError(it)
            return values

        feats = _Features()
        feats.n = n
        feats.span_l = self._table(self.span_l, span_values("l"), self._etype, (n,), nonterm_mask)
        feats.span_r = self._table(self.span_r, span_values("r"), self._etype, (n,), nonterm_mask)
        feats.span_lr = self._table(self.span_lr, span_values("lr"), self._etype, (n, n), nonterm_mask)
        feats.span_len = self._table(self.span_len, span_values("len"), self._etype, (n + 1,), nonterm_mask)

        et_nt = self._etype[[S, I]]
        cpos = np.arange(n + 1)

        def split_values(t: _Template, it: str) -> np.ndarray:
            if it == "ET":
                return et_nt.reshape(1, 2)
            h = H[t.factor]
            return h[np.clip(cpos + _POS_C[it], -1, n) + 1].reshape(n + 1, 1)

        feats.split = self._table(self.split, split_values, et_nt, (n + 1,), None)
        feats.shape = self._shape_table(n)
        return feats

    def _shape_table(self, n: int) -> np.ndarray:
        got = self._shape_cache.get(n)
        if got is not None:
            return got
        et_nt = self._etype[[S, I]]
        L = np.arange(n + 1).reshape(n + 1, 1, 1)
        a = np.arange(n + 1).reshape(1, n + 1, 1)
        bal = L - 2 * a  # lader: r - 2c + l + 1 with c = l + a, r = l + L - 1

        def values(t: _Template, it: str) -> np.ndarray:
            if it == "ET":
                return et_nt.reshape(1, 1, 2)
            if it == "CL":
                v = np.sign(bal) + 1  # 0: left child longer ('L'), 1: equal ('E'), 2: right longer ('R')
            elif it == "CB":
                v = bal + 4 * n + 8
            elif it == "CD":
                v = np.abs(bal)
            elif it == "LN":
                v = a + 0 * L
            else:  # RN
                v = L - a
            return _mix(_U64(_hash_str(it)), v.astype(np.int64).astype(_U64))

        tab = self._table(self.shape, values, et_nt, (n + 1, n + 1), None)
        if len(self._shape_cache) < 256:
            self._shape_cache[n] = tab
        return tab


# ------------------------------------------------------------------------------------------------
# scores, losses, CKY


@dataclass
class _Scores:
    span: np.ndarray   # (n, n, ntypes): span[l, r, t]
    split: np.ndarray  # (n + 1, 2): split[c, S/I]
    shape: np.ndarray  # (n + 1, n + 1, 2): shape[L, a, S/I]


def _gather_sum(w: np.ndarray, idx: np.ndarray) -> np.ndarray:
    if idx.shape[-1] == 0:
        return np.zeros(idx.shape[:-1])
    return w[idx].sum(axis=-1)


def _scores(w: np.ndarray, f: _Features, scale: float) -> _Scores:
    """Edge-score tables of one sentence: ``score(l, c, r, t) = span[l, r, t] + split[c, t] + shape[L, a, t]``."""
    n = f.n
    ar = np.arange(n)
    lens = (ar[None, :] - ar[:, None] + 1).clip(0)
    span = (_gather_sum(w, f.span_l)[:, None, :] + _gather_sum(w, f.span_r)[None, :, :]
            + _gather_sum(w, f.span_lr) + _gather_sum(w, f.span_len)[lens])
    split = _gather_sum(w, f.split)
    shape = _gather_sum(w, f.shape)
    if scale != 1.0:
        span *= scale
        split *= scale
        shape *= scale
    return _Scores(span, split, shape)


class _Plan:
    """Weight-independent CKY index arrays for one sentence length (cached per length).

    The chart is a 2-D array whose row ``i·(n+1) + L`` holds the hypotheses of the span of length ``L``
    starting at ``i``. For each length: the span starts ``ls`` and ends ``rs``, the split lengths ``A``
    (left child length), and the chart rows of the left and right children, shape ``(spans, splits)``.
    """

    def __init__(self, n: int):
        self.n = n
        W = n + 1
        self.steps = [None]
        for L in range(1, n + 1):
            ns = n - L + 1
            ls = np.arange(ns)
            rs = ls + L - 1
            rows = ls * W + L
            if L >= 2:
                A = np.arange(1, L)
                ri = ls[:, None] + A
                left = ls[:, None] * W + A
                right = ri * W + (L - A)
            else:
                A = ri = left = right = None
            self.steps.append((ns, ls, rs, rows, A, ri, left, right))


_PLANS: dict[int, _Plan] = {}


def _plan(n: int) -> _Plan:
    p = _PLANS.get(n)
    if p is None:
        p = _Plan(n)
        if len(_PLANS) < 512:
            _PLANS[n] = p
    return p


class _LossTables:
    """Edge losses of one sentence against its dense ranks (lader ``loss-chunk.cc``, ``loss-tau.cc``).

    Chunk: a terminal pays for its inner non-contiguous steps, a node for the junction of its children in
    output order, the root for the two sentence boundaries. τ: a terminal pays for its inner discordant
    pairs, a node for the discordant pairs across its children (straight: left rank > right rank;
    inverted: the opposite). Summed over a derivation they give the sentence-level losses (tested).
    Per-length tables are built on first use and shared by the model and the oracle search.

    ``free`` marks words without a rank (``lader_ranks(..., attach_null="free")``, not in lader): the τ
    loss leaves out every pair that has such a word, so their place in the order costs nothing. The chunk
    loss has no such rule (its junction state is the rank of a boundary word), so it refuses them.
    """

    def __init__(self, ranks: np.ndarray, w_chunk: float, w_tau: float, free: np.ndarray | None = None):
        r = np.asarray(ranks, dtype=np.int64)
        n = len(r)
        self.ranks = r
        self.max_rank = int(r.max()) if n else 0
        self.wc, self.wt = float(w_chunk), float(w_tau)
        self.care = None
        if free is not None and free.any():
            if self.wc:
                raise ConfigError("words without a rank (attach_null='free') need a τ-only loss profile, "
                                  f"not chunk weight {self.wc:g}")
            self.care = ~np.asarray(free, dtype=bool)
        step = np.diff(r)
        self.cf = np.concatenate(([0], np.cumsum((step != 0) & (step != 1)))).astype(np.float64)
        self.cb = np.concatenate(([0], np.cumsum((step != 0) & (step != -1)))).astype(np.float64)
        if self.wt:
            upper = np.triu(np.ones((n, n), dtype=bool), 1)
            if self.care is not None:
                upper &= self.care[:, None] & self.care[None, :]
            self.pg = np.zeros((n + 1, n + 1))
            self.pl = np.zeros((n + 1, n + 1))
            self.pg[1:, 1:] = ((r[:, None] > r[None, :]) & upper).cumsum(0).cumsum(1)
            self.pl[1:, 1:] = ((r[:, None] < r[None, :]) & upper).cumsum(0).cumsum(1)
        self._term: dict[tuple[int, bool], np.ndarray] = {}
        self._tau: dict[int, np.ndarray] = {}

    @staticmethod
    def _rect(p: np.ndarray, r0, r1, c0, c1):
        """Sum of the 0/1 matrix over rows r0..r1 and columns c0..c1 (inclusive) from its 2-D prefix sums."""
        return p[r1 + 1, c1 + 1] - p[r0, c1 + 1] - p[r1 + 1, c0] + p[r0, c0]

    def terminal(self, L: int, ls: np.ndarray, rs: np.ndarray, backward: bool) -> np.ndarray:
        """Weighted loss of the F (or B) terminals of length L starting at ``ls``."""
        got = self._term.get((L, backward))
        if got is None:
            c = self.cb if backward else self.cf
            got = self.wc * (c[rs] - c[ls])
            if self.wt:
                got = got + self.wt * self._rect(self.pl if backward else self.pg, ls, rs, ls, rs)
            self._term[(L, backward)] = got
        return got

    def tau_cross(self, L: int, ls: np.ndarray, cs: np.ndarray, rs: np.ndarray) -> np.ndarray:
        """Weighted τ loss of S (``[..., 0]``) and I (``[..., 1]``) nodes of length L, shape (spans, splits, 2)."""
        got = self._tau.get(L)
        if got is None:
            got = self.wt * np.stack([self._rect(self.pg, ls, cs - 1, cs, rs),
                                      self._rect(self.pl, ls, cs - 1, cs, rs)], -1)
            self._tau[L] = got
        return got

    def sentence_loss(self, order: Sequence[int]) -> float:
        """The weighted sentence-level loss of an order (equal to the sum of its edge losses)."""
        ro = self.ranks[np.asarray(order, dtype=np.int64)]
        loss = 0.0
        if self.wc and len(ro) and self.max_rank > 0:
            step = np.diff(np.concatenate(([-1], ro, [self.max_rank + 1])))
            loss += self.wc * float(np.count_nonzero((step != 0) & (step != 1)))
        if self.wt and len(ro) > 1:
            if self.care is not None:
                ro = ro[self.care[np.asarray(order, dtype=np.int64)]]
            loss += self.wt * float(np.count_nonzero(np.triu(ro[:, None] > ro[None, :], 1)))
        return loss


@dataclass
class Derivation:
    """A BTG derivation: its order, model score, loss, and edges ``(type, l, r, a)`` with ``a`` the left
    child's length (0 for terminals); types are ``'F' 'S' 'I' 'B'``."""

    order: list[int]
    score: float
    loss: float
    edges: list[tuple[str, int, int, int]]


def _nc(step: np.ndarray) -> np.ndarray:
    """1 where consecutive ranks are not "same or one up" (lader ``!IsContiguous``)."""
    return (step != 0) & (step != 1)


def _cky(n: int, sc: _Scores, cfg: BTGConfig, losses: _LossTables | None, loss_weight: float,
         beam: int) -> Derivation:
    """Best derivation of ``score + loss_weight·loss`` by CKY with a per-span beam (SPEC §5.1, §5.4).

    Each span length is one vectorised step that scores every (span, split, S/I, left hypothesis, right
    hypothesis) candidate; the candidates of a span are laid out as ``[terminals][split a=1.., S/I, k1,
    k2]`` and a hypothesis stores only the flat index of its candidate (decoded when backtracking). With a
    chunk loss, hypotheses carry the ranks of their first and last output words, and up to ``beam`` are
    kept per span, one per distinct (first, last) pair (recombination: such hypotheses share their
    future). Otherwise one hypothesis per span is exact. Ties go to the earliest candidate, so an
    all-zero model yields the identity order.
    """
    use_loss = losses is not None and loss_weight != 0
    stateful = use_loss and losses.wc != 0
    tau = use_loss and losses.wt != 0
    K = beam if stateful else 1
    NEG = -np.inf
    plan = _plan(n)
    rows_all = n * (n + 1)
    tot = np.full((rows_all, K), NEG)
    bp = np.zeros((rows_all, K), dtype=np.int64)
    if stateful:
        ranks = losses.ranks
        nr = losses.max_rank + 2
        fr = np.zeros((rows_all, K), dtype=np.int64)  # rank of the first output word
        lr = np.zeros((rows_all, K), dtype=np.int64)  # rank of the last output word
        cw = loss_weight * losses.wc
    rev = cfg.use_reverse and sc.span.shape[2] > B
    maxterm = cfg.max_term
    span, split, shape = sc.span, sc.split, sc.shape
    nterm_of = [0] * (n + 1)

    for L in range(1, n + 1):
        ns, ls, rs, rows, A, ri, left, right = plan.steps[L]
        parts, keys = [], []
        if L <= maxterm:
            kinds = ((F, False), (B, True)) if (rev and L > 1) else ((F, False),)
            for t, backward in kinds:
                v = span[ls, rs, t]
                if use_loss:
                    v = v + loss_weight * losses.terminal(L, ls, rs, backward)
                parts.append(v[:, None])
                if stateful:
                    a_, b_ = (rs, ls) if backward else (ls, rs)
                    keys.append((ranks[a_] * nr + ranks[b_])[:, None])
            nterm_of[L] = len(kinds)
        if L >= 2:
            base = split[ri] + shape[L, 1:L] + span[ls, rs, S:I + 1][:, None, :]  # (ns, na, 2)
            if tau:
                base = base + loss_weight * losses.tau_cross(L, ls[:, None], ri, rs[:, None])
            if K == 1:
                cand = (tot[left, 0] + tot[right, 0])[:, :, None] + base          # (ns, na, 2)
                if stateful:
                    lf, ll, rf, rl = fr[left, 0], lr[left, 0], fr[right, 0], lr[right, 0]
                    cand[:, :, 0] += cw * _nc(rf - ll)
                    cand[:, :, 1] += cw * _nc(lf - rl)
                    keys.append(np.stack([lf * nr + rl, rf * nr + ll], axis=2).reshape(ns, -1))
            else:
                pair = tot[left][:, :, :, None] + tot[right][:, :, None, :]       # (ns, na, K, K)
                cand = pair[:, :, None] + base[:, :, :, None, None]                # (ns, na, 2, K, K)
                lf, ll = fr[left][:, :, :, None], lr[left][:, :, :, None]          # left child: axis k1
                rf, rl = fr[right][:, :, None, :], lr[right][:, :, None, :]        # right child: axis k2
                cand[:, :, 0] += cw * _nc(rf - ll)
                cand[:, :, 1] += cw * _nc(lf - rl)
                keys.append(np.stack([lf * nr + rl, rf * nr + ll], axis=2).reshape(ns, -1))
            parts.append(cand.reshape(ns, -1))
        allc = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0]
        if stateful:
            allk = np.concatenate(keys, axis=1) if len(keys) > 1 else keys[0]
        for k in range(K):
            j = allc.argmax(axis=1)
            tot[rows, k] = allc[ls, j]
            bp[rows, k] = j
            if stateful:
                kj = allk[ls, j]
                fr[rows, k] = kj // nr
                lr[rows, k] = kj % nr
                if k + 1 < K:
                    allc[allk == kj[:, None]] = NEG

    root_row = n  # i = 0, L = n
    root = tot[root_row]
    if stateful:  # the two sentence boundaries (lader EDGE_ROOT)
        root = root + cw * ((fr[root_row] != 0).astype(np.float64) + (lr[root_row] != losses.max_rank))
    kbest = int(np.argmax(root))
    best = float(root[kbest])

    order: list[int] = []
    edges: list[tuple[str, int, int, int]] = []
    W = n + 1
    stack = [(0, n, kbest)]
    while stack:
        i, L, k = stack.pop()
        j = int(bp[i * W + L, k])
        nt = nterm_of[L]
        if j < nt:
            backward = j == 1
            edges.append(("B" if backward else "F", i, i + L - 1, 0))
            order.extend(range(i + L - 1, i - 1, -1) if backward else range(i, i + L))
            continue
        j -= nt
        k2 = j % K
        k1 = (j // K) % K
        t = S if (j // (K * K)) % 2 == 0 else I
        a = j // (2 * K * K) + 1
        edges.append(("S" if t == S else "I", i, i + L - 1, a))
        left_h, right_h = (i, a, k1), (i + a, L - a, k2)
        # popped last-in first-out: push the child that is output second first
        stack.extend((right_h, left_h) if t == S else (left_h, right_h))
    loss = losses.sentence_loss(order) if losses is not None else 0.0
    score = best - loss_weight * loss if use_loss else best
    return Derivation(order, score, loss, edges)


def _derivation_features(f: _Features, edges: list[tuple[str, int, int, int]], null: int) -> np.ndarray:
    """All feature indices fired by a derivation's edges (with repeats; the null slot removed)."""
    t = np.array([_TYPE_CHARS.index(e[0]) for e in edges], dtype=np.int64)
    ls = np.array([e[1] for e in edges], dtype=np.int64)
    rs = np.array([e[2] for e in edges], dtype=np.int64)
    a = np.array([e[3] for e in edges], dtype=np.int64)
    L = rs - ls + 1
    parts = [f.span_l[ls, t].ravel(), f.span_r[rs, t].ravel(), f.span_lr[ls, rs, t].ravel(),
             f.span_len[L, t].ravel()]
    nt = (t == S) | (t == I)
    if nt.any():
        tn = t[nt] - 1
        parts.append(f.split[ls[nt] + a[nt], tn].ravel())
        parts.append(f.shape[L[nt], a[nt], tn].ravel())
    idx = np.concatenate(parts).astype(np.int64)
    return idx[idx != null]


# ------------------------------------------------------------------------------------------------
# output helpers


def format_order(order: Sequence[int]) -> str:
    """lader ``order`` output: space-separated 0-based original indices."""
    return " ".join(str(int(v)) for v in order)


def reorder_tokens(tokens: Sequence[str], order: Sequence[int]) -> list[str]:
    """``reordered[k] = tokens[order[k]]`` (lader ``string`` output)."""
    return [tokens[k] for k in order]


# ------------------------------------------------------------------------------------------------
# multiprocessing workers (module level so that they can be pickled)

_WORKER: "BTGPreorderer | None" = None
_EMPTY = np.zeros(0, dtype=np.int64)


def _worker_init(config: dict, w: np.ndarray) -> None:
    global _WORKER
    config = dict(config, average=False)  # the worker gets the final prediction weights
    m = BTGPreorderer(BTGConfig.from_dict(config))
    m._v = w
    _WORKER = m


def _worker_predict(sentence: Sequence[str]) -> list[int]:
    return _WORKER.predict(sentence)


# ------------------------------------------------------------------------------------------------
# the model


class BTGPreorderer:
    """A lader-style BTG preorderer (SPEC §5). See the module docstring for the method.

    Example::

        model = BTGPreorderer(BTGConfig(max_term=5))
        model.train(sentences, ranks, iterations=10)   # ranks from xlpe.reorder.oracle.lader_ranks
        order = model.predict(["ich", "habe", "ihn", "gesehen"])
        model.save("model_dir"); same = BTGPreorderer.load("model_dir")
    """

    def __init__(self, config: BTGConfig | None = None):
        self.config = (config or BTGConfig()).validate()
        self._ext = _Extractor(self.config)
        size = (1 << self.config.hash_bits) + 1  # + the always-zero null slot
        # current weights w = alpha * v (lader's scaled Pegasos vector; alpha stays 1 for the perceptron)
        self._v = np.zeros(size, dtype=np.float64)
        self._alpha = 1.0
        self._t = 1            # Pegasos step counter (sentences seen)
        self._v_sq = 0.0       # |v|^2, kept up to date incrementally
        # averaging (config.average): sum of w after every step = A * v - u, over `_steps` steps
        self._u = np.zeros(size, dtype=np.float64) if self.config.average else None
        self._A = 0.0
        self._steps = 0
        self._pred_cache: np.ndarray | None = None
        self.history: list[dict] = []

    # -- weights

    def _prediction_weights(self) -> np.ndarray:
        """The weight vector used to predict (cached until the next training step): the averaged weights
        when ``average`` is on, else ``alpha·v``. Every process predicts from this same vector, so orders
        do not depend on the number of processes."""
        if self._pred_cache is None:
            if self._u is not None and self._steps > 0:
                self._pred_cache = (self._A * self._v - self._u) / self._steps
            else:
                self._pred_cache = self._alpha * self._v
        return self._pred_cache

    @property
    def weights(self) -> np.ndarray:
        """The weight vector used for prediction (a copy; the last entry is the always-zero null slot)."""
        return self._prediction_weights().copy()

    def _step(self, idx_plus: np.ndarray, idx_minus: np.ndarray, violation: float = 0.0) -> int:
        """One online step towards ``φ(oracle) − φ(model)`` (both may be empty: Pegasos then only shrinks).

        ``violation`` (MIRA only) is ``score(model) + loss(model) − score(oracle) − loss(oracle)``.
        Returns the number of weights changed.
        """
        self._pred_cache = None
        allidx = np.concatenate([idx_plus, idx_minus])
        sign = np.concatenate([np.ones(len(idx_plus)), -np.ones(len(idx_minus))])
        u, inv = np.unique(allidx, return_inverse=True)
        d = np.bincount(inv, weights=sign, minlength=len(u))
        keep = d != 0
        u, d = u[keep], d[keep]
        if self.config.learner == "perceptron":
            delta = d
        elif self.config.learner == "mira":
            sq = float(np.dot(d, d))
            delta = d * (min(self.config.mira_c, max(violation, 0.0) / sq) if sq > 0 else 0.0)
        else:
            # Pegasos (Shalev-Shwartz et al. 2007, Fig. 1) with w = alpha·v, as in lader's reorderer-model.cc
            lam, t = self.config.cost, self._t
            nu = 1.0 / (lam * t)
            self._alpha = 1.0 if t == 1 else (1.0 - nu * lam) * self._alpha
            delta = d * (nu / self._alpha)
        old = self._v[u]
        new = old + delta
        self._v[u] = new
        self._v_sq += float(np.dot(new, new) - np.dot(old, old))
        if self._u is not None:
            self._u[u] += delta * self._A
        if self.config.learner == "pegasos":
            lam = self.config.cost
            w_sq = self._v_sq * self._alpha ** 2
            if w_sq > 1.0 / lam:  # projection onto the ball |w|^2 <= 1/lambda
                self._alpha *= math.sqrt(1.0 / lam / w_sq)
            # fold alpha into v before it underflows; much earlier when averaging, because the average
            # A·v − u is a difference of two large numbers once alpha is small
            if self._v_sq > 1e100 or self._alpha < (1e-4 if self._u is not None else 1e-100):
                if self._u is not None:
                    total = self._A * self._v - self._u
                    self._u = -total
                    self._A = 0.0
                self._v *= self._alpha
                self._v_sq = float(np.dot(self._v, self._v))
                self._alpha = 1.0
            self._t += 1
        self._A += self._alpha
        self._steps += 1
        return len(u)

    # -- core

    def _check_sentence(self, sentence) -> list[str]:
        if isinstance(sentence, str):
            sentence = [t for t in sentence.split(" ") if t]
        return list(sentence)

    def features(self, sentence: Sequence[str]) -> _Features:
        return self._ext.extract(self._check_sentence(sentence))

    def derive(self, sentence: Sequence[str], ranks: Sequence[int] | None = None, *,
               loss_weight: float = 0.0, beam: int | None = None, feats: _Features | None = None) -> Derivation:
        """The best derivation of ``score + loss_weight·loss`` (``loss_weight`` 0: prediction; 1: lader's
        loss-augmented model; −1e6: the oracle). ``ranks`` are needed when ``loss_weight`` is not 0."""
        sentence = self._check_sentence(sentence)
        n = len(sentence)
        if n == 0:
            return Derivation([], 0.0, 0.0, [])
        f = feats if feats is not None else self._ext.extract(sentence)
        sc = _scores(self._prediction_weights(), f, 1.0)
        losses = None
        if loss_weight != 0:
            if ranks is None:
                raise ConfigError("loss-augmented search needs the oracle ranks")
            losses = self._loss_tables(ranks, n)
        return _cky(n, sc, self.config, losses, loss_weight, beam or self.config.beam)

    @staticmethod
    def _dense_ranks(ranks: Sequence[int], n: int) -> tuple[np.ndarray, np.ndarray]:
        """Ranks renumbered 0.. without gaps, and the mask of words without a rank (``-1``)."""
        r = np.asarray(ranks, dtype=np.int64).reshape(-1)
        if len(r) != n:
            raise FormatError(f"the sentence has {n} tokens but its ranks have {len(r)} entries",
                              expected="one rank per token")
        if n and r.min() < -1:
            raise FormatError(f"rank {int(r.min())}",
                              expected="ranks >= 0, or -1 for a word without a rank (from lader_ranks)")
        free = r < 0
        dense = np.zeros(n, dtype=np.int64)
        if (~free).any():
            dense[~free] = np.unique(r[~free], return_inverse=True)[1].reshape(-1)
        return dense, free

    def _loss_tables(self, ranks: Sequence[int], n: int) -> _LossTables:
        lw = parse_loss_profile(self.config.loss)
        dense, free = self._dense_ranks(ranks, n)
        return _LossTables(dense, lw["chunk"], lw["tau"], free)

    def predict(self, sentence: Sequence[str] | str) -> list[int]:
        """The predicted order (lader ``order``): ``order[k]`` = original index of the k-th output word.

        ``sentence`` is a token list (or a string split on spaces); tokens carry ``factors`` columns.
        """
        return self.derive(sentence).order

    def predict_many(self, sentences: Iterable[Sequence[str] | str], processes: int = 1, *,
                     chunksize: int = 32, progress: bool = False) -> list[list[int]]:
        """Orders for many sentences, in input order; identical for any ``processes``."""
        sentences = [self._check_sentence(s) for s in sentences]
        if processes < 1:
            raise ConfigError(f"processes must be >= 1, not {processes}")
        bar = None
        if progress:
            from tqdm.auto import tqdm
            bar = tqdm(total=len(sentences), desc="preorder", unit="sent")
        out: list[list[int]] = []
        if processes == 1 or len(sentences) < 2:
            for s in sentences:
                out.append(self.predict(s))
                if bar is not None:
                    bar.update(1)
        else:
            methods = mp.get_all_start_methods()
            ctx = mp.get_context("fork" if "fork" in methods else "spawn")
            with ctx.Pool(processes, initializer=_worker_init,
                          initargs=(self.config.to_dict(), self._prediction_weights())) as pool:
                for o in pool.imap(_worker_predict, sentences, chunksize=chunksize):
                    out.append(o)
                    if bar is not None:
                        bar.update(1)
        if bar is not None:
            bar.close()
        return out

    def words(self, sentence: Sequence[str] | str) -> list[str]:
        """The first factor (the words) of a sentence."""
        return self._ext.split_factors(self._check_sentence(sentence))[0]

    def apply(self, sentences: Iterable[Sequence[str] | str], out_format: Literal["order", "string"] = "order",
              processes: int = 1, *, progress: bool = False) -> list[str]:
        """Output lines in lader's ``order`` or ``string`` (reordered words, first factor) format."""
        if out_format not in ("order", "string"):
            raise ConfigError(f"out_format must be 'order' or 'string', not {out_format!r}")
        sentences = [self._check_sentence(s) for s in sentences]
        orders = self.predict_many(sentences, processes, progress=progress)
        if out_format == "order":
            return [format_order(o) for o in orders]
        return [" ".join(reorder_tokens(self.words(s), o)) for s, o in zip(sentences, orders)]

    # -- training

    def train(self, sentences: Sequence[Sequence[str] | str], ranks: Sequence[Sequence[int]],
              iterations: int = 10, *, progress: bool = True, early_stop: bool = True,
              callback: Callable[[dict], None] | None = None) -> list[dict]:
        """Online large-margin training with latent derivations (SPEC §5.4).

        Args:
            sentences: token lists (factor columns inside tokens when ``factors > 1``).
            ranks: oracle ranks per sentence (:func:`xlpe.reorder.oracle.lader_ranks`), same lengths;
                ``-1`` = a word without a rank (``attach_null="free"``), left out of the τ loss so that
                the oracle derivation may put it anywhere (τ-only loss profiles).
            iterations: passes over the data (lader's default is 500; stops early when an iteration's
                model loss equals its oracle loss).
            progress: show a tqdm bar per iteration.
            callback: called with each iteration's statistics.

        Returns:
            One dict per iteration: ``iteration``, ``model_loss`` (sum of loss-augmented model losses),
            ``oracle_loss``, ``updates``, ``sentences``, ``skipped`` (longer than ``max_len`` or empty),
            ``seconds``. Also appended to :attr:`history`.

        Raises:
            FormatError: the number of rank lines differs from the number of sentences, or a sentence
                and its ranks differ in length (the message names the 1-based sentence number).
        """
        cfg = self.config
        sentences = [self._check_sentence(s) for s in sentences]
        ranks = list(ranks)
        if len(sentences) != len(ranks):
            raise FormatError(f"{len(sentences)} sentences but {len(ranks)} rank lines",
                              expected="one rank line per training sentence")
        lw = parse_loss_profile(cfg.loss)
        data: list[tuple[int, list[str], np.ndarray, np.ndarray]] = []
        skipped = 0
        for k, (s, r) in enumerate(zip(sentences, ranks)):
            try:
                cols = self._ext.split_factors(s)
                dense, free = self._dense_ranks(r, len(cols[0]))
                if free.any() and lw["chunk"]:
                    raise FormatError(f"{int(free.sum())} word(s) without a rank (-1)",
                                      expected=f"a τ-only loss profile with attach_null='free', not {cfg.loss!r}")
            except FormatError as e:
                raise e.at(line=k + 1) from None
            if len(s) == 0 or len(s) > cfg.max_len:
                skipped += 1
                continue
            data.append((k, s, dense, free))
        cache: dict[int, _Features] = {}
        rng = np.random.default_rng(cfg.seed + len(self.history))
        stats = []
        iterator_cls = None
        if progress:
            from tqdm.auto import tqdm
            iterator_cls = tqdm
        for it in range(iterations):
            t0 = time.perf_counter()
            visit = rng.permutation(len(data)) if cfg.shuffle else np.arange(len(data))
            model_loss = oracle_loss = 0.0
            updates = 0
            seq = visit
            if iterator_cls is not None:
                seq = iterator_cls(visit, desc=f"btg iter {len(self.history) + 1}", unit="sent", leave=False)
            for s_i in seq:
                k, s, dense, free = data[s_i]
                lt = _LossTables(dense, lw["chunk"], lw["tau"], free)
                f = cache.get(k)
                if f is None:
                    f = self._ext.extract(s)
                    if cfg.cache_features:
                        cache[k] = f
                n = f.n
                sc = _scores(self._v, f, self._alpha)
                model = _cky(n, sc, cfg, lt, 1.0 if cfg.loss_augmented else 0.0, cfg.beam)
                oracle = _cky(n, sc, cfg, lt, _ORACLE_LOSS_WEIGHT, cfg.beam)
                model_loss += model.loss
                oracle_loss += oracle.loss
                if model.loss != oracle.loss:
                    self._step(_derivation_features(f, oracle.edges, self._ext.null),
                               _derivation_features(f, model.edges, self._ext.null),
                               model.score + model.loss - oracle.score - oracle.loss)
                    updates += 1
                else:  # lader: a Pegasos step with an empty vector still shrinks w; averaging counts it
                    self._step(_EMPTY, _EMPTY)
            st = {"iteration": len(self.history) + 1, "model_loss": model_loss, "oracle_loss": oracle_loss,
                  "updates": updates, "sentences": len(data), "skipped": skipped,
                  "seconds": time.perf_counter() - t0}
            self.history.append(st)
            stats.append(st)
            if progress:
                print(json.dumps(st), flush=True)
            if callback is not None:
                callback(st)
            if early_stop and model_loss == oracle_loss:
                break
        return stats

    # -- persistence

    def save(self, path: str | os.PathLike) -> None:
        """Write the model to directory ``path``: ``model.json`` (config, training state, history) and
        ``weights.npz`` (non-zero entries of ``v``, and of the averaging sum ``u`` when ``average`` is on).
        Both files are written atomically; a loaded model predicts the same orders and can train on."""
        from xlpe.io.atomic import atomic_write

        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        arrays = {}
        for name, vec in (("v", self._v), ("u", self._u)):
            if vec is not None:
                nz = np.flatnonzero(vec)
                arrays[f"{name}_index"] = nz.astype(np.int64)
                arrays[f"{name}_value"] = vec[nz]
        with atomic_write(path / "weights.npz", "wb") as fh:
            np.savez_compressed(fh, **arrays)
        meta = {"format": "xlpe-btg", "version": FORMAT_VERSION, "config": self.config.to_dict(),
                "alpha": self._alpha, "t": self._t, "v_sq": self._v_sq, "A": self._A, "steps": self._steps,
                "history": self.history}
        with atomic_write(path / "model.json") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "BTGPreorderer":
        """Read a model written by :meth:`save`."""
        path = Path(path)
        try:
            meta = json.loads((path / "model.json").read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FormatError("no model.json in the model directory", path,
                              expected="a directory written by BTGPreorderer.save") from None
        except json.JSONDecodeError as e:
            raise FormatError(f"model.json is not valid JSON ({e})", path / "model.json") from None
        if meta.get("format") != "xlpe-btg" or meta.get("version") != FORMAT_VERSION:
            raise FormatError("not an xlpe BTG model (or an unknown version)", path / "model.json",
                              expected=f"format 'xlpe-btg' version {FORMAT_VERSION}")
        m = cls(BTGConfig.from_dict(meta["config"]))
        try:
            with np.load(path / "weights.npz") as z:
                for name in ("v", "u"):
                    vec = getattr(m, f"_{name}")
                    if vec is None:
                        continue
                    idx, val = z[f"{name}_index"], z[f"{name}_value"]
                    if len(idx) and (idx.min() < 0 or idx.max() >= len(vec)):
                        raise FormatError("weight index out of range for hash_bits", path / "weights.npz")
                    vec[idx] = val
        except (OSError, KeyError, ValueError) as e:
            raise FormatError(f"cannot read the weights ({e})", path / "weights.npz") from None
        m._alpha, m._t, m._v_sq = float(meta["alpha"]), int(meta["t"]), float(meta["v_sq"])
        m._A, m._steps = float(meta["A"]), int(meta["steps"])
        m.history = list(meta.get("history", []))
        return m
