"""XL PE data path (SPEC §4.1, §4.8): oracle orders for training, a preorderer at test time (no alignment needed),
clear errors for missing or malformed indices, and the noise attack on training indices."""

from __future__ import annotations

import pytest

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)
from xlpe.data.batching import ParallelData
from xlpe.data.channels import file_source
from xlpe.reorder.noise import NoisySource
from xlpe.data.subword import SubwordModel
from xlpe.errors import ConfigError, FormatError
from xlpe.infer.translate import Decoding, translate_file
from xlpe.reorder.btg import BTGConfig, BTGPreorderer
from xlpe.reorder.oracle import lader_ranks, order_from_ranks
from xlpe.train import DataConfig, train

XL = ["ape", "headxl"]


def _words(path):
    return [l.split() for l in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def xl_run(toy, tmp_path_factory):
    """Oracle orders from the toy corpus' alignments (the target is the reversed source), a tiny HeadXL model
    trained on them, and a preorderer trained on the same alignments."""
    d = tmp_path_factory.mktemp("xl_run")
    sents = _words(toy["src"])
    ranks = [lader_ranks([(i, len(s) - 1 - i) for i in range(len(s))], len(s)) for s in sents]
    orders = d / "train.order"
    orders.write_text("".join(" ".join(map(str, order_from_ranks(r))) + "\n" for r in ranks))
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]),
                      train_sources=[f"orders:{orders}"])
    res = train(tiny_model_config(pe=XL, pe_options={"tau": 1}), quick_train_config(d / "model", max_updates=6), data)
    pre = BTGPreorderer(BTGConfig(learner="perceptron"))
    pre.train(sents, ranks, iterations=2, progress=False)
    pre.save(d / "btg")
    return {"dir": d, "orders": orders, "ckpt": res.last_checkpoint, "btg": d / "btg", "pre": pre}


def test_oracle_trained_model_translates_with_a_preorderer_alone(xl_run, toy, tmp_path):
    """No target side and no alignment at test time: the preorderer predicts the indices from the source."""
    inp = tmp_path / "in.txt"
    lines = ["w1 w2 w3", "", "w4 w5 w6 w7 w8", "w9"]
    inp.write_text("\n".join(lines) + "\n")
    out_fly, out_file = tmp_path / "fly.txt", tmp_path / "file.txt"
    assert translate_file(xl_run["ckpt"], inp, out_fly, decoding=Decoding(beam=2),
                          sources=[f"preorderer:{xl_run['btg']}"]) == 4
    predicted = tmp_path / "in.order"
    predicted.write_text("".join(l + "\n" for l in xl_run["pre"].apply(lines)))
    translate_file(xl_run["ckpt"], inp, out_file, decoding=Decoding(beam=2), sources=[f"orders:{predicted}"])
    assert out_fly.read_text() == out_file.read_text()
    assert len(out_fly.read_text().split("\n")) == 5 and out_fly.read_text().split("\n")[1] == ""


def test_preorderer_learned_the_reversal(xl_run):
    assert xl_run["pre"].predict("w3 w1 w4 w2".split()) == [3, 2, 1, 0]


def test_xl_model_without_indices_is_a_clear_error(xl_run, toy, tmp_path):
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n")
    with pytest.raises(ConfigError, match="reads position channel.*--orders FILE.*--preorderer"):
        translate_file(xl_run["ckpt"], inp, tmp_path / "o.txt")
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]))
    with pytest.raises(ConfigError, match=r"reads position channel.*'xl'.*training data lacks"):
        train(tiny_model_config(pe=XL), quick_train_config(tmp_path / "m", max_updates=2), data)
    assert not list((tmp_path / "m").glob("checkpoint_*.pt"))


def test_bad_indices_files_name_file_and_line(xl_run, toy, tmp_path):
    sw = SubwordModel.load(toy["spm"])
    good = xl_run["orders"].read_text().splitlines()
    cases = {
        "short.order": (good[:-1], r"short\.order:120: channel 'xl' ends after 119"),
        "long.order": (good + ["0"], r"long\.order:121: channel 'xl' has more lines"),
        "count.order": ([good[0] + " " + str(len(good[0].split()))] + good[1:], r"count\.order:1: .*values for"),
        "perm.order": (["0 0" if len(good[0].split()) == 2 else "1 1 " + " ".join(good[0].split()[2:])] + good[1:],
                       r"perm\.order:1: .*permutation"),
    }
    for name, (lines, msg) in cases.items():
        p = tmp_path / name
        p.write_text("\n".join(lines) + "\n")
        with pytest.raises(FormatError, match=msg):
            ParallelData.from_files(toy["src"], toy["tgt"], sw, channels={"xl": file_source("orders", p)})


