"""Cross-Align training data (:mod:`xlpe.align.crossalign_train`): a tokenised bitext, its shuffled batches, and
SSA's labels (SPEC §7.4.1).

* :class:`PairData`: ``[CLS] pieces [SEP]`` ids and word indices of every pair as flat arrays, batched on demand.
* :class:`PairSampler`: one shuffled order per ``(seed, epoch)``, its position saved in checkpoints (exact resume).
* :func:`label_pairs` / :func:`cached_labels`: the frozen stage-1 model's word links of every pair by the labels'
  :class:`~xlpe.align.crossalign_extract.Extraction` (the one extraction pipeline), computed once in a length-sorted
  pass and kept in ``OUT/ssa_labels.npz`` under a digest of the teacher's weights, the data and the settings
  (:class:`WordLinks`); every epoch and a resumed run read them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from xlpe.align.crossalign import Batch, CrossAligner, collate, encode_words, layer_states
from xlpe.align.crossalign_extract import Extraction, extract
from xlpe.errors import ConfigError, XlpeError
from xlpe.io.atomic import atomic_write
from xlpe.io.bitext import read_bitext
from xlpe.keys import Inputs
from xlpe.runtime import progress_bar

log = logging.getLogger(__name__)

LABELS = "ssa_labels.npz"


class PairData:
    """A tokenised bitext: flat int32 arrays of ``[CLS] pieces [SEP]`` ids and word indices, with offsets."""

    def __init__(self, aligner: CrossAligner, src: str, tgt: str, *, chunk: int = 2000):
        self.pad_id = aligner.tokenizer.pad_token_id
        parts: list[list[np.ndarray]] = [[], [], [], []]        # ids, words, lengths (src, tgt) ...
        lens: list[list[int]] = [[], []]
        self.truncated, buf = 0, []

        def flush():
            s, t = [p[0] for p in buf], [p[1] for p in buf]
            for k, side in enumerate((s, t)):
                ids, words, cut = encode_words(aligner.tokenizer, side, aligner.config.max_len)
                self.truncated += cut
                parts[2 * k].append(np.fromiter((x for seq in ids for x in seq), dtype=np.int32))
                parts[2 * k + 1].append(np.fromiter((x for seq in words for x in seq), dtype=np.int32))
                lens[k].extend(len(x) for x in ids)
            buf.clear()

        for pair in read_bitext(src, tgt):
            buf.append(pair)
            if len(buf) >= chunk:
                flush()
        if buf:
            flush()
        if not lens[0]:
            raise XlpeError(f"{src}: no sentence pairs to train on")
        self.ids = [np.concatenate(parts[0]), np.concatenate(parts[2])]
        self.words = [np.concatenate(parts[1]), np.concatenate(parts[3])]
        self.offsets = [np.concatenate([[0], np.cumsum(x)]) for x in lens]
        if self.truncated:
            log.warning("%d training sentences were longer than max_len=%d subwords and were truncated",
                        self.truncated, aligner.config.max_len)

    def __len__(self) -> int:
        return len(self.offsets[0]) - 1

    def batch(self, idx: Sequence[int]) -> Batch:
        ids, words = [], []
        for k in (0, 1):
            o = self.offsets[k]
            ids += [self.ids[k][o[i]:o[i + 1]] for i in idx]
            words += [self.words[k][o[i]:o[i + 1]] for i in idx]
        return collate(ids, words, self.pad_id)

    def lengths(self) -> np.ndarray:
        """Source + target pieces of each pair."""
        return np.diff(self.offsets[0]) + np.diff(self.offsets[1])

    def digest(self) -> str:
        h = hashlib.sha256()
        for a in (*self.ids, *self.words, *self.offsets):
            h.update(np.ascontiguousarray(a).tobytes())
        return h.hexdigest()


class WordLinks:
    """Word links of every pair of a :class:`PairData`: ``links (L, 2)`` int32 rows ``(i, j)`` sorted by pair,
    pair ``p`` owning ``links[offsets[p]:offsets[p + 1]]``."""

    def __init__(self, offsets: np.ndarray, links: np.ndarray):
        self.offsets, self.links = offsets, links

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def tensor(self, idx: Sequence[int], src_words: Tensor, tgt_words: Tensor) -> Tensor:
        """``(B, Ws, Wt)`` bool word links of pairs ``idx``, shaped for the batch's word indices."""
        ws, wt = int(src_words.max().item()) + 1, int(tgt_words.max().item()) + 1
        out = torch.zeros(len(idx), max(ws, 1), max(wt, 1), dtype=torch.bool)
        rows = [self.links[self.offsets[p]:self.offsets[p + 1]] for p in idx]
        b = torch.from_numpy(np.repeat(np.arange(len(idx)), [len(r) for r in rows]))
        ij = torch.from_numpy(np.concatenate(rows)).long() if b.numel() else torch.zeros(0, 2, dtype=torch.long)
        out[b, ij[:, 0], ij[:, 1]] = True
        return out.to(src_words.device)


