"""Alignment error rate, precision, recall (Och & Ney 2003; SPEC §8.1), micro-averaged over the corpus.

    precision = |A∩P| / |A|        recall = |A∩S| / |S|
    AER       = 1 − (|A∩S| + |A∩P|) / (|A| + |S|)
    F_α       = 1 / (α/precision + (1−α)/recall)

with A the hypothesis links, S the sure and P ⊇ S the possible reference links. Counts are summed over
all sentences before dividing (as ``aer.py`` of lilt/alignment-scripts and awesome-align do), never
averaged per sentence. Verified against SPEC §12 example 6 (P=2/3, R=1, AER=0.25).

Index bases are explicit for reference and hypothesis; with the bitext given, every index is checked
against the sentence lengths and a file whose base looks wrong is refused (SPEC §8.2).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from itertools import zip_longest
from typing import Iterable

from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import Alignment, read_alignments
from xlpe.io.bitext import read_bitext


@dataclass(frozen=True)
class AERScore:
    aer: float
    precision: float
    recall: float
    f: float
    n_hyp: int          # |A|
    n_sure: int         # |S|
    n_possible: int     # |P|
    hits_sure: int      # |A∩S|
    hits_possible: int  # |A∩P|
    sentences: int

    def format(self) -> str:
        """``AER% (P%/R%/|A|)``, the conventional one-line report."""
        return f"{100 * self.aer:.2f} ({100 * self.precision:.2f}/{100 * self.recall:.2f}/{self.n_hyp})"

    def to_dict(self) -> dict:
        return asdict(self)


class AERCounter:
    """Accumulate link counts sentence by sentence (streaming), then :meth:`score`."""

    def __init__(self, alpha: float = 0.5):
        self.alpha = alpha
        self.n_hyp = self.n_sure = self.n_possible = self.hits_sure = self.hits_possible = self.sentences = 0

    def update(self, hyp: Alignment | Iterable[tuple[int, int]], ref: Alignment) -> None:
        a = hyp.links if isinstance(hyp, Alignment) else frozenset(hyp)
        self.n_hyp += len(a)
        self.n_sure += len(ref.sure)
        self.n_possible += len(ref.possible)
        self.hits_sure += len(a & ref.sure)
        self.hits_possible += len(a & ref.possible)
        self.sentences += 1

    def score(self) -> AERScore:
        p = self.hits_possible / self.n_hyp if self.n_hyp else 0.0
        r = self.hits_sure / self.n_sure if self.n_sure else 0.0
        denom = self.n_hyp + self.n_sure
        aer = 1.0 - (self.hits_sure + self.hits_possible) / denom if denom else 0.0
        f = 1.0 / (self.alpha / p + (1 - self.alpha) / r) if p > 0 and r > 0 else 0.0
        return AERScore(aer, p, r, f, self.n_hyp, self.n_sure, self.n_possible, self.hits_sure,
                        self.hits_possible, self.sentences)


def corpus_aer(hyps: Iterable[Alignment | Iterable[tuple[int, int]]], refs: Iterable[Alignment],
               alpha: float = 0.5) -> AERScore:
    """Micro-averaged AER of hypothesis alignments against references (both 0-based, same orientation)."""
    c = AERCounter(alpha)
    for k, (h, r) in enumerate(zip_longest(hyps, refs, fillvalue=None), 1):
        if h is None or r is None:
            raise FormatError(f"{'hypothesis' if h is None else 'reference'} ends at sentence {k - 1} "
                              f"while the other goes on", expected="as many hypothesis as reference sentences")
        c.update(h, r)
    return c.score()


def sentence_aer(hyp, ref: Alignment, alpha: float = 0.5) -> AERScore:
    c = AERCounter(alpha)
    c.update(hyp, ref)
    return c.score()


def diagonal_alignment(n_src: int, n_tgt: int) -> Alignment:
    """The alignment that knows nothing but position: target word ``j`` links source word
    ``floor(j·(n_src−1)/(n_tgt−1) + ½)`` (one link per target word, as attention alignments have).

    It is the reference point for an AER read from a weak model: below it, the attention has learnt
    something about the words; at or above it, no more than where a word sits in its sentence.
    """
    if n_src <= 0 or n_tgt <= 0:
        return Alignment()
    if n_tgt == 1:
        return Alignment.from_links([(0, 0)])
    scale = (n_src - 1) / (n_tgt - 1)
    return Alignment.from_links((int(j * scale + 0.5), j) for j in range(n_tgt))


def _reference_view(a: Alignment, all_sure: bool, ignore_possible: bool) -> Alignment:
    if all_sure:
        return Alignment(a.possible, a.possible)
    if ignore_possible:
        return Alignment(a.sure, a.sure)
    return a


def aer_files(ref: str | os.PathLike, hyp: str | os.PathLike, *, ref_base: int, hyp_base: int,
              reverse_ref: bool = False, reverse_hyp: bool = False, src: str | None = None,
              tgt: str | None = None, all_sure: bool = False, ignore_possible: bool = False,
              check_base: bool = True, alpha: float = 0.5) -> AERScore:
    """AER of a hypothesis file against a gold file.

    Args:
        ref_base, hyp_base: index base of each file (gold sets are usually 1, tool output 0).
        reverse_ref, reverse_hyp: swap the sides of that file after reading (e.g. De-En gold scored as En-De).
        src, tgt: the bitext in the *scoring* orientation; when given, indices are validated against it.
        all_sure / ignore_possible: treat possible reference links as sure / drop them.
        check_base: refuse files whose index base looks wrong (no index 0 in 100+ lines read as 0-based).
    """
    if all_sure and ignore_possible:
        raise ConfigError("all_sure (--all-sure) and ignore_possible (--ignore-possible) contradict each other: "
                          "give at most one")
    if not 0.0 <= alpha <= 1.0:
        raise ConfigError(f"the F-measure weight alpha must lie in [0, 1], not {alpha}")
    lens = None
    if (src is None) != (tgt is None):
        raise FormatError("give both the source and the target text, or neither", src or tgt)
    if src is not None:
        lens = [(len(s), len(t)) for s, t in read_bitext(src, tgt)]
    def oriented(path, base, rev):
        ls = None if lens is None else ([(b, a) for a, b in lens] if rev else lens)
        for a in read_alignments(path, base, lengths=ls, check_base=check_base):
            yield a.reversed() if rev else a
    refs = (_reference_view(a, all_sure, ignore_possible) for a in oriented(ref, ref_base, reverse_ref))
    hyps = oriented(hyp, hyp_base, reverse_hyp)
    c = AERCounter(alpha)
    for k, (h, r) in enumerate(zip_longest(hyps, refs, fillvalue=None), 1):
        if h is None or r is None:
            short = hyp if h is None else ref
            raise FormatError(f"file ends after {k - 1} lines but the other alignment file has more", short, k,
                              "hypothesis and reference with equal line counts")
        c.update(h, r)
    if c.sentences == 0:
        raise FormatError("no sentence to score: the alignment files are empty", ref,
                          expected="one line per sentence pair")
    return c.score()
