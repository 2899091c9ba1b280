"""The gold word-alignment sets (xlpe.data.gold_sets): Hansards normalisation rules and the four loaders."""

import pytest

from xlpe.data.gold_sets import GOLD_SETS, custom_gold_set, load_gold_set, norm_en, norm_fr, strip_accents
from xlpe.errors import ConfigError


def test_norm_en_splits_clitics_punctuation_and_final_periods_but_keeps_abbreviations():
    # "mr." is an abbreviation and "u.s." a dotted acronym: both keep their period; "ready." loses it
    assert norm_en("Mr. Smith's bill (in the U.S.) isn't ready.") == \
        "mr. smith 's bill ( in the u.s. ) is n't ready ."
    assert norm_en("Ottawa-Centre we'll see") == "ottawa - centre we 'll see"


def test_norm_fr_expands_elisions_and_contractions_as_the_gold_writes_them():
    assert norm_fr("L'honorable député d'Ottawa-Centre parle du budget aujourd'hui, au Québec.") == \
        "le honorable depute de ottawa - centre parle de le budget aujourd' hui , a le quebec ."
    assert norm_fr("Jusqu'à ce qu'il vienne, aux États-Unis.") == "jusque a ce que il vienne , a les etats - unis ."
    assert norm_fr("des amis") == "de les amis"
    # inside a hyphenated compound a contraction stays, as in the gold ("au - dessus de le moteur")
    assert norm_fr("Au-delà du budget, à Rivière-du-Loup.") == "au - dela de le budget , a riviere - du - loup ."
    # an apostrophe that is not one of the elisions stays inside its token
    assert norm_fr("prud'homme") == "prud'homme"


def test_strip_accents_keeps_every_token():
    s = "élève à l'école où ça"
    assert strip_accents(s) == "eleve a l'ecole ou ca"
    assert len(strip_accents(s).split(" ")) == len(s.split(" "))


def test_unknown_or_missing_sets_and_files_are_clear_errors(tmp_path):
    with pytest.raises(ConfigError, match="unknown gold set 'xxyy'"):
        load_gold_set("xxyy", tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        load_gold_set("deen", tmp_path)
    with pytest.raises(ConfigError, match="train_src = .* is not a file"):
        custom_gold_set("mine", train_src=str(tmp_path / "no.src"), train_tgt="", gold_src="", gold_tgt="",
                        gold_align="")


def test_custom_gold_set_drops_empty_corpus_lines_and_checks_the_gold(tmp_path):
    files = {"c.src": "a b\n\nc\n", "c.tgt": "x y\nz\nw\n", "g.src": "a b\n", "g.tgt": "x y\n", "g.al": "1-1 2p2\n"}
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    p = {k: str(tmp_path / v) for k, v in (("train_src", "c.src"), ("train_tgt", "c.tgt"), ("gold_src", "g.src"),
                                            ("gold_tgt", "g.tgt"), ("gold_align", "g.al"))}
    g = custom_gold_set("mine", **p)
    assert g.train_src == ["a b", "c"] and g.train_tgt == ["x y", "w"]      # the pair with an empty side is gone
    assert g.gold[0].sure == {(0, 0)} and (1, 1) in g.gold[0].possible
    (tmp_path / "g.al").write_text("1-3\n", encoding="utf-8")
    with pytest.raises(Exception, match="g.al:1"):
        custom_gold_set("mine", **p)


GOLD_SIZES = {"deen": 508, "enfr": 447, "zhen": 450, "jaen": 582}


@pytest.mark.parametrize("name", GOLD_SETS)
def test_the_four_sets_load_from_the_shared_data(shared_data, name):
    g = load_gold_set(name, shared_data, train_limit=300)
    assert len(g.gold_src) == len(g.gold_tgt) == len(g.gold) == GOLD_SIZES[name]
    assert 0 < len(g.train_src) == len(g.train_tgt) <= 300
    assert all(a.sure for a in g.gold)
    for a, s, t in zip(g.gold, g.gold_src, g.gold_tgt):        # links inside the sentences (0-based)
        assert all(i < len(s.split(" ")) and j < len(t.split(" ")) for i, j in a.sure | a.possible)
    if name == "enfr":   # Hansards has no accents: the gold's French is stripped to match, token counts unchanged
        assert all(strip_accents(x) == x for x in g.gold_tgt + g.train_tgt)
        assert all(x == x.lower() for x in g.train_src)


def test_japanese_corpus_never_reads_kftt_tune(shared_data):
    """KFTT tune holds the gold sentences: the corpus (train + dev) must not contain them. Only one-line
    headings ("概要", "沿革") and one programme name occur in both, as Wikipedia repeats them."""
    g = load_gold_set("jaen", shared_data)
    corpus = set(g.train_src)
    shared = [s for s in g.gold_src if s in corpus]
    assert len(shared) <= 10 and all(len(s.split(" ")) <= 8 for s in shared), shared
