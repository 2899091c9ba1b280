"""The sentence pairs an eflomal job reads: blocks of pairs from memory or from files (two line-aligned files or one
``src ||| tgt`` file; standard input spooled to a file first), each pair checked (empty, too long, malformed),
normalised (lowercasing, subword segmentation) and written in eflomal's numeric format with the vocabularies
built on the way (:class:`PairEncoder`). :class:`xlpe.align.eflomal.EflomalAligner` runs the jobs."""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from typing import Iterable, Iterator

from xlpe.align import eflomal_format as fmt
from xlpe.align.eflomal_format import Block, Item, Pair, TextWriter, eflomal_token, line_blocks, vocab_ids
from xlpe.errors import ConfigError, FormatError
from xlpe.io.bitext import parse_joint_line
from xlpe.io.text import tokenize

#: eflomal outputs an empty alignment for sentences this long or longer (checked with eflomal 2.0.0).
EFLOMAL_MAX_LEN = 1024


def memory_blocks(src, tgt):
    """A factory of the blocks of pairs of two sequences of sentences held in memory."""
    if isinstance(src, (str, bytes)) or isinstance(tgt, (str, bytes)):
        raise ConfigError("src and tgt must be sequences of sentences (use align_files() for file paths)")
    if len(src) != len(tgt):
        raise FormatError(f"the source has {len(src)} sentences but the target has {len(tgt)}",
                          expected="as many target sentences as source sentences")
    src = src if isinstance(src, (list, tuple)) else list(src)
    tgt = tgt if isinstance(tgt, (list, tuple)) else list(tgt)

    def blocks():
        for k in range(0, len(src), fmt.BLOCK):
            yield k + 1, src[k:k + fmt.BLOCK], tgt[k:k + fmt.BLOCK], None
    return blocks


def spool_stdin(src, tgt, tmp):
    """``(src, tgt)`` with a path ``-`` (standard input) replaced by a copy of it in the directory ``tmp``."""
    def spool(p, name):
        if os.fspath(p) != "-":
            return p
        dest = os.path.join(tmp, name)
        with open(dest, "wb") as f:
            shutil.copyfileobj(sys.stdin.buffer, f)
        return dest
    return spool(src, "stdin.src"), (None if tgt is None else spool(tgt, "stdin.tgt"))


def file_blocks(src, tgt) -> Iterator[Block]:
    """Blocks of pairs from two line-aligned files, or one joint file (``tgt`` None); a line-count
    mismatch always raises (no way to pair lines), after the pairs before it."""
    if tgt is None:
        lineno = 1
        for lines in line_blocks(src):
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
    for a, b in itertools.zip_longest(line_blocks(src), line_blocks(tgt)):
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


class PairEncoder:
    """Checks, normalises and encodes sentence pairs for eflomal: ``lowercase`` the tokens (after any subword
    segmentation), ``segs`` the ``(source, target)`` segmenters or None (:func:`xlpe.align.segment.segmenters`),
    ``skip_bad`` an empty, malformed or too long pair instead of raising."""

    def __init__(self, lowercase: bool, segs, skip_bad: bool):
        self.lowercase, self.segs, self.skip_bad = lowercase, segs, skip_bad

    def problem(self, s, t, lineno, spath, tpath, unit: str = "tokens") -> str | None:
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

    def malformed(self, where: FormatError) -> str:
        if not self.skip_bad:
            raise FormatError(where.message, where.path, where.line,
                              (where.expected or "") + " — or use --skip-bad / skip_bad=True")
        return "malformed"

    def prepare(self, pairs: Iterable[Pair], start: int = 0) -> Iterator[Item]:
        """Normalise, segment and check pairs (the per-item path, used with subwords); raise on a bad one
        unless ``skip_bad``. Item indices count from ``start``."""
        segs = self.segs
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
            pairs = prefetched(pairs, segs)
        for k, (lineno, s, t, where) in enumerate(pairs, start):
            if isinstance(where, FormatError):
                yield Item(k, skip=self.malformed(where))
                continue
            spath, tpath = where if where is not None else ("<source>", "<target>")
            s = tokenize(s) if isinstance(s, str) else list(s)
            t = tokenize(t) if isinstance(t, str) else list(t)
            if not s or not t:
                yield Item(k, skip=self.problem(s, t, lineno, spath, tpath))
                continue
            sw = tw = None
            if segs is not None:
                s, sw = segs[0](s)
                t, tw = segs[1](t)
                s, t, sw, tw = list(s), list(t), list(sw), list(tw)
                if len(sw) != len(s) or len(tw) != len(t):
                    raise ConfigError("the subword segmenter returned word_of of a different length than pieces")
            reason = self.problem(s, t, lineno, spath, tpath, "pieces" if segs else "tokens")
            if reason:
                yield Item(k, skip=reason)
                continue
            yield Item(k, conv(s), conv(t), sw, tw)

    def encode_blocks(self, blocks: Iterable[Block], sw: TextWriter, tw: TextWriter, src_vocab: dict[str, int],
                      tgt_vocab: dict[str, int], start: int, bar) -> tuple[int, list[tuple[int, str]]]:
        """Check the pairs and write them in eflomal's format (the path without subwords: what
        :meth:`prepare` + :func:`vocab_ids` do, with the same tokens, ids, checks and errors, fused and per block).
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
                        skipped.append((k + off, self.malformed(per[off])))
                        continue
                    spath, tpath = per[off]
                s = tokenize(s) if isinstance(s, str) else list(s)
                t = tokenize(t) if isinstance(t, str) else list(t)
                ns, nt = len(s), len(t)
                if not ns or not nt or ns >= max_len or nt >= max_len:
                    skipped.append((k + off, self.problem(s, t, lineno + off, spath, tpath)))
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
    def encode_items(items: Iterable[Item], sw: TextWriter, tw: TextWriter, src_vocab: dict[str, int],
                     tgt_vocab: dict[str, int], bar) -> tuple[int, list[tuple[int, str]]]:
        """Write prepared items (:meth:`prepare`) in eflomal's format; returns the number of pairs and the skipped
        ``(index, reason)``."""
        n = 0
        skipped: list[tuple[int, str]] = []
        for it in items:
            n += 1
            if bar is not None:
                bar.update(1)
            if it.skip:
                skipped.append((it.index, it.skip))
                continue
            sw.add(vocab_ids(src_vocab, it.src))
            tw.add(vocab_ids(tgt_vocab, it.tgt))
        return n, skipped


def prefetched(pairs: Iterable[Pair], segs, block: int = 1024) -> Iterator[Pair]:
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


class Cached:
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
