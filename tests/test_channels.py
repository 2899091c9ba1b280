"""A new per-token channel takes one record and one source: a toy channel and a toy position encoding
train a tiny model and translate with it, without any change to batching, the trainer or translate."""

import pytest
import torch

from xlpe.data.channels import CHANNELS, Channel, ChannelSource, IterableSource, expand_channel, register_channel
from xlpe.errors import ConfigError, FormatError
from xlpe.nn.positions import ENCODINGS, PositionEncoding

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)


class WordLengthParity(ChannelSource):
    """The toy source: computed from the text (each word's length mod 2), no file."""

    level = "word"
    description = "word-length parity"

    def __init__(self):
        self.calls = 0

    def take(self, sentences, first_line=1):
        self.calls += 1
        return [[len(w) % 2 for w in s] for s in sentences]


class ParityEncoding(PositionEncoding):
    """The toy encoding: a learned vector per parity value (EOS gets 2, the record's EOS rule)."""

    name = "parity"
    inputs = ("parity",)

    def __init__(self, cfg):
        super().__init__(cfg)
        self.table = torch.nn.Embedding(3, cfg.d_model)

    def input_term(self, ctx):
        return self.table(ctx.channel("parity", who="parity"))


@pytest.fixture
def parity(monkeypatch):
    monkeypatch.setitem(CHANNELS, "parity", Channel("parity", "word length mod 2", eos=2))
    monkeypatch.setitem(ENCODINGS, "parity", ParityEncoding)


def test_toy_channel_trains_and_translates(parity, toy, tmp_path):
    from xlpe.infer.translate import Decoding, translate_file, translate_lines
    from xlpe.nn.checkpoint import load_model
    from xlpe.train import DataConfig, train

    source = WordLengthParity()
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]),
                      train_channels={"parity": source})
    res = train(tiny_model_config(pe=["ape", "parity"]), quick_train_config(tmp_path / "run", max_updates=3), data)
    assert res.step == 3 and source.calls > 0
    model, _, sw = load_model(res.last_checkpoint)
    lines = open(toy["src"]).read().splitlines()[:5]
    hyps = translate_lines(model, sw, lines, beam=2, channels={"parity": WordLengthParity()})
    assert len(hyps) == 5
    # the channel reaches the model: other parities give other encoder states
    from xlpe.data.batching import ParallelData, collate
    d = ParallelData.from_sentences(lines[:1], None, sw[0], channels={"parity": WordLengthParity()})
    b = collate([d[0]])
    flipped = {"parity": (1 - b.channels["parity"]).clamp(min=0)}
    with torch.no_grad():
        a = model.encode(b.src, b.channels).memory
        c = model.encode(b.src, {**b.channels, **flipped}).memory
    assert not torch.allclose(a, c)
    inp = tmp_path / "in.txt"
    inp.write_text("\n".join(lines) + "\n")
    n = translate_file(res.last_checkpoint, inp, tmp_path / "out.txt", decoding=Decoding(beam=2),
                       channels={"parity": WordLengthParity()}, device="cpu")
    assert n == 5 and len((tmp_path / "out.txt").read_text().splitlines()) == 5
    with pytest.raises(ConfigError, match="parity"):         # the model reads it: translating without it fails
        translate_file(res.last_checkpoint, inp, tmp_path / "out2.txt", device="cpu")


def test_channel_record_rules():
    ch = register_channel(Channel("toy_rank", "a rank", pad=-1, eos=-1))
    try:
        assert expand_channel("toy_rank", [4, 5], [0, 0, 1], 3).tolist() == [4, 4, 5, -1]
        assert expand_channel("toy_rank", {1: 7}, None, 3).tolist() == [-1, 7, -1, -1]
    finally:
        del CHANNELS[ch.name]
    with pytest.raises(ConfigError, match="pair"):
        register_channel(Channel("bad", pair=True))


