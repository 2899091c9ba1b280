"""BLEU and chrF through sacrebleu, with signatures, and paired bootstrap significance between systems.

Nothing is reimplemented: scores, signatures and the paired bootstrap resampling test are sacrebleu's
own (``sacrebleu.metrics.BLEU``/``CHRF`` and ``sacrebleu.significance.PairedTest``). Hypotheses and
references are detokenised text, one sentence per line. The default tokenizer ``13a`` needs no download
(the SPM-based tokenizers fetch a model and therefore fail offline).
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from typing import Sequence

from xlpe.errors import ConfigError, FormatError


@dataclass
class MetricScore:
    name: str
    score: float
    signature: str
    text: str                       # sacrebleu's formatted score line


@dataclass
class SystemComparison:
    system: str
    scores: dict[str, float]
    p_values: dict[str, float | None] = field(default_factory=dict)   # None for the baseline
    ci: dict[str, float] = field(default_factory=dict)                # 95% CI half-width from resampling


#: BLEU tokenizers that fetch a model from the network the first time they are used
DOWNLOADING_TOKENIZERS = ("spm", "flores101", "flores200", "spBLEU-1K")


def check_tokenize(tokenize: str) -> None:
    """A :class:`ConfigError` for a tokenizer sacrebleu does not have (listing those it has)."""
    from sacrebleu.metrics import bleu
    valid = list(getattr(bleu, "_TOKENIZERS", {}))
    if valid and tokenize not in valid:
        raise ConfigError(f"unknown BLEU tokenizer {tokenize!r}; sacrebleu has: {', '.join(valid)}")


def _metric(name: str, tokenize: str, lowercase: bool):
    from sacrebleu.metrics import BLEU, CHRF
    if name == "bleu":
        check_tokenize(tokenize)
        try:
            return BLEU(tokenize=tokenize, lowercase=lowercase)
        except (OSError, ImportError) as e:          # URLError is an OSError
            need = " (it downloads its model the first time: that needs the network)" \
                if tokenize in DOWNLOADING_TOKENIZERS else ""
            raise ConfigError(f"BLEU tokenizer {tokenize!r} cannot be set up{need}: {e}") from None
    if name == "chrf":
        return CHRF()
    if name == "chrf++":
        return CHRF(word_order=2)
    raise ConfigError(f"unknown metric {name!r} (expected bleu, chrf or chrf++)")


def _check(hyps: Sequence[str], refs: Sequence[Sequence[str]]) -> None:
    if not refs or not hyps:
        raise FormatError("nothing to score: no hypothesis or no reference lines",
                          expected="at least one line of each")
    for k, r in enumerate(refs):
        if len(r) != len(hyps):
            raise FormatError(f"{len(hyps)} hypotheses but reference set {k + 1} has {len(r)} lines",
                              expected="one hypothesis per reference line")


def corpus_scores(hyps: Sequence[str], refs: Sequence[Sequence[str]] | Sequence[str], *,
                  metrics: Sequence[str] = ("bleu", "chrf"), tokenize: str = "13a",
                  lowercase: bool = False) -> dict[str, MetricScore]:
    """Corpus-level scores. ``refs`` is one list of lines, or several reference sets."""
    if refs and isinstance(refs[0], str):
        refs = [refs]                            # type: ignore[list-item]
    _check(hyps, refs)  # type: ignore[arg-type]
    out = {}
    for name in metrics:
        m = _metric(name, tokenize, lowercase)
        s = m.corpus_score(list(hyps), [list(r) for r in refs])
        out[name] = MetricScore(name, float(s.score), str(m.get_signature()), s.format())
    return out


def paired_bootstrap(systems: Sequence[tuple[str, Sequence[str]]], refs: Sequence[Sequence[str]] | Sequence[str], *,
                     metrics: Sequence[str] = ("bleu", "chrf"), n_samples: int = 1000, seed: int = 12345,
                     tokenize: str = "13a") -> tuple[list[SystemComparison], dict[str, str]]:
    """Paired bootstrap resampling (Koehn 2004) of every system against the first (the baseline).

    Returns one :class:`SystemComparison` per system and the metric signatures (which record the number
    of samples and the seed).
    """
    from sacrebleu.significance import PairedTest
    if refs and isinstance(refs[0], str):
        refs = [refs]                            # type: ignore[list-item]
    if len(systems) < 2:
        raise ConfigError("paired bootstrap needs a baseline and at least one other system")
    if n_samples < 1:
        raise ConfigError(f"the paired bootstrap needs at least one sample, not {n_samples}")
    for name, h in systems:
        _check(h, refs)  # type: ignore[arg-type]
    refs = [list(r) for r in refs]
    # sacrebleu caches reference statistics when the metric is given the references
    ms = {name: type(_metric(name, tokenize, False))(**_metric_kwargs(name, tokenize), references=refs)
          for name in metrics}
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)      # sacrebleu reads its seed from here at construction
    try:
        test = PairedTest([(n, list(h)) for n, h in systems], ms, references=None, test_type="bs",
                          n_samples=n_samples)
        sigs, table = test()
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old
    names = table["System"]
    out = []
    keys = [k for k in table if k != "System"]
    for idx, name in enumerate(names):
        c = SystemComparison(name, {})
        for k in keys:
            r = table[k][idx]
            c.scores[k] = float(r.score)
            c.p_values[k] = None if r.p_value is None else float(r.p_value)
            c.ci[k] = float(r.ci) if r.ci is not None else float("nan")
        out.append(c)
    return out, {k: str(v) for k, v in sigs.items()}


def _metric_kwargs(name: str, tokenize: str) -> dict:
    if name == "bleu":
        return {"tokenize": tokenize}
    if name == "chrf++":
        return {"word_order": 2}
    return {}




class _DropDetokenizeWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not any(m in msg for m in ("forgot to detokenize", "insist your data is detokenized",
                                          "end in a tokenized period"))


@contextlib.contextmanager
def tokenized_by_design():
    """Silence sacrebleu's "it looks like you forgot to detokenize" warning, and only it, for text that is
    tokenised on purpose (the built-in synthetic pairs); every other warning stays visible."""
    log = logging.getLogger("sacrebleu")
    f = _DropDetokenizeWarning()
    log.addFilter(f)
    try:
        yield
    finally:
        log.removeFilter(f)
