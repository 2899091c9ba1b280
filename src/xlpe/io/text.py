"""Line readers shared by every format: streaming, strict UTF-8, errors with file and line.

Tokens are separated by ASCII space (U+0020) only. Other whitespace, e.g. the ideographic space U+3000
that the Japanese gold text uses as a token, is *not* a separator (SPEC §8.2, data PROVENANCE).
"""

from __future__ import annotations

import hashlib
import os
import sys
from typing import Iterator

from xlpe.errors import FormatError


def tokenize(line: str) -> list[str]:
    """Split a pre-tokenised sentence on ASCII spaces, dropping empty strings (runs of spaces)."""
    toks = line.split(" ")
    return [t for t in toks if t] if "" in toks else toks   # the filter only when needed (aligner hot path)


def open_input(path: str | os.PathLike, mode: str = "rb", *, expected: str = "a text file",
               missing: str = "file not found", **kwargs):
    """Open a file for reading; a missing path or a directory raises :class:`FormatError` naming the path
    (the one place every reader's opening errors are worded)."""
    try:
        return open(path, mode, **kwargs)
    except FileNotFoundError:
        raise FormatError(missing, path) from None
    except IsADirectoryError:
        raise FormatError("is a directory", path, expected=expected) from None


def file_sha256(path: str | os.PathLike) -> str:
    """The SHA-256 hex digest of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open_input(path) as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def read_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` with 1-based line numbers and the line ending removed.

    Streams the file (memory does not grow with its size). Lines are decoded one by one, so invalid
    UTF-8 raises :class:`FormatError` naming the exact line. ``\r\n`` endings are accepted, and a leading UTF-8
    byte-order mark is dropped.
    ``path='-'`` reads standard input.
    """
    stdin = os.fspath(path) == "-"
    name = "<stdin>" if stdin else os.fspath(path)
    if stdin:
        f, close = sys.stdin.buffer, False
    else:
        f, close = open_input(path), True
    try:
        for lineno, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(f"invalid UTF-8 at byte {e.start} of the line", name, lineno,
                                  "UTF-8 text") from None
            if lineno == 1 and text.startswith("\ufeff"):     # a UTF-8 byte-order mark is not part of the text
                text = text[1:]
            if text.endswith("\n"):
                text = text[:-1]
            if text.endswith("\r"):
                text = text[:-1]
            yield lineno, text
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
    with open_input(path) as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            n += chunk.count(b"\n")
            last = chunk[-1:]
    return n + (0 if last == b"\n" else 1)
