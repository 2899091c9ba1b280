"""Orders from word alignments: lader's oracle ranks, bit-exact (SPEC §5.2), of a sentence (:func:`lader_ranks`),
a corpus (:func:`corpus_ranks`) or a training file (:func:`training_ranks`), and permutations from ranks
(:func:`order_from_ranks`; :func:`invert_order` gives ``pos_XL``, SPEC §4.1). How the port was verified is in
``docs/reorder.md``; DPE targets and the 2PT source are in :mod:`xlpe.reorder.targets`.

An alignment is any iterable of 0-based ``(i, j)`` int pairs (source index ``i``, target index ``j``); an order
is a ``list[int]`` where ``order[k]`` is the original index of the token at reordered position ``k`` (lader
``-out_format order``).
"""

from __future__ import annotations

from typing import Iterable, Literal, Sequence

import numpy as np

from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import read_alignments, read_lader_alignments
from xlpe.io.text import read_sentences
from xlpe.io.orders import invert_order  # noqa: F401  (re-exported: pos_XL lives with the order format)

__all__ = ["lader_ranks", "lader_spans", "corpus_ranks", "order_from_ranks", "invert_order", "check_links"]

Link = tuple[int, int]

# lader's bracket pairs (combined-alignment.cc); '"' opens and closes.
OPENING_BRACKETS = ("(", "[", '"', "（", "「", "『", "【")
CLOSING_BRACKETS = (")", "]", '"', "）", "」", "』", "】")

_DBL_MAX = float(np.finfo(np.float64).max)  # C's DBL_MAX


# ----------------------------------------------------------------------------------------------
# validation


def check_links(links: Iterable[Link], src_len: int, tgt_len: int | None = None, *,
                what: str = "alignment") -> list[Link]:
    """Return ``links`` as a list of int pairs, in the given order, after checking every index.

    Raises:
        FormatError: a link that is not a pair of ints, negative, or beyond ``src_len``/``tgt_len``.
    """
    if not isinstance(src_len, (int, np.integer)) or src_len < 0:
        raise FormatError(f"bad source length {src_len!r}", expected="a non-negative int")
    out: list[Link] = []
    for link in links:
        try:
            i, j = link
            ii, jj = int(i), int(j)
        except (TypeError, ValueError):
            raise FormatError(f"{what} link {link!r} is malformed", expected="a pair of ints (i, j)") from None
        if ii != i or jj != j:
            raise FormatError(f"{what} link {link!r} is malformed", expected="a pair of ints (i, j)")
        if not 0 <= ii < src_len:
            raise FormatError(f"{what} link {ii}-{jj} is beyond the source sentence of {src_len} words",
                              expected=f"0 <= i < {src_len} (0-based)")
        if jj < 0 or (tgt_len is not None and jj >= tgt_len):
            raise FormatError(f"{what} link {ii}-{jj} is beyond the target sentence"
                              + ("" if tgt_len is None else f" of {tgt_len} words"),
                              expected="0 <= j" + ("" if tgt_len is None else f" < {tgt_len}") + " (0-based)")
        out.append((ii, jj))
    return out


# ----------------------------------------------------------------------------------------------
# lader oracle ranks (SPEC §5.2)


def _span_less(l: tuple[float, float], r: tuple[float, float]) -> bool:
    """lader's ``AlignmentIsLesser``: l < r iff (l.b < r.b and l.e <= r.e) or (l.e < r.e and l.b <= r.b).

    Not a strict weak order: nested or crossing spans are mutually "not less" (they tie), and ties are
    not transitive. That is why :class:`_StdMap` replays the exact tree lader's ``std::map`` builds.
    """
    return (l[0] < r[0] and l[1] <= r[1]) or (l[1] < r[1] and l[0] <= r[0])


class _Node:
    __slots__ = ("key", "value", "left", "right", "parent", "red")

    def __init__(self, key, value, parent):
        self.key, self.value, self.parent = key, value, parent
        self.left = self.right = None
        self.red = True


