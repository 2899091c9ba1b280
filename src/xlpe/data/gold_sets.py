"""Word-alignment test sets: an unlabelled parallel corpus with a human-aligned gold set, ready for an aligner.

The four sets of the neural word-alignment literature, read from a local copy of ``../shared/data`` (the
files' own ``PROVENANCE.md`` gives formats and index bases), and any pair of your own with the same shape
(:func:`custom_gold_set`):

========  =========================================================  ============================
name      unlabelled corpus                                           gold (1-based, sure/possible)
========  =========================================================  ============================
``deen``  Europarl ComTrans De-En (23,580 lines)                      RWTH Europarl, 508 sentences
``enfr``  ISI Hansards, the first 100k lines (normalised, see below)  NAACL-2003 WPT test, 447
``zhen``  BTEC Zh-En 44k                                              TsinghuaAligner test, 450
``jaen``  KFTT train 30k + dev (never ``tune``: it holds the gold)     KFTT alignment data, 582
========  =========================================================  ============================

Every sentence is tokenised on ASCII spaces only (the Japanese gold uses U+3000 as a token). Hansards is
untokenised and without accents; its lines are normalised to the gold's conventions (lowercase, accents
stripped, French elisions and contractions expanded as the gold has them: ``du`` -> ``de le``, but not
inside a hyphenated compound, ``au-dessus`` -> ``au - dessus``), and the French
gold's accents are stripped too (no token count changes). Case is kept otherwise (``lowercase`` folds it), so a
cased subword model sees the text as written.
"""

from __future__ import annotations

import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from xlpe.errors import ConfigError
from xlpe.io.alignments import Alignment, read_alignments
from xlpe.io.text import read_lines, tokenize

GOLD_SETS = ("deen", "enfr", "zhen", "jaen")
#: where the sets live relative to a checkout (``../shared/data`` beside the repository)
DEFAULT_ROOT = Path(__file__).resolve().parents[3].parent / "shared" / "data"


@dataclass
class GoldSet:
    """A pair's tokenised corpus and its gold set (sentences as space-joined tokens; gold 0-based)."""

    name: str
    train_src: list[str]
    train_tgt: list[str]
    gold_src: list[str]
    gold_tgt: list[str]
    gold: list[Alignment]
    sources: dict[str, str] = field(default_factory=dict)     # what was read, for the report

    def __post_init__(self):
        if not (len(self.gold_src) == len(self.gold_tgt) == len(self.gold)):
            raise ConfigError(f"gold set {self.name}: {len(self.gold_src)} source, {len(self.gold_tgt)} target "
                              f"sentences and {len(self.gold)} alignments")


def _lines(path: Path, limit: int | None = None) -> list[str]:
    out = []
    for _, text in read_lines(path):
        out.append(text)
        if limit is not None and len(out) >= limit:
            break
    return out


