"""`xlpe preorder train|apply` on the built-in pair: learns the reordering, errors name file and line."""

import pytest

from xlpe.cli import main
from xlpe.data.synthetic import SyntheticConfig, synth
from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
from xlpe.io import read_alignments, read_orders, read_sentences
from xlpe.reorder.oracle import corpus_ranks


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("syn")
    synth(d, SyntheticConfig(profile="sov", seed=3, max_len=12), sizes={"train": 400, "test": 60})
    return d


def test_train_apply_beats_identity(corpus, tmp_path, capsys):
    model = tmp_path / "btg"
    assert main(["preorder", "train", "--src", str(corpus / "train.src"), "--align", str(corpus / "train.align"),
                 "--tgt", str(corpus / "train.tgt"), "--model", str(model), "--iterations", "3", "--quiet"]) == 0
    out1, out2 = tmp_path / "o1", tmp_path / "o2"
    assert main(["preorder", "apply", "--model", str(model), "--input", str(corpus / "test.src"),
                 "--output", str(out1), "--quiet"]) == 0
    assert main(["preorder", "apply", "--model", str(model), "--input", str(corpus / "test.src"),
                 "--output", str(out2), "--processes", "2", "--quiet"]) == 0
    assert out1.read_text() == out2.read_text()
    src = list(read_sentences(corpus / "test.src"))
    orders = list(read_orders(out1, lengths=[len(s) for s in src]))
    ranks = corpus_ranks(src, read_alignments(corpus / "test.align", 0))
    pred = corpus_reorder_scores(orders, ranks)["tau"]
    ident = corpus_reorder_scores([list(range(len(s))) for s in src], ranks)["tau"]
    assert pred > 0.85 and (1 - pred) < (1 - ident) / 2, (pred, ident)   # at least halves the tau error
    s = tmp_path / "s"
    assert main(["preorder", "apply", "--model", str(model), "--input", str(corpus / "test.src"),
                 "--output", str(s), "--format", "string", "--quiet"]) == 0
    first = s.read_text().splitlines()[0].split(" ")
    assert sorted(first) == sorted(src[0]) and first == [src[0][k] for k in orders[0]]


def test_errors(corpus, tmp_path, capsys):
    (tmp_path / "s").write_text("a b c\nd e\n")
    (tmp_path / "a").write_text("0-0 1-1\n0-0 4-1\n")
    rc = main(["preorder", "train", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"),
               "--model", str(tmp_path / "m"), "--quiet"])
    assert rc == 1 and f"{tmp_path / 'a'}:2:" in capsys.readouterr().err and not (tmp_path / "m").exists()
    (tmp_path / "a").write_text("0-0 1-1\n0-0\n")
    rc = main(["preorder", "train", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"),
               "--model", str(tmp_path / "m"), "--max-len", "2", "--quiet"])
    assert rc == 1 and f"{tmp_path / 's'}:1: sentence has 3 words, over the length limit 2" in capsys.readouterr().err
    rc = main(["preorder", "train", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"),
               "--model", str(tmp_path / "m"), "--max-len", "2", "--skip-long", "--quiet", "--iterations", "1"])
    assert rc == 0 and '"skipped_long": 1' in capsys.readouterr().out
    rc = main(["preorder", "apply", "--model", str(tmp_path / "nope"), "--input", str(tmp_path / "s")])
    assert rc == 1 and "no model.json" in capsys.readouterr().err


def test_attach_null_free_trains_with_the_tau_loss_only(corpus, tmp_path, capsys):
    (tmp_path / "s").write_text("a b c\nb a c\n")
    (tmp_path / "a").write_text("0-1 2-0\n0-0 1-1\n")  # "b" unaligned in line 1, "c" in line 2
    args = ["preorder", "train", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"),
            "--model", str(tmp_path / "m"), "--attach-null", "free", "--quiet", "--iterations", "2"]
    rc = main(args)
    assert rc == 1 and "--loss tau=1" in capsys.readouterr().err and not (tmp_path / "m").exists()
    assert main(args + ["--loss", "tau=1"]) == 0 and (tmp_path / "m" / "model.json").exists()
