"""Structural position encoding plug-ins (Wang et al. 2019; SPEC §3): struct_abs closed forms."""

import pytest
import torch

from xlpe.errors import ConfigError
from xlpe.io.conllu import DepTree
from xlpe.nn.positions import sinusoid
from xlpe.nn.transformer import build_model

from _nmt_toy import pe_config, random_batch


def cfg(pe, **kw):
    return pe_config(pe, 16, **kw)


def batch():
    return random_batch(1, 16, pad_second=False)


def test_structural_only_with_depth_equal_to_position_is_ape():
    src, tgt = batch()
    seq = torch.arange(6).expand(2, 6)
    ape = build_model(cfg(["ape"])).eval()
    stru = build_model(cfg(["struct_abs"])).eval()
    stru.load_state_dict(ape.state_dict())
    assert torch.allclose(stru(src, tgt, {"depth": seq}), ape(src, tgt), atol=1e-6)


def test_add_fusion_with_pe_stru_equal_to_pe_seq_doubles_it():
    src, _ = batch()
    m = build_model(cfg(["ape", "struct_abs"], pe_options={"struct_fusion": "add"})).eval()
    seq = torch.arange(6).expand(2, 6)
    from xlpe.nn.positions import EncodingContext
    ctx = EncodingContext(src, torch.zeros(2, 6, 32), src.eq(0), {"depth": seq})
    total = sum(p.input_term(ctx) for p in m.encoder.pe)
    assert torch.allclose(total, 2 * sinusoid(seq, 32))
    assert m.encoder.pe[1].replaces() == set()


def test_tanh_fusion_replaces_ape_and_with_zero_weights_gives_no_position():
    src, tgt = batch()
    depth = torch.tensor([[1, 0, 2, 2, 1, 3], [0, 1, 1, 2, 3, 4]])
    fused = build_model(cfg(["ape", "struct_abs"])).eval()
    assert fused.encoder.pe[1].replaces() == {"ape"}
    with torch.no_grad():
        fused.encoder.pe[1].U.weight.zero_()
        fused.encoder.pe[1].V.weight.zero_()
    none = build_model(cfg(["none"])).eval()
    none.load_state_dict({k: v for k, v in fused.state_dict().items() if ".pe." not in k})
    assert torch.allclose(fused(src, tgt, {"depth": depth}), none(src, tgt), atol=1e-6)   # tanh(0) = 0, no APE
    with pytest.raises(ConfigError, match="struct_fusion"):
        cfg(["ape", "struct_abs"], pe_options={"struct_fusion": "mul"})
    with pytest.raises(ConfigError, match="depth"):
        fused(src, tgt)                      # the channel is required


@pytest.fixture(scope="module")
def tree_data(tmp_path_factory):
    from xlpe.data.subword import train_subwords
    from xlpe.data.synthetic import SyntheticConfig, synth
    d = tmp_path_factory.mktemp("trees")
    synth(d, SyntheticConfig(profile="sov", seed=2), sizes={"train": 120, "test": 6})
    train_subwords([d / "train.src", d / "train.tgt"], d / "spm.model", vocab_size=300)
    return d


def test_structural_model_trains_with_trees_and_translates_with_trees(tree_data, tmp_path, capsys):
    from xlpe.cli import main
    d = tree_data
    out = tmp_path / "run"
    argv = ["train", "--train-src", d / "train.src", "--train-tgt", d / "train.tgt", "--subword-model",
            d / "spm.model", "--train-trees", d / "train.conllu", "--preset", "tiny", "--d-model", "16",
            "--d-ff", "32", "--pe", "ape", "rpe", "struct_abs", "struct_rel", "--pe-option", "struct_k=4",
            "--max-updates", "2", "--max-tokens", "300", "--out", out, "--no-progress", "--threads", "1"]
    assert main([str(a) for a in argv]) == 0
    ckpt = next(out.glob("checkpoint_*.pt"))
    hyp = tmp_path / "test.hyp"
    assert main(["translate", "--checkpoint", str(ckpt), "--input", str(d / "test.src"), "--output", str(hyp),
                 "--trees", str(d / "test.conllu"), "--beam", "2"]) == 0
    assert len(hyp.read_text().splitlines()) == 6
    from xlpe.infer.translate import translate_lines        # the API takes the same specs, as docs/api.md shows
    from xlpe.nn.checkpoint import load_model
    model, _, sw = load_model(ckpt)
    lines = (d / "test.src").read_text().splitlines()
    trees = f"conllu:{d / 'test.conllu'}"
    assert translate_lines(model, sw, lines, beam=2, sources=[trees]) == hyp.read_text().splitlines()
    capsys.readouterr()
    # without trees: a clear error before any work
    assert main(["translate", "--checkpoint", str(ckpt), "--input", str(d / "test.src"), "--output",
                 str(tmp_path / "x")]) == 1
    assert "tree_head" in capsys.readouterr().err and not (tmp_path / "x").exists()
    # trees of other sentences: the word count mismatch names the file and the line
    assert main(["translate", "--checkpoint", str(ckpt), "--input", str(d / "test.src"), "--output",
                 str(tmp_path / "y"), "--trees", str(d / "train.conllu")]) == 1
    err = capsys.readouterr().err
    assert "train.conllu" in err and "words but source line" in err


