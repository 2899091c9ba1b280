"""Statistical word alignment with eflomal (Östling & Tiedemann 2016), plus symmetrisation.

eflomal is GPLv3 and optional: it is imported lazily, only here, and only when an alignment actually runs
(``pip install 'xlpe[eflomal]'``). xlpe talks to eflomal through its public Python API:
``eflomal.cython.align`` (which runs the bundled ``eflomal`` sampler binary), ``calculate_priors``,
``write_priors``, ``read_priors`` and ``to_eflomal_priors_file``. xlpe does its own tokenisation (ASCII space
only, :func:`xlpe.io.text.tokenize`) and vocabulary indexing and writes eflomal's numeric text format itself,
so that

* a token such as the ideographic space U+3000 stays a token (eflomal's ``read_text`` and
  ``calculate_priors`` split on any whitespace, which would shift every later index of that line);
* lowercasing is a real option (``eflomal.Aligner`` always lowercases);
* the Python side streams: memory does not grow with the corpus except for the vocabularies.

What eflomal gives and what it does not
    * Links in both directions. ``forward`` has at most one source word per target word, ``reverse`` at most
      one target word per source word; both files are written in source–target orientation.
    * Per-sentence scores (``-F``/``-R``: eflomal's score of the target given the source, resp. the
      reverse, under ``score_model``; lower is better). **No per-link scores or posteriors**: eflomal's
      output is the final argmax sample, so :class:`AlignResult` exposes sentence scores only.
    * **No random seed.** eflomal 2.0 seeds its sampler from ``/dev/urandom`` and has no option to set the
      seed; runs therefore differ slightly. ``seed`` is accepted for interface symmetry with the other
      aligners, stored in the saved metadata, and a warning says it cannot be honoured.
    * eflomal silently outputs an empty alignment for a sentence of 1024 tokens or more
      (:data:`EFLOMAL_MAX_LEN`). xlpe refuses such a line (or skips it with ``skip_bad``).
    * Default iterations depend on the corpus size (eflomal: about ``5000/sqrt(n_sentences)`` for the last
      model, a quarter of that for the earlier ones, times ``rel_iterations``).

Memory and the joint sampler
    eflomal's Gibbs sampler needs the whole corpus in memory at once (in the C process, about 10–20 bytes
    per token plus the lexical tables), and its quality depends on seeing the whole corpus: the lexical
    statistics of a sentence come from all the others. So :meth:`EflomalAligner.fit` (and any alignment
    without ``chunk_size``) runs one eflomal job over everything. What xlpe avoids is *Python*-side growth:
    inputs are read in blocks of lines and written to eflomal's format incrementally (once; with subwords a
    file is read a second time to pair lines with links), and eflomal's outputs are parsed, symmetrised
    (:func:`xlpe.align.symmetrize.symmetrize_batch`) and written in vectorised batches of ``_OUT_BATCH``
    pairs. For corpora too large for one job, fit priors on a sample that fits, then align everything else
    with those priors in chunks (``chunk_size``): each chunk is a separate small eflomal job whose
    lexical, jump and fertility distributions are anchored by the priors, so chunks align consistently.
    Without priors, chunking is allowed but each chunk only learns from itself (a warning says so).

Typical use::

    al = EflomalAligner(sym="grow-diag-final-and", lowercase=True)
    al.fit(big_src, big_tgt)           # joint run over the corpus; keeps priors
    al.save("model.priors")            # eflomal's priors format (usable with eflomal-align -p)
    al = EflomalAligner.load("model.priors")
    links = al.align(new_src, new_tgt) # list[Alignment], consistent with the big corpus
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import itertools
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from xlpe.align.symmetrize import METHODS as SYM_METHODS
from xlpe.align.symmetrize import canonical_method, csr_links, symmetrize_batch
from xlpe.errors import ConfigError, FormatError, XlpeError
from xlpe.io.alignments import Alignment, format_alignment
from xlpe.io.atomic import atomic_write
from xlpe.io.bitext import parse_joint_line
from xlpe.io.text import count_lines, tokenize

logger = logging.getLogger(__name__)

#: eflomal outputs an empty alignment for sentences this long or longer (checked with eflomal 2.0.0).
EFLOMAL_MAX_LEN = 1024
#: symmetrisation methods plus the two directional alignments themselves.
OUTPUT_METHODS = SYM_METHODS + ("forward", "reverse")
INSTALL_HINT = "pip install 'xlpe[eflomal]' (GPLv3)"
_META_SUFFIX = ".xlpe.json"
_META_FORMAT = "xlpe.align.eflomal/1"

Words = Sequence[str]
Segmenter = Callable[[Sequence[str]], tuple[Sequence[str], Sequence[int]]]


def _eflomal():
    """Import eflomal lazily, with an install hint when it is missing."""
    try:
        import eflomal  # noqa: F401  (GPLv3, optional)
        import eflomal.cython  # noqa: F401
    except ImportError as e:
        raise ConfigError(f"the eflomal aligner needs the optional package eflomal: {INSTALL_HINT} "
                          f"[import failed: {e}]") from None
    return eflomal


def eflomal_available() -> bool:
    """True when the optional ``eflomal`` package can be imported."""
    try:
        _eflomal()
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


# --- subword segmentation -----------------------------------------------------------------------------

class _WordCachedSegmenter:
    """Segments with an :class:`xlpe.data.subword.SubwordModel`, which encodes every word on its own, so
    a sentence's pieces are the concatenation of its words' pieces. Words are segmented in batches
    (:meth:`prefetch`, one sentencepiece call per block of sentences; a call per sentence costs
    milliseconds) and cached (the cache is cleared past ``max_words``)."""

    def __init__(self, model, max_words: int = 1_000_000):
        self.model, self.max_words = model, max_words
        self.cache: dict[str, list[str]] = {}

    def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
        new = list(dict.fromkeys(w for sent in sentences for w in sent if w not in self.cache))
        if not new:
            return
        if len(self.cache) + len(new) > self.max_words:
            self.cache.clear()
        pieces, word_of = self.model.encode_words(new)
        per: list[list[str]] = [[] for _ in new]
        for piece, w in zip(pieces, word_of):
            per[w].append(piece)
        self.cache.update(zip(new, per))

    def __call__(self, words: Sequence[str]) -> tuple[list[str], list[int]]:
        if any(w not in self.cache for w in words):
            self.prefetch([words])
        pieces: list[str] = []
        word_of: list[int] = []
        for k, w in enumerate(words):
            ps = self.cache[w]
            pieces += ps
            word_of += [k] * len(ps)
        return pieces, word_of


def _as_segmenter(obj: Any) -> Segmenter:
    if isinstance(obj, (str, os.PathLike)):
        from xlpe.data.subword import SubwordModel  # lazy: sentencepiece is only needed here
        obj = SubwordModel.load(obj)
    if type(obj).__name__ == "SubwordModel" and type(obj).__module__ == "xlpe.data.subword":
        return _WordCachedSegmenter(obj)
    if hasattr(obj, "encode_words"):
        return obj.encode_words
    if callable(obj):
        return obj
    raise ConfigError(f"subword segmentation must be a model path, an object with encode_words(words) or a "
                      f"callable words -> (pieces, word_of); got {type(obj).__name__}")


def _segmenters(subword: Any) -> tuple[Segmenter, Segmenter] | None:
    if subword is None:
        return None
    if isinstance(subword, (tuple, list)):
        if len(subword) != 2:
            raise ConfigError("subword=(source_segmenter, target_segmenter) needs exactly two items")
        return _as_segmenter(subword[0]), _as_segmenter(subword[1])
    seg = _as_segmenter(subword)
    return seg, seg


# --- priors ---------------------------------------------------------------------------------------------

class Priors:
    """eflomal's Dirichlet priors (pseudo-counts), indexed by word for fast per-chunk selection.

    * ``lex[src][tgt]``: lexical (LEX) priors; ``<NULL>`` allowed on either side (eflomal's NULL word);
    * ``hmmf[jump]``, ``hmmr[jump]``: jump priors of the forward / reverse HMM;
    * ``ferf[src][fertility]``, ``ferr[tgt][fertility]``: fertility priors.

    Words are in eflomal form (:func:`eflomal_token` of the normalised token). Files use eflomal's
    text format (``LEX\\tsrc\\ttgt\\talpha``, ``HMMF\\tjump\\talpha``, ...), read and written with eflomal's
    own ``read_priors``/``write_priors``.
    """

    def __init__(self):
        self.lex: dict[str, dict[str, float]] = {}
        self.hmmf: dict[int, float] = {}
        self.hmmr: dict[int, float] = {}
        self.ferf: dict[str, dict[int, float]] = {}
        self.ferr: dict[str, dict[int, float]] = {}

    def __len__(self) -> int:
        return (sum(map(len, self.lex.values())) + len(self.hmmf) + len(self.hmmr)
                + sum(map(len, self.ferf.values())) + sum(map(len, self.ferr.values())))

    @property
    def n_lex(self) -> int:
        return sum(map(len, self.lex.values()))

    @classmethod
    def from_counts(cls, lex, hmmf, hmmr, ferf, ferr) -> "Priors":
        """From the five Counters returned by ``eflomal.calculate_priors``."""
        p = cls()
        for (s, t), a in lex.items():
            p.lex.setdefault(s, {})[t] = float(a)
        p.hmmf = {int(k): float(v) for k, v in hmmf.items()}
        p.hmmr = {int(k): float(v) for k, v in hmmr.items()}
        for (s, f), a in ferf.items():
            p.ferf.setdefault(s, {})[int(f)] = float(a)
        for (t, f), a in ferr.items():
            p.ferr.setdefault(t, {})[int(f)] = float(a)
        return p

    def _add_read(self, parsed) -> None:
        lex, hmmf, hmmr, ferf, ferr = parsed
        for s, t, a in lex:
            d = self.lex.setdefault(s, {})
            d[t] = d.get(t, 0.0) + a
        self.hmmf.update(hmmf)
        self.hmmr.update(hmmr)
        for s, f, a in ferf:
            self.ferf.setdefault(s, {})[f] = a
        for t, f, a in ferr:
            self.ferr.setdefault(t, {})[f] = a

    @classmethod
    def read(cls, path: str | os.PathLike, batch: int = 200_000) -> "Priors":
        """Read an eflomal priors file with eflomal's ``read_priors``, in batches (flat memory overhead)."""
        ef = _eflomal()
        p = cls()
        start = 1
        try:
            f = open(path, "r", encoding="utf-8")
        except FileNotFoundError:
            raise FormatError("priors file not found", path) from None
        with f:
            while True:
                lines = list(itertools.islice(f, batch))
                if not lines:
                    break
                try:
                    p._add_read(ef.read_priors(lines))
                except (ValueError, TypeError, IndexError) as e:
                    raise FormatError(f"invalid priors line between lines {start} and {start + len(lines) - 1} "
                                      f"({e})", path, expected="eflomal priors: LEX/HMMF/HMMR/FERF/FERR "
                                      "tab-separated records") from None
                start += len(lines)
        return p

    def write(self, path: str | os.PathLike) -> None:
        """Write atomically in eflomal's format (byte-identical to one ``eflomal.write_priors`` call)."""
        ef = _eflomal()
        with atomic_write(path) as f:
            for s in sorted(self.lex):  # one call per source word keeps memory flat; order is unchanged
                ef.write_priors(f, {(s, t): a for t, a in self.lex[s].items()}, {}, {}, {}, {})
            ef.write_priors(f, {}, {}, {}, {(s, k): a for s, d in self.ferf.items() for k, a in d.items()}, {})
            ef.write_priors(f, {}, {}, {}, {}, {(t, k): a for t, d in self.ferr.items() for k, a in d.items()})
            ef.write_priors(f, {}, self.hmmf, self.hmmr, {}, {})

    def restricted(self, src_vocab: dict[str, int], tgt_vocab: dict[str, int]):
        """The priors that concern these vocabularies, as ``eflomal.read_priors`` returns them.

        Feeding only these to ``eflomal.to_eflomal_priors_file`` gives the same file as feeding everything
        (it drops unknown words), but costs time proportional to the chunk, not to the priors (eflomal#24).
        """
        lex_list = []
        tgt_keys = list(tgt_vocab) + ["<NULL>"]
        for s in itertools.chain(src_vocab, ("<NULL>",)):
            d = self.lex.get(s)
            if not d:
                continue
            if len(d) <= len(tgt_keys):
                lex_list.extend((s, t, a) for t, a in d.items() if t in tgt_vocab or t == "<NULL>")
            else:
                lex_list.extend((s, t, d[t]) for t in tgt_keys if t in d)
        ferf = [(s, k, a) for s in src_vocab if s in self.ferf for k, a in self.ferf[s].items()]
        ferr = [(t, k, a) for t in tgt_vocab if t in self.ferr for k, a in self.ferr[t].items()]
        return lex_list, self.hmmf, self.hmmr, ferf, ferr


class _PriorIndex:
    """Vocabulary view in the shape ``eflomal.to_eflomal_priors_file`` expects (1-based ids, None if absent)."""

    def __init__(self, vocab: dict[str, int]):
        self.vocab = vocab

    def __len__(self) -> int:
        return len(self.vocab)

    def __getitem__(self, word: str):
        e = self.vocab.get(word)
        return None if e is None else e + 1


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
class _Item:
    index: int                      # 0-based pair index
    src: list[str] | None = None    # eflomal tokens (normalised, segmented, escaped); None when skipped
    tgt: list[str] | None = None
    src_word_of: Sequence[int] | None = None
    tgt_word_of: Sequence[int] | None = None
    skip: str | None = None         # reason when skipped


@dataclass
class _Out:
    index: int
    alignment: Alignment
    forward: Alignment
    reverse: Alignment
    score_f: float = math.nan
    score_r: float = math.nan
    skip: str | None = None


_EMPTY = Alignment()


def _ids(vocab: dict[str, int], words: list[str]) -> list[int]:
    """Vocabulary ids of ``words``, adding new words (ids in order of first occurrence, as eflomal)."""
    ids = list(map(vocab.get, words))
    if None in ids:
        for k, w in enumerate(words):
            if ids[k] is None:
                ids[k] = vocab.setdefault(w, len(vocab))
    return ids


@dataclass
class _Batch:
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
    items: list[_Item] | None = None  # with subwords: the batch's items (their word_of)

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


def _parse_link_lines(lines: list[bytes]):
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


def _format_links(csr, index_base: int = 0) -> str:
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


class _TextWriter:
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
_BLOCK = 8192
_OUT_BATCH = 4096

# A block is (first line number, sources, targets, where): sources/targets are strings (split on ASCII
# space) or token lists; where is (source path, target path) for the whole block, None (in memory), or a
# list with one (path, path) or FormatError (malformed joint line) per pair.
Block = tuple


def _line_blocks(path: str | os.PathLike, block: int | None = None) -> Iterator[list[str]]:
    """The lines of a UTF-8 file in lists of up to ``block`` (default ``_BLOCK``), exactly as
    :func:`xlpe.io.text.read_lines` gives them (line ending removed, same errors naming file and line),
    decoded a block at a time."""
    block = block or _BLOCK
    name = os.fspath(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise FormatError("file not found", path) from None
    except IsADirectoryError:
        raise FormatError("is a directory", path, expected="a text file") from None
    with f:
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


def _pairs_of(blocks: Iterable[Block]) -> Iterator[Pair]:
    """Blocks -> ``(lineno, src, tgt, where)`` pairs (for the per-item path used with subwords)."""
    for lineno, srcs, tgts, where in blocks:
        per = where if isinstance(where, list) else None
        for k, (s, t) in enumerate(zip(srcs, tgts)):
            yield lineno + k, s, t, (per[k] if per is not None else where)


def _rechunk(blocks: Iterable[Block], size: int) -> Iterator[list[Block]]:
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


# --- the aligner ------------------------------------------------------------------------------------------

Pair = tuple  # (lineno or index, src words | str, tgt words | str, error | None)


class EflomalAligner:
    """eflomal word alignment with symmetrisation, priors, subword support and chunking.

    Args:
        sym: what :meth:`align` returns: a method of :mod:`xlpe.align.symmetrize` (``grow-diag-final-and``
            default, ``intersection``, ``union``, ``grow-diag``, ``grow-diag-final``) or ``forward``/``reverse``.
        model: eflomal model, 1 = IBM1, 2 = IBM1 + HMM, 3 = IBM1 + HMM + fertility (default, as eflomal).
        iterations: sampling iterations: ``None`` = eflomal's corpus-length-based default (scaled by
            ``rel_iterations``), an int = that many for every model stage, or a 3-tuple (IBM1, HMM, fertility).
        rel_iterations: multiplier for eflomal's default iteration counts (eflomal ``--length``).
        n_samplers: independent samplers (eflomal default 3; they run in parallel threads).
        null_prior: eflomal's prior probability of a NULL alignment (default 0.2).
        score_model: model used for the sentence scores (0 = the alignment model).
        seed: accepted and recorded, but eflomal 2.0 cannot be seeded (see the module docstring).
        lowercase: lowercase tokens before alignment (output indices are unchanged). With subwords, the
            pieces are lowercased after segmentation, so the segmentation is the subword model's own.
        subword: align subword pieces instead of words: a sentencepiece model path (loaded with
            :class:`xlpe.data.subword.SubwordModel`), an object with ``encode_words(words) -> (pieces,
            word_of)``, a callable with that signature, or a pair ``(source, target)`` of those.
        subword_output: with ``subword``, return piece-level links instead of converting them to words
            (the word rule is "any": words are linked if any of their pieces are).
        chunk_size: align in independent eflomal jobs of this many sentence pairs (for new text with
            priors; keeps memory bounded). ``None``: one job over everything.
        skip_bad: output an empty alignment for an empty, malformed or too long line instead of raising;
            the number skipped is logged and returned.
        quiet: no progress bars or info logging; ``verbose``: show eflomal's own output.
        priors: :class:`Priors` to align with (usually set by :meth:`fit` or :meth:`load`).
        tmp_dir: directory for eflomal's temporary files (default: the system temp dir).
    """

    def __init__(self, *, sym: str = "grow-diag-final-and", model: int = 3,
                 iterations: int | Sequence[int] | None = None, rel_iterations: float = 1.0,
                 n_samplers: int = 3, null_prior: float = 0.2, score_model: int = 0, seed: int | None = None,
                 lowercase: bool = False, subword: Any = None, subword_output: bool = False,
                 chunk_size: int | None = None, skip_bad: bool = False, quiet: bool = False,
                 verbose: bool = False, priors: Priors | None = None, tmp_dir: str | os.PathLike | None = None):
        self.sym = sym if sym in ("forward", "reverse") else canonical_method(sym)
        if model not in (1, 2, 3):
            raise ConfigError(f"eflomal model must be 1 (IBM1), 2 (+HMM) or 3 (+fertility), not {model!r}")
        self.model = model
        self.iterations = self._check_iterations(iterations, model)
        if not rel_iterations > 0:
            raise ConfigError(f"rel_iterations must be > 0, not {rel_iterations!r}")
        self.rel_iterations = float(rel_iterations)
        if int(n_samplers) < 1:
            raise ConfigError(f"n_samplers must be >= 1, not {n_samplers!r}")
        self.n_samplers = int(n_samplers)
        if not 0.0 <= null_prior <= 1.0:
            raise ConfigError(f"null_prior must be in [0, 1], not {null_prior!r}")
        self.null_prior = float(null_prior)
        if score_model not in (0, 1, 2, 3):
            raise ConfigError(f"score_model must be 0 (same as model), 1, 2 or 3, not {score_model!r}")
        self.score_model = score_model
        self.seed = seed
        if seed is not None:
            logger.warning("eflomal 2.0 seeds its sampler from /dev/urandom and cannot be seeded: seed=%s is "
                           "recorded but alignments may differ slightly between runs", seed)
        self.lowercase = bool(lowercase)
        self.subword = subword
        self._segs = _segmenters(subword)
        if subword_output and subword is None:
            raise ConfigError("subword_output=True needs a subword segmentation (subword=...)")
        self.subword_output = bool(subword_output)
        if chunk_size is not None and int(chunk_size) < 1:
            raise ConfigError(f"chunk_size must be >= 1 or None, not {chunk_size!r}")
        self.chunk_size = None if chunk_size is None else int(chunk_size)
        self.skip_bad = bool(skip_bad)
        self.quiet = bool(quiet)
        self.verbose = bool(verbose)
        self.priors = priors
        self.tmp_dir = None if tmp_dir is None else os.fspath(tmp_dir)
        self.n_fit_sentences: int | None = None

    @staticmethod
    def _check_iterations(iterations, model):
        if iterations is None:
            return None
        if isinstance(iterations, int):
            its = [iterations] * 3
        else:
            its = [int(x) for x in iterations]
            if len(its) != 3:
                raise ConfigError(f"iterations must be an int or (IBM1, HMM, fertility), not {iterations!r}")
        if any(x < 1 for x in its[:model]) or any(x < 0 for x in its):
            raise ConfigError(f"iterations must be >= 1 for every stage of model {model}, not {iterations!r}")
        return tuple(x if k < model else 0 for k, x in enumerate(its))

    # -- public API ----------------------------------------------------------------------------------

    def fit(self, src: Sequence[Words | str], tgt: Sequence[Words | str], *, scores: bool = False) -> AlignResult:
        """Align a corpus in one joint eflomal run, keep priors estimated from the result, return the
        corpus alignments. Priors come from the forward and reverse links (like ``eflomal-makepriors``).
        ``chunk_size`` does not apply (the point is one joint run). Priors the aligner already has guide
        this run too; the new priors are estimated from this run's links only."""
        blocks = self._memory_blocks(src, tgt)
        return self._collect(self._outs(self._run(blocks, fit=True, scores=scores, use_priors=True,
                                                  total=len(src), cache=True)))

    def align(self, src: Sequence[Words | str], tgt: Sequence[Words | str]) -> list[Alignment]:
        """Align sentence pairs held in memory (lists of tokens, or strings split on ASCII space).
        Uses the priors when there are any. Returns one :class:`Alignment` per pair (``sym`` method)."""
        blocks = self._memory_blocks(src, tgt)
        return [o.alignment for o in self._outs(self._batches(blocks, total=len(src), scores=False, cache=True),
                                                directions=False)]

    def align_detailed(self, src: Sequence[Words | str], tgt: Sequence[Words | str], *,
                       scores: bool = False) -> AlignResult:
        """Like :meth:`align`, also returning both directions, optional sentence scores and skipped pairs."""
        blocks = self._memory_blocks(src, tgt)
        return self._collect(self._outs(self._batches(blocks, total=len(src), scores=scores, cache=True)))

    def iter_align(self, pairs: Iterable[tuple[Words | str, Words | str]]) -> Iterator[Alignment]:
        """Stream alignments for an iterable of ``(src, tgt)`` pairs. With ``chunk_size`` only one chunk is
        in memory at a time; without it the pairs are buffered (eflomal needs them all at once)."""
        def blocks():
            it = iter(pairs)
            k = 0
            while True:
                buf = list(itertools.islice(it, _BLOCK))
                if not buf:
                    return
                yield k + 1, [p[0] for p in buf], [p[1] for p in buf], None
                k += len(buf)
        if self.chunk_size is None:
            buf = list(blocks())
            factory = lambda: iter(buf)  # noqa: E731
        else:
            factory = blocks
        for o in self._outs(self._batches(factory, total=None, scores=False, cache=self.chunk_size is None),
                            directions=False):
            yield o.alignment

    def align_files(self, src: str | os.PathLike, tgt: str | os.PathLike | None, out: str | os.PathLike = "-", *,
                    index_base: int = 0, forward_out: str | os.PathLike | None = None,
                    reverse_out: str | os.PathLike | None = None, scores_out: str | os.PathLike | None = None,
                    fit: bool = False) -> dict:
        """Align two line-aligned files (or one ``src ||| tgt`` file when ``tgt`` is None) and write Pharaoh
        ``i-j`` lines atomically to ``out`` (``-`` = stdout), one per input line (empty for skipped lines).

        ``forward_out``/``reverse_out`` receive the directional alignments (source–target orientation),
        ``scores_out`` ``forward_score<TAB>reverse_score`` per line. With ``fit=True`` the whole file is
        aligned jointly and priors are estimated from it (then :meth:`save`). Returns statistics.

        The input is read once (twice with subwords, whose piece-to-word maps are not kept); eflomal's output
        is read, symmetrised and written in vectorised batches.
        """
        if index_base not in (0, 1):
            raise ConfigError(f"index_base must be 0 or 1, not {index_base!r}")
        t0 = time.time()
        to_words = self._segs is not None and not self.subword_output
        with contextlib.ExitStack() as stack:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="xlpe-align-", dir=self.tmp_dir))
            src, tgt = self._spool_stdin(src, tgt, tmp)
            total = None if self.quiet else count_lines(src)
            factory = lambda: self._file_blocks(src, tgt)  # noqa: E731
            if fit:
                batches = self._run(factory, fit=True, scores=scores_out is not None, use_priors=True, total=total)
            else:
                batches = self._batches(factory, total=total, scores=scores_out is not None)
            files = {}
            for name, path in (("out", out), ("forward", forward_out), ("reverse", reverse_out),
                               ("scores", scores_out)):
                if path is not None:
                    files[name] = stack.enter_context(atomic_write(path))
            n = 0
            skipped: list[tuple[int, str]] = []
            for b in batches:
                n += b.n
                skipped.extend((b.start + off + 1, why) for off, why in sorted(b.skip.items()))
                if to_words:  # word links come from each pair's piece-to-word map
                    for o in self._outs([b]):
                        files["out"].write(format_alignment(o.alignment, index_base, possible=False) + "\n")
                        if "forward" in files:
                            files["forward"].write(format_alignment(o.forward, index_base, possible=False) + "\n")
                        if "reverse" in files:
                            files["reverse"].write(format_alignment(o.reverse, index_base, possible=False) + "\n")
                else:
                    files["out"].write(_format_links(b.full(b.sym), index_base))
                    if "forward" in files:
                        files["forward"].write(_format_links(b.full(b.fwd), index_base))
                    if "reverse" in files:
                        files["reverse"].write(_format_links(b.full(b.rev), index_base))
                if "scores" in files:
                    sf, sr = iter(b.score_f), iter(b.score_r)
                    files["scores"].write("".join("nan\tnan\n" if off in b.skip else f"{next(sf):g}\t{next(sr):g}\n"
                                                  for off in range(b.n)))
        stats = {"pairs": n, "skipped": len(skipped), "skipped_lines": skipped[:20],
                 "seconds": round(time.time() - t0, 3), "sym": self.sym}
        return stats

    def save(self, path: str | os.PathLike) -> None:
        """Write the priors in eflomal's format to ``path`` and the settings that must match at alignment
        time (lowercasing, subwords, model) to ``path + '.xlpe.json'``."""
        if self.priors is None:
            raise XlpeError("nothing to save: call fit() first (or load priors)")
        self.priors.write(path)
        meta = {"format": _META_FORMAT, "lowercase": self.lowercase,
                "subword": (os.fspath(self.subword) if isinstance(self.subword, (str, os.PathLike))
                            else (None if self.subword is None else "<object>")),
                "subword_output": self.subword_output, "model": self.model, "sym": self.sym,
                "null_prior": self.null_prior, "seed": self.seed, "n_fit_sentences": self.n_fit_sentences,
                "eflomal_version": _eflomal_version()}
        with atomic_write(os.fspath(path) + _META_SUFFIX) as f:
            json.dump(meta, f, indent=1, sort_keys=True)
            f.write("\n")

    @classmethod
    def load(cls, path: str | os.PathLike, **options) -> "EflomalAligner":
        """An aligner that aligns with the priors in ``path`` (any eflomal priors file). Settings saved beside
        it by :meth:`save` are restored; keyword ``options`` override them (with a warning when
        ``lowercase``/``subword`` then differ from what the priors were estimated with)."""
        meta = {}
        mpath = os.fspath(path) + _META_SUFFIX
        if os.path.exists(mpath):
            try:
                with open(mpath, encoding="utf-8") as f:
                    meta = json.load(f)
            except (OSError, ValueError) as e:
                raise FormatError(f"unreadable metadata ({e})", mpath, expected="JSON written by save()") from None
            if meta.get("format") != _META_FORMAT:
                raise FormatError(f"unknown metadata format {meta.get('format')!r}", mpath, expected=_META_FORMAT)
        kw = {}
        for key in ("lowercase", "model", "sym", "null_prior", "subword_output"):
            if key in meta:
                kw[key] = meta[key]
        if meta.get("subword") not in (None, "<object>"):
            kw["subword"] = meta["subword"]
        if meta.get("subword") == "<object>" and "subword" not in options:
            raise ConfigError(f"the priors in {path} were estimated on subwords from an in-memory segmenter; "
                              f"pass the same one as subword=...")
        if meta.get("subword") is None and "subword_output" in kw and not options.get("subword"):
            kw.pop("subword_output")
        for key in ("lowercase", "subword"):
            if key in options and key in meta and _norm_opt(options[key]) != _norm_opt(meta[key]):
                logger.warning("priors %s were estimated with %s=%r but %s=%r was given: lexical priors may "
                               "not match the tokens", path, key, meta[key], key, options[key])
        kw.update(options)
        al = cls(**kw)
        al.priors = Priors.read(path)
        al.n_fit_sentences = meta.get("n_fit_sentences")
        return al

    # -- input handling ----------------------------------------------------------------------------

    @staticmethod
    def _memory_blocks(src, tgt):
        if isinstance(src, (str, bytes)) or isinstance(tgt, (str, bytes)):
            raise ConfigError("src and tgt must be sequences of sentences (use align_files() for file paths)")
        if len(src) != len(tgt):
            raise FormatError(f"the source has {len(src)} sentences but the target has {len(tgt)}",
                              expected="as many target sentences as source sentences")
        src = src if isinstance(src, (list, tuple)) else list(src)
        tgt = tgt if isinstance(tgt, (list, tuple)) else list(tgt)

        def blocks():
            for k in range(0, len(src), _BLOCK):
                yield k + 1, src[k:k + _BLOCK], tgt[k:k + _BLOCK], None
        return blocks

    @staticmethod
    def _spool_stdin(src, tgt, tmp):
        def spool(p, name):
            if os.fspath(p) != "-":
                return p
            dest = os.path.join(tmp, name)
            with open(dest, "wb") as f:
                shutil.copyfileobj(sys.stdin.buffer, f)
            return dest
        return spool(src, "stdin.src"), (None if tgt is None else spool(tgt, "stdin.tgt"))

    @staticmethod
    def _file_blocks(src, tgt) -> Iterator[Block]:
        """Blocks of pairs from two line-aligned files, or one joint file (``tgt`` None); a line-count
        mismatch always raises (no way to pair lines), after the pairs before it."""
        if tgt is None:
            lineno = 1
            for lines in _line_blocks(src):
                srcs, tgts, wheres = [], [], []
                for k, text in enumerate(lines):
                    try:
                        s, t = parse_joint_line(text, src, lineno + k, allow_empty=True)
                        w = (src, src)
                    except FormatError as e:
                        s = t = None
                        w = e
                    srcs.append(s)
                    tgts.append(t)
                    wheres.append(w)
                yield lineno, srcs, tgts, wheres
                lineno += len(lines)
            return
        lineno = 1
        for a, b in itertools.zip_longest(_line_blocks(src), _line_blocks(tgt)):
            if a is None or b is None or len(a) != len(b):
                la, lb = len(a or ()), len(b or ())
                m = min(la, lb)
                if m:
                    yield lineno, a[:m], b[:m], (src, tgt)
                short, long_ = (src, tgt) if la < lb else (tgt, src)
                raise FormatError(f"{os.fspath(short)} has {lineno + m - 1} lines but {os.fspath(long_)} has more",
                                  long_, lineno + m, "line-aligned files with equal line counts (a mismatch cannot "
                                                     "be skipped: the lines could not be paired)")
            yield lineno, a, b, (src, tgt)
            lineno += len(a)

    def _problem(self, s, t, lineno, spath, tpath, unit: str = "tokens") -> str | None:
        """Why a pair cannot be aligned (``empty``, ``too long``) or None; raises unless ``skip_bad``."""
        if not s or not t:
            if not self.skip_bad:
                side, path = ("source", spath) if not s else ("target", tpath)
                raise FormatError(f"empty {side} sentence", path, lineno,
                                  "at least one token (or skip_bad=True / --skip-bad for an empty "
                                  "alignment line)")
            return "empty"
        if len(s) >= EFLOMAL_MAX_LEN or len(t) >= EFLOMAL_MAX_LEN:
            if not self.skip_bad:
                side, path, n = ("source", spath, len(s)) if len(s) >= EFLOMAL_MAX_LEN else ("target", tpath, len(t))
                raise FormatError(f"{side} sentence has {n} {unit}; eflomal aligns at most {EFLOMAL_MAX_LEN - 1}",
                                  path, lineno,
                                  "shorter sentences (or skip_bad=True / --skip-bad for an empty alignment line)")
            return "too long"
        return None

    def _malformed(self, where: FormatError) -> str:
        if not self.skip_bad:
            raise FormatError(where.message, where.path, where.line,
                              (where.expected or "") + " — or use --skip-bad / skip_bad=True")
        return "malformed"

    def _prepare(self, pairs: Iterable[Pair], start: int = 0) -> Iterator[_Item]:
        """Normalise, segment and check pairs (the per-item path, used with subwords); raise on a bad one
        unless ``skip_bad``. Item indices count from ``start``."""
        segs = self._segs
        lower = self.lowercase
        memo: dict[str, str] = {}  # token -> eflomal token (lowercased, escaped); bounded below

        def conv(words: list[str]) -> list[str]:
            out = list(map(memo.get, words))
            if None in out:
                if len(memo) > 2_000_000:
                    memo.clear()
                for k, w in enumerate(words):
                    if out[k] is None:
                        out[k] = memo[w] = eflomal_token(w.lower() if lower else w)
            return out

        if segs is not None and any(hasattr(g, "prefetch") for g in segs):
            pairs = _prefetched(pairs, segs)
        for k, (lineno, s, t, where) in enumerate(pairs, start):
            if isinstance(where, FormatError):
                yield _Item(k, skip=self._malformed(where))
                continue
            spath, tpath = where if where is not None else ("<source>", "<target>")
            s = tokenize(s) if isinstance(s, str) else list(s)
            t = tokenize(t) if isinstance(t, str) else list(t)
            if not s or not t:
                yield _Item(k, skip=self._problem(s, t, lineno, spath, tpath))
                continue
            sw = tw = None
            if segs is not None:
                s, sw = segs[0](s)
                t, tw = segs[1](t)
                s, t, sw, tw = list(s), list(t), list(sw), list(tw)
                if len(sw) != len(s) or len(tw) != len(t):
                    raise ConfigError("the subword segmenter returned word_of of a different length than pieces")
            reason = self._problem(s, t, lineno, spath, tpath, "pieces" if segs else "tokens")
            if reason:
                yield _Item(k, skip=reason)
                continue
            yield _Item(k, conv(s), conv(t), sw, tw)

    def _encode_blocks(self, blocks: Iterable[Block], sw: _TextWriter, tw: _TextWriter, src_vocab: dict[str, int],
                       tgt_vocab: dict[str, int], start: int, bar) -> tuple[int, list[tuple[int, str]]]:
        """Check the pairs and write them in eflomal's format (the path without subwords: what
        :meth:`_prepare` + :func:`_ids` do, with the same tokens, ids, checks and errors, fused and per block).
        Returns the number of pairs and the skipped ``(index, reason)``."""
        lower = self.lowercase
        smemo: dict[str, str] = {}  # raw token -> its id as text
        tmemo: dict[str, str] = {}

        def ids(memo, vocab, words):  # first sight of some word: ids in order of first occurrence
            if len(memo) > 2_000_000:
                memo.clear()
            for w in words:
                if w not in memo:
                    memo[w] = str(vocab.setdefault(eflomal_token(w.lower() if lower else w), len(vocab)))
            return " ".join(map(memo.__getitem__, words))

        k = start
        skipped: list[tuple[int, str]] = []
        max_len = EFLOMAL_MAX_LEN
        for lineno, srcs, tgts, where in blocks:
            per = where if isinstance(where, list) else None
            spath, tpath = where if isinstance(where, tuple) else ("<source>", "<target>")
            s_lines, t_lines = [], []
            for off, (s, t) in enumerate(zip(srcs, tgts)):
                if per is not None:
                    if isinstance(per[off], FormatError):
                        skipped.append((k + off, self._malformed(per[off])))
                        continue
                    spath, tpath = per[off]
                s = tokenize(s) if isinstance(s, str) else list(s)
                t = tokenize(t) if isinstance(t, str) else list(t)
                ns, nt = len(s), len(t)
                if not ns or not nt or ns >= max_len or nt >= max_len:
                    skipped.append((k + off, self._problem(s, t, lineno + off, spath, tpath)))
                    continue
                try:
                    s_lines.append(f"{ns} {' '.join(map(smemo.__getitem__, s))}\n")
                except KeyError:
                    s_lines.append(f"{ns} {ids(smemo, src_vocab, s)}\n")
                try:
                    t_lines.append(f"{nt} {' '.join(map(tmemo.__getitem__, t))}\n")
                except KeyError:
                    t_lines.append(f"{nt} {ids(tmemo, tgt_vocab, t)}\n")
            sw.add_lines(s_lines)
            tw.add_lines(t_lines)
            k += len(srcs)
            if bar is not None:
                bar.update(len(srcs))
        return k - start, skipped

    @staticmethod
    def _encode_items(items: Iterable[_Item], sw: _TextWriter, tw: _TextWriter, src_vocab: dict[str, int],
                      tgt_vocab: dict[str, int], bar) -> tuple[int, list[tuple[int, str]]]:
        n = 0
        skipped: list[tuple[int, str]] = []
        for it in items:
            n += 1
            if bar is not None:
                bar.update(1)
            if it.skip:
                skipped.append((it.index, it.skip))
                continue
            sw.add(_ids(src_vocab, it.src))
            tw.add(_ids(tgt_vocab, it.tgt))
        return n, skipped

    # -- running eflomal ------------------------------------------------------------------------------

    def _batches(self, block_factory, total, scores, cache: bool = False) -> Iterator[_Batch]:
        """Align with the priors when there are any; in chunks when ``chunk_size`` is set. ``block_factory`` is
        called once (with subwords twice, unless ``cache``: the items are prepared again to pair them with
        eflomal's links)."""
        if self.chunk_size is None:
            yield from self._run(block_factory, fit=False, scores=scores, use_priors=True, total=total, cache=cache)
            return
        if self.priors is None:
            logger.warning("aligning in chunks of %d without priors: each chunk learns only from itself "
                           "(fit priors on a larger corpus first for consistent alignments)", self.chunk_size)
        n_chunks = 0
        start = 0
        bar = _progress(None, total, "aligning in chunks", self.quiet)
        try:
            for chunk in _rechunk(block_factory(), self.chunk_size):
                n_chunks += 1
                yield from self._run(lambda c=chunk: iter(c), fit=False, scores=scores, use_priors=True,
                                     progress=False, start=start, cache=True)
                n = sum(len(b[1]) for b in chunk)
                start += n
                if bar is not None:
                    bar.update(n)
        finally:
            if bar is not None:
                bar.close()
        if not self.quiet:
            logger.info("eflomal: aligned %d chunks of up to %d pairs", n_chunks, self.chunk_size)

    def _eflomal_iterations(self):
        return None if self.iterations is None else tuple(self.iterations)

    def _run(self, block_factory, *, fit: bool, scores: bool, use_priors: bool, total: int | None = None,
             progress: bool = True, start: int = 0, cache: bool = False) -> Iterator[_Batch]:
        """One eflomal job over the pairs of ``block_factory()`` (pair indices from ``start``). Uses the priors
        when ``use_priors`` and there are any. Without subwords the input is read once; with subwords its
        items are prepared again (or replayed, with ``cache``) to convert the links to words."""
        show = progress and not self.quiet
        ef = _eflomal()
        with tempfile.TemporaryDirectory(prefix="xlpe-eflomal-", dir=self.tmp_dir) as d:
            p = lambda name: os.path.join(d, name)  # noqa: E731
            src_vocab: dict[str, int] = {}
            tgt_vocab: dict[str, int] = {}
            sw, tw = _TextWriter(p("src")), _TextWriter(p("tgt"))
            item_factory = None
            bar = _progress(None, total, "reading", not show)
            try:
                if self._segs is None:
                    n_items, skipped = self._encode_blocks(block_factory(), sw, tw, src_vocab, tgt_vocab, start, bar)
                else:
                    item_factory = lambda: self._prepare(_pairs_of(block_factory()), start)  # noqa: E731
                    if cache:
                        item_factory = _Cached(item_factory)
                    n_items, skipped = self._encode_items(item_factory(), sw, tw, src_vocab, tgt_vocab, bar)
            except BaseException:
                sw.abort()
                tw.abort()
                raise
            finally:
                if bar is not None:
                    bar.close()
            sw.finish(len(src_vocab))
            tw.finish(len(tgt_vocab))
            n_ok = sw.n
            if skipped:
                skips: dict[str, int] = {}
                for _, why in skipped:
                    skips[why] = skips.get(why, 0) + 1
                logger.warning("skipped %d of %d sentence pairs (%s); their output lines are empty",
                               len(skipped), n_items, ", ".join(f"{v} {k}" for k, v in sorted(skips.items())))
            files = {"fwd": p("fwd"), "rev": p("rev")}
            if scores:
                files.update(sf=p("sf"), sr=p("sr"))
            if n_ok:
                priors_file = None
                if use_priors and self.priors is not None:
                    priors_file = p("priors")
                    with open(priors_file, "w", encoding="utf-8") as f, _muted("eflomal", not show):
                        ef.to_eflomal_priors_file(self.priors.restricted(src_vocab, tgt_vocab),
                                                  _PriorIndex(src_vocab), _PriorIndex(tgt_vocab), f)
                log = logger.info if show else logger.debug
                log("eflomal: aligning %d sentence pairs (vocabulary %d/%d, model %d, %d samplers%s)",
                    n_ok, len(src_vocab), len(tgt_vocab), self.model, self.n_samplers,
                    ", with priors" if priors_file else "")
                t0 = time.time()
                try:
                    ef.cython.align(p("src"), p("tgt"), links_filename_fwd=files["fwd"],
                                    links_filename_rev=files["rev"], statistics_filename=None,
                                    scores_filename_fwd=files.get("sf"), scores_filename_rev=files.get("sr"),
                                    priors_filename=priors_file, model=self.model, score_model=self.score_model,
                                    n_iterations=self._eflomal_iterations(), n_samplers=self.n_samplers,
                                    quiet=not self.verbose, rel_iterations=self.rel_iterations,
                                    null_prior=self.null_prior)
                except subprocess.CalledProcessError as e:
                    raise XlpeError(f"eflomal failed with exit status {e.returncode} (rerun with verbose=True / "
                                    f"--eflomal-verbose to see its output)") from None
                log("eflomal: done in %.1f s", time.time() - t0)
            else:
                for f in files.values():
                    open(f, "w").close()
            vocabs = (list(src_vocab), list(tgt_vocab)) if fit else None  # id -> eflomal token
            del src_vocab, tgt_vocab
            yield from self._read_batches(files, start, n_items, skipped, item_factory, total if show else False)
            if fit:
                self._estimate_priors(p("src"), p("tgt"), *vocabs, files)
                self.n_fit_sentences = n_ok

    def _read_batches(self, files, start, n_items, skipped, item_factory, total) -> Iterator[_Batch]:
        """eflomal's output in batches: parsed, symmetrised (:func:`symmetrize_batch`) and paired with the
        input's skipped pairs (and, with subwords, its items)."""
        sym = self.sym
        items = item_factory() if item_factory is not None else None
        skip_index = [k for k, _ in skipped]  # ascending
        bar = None if total is False else _progress(None, total, sym, False)
        try:
            with contextlib.ExitStack() as st:
                ff, rf = (st.enter_context(open(files[k], "rb")) for k in ("fwd", "rev"))
                sf, sr = ((st.enter_context(open(files[k], encoding="utf-8")) for k in ("sf", "sr"))
                          if "sf" in files else (None, None))
                k, end, at = start, start + n_items, 0
                while k < end:
                    n = min(_OUT_BATCH, end - k)
                    to = bisect.bisect_left(skip_index, k + n, at)
                    skip = {skipped[x][0] - k: skipped[x][1] for x in range(at, to)}
                    at = to
                    ok = np.arange(n)
                    if skip:
                        ok = np.setdiff1d(ok, np.fromiter(skip, dtype=np.int64, count=len(skip)))
                    fl, rl = list(itertools.islice(ff, len(ok))), list(itertools.islice(rf, len(ok)))
                    if len(fl) < len(ok) or len(rl) < len(ok):
                        raise XlpeError("eflomal wrote fewer alignment lines than it was given sentences")
                    fwd, rev = _parse_link_lines(fl), _parse_link_lines(rl)
                    a = fwd if sym == "forward" else rev if sym == "reverse" else symmetrize_batch(fwd, rev, sym)
                    b = _Batch(k, n, skip, ok, fwd, rev, a)
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

    def _outs(self, batches: Iterable[_Batch], directions: bool = True) -> Iterator[_Out]:
        """Per-pair results (:class:`Alignment` objects; word links with subwords unless ``subword_output``).
        Without ``directions`` only ``alignment`` is set (``forward``/``reverse`` are left empty)."""
        to_words = self._segs is not None and not self.subword_output
        if to_words:
            from xlpe.data.subword import word_alignment_from_subword
        for b in batches:
            if directions:
                fw, rv = csr_links(b.fwd), csr_links(b.rev)
                sy = fw if b.sym is b.fwd else rv if b.sym is b.rev else csr_links(b.sym)
            else:
                sy = csr_links(b.sym)
            m = 0
            for off in range(b.n):
                if off in b.skip:
                    yield _Out(b.start + off, _EMPTY, _EMPTY, _EMPTY, skip=b.skip[off])
                    continue
                if directions:
                    fa, ra = Alignment(fw[m]), Alignment(rv[m])
                    a = fa if sy is fw else ra if sy is rv else Alignment(sy[m])
                else:
                    a, fa, ra = Alignment(sy[m]), _EMPTY, _EMPTY
                if to_words:
                    it = b.items[off]
                    a = word_alignment_from_subword(a, it.src_word_of, it.tgt_word_of)
                    if directions:
                        fa = word_alignment_from_subword(fa, it.src_word_of, it.tgt_word_of)
                        ra = word_alignment_from_subword(ra, it.src_word_of, it.tgt_word_of)
                o = _Out(b.start + off, a, fa, ra)
                if b.score_f is not None:
                    o.score_f, o.score_r = b.score_f[m], b.score_r[m]
                m += 1
                yield o

    def _estimate_priors(self, src_path, tgt_path, src_words, tgt_words, files) -> None:
        """Priors from the forward and reverse links with eflomal's ``calculate_priors`` (streamed), reading
        the sentences back from eflomal's input files (``*_words``: id -> eflomal token)."""
        ef = _eflomal()
        t0 = time.time()

        def sentences(f, words):
            next(f, None)  # header
            for line in f:
                yield " ".join([words[int(x)] for x in line.split()[1:]])

        with open(src_path, encoding="ascii") as fs, open(tgt_path, encoding="ascii") as ft, \
                open(files["fwd"], encoding="utf-8") as ff, open(files["rev"], encoding="utf-8") as rf:
            counts = ef.calculate_priors(sentences(fs, src_words), sentences(ft, tgt_words), ff, rf)
        self.priors = Priors.from_counts(*counts)
        if not self.quiet:
            logger.info("priors: %d lexical, %d jump, %d fertility entries (%.1f s)", self.priors.n_lex,
                        len(self.priors.hmmf) + len(self.priors.hmmr),
                        sum(map(len, self.priors.ferf.values())) + sum(map(len, self.priors.ferr.values())),
                        time.time() - t0)

    def _collect(self, outs: Iterable[_Out]) -> AlignResult:
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


