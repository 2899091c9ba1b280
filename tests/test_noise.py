"""SPEC §12 example 9: the noise attack swaps exactly the requested number of disjoint pairs."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from xlpe.errors import ConfigError
from xlpe.reorder.noise import noisy_positions, swap_noise


def test_spec_section_4_8_count():
    base = list(range(10))
    out = swap_noise(base, 0.2, np.random.default_rng(5))          # m = 2 indices -> 1 pair
    assert sum(a != b for a, b in zip(out, base)) == 2 and sorted(out) == base


def test_spec_example_9():
    base = list(range(10))
    out = swap_noise(base, 0.2, np.random.default_rng(5), unit="pairs")
    moved = [k for k in range(10) if out[k] != base[k]]
    assert sorted(out) == base and len(moved) == 4              # 2 disjoint pairs
    for k in moved:                                             # each moved value sits where its partner was
        assert out[out[k]] == k
    assert swap_noise(base, 0.2, np.random.default_rng(5), unit="pairs") == out
    assert list(noisy_positions([base, base], 0.2, seed=1)) == list(noisy_positions([base, base], 0.2, seed=1))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40).flatmap(lambda n: st.permutations(list(range(n)))), st.floats(0, 1), st.integers(0, 99))
def test_always_a_permutation_with_exact_count(p, r, seed):
    out = swap_noise(p, r, np.random.default_rng(seed))
    assert sorted(out) == sorted(p)
    assert sum(a != b for a, b in zip(out, p)) == 2 * (int(round(r * len(p))) // 2)


def test_zero_ratio_is_identity_and_bad_ratio():
    assert swap_noise([2, 0, 1], 0.0, np.random.default_rng(0)) == [2, 0, 1]
    with pytest.raises(ConfigError):
        swap_noise([0, 1], 1.5, np.random.default_rng(0))
