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


def test_noise_stats_counts_what_the_attack_moves():
    from xlpe.reorder.noise import noise_stats
    # r=0.2: n=10 -> round(2)//2 = 1 pair; n=5 -> round(1)//2 = 0; n=20 -> 2 pairs
    st = noise_stats([10, 5, 20, 10], 0.2)
    assert st["pairs_per_sentence"] == (1 + 0 + 2 + 1) / 4
    assert st["indices_moved"] == 2 * 4 / 45
    assert st["sentences_touched"] == 0.75
    assert noise_stats([10, 5], 0.2, unit="pairs")["pairs_per_sentence"] == (2 + 1) / 2
    assert noise_stats([], 0.1)["indices_moved"] == 0.0
    # the statistic agrees with what swap_noise actually does
    rng = np.random.default_rng(0)
    lines = [list(range(n)) for n in (3, 7, 12, 25, 40)]
    moved = sum(sum(a != b for a, b in zip(p, swap_noise(p, 0.15, rng))) for p in lines)
    assert moved == round(noise_stats([len(p) for p in lines], 0.15)["indices_moved"] * sum(map(len, lines)))


def test_effective_share_on_a_hand_made_corpus():
    from xlpe.reorder.noise import noise_stats
    lengths = [4, 6, 10]            # 20 indices; r=0.2 -> round(.8)=1, round(1.2)=1, round(2)=2 -> 0, 0, 1 pair
    s = noise_stats(lengths, 0.2)
    assert s["indices_moved"] == pytest.approx(2 / 20) and s["sentences_touched"] == pytest.approx(1 / 3)
    assert noise_stats(lengths, 0.05)["indices_moved"] == 0.0      # the nominal 5% moves nothing here
    # probability rule: each index picked with probability r; exact expectations, checked by simulation
    p = noise_stats(lengths, 0.2, unit="probability")
    rng = np.random.default_rng(0)
    moved = [sum(a != b for a, b in zip(swap_noise(list(range(n)), 0.2, rng, "probability"), range(n)))
             for _ in range(4000) for n in lengths]
    assert sum(moved) / (4000 * 20) == pytest.approx(p["indices_moved"], rel=0.05)
    assert 0.05 < p["indices_moved"] < 0.2 and p["sentences_touched"] > 1 / 3
    with pytest.raises(ConfigError, match="give a generator"):
        from xlpe.reorder.noise import swap_count
        swap_count(10, 0.2, "probability")
