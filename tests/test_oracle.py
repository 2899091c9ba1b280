"""Oracle orders from alignments: lader ranks (SPEC §5.2), DPE targets (§6.2), 2PT source (§6.5), pos_XL (§4.1)."""

import random

import pytest

from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import Alignment
from xlpe.reorder.oracle import corpus_ranks, invert_order, lader_ranks, lader_spans, order_from_ranks, training_ranks
from xlpe.reorder.targets import dpe_targets, reordered_order, reordered_source


def links(text: str) -> list[tuple[int, int]]:
    return [tuple(int(x) for x in item.split("-")) for item in text.split()]


# --- SPEC §12 examples -------------------------------------------------------------------------

def test_spec_example_1_spans_and_ranks():
    a = links("0-0 1-4 1-5 2-2 3-6")  # lader example/data/train.en-ja.align line 1, "4-7 ||| ..."
    assert lader_spans(a, 4) == [(0, 0), (4, 5), (2, 2), (6, 6)]
    assert lader_ranks(a, 4) == [0, 2, 1, 3]


def test_spec_example_2_attach_null_right_and_many_to_one():
    assert lader_ranks(links("0-0 1-4 1-5 3-2 4-6"), 5) == [0, 2, 1, 1, 3]  # word 2 takes word 3's span
    assert lader_ranks(links("0-1 1-0 2-0"), 3) == [1, 0, 0]


def test_attach_null_left_sends_final_nulls_to_the_end():
    a = links("0-1 1-0")
    assert lader_ranks(a, 3, attach_null="left", src_words="x y .".split()) == [1, 0, 2]
    assert lader_ranks(a, 3, attach_null="right", src_words="x y .".split()) == [1, 0, 0]


def test_attach_null_free_gives_unaligned_words_no_rank():
    # SPEC §12.2's sentence: word 2 is unaligned; the aligned words keep the ranks of 'none' minus one
    a = links("0-0 1-4 1-5 3-2 4-6")
    assert lader_ranks(a, 5, attach_null="none") == [1, 3, 0, 2, 4]
    assert lader_ranks(a, 5, attach_null="free") == [0, 2, -1, 1, 3]
    # fully aligned: identical to lader's default; null-aligned brackets placed by lader keep a rank
    assert lader_ranks(links("0-1 1-0"), 2, attach_null="free") == [1, 0]
    w = "( x ) y".split()
    assert lader_ranks(links("1-1 3-0"), 4, src_words=w, attach_null="free") == \
        lader_ranks(links("1-1 3-0"), 4, src_words=w, attach_null="none")


def test_null_aligned_brackets_go_around_their_content():
    w = "a ( b ) c".split()
    a = links("0-0 2-2 4-1")
    assert lader_ranks(a, 5, src_words=w) == [0, 2, 3, 4, 1]
    assert lader_ranks(a, 5, src_words=w, align_brackets=False) == [0, 2, 2, 1, 1]
    # without words no token can be a bracket: the step changes nothing
    assert lader_ranks(a, 5) == [0, 2, 2, 1, 1]


def test_combine_blocks():
    a = links("0-0 0-2 1-1 1-3")  # crossing spans (0,2) and (1,3)
    assert lader_ranks(a, 2, combine_blocks=False) == [0, 1]
    assert lader_ranks(a, 2) == [0, 0]
    # an unaligned word between block members receives the block's span
    assert lader_spans(links("0-0 0-1 2-1 2-2"), 3) == [(0, 2), (0, 2), (0, 2)]


