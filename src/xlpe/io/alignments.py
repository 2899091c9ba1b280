"""Word alignments in Pharaoh / "talp" form, and lader's ``SRCLEN-TRGLEN ||| links`` form.

A line holds space-separated links: ``i-j`` is a *sure* link, ``ipj`` or ``i?j`` a *possible* one
(SPEC §8.2). Inside xlpe every index is 0-based; the index base of a file is an explicit argument of
every reader and writer, and readers given the sentence lengths refuse indices out of range, with a
hint when the file looks like it has the other base (the cause of silently wrong AER in practice,
SPEC §9.1).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

from xlpe.errors import FormatError
from xlpe.io.atomic import atomic_write
from xlpe.io.text import read_lines

Link = tuple[int, int]

_LINK = re.compile(r"(\d+)([-p?])(\d+)", re.ASCII)     # ASCII digits only: int() also reads "٣"


@dataclass(frozen=True)
class Alignment:
    """One sentence pair's links, 0-based. ``sure ⊆ possible`` always holds (Och & Ney).

    ``possible`` is the set P of all links (sure and possible-only); ``sure`` is S.
    """

    sure: frozenset = field(default_factory=frozenset)
    possible: frozenset = field(default_factory=frozenset)

    def __post_init__(self):
        s = frozenset(self.sure)
        object.__setattr__(self, "sure", s)
        object.__setattr__(self, "possible", frozenset(self.possible) | s)

    @classmethod
    def from_links(cls, links: Iterable[Link]) -> "Alignment":
        """All links sure (tool output)."""
        return cls(sure=frozenset((int(i), int(j)) for i, j in links))

    @property
    def links(self) -> frozenset:
        """All links (P)."""
        return self.possible

    @property
    def possible_only(self) -> frozenset:
        return self.possible - self.sure

    def reversed(self) -> "Alignment":
        """Swap source and target sides."""
        return Alignment(frozenset((j, i) for i, j in self.sure), frozenset((j, i) for i, j in self.possible))

    def __len__(self) -> int:
        return len(self.possible)


def parse_alignment_line(text: str, index_base: int, *, path=None, lineno=None,
                         src_len: int | None = None, tgt_len: int | None = None,
                         extra_sep: str | None = None) -> Alignment:
    """Parse one Pharaoh line into a 0-based :class:`Alignment`.

    Args:
        text: the line, e.g. ``"0-0 1p2 2?1"``.
        index_base: 0 or 1, the base the *file* uses.
        src_len, tgt_len: sentence lengths; when given, every index must be inside them.
        extra_sep: accept ``i-j-P`` style possible links (DeNero's format) when ``"-P"`` given.
    """
    if index_base not in (0, 1):
        raise ValueError(f"index_base must be 0 or 1, not {index_base!r}")
    sure, poss = set(), set()
    for tok in text.split():
        kind = "-"
        if extra_sep and tok.endswith(extra_sep):
            tok, kind = tok[: -len(extra_sep)], "p"
        m = _LINK.fullmatch(tok)
        if not m:
            raise FormatError(f"link {tok!r} is malformed", path, lineno,
                              "links 'i-j' (sure), 'ipj' or 'i?j' (possible) with integers i, j")
        i, sep, j = int(m.group(1)) - index_base, m.group(2), int(m.group(3)) - index_base
        if kind == "-":
            kind = sep
        if i < 0 or j < 0:
            hint = " — the file looks 0-based; read it with index base 0" if index_base == 1 else ""
            raise FormatError(f"link {tok!r} has a negative index after removing index base {index_base}{hint}",
                              path, lineno, f"indices >= {index_base}")
        for idx, n, side in ((i, src_len, "source"), (j, tgt_len, "target")):
            if n is not None and idx >= n:
                hint = (" — the file looks 1-based; read it with index base 1"
                        if index_base == 0 and idx == n else "")
                raise FormatError(f"link {tok!r}: {side} index {idx + index_base} is beyond the {side} sentence "
                                  f"of {n} tokens (index base {index_base}){hint}", path, lineno,
                                  f"{side} indices in [{index_base}, {n - 1 + index_base}]")
        (sure if kind == "-" else poss).add((i, j))
    return Alignment(frozenset(sure), frozenset(poss))


def format_alignment(a: Alignment | Iterable[Link], index_base: int = 0, *, possible: bool = True) -> str:
    """Render links sorted by (i, j): sure as ``i-j``, possible-only as ``ipj`` (when ``possible``)."""
    if not isinstance(a, Alignment):
        a = Alignment.from_links(a)
    b = index_base
    out = []
    for i, j in sorted(a.possible):
        sep = "-" if (i, j) in a.sure or not possible else "p"
        out.append(f"{i + b}{sep}{j + b}")
    return " ".join(out)


class BaseCheck:
    """Accumulates evidence about a file's index base across lines (SPEC §8.2 heuristic).

    With base 0, a real alignment file uses index 0 (a link on either side's first word) in nearly every
    sentence; a file in which 10 non-empty lines never do is most likely 1-based (below 10 lines the evidence is
    too thin to refuse). With known sentence lengths, an index equal to a length is caught per line
    (:func:`parse_alignment_line`).
    """

    def __init__(self, index_base: int, min_lines: int = 10):
        self.index_base, self.min_lines = index_base, min_lines
        self.lines, self.saw_zero, self.nonempty = 0, False, 0

    def update(self, a: Alignment) -> None:
        self.lines += 1
        if a.possible:
            self.nonempty += 1
            if not self.saw_zero and any(i == 0 or j == 0 for i, j in a.possible):
                self.saw_zero = True

    def suspicious(self) -> str | None:
        if self.index_base == 0 and self.nonempty >= self.min_lines and not self.saw_zero:
            return (f"no link uses index 0 in {self.nonempty} non-empty lines read with index base 0: "
                    f"the file is most likely 1-based (use index base 1)")
        return None


def read_alignments(path: str | os.PathLike, index_base: int, *,
                    lengths: Iterable[tuple[int, int]] | None = None,
                    check_base: bool = True, extra_sep: str | None = None) -> Iterator[Alignment]:
    """Stream 0-based alignments from a Pharaoh file.

    Args:
        index_base: the file's base (0 for tool output, 1 for most gold sets).
        lengths: optional iterable of ``(src_len, tgt_len)`` per line (e.g. from the bitext); indices are
            validated against them, and the line counts must match.
        check_base: after the file, raise if the base looks wrong (see :class:`BaseCheck`).
    """
    check = BaseCheck(index_base)
    lens_it = iter(lengths) if lengths is not None else None
    lineno = 0
    for lineno, text in read_lines(path):
        sl = tl = None
        if lens_it is not None:
            try:
                sl, tl = next(lens_it)
            except StopIteration:
                raise FormatError("alignment file has more lines than the bitext", path, lineno,
                                  "one alignment line per sentence pair") from None
        a = parse_alignment_line(text, index_base, path=path, lineno=lineno, src_len=sl, tgt_len=tl,
                                 extra_sep=extra_sep)
        check.update(a)
        yield a
    if lens_it is not None and next(lens_it, None) is not None:
        raise FormatError(f"alignment file ends after {lineno} lines but the bitext has more", path, lineno + 1,
                          "one alignment line per sentence pair")
    if check_base and (msg := check.suspicious()):
        raise FormatError(msg, path, expected="index base 1, or check_base=False / --no-base-check if 0-based is right")


def write_alignments(path: str | os.PathLike, alignments: Iterable[Alignment | Iterable[Link]],
                     index_base: int = 0, *, possible: bool = True) -> int:
    """Write one line per sentence pair atomically; returns the number of lines."""
    n = 0
    with atomic_write(path) as f:
        for a in alignments:
            f.write(format_alignment(a, index_base, possible=possible) + "\n")
            n += 1
    return n


# --- lader: "SRCLEN-TRGLEN ||| i-j i-j ..." (0-based) -------------------------------------------

def parse_lader_line(text: str, *, path=None, lineno=None) -> tuple[int, int, Alignment]:
    """Parse a lader alignment line ``SRCLEN-TRGLEN ||| i-j ...`` (0-based, SPEC §5.2)."""
    head, sep, rest = text.partition("|||")
    m = re.fullmatch(r"\s*(\d+)-(\d+)\s*", head, re.ASCII)
    if not sep or not m:
        raise FormatError("malformed lader alignment line", path, lineno, "'SRCLEN-TRGLEN ||| i-j i-j ...'")
    sl, tl = int(m.group(1)), int(m.group(2))
    a = parse_alignment_line(rest, 0, path=path, lineno=lineno, src_len=sl, tgt_len=tl)
    return sl, tl, a


def format_lader_line(src_len: int, tgt_len: int, a: Alignment | Iterable[Link]) -> str:
    return f"{src_len}-{tgt_len} ||| " + format_alignment(a, 0, possible=False)


def read_lader_alignments(path: str | os.PathLike, *,
                          src_lengths: Iterable[int] | None = None) -> Iterator[tuple[int, int, Alignment]]:
    """Stream ``(src_len, tgt_len, alignment)``; with ``src_lengths`` (token counts of the source text),
    a header length that disagrees with the text is an error naming the line."""
    it = iter(src_lengths) if src_lengths is not None else None
    for lineno, text in read_lines(path):
        sl, tl, a = parse_lader_line(text, path=path, lineno=lineno)
        if it is not None:
            n = next(it, None)
            if n is None:
                raise FormatError("alignment file has more lines than the source text", path, lineno)
            if n != sl:
                raise FormatError(f"header says the source has {sl} words but the source text line has {n}",
                                  path, lineno, "SRCLEN equal to the token count of the source line")
        yield sl, tl, a