def test_struct_rel_index_is_the_clipped_tree_relative_position(tree_data):
    """The relative hook indexes its tables by clip(rel_stru, k) + k, computed from the batch's channels."""
    from xlpe.data.batching import collate
    from xlpe.data.corpus import ParallelData
    from xlpe.data.subword import SubwordModel
    from xlpe.io.conllu import read_conllu
    from xlpe.nn.positions import EncodingContext
    from xlpe.sources import open_sources
    from xlpe.syntax.trees import relative_positions
    d = tree_data
    sw = SubwordModel.load(d / "spm.model")
    data = ParallelData.from_files(d / "test.src", None, sw, channels=open_sources([f"conllu:{d / 'test.conllu'}"]))
    b = collate([data[i] for i in range(len(data))])
    m = build_model(cfg(["ape", "struct_rel"], src_vocab_size=sw.vocab_size, pe_options={"struct_k": 3}))
    ctx = EncodingContext(b.src, torch.zeros(*b.src.shape, 32), b.src.eq(0), b.channels)
    idx = m.encoder.pe[1].relative(ctx, 0).index
    trees = list(read_conllu(d / "test.conllu"))
    for k, t in enumerate(trees):
        wo = sw.encode([*open(d / "test.src").read().splitlines()[k].split()]).word_of
        ref = relative_positions(t.heads, wo, k=3) + 3
        L = len(wo) + 1
        assert idx[k, :L, :L].tolist() == ref.tolist()


def test_tree_contents_are_checked_against_the_source_lines(tree_data, tmp_path, caplog):
    """Issue 57 class 6: trees whose words differ from the source's were taken as long as the lengths agreed, and
    trees with several roots passed silently. Differing words are counted in one warning (tokenisers legitimately
    escape or normalise), an error with ``conllu-strict``; roots whose subtrees interleave are an error naming the
    tree's file and line; several roots side by side (sentences a parser split) are reported."""
    import copy
    import logging
    from xlpe.data.corpus import ParallelData
    from xlpe.data.subword import SubwordModel
    from xlpe.errors import FormatError
    from xlpe.io.conllu import format_conllu, read_conllu
    from xlpe.sources import open_sources
    sw = SubwordModel.load(tree_data / "spm.model")
    trees = list(read_conllu(tree_data / "test.conllu"))
    line = 1 + sum(len(format_conllu(t).splitlines()) + 1 for t in trees[:2])     # where the third tree starts

    def case(name, edit):
        """A trees file with ``edit`` applied, and the source text of its trees' words."""
        t = copy.deepcopy(trees)
        edit(t)
        (tmp_path / name).write_text("".join(format_conllu(x) + "\n\n" for x in t))
        (tmp_path / (name + ".src")).write_text("".join(" ".join(x.words) + "\n" for x in t))
        return tmp_path / name

    def encode(path, kind="conllu", src=None):
        return ParallelData.from_files(src or f"{path}.src", None, sw, channels=open_sources([f"{kind}:{path}"]))

    def rename(t):
        t[2].words = ["X" + w for w in t[2].words]
        t[4].words[0] = "Y"
    renamed = case("renamed.conllu", rename)
    with caplog.at_level(logging.WARNING):
        assert len(encode(renamed, src=tree_data / "test.src")) == len(trees)
    assert f"renamed.conllu: 2 of {len(trees)} trees have words that differ" in caplog.text
    assert f"tree 3, line {line}" in caplog.text and "conllu-strict:" in caplog.text
    with pytest.raises(FormatError, match=rf"renamed\.conllu:{line}: .*tree 3 has word 1 'X"):
        encode(renamed, "conllu-strict", src=tree_data / "test.src")

    def interleave(t):                                  # word 1 under word 3, words 2 and 3 both roots
        t[2] = DepTree(["a", "b", "c"], [3, 0, 0])
    with pytest.raises(FormatError, match=rf"roots\.conllu:{line}: .*tree 3 .* 2 roots, whose subtrees interleave"):
        encode(case("roots.conllu", interleave))

    def split(t):                                       # the trees of two sentences side by side
        t[2] = DepTree(["a", "b", "c", "d"], [2, 0, 4, 0])
    two = case("two.conllu", split)
    with caplog.at_level(logging.INFO):
        assert len(encode(two)) == len(trees)
    assert "two.conllu: 1 of" in caplog.text and "several roots" in caplog.text
    with pytest.raises(FormatError, match=rf"two\.conllu:{line}: .*tree 3 .* 2 roots: words 2, 4 \(expected one "
                                          r"root\)"):
        encode(two, "conllu-strict")
