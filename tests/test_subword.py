"""Subwords: exact word maps (no dummy-prefix off-by-one), round trips, and word<->subword conversions."""

import pytest
from hypothesis import given, settings, strategies as st

from xlpe.data.subword import (SubwordModel, subword_alignment_from_word,
                               subword_order_from_word, train_subwords, word_alignment_from_subword)
from xlpe.errors import ConfigError, FormatError
from xlpe.io import Alignment

CORPUS = [
    "the quick brown fox jumps over the lazy dog .",
    "a lazy dog sleeps under the brown table .",
    "quickly , the foxes jumped over dogs and tables !",
    "der schnelle braune fuchs springt über den faulen hund .",
    "ein fauler hund schläft unter dem braunen tisch .",
    "足利 義満 （ あしかが よしみつ ） は 室町 幕府 の 第 3 代 将軍",
] * 30


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    p = tmp_path_factory.mktemp("spm") / "m.model"
    return train_subwords([], p, sentences=iter(CORPUS), vocab_size=420)


def test_specials_and_load(model, tmp_path_factory):
    assert model.sp.pad_id() == 0 and model.sp.unk_id() == 1 and model.sp.bos_id() == 2 and model.sp.eos_id() == 3
    again = SubwordModel.load(model.path)
    assert again.encode("the lazy dog").ids == model.encode("the lazy dog").ids


def test_word_map_exact(model):
    words = "quickly , the foxes jumped over dogs".split(" ")
    e = model.encode(words)
    assert len(e.pieces) == len(e.ids) == len(e.word_of)
    assert e.word_of == sorted(e.word_of) and set(e.word_of) == set(range(len(words)))
    for w, word in enumerate(words):   # the pieces of word w spell word w
        spelled = "".join(p for p, k in zip(e.pieces, e.word_of) if k == w).replace("\u2581", "")
        assert spelled == word


@settings(max_examples=60, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(blacklist_characters=" \n\r", blacklist_categories=("Cs",)),
                        min_size=1, max_size=5), min_size=1, max_size=6))
def test_round_trip_any_text(model, words):
    """Unseen characters (byte fallback), U+3000, anything but ASCII space survives encode/decode."""
    e = model.encode(words)
    assert model.decode_ids(e.ids) == " ".join(words)
    assert max(e.word_of) == len(words) - 1
    assert model.words_of_pieces(e.pieces) == words


def test_ideographic_space_is_a_word(model):
    words = ["a", "\u3000", "b"]
    e = model.encode(words)
    assert max(e.word_of) == 2 and model.decode_ids(e.ids) == "a \u3000 b"


def test_encode_many_matches_encode(model):
    many = list(model.encode_many(CORPUS[:12], chunk=5))
    assert [m.ids for m in many] == [model.encode(s).ids for s in CORPUS[:12]]


def test_alignment_conversions():
    # words: src [A B] -> pieces [A1 A2 B1], tgt [X Y] -> pieces [X1 Y1 Y2]
    src_word_of, tgt_word_of = [0, 0, 1], [0, 1, 1]
    a_word = Alignment({(0, 0)}, {(1, 1)})
    a_sub = subword_alignment_from_word(a_word, src_word_of, tgt_word_of)
    assert a_sub.sure == {(0, 0), (1, 0)}
    assert a_sub.possible_only == {(2, 1), (2, 2)}
    assert word_alignment_from_subword(a_sub, src_word_of, tgt_word_of) == a_word
    # "any" rule: one subword link suffices
    assert word_alignment_from_subword(Alignment.from_links([(1, 2)]), src_word_of, tgt_word_of).links == {(0, 1)}


def test_channel_and_order_expansion():
    word_of = [0, 0, 1, 2, 2, 2]
    from xlpe.data.channels import expand_channel
    assert expand_channel("depth", [5, 7, 9], word_of, 6).tolist()[:-1] == [5, 5, 7, 9, 9, 9]
    assert subword_order_from_word([2, 0, 1], word_of) == [3, 4, 5, 0, 1, 2]


def test_conversion_error_on_foreign_word():
    with pytest.raises(FormatError, match="subword map"):
        subword_alignment_from_word(Alignment.from_links([(5, 0)]), [0], [0])


def test_bad_model_files(tmp_path):
    with pytest.raises(FormatError, match="not found"):
        SubwordModel.load(tmp_path / "none.model")
    (tmp_path / "junk.model").write_bytes(b"not a model")
    with pytest.raises(FormatError, match="not a sentencepiece model"):
        SubwordModel.load(tmp_path / "junk.model")


def test_bad_model_type(tmp_path):
    with pytest.raises(ConfigError):
        train_subwords([], tmp_path / "m.model", sentences=iter(CORPUS), model_type="nope")
