"""Alignments from attention (SPEC §4.6): hard extraction on hand-built tensors, subword -> word merges, and an
end-to-end run of ``xlpe align-from-model`` on a tiny random model (AER equal to corpus_aer of the written file)."""

from __future__ import annotations

import json

import pytest
import torch

from _nmt_toy import tiny_model_config, toy  # noqa: F401  (toy is a fixture)
from xlpe.errors import ConfigError, FormatError
from xlpe.evaluate.aer import corpus_aer
from xlpe.infer.attention_align import GoldFile, align_from_model, hard_alignment, word_attention
from xlpe.io.alignments import Alignment, read_alignments


def _mask(lengths, width):
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


# -- extraction -------------------------------------------------------------------------------------

def test_hard_alignment_excludes_eos_and_pad():
    # sentence 0: 2 source tokens + EOS (col 2) + pad (col 3); 2 target tokens + EOS row (2) + pad row (3)
    # sentence 1: 3 source tokens + EOS (col 3); 3 target tokens + EOS row (3)
    attn = torch.tensor([
        [[0.10, 0.20, 0.70, 0.00],     # max on source EOS -> best real source token 1
         [0.30, 0.20, 0.10, 0.90],     # max on a pad column -> 0
         [0.90, 0.05, 0.05, 0.00],     # EOS row: no link
         [0.00, 0.00, 0.00, 1.00]],    # pad row: no link
        [[0.10, 0.10, 0.20, 0.60],     # EOS column max -> 2
         [0.25, 0.25, 0.10, 0.40],     # tie between 0 and 1 -> the first
         [0.05, 0.80, 0.05, 0.10],
         [0.70, 0.10, 0.10, 0.10]],    # EOS row
    ])
    src_mask, tgt_mask = _mask([2, 3], 4), _mask([2, 3], 4)
    got = hard_alignment(attn, src_mask, tgt_mask)
    assert got == [Alignment.from_links({(1, 0), (0, 1)}), Alignment.from_links({(2, 0), (0, 1), (1, 2)})]
    # per-head input is averaged first: two heads whose mean is `attn`
    heads = torch.stack((attn * 2, torch.zeros_like(attn)), 1)
    assert hard_alignment(heads, src_mask, tgt_mask) == got
    # a sentence with no real source token gives no links; wrong mask polarity / shapes are refused
    assert hard_alignment(attn[:1], _mask([0], 4), _mask([2], 4)) == [Alignment()]
    with pytest.raises(ConfigError, match="bool"):
        hard_alignment(attn, src_mask.long(), tgt_mask)
    with pytest.raises(ConfigError, match="masks must be"):
        hard_alignment(attn, src_mask[:, :3], tgt_mask)


def test_any_rule_through_word_maps():
    # source pieces -> words [0, 0, 1], target pieces -> words [0, 1, 1]; column 3 = EOS, row 3 = EOS
    attn = torch.tensor([[[0.8, 0.1, 0.0, 0.1],
                          [0.0, 0.1, 0.6, 0.3],
                          [0.1, 0.5, 0.2, 0.2],
                          [0.0, 0.0, 0.0, 1.0]]])
    m = _mask([3], 4)
    assert hard_alignment(attn, m, m) == [Alignment.from_links({(0, 0), (2, 1), (1, 2)})]
    words = hard_alignment(attn, m, m, src_word_of=[[0, 0, 1]], tgt_word_of=[[0, 1, 1]])
    assert words == [Alignment.from_links({(0, 0), (1, 1), (0, 1)})]
    with pytest.raises(ConfigError, match="word map of sentence 0 has 2 entries for 3"):
        hard_alignment(attn, m, m, src_word_of=[[0, 1]], tgt_word_of=[[0, 1, 1]])
    with pytest.raises(ConfigError, match="needs the word maps|works on words"):
        hard_alignment(attn, m, m, merge="attn_merge")


