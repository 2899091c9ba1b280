"""Reordering accuracy against oracle ranks: lader's chunk fragmentation and Kendall τ (SPEC §5.3).

An *order* lists the original indices in output order (``order[k]`` = source index placed k-th); *ranks*
are the oracle ranks of the source words (:func:`xlpe.reorder.oracle.lader_ranks`), ties allowed.

* :func:`chunk_loss` — lader ``LossChunk::CalculateSentenceLoss``: adjacent output pairs, plus two
  boundary pairs against sentinel ranks −1 and max_rank+1, whose ranks are not "same or one up".
  Maximum n+1 (lader's own simplification; it ignores that ties can make n+1 unreachable), and
  ``(0, 0)`` when every word has the same rank.
* :func:`tau_loss` — lader ``LossTau::CalculateSentenceLoss``: discordant pairs ``t<u`` with
  ``rank[o_t] > rank[o_u]``; the maximum is the number of pairs with different ranks
  (``C(n,2) − Σ_ties C(k,2)``), i.e. the largest loss any order can get given the ties.
* accuracy = 1 − loss/max, and 1 when max is 0 (as ``evaluate-lader`` prints per sentence).
* :func:`corpus_reorder_scores` — ``evaluate-lader``'s "Total" line sums losses and maxima over the
  corpus (micro average); the sentence-averaged (macro) accuracies are returned too.

Verified against SPEC §12 example 1 (identity ``[0,1,2,3]`` vs ranks ``[0,2,1,3]``: chunk 3/5, τ 1/6; the
oracle order scores 0) and against brute-force loops written from the lader formulas (tests).
Ranks are used ordinally: gaps (``[0, 2, 5]``) are closed before scoring, which changes nothing for
lader's own dense ranks.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from xlpe.errors import FormatError

__all__ = ["chunk_loss", "tau_loss", "chunk_accuracy", "tau_accuracy", "sentence_reorder_scores",
           "corpus_reorder_scores"]


def _prepare(order: Sequence[int], ranks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Validate; return (dense ranks, ranks in output order)."""
    o = np.asarray(order, dtype=np.int64).reshape(-1)
    r = np.asarray(ranks, dtype=np.int64).reshape(-1)
    n = len(r)
    if len(o) != n:
        raise FormatError(f"the order has {len(o)} entries but the ranks have {n}",
                          expected="an order and ranks of the same sentence (same length)")
    if n and (o.min() < 0 or o.max() >= n or np.bincount(o, minlength=n).max() != 1):
        raise FormatError("the order is not a permutation", expected=f"each of 0..{n - 1} exactly once")
    if n and r.min() < 0:
        raise FormatError("negative rank", expected="ranks >= 0")
    dense = np.unique(r, return_inverse=True)[1].reshape(-1) if n else r
    return dense, dense[o]


def chunk_loss(order: Sequence[int], ranks: Sequence[int]) -> tuple[int, int]:
    """Chunk-fragmentation loss and its maximum, ``(loss, n+1)`` (SPEC §5.3; lader ``loss-chunk.cc``).

    Raises:
        FormatError: lengths differ, or ``order`` is not a permutation.
    """
    dense, ro = _prepare(order, ranks)
    n = len(dense)
    if n == 0 or dense.max() == 0:
        return 0, 0
    seq = np.concatenate(([-1], ro, [dense.max() + 1]))
    step = np.diff(seq)
    loss = int(np.count_nonzero((step != 0) & (step != 1)))
    return loss, n + 1