def test_subword_level_orders_are_checked_against_the_subword_count(toy, tmp_path):
    sw = SubwordModel.load(toy["spm"])
    lines = toy["src"].read_text().splitlines()
    n = [len(sw.encode(l).ids) for l in lines]
    assert any(k > len(l.split()) for k, l in zip(n, lines))        # some words are split
    p = tmp_path / "sub.order"
    p.write_text("".join(" ".join(map(str, reversed(range(k)))) + "\n" for k in n))
    d = ParallelData.from_files(toy["src"], toy["tgt"], sw, channels={"xl": file_source("subword-orders", p)},
                                channel_level={"xl": "subword"})
    assert d[0].channels["xl"].tolist() == list(reversed(range(n[0]))) + [n[0]]
    i = next(i for i, (k, l) in enumerate(zip(n, lines)) if k > len(l.split()))
    words = tmp_path / "words.order"      # word-level orders read as subword orders: the count is wrong
    words.write_text("".join(" ".join(map(str, range(len(l.split())))) + "\n" for l in lines))
    with pytest.raises(FormatError, match=rf"words\.order:{i + 1}: .*values for {n[i]} subwords"):
        ParallelData.from_files(toy["src"], toy["tgt"], sw,
                                channels={"xl": file_source("subword-orders", words)},
                                channel_level={"xl": "subword"})


def test_noise_attack_on_training_indices(xl_run):
    n = len(open(xl_run["orders"]).read().splitlines())
    blank = [[]] * n                     # file sources ignore the sentences; only their count matters
    clean = file_source("orders", xl_run["orders"]).take(blank)
    a = NoisySource(file_source("orders", xl_run["orders"]), 0.2, seed=7).take(blank)
    b = NoisySource(file_source("orders", xl_run["orders"]), 0.2, seed=7).take(blank)
    assert a == b and a != clean
    assert all(sorted(x) == list(range(len(x))) for x in a)
    moved = sum(sum(p != q for p, q in zip(x, y)) for x, y in zip(a, clean))
    expect = sum(2 * (round(0.2 * len(x)) // 2) for x in clean)
    assert moved == expect
    with pytest.raises(ConfigError, match="noise ratio must be in"):
        NoisySource(file_source("orders", xl_run["orders"]), 1.5)


def test_builtin_pair_oracle_training_then_source_only_translation(tmp_path):
    """On the built-in SOV pair: train with oracle indices (the generator's gold orders), translate with a
    preorderer trained on alignments; the test side has no target and no alignment."""
    from xlpe.cli import main
    from xlpe.data.subword import train_subwords
    from xlpe.data.synthetic import SyntheticConfig, synth
    from xlpe.io import read_alignments, read_sentences

    d = tmp_path / "pair"
    synth(d, SyntheticConfig(profile="sov", seed=3), sizes={"train": 600, "test": 20})
    spm = tmp_path / "spm.model"
    train_subwords([d / "train.src", d / "train.tgt"], spm, vocab_size=400)
    data = DataConfig(train_src=str(d / "train.src"), train_tgt=str(d / "train.tgt"), subword_model=str(spm),
                      train_sources=[f"orders:{d / 'train.order'}"])
    res = train(tiny_model_config(pe=["ape", "combination"], pe_options={"tau": 1}, max_len=128),
                quick_train_config(tmp_path / "m", max_updates=4), data)
    src = list(read_sentences(d / "train.src"))
    als = list(read_alignments(d / "train.align", 0))
    ranks = [lader_ranks(sorted(a.links), len(s), src_words=s) for s, a in zip(src, als)]
    pre = BTGPreorderer(BTGConfig(learner="perceptron"))
    pre.train(src, ranks, iterations=1, progress=False)
    pre.save(tmp_path / "btg")
    out = tmp_path / "test.hyp"
    assert main(["translate", "--checkpoint", str(res.last_checkpoint), "--input", str(d / "test.src"),
                 "--output", str(out), "--preorderer", str(tmp_path / "btg"), "--beam", "2"]) == 0
    assert len(out.read_text(encoding="utf-8").split("\n")) == 21
