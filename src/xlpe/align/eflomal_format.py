"""eflomal's side of the alignment pipeline: the one import of the optional GPL package
(:func:`import_eflomal`), tokens as eflomal sees them, the numeric text files it reads, the link lines it writes
(parsed in vectorised batches), input read in blocks, eflomal's output read back in batches (symmetrised) and
per pair, and the result types."""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import math
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from xlpe.align.symmetrize import csr_links, symmetrize_batch
from xlpe.data.subword import word_alignment_from_subword
from xlpe.errors import ConfigError, FormatError, XlpeError
from xlpe.io.alignments import Alignment
from xlpe.io.process import child_dies_with_parent
from xlpe.io.text import open_input

Words = Sequence[str]
Pair = tuple  # (lineno or index, src words | str, tgt words | str, error | None)

# --- the optional GPL package ------------------------------------------------------------------------

INSTALL_HINT = "pip install 'xlpe[eflomal]' (GPLv3)"


def import_eflomal():
    """Import eflomal lazily, with an install hint when it is missing."""
    try:
        import eflomal  # noqa: F401  (GPLv3, optional)
        import eflomal.cython  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"the eflomal aligner needs the optional package eflomal: {INSTALL_HINT} "
                          f"[import failed: {e}]") from None
    runner = getattr(eflomal.cython, "subprocess", None)
    if runner is subprocess and child_dies_with_parent() is not None:
        eflomal.cython.subprocess = _ChildDiesWithParent()
    return eflomal


class _ChildDiesWithParent:
    """Stands in for :mod:`subprocess` inside ``eflomal.cython``, whose ``align`` runs the eflomal binary with
    ``subprocess.run`` and no way to pass options: the binary then dies with the process that started it, even
    when that one is killed by SIGKILL (otherwise it would go on at 100% CPU for nothing). Everything else is
    :mod:`subprocess` itself."""

    _SPAWN = ("run", "call", "check_call", "check_output", "Popen")

    def __getattr__(self, name):
        attr = getattr(subprocess, name)
        if name in self._SPAWN:
            return functools.partial(attr, preexec_fn=child_dies_with_parent())
        return attr


def eflomal_available() -> bool:
    """True when the optional ``eflomal`` package can be imported."""
    try:
        import_eflomal()
        return True
    except ConfigError:
        return False


# --- tokens as eflomal sees them --------------------------------------------------------------------

_NEEDS_ESCAPE = re.compile(r"[\s\\]")


def _escape_ws(m: re.Match) -> str:
    c = m.group(0)
    return "\\\\" if c == "\\" else f"\\u{ord(c):04x}"


def eflomal_token(tok: str) -> str:
    """A token as written to eflomal and its priors file: no whitespace inside (eflomal's priors code splits
    lines on any whitespace and separates fields with tabs). Injective: backslashes are doubled, each
    whitespace character becomes ``\\uXXXX``, the empty string ``\\_`` and eflomal's keyword ``<NULL>``
    becomes ``\\<NULL>``. Most tokens come back unchanged."""
    if _NEEDS_ESCAPE.search(tok):
        return _NEEDS_ESCAPE.sub(_escape_ws, tok)
    if not tok:
        return "\\_"
    if tok == "<NULL>":
        return "\\<NULL>"
    return tok


# --- results --------------------------------------------------------------------------------------------

@dataclass
class AlignResult:
    """Alignments of a bitext held in memory; one entry per input sentence pair.

    ``forward``/``reverse`` are the directional alignments in source–target orientation. With subword
    alignment they are converted like ``alignments`` (words, "any" rule) unless ``subword_output``.
    ``scores_forward``/``scores_reverse`` are eflomal's per-sentence scores (``None`` unless requested;
    ``nan`` for skipped pairs); lower means more probable (on a synthetic corpus, parallel pairs score about
    1.8 and shuffled ones about 10), so they can rank pairs for filtering. eflomal gives no per-link scores.
    ``skipped`` lists ``(index, reason)`` with 0-based pair indices; a skipped pair has empty alignments.
    """

    alignments: list[Alignment]
    forward: list[Alignment]
    reverse: list[Alignment]
    scores_forward: list[float] | None = None
    scores_reverse: list[float] | None = None
    skipped: list[tuple[int, str]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.alignments)


@dataclass
class Item:
    index: int                      # 0-based pair index
    src: list[str] | None = None    # eflomal tokens (normalised, segmented, escaped); None when skipped
    tgt: list[str] | None = None
    src_word_of: Sequence[int] | None = None
    tgt_word_of: Sequence[int] | None = None
    skip: str | None = None         # reason when skipped