class _StdMap:
    """A replay of GNU libstdc++'s ``std::map`` (red-black tree) with a custom "less" function.

    Only what lader's ``Ranks`` constructor uses: ``find``, ``insert`` (unique keys) and in-order
    iteration. With a comparator that is not a strict weak order, which entry a key "finds" depends on
    the tree's shape, so the shape must be reproduced: the search paths follow libstdc++'s
    ``_M_lower_bound`` / ``_M_get_insert_unique_pos`` and the rebalancing is the textbook red-black
    insertion fix-up that ``_Rb_tree_insert_and_rebalance`` implements.
    """

    def __init__(self, less):
        self.less = less
        self.root: _Node | None = None
        self.leftmost: _Node | None = None

    def find(self, key) -> _Node | None:
        x, y = self.root, None
        while x is not None:
            if not self.less(x.key, key):
                y, x = x, x.left
            else:
                x = x.right
        if y is None or self.less(key, y.key):
            return None
        return y

    @staticmethod
    def _predecessor(x: _Node) -> _Node:
        if x.left is not None:
            x = x.left
            while x.right is not None:
                x = x.right
            return x
        p = x.parent
        while x is p.left:  # x is not the leftmost node, so p exists
            x, p = p, p.parent
        return p

    def insert(self, key, value) -> bool:
        """Insert unless an "equivalent" key is met on the way; return whether it was inserted."""
        x, y, comp = self.root, None, True
        while x is not None:
            y = x
            comp = self.less(key, x.key)
            x = x.left if comp else x.right
        j = y
        if comp:
            if j is None or j is self.leftmost:
                self._link(key, value, y, True)
                return True
            j = self._predecessor(j)
        if self.less(j.key, key):
            self._link(key, value, y, comp)
            return True
        return False

    def _link(self, key, value, parent: _Node | None, left: bool) -> None:
        z = _Node(key, value, parent)
        if parent is None:
            self.root = self.leftmost = z
        elif left:
            parent.left = z
            if parent is self.leftmost:
                self.leftmost = z
        else:
            parent.right = z
        self._rebalance(z)

    def _rotate_left(self, x: _Node) -> None:
        y = x.right
        x.right = y.left
        if y.left is not None:
            y.left.parent = x
        y.parent = x.parent
        if x is self.root:
            self.root = y
        elif x is x.parent.left:
            x.parent.left = y
        else:
            x.parent.right = y
        y.left = x
        x.parent = y

    def _rotate_right(self, x: _Node) -> None:
        y = x.left
        x.left = y.right
        if y.right is not None:
            y.right.parent = x
        y.parent = x.parent
        if x is self.root:
            self.root = y
        elif x is x.parent.right:
            x.parent.right = y
        else:
            x.parent.left = y
        y.right = x
        x.parent = y

    def _rebalance(self, x: _Node) -> None:
        while x is not self.root and x.parent.red:
            xpp = x.parent.parent
            if x.parent is xpp.left:
                y = xpp.right
                if y is not None and y.red:
                    x.parent.red = False
                    y.red = False
                    xpp.red = True
                    x = xpp
                else:
                    if x is x.parent.right:
                        x = x.parent
                        self._rotate_left(x)
                    x.parent.red = False
                    xpp.red = True
                    self._rotate_right(xpp)
            else:
                y = xpp.left
                if y is not None and y.red:
                    x.parent.red = False
                    y.red = False
                    xpp.red = True
                    x = xpp
                else:
                    if x is x.parent.left:
                        x = x.parent
                        self._rotate_right(x)
                    x.parent.red = False
                    xpp.red = True
                    self._rotate_left(xpp)
        self.root.red = False

    def values_in_order(self) -> list:
        out, stack, x = [], [], self.root
        while stack or x is not None:
            while x is not None:
                stack.append(x)
                x = x.left
            x = stack.pop()
            out.append(x.value)
            x = x.right
        return out


