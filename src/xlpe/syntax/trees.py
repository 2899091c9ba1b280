"""Structural positions from dependency trees (Wang, Tu, Wang, Shi 2019; SPEC §3.2-§3.3).

Heads are word-level and 1-based as in CoNLL-U (0 = root). Two forms of every computation:

* numpy, per sentence, the reference: :func:`depths` (edges from the root; several roots each at depth 0),
  :func:`relative_positions` (the full ``(n+1)×(n+1)`` matrix over subword tokens and EOS), and
  :func:`side_by_side` (whether several roots are the trees of consecutive sentences);
* torch, for a padded batch on the device: :func:`tree_relative` from three integers per token (depth, word,
  head word) — what the ``depth``, ``tree_word`` and ``tree_head`` channels carry (:func:`word_channels`), so
  a batch never holds a T×T matrix per sentence.

Relative rule (SPEC §3.3, signs ``[I]``): with ``i`` the query and ``j`` the key, ``abs(x_j) − abs(x_i)`` if one
word is the other's head (same dependency edge), else ``f(i, j)·(abs(x_i) + abs(x_j))`` with ``f = +1`` if
``i < j``, ``−1`` if ``i > j``; 0 for a token with itself and for two pieces of one word. EOS is on no edge and
has depth ``max + 1`` (SPEC §3.2). ``sign='query_minus_key'`` flips both rules. The depth sum is kept as
specified even where it is not a tree distance (SPEC §3.3 "do not fix").
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from xlpe.errors import ConfigError

SIGNS = ("key_minus_query", "query_minus_key")


def depths(heads: Sequence[int]) -> np.ndarray:
    """Depth of every word (``heads`` 1-based, 0 = root): pointer jumping, ``O(n log n)`` without a Python
    loop over words. The heads must form a forest (``xlpe.io.conllu.validate_heads``)."""
    parent = np.asarray(heads, dtype=np.int64) - 1               # -1 = root
    n = len(parent)
    depth = (parent >= 0).astype(np.int64)
    up = parent.copy()
    for _ in range(max(1, int(np.ceil(np.log2(n + 1)))) + 1):
        has = up >= 0
        if not has.any():
            break
        idx = np.where(has, up, 0)
        depth = depth + np.where(has, depth[idx], 0)
        up = np.where(has, up[idx], -1)
    return depth


def roots_of(heads: Sequence[int]) -> np.ndarray:
    """The root (0-based word id) of the tree of every word (``heads`` 1-based, 0 = root; a forest), by pointer
    jumping as :func:`depths`."""
    up = np.asarray(heads, dtype=np.int64) - 1
    up = np.where(up >= 0, up, np.arange(len(up)))                # a root points at itself
    for _ in range(max(1, int(np.ceil(np.log2(len(up) + 1)))) + 1):
        nxt = up[up]
        if np.array_equal(nxt, up):
            break
        up = nxt
    return up


def side_by_side(heads: Sequence[int]) -> bool:
    """Whether the trees of a forest cover consecutive spans of words, one after the other: the trees of the
    sentences that a parser found in one line (SPEC §3.2: each root at depth 0), as opposed to roots whose
    subtrees interleave."""
    r = roots_of(heads)
    return int(np.count_nonzero(np.diff(r))) + 1 == len(np.unique(r)) if len(r) else True


def word_channels(heads: Sequence[int]) -> dict[str, list[int]]:
    """The per-word values of the ``depth``, ``tree_word`` and ``tree_head`` channels of one sentence (0-based
    word ids; a root's head is -1). Expansion to subwords and EOS follows the channel records."""
    h = np.asarray(heads, dtype=np.int64)
    return {"depth": depths(heads).tolist(), "tree_word": list(range(len(h))), "tree_head": (h - 1).tolist()}


def relative_positions(heads: Sequence[int], word_of: Sequence[int] | None = None,
                       sign: str = "key_minus_query", k: int | None = None) -> np.ndarray:
    """The structural relative position of every token pair, EOS included, ``(T+1, T+1)`` with ``T`` the number
    of tokens (``word_of``: the word of each subword; None = one token per word), clipped to ``±k`` if given."""
    if sign not in SIGNS:
        raise ConfigError(f"sign must be one of {', '.join(SIGNS)}, not {sign!r}")
    d = depths(heads)
    n = len(d)
    wo = np.arange(n) if word_of is None else np.asarray(word_of, dtype=np.int64)
    T = len(wo)
    word = np.append(wo, n)                                     # EOS: a word of its own
    dep = np.append(d[wo], d.max() + 1 if n else 0)
    head = np.append(np.asarray(heads, dtype=np.int64)[wo] - 1, -1)
    i, j = np.meshgrid(np.arange(T + 1), np.arange(T + 1), indexing="ij")
    edge = ((head[i] == word[j]) & (head[i] >= 0)) | ((head[j] == word[i]) & (head[j] >= 0))
    rel = np.where(edge, dep[j] - dep[i], np.sign(j - i) * (dep[i] + dep[j]))
    rel = np.where(word[i] == word[j], 0, rel)
    if sign == "query_minus_key":
        rel = -rel
    return rel if k is None else np.clip(rel, -k, k)


def tree_relative(depth: Tensor, word: Tensor, head: Tensor, pad_mask: Tensor, k: int | None = 16,
                  sign: str = "key_minus_query") -> Tensor:
    """:func:`relative_positions` for a padded batch, from ``(B, T)`` channels: ``depth``, ``word`` (the word id of
    each token, EOS its own) and ``head`` (the head's word id, -1 for roots and EOS); ``pad_mask`` True = pad.
    Returns ``(B, T, T)`` long, clipped to ``±k`` (``k=None``: unclipped); pad rows and columns are 0."""
    if sign not in SIGNS:
        raise ConfigError(f"sign must be one of {', '.join(SIGNS)}, not {sign!r}")
    real = ~pad_mask
    wi, wj = word[:, :, None], word[:, None, :]
    hi, hj = head[:, :, None], head[:, None, :]
    di, dj = depth[:, :, None], depth[:, None, :]
    edge = ((hi == wj) & (hi >= 0)) | ((hj == wi) & (hj >= 0))
    pos = torch.arange(word.shape[1], device=word.device)
    f = torch.sign(pos[None, :] - pos[:, None])
    rel = torch.where(edge, dj - di, f * (di + dj))
    rel = torch.where(wi == wj, torch.zeros_like(rel), rel)
    rel = rel.masked_fill(~(real[:, :, None] & real[:, None, :]), 0)
    if sign == "query_minus_key":
        rel = -rel
    return rel if k is None else rel.clamp(-k, k)