def test_attn_merge_sums_source_and_averages_target_subwords():
    # source: word 0 = pieces 0,1; word 1 = piece 2; EOS col 3.  target: word 0 = pieces 0,1; EOS row 2.
    attn = torch.tensor([[[0.25, 0.25, 0.40, 0.10],
                          [0.05, 0.05, 0.30, 0.60],
                          [0.00, 0.00, 0.00, 1.00]]])
    sm, tm = _mask([3], 4), _mask([2], 3)
    sw, tw = [[0, 0, 1]], [[0, 0]]
    W, src_words, tgt_words = word_attention(attn, sm, tm, sw, tw)
    # word 0: (0.5 + 0.1) / 2 = 0.30; word 1: (0.4 + 0.3) / 2 = 0.35 -> attn_merge links target word 0 to 1
    assert torch.allclose(W, torch.tensor([[[0.30, 0.35]]]))
    assert src_words.tolist() == [[True, True]] and tgt_words.tolist() == [[True]]
    assert hard_alignment(attn, sm, tm, src_word_of=sw, tgt_word_of=tw, merge="attn_merge") == \
        [Alignment.from_links({(1, 0)})]
    # summing over a source word's pieces matters: every piece row's argmax is piece 2 (word 1), so the any rule
    # links word 1, while attn_merge gives word 0 0.3 + 0.3 = 0.6 > 0.4
    attn2 = torch.tensor([[[0.30, 0.30, 0.40, 0.00],
                           [0.30, 0.30, 0.40, 0.00],
                           [0.00, 0.00, 0.00, 1.00]]])
    assert hard_alignment(attn2, sm, tm, src_word_of=sw, tgt_word_of=tw) == [Alignment.from_links({(1, 0)})]
    assert hard_alignment(attn2, sm, tm, src_word_of=sw, tgt_word_of=tw, merge="attn_merge") == \
        [Alignment.from_links({(0, 0)})]
    # averaging over a target word's pieces gives one link per target word where the any rule gives one per piece
    attn3 = torch.tensor([[[0.60, 0.00, 0.10, 0.30],
                           [0.00, 0.00, 0.35, 0.65],
                           [0.00, 0.00, 0.00, 1.00]]])
    assert hard_alignment(attn3, sm, tm, src_word_of=sw, tgt_word_of=tw) == [Alignment.from_links({(0, 0), (1, 0)})]
    assert hard_alignment(attn3, sm, tm, src_word_of=sw, tgt_word_of=tw, merge="attn_merge") == \
        [Alignment.from_links({(0, 0)})]                     # word 0: 0.30 > word 1: 0.225
    with pytest.raises(ConfigError, match="unknown merge"):
        hard_alignment(attn, sm, tm, merge="intersect")


# -- a tiny random model ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def checkpoint(toy, tmp_path_factory):
    from xlpe.data.subword import SubwordModel
    from xlpe.nn.transformer import build_model
    from xlpe.nn.checkpoint import save_checkpoint, subword_entry

    sw = SubwordModel.load(toy["spm"])
    torch.manual_seed(0)
    cfg = tiny_model_config(src_vocab_size=len(sw), dec_layers=2, max_len=24)
    model = build_model(cfg)
    path = tmp_path_factory.mktemp("align_model") / "checkpoint_0.pt"
    save_checkpoint(path, {"model": model.state_dict(), "model_config": cfg.to_dict(),
                           "subwords": {"src": subword_entry(sw), "tgt": None}})
    return path


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def _reverse_gold(src_lines):
    """Toy gold: the target is the source reversed, so source word i <-> target word n-1-i."""
    out = []
    for s in src_lines:
        n = len(s.split())
        out.append(Alignment.from_links({(i, n - 1 - i) for i in range(n)}))
    return out


def test_cli_end_to_end_aer_equals_corpus_aer(checkpoint, toy, tmp_path, capsys):
    from xlpe.cli import main

    src, tgt = toy["dev_src"], toy["dev_tgt"]
    src_lines, tgt_lines = _lines(src), _lines(tgt)
    gold = _reverse_gold(src_lines)
    gold_file = tmp_path / "gold.talp"                      # 1-based, sure links, written reversed (tgt-src)
    gold_file.write_text("".join(" ".join(f"{j + 1}-{i + 1}" for i, j in sorted(a.sure)) + "\n" for a in gold))
    out, rep, maps = tmp_path / "out.align", tmp_path / "report.json", tmp_path / "maps"
    assert main(["align-from-model", "--checkpoint", str(checkpoint), "--src", str(src), "--tgt", str(tgt),
                 "--out", str(out), "--gold", str(gold_file), "--gold-base", "1", "--gold-reverse",
                 "--batch-size", "3", "--chunk-size", "5", "--heatmaps", str(maps), "--heatmap-count", "2",
                 "--report", str(rep), "--device", "cpu", "--threads", "1"]) == 0
    hyp = list(read_alignments(out, 0, check_base=False))
    assert len(hyp) == len(src_lines) == len(_lines(out))
    for a, s, t in zip(hyp, src_lines, tgt_lines):
        n, m = len(s.split()), len(t.split())
        assert {j for _, j in a.links} == set(range(m))    # the any rule links every target word
        assert all(0 <= i < n for i, _ in a.links)
    expect = corpus_aer(hyp, gold)
    report = json.loads(rep.read_text())
    assert report["aer"]["aer"] == pytest.approx(expect.aer) and report["sentences"] == len(src_lines)
    assert report["aer"]["precision"] == pytest.approx(expect.precision)
    assert report["aer"]["recall"] == pytest.approx(expect.recall)
    assert f"AER {100 * expect.aer:.2f}" in capsys.readouterr().out
    assert sorted(p.name for p in maps.iterdir()) == ["attn_0001.png", "attn_0002.png"]
    assert (maps / "attn_0001.png").read_bytes()[:4] == b"\x89PNG"

    # the Python API gives the same alignments whatever the batching; attn_merge + subword heat maps also run
    assert align_from_model(checkpoint, src_lines, tgt_lines, batch_size=1, device="cpu") == hyp
    out2 = tmp_path / "out2.align"
    assert main(["align-from-model", "--checkpoint", str(checkpoint), str(checkpoint), "--src", str(src),
                 "--tgt", str(tgt), "--out", str(out2), "--merge", "attn_merge", "--layer", "-1",
                 "--heatmaps", str(maps), "--heatmap-count", "1", "--heatmap-level", "subword"]) == 0
    assert len(_lines(out2)) == len(src_lines)