def label_pairs(teacher, data: PairData, labels: Extraction, *, device, autocast=contextlib.nullcontext,
                batch_size: int = 32, progress: bool = False) -> WordLinks:
    """SSA's labels (SPEC §7.4.1): the word links of every pair by the frozen ``teacher`` (the model of a
    :class:`CrossAligner`) with the ``labels`` extraction, whose ``layer`` must be set (SPEC: softmax both ways at
    the label τ with the [CLS] null sink, the paper's piece-level join on piece states; ``[I]``: a word-level join,
    mean word states), in batches of similar length."""
    if labels.layer is None:
        raise ConfigError("the SSA labels' extraction needs its layer (the teacher's alignment layer)")
    order = np.argsort(data.lengths(), kind="stable")
    parts = []
    bar = progress_bar(progress, math.ceil(len(order) / batch_size), 0, desc="ssa labels")
    teacher.eval()
    for k in range(0, len(order), batch_size):
        idx = order[k:k + batch_size]
        with torch.inference_mode(), autocast():
            pairs = extract(*layer_states(teacher, data.batch(idx.tolist()).to(device), labels.layer), labels)
        ij = np.array([x for links in pairs for x in links], dtype=np.int64).reshape(-1, 2)
        parts.append(np.column_stack([np.repeat(idx, [len(x) for x in pairs]), ij]))
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    rows = np.concatenate(parts) if parts else np.zeros((0, 3), dtype=np.int64)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]                      # by pair; (i, j) order kept
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rows[:, 0], minlength=len(data)))])
    return WordLinks(offsets.astype(np.int64), rows[:, 1:].astype(np.int32))


@dataclass(frozen=True)
class LabelInputs(Inputs):
    """What names a label file beside the teacher's weights: the layer, τ and data, and the extraction's other
    settings (the key rule of :mod:`xlpe.keys`: each enters where it is not the paper's)."""

    layer: int | None
    threshold: float
    data: str
    symmetrize: str = "pieces"
    word_vectors: str = "pieces"
    method: str = "softmax"
    null_sink: str = "cls"


def label_key(labels: Extraction, data: PairData) -> dict:
    """The key material of the labels of ``data`` read by ``labels`` (:class:`LabelInputs`)."""
    return LabelInputs(layer=labels.layer, threshold=labels.threshold, data=data.digest(),
                       symmetrize=labels.symmetrize, word_vectors=labels.word_vectors, method=labels.method,
                       null_sink=labels.null_sink).key_material()


def cached_labels(path: Path, teacher, data: PairData, labels: Extraction, *, device, autocast,
                  progress: bool) -> WordLinks:
    """:func:`label_pairs`, read from ``path`` when it holds the labels of this teacher, data and settings,
    else computed and written there (atomically)."""
    h = hashlib.sha256(json.dumps(label_key(labels, data)).encode())
    for name, t in teacher.state_dict().items():
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    key = h.hexdigest()
    if path.exists():
        try:
            with np.load(path) as z:
                if str(z["key"]) == key:
                    log.info("ssa: labels read from %s", path)
                    return WordLinks(z["offsets"], z["links"])
            log.info("ssa: %s holds labels of another teacher, data or setting; labelling again", path)
        except (OSError, ValueError, KeyError) as e:
            log.warning("ssa: %s is unreadable (%s); labelling again", path, e)
    t0 = time.monotonic()
    links = label_pairs(teacher, data, labels, device=device, autocast=autocast, progress=progress)
    with atomic_write(path, "wb", encoding=None) as f:
        np.savez(f, key=np.array(key), offsets=links.offsets, links=links.links)
    log.info("ssa: labelled %d pairs (%d word links) in %.0f s (%s)", len(links), len(links.links),
             time.monotonic() - t0, labels)
    return links


class PairSampler:
    """Shuffled batches of pair indices, one order per epoch from ``(seed, epoch)``; under DDP every global
    batch is ``world`` consecutive slices (the epoch's order wraps around to fill the last one)."""

    def __init__(self, n: int, batch_size: int, seed: int, rank: int = 0, world: int = 1):
        self.n, self.bs, self.seed, self.rank, self.world = n, batch_size, seed, rank, world
        self.epoch, self.position = 0, 0
        self.per_epoch = math.ceil(n / (batch_size * world))
        self._order: tuple[int, np.ndarray] | None = None

    def order(self) -> np.ndarray:
        if self._order is None or self._order[0] != self.epoch:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
            if self.world > 1:
                order = np.resize(order, self.per_epoch * self.bs * self.world)
            self._order = (self.epoch, order)
        return self._order[1]

    def next(self) -> list[int]:
        if self.position >= self.per_epoch:
            self.epoch, self.position = self.epoch + 1, 0
        start = self.position * self.bs * self.world + self.rank * self.bs
        self.position += 1
        return self.order()[start:start + self.bs].tolist()

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