@contextlib.contextmanager
def _muted(name: str, enabled: bool):
    """Raise logger ``name`` to WARNING for the duration (eflomal logs every priors conversion at INFO)."""
    if not enabled:
        yield
        return
    lg = logging.getLogger(name)
    old = lg.level
    lg.setLevel(logging.WARNING)
    try:
        yield
    finally:
        lg.setLevel(old)


def _prefetched(pairs: Iterable[Pair], segs, block: int = 1024) -> Iterator[Pair]:
    """Pass ``pairs`` through unchanged, letting batch segmenters see the words of each block first."""
    it = iter(pairs)
    while True:
        buf = list(itertools.islice(it, block))
        if not buf:
            return
        words = [[tokenize(x) if isinstance(x, str) else x for x in (p[1], p[2])]
                 for p in buf if not isinstance(p[3], FormatError)]
        for side in (0, 1):
            if hasattr(segs[side], "prefetch"):
                segs[side].prefetch(w[side] for w in words)
        yield from buf


class _Cached:
    """An item factory that prepares its items on the first call and replays them afterwards."""

    def __init__(self, factory):
        self.factory, self.items = factory, None

    def __call__(self):
        if self.items is None:
            return self._fill()
        return iter(self.items)

    def _fill(self):
        self.items = []
        for it in self.factory():
            self.items.append(it)
            yield it


