"""A vocabulary shortlist per batch (Marian's lexical shortlist): decoding scores a subset of the target pieces.

The table is built once from the training pairs (:func:`build_shortlist`) and stored beside the model
(:meth:`Shortlist.save`, :func:`load_shortlist`). For every source piece ``s`` it lists the ``per_source`` target
pieces ``t`` most likely to appear with it, ranked by ``c(s, t) / c(s)``: ``c(s, t)`` counts the training pairs
whose source holds ``s`` and whose target holds ``t`` (each piece once per sentence), ``c(s)`` those whose source
holds ``s``; pairs seen fewer than ``min_count`` times are left out, and so are the ``frequent`` most frequent
target pieces, which every batch gets anyway. A batch's shortlist (:meth:`Shortlist.batch`) is the union of its
source pieces' lists, the frequent pieces and EOS; PAD and BOS are never in it (they are never generated).

Decoding with a shortlist (``shortlist=`` of :func:`xlpe.infer.beam.beam_search` and
:func:`~xlpe.infer.beam.greedy`) projects the decoder's output onto those rows of the output layer only, and the
softmax normalises over them: an approximation, off by default. Without it decoding is unchanged (the same code
path). ``benchmarks/shortlist_coverage.py`` measures how much of the references a table keeps,
``benchmarks/bench_ctranslate2.py --shortlist`` its speed and BLEU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch
from torch import Tensor

from xlpe.errors import ConfigError, FormatError
from xlpe.io.atomic import atomic_write
from xlpe.io.process import stop_signals_deferred
from xlpe.io.text import read_lines

#: defaults of :func:`build_shortlist`: candidates per source piece, most frequent target pieces always kept
PER_SOURCE, FREQUENT = 50, 200


@dataclass
class BatchVocab:
    """The target pieces one batch may produce: ``ids`` (sorted), the matching rows of the output projection
    ``weight (len(ids), d)``, and the column of EOS among them."""

    ids: Tensor
    weight: Tensor
    eos_col: int


@dataclass
class Shortlist:
    """``table (src_vocab, per_source)``: each source piece's target candidates (-1 = none); ``frequent``: the
    target pieces every batch keeps; ``tgt_vocab``: the size of the target vocabulary the ids index."""

    table: Tensor
    frequent: Tensor
    tgt_vocab: int

    def batch(self, src: Tensor, output_weight: Tensor, specials: tuple[int, int, int]) -> BatchVocab:
        """The shortlist of a source batch ``(B, S)`` (PAD rows of the table are empty) with the rows of
        ``output_weight (V, d)``; ``specials``: the ``(pad, bos, eos)`` ids."""
        pad, bos, eos = specials
        if output_weight.shape[0] != self.tgt_vocab or int(src.max()) >= self.table.shape[0]:
            raise ConfigError(f"the shortlist is for a source vocabulary of {self.table.shape[0]} and a target "
                              f"vocabulary of {self.tgt_vocab} pieces; the model has "
                              f"{output_weight.shape[0]} target pieces (or the source holds larger ids)")
        table = self.table.to(src.device)
        cand = torch.cat((table[src.flatten()].flatten(), self.frequent.to(src.device),
                          torch.tensor([eos], device=src.device)))
        seen = torch.zeros(self.tgt_vocab, dtype=torch.bool, device=src.device)
        seen[cand[cand >= 0]] = True
        seen[pad] = False
        seen[bos] = bos == eos
        ids = seen.nonzero().squeeze(1)
        eos_col = int(torch.searchsorted(ids, torch.tensor(eos, device=ids.device)))
        return BatchVocab(ids, output_weight.index_select(0, ids), eos_col)

    def save(self, path) -> None:
        """Write the table to a path or a binary file: a plain dict of tensors, which
        ``torch.load(path, weights_only=True)`` reads."""
        torch.save({"format": "xlpe-shortlist-1", "table": self.table, "frequent": self.frequent,
                    "tgt_vocab": self.tgt_vocab}, path)


def load_shortlist(path: str | os.PathLike) -> Shortlist:
    """A table written by :meth:`Shortlist.save`; a :class:`FormatError` for anything else."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no shortlist table at {os.fspath(path)}")
    try:
        d = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:   # torch raises several types for a file that is not a saved dict of tensors
        raise FormatError(f"not a shortlist table ({type(e).__name__})", os.fspath(path),
                          expected="a file written by xlpe translate --shortlist-build") from None
    if not isinstance(d, dict) or d.get("format") != "xlpe-shortlist-1":
        raise FormatError("not a shortlist table", os.fspath(path),
                          expected="a file written by xlpe translate --shortlist-build")
    return Shortlist(d["table"].long(), d["frequent"].long(), int(d["tgt_vocab"]))