# Outputs of a C++ harness built with GNU libstdc++ (std::map keyed by lader's span order) on random
# inputs, including crossing/nested spans where that order is not a strict weak order.
CPP_CASES = [
    (') 「 a a 」', '0-0 2-3 3-0 4-0', 'right', False, True, '0 1 1 0 0'),
    ('( " a a "', '0-2 2-1 2-8 3-5 4-7', 'right', False, True, '0 0 0 1 2'),
    ('a 「 「 ( 「 "', '2-2 3-1 4-1 5-0', 'right', True, True, '2 2 2 1 1 0'),
    ('a b ) ) " ( b 」 )', '1-5 2-3 3-2 4-0 5-2 5-4 6-6 7-2 7-5 8-0 8-7', 'left', True, True,
     '0 0 0 0 0 0 0 0 0'),
    ('a 」 ) ) ) )', '0-0 3-0 3-2 4-0 4-1 5-2', 'left', False, True, '0 0 0 2 1 3'),
    (') 「 ( 」 「 a', '1-0 2-1 4-1 5-0', 'right', False, False, '0 0 1 1 1 0'),
    ('」 」 b a ( b', '0-4 1-1 1-3 2-2 2-3 3-3 3-4 4-4 5-1', 'right', False, False, '4 1 2 3 4 0'),
    ('" " " " b 「', '0-4 0-6 1-5 2-4 4-1 5-3', 'left', False, False, '3 3 2 2 0 1'),
    ('b 「 ( 」 a 」', '0-2 1-0 3-1 5-0', 'left', True, True, '1 0 0 0 0 0'),
    ('" ( b a (', '0-0 1-3 2-1 3-0 4-1', 'left', False, True, '0 2 1 0 1'),
    ('「 " " a 「 " a 「 「', '0-1 1-0 4-0 5-0 5-1 6-0 7-1 8-1 8-2', 'right', False, True,
     '2 0 0 0 0 1 0 2 3'),
    ('a ( )', '0-4 0-7 1-1 2-8', 'left', True, False, '1 0 2'),
    (') ) 」 " a', '0-1 2-2 3-0', 'left', True, False, '1 1 2 0 3'),
    ('」 ) a 」 」 「 ) " "', '0-0 2-1 2-6 3-3 4-1 5-2 6-5 7-1 7-2 8-0 8-3', 'right', False, False,
     '0 3 3 3 1 3 3 2 1'),
    ('" b ) (', '1-8 2-2 3-5', 'right', True, True, '2 2 0 1'),
    ('a 「 」 ) ) ) 「 " b', '0-0 1-1 1-2 2-0 2-1 3-3 4-3 8-3', 'left', True, False, '0 0 0 1 1 1 1 1 1'),
    (') a b a " b )', '0-1 1-0 1-2 4-3 5-2 5-3', 'left', False, False, '0 0 0 0 2 1 3'),
    ('「 x y 」 z ( w', '1-3 2-2 4-0 6-1', 'right', True, True, '2 4 3 5 0 1 1'),
]


@pytest.mark.parametrize("words, align, attach, combine, brackets, expected", CPP_CASES)
def test_matches_cpp_std_map_replay(words, align, attach, combine, brackets, expected):
    w = words.split(" ")
    got = lader_ranks(links(align), len(w), src_words=w, attach_null=attach, combine_blocks=combine,
                      align_brackets=brackets)
    assert " ".join(map(str, got)) == expected


def test_ranks_are_invariant_to_link_order():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 9)
        a = [(i, rng.randrange(8)) for i in range(n) if rng.random() < 0.8]
        b = a[:]
        rng.shuffle(b)
        assert lader_ranks(a, n) == lader_ranks(b, n)


def test_bad_links_are_format_errors():
    with pytest.raises(FormatError, match="beyond the source sentence of 3 words"):
        lader_ranks([(0, 0), (3, 1)], 3)
    with pytest.raises(FormatError):
        lader_ranks([(-1, 0)], 3)
    with pytest.raises(FormatError):
        lader_ranks([(0, -2)], 3)
    with pytest.raises(FormatError):
        lader_ranks([(0, 0, 1)], 3)
    with pytest.raises(FormatError, match="2 words"):
        lader_ranks([(0, 0)], 3, src_words=["a", "b"])
    with pytest.raises(ConfigError):
        lader_ranks([(0, 0)], 1, attach_null="middle")
    with pytest.raises(FormatError):
        dpe_targets([(5, 0)], 5)


def test_empty_and_unaligned_sentences():
    assert lader_ranks([], 0) == []
    assert lader_ranks([], 3) == [0, 0, 0]
    assert lader_ranks([], 3, attach_null="left") == [0, 0, 0]
    assert lader_ranks([], 3, attach_null="free") == [-1, -1, -1]


# --- a corpus ---------------------------------------------------------------------------------

def test_corpus_ranks_is_lader_ranks_of_every_sentence():
    w1, w2 = "( x ) y".split(), "a b c".split()
    a1, a2 = links("1-1 3-0"), links("2-0 0-2")
    assert corpus_ranks([w1, w2], [a1, a2]) == [lader_ranks(a1, 4, src_words=w1), lader_ranks(a2, 3, src_words=w2)]
    assert corpus_ranks([w1], [Alignment(a1)]) == [lader_ranks(a1, 4, src_words=w1)]   # objects with .links
    assert corpus_ranks([w1], [list(reversed(a1))]) == corpus_ranks([w1], [a1])           # links in any order
    for opts in ({"attach_null": "left"}, {"attach_null": "free"}, {"combine_blocks": False},
                 {"align_brackets": False}):
        assert corpus_ranks([w1, w2], [a1, a2], **opts) == \
            [lader_ranks(a1, 4, src_words=w1, **opts), lader_ranks(a2, 3, src_words=w2, **opts)]
    # a length instead of words: no word is a bracket
    assert corpus_ranks([4], [a1]) == [lader_ranks(a1, 4)] != [lader_ranks(a1, 4, src_words=w1)]
    assert corpus_ranks([["a", "b"], 2], [[(0, 1), (1, 0)], [(0, 0), (1, 1)]]) == [[1, 0], [0, 1]]
    assert corpus_ranks([], []) == []
    with pytest.raises(FormatError):
        corpus_ranks([w2], [links("3-0")])


