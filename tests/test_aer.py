"""AER (SPEC §8.1, §12 example 6), corpus micro-averaging, index bases and the staged gold sets."""

import json

import pytest

from xlpe.cli import main
from xlpe.errors import FormatError
from xlpe.evaluate.aer import aer_files, corpus_aer, diagonal_alignment, sentence_aer
from xlpe.io import Alignment, read_alignments, write_alignments


def test_spec_example_6():
    s = sentence_aer({(0, 0), (1, 1), (1, 2)}, Alignment({(0, 0)}, {(1, 1)}))
    assert s.precision == pytest.approx(2 / 3) and s.recall == 1.0 and s.aer == pytest.approx(0.25)


def test_micro_not_macro():
    # sentence 1: perfect (1 link); sentence 2: 3 hyp links, 1 correct of 1 sure
    refs = [Alignment({(0, 0)}), Alignment({(0, 0)})]
    hyps = [{(0, 0)}, {(0, 0), (0, 1), (1, 0)}]
    s = corpus_aer(hyps, refs)
    # |A|=4, |S|=2, |A∩S|=2, |A∩P|=2 -> AER = 1 - 4/6
    assert s.aer == pytest.approx(1 - 4 / 6)
    assert s.precision == pytest.approx(0.5) and s.recall == 1.0


def test_empty_corpus_and_empty_sentences():
    assert corpus_aer([set()], [Alignment()]).aer == 0.0
    assert corpus_aer([set(), {(0, 0)}], [Alignment(), Alignment({(0, 0)})]).aer == 0.0


def test_length_mismatch():
    with pytest.raises(FormatError):
        corpus_aer([set()], [Alignment(), Alignment()])


GOLD = {"deen": ("de", "en"), "enfr": ("en", "fr"), "zhen": ("zh", "en"), "jaen": ("ja", "en")}


@pytest.mark.parametrize("name", list(GOLD))
def test_gold_against_itself_is_zero(shared_data, name):
    d = shared_data / "word-alignment-gold" / name
    s, t = GOLD[name]
    r = aer_files(d / f"{name}.talp", d / f"{name}.talp", ref_base=1, hyp_base=1,
                  src=d / f"{name}.{s}", tgt=d / f"{name}.{t}")
    assert r.aer == 0.0 and r.precision == 1.0 and r.recall == 1.0 and r.sentences > 400


def test_gold_sure_only_hypothesis_and_known_errors(shared_data, tmp_path):
    d = shared_data / "word-alignment-gold" / "deen"
    gold = list(read_alignments(d / "deen.talp", 1))
    # hypothesis = sure links only, written 0-based: precision 1, recall 1, AER 0
    write_alignments(tmp_path / "h0", [Alignment(g.sure) for g in gold], 0)
    r = aer_files(d / "deen.talp", tmp_path / "h0", ref_base=1, hyp_base=0)
    assert r.aer == 0.0
    # known errors: drop the first sure link of every sentence and add one wrong link (i, j) not in P
    hyps, n_s, n_a, hits = [], 0, 0, 0
    for g in gold:
        sure = sorted(g.sure)
        keep = set(sure[1:])
        i, j = max(i for i, _ in g.possible) + 1, 0     # index beyond every gold link: surely wrong
        keep.add((i, j))
        hyps.append(Alignment(frozenset(keep)))
        n_s += len(g.sure)
        n_a += len(keep)
        hits += len(sure) - 1
    write_alignments(tmp_path / "h1", hyps, 0)
    r = aer_files(d / "deen.talp", tmp_path / "h1", ref_base=1, hyp_base=0)
    expected = 1 - (hits + hits) / (n_a + n_s)          # |A∩S| = |A∩P| = kept sure links
    assert r.aer == pytest.approx(expected) and r.n_hyp == n_a and r.n_sure == n_s
    assert r.precision == pytest.approx(hits / n_a) and r.recall == pytest.approx(hits / n_s)


def test_gold_with_wrong_base_fails_loudly(shared_data):
    d = shared_data / "word-alignment-gold" / "deen"
    with pytest.raises(FormatError, match="1-based"):
        aer_files(d / "deen.talp", d / "deen.talp", ref_base=0, hyp_base=0)
    with pytest.raises(FormatError, match="looks 1-based"):
        aer_files(d / "deen.talp", d / "deen.talp", ref_base=0, hyp_base=1, src=d / "deen.de", tgt=d / "deen.en")


def test_reverse_ref(shared_data, tmp_path):
    d = shared_data / "word-alignment-gold" / "deen"
    gold = list(read_alignments(d / "deen.talp", 1))
    write_alignments(tmp_path / "rev", [g.reversed() for g in gold], 0)
    r = aer_files(d / "deen.talp", tmp_path / "rev", ref_base=1, hyp_base=0, reverse_ref=True,
                  src=d / "deen.en", tgt=d / "deen.de")
    assert r.aer == 0.0


def test_cli_json(tmp_path, capsys):
    (tmp_path / "g").write_text("1-1 2p2\n")
    (tmp_path / "h").write_text("0-0 1-1 1-2\n")
    (tmp_path / "s").write_text("a b\n")
    (tmp_path / "t").write_text("x y z\n")
    assert main(["aer", "--ref", str(tmp_path / "g"), "--ref-base", "1", "--hyp", str(tmp_path / "h"),
                 "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["aer"] == pytest.approx(0.25)


def test_cli_error_names_file(tmp_path, capsys):
    (tmp_path / "g").write_text("1-1\n")
    (tmp_path / "h").write_text("0-0 5-0\n")
    (tmp_path / "s").write_text("a b\n")
    (tmp_path / "t").write_text("x\n")
    rc = main(["aer", "--ref", str(tmp_path / "g"), "--ref-base", "1", "--hyp", str(tmp_path / "h"),
               "--src", str(tmp_path / "s"), "--tgt", str(tmp_path / "t")])
    err = capsys.readouterr().err
    assert rc == 1 and f"{tmp_path / 'h'}:1:" in err and "source index 5" in err


@pytest.mark.parametrize("n, m, links", [
    (3, 5, [(0, 0), (1, 1), (1, 2), (2, 3), (2, 4)]),     # j·(n−1)/(m−1) = 0, .5, 1, 1.5, 2, halves round up
    (5, 3, [(0, 0), (2, 1), (4, 2)]),
    (4, 4, [(0, 0), (1, 1), (2, 2), (3, 3)]),
    (1, 3, [(0, 0), (0, 1), (0, 2)]),
    (4, 1, [(0, 0)]),
    (0, 3, []),
])
def test_diagonal_alignment_one_link_per_target_word(n, m, links):
    assert sorted(diagonal_alignment(n, m).links) == links


def test_diagonal_of_a_monotone_gold_is_perfect_and_of_a_reversal_is_not():
    gold = Alignment.from_links([(i, i) for i in range(6)])
    assert corpus_aer([diagonal_alignment(6, 6)], [gold]).aer == 0
    rev = Alignment.from_links([(5 - i, i) for i in range(6)])
    assert corpus_aer([diagonal_alignment(6, 6)], [rev]).aer == 1
