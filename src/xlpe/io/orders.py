"""Reorderings: lader ``order`` lines and their inverse, the cross-lingual positions ``pos_XL``.

An *order* line holds a permutation ``o`` of ``0..n-1`` where ``o[j]`` is the original index of the token
placed at reordered position ``j`` (lader ``-out_format order``; ``reordered[j] = x[o[j]]``). Its
inverse ``pos_XL[o[j]] = j`` tells each source token its position in the target-like sentence
(SPEC §4.1; e.g. ``o = [2,3,1,0]`` gives ``pos_XL = [3,2,0,1]``).
"""

from __future__ import annotations

import os
from typing import Iterable, Iterator, Sequence

import numpy as np

from xlpe.errors import FormatError
from xlpe.io.atomic import write_lines
from xlpe.io.text import read_lines


def is_permutation(order: Sequence[int]) -> bool:
    n = len(order)
    seen = np.zeros(n, dtype=bool)
    for v in order:
        if not (0 <= v < n) or seen[v]:
            return False
        seen[v] = True
    return True


def invert_order(order: Sequence[int]) -> list[int]:
    """``pos_XL``: the inverse permutation, ``inv[order[j]] = j`` (SPEC §4.1).

    Example (SPEC §12.3): ``invert_order([2, 3, 1, 0]) == [3, 2, 0, 1]``.

    Raises:
        FormatError: ``order`` is not a permutation of ``0..n-1``.
    """
    o = np.asarray(order, dtype=np.int64).reshape(-1)
    n = len(o)
    if n and (o.min() < 0 or o.max() >= n or len(np.unique(o)) != n):
        raise FormatError(f"order {list(order)[:20]} is not a permutation", expected=f"each of 0..{n - 1} once")
    inv = np.empty_like(o)
    inv[o] = np.arange(len(o), dtype=np.int64)
    return inv.tolist()


def apply_order(tokens: Sequence, order: Sequence[int]) -> list:
    """The reordered sentence, ``reordered[j] = tokens[order[j]]`` (lader ``string`` output)."""
    return [tokens[k] for k in order]


def parse_order_line(text: str, *, path=None, lineno=None, length: int | None = None) -> list[int]:
    """Parse and validate one order line (0-based, space-separated permutation)."""
    toks = text.split()
    if not all(t.isascii() and t.isdigit() for t in toks):      # int() also reads "+1", "1_0" and "٣"
        raise FormatError("order line has a non-integer entry", path, lineno,
                          "space-separated 0-based integers")
    order = [int(t) for t in toks]
    if length is not None and len(order) != length:
        raise FormatError(f"order has {len(order)} entries but the sentence has {length} tokens", path, lineno,
                          f"a permutation of 0..{length - 1}")
    if not is_permutation(order):
        raise FormatError("order line is not a permutation", path, lineno,
                          f"each of 0..{len(order) - 1} exactly once")
    return order


def read_orders(path: str | os.PathLike, *, lengths: Iterable[int] | None = None) -> Iterator[list[int]]:
    """Stream validated orders; with ``lengths`` (token counts per sentence) the counts must match."""
    it = iter(lengths) if lengths is not None else None
    lineno = 0
    for lineno, text in read_lines(path):
        n = None
        if it is not None:
            n = next(it, None)
            if n is None:
                raise FormatError("order file has more lines than the text", path, lineno,
                                  "one order line per sentence")
        yield parse_order_line(text, path=path, lineno=lineno, length=n)
    if it is not None and next(it, None) is not None:
        raise FormatError(f"order file ends after {lineno} lines but the text has more", path, lineno + 1,
                          "one order line per sentence")


def format_order(order: Sequence[int]) -> str:
    return " ".join(str(int(v)) for v in order)


def write_orders(path: str | os.PathLike, orders: Iterable[Sequence[int]]) -> int:
    """Write orders atomically, validating each is a permutation."""
    def lines():
        for k, o in enumerate(orders, 1):
            if not is_permutation(o):
                raise FormatError("not a permutation", path, k, "a permutation of 0..n-1")
            yield format_order(o)
    return write_lines(path, lines())