def _combine_blocks(spans: list[list[float]]) -> None:
    """lader ``CombineBlocks`` (in place): merge words whose target spans overlap.

    Words are visited in ascending order of their *original* span; a block grows while the next word's
    *current* span starts at or before the block's end, and every source word between the block's
    leftmost and rightmost member (aligned or not) receives the block's span. Like lader, the walk reads
    spans that earlier blocks may already have overwritten.
    """
    n = len(spans)
    word_spans = sorted(((spans[k][0], spans[k][1]), k) for k in range(n))
    i = 0
    while i < n:
        f1 = f2 = word_spans[i][1]
        e1, e2 = spans[f1]
        if e1 == -1:
            i += 1
            continue
        i += 1
        while i < n and spans[word_spans[i][1]][0] <= e2:
            w = word_spans[i][1]
            while f1 > w:
                f1 -= 1
                e2 = max(e2, spans[f1][1])
            while f2 < w:
                f2 += 1
                e2 = max(e2, spans[f2][1])
            i += 1
        for k in range(f1, f2 + 1):
            spans[k] = [e1, e2]


def _align_bracket_spans(spans: list[list[float]], words: Sequence[str]) -> None:
    """lader ``AlignBracketSpans`` (in place): a null-aligned matching bracket pair is placed just
    outside (±1e-4) the target span of the aligned words it encloses."""
    stack: list[int] = []
    for i, w in enumerate(words):
        if spans[i][0] != -1:
            continue
        if w in CLOSING_BRACKETS and stack:
            kind = CLOSING_BRACKETS.index(w)
            top = stack[-1]
            if words[top] == OPENING_BRACKETS[kind]:
                f1, f2 = _DBL_MAX, -1.0
                for k in range(top + 1, i):
                    if spans[k][0] != -1:
                        f1 = min(spans[k][0], f1)
                        f2 = max(spans[k][1], f2)
                if f2 != -1:
                    spans[top] = [f1 - 1e-4, f1 - 1e-4]
                    spans[i] = [f2 + 1e-4, f2 + 1e-4]
                stack.pop()
                continue
        if w in OPENING_BRACKETS:
            stack.append(i)


def _attach_null(spans: list[list[float]], how: str) -> None:
    """lader's null handlers (in place). ``right``: a null word copies its right neighbour's span,
    trailing nulls the left one's. ``left``: sentence-final nulls go to the very end (DBL_MAX), other
    nulls copy the left neighbour's span, leading nulls the first aligned word's."""
    n = len(spans)
    if how == "left":
        last = n - 1
        while last >= 0 and spans[last][0] == -1:
            spans[last] = [_DBL_MAX, _DBL_MAX]
            last -= 1
        for i in range(1, last):
            if spans[i][0] == -1:
                spans[i] = list(spans[i - 1])
        i = 0
        while i < n and spans[i][0] == -1:
            i += 1
        if i != n:
            while i > 0:
                spans[i - 1] = list(spans[i])
                i -= 1
    elif how == "right":
        for i in range(n - 2, -1, -1):
            if spans[i][0] == -1:
                spans[i] = list(spans[i + 1])
        i = n - 1
        while i >= 0 and spans[i][0] == -1:
            i -= 1
        if i != -1:
            while i < n - 1:
                spans[i + 1] = list(spans[i])
                i += 1