def test_training_ranks_reads_files_and_skips_long_sentences(tmp_path):
    src, al = tmp_path / "src", tmp_path / "al"
    src.write_text("a|X b|Y\nc d e\nf\n", encoding="utf-8")
    al.write_text("0-1 1-0\n0-0 1-2 2-1\n0-0\n", encoding="utf-8")
    sents, ranks, skipped = training_ranks(str(src), align=str(al))
    assert sents == [["a|X", "b|Y"], ["c", "d", "e"], ["f"]] and ranks == [[1, 0], [0, 2, 1], [0]] and skipped == 0
    with pytest.raises(FormatError, match="over the length limit 2"):
        training_ranks(str(src), align=str(al), max_len=2)
    sents, ranks, skipped = training_ranks(str(src), align=str(al), max_len=2, skip_long=True)
    assert sents == [["a|X", "b|Y"], ["f"]] and ranks == [[1, 0], [0]] and skipped == 1


# --- DPE / 2PT --------------------------------------------------------------------------------

def test_spec_example_5_dpe_targets():
    a = links("0-0 2-1 4-1 2-2 1-3")  # fast_align output, 5 source tokens
    p = dpe_targets(a, 5)
    assert p == [0, 3, 1, -1, 2]
    line = " ".join(f"{i}-{p[i]}" for i in sorted((i for i in range(5) if p[i] >= 0), key=lambda i: p[i]))
    assert line == "0-0 2-1 4-2 1-3"
    assert dpe_targets(frozenset(a), 5) == p  # unordered input is read in fast_align's order
    assert dpe_targets(a, 5, link_rule="min") == p


def test_dpe_first_versus_min_link():
    a = [(0, 3), (0, 1), (1, 2)]
    assert dpe_targets(a, 2) == [1, 0]                    # first link of token 0 is 3
    assert dpe_targets(a, 2, link_rule="min") == [0, 1]   # smallest is 1


def test_reordered_source_drop_and_keep():
    toks = "mr hän@@ sch represented you on this occasion .".split()
    a = links("0-0 1-1 2-2 3-5 4-3 6-4 8-6")  # "on" and "occasion" unaligned (SPEC §6.5 example)
    assert " ".join(reordered_source(toks, a)) == "mr hän@@ sch you this represented ."
    assert " ".join(reordered_source(toks, a, unaligned="keep")) == \
        "mr hän@@ sch you on this occasion represented ."
    # leading unaligned tokens travel in front of the first aligned token
    assert reordered_order([(1, 1), (2, 0)], 3, unaligned="keep") == [2, 0, 1]
    assert reordered_order([], 3, unaligned="keep") == [0, 1, 2]
    with pytest.raises(ConfigError):
        reordered_order([], 3, unaligned="move")


# --- permutations ------------------------------------------------------------------------------

def test_invert_order_spec_example():
    assert invert_order([2, 3, 1, 0]) == [3, 2, 0, 1]
    assert invert_order([]) == []
    o = [4, 0, 3, 1, 2]
    assert invert_order(invert_order(o)) == o
    with pytest.raises(FormatError, match="not a permutation"):
        invert_order([0, 0, 1])
    with pytest.raises(FormatError):
        invert_order([1, 2])


def test_order_from_ranks_is_stable():
    assert order_from_ranks([0, 2, 1, 3]) == [0, 2, 1, 3]
    assert order_from_ranks([0, 2, 1, 1, 3]) == [0, 2, 3, 1, 4]
    assert order_from_ranks([1, 0, 0]) == [1, 2, 0]


def test_dpe_targets_from_word_alignments_at_the_subword_level():
    """SPEC §12 example 5 through the word->subword projection (one piece per word gives the same line), and a
    word split in pieces: its pieces share the word's target and keep their order (stable sort)."""
    from xlpe.io.alignments import Alignment
    from xlpe.reorder.targets import format_dpe_line, subword_dpe_targets
    a = Alignment.from_links([(0, 0), (2, 1), (4, 1), (2, 2), (1, 3)])
    assert format_dpe_line(subword_dpe_targets(a, [0, 1, 2, 3, 4])) == "0-0 2-1 4-2 1-3"
    b = Alignment.from_links([(0, 1), (1, 0)])              # word 0 = pieces 0, 1; word 1 = piece 2
    assert subword_dpe_targets(b, [0, 0, 1]) == [1, 2, 0]
    assert format_dpe_line([1, -1, 0]) == "2-0 0-1"          # unaligned token 1 omitted
