"""Symmetrisation (xlpe.align.symmetrize): hand-checked cases, properties, and the vectorised batch
implementation (symmetrize_batch) against the per-sentence reference (symmetrize_sets).

Notation in the comments: links are (source i, target j); symal scans points as (target, source) keys.
"""

import random
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xlpe.align.symmetrize import (METHODS, canonical_method, csr_links, links_csr, symmetrize, symmetrize_batch,
                                   symmetrize_many, symmetrize_sets)
from xlpe.errors import ConfigError
from xlpe.io.alignments import Alignment


def links(a: Alignment) -> set:
    return set(a.links)


# --- a textbook example ---------------------------------------------------------------------------------
# German source  : michael(0) geht(1) davon(2) aus(3) ,(4) dass(5) er(6) im(7) haus(8) bleibt(9)
# English target : michael(0) assumes(1) that(2) he(3) will(4) stay(5) in(6) the(7) house(8)
# forward (each English word has at most one German word):
#   michael<-michael, assumes<-geht, that<-dass, he<-er, will<-bleibt, stay<-bleibt, in<-im, the<-im, house<-haus
DE_EN_FWD = {(0, 0), (1, 1), (5, 2), (6, 3), (9, 4), (9, 5), (7, 6), (7, 7), (8, 8)}
# reverse (each German word has at most one English word, given in source-target orientation):
#   geht, davon, aus -> assumes; "," unaligned; bleibt -> stay; the rest as above
DE_EN_REV = {(0, 0), (1, 1), (2, 1), (3, 1), (5, 2), (6, 3), (7, 6), (8, 8), (9, 5)}


def test_textbook_example_intersection_and_union():
    inter = {(0, 0), (1, 1), (5, 2), (6, 3), (7, 6), (8, 8), (9, 5)}
    assert links(symmetrize(DE_EN_FWD, DE_EN_REV, 10, 9, "intersection")) == inter
    assert links(symmetrize(DE_EN_FWD, DE_EN_REV, 10, 9, "union")) == inter | {(2, 1), (3, 1), (9, 4), (7, 7)}


def test_textbook_example_grow_diag_final_and():
    # grow-diag starts from the intersection and scans (t, s) = (0,0), (1,1), (2,5), (3,6), (5,9), (6,7), (8,8):
    #  * at (t1,s1): edge neighbour (0,+1) = (t1,s2) = davon-assumes is in the union and davon is unaligned -> add;
    #    it sorts right after the cursor, so it is scanned next: its neighbour (t1,s3) = aus-assumes -> add.
    #  * at (t5,s9) (bleibt-stay): neighbour (-1,0) = (t4,s9) = bleibt-will, "will" unaligned -> add (it sorts
    #    before the cursor and is scanned in the next pass, which adds nothing).
    #  * at (t6,s7) (im-in): neighbour (+1,0) = (t7,s7) = im-the, "the" unaligned -> add.
    # Every union link was grown, so FINAL(-AND) has nothing left: all three grow methods give the union.
    # The comma stays unaligned (no link in either direction).
    union = DE_EN_FWD | DE_EN_REV
    for m in ("grow-diag", "grow-diag-final", "grow-diag-final-and"):
        got = links(symmetrize(DE_EN_FWD, DE_EN_REV, 10, 9, m))
        assert got == union, m
    assert all(i != 4 for i, _ in links(symmetrize(DE_EN_FWD, DE_EN_REV, 10, 9)))


# --- an example that separates all five methods ------------------------------------------------------------
# 6 source words, 6 target words.
#   forward F = {(0,0), (1,1), (3,4)}        reverse R = {(0,0), (5,4), (3,0)}
#   intersection = {(0,0)}
#   grow-diag: from (0,0) the only union neighbour is the diagonal (1,1) (s1 and t1 unaligned) -> add.
#     (1,1)'s neighbours hold no union link; (3,4), (5,4), (3,0) touch no aligned point. -> {(0,0), (1,1)}
#   FINAL goes through forward-only links first, in (t, s) order: (1,1) is already in; (3,4): s3, t4 both
#     unaligned -> added by both final variants. Then reverse-only links in (t, s) order: (3,0) [key (0,3)]
#     has s3 and t0 already aligned -> never added; (5,4) [key (4,5)] has s5 unaligned but t4 aligned ->
#     grow-diag-final adds it ("either word unaligned"), grow-diag-final-and does not ("both unaligned").
SEP_F = {(0, 0), (1, 1), (3, 4)}
SEP_R = {(0, 0), (5, 4), (3, 0)}
SEP_EXPECTED = {
    "intersection": {(0, 0)},
    "grow-diag": {(0, 0), (1, 1)},
    "grow-diag-final-and": {(0, 0), (1, 1), (3, 4)},
    "grow-diag-final": {(0, 0), (1, 1), (3, 4), (5, 4)},
    "union": {(0, 0), (1, 1), (3, 4), (5, 4), (3, 0)},
}


