"""Noise attack on cross-lingual positions (Ding et al. 2020 §4.5, Fig. 4; SPEC §4.8).

"Randomly swap two reordered positional indexes with different ratios" — applied to the reordered
indices of *training* sentences only (test data stays clean). The exact rule is our reading `[I]`
(SPEC §4.8): for a sentence of ``n`` real tokens and ratio ``r``, ``m = round(r·n)`` indices are
perturbed by drawing ``⌊m/2⌋`` disjoint random pairs and swapping their values, so the result is still
a permutation. With a seeded generator the result is reproducible.

SPEC disagrees with itself on the count: §4.8 and the §10 table give ``⌊round(r·n)/2⌋`` pairs (20% of the
*indices* move), while worked example §12.9 expects 2 pairs for ``r=0.2, n=10`` (20% of the indices are
*pair starts*, i.e. ``round(r·n)`` pairs up to ``⌊n/2⌋``). The default ``unit='indices'`` follows §4.8/§10;
``unit='pairs'`` gives §12.9's count. Both are tested.

``unit='probability'`` is the per-sentence-probability variant that SPEC §10 keeps as the alternative ``[I]``:
every index of a sentence is picked with probability ``r`` (``m ~ Binomial(n, r)``) and ``⌊m/2⌋`` disjoint pairs
of the picked indices swap, so short sentences are perturbed too and the moved share approaches ``r``.
:func:`noise_stats` gives the effective share of moved indices of each rule on a corpus (expected values for
``probability``), which reports print beside the nominal ratio.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from xlpe.data.channels import ChannelSource
from xlpe.errors import ConfigError


UNITS = ("indices", "pairs", "probability")


def swap_count(n: int, ratio: float, unit: str = "indices", rng: np.random.Generator | None = None) -> int:
    """Number of disjoint pairs swapped in a sentence of ``n`` tokens (see the module docstring); the
    ``probability`` rule draws it with ``rng``."""
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"noise ratio must be in [0, 1], not {ratio}")
    if unit == "indices":
        return int(round(ratio * n)) // 2
    if unit == "pairs":
        return min(int(round(ratio * n)), n // 2)
    if unit == "probability":
        if rng is None:
            raise ConfigError("the 'probability' noise rule draws its count: give a generator")
        return int(rng.binomial(n, ratio)) // 2
    raise ConfigError(f"noise unit must be one of {', '.join(UNITS)}, not {unit!r}")


def noise_stats(lengths: Iterable[int], ratio: float, unit: str = "indices") -> dict[str, float]:
    """What the attack does to a corpus whose order lines have ``lengths``: mean swapped pairs per sentence,
    the fraction of all indices that move, and the fraction of sentences with at least one swap. (Short
    sentences may get no swap at all: with ``unit='indices'`` a sentence needs ``round(r·n) >= 2``.)"""
    n = np.asarray(list(lengths), dtype=np.int64)
    if n.size == 0:
        return {"pairs_per_sentence": 0.0, "indices_moved": 0.0, "sentences_touched": 0.0}
    # expectations: E⌊m/2⌋ = (n r − P(m odd)) / 2, P(m odd) = (1 − (1 − 2r)^n) / 2
    if unit == "probability":
        swap_count(0, ratio, "indices")                          # validates the ratio
        nf = n.astype(np.float64)
        pairs = (nf * ratio - (1 - (1 - 2 * ratio) ** nf) / 2) / 2
        touched = 1 - (1 - ratio) ** nf - nf * ratio * (1 - ratio) ** (nf - 1)
        return {"pairs_per_sentence": float(pairs.mean()), "indices_moved": float(2 * pairs.sum() / max(1, n.sum())),
                "sentences_touched": float(touched.mean())}
    sizes, which = np.unique(n, return_inverse=True)
    pairs = np.array([swap_count(int(k), ratio, unit) for k in sizes])[which]
    return {"pairs_per_sentence": float(pairs.mean()), "indices_moved": float(2 * pairs.sum() / max(1, n.sum())),
            "sentences_touched": float((pairs > 0).mean())}


def swap_noise(positions: Sequence[int], ratio: float, rng: np.random.Generator, unit: str = "indices") -> list[int]:
    """Swap :func:`swap_count` disjoint random pairs of ``positions`` (e.g. one ``pos_XL`` line)."""
    out = np.asarray(positions, dtype=np.int64).copy()
    n = len(out)
    pairs = swap_count(n, ratio, unit, rng)
    if pairs:
        idx = rng.choice(n, size=2 * pairs, replace=False)
        a, b = idx[:pairs], idx[pairs:]
        out[a], out[b] = out[b].copy(), out[a].copy()
    return out.tolist()


def noisy_positions(lines: Iterable[Sequence[int]], ratio: float, seed: int = 0,
                    unit: str = "indices") -> Iterator[list[int]]:
    """Apply :func:`swap_noise` to every line with one generator seeded by ``seed`` (reproducible)."""
    rng = np.random.default_rng(seed)
    for p in lines:
        yield swap_noise(p, ratio, rng, unit)


class NoisySource(ChannelSource):
    """A channel source whose ``pos_XL`` lines get the noise attack (:func:`swap_noise`, one generator seeded by
    ``seed``) at the granularity of the wrapped source (word or subword). Training data only: the trainer
    wraps its training ``xl`` source with it; dev and test data stay clean."""

    def __init__(self, source: ChannelSource, ratio: float, seed: int = 0, unit: str = "indices"):
        swap_count(2, ratio, unit)            # validates ratio and unit before any work
        self.source, self.ratio, self.unit = source, ratio, unit
        self.level, self.description = source.level, source.description
        self._rng = np.random.default_rng(seed)

    def take(self, sentences, first_line: int = 1) -> list:
        return [swap_noise(p, self.ratio, self._rng, self.unit) for p in self.source.take(sentences, first_line)]

    def finish(self, lines: int) -> None:
        self.source.finish(lines)