def test_sources_name_file_and_line_when_counts_differ():
    src = IterableSource([[1], [2]], description="toy.ints")
    assert src.take([["a"]]) == [[1]]
    with pytest.raises(FormatError, match=r"toy\.ints:3: ends after 2 sentences"):
        src.take([["b"], ["c"]], first_line=2)
    more = IterableSource([[1], [2]], description="toy.ints")
    more.take([["a"]])
    with pytest.raises(FormatError, match=r"toy\.ints:2: has more lines than the text \(1\)"):
        more.finish(1)


def test_channel_files_refuse_bad_lines_naming_file_and_line(tmp_path):
    from xlpe.data.channels import file_source
    with pytest.raises(ConfigError, match="unknown channel file kind 'magic'"):
        file_source("magic", tmp_path / "x")
    with pytest.raises(ConfigError, match=r"channel file .*absent\.dpe not found"):
        file_source("dpe", tmp_path / "absent.dpe")
    cases = {"0-0 2-1\n1p2\n": (r"t\.dpe:2: DPE target 1p2 is a possible link", 2),
             "0-0 0-1\n": (r"t\.dpe:1: source token 0 has two DPE targets", 1)}
    for text, (msg, n) in cases.items():
        (tmp_path / "t.dpe").write_text(text, encoding="utf-8")
        src = file_source("dpe", tmp_path / "t.dpe")
        with pytest.raises(FormatError, match=msg):
            src.take([["a"]] * n)
    (tmp_path / "t.ints").write_text("1 2\n3 x\n", encoding="utf-8")
    with pytest.raises(FormatError, match=r"t\.ints:2: non-integer value"):
        file_source("ints", tmp_path / "t.ints").take([["a", "b"], ["c", "d"]])
    # a good file: targets per source token, unaligned tokens absent
    (tmp_path / "t.dpe").write_text("0-0 2-1 4-2 1-3\n\n", encoding="utf-8")
    assert file_source("dpe", tmp_path / "t.dpe").take([["a"] * 5, ["b"]]) == [{0: 0, 2: 1, 4: 2, 1: 3}, {}]


def test_source_specs_fill_the_channels_their_kind_declares():
    from xlpe.sources import KINDS, channel_specs, open_source, split_spec
    assert {k: v.fills for k, v in KINDS.items()} == {
        "orders": ("xl",), "subword-orders": ("xl",), "dpe": ("dpe_target",), "ints": (),
        "conllu": ("depth", "tree_word", "tree_head"), "conllu-strict": ("depth", "tree_word", "tree_head"),
        "preorderer": ("xl",)}
    # a spec's kind is named, or the channel's usual one; a colon that names no kind belongs to the path
    assert split_spec("xl", "orders:a.ord") == ("orders", "a.ord")
    assert split_spec("xl", "a.ord") == ("orders", "a.ord")
    assert split_spec("dpe_target", "t.dpe") == ("dpe", "t.dpe")
    assert split_spec("tree_head", "t.conllu") == ("conllu", "t.conllu")
    assert split_spec("depth", "c:/x.ints") == ("ints", "c:/x.ints")
    # a source fills the channels its kind declares (those the model reads); NAME= picks one
    assert channel_specs(["conllu:t", "subword-orders:o"]) == {
        "depth": "conllu:t", "tree_word": "conllu:t", "tree_head": "conllu:t", "xl": "subword-orders:o"}
    assert channel_specs(["conllu:t"], reads={"depth", "xl"}) == {"depth": "conllu:t"}
    assert channel_specs(["depth=ints:d", "tree_word=conllu:t"], {"xl": "o.ord", "x": "c:/x"}) == {
        "depth": "ints:d", "tree_word": "conllu:t", "xl": "orders:o.ord", "x": "ints:c:/x"}
    for sources, channels, reads, msg in [
            (["ints:x"], None, None, "fills the one channel its spec names: write NAME=ints:x"),
            (["x.txt"], None, None, "names no kind"),
            (["conllu:t"], {"depth": "d"}, None, "'depth' is filled twice: by conllu:t and by channel depth=d"),
            (["orders:o", "preorderer:p"], None, None, "'xl' is filled twice"),
            (["xl=conllu:t"], None, None, "fills the channels depth, tree_word, tree_head, not 'xl'"),
            (["xl=ints:x"], None, None, "permutation's inverse: give an orders file"),
            (["orders:o"], None, {"depth"}, r"reads no channel \['xl'\] of orders:o: it would be ignored"),
            (["conllu:t"], None, {"xl"}, r"reads no channel \['depth', 'tree_head', 'tree_word'\]"),
            (["orders:"], None, None, "empty path"), ("conllu:t", None, None, "a list")]:
        with pytest.raises(ConfigError, match=msg):
            channel_specs(sources, channels, reads=reads)
    with pytest.raises(ConfigError, match="empty path"):
        open_source("xl", "orders:")
    with pytest.raises(ConfigError, match="permutation's inverse: give an orders file"):
        open_source("xl", "ints:x.ints")


