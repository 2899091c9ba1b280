"""Line readers shared by every format: streaming, strict UTF-8, errors with file and line.

Tokens are separated by ASCII space (U+0020) only. Other whitespace, e.g. the ideographic space U+3000
that the Japanese gold text uses as a token, is *not* a separator (SPEC §8.2, data PROVENANCE).
"""

from __future__ import annotations

import io
import os
import sys
from typing import Iterator

from xlpe.errors import FormatError


def tokenize(line: str) -> list[str]:
    """Split a pre-tokenised sentence on ASCII spaces, dropping empty strings (runs of spaces)."""
    return [t for t in line.split(" ") if t]


def _open(path: str | os.PathLike):
    if os.fspath(path) == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict", newline=None), False
    try:
        return open(path, "r", encoding="utf-8", errors="strict", newline=None), True
    except FileNotFoundError:
        raise FormatError("file not found", path) from None
    except IsADirectoryError:
        raise FormatError("is a directory", path, expected="a text file") from None


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` with 1-based line numbers and the line ending removed.

    Streams the file (memory does not grow with its size). Invalid UTF-8 raises :class:`FormatError`
    naming the line. A trailing ``\\r`` (CRLF files) is removed. ``path='-'`` reads standard input.
    """
    f, close = _open(path)
    name = "<stdin>" if os.fspath(path) == "-" else os.fspath(path)
    lineno = 0
    try:
        while True:
            try:
                raw = f.readline()
            except UnicodeDecodeError as e:
                raise FormatError(f"invalid UTF-8 ({e.reason} at byte {e.start} of the decoded chunk)",
                                  name, lineno + 1, "UTF-8 text") from None
            if not raw:
                return
            lineno += 1
            yield lineno, raw.rstrip("\n").rstrip("\r")
    finally:
        if close:
            f.close()


def read_sentences(path: str | os.PathLike, *, allow_empty: bool = False) -> Iterator[list[str]]:
    """Yield the tokens of each line; an empty line is an error unless ``allow_empty``."""
    for lineno, text in read_lines(path):
        toks = tokenize(text)
        if not toks and not allow_empty:
            raise FormatError("empty line", path, lineno, "a sentence of at least one token")
        yield toks


def count_lines(path: str | os.PathLike) -> int:
    """Number of lines in a file (binary scan, fast)."""
    n = 0
    last = b"\n"
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (0 if last == b"\n" else 1)
