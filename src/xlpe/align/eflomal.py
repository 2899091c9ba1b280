"""Statistical word alignment with eflomal (Östling & Tiedemann 2016), plus symmetrisation.

eflomal is GPLv3 and optional: :func:`xlpe.align.eflomal_format.import_eflomal` is the one place that imports
it, lazily, only when an alignment runs (``pip install 'xlpe[eflomal]'``). xlpe does its own tokenisation,
vocabulary indexing and eflomal's numeric file format (:mod:`xlpe.align.eflomal_format`), streams input in
blocks, and symmetrises in vectorised batches; priors (:mod:`xlpe.align.priors`) let a corpus too large for
one job be aligned in consistent chunks. What eflomal gives and does not give (no seed, no per-link scores, a
length limit), memory, and typical use: ``docs/align.md``.

Why this module is over 500 lines: :class:`EflomalAligner` is one job pipeline (encode the input, run eflomal,
parse, symmetrise, write) whose steps all read the aligner's options and share its vocabularies; cut apart,
each piece would take a dozen arguments. Everything that does not need them lives in the modules above.
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
import json
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from xlpe.align.symmetrize import METHODS as SYM_METHODS
from xlpe.align.symmetrize import canonical_method, csr_links, symmetrize_batch
from xlpe.errors import ConfigError, FormatError, XlpeError
from xlpe.io.alignments import Alignment, format_alignment
from xlpe.io.atomic import atomic_write
from xlpe.io.process import TAG_RE, owner_tag, remove_stale
from xlpe.io.bitext import parse_joint_line
from xlpe.io.text import count_lines, tokenize
from xlpe.align import eflomal_format as fmt
from xlpe.align.eflomal_format import (EMPTY, AlignResult, Batch, Block, Item, Out, Pair, TextWriter, Words,
                                       eflomal_token, format_links, import_eflomal, line_blocks, pairs_of,
                                       parse_link_lines, rechunk, vocab_ids)
from xlpe.align.eflomal_format import INSTALL_HINT, eflomal_available  # noqa: F401  (re-exported)
from xlpe.align.priors import Priors, PriorIndex
from xlpe.align.segment import segmenters
logger = logging.getLogger(__name__)

#: eflomal outputs an empty alignment for sentences this long or longer (checked with eflomal 2.0.0).
EFLOMAL_MAX_LEN = 1024
#: symmetrisation methods plus the two directional alignments themselves.
OUTPUT_METHODS = SYM_METHODS + ("forward", "reverse")
#: the most samplers one alignment runs (threads, each with its own counts)
MAX_SAMPLERS = 64
#: the temporary directories: ``xlpe-align-<owner tag>-<random>`` and ``xlpe-eflomal-...``.
TMP_PATTERN = r"xlpe-(?:align|eflomal)-" + TAG_RE + r"-\w+"
_META_SUFFIX = ".xlpe.json"
_META_FORMAT = "xlpe.align.eflomal/1"


# --- the aligner ------------------------------------------------------------------------------------------



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
        if int(n_samplers) > MAX_SAMPLERS:
            raise ConfigError(f"n_samplers must be <= {MAX_SAMPLERS} (each sampler is a thread with its own "
                              f"counts; eflomal's default is 3), not {n_samplers!r}")
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
        self._segs = segmenters(subword)
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
        if tmp_dir is not None and not os.path.isdir(tmp_dir):
            raise ConfigError(f"tmp_dir {os.fspath(tmp_dir)} is not a directory")
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
                buf = list(itertools.islice(it, fmt.BLOCK))
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
        remove_stale(self.tmp_dir or tempfile.gettempdir(), TMP_PATTERN)     # left by a run killed by SIGKILL
        with contextlib.ExitStack() as stack:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix=f"xlpe-align-{owner_tag()}-",
                                                                  dir=self.tmp_dir))
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
                    files["out"].write(format_links(b.full(b.sym), index_base))
                    if "forward" in files:
                        files["forward"].write(format_links(b.full(b.fwd), index_base))
                    if "reverse" in files:
                        files["reverse"].write(format_links(b.full(b.rev), index_base))
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
                "eflomal_version": eflomal_version()}
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
            for k in range(0, len(src), fmt.BLOCK):
                yield k + 1, src[k:k + fmt.BLOCK], tgt[k:k + fmt.BLOCK], None
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

    def _prepare(self, pairs: Iterable[Pair], start: int = 0) -> Iterator[Item]:
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
                yield Item(k, skip=self._malformed(where))
                continue
            spath, tpath = where if where is not None else ("<source>", "<target>")
            s = tokenize(s) if isinstance(s, str) else list(s)
            t = tokenize(t) if isinstance(t, str) else list(t)
            if not s or not t:
                yield Item(k, skip=self._problem(s, t, lineno, spath, tpath))
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
                yield Item(k, skip=reason)
                continue
            yield Item(k, conv(s), conv(t), sw, tw)

    def _encode_blocks(self, blocks: Iterable[Block], sw: TextWriter, tw: TextWriter, src_vocab: dict[str, int],
                       tgt_vocab: dict[str, int], start: int, bar) -> tuple[int, list[tuple[int, str]]]:
        """Check the pairs and write them in eflomal's format (the path without subwords: what
        :meth:`_prepare` + :func:`vocab_ids` do, with the same tokens, ids, checks and errors, fused and per block).
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
    def _encode_items(items: Iterable[Item], sw: TextWriter, tw: TextWriter, src_vocab: dict[str, int],
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
            sw.add(vocab_ids(src_vocab, it.src))
            tw.add(vocab_ids(tgt_vocab, it.tgt))
        return n, skipped

    # -- running eflomal ------------------------------------------------------------------------------

    def _batches(self, block_factory, total, scores, cache: bool = False) -> Iterator[Batch]:
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
            for chunk in rechunk(block_factory(), self.chunk_size):
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
             progress: bool = True, start: int = 0, cache: bool = False) -> Iterator[Batch]:
        """One eflomal job over the pairs of ``block_factory()`` (pair indices from ``start``). Uses the priors
        when ``use_priors`` and there are any. Without subwords the input is read once; with subwords its
        items are prepared again (or replayed, with ``cache``) to convert the links to words."""
        show = progress and not self.quiet
        ef = import_eflomal()
        remove_stale(self.tmp_dir or tempfile.gettempdir(), TMP_PATTERN)     # left by a run killed by SIGKILL
        with tempfile.TemporaryDirectory(prefix=f"xlpe-eflomal-{owner_tag()}-", dir=self.tmp_dir) as d:
            p = lambda name: os.path.join(d, name)  # noqa: E731
            src_vocab: dict[str, int] = {}
            tgt_vocab: dict[str, int] = {}
            sw, tw = TextWriter(p("src")), TextWriter(p("tgt"))
            item_factory = None
            bar = _progress(None, total, "reading", not show)
            try:
                if self._segs is None:
                    n_items, skipped = self._encode_blocks(block_factory(), sw, tw, src_vocab, tgt_vocab, start, bar)
                else:
                    item_factory = lambda: self._prepare(pairs_of(block_factory()), start)  # noqa: E731
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
                                                  PriorIndex(src_vocab), PriorIndex(tgt_vocab), f)
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

    def _read_batches(self, files, start, n_items, skipped, item_factory, total) -> Iterator[Batch]:
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
                    n = min(fmt.OUT_BATCH, end - k)
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

    def _outs(self, batches: Iterable[Batch], directions: bool = True) -> Iterator[Out]:
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

    def _estimate_priors(self, src_path, tgt_path, src_words, tgt_words, files) -> None:
        """Priors from the forward and reverse links with eflomal's ``calculate_priors`` (streamed), reading
        the sentences back from eflomal's input files (``*_words``: id -> eflomal token)."""
        ef = import_eflomal()
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

    def _collect(self, outs: Iterable[Out]) -> AlignResult:
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


def eflomal_version() -> str | None:
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


