"""Scores, edge-factored losses and the CKY search of the BTG preorderer (SPEC §5.1, §5.3): one vectorised numpy
step per span length; the best derivation, or a beam of them for loss-augmented search."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from xlpe.errors import ConfigError
from xlpe.reorder.btg_config import BACKWARD, FORWARD, INVERTED, STRAIGHT, TYPE_CHARS, BTGConfig
from xlpe.reorder.btg_features import Features

# ------------------------------------------------------------------------------------------------
# scores, losses, CKY


@dataclass
class Scores:
    span: np.ndarray   # (n, n, ntypes): span[l, r, t]
    split: np.ndarray  # (n + 1, 2): split[c, S/I]
    shape: np.ndarray  # (n + 1, n + 1, 2): shape[L, a, S/I]


def _gather_sum(w: np.ndarray, idx: np.ndarray) -> np.ndarray:
    if idx.shape[-1] == 0:
        return np.zeros(idx.shape[:-1])
    return w[idx].sum(axis=-1)


def edge_scores(w: np.ndarray, f: Features, scale: float) -> Scores:
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
    return Scores(span, split, shape)


class _CkyPlan:
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


_CKY_PLANS: dict[int, _CkyPlan] = {}


def _cky_plan(n: int) -> _CkyPlan:
    p = _CKY_PLANS.get(n)
    if p is None:
        p = _CkyPlan(n)
        if len(_CKY_PLANS) < 512:
            _CKY_PLANS[n] = p
    return p


class LossTables:
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


def _not_contiguous(step: np.ndarray) -> np.ndarray:
    """1 where consecutive ranks are not "same or one up" (lader ``!IsContiguous``)."""
    return (step != 0) & (step != 1)


def cky(n: int, sc: Scores, cfg: BTGConfig, losses: LossTables | None, loss_weight: float,
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
    plan = _cky_plan(n)
    tot, bp, fr, lr = _empty_chart(n * (n + 1), K, stateful)
    if stateful:
        ranks, nr, cw = losses.ranks, losses.max_rank + 2, loss_weight * losses.wc
    rev = cfg.use_reverse and sc.span.shape[2] > BACKWARD
    maxterm = cfg.max_term
    span, split, shape = sc.span, sc.split, sc.shape
    nterm_of = [0] * (n + 1)

    for L in range(1, n + 1):
        ns, ls, rs, rows, A, ri, left, right = plan.steps[L]
        parts, keys = [], []
        if L <= maxterm:
            kinds = ((FORWARD, False), (BACKWARD, True)) if (rev and L > 1) else ((FORWARD, False),)
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
            base = split[ri] + shape[L, 1:L] + span[ls, rs, STRAIGHT:INVERTED + 1][:, None, :]  # (ns, na, 2)
            if tau:
                base = base + loss_weight * losses.tau_cross(L, ls[:, None], ri, rs[:, None])
            if K == 1:
                cand = (tot[left, 0] + tot[right, 0])[:, :, None] + base          # (ns, na, 2)
                if stateful:
                    lf, ll, rf, rl = fr[left, 0], lr[left, 0], fr[right, 0], lr[right, 0]
                    cand[:, :, 0] += cw * _not_contiguous(rf - ll)
                    cand[:, :, 1] += cw * _not_contiguous(lf - rl)
                    keys.append(np.stack([lf * nr + rl, rf * nr + ll], axis=2).reshape(ns, -1))
            else:
                pair = tot[left][:, :, :, None] + tot[right][:, :, None, :]       # (ns, na, K, K)
                cand = pair[:, :, None] + base[:, :, :, None, None]                # (ns, na, 2, K, K)
                lf, ll = fr[left][:, :, :, None], lr[left][:, :, :, None]          # left child: axis k1
                rf, rl = fr[right][:, :, None, :], lr[right][:, :, None, :]        # right child: axis k2
                cand[:, :, 0] += cw * _not_contiguous(rf - ll)
                cand[:, :, 1] += cw * _not_contiguous(lf - rl)
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
                    allc[allk == kj[:, None]] = -np.inf

    root = tot[n]                # row i * (n + 1) + L of the whole sentence: i = 0, L = n
    if stateful:  # the two sentence boundaries (lader EDGE_ROOT)
        root = root + cw * ((fr[n] != 0).astype(np.float64) + (lr[n] != losses.max_rank))
    return _best_derivation(root, bp, nterm_of, n, losses, loss_weight, use_loss)


def _empty_chart(rows: int, K: int, stateful: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None,
                                                              np.ndarray | None]:
    """CKY's chart, K hypotheses for each row ``i * (n + 1) + L`` (the span of length L from word i): their total
    scores (-inf: none), their flat candidate indices (backpointers) and, when ``stateful`` (chunk loss), the
    ranks of their first and last output words (else None)."""
    tot = np.full((rows, K), -np.inf)
    bp = np.zeros((rows, K), dtype=np.int64)
    if not stateful:
        return tot, bp, None, None
    return tot, bp, np.zeros((rows, K), dtype=np.int64), np.zeros((rows, K), dtype=np.int64)


def _best_derivation(root: np.ndarray, bp: np.ndarray, nterm_of: list[int], n: int, losses: LossTables | None,
                     loss_weight: float, use_loss: bool) -> Derivation:
    """The derivation of the best root hypothesis (``root``: their scores), decoded from the chart's flat
    candidate indices ``bp`` (``nterm_of[L]``: the terminal candidates of length L), with its model score
    (without the loss term) and its loss."""
    K = bp.shape[1]
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
        t = STRAIGHT if (j // (K * K)) % 2 == 0 else INVERTED
        a = j // (2 * K * K) + 1
        edges.append(("S" if t == STRAIGHT else "I", i, i + L - 1, a))
        left_h, right_h = (i, a, k1), (i + a, L - a, k2)
        # popped last-in first-out: push the child that is output second first
        stack.extend((right_h, left_h) if t == STRAIGHT else (left_h, right_h))
    loss = losses.sentence_loss(order) if losses is not None else 0.0
    score = best - loss_weight * loss if use_loss else best
    return Derivation(order, score, loss, edges)


def derivation_features(f: Features, edges: list[tuple[str, int, int, int]], null: int) -> np.ndarray:
    """All feature indices fired by a derivation's edges (with repeats; the null slot removed)."""
    t = np.array([TYPE_CHARS.index(e[0]) for e in edges], dtype=np.int64)
    ls = np.array([e[1] for e in edges], dtype=np.int64)
    rs = np.array([e[2] for e in edges], dtype=np.int64)
    a = np.array([e[3] for e in edges], dtype=np.int64)
    L = rs - ls + 1
    parts = [f.span_l[ls, t].ravel(), f.span_r[rs, t].ravel(), f.span_lr[ls, rs, t].ravel(),
             f.span_len[L, t].ravel()]
    nt = (t == STRAIGHT) | (t == INVERTED)
    if nt.any():
        tn = t[nt] - 1
        parts.append(f.split[ls[nt] + a[nt], tn].ravel())
        parts.append(f.shape[L[nt], a[nt], tn].ravel())
    idx = np.concatenate(parts).astype(np.int64)
    return idx[idx != null]


