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
    from xlpe.infer.translate import translate_file, translate_lines
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
    n = translate_file(res.last_checkpoint, inp, tmp_path / "out.txt", beam=2, channels={"parity": WordLengthParity()},
                       device="cpu")
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


def test_source_specs_and_shortcuts_refuse_contradictions():
    from types import SimpleNamespace

    from xlpe.sources import open_source, split_spec, with_trees, with_xl_shortcuts
    # a spec's kind is named, or the channel's usual one; a colon that names no kind belongs to the path
    assert split_spec("xl", "orders:a.ord") == ("orders", "a.ord")
    assert split_spec("xl", "a.ord") == ("orders", "a.ord")
    assert split_spec("dpe_target", "t.dpe") == ("dpe", "t.dpe")
    assert split_spec("depth", "c:/x.ints") == ("ints", "c:/x.ints")
    with pytest.raises(ConfigError, match="empty path"):
        open_source("xl", "orders:")
    with pytest.raises(ConfigError, match="permutation's inverse: give an orders file"):
        open_source("xl", "ints:x.ints")
    assert with_xl_shortcuts(None, orders="o", orders_level="subword") == {"xl": "subword-orders:o"}
    assert with_xl_shortcuts({"depth": "d"}, preorderer="p") == {"depth": "d", "xl": "preorderer:p"}
    for kwargs, msg in [(dict(orders="o", preorderer="p"), "either orders .* or a preorderer"),
                        (dict(channels={"xl": "f"}, orders="o"), "'xl' is given twice"),
                        (dict(orders="o", orders_level="phrase"), "orders_level must be"),
                        (dict(preorderer="p", orders_level="subword"), "on-the-fly preorderer orders words")]:
        channels = kwargs.pop("channels", None)
        with pytest.raises(ConfigError, match=msg):
            with_xl_shortcuts(channels, **kwargs)
    # --trees gives exactly the tree channels the model reads; a model that reads none refuses it
    assert with_trees({}, "t.conllu", SimpleNamespace(pe=["ape", "struct_abs"])) == {"depth": "conllu:t.conllu"}
    with pytest.raises(ConfigError, match="reads no tree channel"):
        with_trees({}, "t.conllu", SimpleNamespace(pe=["ape"]))
    with pytest.raises(ConfigError, match=r"\['depth'\] given twice"):
        with_trees({"depth": "d.ints"}, "t.conllu", SimpleNamespace(pe=["struct_abs"]))
