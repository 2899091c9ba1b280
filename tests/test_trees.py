"""Structural positions from dependency trees (SPEC §3.2-3.3, §12 example 4), numpy reference and batched torch."""

import numpy as np
import pytest
import torch

from xlpe.errors import ConfigError, FormatError
from xlpe.syntax.trees import depths, relative_positions, tree_relative, word_channels

# "Bush held a talk with Sharon": Bush->held, held=root, a->talk, talk->held, with->talk, Sharon->with
HEADS = [2, 0, 4, 2, 4, 5]


def test_spec_example_4():
    assert depths(HEADS).tolist() == [1, 0, 2, 1, 2, 3]
    rel = relative_positions(HEADS)
    talk = 3
    assert rel.shape == (7, 7)
    assert rel[talk].tolist() == [-2, -1, 1, 0, 1, 4, 5]       # Bush, held, a, itself, with, Sharon, EOS
    assert relative_positions(HEADS, sign="query_minus_key")[talk].tolist() == [2, 1, -1, 0, -1, -4, -5]


def test_several_roots_each_at_depth_zero_and_eos_below_the_deepest():
    heads = [0, 1, 0, 3, 4]
    assert depths(heads).tolist() == [0, 1, 0, 1, 2]
    rel = relative_positions(heads)
    assert rel[0, 2] == 0 + 0 and rel[0, 5] == 0 + 3            # two roots: rule 2; EOS depth max+1 = 3


def test_subwords_share_their_word_and_same_word_pairs_are_zero():
    word_of = [0, 1, 1, 2, 3, 3, 3, 4, 5]                       # held and talk/Sharon split in pieces
    rel = relative_positions(HEADS, word_of)
    assert rel.shape == (10, 10)
    assert rel[1, 2] == 0 and rel[4, 6] == 0                     # pieces of one word
    word = relative_positions(HEADS)
    for a in range(9):
        for b in range(9):
            if word_of[a] != word_of[b]:
                assert rel[a, b] == word[word_of[a], word_of[b]]
    assert (rel[:9, 9] == word[np.asarray(word_of), 6]).all()  # EOS column


def test_clipping():
    assert relative_positions(HEADS, k=2)[3].tolist() == [-2, -1, 1, 0, 1, 2, 2]


def _batch_inputs(trees, word_ofs):
    """The per-token channels of a padded batch, as the batcher builds them (EOS appended)."""
    from xlpe.data.channels import expand_channel
    T = max(len(w) for w in word_ofs) + 1
    B = len(trees)
    out = {c: torch.full((B, T), -1 if c != "depth" else 0, dtype=torch.long) for c in ("depth", "tree_word",
                                                                                       "tree_head")}
    pad = torch.ones(B, T, dtype=torch.bool)
    for b, (heads, wo) in enumerate(zip(trees, word_ofs)):
        ch = word_channels(heads)
        for c in out:
            v = expand_channel(c, ch[c], wo, len(wo))
            out[c][b, :len(v)] = torch.as_tensor(v)
        pad[b, :len(wo) + 1] = False
    return out, pad


def test_batched_torch_form_equals_the_reference_on_random_trees():
    rng = np.random.default_rng(0)
    for _ in range(20):
        trees, word_ofs = [], []
        for _ in range(4):
            n = int(rng.integers(1, 9))
            heads = [0] + [int(rng.integers(1, k + 1)) for k in range(1, n)]   # parent among earlier words
            perm = rng.permutation(n)                                          # then shuffle word order
            inv = np.argsort(perm)
            heads = [0 if heads[perm[w]] == 0 else int(inv[heads[perm[w]] - 1]) + 1 for w in range(n)]
            pieces = rng.integers(1, 3, n)
            trees.append(heads)
            word_ofs.append([w for w in range(n) for _ in range(pieces[w])])
        ch, pad = _batch_inputs(trees, word_ofs)
        for sign in ("key_minus_query", "query_minus_key"):
            got = tree_relative(ch["depth"], ch["tree_word"], ch["tree_head"], pad, k=3, sign=sign)
            for b, (heads, wo) in enumerate(zip(trees, word_ofs)):
                ref = relative_positions(heads, wo, sign=sign, k=3)
                L = len(wo) + 1
                assert got[b, :L, :L].tolist() == ref.tolist()
                assert (got[b, L:] == 0).all() and (got[b, :, L:] == 0).all()


def test_bad_sign_and_trees_files(tmp_path):
    with pytest.raises(ConfigError, match="sign"):
        relative_positions(HEADS, sign="sideways")
    from xlpe.io.conllu import read_conllu
    row = "{i}\tw{i}\t_\tX\t_\t_\t{h}\tdep\t_\t_"
    cases = {"range": [(1, 0), (2, 7)], "cycle": [(1, 2), (2, 1)], "self": [(1, 1)]}
    for name, words in cases.items():
        f = tmp_path / f"{name}.conllu"
        f.write_text("\n".join(row.format(i=i, h=h) for i, h in words) + "\n\n")
        with pytest.raises(FormatError, match=rf"{name}\.conllu:1"):
            list(read_conllu(f))
    merged = tmp_path / "merged.conllu"          # two sentences without the blank line between them
    merged.write_text("\n".join([row.format(i=1, h=0), row.format(i=2, h=1), row.format(i=1, h=0)]) + "\n\n")
    with pytest.raises(FormatError, match=r"merged\.conllu:1: .*out of sequence"):
        list(read_conllu(merged))