def lader_spans(links: Iterable[Link], src_len: int, *, combine_blocks: bool = True,
                align_brackets: bool = True, src_words: Sequence[str] | None = None,
                attach_null: Literal["right", "left", "none"] = "right") -> list[tuple[float, float]]:
    """The per-word target spans lader ranks (SPEC §5.2 steps 1–4), as ``(begin, end)`` floats.

    Unaligned words that no step attaches keep ``(-1, -1)``. See :func:`lader_ranks` for the arguments.
    """
    if attach_null not in ("right", "left", "none"):
        raise ConfigError(f"attach_null must be 'right', 'left' or 'none', not {attach_null!r}")
    links = check_links(links, src_len)
    if src_words is not None and len(src_words) != src_len:
        raise FormatError(f"the source sentence has {len(src_words)} words but the alignment says {src_len}",
                          expected="src_words with src_len entries")
    spans = [[-1.0, -1.0] for _ in range(src_len)]
    for i, j in links:  # step 1: [min j, max j]
        s = spans[i]
        if s[0] == -1:
            s[0] = s[1] = float(j)
        else:
            s[0] = min(s[0], float(j))
            s[1] = max(s[1], float(j))
    if combine_blocks:
        _combine_blocks(spans)
    if align_brackets and src_words is not None:
        _align_bracket_spans(spans, src_words)
    if attach_null != "none":
        _attach_null(spans, attach_null)
    return [(s[0], s[1]) for s in spans]


def lader_ranks(links: Iterable[Link], src_len: int, *, combine_blocks: bool = True,
                align_brackets: bool = True, src_words: Sequence[str] | None = None,
                attach_null: Literal["right", "left", "none", "free"] = "right") -> list[int]:
    """lader's oracle ranks of the source words (SPEC §5.2), bit-exact.

    Args:
        links: 0-based ``(i, j)`` pairs, many-to-many allowed (duplicates are harmless).
        src_len: number of source words.
        combine_blocks: merge words with overlapping target spans into blocks (lader ``COMBINE_BLOCKS``,
            the trainer's and evaluator's default).
        align_brackets: place null-aligned matching brackets (``( [ " （ 「 『 【`` and their closers)
            just outside the span of what they enclose (lader ``ALIGN_BRACKET_SPANS``, on by default in
            trainer and evaluator). Brackets are recognised by their words, so this step needs
            ``src_words``; without words no token can be a bracket and the step changes nothing.
        src_words: the source tokens (first factor only, i.e. the words).
        attach_null: ``'right'`` (lader default), ``'left'`` (sentence-final nulls go to the end) or
            ``'none'`` (lader ``LEAVE_NULL_AS_IS``: unaligned words keep span (-1,-1) and share the lowest rank)
            or ``'free'`` (not in lader: as ``'none'``, but unaligned words get rank ``-1``, "no rank", which
            :meth:`xlpe.reorder.btg.BTGPreorderer.train` leaves out of the τ loss; the aligned words'
            ranks are those of ``'none'`` minus one when there are unaligned words).

    Returns:
        ``ranks[i]`` in ``0..max_rank``; words whose spans are equal or incomparable under lader's span
        order share a rank (ties). Like lader, ranks come from a ``std::map`` keyed by span with that
        (non-strict) order; the map's search paths are replayed exactly (:class:`_StdMap`). A quirk kept
        for exactness: a word whose span the map neither finds nor inserts (possible only with crossing
        or nested spans, e.g. ``combine_blocks=False``) keeps the default rank 0, as in lader.

    Raises:
        FormatError: a link outside the sentence, or ``src_words`` of the wrong length.

    Example (SPEC §12.1): ``lader_ranks([(0,0),(1,4),(1,5),(2,2),(3,6)], 4) == [0, 2, 1, 3]``.
    """
    free = attach_null == "free"
    spans = lader_spans(links, src_len, combine_blocks=combine_blocks, align_brackets=align_brackets,
                        src_words=src_words, attach_null="none" if free else attach_null)
    rank_map = _StdMap(_span_less)
    for i, span in enumerate(spans):
        node = rank_map.find(span)
        if node is None:
            rank_map.insert(span, [i])
        else:
            node.value.append(i)
    ranks = [0] * src_len
    for rank, members in enumerate(rank_map.values_in_order()):
        for i in members:
            ranks[i] = rank
    if free and any(sp[0] == -1 for sp in spans):
        # the (-1,-1) span of the unaligned words sorts first (rank 0): the aligned words keep their order
        ranks = [-1 if sp[0] == -1 else r - 1 for sp, r in zip(spans, ranks)]
    return ranks