def _norm_opt(v):
    return os.fspath(v) if isinstance(v, os.PathLike) else v


def _eflomal_version() -> str | None:
    try:
        from importlib.metadata import version
        return version("eflomal")
    except Exception:  # pragma: no cover - metadata missing
        return None


def _progress(it, total, desc, quiet):
    """A tqdm bar over ``it`` (or a manual bar when ``it`` is None); ``it`` itself / None when quiet."""
    if quiet:
        return it
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return it
    return tqdm(it, total=total, desc=f"xlpe align: {desc}", unit=" pairs", leave=False, mininterval=1.0)


# --- convenience functions ----------------------------------------------------------------------------

def align_bitext(src: Sequence[Words | str], tgt: Sequence[Words | str], *, priors: str | os.PathLike | None = None,
                 **options) -> list[Alignment]:
    """Align pairs held in memory in one call: ``EflomalAligner(**options).align(src, tgt)``, or with the
    priors file ``priors`` (and its saved settings) when given."""
    al = EflomalAligner.load(priors, **options) if priors is not None else EflomalAligner(**options)
    return al.align(src, tgt)


def align_files(src: str | os.PathLike, tgt: str | os.PathLike | None, out: str | os.PathLike, index_base: int = 0, *,
                forward_out: str | os.PathLike | None = None, reverse_out: str | os.PathLike | None = None,
                scores_out: str | os.PathLike | None = None, priors_in: str | os.PathLike | None = None,
                priors_out: str | os.PathLike | None = None, **options) -> dict:
    """Align two line-aligned token files (or one ``src ||| tgt`` file, ``tgt=None``) into a Pharaoh file.

    ``priors_in``: align with these priors (and their saved settings; ``options`` override them).
    ``priors_out``: align the whole input jointly and save priors estimated from it (with ``priors_in`` as
    well, the input is aligned with the old priors and the new file holds priors from this run only).
    Other keyword ``options`` go to :class:`EflomalAligner`. Returns statistics (pairs, skipped, seconds).
    """
    al = EflomalAligner.load(priors_in, **options) if priors_in is not None else EflomalAligner(**options)
    fit = priors_out is not None
    stats = al.align_files(src, tgt, out, index_base=index_base, forward_out=forward_out,
                           reverse_out=reverse_out, scores_out=scores_out, fit=fit)
    if fit:
        al.save(priors_out)
        stats["priors_out"] = os.fspath(priors_out)
    return stats


