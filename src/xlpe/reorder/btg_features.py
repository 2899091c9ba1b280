"""Feature extraction of the BTG preorderer: per sentence, the hashed feature indices of every span, split and
shape, computed once with vectorised 64-bit hashing and cached (SPEC §5.1)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from xlpe.errors import FormatError
from xlpe.reorder.btg_config import (INVERTED, POS_C, POS_L, POS_R, SPAN_PUNCT, STRAIGHT, TYPE_CHARS, U64, BTGConfig,
                                     hash_finish, hash_mix, hash_str, is_punct, parse_template, Template)

# ------------------------------------------------------------------------------------------------
# feature extraction


class Features:
    """Per-sentence feature index tables (indices into the weight vector; ``null`` = no feature).

    ``span_l[l, t, k]``, ``span_r[r, t, k]``, ``span_lr[l, r, t, k]``, ``span_len[L, t, k]`` with t in
    ``F, S, I(, B)``; ``split[c, t, k]`` and ``shape[L, a, t, k]`` with t in ``S, I``.
    """

    __slots__ = ("n", "span_l", "span_r", "span_lr", "span_len", "split", "shape")


class Extractor:
    """Computes :class:`Features` with vectorised hashing (stable across processes and runs)."""

    def __init__(self, cfg: BTGConfig):
        self.cfg = cfg
        self.bits = cfg.hash_bits
        self.null = 1 << cfg.hash_bits  # an always-zero slot at the end of the weight vector
        self.ntypes = 4 if cfg.use_reverse else 3
        self.templates = [parse_template(t, f) for f in range(cfg.factors)
                          for t in (cfg.templates if f == 0 else cfg.factor_templates)]
        self.idx_dtype = np.int32
        self._tok: dict[str, int] = {}
        self._bos = U64(hash_str("<s>"))
        self._etype = np.array([hash_str(f"ET={c}") for c in TYPE_CHARS[: self.ntypes]], dtype=U64)
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
    def _axes(t: Template) -> set[str]:
        ax = set()
        for it in t.items:
            if it in POS_L:
                ax.add("l")
            elif it in POS_R:
                ax.add("r")
            elif it == "SN":
                ax.add("len")
            elif it == SPAN_PUNCT:
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
        out = np.empty(len(words) + 2, dtype=U64)
        out[0] = out[-1] = self._bos
        for p, w in enumerate(words):
            h = tok.get(w)
            if h is None:
                if len(tok) > 2_000_000:
                    tok.clear()
                h = tok[w] = hash_str(w)
            out[p + 1] = h
        return out

    # -- tables

    def _table(self, templates: list[Template], values: Callable[[Template, str], np.ndarray],
               etype: np.ndarray, shape: tuple[int, ...], type_axis_mask: np.ndarray | None) -> np.ndarray:
        """Stack the hashed indices of ``templates`` into an int array ``shape + (ntypes, len(templates))``."""
        nt = len(etype)
        out = np.empty(shape + (nt, max(len(templates), 0)), dtype=self.idx_dtype)
        for k, t in enumerate(templates):
            h = U64(t.seed)
            for it in t.items:
                h = hash_mix(h, values(t, it))
            h = np.broadcast_to(h, shape + (nt,))
            idx = hash_finish(np.ascontiguousarray(h), self.bits)
            if t.nonterm_only and type_axis_mask is not None:
                idx = np.where(type_axis_mask, idx, self.null)
            out[..., k] = idx
        return out

    def extract(self, sentence: Sequence[str]) -> Features:
        cols = self.split_factors(sentence)
        n = len(cols[0])
        H = [self._hashes(c) for c in cols]
        nt = self.ntypes
        nonterm_mask = np.zeros(nt, dtype=bool)
        nonterm_mask[[STRAIGHT, INVERTED]] = True
        ar = np.arange(n)
        sn_salt = U64(hash_str("SN"))
        sp_salt = U64(hash_str(SPAN_PUNCT))

        def span_values(mode: str):
            """Item values on the grid of a span table: mode 'l' (n,), 'r' (n,), 'lr' (n, n), 'len' (n+1,)."""
            ndim = 2 if mode == "lr" else 1

            def values(t: Template, it: str) -> np.ndarray:
                if it == "ET":
                    return self._etype.reshape((1,) * ndim + (nt,))
                h = H[t.factor]
                if it in POS_L:  # only in modes 'l' and 'lr'
                    return h[ar + 1 + POS_L[it]].reshape((n,) + (1,) * ndim)
                if it in POS_R:  # only in modes 'r' and 'lr'
                    v = h[ar + 1 + POS_R[it]]
                    return v.reshape(n, 1) if mode == "r" else v.reshape(1, n, 1)
                if it == "SN":
                    if mode == "len":
                        return hash_mix(sn_salt, np.arange(n + 1, dtype=U64)).reshape(n + 1, 1)
                    lens = (ar[None, :] - ar[:, None] + 1).clip(0).astype(U64)
                    return hash_mix(sn_salt, lens).reshape(n, n, 1)
                if it == SPAN_PUNCT:  # only in mode 'lr'
                    pp = np.concatenate(([0], np.cumsum([is_punct(w) for w in cols[0]])))
                    cnt = (pp[None, 1:] - pp[:-1, None]).clip(0, 3).astype(U64)  # [l, r] for r >= l
                    return hash_mix(sp_salt, cnt).reshape(n, n, 1)
                raise AssertionError(it)
            return values

        feats = Features()
        feats.n = n
        feats.span_l = self._table(self.span_l, span_values("l"), self._etype, (n,), nonterm_mask)
        feats.span_r = self._table(self.span_r, span_values("r"), self._etype, (n,), nonterm_mask)
        feats.span_lr = self._table(self.span_lr, span_values("lr"), self._etype, (n, n), nonterm_mask)
        feats.span_len = self._table(self.span_len, span_values("len"), self._etype, (n + 1,), nonterm_mask)

        et_nt = self._etype[[STRAIGHT, INVERTED]]
        cpos = np.arange(n + 1)

        def split_values(t: Template, it: str) -> np.ndarray:
            if it == "ET":
                return et_nt.reshape(1, 2)
            h = H[t.factor]
            return h[np.clip(cpos + POS_C[it], -1, n) + 1].reshape(n + 1, 1)

        feats.split = self._table(self.split, split_values, et_nt, (n + 1,), None)
        feats.shape = self._shape_table(n)
        return feats

    def _shape_table(self, n: int) -> np.ndarray:
        got = self._shape_cache.get(n)
        if got is not None:
            return got
        et_nt = self._etype[[STRAIGHT, INVERTED]]
        L = np.arange(n + 1).reshape(n + 1, 1, 1)
        a = np.arange(n + 1).reshape(1, n + 1, 1)
        bal = L - 2 * a  # lader: r - 2c + l + 1 with c = l + a, r = l + L - 1

        def values(t: Template, it: str) -> np.ndarray:
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
            return hash_mix(U64(hash_str(it)), v.astype(np.int64).astype(U64))

        tab = self._table(self.shape, values, et_nt, (n + 1, n + 1), None)
        if len(self._shape_cache) < 256:
            self._shape_cache[n] = tab
        return tab


