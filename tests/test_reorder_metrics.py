"""lader's chunk and Kendall τ measures (SPEC §5.3), sentence and corpus level."""

import itertools
import random

import pytest

from xlpe.errors import FormatError
from xlpe.evaluate.reorder_metrics import (chunk_accuracy, chunk_loss, corpus_reorder_scores,
                                           sentence_reorder_scores, tau_accuracy, tau_loss)


def lader_chunk(order, ranks):
    """Direct transcription of the SPEC §5.3 definition with lader's conventions."""
    max_rank = max(ranks)
    if max_rank == 0:
        return 0, 0
    seq = [-1] + [ranks[o] for o in order] + [max_rank + 1]
    loss = sum(1 for a, b in zip(seq, seq[1:]) if b not in (a, a + 1))
    return loss, len(order) + 1


def lader_tau(order, ranks):
    n = len(order)
    loss = sum(1 for i in range(n) for j in range(i + 1, n) if ranks[order[i]] > ranks[order[j]])
    srt = sorted(ranks)
    mx = 0
    for i in range(n):  # lader: for each i, the first j > i with a larger rank adds n - j
        for j in range(i + 1, n):
            if srt[j] > srt[i]:
                mx += n - j
                break
    return loss, mx


def test_spec_example_1():
    ranks = [0, 2, 1, 3]
    assert chunk_loss([0, 1, 2, 3], ranks) == (3, 5)
    assert tau_loss([0, 1, 2, 3], ranks) == (1, 6)
    assert chunk_accuracy([0, 1, 2, 3], ranks) == pytest.approx(0.4)
    assert tau_accuracy([0, 1, 2, 3], ranks) == pytest.approx(5 / 6)
    assert chunk_loss([0, 2, 1, 3], ranks) == (0, 5)
    assert tau_loss([0, 2, 1, 3], ranks) == (0, 6)


def test_ties():
    ranks = [0, 2, 1, 1, 3]
    assert tau_loss([0, 1, 2, 3, 4], ranks) == (2, 9)  # 10 pairs minus the tied one
    assert chunk_loss([0, 2, 3, 1, 4], ranks) == (0, 6)
    assert chunk_loss([0, 3, 2, 1, 4], ranks) == (0, 6)  # order inside a tie is free
    assert chunk_loss([1, 0], [0, 0]) == (0, 0)  # a single rank: nothing to get wrong
    assert tau_loss([1, 0], [0, 0]) == (0, 0)
    assert chunk_accuracy([1, 0], [0, 0]) == 1.0


def test_against_brute_force():
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 9)
        ranks = [rng.randint(0, 4) for _ in range(n)]
        # make them dense like lader's ranks
        uniq = sorted(set(ranks))
        ranks = [uniq.index(r) for r in ranks]
        order = list(range(n))
        rng.shuffle(order)
        assert chunk_loss(order, ranks) == lader_chunk(order, ranks)
        assert tau_loss(order, ranks) == lader_tau(order, ranks)


def test_tau_max_is_the_worst_order():
    ranks = [0, 1, 1, 2, 0]
    worst = max(tau_loss(list(p), ranks)[0] for p in itertools.permutations(range(5)))
    assert tau_loss([0, 1, 2, 3, 4], ranks)[1] == worst


def test_gapped_ranks_are_used_ordinally():
    assert chunk_loss([0, 1, 2], [0, 5, 9]) == chunk_loss([0, 1, 2], [0, 1, 2]) == (0, 4)


def test_corpus_scores_micro_and_macro():
    orders = [[0, 1, 2, 3], [0, 2, 1, 3], [1, 0]]
    ranks = [[0, 2, 1, 3], [0, 2, 1, 3], [0, 0]]
    s = corpus_reorder_scores(orders, ranks)
    assert (s["chunk_loss"], s["chunk_max"], s["tau_loss"], s["tau_max"]) == (3, 10, 1, 12)
    assert s["chunk"] == pytest.approx(1 - 3 / 10)
    assert s["tau"] == pytest.approx(1 - 1 / 12)
    assert s["chunk_sent"] == pytest.approx((0.4 + 1 + 1) / 3)
    assert s["tau_sent"] == pytest.approx((5 / 6 + 1 + 1) / 3)
    assert s["sentences"] == 3
    one = sentence_reorder_scores([0, 1, 2, 3], [0, 2, 1, 3])
    assert one["chunk_loss"] == 3 and one["tau_max"] == 6


def test_bad_input_is_a_format_error():
    with pytest.raises(FormatError, match="3 entries but the ranks have 4"):
        chunk_loss([0, 1, 2], [0, 1, 2, 3])
    with pytest.raises(FormatError, match="not a permutation"):
        tau_loss([0, 0, 1], [0, 1, 2])
    with pytest.raises(FormatError, match="2 orders but 1 rank"):
        corpus_reorder_scores([[0], [0]], [[0]])
    with pytest.raises(FormatError) as e:
        corpus_reorder_scores([[0, 1], [0, 1]], [[0, 1], [0, 1, 2]])
    assert e.value.line == 2