def _tau_max(dense: np.ndarray) -> int:
    n = len(dense)
    counts = np.bincount(dense)
    return int(n * (n - 1) // 2 - int((counts * (counts - 1) // 2).sum()))


def tau_loss(order: Sequence[int], ranks: Sequence[int]) -> tuple[int, int]:
    """Kendall τ loss (discordant pairs) and its maximum given ties (SPEC §5.3; lader ``loss-tau.cc``).

    O(n²) numpy; fine for sentences of a few thousand tokens.

    Raises:
        FormatError: lengths differ, or ``order`` is not a permutation.
    """
    dense, ro = _prepare(order, ranks)
    n = len(dense)
    if n < 2:
        return 0, 0
    loss = int(np.count_nonzero(np.triu(ro[:, None] > ro[None, :], 1)))
    return loss, _tau_max(dense)


def _acc(loss: float, mx: float) -> float:
    return 1.0 if mx == 0 else 1.0 - loss / mx


def chunk_accuracy(order: Sequence[int], ranks: Sequence[int]) -> float:
    """1 − chunk loss / max (1 when the maximum is 0)."""
    return _acc(*chunk_loss(order, ranks))


def tau_accuracy(order: Sequence[int], ranks: Sequence[int]) -> float:
    """1 − τ loss / max (1 when the maximum is 0); lader's 0–1 "tau" accuracy."""
    return _acc(*tau_loss(order, ranks))


def sentence_reorder_scores(order: Sequence[int], ranks: Sequence[int]) -> dict:
    """Both measures for one sentence: losses, maxima and accuracies (as ``evaluate-lader`` prints)."""
    cl, cm = chunk_loss(order, ranks)
    tl, tm = tau_loss(order, ranks)
    return {"chunk": _acc(cl, cm), "tau": _acc(tl, tm), "chunk_loss": cl, "chunk_max": cm,
            "tau_loss": tl, "tau_max": tm}


def corpus_reorder_scores(orders: Iterable[Sequence[int]], ranks_list: Iterable[Sequence[int]]) -> dict:
    """Corpus-level chunk and τ accuracies.

    Returns a dict with:
        ``chunk``, ``tau``: micro averages, ``1 − Σloss/Σmax`` over the corpus — lader ``evaluate-lader``'s
            "Total" line (use these to compare with lader numbers);
        ``chunk_sent``, ``tau_sent``: macro averages, the mean of per-sentence accuracies (1 for a
            sentence whose maximum is 0);
        ``chunk_loss``, ``chunk_max``, ``tau_loss``, ``tau_max``: the summed counts;
        ``sentences``: how many sentences were scored.

    Raises:
        FormatError: the two inputs have different numbers of sentences, or a sentence is malformed
            (the message names the 1-based sentence number).
    """
    orders, ranks_list = list(orders), list(ranks_list)
    if len(orders) != len(ranks_list):
        raise FormatError(f"{len(orders)} orders but {len(ranks_list)} rank lines",
                          expected="one order per sentence of the reference")
    sums = np.zeros(4, dtype=np.int64)
    sent_c, sent_t = [], []
    for k, (o, r) in enumerate(zip(orders, ranks_list)):
        try:
            cl, cm = chunk_loss(o, r)
            tl, tm = tau_loss(o, r)
        except FormatError as e:
            raise e.at(line=k + 1) from None
        sums += (cl, cm, tl, tm)
        sent_c.append(_acc(cl, cm))
        sent_t.append(_acc(tl, tm))
    cl, cm, tl, tm = (int(v) for v in sums)
    return {
        "chunk": _acc(cl, cm), "tau": _acc(tl, tm),
        "chunk_sent": float(np.mean(sent_c)) if sent_c else 1.0,
        "tau_sent": float(np.mean(sent_t)) if sent_t else 1.0,
        "chunk_loss": cl, "chunk_max": cm, "tau_loss": tl, "tau_max": tm,
        "sentences": len(orders),
    }


def order_scores_files(orders: str, ref_align: str, *, ref_base: int = 0, src: str | None = None,
                       attach_null: str = "right") -> dict:
    """Score an order file (lader ``order`` lines) against the lader ranks of reference alignments.

    ``src`` (the source text) gives the sentence lengths for validation and the words for lader's bracket
    rule; without it the lengths come from the order lines and no token is treated as a bracket.
    Also reports the identity order's scores as the baseline.
    """
    from xlpe.io.alignments import read_alignments
    from xlpe.io.orders import read_orders
    from xlpe.io.text import count_lines, read_sentences
    from xlpe.reorder.oracle import corpus_ranks

    if ref_align is None:
        raise FormatError("--orders needs reference alignments (--order-ref)")
    words = list(read_sentences(src)) if src else None
    lengths = [len(w) for w in words] if words else None
    ords = list(read_orders(orders, lengths=lengths))
    lens = lengths or [len(o) for o in ords]
    if lengths is None and (n_ref := count_lines(ref_align)) != len(ords):   # before the lengths taken from ords
        raise FormatError(f"{len(ords)} order lines but the reference alignments {ref_align} have {n_ref} lines",
                          orders, expected="one order line per reference alignment line")
    refs = list(read_alignments(ref_align, ref_base, lengths=[(n, None) for n in lens], check_base=False))
    if len(refs) != len(ords):
        raise FormatError(f"{len(refs)} reference alignment lines but {len(ords)} order lines", ref_align)
    ranks = corpus_ranks(words or lens, refs, attach_null=attach_null)
    out = corpus_reorder_scores(ords, ranks)
    ident = corpus_reorder_scores([list(range(n)) for n in lens], ranks)
    out["identity_chunk"], out["identity_tau"] = ident["chunk"], ident["tau"]
    return out