@dataclass
class Out:
    index: int
    alignment: Alignment
    forward: Alignment
    reverse: Alignment
    score_f: float = math.nan
    score_r: float = math.nan
    skip: str | None = None


EMPTY = Alignment()


def vocab_ids(vocab: dict[str, int], words: list[str]) -> list[int]:
    """Vocabulary ids of ``words``, adding new words (ids in order of first occurrence, as eflomal)."""
    ids = list(map(vocab.get, words))
    if None in ids:
        for k, w in enumerate(words):
            if ids[k] is None:
                ids[k] = vocab.setdefault(w, len(vocab))
    return ids


@dataclass
class Batch:
    """Results for the consecutive pairs ``start .. start + n - 1`` of one eflomal job. ``fwd``, ``rev`` and
    ``sym`` are CSR link arrays ``(ptr, i, j)`` (:func:`xlpe.align.symmetrize.links_csr`; links sorted by
    ``(i, j)``) over the aligned pairs only, in order; ``ok`` holds their offsets in the batch."""
    start: int
    n: int
    skip: dict[int, str]            # offset in the batch -> reason
    ok: Any                         # numpy array of offsets of the aligned pairs, ascending
    fwd: tuple
    rev: tuple
    sym: tuple
    score_f: list[float] | None = None
    score_r: list[float] | None = None
    items: list[Item] | None = None  # with subwords: the batch's items (their word_of)

    def full(self, csr) -> tuple:
        """``csr`` with an empty row for every skipped pair (one row per pair of the batch)."""
        if not self.skip:
            return csr
        ptr, i, j = csr
        counts = np.zeros(self.n, dtype=np.int64)
        counts[self.ok] = np.diff(ptr)
        full = np.zeros(self.n + 1, dtype=np.int64)
        np.cumsum(counts, out=full[1:])
        return full, i, j


#: byte classes in eflomal's link lines: 1 digit, 2 '-', 3 space or CR, 4 LF, 0 anything else
_LINK_BYTES = np.zeros(256, dtype=np.uint8)
_LINK_BYTES[48:58] = 1
_LINK_BYTES[45] = 2
_LINK_BYTES[[32, 13]] = 3
_LINK_BYTES[10] = 4


def parse_link_lines(lines: list[bytes]):
    """eflomal's link lines (``i-j i-j ...``, raw bytes) -> CSR arrays ``(ptr, i, j)``, links sorted by
    ``(i, j)`` in each line, each link once. Vectorised over the whole batch (about 15–20× faster than
    line by line)."""
    n = len(lines)
    buf = b"".join(lines)
    if buf and not buf.endswith(b"\n"):
        buf += b"\n"
    a = np.frombuffer(buf, dtype=np.uint8)
    cls = _LINK_BYTES[a]
    bad = XlpeError("unexpected eflomal output: link lines should read 'i-j i-j ...'")
    if not cls.all():
        raise bad
    edge = np.diff((cls == 1).view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts, ends = np.flatnonzero(edge == 1), np.flatnonzero(edge == -1)  # of the numbers
    length = ends - starts
    val = a[starts].astype(np.int64) - 48
    sel = np.flatnonzero(length > 1)
    m = 1
    while len(sel):
        val[sel] = val[sel] * 10 + (a[starts[sel] + m] - 48)
        m += 1
        sel = sel[length[sel] > m]
    i, j = val[0::2], val[1::2]
    line = np.searchsorted(np.flatnonzero(cls == 4), starts[0::2])
    if len(starts) != 2 * np.count_nonzero(cls == 2) or (
            len(i) and (line[-1] >= n or np.any(a[starts[1::2] - 1] != 45))):
        raise bad
    key = (line * (int(i.max(initial=0)) + 1) + i) * (int(j.max(initial=0)) + 1) + j
    if len(key) > 1 and not np.all(key[1:] > key[:-1]):  # eflomal writes them sorted already
        order = np.argsort(key, kind="stable")
        key = key[order]
        order = order[np.concatenate(([True], key[1:] != key[:-1]))]  # a repeated link counts once
        i, j, line = i[order], j[order], line[order]
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(line, minlength=n), out=ptr[1:])
    return ptr, i, j