def build_shortlist(pairs: Iterable[tuple[Sequence[int], Sequence[int]]], src_vocab: int, tgt_vocab: int, *,
                    per_source: int = PER_SOURCE, frequent: int = FREQUENT, min_count: int = 1,
                    exclude: Sequence[int] = ()) -> Shortlist:
    """The table of the module docstring from ``pairs`` of (source ids, target ids) of the training data.
    ``exclude``: target ids never listed (PAD, BOS); ties in rank go to the smaller target id."""
    if per_source < 0 or frequent < 0 or min_count < 1:
        raise ConfigError(f"shortlist sizes must be >= 0 and min_count >= 1 (got per_source={per_source}, "
                          f"frequent={frequent}, min_count={min_count})")
    keys, t_count = [], np.zeros(tgt_vocab, dtype=np.int64)
    s_count = np.zeros(src_vocab, dtype=np.int64)
    for s_ids, t_ids in pairs:
        s, t = np.unique(np.asarray(s_ids, dtype=np.int64)), np.unique(np.asarray(t_ids, dtype=np.int64))
        s_count[s] += 1
        t_count[t] += 1
        keys.append((s[:, None] * tgt_vocab + t[None, :]).ravel())
    t_count[list(exclude)] = -1
    top = np.argsort(-t_count, kind="stable")[:frequent]
    top = top[t_count[top] > 0]
    pair, count = np.unique(np.concatenate(keys) if keys else np.zeros(0, np.int64), return_counts=True)
    s, t = pair // tgt_vocab, pair % tgt_vocab
    keep = (count >= min_count) & (t_count[t] > 0)
    keep[keep] = ~np.isin(t[keep], top)
    s, t, count = s[keep], t[keep], count[keep]
    score = count / s_count[s]
    order = np.lexsort((t, -score, s))                 # by source, best first, smaller id on ties
    s, t = s[order], t[order]
    first = np.searchsorted(s, s, side="left")
    rank = np.arange(len(s)) - first
    sel = rank < per_source
    table = np.full((src_vocab, per_source), -1, dtype=np.int64)
    table[s[sel], rank[sel]] = t[sel]
    return Shortlist(torch.from_numpy(table), torch.from_numpy(np.sort(top)), tgt_vocab)


def shortlist_from_text(src_lines: Iterable[str], tgt_lines: Iterable[str], src_subword, tgt_subword,
                        src_vocab: int, tgt_vocab: int, exclude: Sequence[int], **kw) -> Shortlist:
    """:func:`build_shortlist` from pre-tokenised training text (the two sides' lines in parallel), encoded to
    pieces by the model's subword models; a :class:`FormatError` when the sides differ in length."""
    src_lines, tgt_lines = list(src_lines), list(tgt_lines)
    if len(src_lines) != len(tgt_lines):
        raise FormatError(f"the shortlist's training text has {len(src_lines)} source and {len(tgt_lines)} "
                          f"target lines", expected="two files of parallel lines")
    pairs = zip((e.ids for e in src_subword.encode_many(src_lines)),
                (e.ids for e in tgt_subword.encode_many(tgt_lines)))
    return build_shortlist(pairs, src_vocab, tgt_vocab, exclude=exclude, **kw)


def prepare_shortlist(path: str | os.PathLike, cfg, subwords: tuple, build_from: tuple[str, str] | None = None, *,
                      per_source: int = PER_SOURCE, frequent: int = FREQUENT) -> Shortlist:
    """The shortlist table at ``path`` for a model of config ``cfg``; when there is none yet and ``build_from``
    names the training text (source and target files, pre-tokenised), it is built from it with the model's
    ``subwords (source, target)`` and saved at ``path`` first (once: later calls load it)."""
    if not os.path.exists(path):
        if build_from is None:
            raise ConfigError(f"no shortlist table at {os.fspath(path)}: build it once from the training text "
                              f"(--shortlist-build TRAIN_SRC TRAIN_TGT)")
        src, tgt = build_from
        table = shortlist_from_text((t for _, t in read_lines(src)), (t for _, t in read_lines(tgt)), *subwords,
                                    cfg.src_vocab_size, cfg.tgt_vocab, (cfg.pad_id, cfg.bos_id),
                                    per_source=per_source, frequent=frequent)
        with stop_signals_deferred(), atomic_write(path, "wb", encoding=None) as f:    # (save_checkpoint's why)
            table.save(f)
    table = load_shortlist(path)
    if table.tgt_vocab != cfg.tgt_vocab or table.table.shape[0] != cfg.src_vocab_size:
        raise ConfigError(f"{os.fspath(path)} is a shortlist for vocabularies of {table.table.shape[0]} source and "
                          f"{table.tgt_vocab} target pieces; the model has {cfg.src_vocab_size} and {cfg.tgt_vocab}")
    return table