@pytest.mark.parametrize("method", METHODS)
def test_separating_example(method):
    assert links(symmetrize(SEP_F, SEP_R, 6, 6, method)) == SEP_EXPECTED[method]


def test_final_and_order_forward_only_first():
    # Two competing final candidates for target word 0: (1,0) only in forward, (2,0) only in reverse.
    # Nothing intersects, so grow adds nothing. FINAL-AND takes forward-only links first: (1,0) gets in,
    # then (2,0) finds t0 aligned and is refused. Swapping the directions swaps the winner.
    f, r = {(1, 0)}, {(2, 0)}
    assert links(symmetrize(f, r, 3, 1, "grow-diag-final-and")) == {(1, 0)}
    assert links(symmetrize(r, f, 3, 1, "grow-diag-final-and")) == {(2, 0)}
    # grow-diag-final adds both: when (2,0) comes, s2 is still unaligned
    assert links(symmetrize(f, r, 3, 1, "grow-diag-final")) == {(1, 0), (2, 0)}


def test_final_and_is_not_always_inside_final():
    # forward empty, reverse = the full 2x2 grid. Nothing to grow. FINAL scans reverse-only links in (t, s)
    # order (t0,s0), (t0,s1), (t1,s0), (t1,s1):
    #   final:     (0,0) both free -> add; (1,0) s1 free -> add; (0,1) t1 free -> add; (1,1) both aligned -> no
    #   final-and: (0,0) add; (1,0) and (0,1) have an aligned word -> no; (1,1) both free -> add
    r = {(0, 0), (0, 1), (1, 0), (1, 1)}
    assert links(symmetrize(set(), r, 2, 2, "grow-diag-final")) == {(0, 0), (1, 0), (0, 1)}
    assert links(symmetrize(set(), r, 2, 2, "grow-diag-final-and")) == {(0, 0), (1, 1)}


def test_grow_edge_neighbours_before_diagonal_ones():
    # Intersection {(0,0)}. Union extra links: (1,0) [edge neighbour, key (t0,s1)] and (1,1) [diagonal].
    # Edge neighbours are tried first: (t0,s1) has s1 unaligned -> add (s1 now aligned). Then the diagonal
    # (t1,s1): t1 is unaligned -> add as well ("at least one word unaligned").
    f = {(0, 0), (1, 0)}
    r = {(0, 0), (1, 1)}
    assert links(symmetrize(f, r, 2, 2, "grow-diag")) == {(0, 0), (1, 0), (1, 1)}
    # a neighbour whose two words are both aligned already is not added
    f2 = {(0, 0), (1, 1), (0, 1)}
    r2 = {(0, 0), (1, 1)}
    assert links(symmetrize(f2, r2, 2, 2, "grow-diag")) == {(0, 0), (1, 1)}
    assert links(symmetrize(f2, r2, 2, 2, "grow-diag-final")) == {(0, 0), (1, 1)}


def test_inputs_accept_alignment_objects_and_aliases():
    fa, ra = Alignment.from_links(SEP_F), Alignment.from_links(SEP_R)
    out = symmetrize(fa, ra, method="gdfa")
    assert isinstance(out, Alignment)
    assert links(out) == SEP_EXPECTED["grow-diag-final-and"]
    assert out.sure == out.possible
    assert canonical_method("gdf") == "grow-diag-final"
    assert canonical_method("intersect") == "intersection"


