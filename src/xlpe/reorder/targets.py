"""Alignment-derived targets of dynamic position encoding: DPE's target-order ranks and the 2PT reordered source
(Zheng et al.; SPEC §6.2, §6.5, §12 example 5)."""

from __future__ import annotations

from typing import Iterable, Literal, Sequence

from xlpe.data.subword import subword_alignment_from_word
from xlpe.errors import ConfigError
from xlpe.io.alignments import Alignment
from xlpe.reorder.oracle import Link, check_links


def dpe_targets(links: Iterable[Link], src_len: int, *,
                link_rule: Literal["first", "min"] = "first") -> list[int]:
    """DPE supervision target ``p(i)`` per source token, −1 where the token is unaligned (SPEC §6.2).

    ``t(i)`` is the target index of token i's first link (``link_rule='first'``, the DPE script's
    one-to-many rule) or its smallest target index (``'min'``). The aligned tokens are stable-sorted by
    ``t`` (ties keep source order: "reordered together as one unit while maintaining their relative
    positions") and ``p(i)`` is the position in that order, so ``p(i) < src_len`` always.

    fast_align prints links by increasing target index, so 'first' and 'min' agree on its output. For an
    unordered container (``set``/``frozenset``) "first" has no meaning and the links are read in
    fast_align's own order, sorted by ``(j, i)``.

    Verified against SPEC §12 example 5: links ``0-0 2-1 4-1 2-2 1-3``, 5 tokens → ``[0, 3, 1, -1, 2]``
    (the file line ``0-0 2-1 4-2 1-3``).
    """
    if link_rule not in ("first", "min"):
        raise ConfigError(f"link_rule must be 'first' or 'min', not {link_rule!r}")
    unordered = isinstance(links, (set, frozenset))
    links = check_links(links, src_len)
    if unordered:
        links.sort(key=lambda l: (l[1], l[0]))
    t: dict[int, int] = {}
    for i, j in links:
        if i not in t:
            t[i] = j
        elif link_rule == "min" and j < t[i]:
            t[i] = j
    aligned = sorted(t, key=lambda i: (t[i], i))  # stable in source order
    p = [-1] * src_len
    for rank, i in enumerate(aligned):
        p[i] = rank
    return p


def reordered_order(links: Iterable[Link], src_len: int, *,
                    unaligned: Literal["drop", "keep"] = "drop",
                    link_rule: Literal["first", "min"] = "first") -> list[int]:
    """The source indices of the 2PT "En_reordered" sentence (SPEC §6.5), in output order.

    Aligned tokens are sorted as in :func:`dpe_targets`. ``unaligned='drop'`` leaves unaligned tokens out
    (the paper's example and script; the result is then not a permutation). ``'keep'`` keeps each one
    right after its nearest aligned left neighbour (after earlier unaligned tokens attached there);
    tokens before the first aligned token travel in front of it (lader attach-left style). With no
    aligned token at all, 'keep' returns the identity.
    """
    if unaligned not in ("drop", "keep"):
        raise ConfigError(f"unaligned must be 'drop' or 'keep', not {unaligned!r}")
    p = dpe_targets(links, src_len, link_rule=link_rule)
    aligned = sorted((i for i in range(src_len) if p[i] >= 0), key=lambda i: p[i])
    if unaligned == "drop":
        return aligned
    if not aligned:
        return list(range(src_len))
    leading: list[int] = []
    after: dict[int, list[int]] = {i: [] for i in aligned}
    anchor = None
    for i in range(src_len):
        if p[i] >= 0:
            anchor = i
        elif anchor is None:
            leading.append(i)
        else:
            after[anchor].append(i)
    # leading unaligned tokens travel in front of the first aligned token of the source sentence
    first_src_aligned = min(aligned)
    out: list[int] = []
    for i in aligned:
        if i == first_src_aligned:
            out.extend(leading)
        out.append(i)
        out.extend(after[i])
    return out


def reordered_source(tokens: Sequence[str], links: Iterable[Link], *,
                     unaligned: Literal["drop", "keep"] = "drop",
                     link_rule: Literal["first", "min"] = "first") -> list[str]:
    """The 2PT reordered source tokens (SPEC §6.5); see :func:`reordered_order`.

    Example (SPEC §6.5): "mr hän@@ sch represented you on this occasion ." with 'drop' loses the
    unaligned "on" and "occasion".
    """
    order = reordered_order(links, len(tokens), unaligned=unaligned, link_rule=link_rule)
    return [tokens[i] for i in order]


def format_dpe_line(targets: Sequence[int]) -> str:
    """A DPE targets line: ``i-p(i)`` pairs in target order, unaligned tokens omitted (SPEC §12 example 5)."""
    return " ".join(f"{i}-{t}" for t, i in sorted((t, i) for i, t in enumerate(targets) if t >= 0))


def subword_dpe_targets(alignment: Alignment, src_word_of: Sequence[int]) -> list[int]:
    """DPE targets over subword tokens from a *word* alignment: each word link becomes the links of all the source
    word's pieces (SPEC §8.3), then :func:`dpe_targets` over the pieces (the paper aligns BPE tokens, SPEC §6.2).
    Target words stay whole: the targets only order target positions."""
    m = max((j for _, j in alignment.possible), default=-1) + 1
    sub = subword_alignment_from_word(alignment, src_word_of, list(range(m)))
    return dpe_targets(sorted(sub.possible, key=lambda link: (link[1], link[0])), len(src_word_of))