def format_links(csr, index_base: int = 0) -> str:
    """CSR link arrays sorted by ``(i, j)`` -> Pharaoh text, one ``i-j i-j`` line (with ``\\n``) per row,
    as :func:`xlpe.io.alignments.format_alignment` writes each line (all links sure). Each distinct
    (link, last in its line) is formatted once and the text is joined in one go."""
    ptr, i, j = csr
    count = np.diff(ptr)
    if not len(i):
        return "\n" * len(count)
    M = int(j.max()) + 1
    last = np.zeros(len(i), dtype=bool)
    last[ptr[1:][count > 0] - 1] = True
    codes = (i * M + j) * 2 + last
    empty = np.flatnonzero(count == 0)
    if len(empty):
        codes = np.insert(codes, ptr[empty], -1)
    order = np.argsort(codes, kind="stable")
    sc = codes[order]
    first = np.concatenate(([True], sc[1:] != sc[:-1]))
    inverse = np.empty(len(codes), dtype=np.int64)
    inverse[order] = np.cumsum(first) - 1
    b = index_base
    text = np.array([("\n" if c < 0 else f"{(c >> 1) // M + b}-{(c >> 1) % M + b}{chr(10) if c & 1 else ' '}")
                     for c in sc[first].tolist()], dtype=object)
    return "".join(text[inverse].tolist())


class TextWriter:
    """Writes eflomal's numeric text format incrementally (the format of ``eflomal.cython.write_text``:
    a header ``n_sentences vocabulary_size``, then one line ``length id id ...`` per sentence)."""

    def __init__(self, path: str):
        self.path = path
        self.body_path = path + ".body"
        self.body = open(self.body_path, "w", encoding="ascii")
        self.n = 0

    def add(self, ids: list[int]) -> None:
        self.body.write(f"{len(ids)} {' '.join(map(str, ids))}\n")
        self.n += 1

    def add_lines(self, lines: list[str]) -> None:
        """Sentences already formatted as ``length id id ...\\n``."""
        self.body.writelines(lines)
        self.n += len(lines)

    def finish(self, voc_size: int) -> None:
        self.body.close()
        with open(self.path, "w", encoding="ascii") as out, open(self.body_path, "r", encoding="ascii") as b:
            out.write(f"{self.n} {voc_size}\n")
            shutil.copyfileobj(b, out, 1 << 20)
        os.unlink(self.body_path)

    def abort(self) -> None:
        if not self.body.closed:
            self.body.close()


# --- reading input in blocks ---------------------------------------------------------------------------

#: pairs per block when reading input, and per batch when reading eflomal's output
BLOCK = 8192
OUT_BATCH = 4096

# A block is (first line number, sources, targets, where): sources/targets are strings (split on ASCII
# space) or token lists; where is (source path, target path) for the whole block, None (in memory), or a
# list with one (path, path) or FormatError (malformed joint line) per pair.
Block = tuple


def line_blocks(path: str | os.PathLike, block: int | None = None) -> Iterator[list[str]]:
    """The lines of a UTF-8 file in lists of up to ``block`` (default ``BLOCK``), exactly as
    :func:`xlpe.io.text.read_lines` gives them (line ending removed, same errors naming file and line),
    decoded a block at a time."""
    block = block or BLOCK
    name = os.fspath(path)
    with open_input(path) as f:
        lineno = 1
        while True:
            raw = list(itertools.islice(f, block))
            if not raw:
                return
            try:
                text = b"".join(raw).decode("utf-8")
            except UnicodeDecodeError:
                for k, line in enumerate(raw):
                    try:
                        line.decode("utf-8")
                    except UnicodeDecodeError as e:
                        raise FormatError(f"invalid UTF-8 at byte {e.start} of the line", name, lineno + k,
                                          "UTF-8 text") from None
                raise  # pragma: no cover  (a line break never splits a UTF-8 sequence)
            lines = text.split("\n")[:len(raw)]
            if "\r" in text:
                lines = [x[:-1] if x.endswith("\r") else x for x in lines]
            yield lines
            lineno += len(raw)


def pairs_of(blocks: Iterable[Block]) -> Iterator[Pair]:
    """Blocks -> ``(lineno, src, tgt, where)`` pairs (for the per-item path used with subwords)."""
    for lineno, srcs, tgts, where in blocks:
        per = where if isinstance(where, list) else None
        for k, (s, t) in enumerate(zip(srcs, tgts)):
            yield lineno + k, s, t, (per[k] if per is not None else where)


def rechunk(blocks: Iterable[Block], size: int) -> Iterator[list[Block]]:
    """Regroup blocks into lists of blocks holding exactly ``size`` pairs (the last one fewer)."""
    chunk: list[Block] = []
    n = 0
    for lineno, srcs, tgts, where in blocks:
        k = 0
        while k < len(srcs):
            m = min(size - n, len(srcs) - k)
            chunk.append((lineno + k, srcs[k:k + m], tgts[k:k + m],
                          where[k:k + m] if isinstance(where, list) else where))
            n += m
            k += m
            if n == size:
                yield chunk
                chunk, n = [], 0
    if chunk:
        yield chunk