def test_empty_and_errors():
    for m in METHODS:
        assert links(symmetrize([], [], 3, 3, m)) == set()
        assert links(symmetrize([(0, 0)], [], 1, 1, m)) == ({(0, 0)} if m in ("union", "grow-diag-final",
                                                                                "grow-diag-final-and") else set())
    with pytest.raises(ConfigError, match="unknown symmetrisation method"):
        symmetrize([], [], method="grow")
    with pytest.raises(ValueError, match="outside"):
        symmetrize([(3, 0)], [], 3, 3)


def test_symmetrize_many():
    out = list(symmetrize_many([SEP_F, DE_EN_FWD], [SEP_R, DE_EN_REV], "grow-diag-final"))
    assert links(out[0]) == SEP_EXPECTED["grow-diag-final"]
    with pytest.raises(ValueError, match="differ in length"):
        list(symmetrize_many([SEP_F], [], "union"))


# --- properties -------------------------------------------------------------------------------------------

@st.composite
def directional_pair(draw, functional=True):
    m = draw(st.integers(1, 9))
    n = draw(st.integers(1, 9))
    if functional:  # what IBM-style aligners output: each target (forward) / source (reverse) word <= 1 link
        fwd = {(draw(st.integers(0, m - 1)), j) for j in range(n) if draw(st.booleans())}
        rev = {(i, draw(st.integers(0, n - 1))) for i in range(m) if draw(st.booleans())}
    else:
        cells = st.tuples(st.integers(0, m - 1), st.integers(0, n - 1))
        fwd = draw(st.sets(cells, max_size=m * n))
        rev = draw(st.sets(cells, max_size=m * n))
    return m, n, fwd, rev


def _check_properties(m, n, fwd, rev):
    r = {meth: links(symmetrize(fwd, rev, m, n, meth)) for meth in METHODS}
    inter, union = fwd & rev, fwd | rev
    assert r["intersection"] == inter and r["union"] == union
    # intersection ⊆ grow-diag ⊆ grow-diag-final(-and) ⊆ union. (grow-diag-final-and ⊆ grow-diag-final is
    # NOT a theorem: see test_final_and_is_not_always_inside_final.)
    assert inter <= r["grow-diag"] <= r["grow-diag-final-and"] <= union
    assert r["grow-diag"] <= r["grow-diag-final"] <= union
    # grow-diag-final covers every word the union covers (a final candidate is refused only if both words are)
    gdf = r["grow-diag-final"]
    assert {i for i, _ in gdf} == {i for i, _ in union} and {j for _, j in gdf} == {j for _, j in union}
    # grow-diag-final-and: a union link left out has at least one word aligned
    gdfa = r["grow-diag-final-and"]
    src_cov, tgt_cov = {i for i, _ in gdfa}, {j for _, j in gdfa}
    assert all(i in src_cov or j in tgt_cov for i, j in union - gdfa)
    # grow-diag is closed: no union link next to it (8-neighbourhood) with an unaligned word is left out
    gd = r["grow-diag"]
    s_cov, t_cov = {i for i, _ in gd}, {j for _, j in gd}
    for i, j in union - gd:
        near = any((i + di, j + dj) in gd for di in (-1, 0, 1) for dj in (-1, 0, 1) if di or dj)
        assert not (near and (i not in s_cov or j not in t_cov))


@settings(max_examples=300, deadline=None)
@given(directional_pair(functional=True))
def test_properties_functional(case):
    _check_properties(*case)


@settings(max_examples=200, deadline=None)
@given(directional_pair(functional=False))
def test_properties_arbitrary_link_sets(case):
    _check_properties(*case)


# --- the batch implementation equals the reference ---------------------------------------------------------

