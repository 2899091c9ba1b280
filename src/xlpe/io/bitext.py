"""Parallel text: two line-aligned files, or one ``src ||| tgt`` file (fast_align / eflomal style).

One sentence per line, UTF-8, tokens separated by ASCII space (see :func:`xlpe.io.text.tokenize`).
"""

from __future__ import annotations

import os
from itertools import zip_longest
from typing import Iterable, Iterator

from xlpe.errors import FormatError
from xlpe.io.atomic import atomic_write
from xlpe.io.text import read_lines, tokenize

SEPARATOR = " ||| "

_END = object()


def read_bitext(src_path: str | os.PathLike, tgt_path: str | os.PathLike, *,
                allow_empty: bool = False) -> Iterator[tuple[list[str], list[str]]]:
    """Stream ``(src_tokens, tgt_tokens)`` pairs from two line-aligned files.

    Raises :class:`FormatError` when one file ends before the other (naming both files and the line
    where they part), or on an empty sentence unless ``allow_empty``.
    """
    for a, b in zip_longest(read_lines(src_path), read_lines(tgt_path), fillvalue=_END):
        if a is _END or b is _END:
            short, long_, (lineno, _) = ((src_path, tgt_path, b) if a is _END else (tgt_path, src_path, a))
            raise FormatError(f"{os.fspath(short)} has {lineno - 1} lines but {os.fspath(long_)} has more",
                              long_, lineno, "line-aligned files with equal line counts")
        (ln, s), (_, t) = a, b
        st, tt = tokenize(s), tokenize(t)
        if not allow_empty:
            if not st:
                raise FormatError("empty source sentence", src_path, ln, "at least one token")
            if not tt:
                raise FormatError("empty target sentence", tgt_path, ln, "at least one token")
        yield st, tt


def parse_joint_line(text: str, path=None, lineno=None, *, allow_empty: bool = False) -> tuple[list[str], list[str]]:
    """Split one ``src ||| tgt`` line. The separator needs its spaces (``a ||| b``)."""
    parts = text.split(" ||| ")
    if len(parts) != 2 or text.count("|||") != 1:      # "a |||b ||| c": a token holding '|||' is ambiguous
        # tolerate a missing space at the ends: "a |||" / "||| b" for empty sides
        if text.endswith(" |||") and text.count("|||") == 1:
            parts = [text[:-4], ""]
        elif text.startswith("||| ") and text.count("|||") == 1:
            parts = ["", text[4:]]
        else:
            n = text.count("|||")
            raise FormatError(f"found {n} '|||' separators" if n != 1 else "separator '|||' without surrounding spaces",
                              path, lineno, "exactly one ' ||| ' between source and target")
    st, tt = tokenize(parts[0]), tokenize(parts[1])
    if not allow_empty and (not st or not tt):
        side = "source" if not st else "target"
        raise FormatError(f"empty {side} sentence", path, lineno, "at least one token on each side")
    return st, tt


def read_joint_bitext(path: str | os.PathLike, *, allow_empty: bool = False) -> Iterator[tuple[list[str], list[str]]]:
    """Stream pairs from a single ``src ||| tgt`` file."""
    for lineno, text in read_lines(path):
        yield parse_joint_line(text, path, lineno, allow_empty=allow_empty)


def format_joint_line(src: list[str], tgt: list[str]) -> str:
    return " ".join(src) + SEPARATOR + " ".join(tgt)


def _check_tokens(tokens: list[str], where: str) -> None:
    for t in tokens:
        if not t or " " in t or "\n" in t:
            raise FormatError(f"token {t!r} cannot be written", where,
                              expected="non-empty tokens without ASCII space or newline")


def write_bitext(src_path: str | os.PathLike, tgt_path: str | os.PathLike,
                 pairs: Iterable[tuple[list[str], list[str]]]) -> int:
    """Write pairs to two files atomically (both appear, or neither). Returns the number of pairs."""
    n = 0
    with atomic_write(src_path) as fs, atomic_write(tgt_path) as ft:
        for s, t in pairs:
            _check_tokens(s, os.fspath(src_path))
            _check_tokens(t, os.fspath(tgt_path))
            fs.write(" ".join(s) + "\n")
            ft.write(" ".join(t) + "\n")
            n += 1
    return n


def write_joint_bitext(path: str | os.PathLike, pairs: Iterable[tuple[list[str], list[str]]]) -> int:
    n = 0
    with atomic_write(path) as f:
        for s, t in pairs:
            _check_tokens(s, os.fspath(path))
            _check_tokens(t, os.fspath(path))
            if "|||" in s or "|||" in t:
                raise FormatError("the token '|||' cannot be written to a joint bitext", path, n + 1,
                                  "two separate files for text containing '|||'")
            f.write(format_joint_line(s, t) + "\n")
            n += 1
    return n
