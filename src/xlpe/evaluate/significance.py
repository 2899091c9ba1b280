"""Significance that accounts for training seeds, one implementation for every recipe.

A system is a list of ``k`` seed runs, each scored on the same ``N`` test sentences. Two tests, both reported:

* **Seed-aware paired bootstrap** (Koehn 2004, with the seeds kept together as Clark et al. 2011 advise): each
  of ``R`` resamples draws ``N`` sentence indices with replacement — one draw shared by every seed of both
  systems — scores each system *per seed* on the resample from per-sentence sufficient statistics, and averages
  over its seeds. ``p`` is the one-sided share of resamples in which the candidate is not better than the
  baseline, ``(#{δ_r ≤ 0} + 1) / (R + 1)`` with ``δ`` the seed-mean difference signed so that positive is
  better; the 95% interval is the 2.5–97.5 percentiles of ``δ_r``. Copying a seed's outputs changes nothing
  (a mean over identical runs), and sentences never count twice because there are seeds.
* **A test across seeds**: Welch's t-test on the per-seed corpus scores (a paired t-test over seeds when both
  systems have the same seeds); it is the part that sees training variance. With one seed on either side it
  gives no p-value and says why.

Corpus metrics: BLEU and chrF (sacrebleu's own per-sentence statistics and scoring), AER (micro-averaged over
gold sentences, lower is better) and Kendall τ of orders (micro-averaged, higher is better).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import numpy as np

from xlpe.errors import ConfigError

SeedStats = Sequence[np.ndarray]      # per seed: (N, K) per-sentence sufficient statistics
#: metrics whose scores are fractions, shown as percentages
PERCENT_METRICS = ("AER", "tau")


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
    reason: str                       # why there is no seed test, if there is none
    base_seeds: int
    sys_seeds: int
    sentences: int
    resamples: int

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
        seeds is two-sided."""
        seeds = (f"{self.seed_test} p={self.p_seeds:.3f}" if self.p_seeds is not None
                 else f"no test across seeds: {self.reason}")
        head = ("significant" if self.significant(alpha) else "significantly worse" if self.worse(alpha)
                else "not significant")
        k = 100.0 if self.metric in PERCENT_METRICS else 1.0      # AER and τ read as percentages
        return (f"{head} at {alpha:g} ({self.metric} {k * self.base_mean:.2f} -> {k * self.sys_mean:.2f}, "
                f"{'better' if self.delta > 0 else 'not better'}; bootstrap p={self.p_bootstrap:.3f}, {seeds}; "
                f"{self.sys_seeds} vs {self.base_seeds} seeds, {self.sentences} sentences)")

    def to_dict(self) -> dict:
        return asdict(self)


# -- the Student t distribution, without scipy -----------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularised incomplete beta function ``I_x(a, b)``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbeta = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbeta) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbeta) * _betacf(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """Two-sided p-value of Student's t with ``df`` degrees of freedom: ``I_{df/(df+t²)}(df/2, 1/2)``."""
    if math.isinf(t):
        return 0.0
    return betainc(df / 2.0, 0.5, df / (df + t * t))


def welch(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t-test of ``mean(a) − mean(b)``: ``(t, Welch–Satterthwaite df, two-sided p)``; needs two values
    on each side. Zero variance on both sides: p 1 for equal means, 0 otherwise."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    va, vb = a.var(ddof=1) / len(a), b.var(ddof=1) / len(b)
    diff = a.mean() - b.mean()
    if va + vb == 0:
        return (0.0, float("nan"), 1.0) if diff == 0 else (math.copysign(math.inf, diff), float("nan"), 0.0)
    t = diff / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    return t, df, t_two_sided_p(t, df)


def paired_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Paired t-test of ``a − b`` (same seeds): ``(t, df = n − 1, two-sided p)``."""
    d = np.asarray(a, float) - np.asarray(b, float)
    sd = d.std(ddof=1)
    if sd == 0:
        return (0.0, len(d) - 1.0, 1.0) if d.mean() == 0 else (math.copysign(math.inf, d.mean()), len(d) - 1.0, 0.0)
    t = d.mean() / (sd / math.sqrt(len(d)))
    return t, len(d) - 1.0, t_two_sided_p(t, len(d) - 1)


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
            paired_seeds: bool = False) -> Comparison:
    """Compare two systems given per seed the per-sentence statistics ``(N, K)`` and ``score`` of summed ones.

    ``paired_seeds``: the i-th seeds of both systems belong together (same seed value, same data order), so
    the test across seeds is a paired t-test; otherwise Welch's.
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
    test, stat, df, p_seeds, reason = "none", None, None, None, ""
    if len(base) < 2 or len(system) < 2:
        reason = "one seed: no claim about training variance can be made"
    elif paired_seeds and len(base) == len(system):
        test, (stat, df, p_seeds) = "paired-t", paired_t(np.multiply(sign, sys_scores), np.multiply(sign, base_scores))
    else:
        test, (stat, df, p_seeds) = "welch", welch(np.multiply(sign, sys_scores), np.multiply(sign, base_scores))
    return Comparison(metric, higher_is_better, float(np.mean(base_scores)), float(np.mean(sys_scores)), delta,
                      p_boot, (float(lo), float(hi)), test, stat, None if df is None or df != df else float(df),
                      p_seeds, reason, len(base), len(system), n, resamples)


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