def test_cli_shortcuts_are_sources_from_one_table():
    from types import SimpleNamespace

    from xlpe.cli.shortcuts import SHORTCUTS, data_with_shortcuts, sources_from_args
    assert {k: v.kind for k, v in SHORTCUTS.items()} == {"orders": "orders", "trees": "conllu",
                                                        "preorderer": "preorderer"}
    args = SimpleNamespace(orders="o", orders_level="subword", trees="t", preorderer=None)
    assert sources_from_args(args) == ["subword-orders:o", "conllu:t"]
    assert sources_from_args(SimpleNamespace(orders=None, orders_level="word", trees=None, preorderer="p")) == [
        "preorderer:p"]
    with pytest.raises(ConfigError, match="on-the-fly preorderer orders words"):
        sources_from_args(SimpleNamespace(orders=None, orders_level="subword", trees=None, preorderer="p"))
    # xlpe train: the split shortcuts (flags or TOML keys) join the split's sources
    assert data_with_shortcuts({"train_orders": "a", "dev_trees": "b", "orders_level": "word", "train_src": "s",
                                "train_sources": ["depth=ints:d"]}) == {
        "train_src": "s", "train_sources": ["depth=ints:d", "orders:a"], "dev_sources": ["conllu:b"]}
    assert data_with_shortcuts({"dev_orders": "a", "orders_level": "subword"}) == {"dev_sources": ["subword-orders:a"]}
    with pytest.raises(ConfigError, match="orders_level must be"):
        data_with_shortcuts({"train_orders": "a", "orders_level": "phrase"})


def _chain_trees(text_path, out):
    """A CoNLL-U file of ``text_path``: each word headed by the one before it."""
    from xlpe.io.conllu import DepTree, write_conllu
    lines = text_path.read_text(encoding="utf-8").splitlines()
    write_conllu(out, [DepTree(line.split(), list(range(len(line.split())))) for line in lines])
    return out


@pytest.fixture
def counted_reads(monkeypatch):
    """Calls of the CoNLL-U reader behind ``conllu:`` sources, and the trees they parsed."""
    import xlpe.syntax.source as trees_source
    real, calls = trees_source.read_conllu, {"files": 0, "trees": 0}

    def counting(path):
        calls["files"] += 1
        for tree in real(path):
            calls["trees"] += 1
            yield tree
    monkeypatch.setattr(trees_source, "read_conllu", counting)
    return calls