# --- command line ---------------------------------------------------------------------------------------

def _iterations_arg(text: str):
    try:
        parts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N1,N2,N3, got {text!r}") from None
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 3:
        return tuple(parts)
    raise argparse.ArgumentTypeError(f"expected N or N1,N2,N3, got {text!r}")


def add_cli_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``xlpe align`` (eflomal + symmetrisation) to ``parser``."""
    parser.add_argument("inputs", nargs="+", metavar="FILE",
                        help="either SRC TGT (two line-aligned files of space-separated tokens) or one file of "
                             "'src tokens ||| tgt tokens' lines")
    parser.add_argument("-o", "--out", default="-",
                        help="output Pharaoh file, one 'i-j ...' line per input line, written atomically; '-' = stdout "
                             "(default: %(default)s)")
    parser.add_argument("--forward-out", metavar="FILE",
                        help="also write the forward (source->target model) links, source-target orientation")
    parser.add_argument("--reverse-out", metavar="FILE",
                        help="also write the reverse (target->source model) links, source-target orientation")
    parser.add_argument("--scores-out", metavar="FILE",
                        help="also write eflomal's per-sentence scores, 'forward<TAB>reverse' per line (eflomal "
                             "gives no per-link scores)")
    parser.add_argument("--sym", metavar="METHOD", default="grow-diag-final-and",
                        choices=list(OUTPUT_METHODS) + ["gd", "gdf", "gdfa", "intersect"],
                        help="symmetrisation (Moses symal semantics): " + ", ".join(SYM_METHODS) +
                             "; or 'forward'/'reverse' for one direction (default: %(default)s)")
    parser.add_argument("--model", type=int, choices=(1, 2, 3), default=3,
                        help="eflomal model: 1 = IBM1, 2 = +HMM, 3 = +fertility (default: %(default)s)")
    parser.add_argument("--iterations", type=_iterations_arg, metavar="N|N1,N2,N3",
                        help="sampling iterations per model stage; unset = eflomal's corpus-size-based numbers, about "
                             "5000/sqrt(sentences) for the last stage and a quarter of that for the others")
    parser.add_argument("--length", type=float, default=1.0, metavar="X",
                        help="multiply eflomal's default iteration numbers by X (default: %(default)s)")
    parser.add_argument("--n-samplers", type=int, default=3, metavar="N",
                        help="independent eflomal samplers, run in parallel (default: %(default)s)")
    parser.add_argument("--null-prior", type=float, default=0.2, metavar="P",
                        help="eflomal's prior probability of a NULL link (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=None,
                        help="recorded only: eflomal 2.0 seeds itself from /dev/urandom and cannot be seeded")
    parser.add_argument("--priors-in", metavar="FILE",
                        help="align with these eflomal priors (from --priors-out, or eflomal-makepriors); "
                             "settings saved beside them (lowercasing, subwords) are reused")
    parser.add_argument("--priors-out", metavar="FILE",
                        help="align the whole input jointly and save priors estimated from it, to align new "
                             "text consistently later with --priors-in")
    parser.add_argument("--subword-model", metavar="FILE",
                        help="sentencepiece model (xlpe subword train): align pieces, output words "
                             "(a word pair is linked if any of its pieces are)")
    parser.add_argument("--tgt-subword-model", metavar="FILE",
                        help="separate sentencepiece model for the target side (unset: --subword-model for both)")
    parser.add_argument("--subword-output", action="store_true",
                        help="with --subword-model, write piece-level links instead of word-level ones")
    parser.add_argument("--lowercase", action="store_true",
                        help="lowercase tokens before aligning (output indices do not change)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="write an empty line for an empty, malformed or too long (>=1024 tokens) input "
                             "line instead of stopping; the number skipped is reported")
    parser.add_argument("--index-base", type=int, choices=(0, 1), default=0,
                        help="index base of the output links; 0 as fast_align/eflomal (default: %(default)s)")
    parser.add_argument("--chunk-size", type=int, metavar="N",
                        help="align in independent eflomal jobs of N pairs (bounded memory; use with "
                             "--priors-in)")
    parser.add_argument("--tmp-dir", metavar="DIR", help="directory for temporary files (unset: the system temp dir)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    parser.add_argument("--eflomal-verbose", action="store_true", help="show eflomal's own progress output")
    return parser


def cli_main(args: argparse.Namespace) -> int:
    """Run ``xlpe align`` with parsed ``args``; returns the exit status (errors go to stderr)."""
    try:
        if len(args.inputs) not in (1, 2):
            raise ConfigError(f"give SRC TGT or one 'src ||| tgt' file, not {len(args.inputs)} files")
        if not args.quiet and not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(message)s")
        subword = None
        if args.subword_model or args.tgt_subword_model:
            if not args.subword_model:
                raise ConfigError("--tgt-subword-model needs --subword-model for the source side")
            subword = (args.subword_model if not args.tgt_subword_model
                       else (args.subword_model, args.tgt_subword_model))
        src, tgt = args.inputs[0], (args.inputs[1] if len(args.inputs) == 2 else None)
        options = dict(sym=args.sym, model=args.model, iterations=args.iterations, rel_iterations=args.length,
                       n_samplers=args.n_samplers, null_prior=args.null_prior, seed=args.seed,
                       chunk_size=args.chunk_size, skip_bad=args.skip_bad, quiet=args.quiet,
                       verbose=args.eflomal_verbose, tmp_dir=args.tmp_dir)
        if args.priors_in:
            # settings saved with the priors apply unless given explicitly on the command line
            if args.lowercase:
                options["lowercase"] = True
            if subword is not None:
                options["subword"] = subword
            if args.subword_output:
                options["subword_output"] = True
            al = EflomalAligner.load(args.priors_in, **options)
        else:
            al = EflomalAligner(lowercase=args.lowercase, subword=subword, subword_output=args.subword_output,
                                **options)
        fit = bool(args.priors_out)
        if fit and args.priors_in:
            logger.info("--priors-in and --priors-out: aligning with the given priors, saving priors "
                        "estimated from this run's links")
        stats = al.align_files(src, tgt, args.out, index_base=args.index_base, forward_out=args.forward_out,
                               reverse_out=args.reverse_out, scores_out=args.scores_out, fit=fit)
        if fit:
            al.save(args.priors_out)
        if not args.quiet:
            msg = f"xlpe align: {stats['pairs']} sentence pairs aligned ({al.sym}) in {stats['seconds']:.1f} s"
            if stats["skipped"]:
                first = ", ".join(f"{n} ({why})" for n, why in stats["skipped_lines"][:5])
                msg += f"; skipped {stats['skipped']} bad lines (first: {first})"
            print(msg, file=sys.stderr)
        return 0
    except XlpeError as e:
        print(f"xlpe align: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1