def strip_accents(s: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFD", s) if unicodedata.category(c) != "Mn")


# --- Hansards normalisation to the NAACL-2003 gold conventions ---------------------------------------------

#: bumped whenever the normalisation below changes what a loader returns (a recipe's cache key holds it)
HANSARDS_NORM_VERSION = 2          # 2: contractions inside hyphenated compounds stay ("au - dessus")
_ABBREV = {"mr", "mrs", "ms", "dr", "st", "m", "mm", "mme", "hon", "no", "jr", "sr", "p", "c", "ltd", "inc"}
_FR_ELISION = {"l": "le", "d": "de", "j": "je", "n": "ne", "s": "se", "c": "ce", "m": "me", "t": "te",
               "qu": "que", "jusqu": "jusque", "lorsqu": "lorsque", "puisqu": "puisque", "quoiqu": "quoique"}
_FR_CONTRACTION = {"du": ["de", "le"], "des": ["de", "les"], "au": ["a", "le"], "aux": ["a", "les"]}
_PUNCT = re.compile(r"([,;:!?()\"«»\[\]{}/])")


def _split_tokens(text: str) -> list[tuple[str, bool]]:
    """The tokens of a raw line, each with whether it is a part of a hyphenated compound ("au-dessus")."""
    out: list[tuple[str, bool]] = []
    for word in tokenize(_PUNCT.sub(r" \1 ", text)):
        parts = re.split(r"(?<=\w)-(?=\w)", word)
        for k, part in enumerate(parts):
            if k:
                out.append(("-", False))
            if part.endswith(".") and len(part) > 1 and part[:-1].lower() not in _ABBREV and \
                    not re.fullmatch(r"(\w\.)+", part):
                out += [(part[:-1], len(parts) > 1), (".", False)]
            else:
                out.append((part, len(parts) > 1))
    return out


def norm_fr(line: str) -> str:
    """A raw Hansards French line in the gold's conventions. Contractions inside a hyphenated compound stay, as
    the gold writes them ("au - dessus", "riviere - du - loup")."""
    out = []
    for tok, in_compound in _split_tokens(strip_accents(line.lower())):
        if tok == "aujourd'hui":
            out += ["aujourd'", "hui"]
            continue
        m = re.fullmatch(r"(\w+)'(\w.*)", tok)
        if m and m.group(1) in _FR_ELISION:
            out += [_FR_ELISION[m.group(1)], m.group(2)]
            continue
        out += [tok] if in_compound else _FR_CONTRACTION.get(tok, [tok])
    return " ".join(out)


def norm_en(line: str) -> str:
    """A raw Hansards English line in the gold's conventions."""
    out = []
    for tok, _ in _split_tokens(line.lower()):
        m = re.fullmatch(r"(\w+)('s|n't|'re|'ve|'ll|'d|'m)", tok)
        out += [m.group(1), m.group(2)] if m else [tok]
    return " ".join(out)


def _finish(name: str, src: list[str], tgt: list[str], gs: list[str], gt: list[str], gold_path: Path,
            gold_base: int, lowercase: bool, sources: dict[str, str]) -> GoldSet:
    if len(src) != len(tgt):
        raise ConfigError(f"gold set {name}: the corpus has {len(src)} source but {len(tgt)} target lines")
    if len(gs) != len(gt):
        raise ConfigError(f"gold set {name}: the gold text has {len(gs)} source but {len(gt)} target lines")
    fold = (lambda s: s.lower()) if lowercase else (lambda s: s)
    pairs = [(" ".join(tokenize(fold(a))), " ".join(tokenize(fold(b)))) for a, b in zip(src, tgt)]
    pairs = [(a, b) for a, b in pairs if a and b]                  # empty lines carry nothing for an aligner
    gs = [" ".join(tokenize(fold(x))) for x in gs]
    gt = [" ".join(tokenize(fold(x))) for x in gt]
    lengths = [(len(tokenize(a)), len(tokenize(b))) for a, b in zip(gs, gt)]
    gold = list(read_alignments(gold_path, gold_base, lengths=lengths))
    return GoldSet(name, [a for a, _ in pairs], [b for _, b in pairs], gs, gt, gold, sources)


def load_gold_set(name: str, root: str | os.PathLike | None = None, *, lowercase: bool = False,
                  train_limit: int | None = None) -> GoldSet:
    """One of :data:`GOLD_SETS` from ``root`` (default ``../shared/data``); ``train_limit`` keeps the first N
    corpus lines."""
    root = Path(root) if root else DEFAULT_ROOT
    gold_dir = root / "word-alignment-gold" / name
    if name not in GOLD_SETS:
        raise ConfigError(f"unknown gold set {name!r}; known: {', '.join(GOLD_SETS)} (or give your own files)")
    if not gold_dir.is_dir():
        raise ConfigError(f"gold set {name}: {gold_dir} not found (the shared data folder is expected at {root})")
    lim = train_limit or None
    if name == "deen":
        d = root / "europarl-comtrans-de-en"
        corpus = (d / "comtrans.de", d / "comtrans.en")
        src, tgt = _lines(corpus[0], lim), _lines(corpus[1], lim)
        gs, gt = _lines(gold_dir / "deen.de"), _lines(gold_dir / "deen.en")
    elif name == "enfr":
        d = root / "hansards-en-fr"
        corpus = (d / "train.en", d / "train.fr")
        n = min(lim or 100_000, 100_000)
        src, tgt = [norm_en(x) for x in _lines(corpus[0], n)], [norm_fr(x) for x in _lines(corpus[1], n)]
        gs = _lines(gold_dir / "enfr.en")
        gt = [strip_accents(x) for x in _lines(gold_dir / "enfr.fr")]     # token count unchanged
    elif name == "zhen":
        d = root / "btec-zh-en-44k"
        corpus = (d / "train.zh", d / "train.en")
        src, tgt = _lines(corpus[0], lim), _lines(corpus[1], lim)
        gs, gt = _lines(gold_dir / "zhen.zh"), _lines(gold_dir / "zhen.en")
    else:
        d = root / "kftt-ja-en-30k"
        corpus = (d / "train.ja", d / "train.en")
        src = _lines(corpus[0], lim) + (_lines(d / "dev.ja") if not lim else [])
        tgt = _lines(corpus[1], lim) + (_lines(d / "dev.en") if not lim else [])
        gs, gt = _lines(gold_dir / "jaen.ja"), _lines(gold_dir / "jaen.en")
    sources = {"corpus": f"{corpus[0]} | {corpus[1]}", "gold": str(gold_dir / f"{name}.talp")}
    return _finish(name, src, tgt, gs, gt, gold_dir / f"{name}.talp", 1, lowercase, sources)


def custom_gold_set(name: str, *, train_src: str, train_tgt: str, gold_src: str, gold_tgt: str, gold_align: str,
                    gold_base: int = 1, lowercase: bool = False, train_limit: int | None = None) -> GoldSet:
    """A pair of your own: tokenised corpus files, tokenised gold text and a Pharaoh gold file
    (``i-j`` sure, ``ipj`` possible, base ``gold_base``)."""
    for k, v in (("train_src", train_src), ("train_tgt", train_tgt), ("gold_src", gold_src),
                 ("gold_tgt", gold_tgt), ("gold_align", gold_align)):
        if not v or not Path(v).is_file():
            raise ConfigError(f"gold set {name}: {k} = {v!r} is not a file")
    lim = train_limit or None
    return _finish(name, _lines(Path(train_src), lim), _lines(Path(train_tgt), lim), _lines(Path(gold_src)),
                   _lines(Path(gold_tgt)), Path(gold_align), gold_base, lowercase,
                   {"corpus": f"{train_src} | {train_tgt}", "gold": str(gold_align)})