def test_one_conllu_file_is_read_once_for_all_its_channels(toy, tmp_path, counted_reads):
    """A CoNLL-U file fills depth, tree_word and tree_head: training and translation read and parse it once, given
    as a source, channel by channel (as the recipes give it) or by --trees; the output is the one of three
    separate readers."""
    from xlpe.cli import main
    from xlpe.data.subword import SubwordModel
    from xlpe.infer.translate import Decoding, translate_file
    from xlpe.nn.checkpoint import save_checkpoint, subword_entry
    from xlpe.nn.transformer import build_model
    from xlpe.sources import open_source
    from xlpe.train import DataConfig, train

    pe = ["ape", "struct_abs", "struct_rel"]
    train_trees = _chain_trees(toy["src"], tmp_path / "train.conllu")
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]),
                      train_sources=[f"conllu:{train_trees}"])
    res = train(tiny_model_config(pe=pe, pe_options={"struct_k": 4}),
                quick_train_config(tmp_path / "run", max_updates=1, cache_data=False), data)
    n_train = len(toy["src"].read_text().splitlines())
    assert res.step == 1 and counted_reads == {"files": 1, "trees": n_train}

    sw = SubwordModel.load(toy["spm"])
    torch.manual_seed(1)
    cfg = tiny_model_config(src_vocab_size=len(sw), pe=pe, pe_options={"struct_k": 4})
    ck = tmp_path / "struct.pt"
    save_checkpoint(ck, {"model": build_model(cfg).state_dict(), "model_config": cfg.to_dict(),
                         "subwords": {"src": subword_entry(sw), "tgt": None}})
    inp = toy["dev_src"]
    trees = _chain_trees(inp, tmp_path / "dev.conllu")
    n = len(inp.read_text().splitlines())
    names = ("depth", "tree_word", "tree_head")
    outs = {}
    for way, kw in {"source": dict(sources=[f"conllu:{trees}"]),
                    "channels": dict(channels={c: f"conllu:{trees}" for c in names})}.items():
        counted_reads.update(files=0, trees=0)
        translate_file(ck, inp, tmp_path / f"{way}.hyp", decoding=Decoding(beam=2), device="cpu", **kw)
        assert counted_reads == {"files": 1, "trees": n}, way
        outs[way] = (tmp_path / f"{way}.hyp").read_text()
    counted_reads.update(files=0, trees=0)
    assert main(["translate", "--checkpoint", str(ck), "--input", str(inp), "--output", str(tmp_path / "cli.hyp"),
                 "--trees", str(trees), "--beam", "2", "--device", "cpu"]) == 0
    assert counted_reads == {"files": 1, "trees": n}
    counted_reads.update(files=0, trees=0)
    separate = {c: open_source(c, f"conllu:{trees}") for c in names}       # one reader per channel
    translate_file(ck, inp, tmp_path / "separate.hyp", decoding=Decoding(beam=2), device="cpu", channels=separate)
    assert counted_reads == {"files": 3, "trees": 3 * n}
    assert outs["source"] == outs["channels"] == (tmp_path / "cli.hyp").read_text() == (
        tmp_path / "separate.hyp").read_text()


def test_a_source_object_fills_the_channels_the_model_reads():
    from xlpe.data.channels import Source
    from xlpe.sources import channel_specs, open_sources

    class Counting(Source):
        channels = ("a", "b", "c")
        description = "<counting>"

        def __init__(self):
            self.calls = 0

        def take(self, sentences, first_line=1):
            self.calls += 1
            return [{"a": [1] * len(s), "b": [2] * len(s), "c": [3] * len(s)} for s in sentences]

    src = Counting()
    opened = open_sources([src], reads={"a", "c"})
    assert list(opened) == ["a", "c"]
    sents = [["x", "y"], ["z"]]
    assert opened["a"].take(sents) == [[1, 1], [1]] and opened["c"].take(sents) == [[3, 3], [3]]
    assert src.calls == 1
    with pytest.raises(ConfigError, match="was dropped"):
        src.split()["b"].take(sents)
    with pytest.raises(ConfigError, match=r"reads no channel \['a', 'b', 'c'\] of <counting>"):
        channel_specs([Counting()], reads={"xl"})
    with pytest.raises(ConfigError, match="give it by name"):
        channel_specs([IterableSource([[1]])])


def test_training_signature_ignores_the_data_keys_that_give_no_channel(toy):
    """A run.json written before train_sources / dev_sources holds train_orders, train_trees, ... at their empty
    values: the same training as a DataConfig now, for ``experiment.reuse_runs``."""
    import json

    from xlpe.experiments.engine.reuse import training_signature
    from xlpe.train import DataConfig
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]),
                      train_channels={"xl": f"orders:{toy['src']}"})
    now = json.loads(json.dumps(data.to_dict()))
    before = {k: v for k, v in now.items() if k not in ("train_sources", "dev_sources")}
    before.update(train_orders=None, dev_orders=None, orders_level="word", train_trees=None, dev_trees=None)
    assert training_signature({}, {}, before) == training_signature({}, {}, now)
    assert training_signature({}, {}, {**before, "train_trees": str(toy["src"])}) != training_signature({}, {}, now)