def _random_pair(rng, max_len=9):
    m, n = rng.randint(1, max_len), rng.randint(1, max_len)
    kind = rng.random()
    if kind < 0.5:  # functional, like IBM-style aligners (eflomal)
        fwd = {(rng.randrange(m), j) for j in range(n) if rng.random() < 0.8}
        rev = {(i, rng.randrange(n)) for i in range(m) if rng.random() < 0.8}
    elif kind < 0.7:  # near-diagonal, with noise: long grow chains
        fwd = {(j * m // n + rng.choice((-1, 0, 0, 1)), j) for j in range(n)}
        rev = {(i, i * n // m + rng.choice((-1, 0, 0, 1))) for i in range(m)}
        fwd = {(i, j) for i, j in fwd if 0 <= i < m}
        rev = {(i, j) for i, j in rev if 0 <= j < n}
    else:  # arbitrary link sets of any density
        d = rng.random()
        fwd = {(i, j) for i in range(m) for j in range(n) if rng.random() < d}
        rev = {(i, j) for i in range(m) for j in range(n) if rng.random() < d}
    return fwd, rev


def _check_batch(fwds, revs, **kw):
    for method in METHODS:
        got = csr_links(symmetrize_batch(links_csr(fwds), links_csr(revs), method, **kw))
        assert len(got) == len(fwds)
        for k, (f, r) in enumerate(zip(fwds, revs)):
            assert got[k] == symmetrize_sets(set(f), set(r), method).links, (method, k, f, r)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("lockstep_min", [0, 8])
def test_batch_equals_reference_on_random_alignments(seed, lockstep_min):
    rng = random.Random(seed)
    pairs = [_random_pair(rng, max_len=rng.choice((4, 9, 30))) for _ in range(400)]
    pairs += [(set(), set()), ({(0, 0)}, set()), (set(), {(2, 3)})]  # empty sides, empty sentences
    rng.shuffle(pairs)
    _check_batch([f for f, _ in pairs], [r for _, r in pairs], lockstep_min=lockstep_min)


def test_batch_equals_reference_with_small_grids_and_fallback(monkeypatch):
    # neighbour grids built in many groups, and sentences too big for any grid (left to symmetrize_sets)
    rng = random.Random(7)
    pairs = [_random_pair(rng, max_len=rng.choice((3, 12, 40))) for _ in range(300)]
    for cells in (200, 2000):
        # (the package re-exports the function symmetrize under the module's name: patch the module itself)
        monkeypatch.setattr(sys.modules["xlpe.align.symmetrize"], "_GRID_CELLS", cells)
        _check_batch([f for f, _ in pairs], [r for _, r in pairs], lockstep_min=0)


@settings(max_examples=150, deadline=None)
@given(st.lists(directional_pair(functional=True), min_size=1, max_size=12),
       st.lists(directional_pair(functional=False), max_size=6))
def test_batch_equals_reference_property(functional, arbitrary):
    cases = functional + arbitrary
    _check_batch([f for _, _, f, _ in cases], [r for _, _, _, r in cases], lockstep_min=0)


def test_batch_examples_and_output_order():
    fwds, revs = [SEP_F, DE_EN_FWD, set()], [SEP_R, DE_EN_REV, {(0, 0)}]
    for method in METHODS:
        ptr, i, j = symmetrize_batch(links_csr(fwds), links_csr(revs), method)
        assert ptr.tolist()[0] == 0 and len(ptr) == 4
        for k in range(3):  # links sorted by (i, j) in each sentence
            row = list(zip(i[ptr[k]:ptr[k + 1]].tolist(), j[ptr[k]:ptr[k + 1]].tolist()))
            assert row == sorted(row)
        assert csr_links((ptr, i, j))[0] == SEP_EXPECTED[method]
    assert csr_links(symmetrize_batch(links_csr([]), links_csr([]))) == []
    # duplicates in the input are harmless; aliases accepted
    dup = (np.array([0, 3]), np.array([0, 0, 1]), np.array([0, 0, 1]))
    assert csr_links(symmetrize_batch(dup, dup, "gdfa")) == [frozenset({(0, 0), (1, 1)})]


def test_batch_errors():
    one = links_csr([{(0, 0)}])
    with pytest.raises(ValueError, match="forward has 1 sentences but reverse has 2"):
        symmetrize_batch(one, links_csr([set(), set()]))
    with pytest.raises(ValueError, match="negative index"):
        symmetrize_batch(one, (np.array([0, 1]), np.array([-1]), np.array([0])))
    with pytest.raises(ValueError, match="malformed CSR"):
        symmetrize_batch(one, (np.array([0, 2]), np.array([0]), np.array([0])))
    with pytest.raises(ConfigError):
        symmetrize_batch(one, one, "grow")


def test_links_csr_round_trip():
    sets = [{(0, 1), (2, 3)}, set(), {(5, 5)}]
    ptr, i, j = links_csr(sets + [Alignment.from_links([(1, 1)])])
    assert ptr.tolist() == [0, 2, 2, 3, 4]
    assert csr_links((ptr, i, j)) == [frozenset(s) for s in sets] + [frozenset({(1, 1)})]
