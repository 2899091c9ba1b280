"""Statistical word alignment with eflomal (Östling & Tiedemann 2016), plus symmetrisation.

eflomal is GPLv3 and optional: :func:`xlpe.align.eflomal_format.import_eflomal` is the one place that imports
it, lazily, only when an alignment runs (``pip install 'xlpe[eflomal]'``). xlpe does its own tokenisation,
vocabulary indexing (:mod:`xlpe.align.eflomal_input`) and eflomal's numeric file format
(:mod:`xlpe.align.eflomal_format`), streams input in blocks, and symmetrises in vectorised batches; priors
(:mod:`xlpe.align.priors`) let a corpus too large for one job be aligned in consistent chunks. What eflomal gives
and does not give (no seed, no per-link scores, a length limit), memory, and typical use: ``docs/align.md``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import os
import subprocess
import tempfile
import time
from typing import Any, Iterable, Iterator, Sequence

from xlpe.align import eflomal_format as fmt
from xlpe.align.eflomal_format import (AlignResult, Batch, Out, TextWriter, Words, collect, format_links,
                                       import_eflomal, pair_results, pairs_of, read_batches, rechunk)
from xlpe.align.eflomal_format import INSTALL_HINT, eflomal_available  # noqa: F401  (re-exported)
from xlpe.align.eflomal_input import Cached, PairEncoder, file_blocks, memory_blocks, spool_stdin
from xlpe.align.eflomal_input import EFLOMAL_MAX_LEN  # noqa: F401  (re-exported)
from xlpe.align.priors import Priors, PriorIndex
from xlpe.align.segment import segmenters
from xlpe.align.symmetrize import METHODS as SYM_METHODS
from xlpe.align.symmetrize import canonical_method
from xlpe.errors import ConfigError, FormatError, XlpeError
from xlpe.io.alignments import Alignment, format_alignment
from xlpe.io.atomic import atomic_write
from xlpe.io.process import TAG_RE, owner_tag, remove_stale
from xlpe.io.text import count_lines

logger = logging.getLogger(__name__)

#: symmetrisation methods plus the two directional alignments themselves.
OUTPUT_METHODS = SYM_METHODS + ("forward", "reverse")
MAX_SAMPLERS = 64      #: the most samplers one alignment runs (threads, each with its own counts)
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
        if not 1 <= int(n_samplers) <= MAX_SAMPLERS:
            raise ConfigError(f"n_samplers must be >= 1, not {n_samplers!r}" if int(n_samplers) < 1 else
                              f"n_samplers must be <= {MAX_SAMPLERS} (each sampler is a thread with its own "
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
        blocks = memory_blocks(src, tgt)
        return collect(self._outs(self._run(blocks, fit=True, scores=scores, use_priors=True,
                                            total=len(src), cache=True)))

    def align(self, src: Sequence[Words | str], tgt: Sequence[Words | str]) -> list[Alignment]:
        """Align sentence pairs held in memory (lists of tokens, or strings split on ASCII space).
        Uses the priors when there are any. Returns one :class:`Alignment` per pair (``sym`` method)."""
        blocks = memory_blocks(src, tgt)
        return [o.alignment for o in self._outs(self._batches(blocks, total=len(src), scores=False, cache=True),
                                                directions=False)]

    def align_detailed(self, src: Sequence[Words | str], tgt: Sequence[Words | str], *,
                       scores: bool = False) -> AlignResult:
        """Like :meth:`align`, also returning both directions, optional sentence scores and skipped pairs."""
        blocks = memory_blocks(src, tgt)
        return collect(self._outs(self._batches(blocks, total=len(src), scores=scores, cache=True)))

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
            src, tgt = spool_stdin(src, tgt, tmp)
            total = None if self.quiet else count_lines(src)
            factory = lambda: file_blocks(src, tgt)  # noqa: E731
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

    # -- the two ends of a job -----------------------------------------------------------------------

    def _encoder(self) -> PairEncoder:
        """The input side of a job (:mod:`xlpe.align.eflomal_input`) with the aligner's current options."""
        return PairEncoder(self.lowercase, self._segs, self.skip_bad)

    def _outs(self, batches: Iterable[Batch], directions: bool = True) -> Iterator[Out]:
        """Per-pair results (:func:`~xlpe.align.eflomal_format.pair_results`): word links with subwords unless
        ``subword_output``."""
        return pair_results(batches, self._segs is not None and not self.subword_output, directions)

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
                    n_items, skipped = self._encoder().encode_blocks(block_factory(), sw, tw, src_vocab, tgt_vocab,
                                                                     start, bar)
                else:
                    item_factory = lambda: self._encoder().prepare(pairs_of(block_factory()), start)  # noqa: E731
                    if cache:
                        item_factory = Cached(item_factory)
                    n_items, skipped = PairEncoder.encode_items(item_factory(), sw, tw, src_vocab, tgt_vocab, bar)
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
            items = item_factory() if item_factory is not None else None
            bar = _progress(None, total, self.sym, False) if show else None
            yield from read_batches(files, self.sym, start, n_items, skipped, items, bar)
            if fit:
                self._estimate_priors(p("src"), p("tgt"), *vocabs, files)
                self.n_fit_sentences = n_ok

    def _estimate_priors(self, src_path, tgt_path, src_words, tgt_words, files) -> None:
        """Priors from this job's links (:meth:`Priors.estimate`)."""
        t0 = time.time()
        self.priors = Priors.estimate(src_path, tgt_path, src_words, tgt_words, files["fwd"], files["rev"])
        if not self.quiet:
            logger.info("priors: %d lexical, %d jump, %d fertility entries (%.1f s)", self.priors.n_lex,
                        len(self.priors.hmmf) + len(self.priors.hmmr),
                        sum(map(len, self.priors.ferf.values())) + sum(map(len, self.priors.ferr.values())),
                        time.time() - t0)


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
