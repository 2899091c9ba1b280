"""Significance that accounts for training seeds, one implementation for every recipe.

A system is a list of ``k`` seed runs, each scored on the same ``N`` test sentences. Two tests, both reported:

* **Seed-aware paired bootstrap** (Koehn 2004, with the seeds kept together as Clark et al. 2011 advise): each
  of ``R`` resamples draws ``N`` sentence indices with replacement — one draw shared by every seed of both
  systems — scores each system *per seed* on the resample from per-sentence sufficient statistics, and averages
  over its seeds. ``p`` is the one-sided share of resamples in which the candidate is not better than the
  baseline, ``(#{δ_r ≤ 0} + 1) / (R + 1)`` with ``δ`` the seed-mean difference signed so that positive is
  better; the 95% interval is the 2.5–97.5 percentiles of ``δ_r``. Copying a seed's outputs changes nothing
  (a mean over identical runs), and sentences never count twice because there are seeds.
* **A t-test across seeds** on the per-seed corpus scores, two-sided, from :mod:`scipy.stats`: paired
  (``ttest_rel``) when the caller says the i-th runs of both systems belong together (the same seed, so the
  same batch order and initialisation) and both have as many runs, otherwise Welch's (``ttest_ind`` with
  ``equal_var=False``); it is the part that sees training variance. It gives no p-value, and says why, with
  one seed on either side, and when the runs show no variance to test: Welch's when neither system's score
  varies over its seeds, the paired test when the seed-by-seed differences do not vary (``k`` copies of one
  output are one seed, not ``k``).

:meth:`Comparison.claim` is what reports print: the verdict and the tests it rests on (why the t-test is paired
or not, and what the bootstrap resamples).

Corpus metrics: BLEU and chrF (sacrebleu's own per-sentence statistics and scoring), AER (micro-averaged over
gold sentences, lower is better) and Kendall τ of orders (micro-averaged, higher is better).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np
from scipy import stats as scipy_stats

from xlpe.errors import ConfigError

SeedStats = Sequence[np.ndarray]      # per seed: (N, K) per-sentence sufficient statistics
#: metrics whose scores are fractions, shown as percentages
PERCENT_METRICS = ("AER", "tau")
#: why there is no test across seeds when a system has one run
ONE_SEED = "one seed: no claim about training variance can be made"
#: why the test is paired when the caller gives no reason of its own
SAME_SEED = "run i of both systems comes from the same seed"


class NoSeedTest(ValueError):
    """A t-test across seeds that cannot be run on these scores; the message says which and why."""


@dataclass
class Comparison:
    """One metric, one candidate against the baseline."""

    metric: str
    higher_is_better: bool
    base_mean: float                  # mean over the baseline's seeds of its corpus score
    sys_mean: float
    delta: float                      # sys − base, in the metric's own direction of "better" (positive = better)
    p_bootstrap: float
    ci95: tuple[float, float]         # percentile interval of delta over the resamples
    seed_test: str                    # "welch", "paired-t" or "none"
    statistic: float | None
    df: float | None
    p_seeds: float | None
    reason: str                       # why there is no seed test, if there is none (names the test that is missing)
    base_seeds: int
    sys_seeds: int
    sentences: int
    resamples: int
    pairing: str = ""                 # why the seed test is paired (paired-t) or why it is not (welch)
    p_welch: float | None = None      # Welch's p on the same scores, also beside a paired test: what pairing adds

    def significant(self, alpha: float = 0.05) -> bool:
        """Both tests below ``alpha`` (the bootstrap alone when there is no test across seeds)."""
        return self.p_bootstrap < alpha and (self.p_seeds is None or self.p_seeds < alpha)

    def worse(self, alpha: float = 0.05) -> bool:
        """Significantly *worse*: the bootstrap's interval of ``delta`` lies below 0 and the (two-sided) test
        across seeds, if there is one, is below ``alpha`` too."""
        return self.delta < 0 and self.ci95[1] < 0 and (self.p_seeds is None or self.p_seeds < alpha)

    def verdict(self, alpha: float = 0.05) -> str:
        """One line: ``significant`` (better), ``significantly worse`` or ``not significant``, with both tests.
        The bootstrap p is one-sided (the share of resamples in which the system is not better); the test across
        seeds is two-sided; without one, the line says which test is missing and why."""
        seeds = (f"{self.seed_test} p={self.p_seeds:.3f}" if self.p_seeds is not None
                 else f"no test across seeds: {self.reason}")
        head = ("significant" if self.significant(alpha) else "significantly worse" if self.worse(alpha)
                else "not significant")
        k = 100.0 if self.metric in PERCENT_METRICS else 1.0      # AER and τ read as percentages
        return (f"{head} at {alpha:g} ({self.metric} {k * self.base_mean:.2f} -> {k * self.sys_mean:.2f}, "
                f"{'better' if self.delta > 0 else 'not better'}; bootstrap p={self.p_bootstrap:.3f}, {seeds}; "
                f"{self.sys_seeds} vs {self.base_seeds} seeds, {self.sentences} sentences)")

    def basis(self) -> str:
        """The tests a claim rests on, in words: what the bootstrap resamples and why the t-test across seeds is
        paired (the reason given to :func:`compare`) or Welch's; a paired test also gives Welch's p, so that a
        reader sees what the pairing adds. "" when both systems have one run (the verdict then says it all)."""
        if max(self.base_seeds, self.sys_seeds) < 2:
            return ""
        boot = f"the bootstrap resamples the {self.sentences} sentences, each with the outputs of all its seeds"
        if self.seed_test == "paired-t":
            welch_p = "" if self.p_welch is None else f" (unpaired, Welch's test gives p={self.p_welch:.3f})"
            return f"{boot}; the t-test is paired because {self.pairing}{welch_p}"
        if self.seed_test == "welch":
            return f"{boot}; the t-test is Welch's (unpaired) because {self.pairing}"
        return boot

    def claim(self, alpha: float = 0.05) -> str:
        """What a report prints of this comparison: :meth:`verdict` and the tests it rests on (:meth:`basis`).
        With one run on each side it is the verdict, which names its one test, the bootstrap, and why there is
        no test across seeds."""
        basis = self.basis()
        return self.verdict(alpha) + (f"; {basis}" if basis else "")

    def to_dict(self) -> dict:
        return asdict(self)


# -- the t-tests across seeds (scipy.stats) -------------------------------------------------------------

def _scipy_t(test: Callable, a: np.ndarray, b: np.ndarray, **kw) -> tuple[float, float, float]:
    """``(t, df, two-sided p)`` of a ``scipy.stats`` t-test. scipy's warning about nearly identical data is left
    out: a side that does not vary at all is a case its caller has settled (one such side is fine for Welch's)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        r = test(a, b, **kw)
    return float(r.statistic), float(r.df), float(r.pvalue)


def _varies(x: np.ndarray) -> bool:
    """Not every value equal (exactly: a float mean of copies need not equal the copy, so a variance can come
    out a rounding error above 0 where there is none)."""
    return bool(np.any(x != x[0]))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t-test of ``mean(a) − mean(b)`` (``scipy.stats.ttest_ind(equal_var=False)``): ``(t,
    Welch–Satterthwaite df, two-sided p)``. :class:`NoSeedTest` with fewer than two values on a side, or when
    neither side varies (there is then no variance to test a difference against)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        raise NoSeedTest(ONE_SEED)
    if not (_varies(a) or _varies(b)):
        raise NoSeedTest("Welch's t-test is undefined: the per-seed scores do not vary on either side (identical "
                         "runs, e.g. copies of one output, measure no training variance)")
    return _scipy_t(scipy_stats.ttest_ind, a, b, equal_var=False)


def paired_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Paired t-test of ``a − b`` (same seeds; ``scipy.stats.ttest_rel``): ``(t, df = n − 1, two-sided p)``.
    :class:`NoSeedTest` with fewer than two pairs, or when the differences do not vary."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) != len(b):
        raise ConfigError(f"a paired test needs as many values on both sides, not {len(a)} and {len(b)}")
    if len(a) < 2:
        raise NoSeedTest(ONE_SEED)
    if not _varies(a - b):
        raise NoSeedTest("the paired t-test is undefined: the seed-by-seed differences do not vary (identical "
                         "runs, e.g. copies of one output, measure no training variance)")
    return _scipy_t(scipy_stats.ttest_rel, a, b)


def t_test_across_seeds(sys_scores: Sequence[float], base_scores: Sequence[float], paired: bool,
              pairing: str = "") -> dict:
    """The t-test across seeds of ``sys − base`` as :class:`Comparison` holds it: paired when ``paired`` and both
    have as many runs (``pairing``: why the i-th runs belong together), Welch's otherwise (``pairing`` then says
    why it is not paired); no test, and the reason, when it cannot be run."""
    paired = paired and len(sys_scores) == len(base_scores)
    if paired:
        why = pairing or SAME_SEED
    elif len(sys_scores) != len(base_scores) and min(len(sys_scores), len(base_scores)) > 1:
        why = f"{len(sys_scores)} and {len(base_scores)} runs cannot be paired"
    else:
        why = "the runs of the two systems are not paired by seed"
    out = {"seed_test": "none", "statistic": None, "df": None, "p_seeds": None, "reason": "", "pairing": why,
           "p_welch": None}
    try:
        out["p_welch"] = welch(sys_scores, base_scores)[2]
    except NoSeedTest:
        pass
    try:
        out["statistic"], out["df"], out["p_seeds"] = (paired_t if paired else welch)(sys_scores, base_scores)
        out["seed_test"] = "paired-t" if paired else "welch"
    except NoSeedTest as e:
        out["reason"], out["pairing"] = str(e), ""
    return out


# -- per-sentence sufficient statistics ---------------------------------------------------------------------

def _sacrebleu_metric(name: str, tokenize: str = "13a"):
    from sacrebleu.metrics import BLEU, CHRF
    if name == "bleu":
        return BLEU(tokenize=tokenize)
    if name in ("chrf", "chrf++"):
        return CHRF(word_order=2 if name == "chrf++" else 0)
    raise ConfigError(f"unknown metric {name!r} (bleu, chrf or chrf++)")


def text_stats(name: str, hyps: Sequence[str], refs: Sequence[str] | Sequence[Sequence[str]], tokenize: str = "13a"):
    """``(stats (N, K), score(summed stats) -> float)`` of BLEU or chrF, with sacrebleu's own statistics.
    ``refs``: one reference per sentence, or several reference streams (lists of one per sentence)."""
    streams = [list(refs)] if not refs or isinstance(refs[0], str) else [list(r) for r in refs]
    for r in streams:
        if len(hyps) != len(r):
            raise ConfigError(f"{len(hyps)} hypotheses for {len(r)} references")
    m = _sacrebleu_metric(name, tokenize)
    stats = np.asarray(m._extract_corpus_statistics(list(hyps), streams), dtype=np.float64)
    return stats, (lambda s: float(m._compute_score_from_stats(list(s)).score))


def aer_stats(hyps: Sequence, golds: Sequence) -> np.ndarray:
    """Per gold sentence ``|A∩S|, |A∩P|, |A|, |S|`` (:class:`xlpe.io.alignments.Alignment` or link sets)."""
    rows = []
    for h, g in zip(hyps, golds, strict=True):
        a = set(getattr(h, "possible", h))
        rows.append((len(a & set(g.sure)), len(a & set(g.possible)), len(a), len(g.sure)))
    return np.asarray(rows, dtype=np.float64).reshape(-1, 4)


def aer_score(s: np.ndarray) -> float:
    """Micro-averaged AER of summed :func:`aer_stats` (SPEC §8.1)."""
    den = s[2] + s[3]
    return 0.0 if den == 0 else float(1.0 - (s[0] + s[1]) / den)


def tau_stats(orders: Sequence[Sequence[int]], ranks: Sequence[Sequence[int]]) -> np.ndarray:
    """Per sentence ``(τ loss, τ maximum)`` of an order against lader ranks."""
    from xlpe.evaluate.reorder_metrics import tau_loss
    return np.asarray([tau_loss(o, r) for o, r in zip(orders, ranks, strict=True)], dtype=np.float64).reshape(-1, 2)


def tau_score(s: np.ndarray) -> float:
    """Micro-averaged Kendall τ accuracy ``1 − Σloss / Σmax``."""
    return 1.0 if s[1] == 0 else float(1.0 - s[0] / s[1])


# -- the comparison -----------------------------------------------------------------------------------------

def compare(metric: str, base: SeedStats, system: SeedStats, score: Callable[[np.ndarray], float], *,
            higher_is_better: bool = True, resamples: int = 1000, seed: int = 12345,
            paired_seeds: bool = False, pairing: str = "") -> Comparison:
    """Compare two systems given per seed the per-sentence statistics ``(N, K)`` and ``score`` of summed ones.

    ``paired_seeds``: the i-th seeds of both systems belong together (same seed value, same data order), so
    the test across seeds is a paired t-test; otherwise Welch's. ``pairing``: why they belong together, in words
    that finish "the t-test is paired because ..." (:meth:`Comparison.basis`; default :data:`SAME_SEED`).
    """
    base, system = [np.asarray(s, np.float64) for s in base], [np.asarray(s, np.float64) for s in system]
    if not base or not system:
        raise ConfigError("each system needs at least one seed")
    n = base[0].shape[0]
    if any(s.shape[0] != n for s in base + system):
        raise ConfigError("every seed of both systems must be scored on the same sentences")
    if n == 0:
        raise ConfigError("no sentence to compare on")
    if resamples < 1:
        raise ConfigError(f"resamples must be >= 1, not {resamples}")
    sign = 1.0 if higher_is_better else -1.0
    base_scores = [score(s.sum(0)) for s in base]
    sys_scores = [score(s.sum(0)) for s in system]
    rng = np.random.default_rng(seed)
    counts = np.stack([np.bincount(rng.integers(0, n, n), minlength=n) for _ in range(resamples)]).astype(np.float64)

    def resampled_mean(seeds: list[np.ndarray]) -> np.ndarray:      # (R,): the seed mean on every resample
        return np.mean([[score(row) for row in counts @ s] for s in seeds], axis=0)

    delta_r = sign * (resampled_mean(system) - resampled_mean(base))
    delta = sign * (float(np.mean(sys_scores)) - float(np.mean(base_scores)))
    p_boot = (int(np.sum(delta_r <= 0)) + 1) / (resamples + 1)
    lo, hi = np.percentile(delta_r, [2.5, 97.5])
    seeds = t_test_across_seeds(np.multiply(sign, sys_scores), np.multiply(sign, base_scores), paired_seeds, pairing)
    return Comparison(metric, higher_is_better, float(np.mean(base_scores)), float(np.mean(sys_scores)), delta,
                      p_boot, (float(lo), float(hi)), base_seeds=len(base), sys_seeds=len(system), sentences=n,
                      resamples=resamples, **seeds)


def compare_texts(metric: str, base_hyps: Sequence[Sequence[str]], sys_hyps: Sequence[Sequence[str]],
                  refs: Sequence[str] | Sequence[Sequence[str]], *, tokenize: str = "13a", **kw) -> Comparison:
    """:func:`compare` of BLEU or chrF; ``base_hyps`` / ``sys_hyps`` hold one list of hypotheses per seed."""
    base, system, score = [], [], None
    for hyps, out in [(h, base) for h in base_hyps] + [(h, system) for h in sys_hyps]:
        stats, score = text_stats(metric, hyps, refs, tokenize)
        out.append(stats)
    return compare(metric_label(metric), base, system, score, **kw)


def metric_label(metric: str) -> str:
    """How reports name a sacrebleu metric (``bleu`` -> ``BLEU``)."""
    return {"bleu": "BLEU", "chrf++": "chrF++"}.get(metric, "chrF")
