"""Batching: compact dataset, token-budget sampler (budget, coverage, determinism, resumption, sharding),
collation with channels, channel expansion, input errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from _nmt_toy import toy  # noqa: F401  (fixture)
from xlpe.data.batching import Batch, ParallelData, TokenBatchSampler, collate
from xlpe.data.channels import expand_channel, file_source
from xlpe.data.subword import BOS_ID, EOS_ID, PAD_ID, SubwordModel
from xlpe.errors import ConfigError, FormatError


def _lengths(n=500, seed=0):
    return np.random.default_rng(seed).integers(1, 60, size=n)


# -- sampler ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("bucket", [True, False])
@pytest.mark.parametrize("max_sentences", [None, 7])
def test_budget_respected_and_every_index_once(bucket, max_sentences):
    lengths = _lengths()
    s = TokenBatchSampler(lengths, 200, max_sentences=max_sentences, seed=5, bucket=bucket)
    for epoch in range(3):
        s.set_epoch(epoch)
        seen = []
        for b in s:
            assert len(b) * lengths[b].max() <= 200          # padding included
            if max_sentences:
                assert len(b) <= max_sentences
            seen += b
        assert sorted(seen) == list(range(len(lengths)))      # each index exactly once per epoch


@pytest.mark.parametrize("bucket", [True, False])
def test_batch_multiple_rounds_full_batches_like_fairseq(bucket):
    """``batch_multiple=8``: a batch cut because it was full holds a multiple of 8 sentences (or fewer than 8),
    the rest starting the next batch; the budget and the coverage still hold, and there are more batches."""
    lengths = np.random.default_rng(1).integers(1, 30, size=3000)
    plain = TokenBatchSampler(lengths, 400, seed=2, bucket=bucket, shuffle=False)
    s = TokenBatchSampler(lengths, 400, seed=2, bucket=bucket, shuffle=False, batch_multiple=8)
    batches = s.batches()
    for b in batches:
        assert len(b) * lengths[b].max() <= 400
    if bucket:   # sorted lengths: every batch but the last was cut when full
        assert all(len(b) % 8 == 0 or len(b) < 8 for b in batches[:-1])
        assert sum(len(b) % 8 != 0 for b in batches[:-1]) <= 2
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    assert len(batches) > len(plain.batches())
    assert TokenBatchSampler(lengths, 400, bucket=bucket, batch_multiple=1, shuffle=False).batches() == plain.batches()
    with pytest.raises(ConfigError, match="batch_multiple"):
        TokenBatchSampler(lengths, 400, batch_multiple=0)
    with pytest.raises(ConfigError, match="batch_multiple=8, now 1"):
        plain.load_state_dict(s.state_dict())


def test_bucketing_reduces_padding():
    lengths = _lengths(2000)

    def pad(bucket):
        s = TokenBatchSampler(lengths, 400, seed=1, bucket=bucket)
        return sum(len(b) * lengths[b].max() - lengths[b].sum() for b in s)
    assert pad(True) < 0.2 * pad(False)


def test_length_ties_halve_the_padding_of_each_side():
    """``ties`` (source, then target length) orders the sentences of one padded cost, so each side of a batch
    pads less; the batches keep their budget, cover every example once, stay a function of (seed, epoch) and
    still change from epoch to epoch."""
    rng = np.random.default_rng(3)
    src = rng.integers(2, 40, size=4000)
    tgt = np.clip(src + rng.integers(-8, 9, size=4000), 1, None)
    cost = np.maximum(src, tgt + 1)

    def pads(sampler, epoch=0):
        b = sampler.batches(epoch)
        assert sorted(i for x in b for i in x) == list(range(len(cost)))
        assert all(len(x) * cost[x].max() <= 600 for x in b)
        return [sum(len(x) * side[x].max() - side[x].sum() for x in b) for side in (src, tgt)]
    plain = TokenBatchSampler(cost, 600, seed=1)
    tied = TokenBatchSampler(cost, 600, seed=1, ties=(src, tgt))
    (ps, pt), (ts, tt) = pads(plain), pads(tied)
    assert ts < 0.6 * ps and tt < pt
    assert tied.batches(0) == TokenBatchSampler(cost, 600, seed=1, ties=(src, tgt)).batches(0)
    assert tied.batches(0) != tied.batches(1) and len(tied.batches(0)) == len(plain.batches(0))
    assert TokenBatchSampler(cost, 600, seed=1, ties=()).batches(0) == plain.batches(0)     # no keys: as before
    with pytest.raises(ConfigError, match="one value per example"):
        TokenBatchSampler(cost, 600, ties=(src[:10],))


def test_deterministic_by_seed_and_epoch():
    lengths = _lengths()
    a = TokenBatchSampler(lengths, 200, seed=5)
    b = TokenBatchSampler(lengths, 200, seed=5)
    assert a.batches(0) == b.batches(0) and a.batches(3) == b.batches(3)
    assert a.batches(0) != a.batches(1)                                      # reshuffled every epoch
    assert a.batches(0) != TokenBatchSampler(lengths, 200, seed=6).batches(0)
    c = TokenBatchSampler(lengths, 200, shuffle=False)
    assert c.batches(0) == c.batches(1)


def test_resumable():
    lengths = _lengths()
    s = TokenBatchSampler(lengths, 200, seed=2)
    s.set_epoch(4)
    it = iter(s)
    first = [next(it) for _ in range(5)]
    state = s.state_dict()
    assert state["epoch"] == 4 and state["position"] == 5
    rest = list(it)
    r = TokenBatchSampler(lengths, 200, seed=2)
    r.load_state_dict(state)
    assert list(r) == rest
    assert first + rest == s.batches(4)
    with pytest.raises(ConfigError, match="seed"):
        TokenBatchSampler(lengths, 200, seed=3).load_state_dict(state)


def test_sharding_across_ranks():
    lengths = _lengths(101)
    full = TokenBatchSampler(lengths, 150, seed=1).batches(0)
    ranks = [TokenBatchSampler(lengths, 150, seed=1, num_replicas=3, rank=r).batches(0) for r in range(3)]
    assert len({len(b) for b in ranks}) == 1                      # same number of steps everywhere
    flat = sorted(i for b in ranks for batch in b for i in batch)
    assert set(flat) == set(range(101))
    assert len(ranks[0]) == -(-len(full) // 3)


def test_sampler_errors():
    with pytest.raises(ConfigError, match="max_tokens"):
        TokenBatchSampler([5, 300], 200)
    with pytest.raises(ConfigError):
        TokenBatchSampler([], 200)


# -- collation ---------------------------------------------------------------------------------------------

def test_collate_pads_and_shifts():
    data = ParallelData.from_ids([[10, 11, 12], [20]], [[30, 31], [40, 41, 42]],
                                 channels={"dpe_target": [[2, 0, 1], [0]], "depth": [[1, 0, 1], [0]]})
    b = collate([data[0], data[1]])
    assert isinstance(b, Batch)
    assert b.src.tolist() == [[10, 11, 12, EOS_ID], [20, EOS_ID, PAD_ID, PAD_ID]]
    assert b.tgt_in.tolist() == [[BOS_ID, 30, 31, PAD_ID], [BOS_ID, 40, 41, 42]]
    assert b.tgt_out.tolist() == [[30, 31, EOS_ID, PAD_ID], [40, 41, 42, EOS_ID]]
    assert b.ntokens == 3 + 4 and b.indices == [0, 1]
    assert b.channels["seq"].tolist() == [[0, 1, 2, 3], [0, 1, 0, 0]]
    assert b.channels["dpe_target"].tolist() == [[2, 0, 1, -1], [0, -1, -1, -1]]   # EOS and pads: -1
    assert b.channels["depth"].tolist() == [[1, 0, 1, 2], [0, 1, 0, 0]]            # EOS: max + 1
    assert all(t.dtype == torch.long for t in [b.src, b.tgt_in, b.tgt_out, *b.channels.values()])


def test_collate_pair_channel():
    rel = lambda n, v: np.full((n, n), v).tolist()   # noqa: E731
    data = ParallelData.from_ids([[5, 6], [7]], None, channels={"tree_rel": [rel(3, 4), rel(2, -3)]})
    b = collate([data[0], data[1]])
    assert b.tgt_in is None and b.ntokens == 0
    t = b.channels["tree_rel"]
    assert t.shape == (2, 3, 3)
    assert t[1].tolist() == [[-3, -3, 0], [-3, -3, 0], [0, 0, 0]]


# -- channel expansion (SPEC §3.2, §3.3, §4.1) ---------------------------------------------------------------

def test_expand_xl_word_to_subword():
    # words a b c d with lader order [2,3,1,0] -> pos_XL [3,2,0,1] (SPEC §12.3); word 1 has two pieces
    word_of = [0, 1, 1, 2, 3]
    out = expand_channel("xl", [3, 2, 0, 1], word_of, 5)
    # reordered pieces: c(3) d(4) b(1,2) a(0)  ->  positions a:4 b:2,3 c:0 d:1, EOS keeps index 5
    assert out.tolist() == [4, 2, 3, 0, 1, 5]
    ident = expand_channel("xl", [0, 1, 2, 3], word_of, 5)
    assert ident.tolist() == list(range(6))                 # the identity reproduces APE indices


def test_expand_depth_and_tree_rel():
    word_of = [0, 0, 1]
    assert expand_channel("depth", [1, 0], word_of, 3).tolist() == [1, 1, 0, 2]
    assert expand_channel("depth", [1, 0, 7], word_of, 3).tolist() == [1, 1, 0, 7]   # explicit EOS value
    word_rel = [[0, -1, 2], [1, 0, 3], [-2, -3, 0]]                                 # 2 words + EOS
    sub = expand_channel("tree_rel", word_rel, word_of, 3).reshape(4, 4)
    assert sub[0, 1] == 0 and sub[1, 0] == 0          # pieces of one word: 0
    assert sub[0, 2] == -1 and sub[2, 1] == 1 and sub[3, 0] == -2 and sub[1, 3] == 2
    with pytest.raises(ConfigError, match="EOS"):
        expand_channel("tree_rel", [[0, 1], [1, 0]], word_of, 3)
    with pytest.raises(ConfigError, match="subword"):
        expand_channel("dpe_target", [0, 1], word_of, 3)
    assert expand_channel("dpe_target", {2: 0, 0: 1}, None, 3).tolist() == [1, -1, 0, -1]


# -- the dataset -------------------------------------------------------------------------------------------

def test_from_files_compact_and_consistent(toy):
    sw = SubwordModel.load(toy["spm"])
    d = ParallelData.from_files(toy["src"], toy["tgt"], sw, max_src_len=64, max_tgt_len=64)
    assert len(d) == 120 and d.skipped == 0
    assert d._src.flat.dtype == np.int32
    src_lines = toy["src"].read_text().splitlines()
    ex = d[7]
    assert ex.src[-1] == EOS_ID and sw.decode_ids(ex.src) == src_lines[7]
    assert sw.decode_ids(ex.tgt) == toy["tgt"].read_text().splitlines()[7]
    assert (d.num_tokens == np.maximum(d.src_lengths, d.tgt_lengths + 1)).all()


def test_npz_roundtrip(toy, tmp_path):
    sw = SubwordModel.load(toy["spm"])
    d = ParallelData.from_files(toy["src"], toy["tgt"], sw, channels={"depth": ([0] * len(l.split()) for l in
                                                                                toy["src"].read_text().splitlines())})
    d.save(tmp_path / "c.npz")
    e = ParallelData.load(tmp_path / "c.npz")
    for i in (0, 50, 119):
        assert (d[i].src == e[i].src).all() and (d[i].tgt == e[i].tgt).all()
        assert (d[i].channels["depth"] == e[i].channels["depth"]).all()


def test_long_line_error_and_skip(toy, tmp_path):
    sw = SubwordModel.load(toy["spm"])
    lines = toy["src"].read_text().splitlines()
    lines[4] = " ".join(["w1"] * 40)               # 80 subwords + EOS
    src = tmp_path / "s.txt"
    src.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError) as e:
        ParallelData.from_files(src, toy["tgt"], sw, max_src_len=64, max_tgt_len=64)
    assert f"{src}:5:" in str(e.value) and "limit 64" in str(e.value)
    d = ParallelData.from_files(src, toy["tgt"], sw, max_src_len=64, max_tgt_len=64, skip_long=True)
    assert len(d) == 119 and d.skipped == 1 and 5 not in d.line_numbers.tolist()


def test_input_errors(toy, tmp_path):
    sw = SubwordModel.load(toy["spm"])
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(FormatError, match="empty"):
        ParallelData.from_files(empty, empty, sw)
    short = tmp_path / "short.txt"
    short.write_text("w1 w2\n")
    with pytest.raises(FormatError, match="lines"):
        ParallelData.from_files(short, toy["tgt"], sw)
    blank = tmp_path / "blank.txt"
    blank.write_text("w1\n\nw2\n")
    with pytest.raises(FormatError, match=f"{blank}:2: empty source"):
        ParallelData.from_files(blank, blank, sw)


def test_channel_files(toy, tmp_path):
    sw = SubwordModel.load(toy["spm"])
    n_words = [len(l.split()) for l in toy["src"].read_text().splitlines()]
    orders = tmp_path / "orders.txt"
    orders.write_text("".join(" ".join(str(k) for k in reversed(range(n))) + "\n" for n in n_words))
    d = ParallelData.from_files(toy["src"], toy["tgt"], sw, channels={"xl": file_source("orders", orders)})
    ex = d[0]
    n = len(ex.src) - 1
    assert sorted(ex.channels["xl"][:-1].tolist()) == list(range(n)) and ex.channels["xl"][-1] == n
    bad = tmp_path / "bad_orders.txt"
    bad.write_text("0 0\n")
    with pytest.raises(FormatError, match="bad_orders.txt:1"):
        ParallelData.from_files(toy["src"], toy["tgt"], sw, channels={"xl": file_source("orders", bad)})