# --- reading eflomal's output ------------------------------------------------------------------------

def read_batches(files: dict[str, str], sym: str, start: int, n_items: int, skipped: list[tuple[int, str]],
                 items: Iterator[Item] | None, bar) -> Iterator[Batch]:
    """eflomal's output of one job (``files``: ``fwd``, ``rev`` and with scores ``sf``, ``sr``) in batches: parsed,
    symmetrised by ``sym`` (:func:`~xlpe.align.symmetrize.symmetrize_batch`) and paired with the input's skipped
    pairs (and, with subwords, its ``items``); the pairs are numbered from ``start``. Updates and closes ``bar``."""
    skip_index = [k for k, _ in skipped]  # ascending
    try:
        with contextlib.ExitStack() as st:
            ff, rf = (st.enter_context(open(files[k], "rb")) for k in ("fwd", "rev"))
            sf, sr = ((st.enter_context(open(files[k], encoding="utf-8")) for k in ("sf", "sr"))
                      if "sf" in files else (None, None))
            k, end, at = start, start + n_items, 0
            while k < end:
                n = min(OUT_BATCH, end - k)
                to = bisect.bisect_left(skip_index, k + n, at)
                skip = {skipped[x][0] - k: skipped[x][1] for x in range(at, to)}
                at = to
                ok = np.arange(n)
                if skip:
                    ok = np.setdiff1d(ok, np.fromiter(skip, dtype=np.int64, count=len(skip)))
                fl, rl = list(itertools.islice(ff, len(ok))), list(itertools.islice(rf, len(ok)))
                if len(fl) < len(ok) or len(rl) < len(ok):
                    raise XlpeError("eflomal wrote fewer alignment lines than it was given sentences")
                fwd, rev = parse_link_lines(fl), parse_link_lines(rl)
                a = fwd if sym == "forward" else rev if sym == "reverse" else symmetrize_batch(fwd, rev, sym)
                b = Batch(k, n, skip, ok, fwd, rev, a)
                if sf is not None:
                    b.score_f = [float(x) for x in itertools.islice(sf, len(ok))]
                    b.score_r = [float(x) for x in itertools.islice(sr, len(ok))]
                if items is not None:
                    b.items = list(itertools.islice(items, n))
                yield b
                if bar is not None:
                    bar.update(n)
                k += n
    finally:
        if bar is not None:
            bar.close()


def pair_results(batches: Iterable[Batch], to_words: bool, directions: bool = True) -> Iterator[Out]:
    """Per-pair results (:class:`Alignment` objects; ``to_words``: the batches' piece links converted to word
    links by their items' maps). Without ``directions`` only ``alignment`` is set (``forward``/``reverse`` are
    left empty)."""
    for b in batches:
        if directions:
            fw, rv = csr_links(b.fwd), csr_links(b.rev)
            sy = fw if b.sym is b.fwd else rv if b.sym is b.rev else csr_links(b.sym)
        else:
            sy = csr_links(b.sym)
        m = 0
        for off in range(b.n):
            if off in b.skip:
                yield Out(b.start + off, EMPTY, EMPTY, EMPTY, skip=b.skip[off])
                continue
            if directions:
                fa, ra = Alignment(fw[m]), Alignment(rv[m])
                a = fa if sy is fw else ra if sy is rv else Alignment(sy[m])
            else:
                a, fa, ra = Alignment(sy[m]), EMPTY, EMPTY
            if to_words:
                it = b.items[off]
                a = word_alignment_from_subword(a, it.src_word_of, it.tgt_word_of)
                if directions:
                    fa = word_alignment_from_subword(fa, it.src_word_of, it.tgt_word_of)
                    ra = word_alignment_from_subword(ra, it.src_word_of, it.tgt_word_of)
            o = Out(b.start + off, a, fa, ra)
            if b.score_f is not None:
                o.score_f, o.score_r = b.score_f[m], b.score_r[m]
            m += 1
            yield o


def collect(outs: Iterable[Out]) -> AlignResult:
    """The per-pair results of a bitext held in memory, gathered."""
    al, fw, rv, sf, sr, sk = [], [], [], [], [], []
    for o in outs:
        al.append(o.alignment)
        fw.append(o.forward)
        rv.append(o.reverse)
        sf.append(o.score_f)
        sr.append(o.score_r)
        if o.skip:
            sk.append((o.index, o.skip))
    has_scores = any(not math.isnan(x) for x in sf)
    return AlignResult(al, fw, rv, sf if has_scores else None, sr if has_scores else None, sk)