def test_bad_inputs_name_file_and_line(checkpoint, tmp_path, capsys):
    from xlpe.cli import main

    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("w1 w2\nw3\nw4 w5\n")
    tgt.write_text("v2 v1\nv3\n")
    with pytest.raises(FormatError, match=r"src\.txt:3: .*tgt\.txt has 2 lines"):
        align_from_model(checkpoint, _lines(src), _lines(tgt), src_name=str(src), tgt_name=str(tgt))
    out = tmp_path / "o.align"
    assert main(["align-from-model", "--checkpoint", str(checkpoint), "--src", str(src), "--tgt", str(tgt),
                 "--out", str(out), "--chunk-size", "2"]) == 1
    assert "src.txt:3" in capsys.readouterr().err and not out.exists()

    tgt.write_text("v2 v1\n\nv5 v4\n")
    with pytest.raises(FormatError, match=r"tgt\.txt:2: empty target sentence"):
        align_from_model(checkpoint, _lines(src), _lines(tgt), src_name=str(src), tgt_name=str(tgt))
    tgt.write_text("v2 v1\nv3\n" + " ".join(["v1"] * 30) + "\n")          # 60 subwords > max_len 24
    with pytest.raises(FormatError, match=r"tgt\.txt:3: .*limit 24"):
        from xlpe.infer.attention_align import align_from_model_files
        align_from_model_files(checkpoint, src, tgt, out, chunk_size=2)
    assert not out.exists()
    tgt.write_text("v2 v1\nv3\nv5 v4\n")
    with pytest.raises(ConfigError, match="gold_base"):
        align_from_model_files(checkpoint, src, tgt, out, gold=GoldFile(tgt, None))
    with pytest.raises(ConfigError, match="layer=-3 but the model has 2 decoder"):
        align_from_model(checkpoint, _lines(src), _lines(tgt), layer=-3)
    gold = tmp_path / "gold.talp"
    gold.write_text("1-2 2-1\n1-1\n1-3\n")                              # line 3: target index 3 > 2 words
    with pytest.raises(FormatError, match=r"gold\.talp:3"):
        align_from_model_files(checkpoint, src, tgt, out, gold=GoldFile(gold, 1))


def test_xl_model_reads_orders_and_errors_name_the_order_file(toy, tmp_path):
    from xlpe.data.subword import SubwordModel
    from xlpe.infer.attention_align import align_from_model_files
    from xlpe.nn.transformer import build_model
    from xlpe.nn.checkpoint import save_checkpoint, subword_entry

    sw = SubwordModel.load(toy["spm"])
    torch.manual_seed(1)
    cfg = tiny_model_config(src_vocab_size=len(sw), dec_layers=2, pe=["xl"])
    ck = tmp_path / "xl.pt"
    save_checkpoint(ck, {"model": build_model(cfg).state_dict(), "model_config": cfg.to_dict(),
                         "subwords": {"src": subword_entry(sw), "tgt": None}})
    src, tgt = toy["dev_src"], toy["dev_tgt"]
    src_lines = _lines(src)
    out = tmp_path / "o.align"
    with pytest.raises(ConfigError, match=r"channel\(s\) \['xl'\]"):
        align_from_model_files(ck, src, tgt, out)
    # identity orders at word level and at subword level give pos_XL = 0..n-1 either way: same alignments
    words = tmp_path / "id.order"
    words.write_text("".join(" ".join(map(str, range(len(s.split())))) + "\n" for s in src_lines))
    pieces = tmp_path / "id.sworder"
    pieces.write_text("".join(" ".join(map(str, range(len(sw.encode(s).ids)))) + "\n" for s in src_lines))
    assert align_from_model_files(ck, src, tgt, out, sources=[f"orders:{words}"], chunk_size=5)["sentences"] == len(
        src_lines)
    by_words = _lines(out)
    align_from_model_files(ck, src, tgt, out, sources=[f"subword-orders:{pieces}"], chunk_size=5)
    assert _lines(out) == by_words
    short = tmp_path / "short.order"
    short.write_text("".join(words.read_text().splitlines(keepends=True)[:7]))
    with pytest.raises(FormatError, match=r"short\.order:8"):
        align_from_model_files(ck, src, tgt, tmp_path / "o2.align", sources=[f"orders:{short}"], chunk_size=5)
    assert not (tmp_path / "o2.align").exists()