# ----------------------------------------------------------------------------------------------
# permutations (SPEC §4.1)


def order_from_ranks(ranks: Sequence[int]) -> list[int]:
    """A permutation consistent with ``ranks``: source indices sorted by rank, ties in source order.

    This is lader's reference reordering (``evaluate-lader``'s ``ref`` line) and scores loss 0 under
    both chunk and τ (SPEC §12.1: ranks ``[0,2,1,3]`` → order ``[0,2,1,3]``).
    """
    r = np.asarray(ranks, dtype=np.int64).reshape(-1)
    return np.argsort(r, kind="stable").tolist()


def corpus_ranks(sources: Sequence[Sequence[str] | int], alignments: Iterable, *,
                 attach_null: Literal["right", "left", "none", "free"] = "right", combine_blocks: bool = True,
                 align_brackets: bool = True) -> list[list[int]]:
    """:func:`lader_ranks` of every sentence of a corpus (the options are :func:`lader_ranks`'s).

    ``sources`` holds each sentence's words (their number is the sentence length, and they place the
    brackets), or just its length when the words are unknown (then no word is a bracket); ``alignments``
    holds objects with ``links`` (e.g. :class:`xlpe.io.alignments.Alignment`) or link iterables, one per
    sentence. Example: ``corpus_ranks([["a", "b"], 2], [[(0, 1), (1, 0)], [(0, 0), (1, 1)]]) == [[1, 0], [0, 1]]``.
    """
    out = []
    for s, a in zip(sources, alignments):
        words = None if isinstance(s, (int, np.integer)) else s
        out.append(lader_ranks(sorted(getattr(a, "links", a)), len(words) if words is not None else int(s),
                               src_words=words, attach_null=attach_null, combine_blocks=combine_blocks,
                               align_brackets=align_brackets))
    return out


def training_ranks(src: str, *, align: str | None = None, lader_align: str | None = None, align_base: int = 0,
                   tgt: str | None = None, attach_null: str = "right", factor_sep: str = "|",
                   max_len: int | None = None, skip_long: bool = False) -> tuple[list[list[str]], list[list[int]], int]:
    """Source sentences and their oracle ranks from files; sentences over ``max_len`` words are an error
    naming the line unless ``skip_long`` (then they are dropped and counted)."""
    sents = list(read_sentences(src))
    words = [[t.split(factor_sep)[0] for t in s] for s in sents]
    if align:
        tl = [len(t) for t in read_sentences(tgt)] if tgt else [None] * len(sents)
        if len(tl) != len(sents):
            raise FormatError(f"the target text has {len(tl)} lines but the source text {src} has {len(sents)}", tgt,
                              min(len(tl), len(sents)) + 1, "line-aligned source and target texts")
        als = list(read_alignments(align, align_base, lengths=zip([len(s) for s in sents], tl), check_base=False))
        if len(als) != len(sents):
            raise FormatError(f"alignment file has {len(als)} lines but the source text has {len(sents)}", align)
    else:
        als = [a for _, _, a in read_lader_alignments(lader_align, src_lengths=[len(s) for s in sents])]
    keep = []
    for k, s in enumerate(sents):
        if max_len and len(s) > max_len:
            if not skip_long:
                raise FormatError(f"sentence has {len(s)} words, over the length limit {max_len}", src, k + 1,
                                  "shorter sentences, a larger --max-len, or --skip-long to skip and count them")
            continue
        keep.append(k)
    ranks = corpus_ranks([words[k] for k in keep], [als[k] for k in keep], attach_null=attach_null)
    return [sents[k] for k in keep], ranks, len(sents) - len(keep)
