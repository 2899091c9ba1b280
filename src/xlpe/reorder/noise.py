"""Noise attack on cross-lingual positions (Ding et al. 2020 §4.5, Fig. 4; SPEC §4.8).

"Randomly swap two reordered positional indexes with different ratios" — applied to the reordered
indices of *training* sentences only (test data stays clean). The exact rule is our reading `[I]`
(SPEC §4.8): for a sentence of ``n`` real tokens and ratio ``r``, ``m = round(r·n)`` indices are
perturbed by drawing ``⌊m/2⌋`` disjoint random pairs and swapping their values, so the result is still
a permutation. With a seeded generator the result is reproducible (SPEC §12 example 9).
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import numpy as np

from xlpe.errors import ConfigError


def swap_noise(positions: Sequence[int], ratio: float, rng: np.random.Generator) -> list[int]:
    """Swap ``⌊round(ratio·n)/2⌋`` disjoint random pairs of ``positions`` (e.g. one ``pos_XL`` line)."""
    if not 0.0 <= ratio <= 1.0:
        raise ConfigError(f"noise ratio must be in [0, 1], not {ratio}")
    out = np.asarray(positions, dtype=np.int64).copy()
    n = len(out)
    pairs = int(round(ratio * n)) // 2
    if pairs:
        idx = rng.choice(n, size=2 * pairs, replace=False)
        a, b = idx[:pairs], idx[pairs:]
        out[a], out[b] = out[b].copy(), out[a].copy()
    return out.tolist()


def noisy_positions(lines: Iterable[Sequence[int]], ratio: float, seed: int = 0) -> Iterator[list[int]]:
    """Apply :func:`swap_noise` to every line with one generator seeded by ``seed`` (reproducible)."""
    rng = np.random.default_rng(seed)
    for p in lines:
        yield swap_noise(p, ratio, rng)
