"""Token-budget batching with length bucketing, and collation into padded tensors.

* :class:`TokenBatchSampler` cuts a corpus (:class:`xlpe.data.corpus.ParallelData`) into batches whose
  *padded* size ``len(batch) * max(num_tokens)`` stays within ``max_tokens``. Sentences of similar length are
  batched together (bucketing), the batch order is shuffled, and everything is a pure function of
  ``(seed, epoch)``. Its state is ``(epoch, position)``, so training resumes on the very next batch.
  With ``num_replicas > 1`` each rank takes every ``num_replicas``-th batch (DDP).
* :func:`collate` pads a list of examples into a :class:`Batch` of tensors, including the position
  channels (DESIGN.md "position channels"), each padded and shaped as its record in
  :mod:`xlpe.data.channels` says: ``(B, S)`` per token or ``(B, S, S)`` per pair.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch

from xlpe.data.channels import get_channel
from xlpe.data.corpus import Example, ParallelData
from xlpe.data.subword import BOS_ID, EOS_ID, PAD_ID
from xlpe.errors import ConfigError

log = logging.getLogger(__name__)

__all__ = ["Batch", "Example", "ParallelData", "TokenBatchSampler", "collate"]


# --------------------------------------------------------------------------------------------------
# batching
# --------------------------------------------------------------------------------------------------

class TokenBatchSampler:
    """Batches of indices whose padded size ``len(batch) * max(lengths[batch])`` is at most ``max_tokens``.

    Args:
        lengths: the padded cost of each example (:attr:`ParallelData.num_tokens`).
        max_tokens: the token budget of one batch, padding included.
        max_sentences: an optional cap on the batch's sentence count.
        batch_multiple: when a batch is full, cut it to the largest multiple of this many sentences and carry
            the rest into the next batch (fairseq's ``--required-batch-size-multiple``, 8 there); 1 = no rounding.
        shuffle: shuffle the batch order (and, with ``bucket``, break length ties at random) every epoch.
        seed: the batches of epoch ``e`` are a pure function of ``(seed, e)``.
        bucket: sort by length before cutting batches (little padding); without it batches follow the
            (shuffled) corpus order.
        ties: further sort keys for ``bucket``, one value per example each (e.g. the source, then the target
            length): examples of the same padded cost are ordered by them, so each side of a batch holds
            sentences of similar length (on Multi30k the padding of the source side halves). With ``shuffle``,
            the random order then only decides among examples equal in every key.
        num_replicas, rank: DDP sharding. The epoch's batch list is extended by repeating its first batches
            until its length divides by ``num_replicas``, then rank ``r`` takes batches ``r, r+R, r+2R, …``, so
            every rank runs the same number of steps (with R > 1 a few examples are seen twice per epoch).

    Iterate to get the current epoch's remaining batches (lists of ints). :meth:`set_epoch` starts an epoch;
    :meth:`state_dict` is ``{epoch, position}`` where ``position`` counts batches already handed out.
    """

    def __init__(self, lengths: Sequence[int] | np.ndarray, max_tokens: int, *, max_sentences: int | None = None,
                 shuffle: bool = True, seed: int = 0, bucket: bool = True, num_replicas: int = 1, rank: int = 0,
                 batch_multiple: int = 1, ties: Sequence[Sequence[int] | np.ndarray] = ()):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        self.ties = [np.asarray(t) for t in ties]
        if any(t.shape != self.lengths.shape for t in self.ties):
            raise ConfigError(f"every tie-break key needs one value per example ({len(self.lengths)})")
        if max_tokens <= 0:
            raise ConfigError(f"max_tokens must be positive, got {max_tokens}")
        if len(self.lengths) == 0:
            raise ConfigError("cannot batch an empty dataset")
        if self.lengths.max() > max_tokens:
            i = int(self.lengths.argmax())
            raise ConfigError(f"example {i} has {int(self.lengths[i])} tokens, more than max_tokens={max_tokens}; "
                              "raise max_tokens or lower the length limit")
        if not 0 <= rank < num_replicas:
            raise ConfigError(f"rank {rank} is not in 0..{num_replicas - 1}")
        if batch_multiple < 1:
            raise ConfigError(f"batch_multiple must be >= 1, got {batch_multiple}")
        self.max_tokens, self.max_sentences, self.batch_multiple = int(max_tokens), max_sentences, int(batch_multiple)
        self.shuffle, self.seed, self.bucket = shuffle, int(seed), bucket
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch, self.position = 0, 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def _global_batches(self, epoch: int) -> list[np.ndarray]:
        rng = np.random.default_rng([self.seed, epoch])
        n = len(self.lengths)
        order = rng.permutation(n) if self.shuffle else np.arange(n)
        if self.bucket:             # lexsort is stable: its last key sorts first
            order = order[np.lexsort([t[order] for t in reversed(self.ties)] + [self.lengths[order]])]
        lens = self.lengths[order].tolist()
        cap, mult = self.max_sentences or n, self.batch_multiple
        batches, start, longest = [], 0, 0
        for k, ln in enumerate(lens):
            m = max(longest, ln)
            if k > start and ((k - start + 1) * m > self.max_tokens or k - start >= cap):
                size = k - start
                if size > mult:
                    size -= size % mult            # the rest [start + size, k) is carried over
                batches.append(order[start:start + size])
                start += size
                m = max(lens[start:k + 1])
                if (k - start + 1) * m > self.max_tokens:    # carried rest + this one would not fit
                    batches.append(order[start:k])
                    start, m = k, ln
            longest = m
        batches.append(order[start:])
        if self.shuffle:
            perm = rng.permutation(len(batches))
            batches = [batches[p] for p in perm]
        return batches

    def batches(self, epoch: int | None = None) -> list[list[int]]:
        """This rank's batches of ``epoch`` (default: the current one), in order."""
        epoch = self.epoch if epoch is None else epoch
        if self._cache is not None and self._cache[0] == epoch:
            return self._cache[1]
        b = self._global_batches(epoch)
        R = self.num_replicas
        if R > 1:
            b = b + [b[i % len(b)] for i in range((-len(b)) % R)]
            b = b[self.rank::R]
        out = [x.tolist() for x in b]
        self._cache = (epoch, out)
        return out

    def __len__(self) -> int:
        return len(self.batches())

    def __iter__(self) -> Iterator[list[int]]:
        b = self.batches()
        while self.position < len(b):
            self.position += 1
            yield b[self.position - 1]

    def set_epoch(self, epoch: int) -> None:
        """Start ``epoch`` from its first batch."""
        self.epoch, self.position = int(epoch), 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "max_tokens": self.max_tokens,
                "batch_multiple": self.batch_multiple,
                "num_examples": len(self.lengths), "num_replicas": self.num_replicas}

    def load_state_dict(self, state: Mapping) -> None:
        """Continue where ``state`` stopped. The data, seed and budget must be the same as when it was saved."""
        for key, mine in (("num_examples", len(self.lengths)), ("seed", self.seed), ("max_tokens", self.max_tokens),
                          ("batch_multiple", self.batch_multiple)):
            if key in state and int(state[key]) != mine:
                raise ConfigError(f"cannot resume the batch order: it was made with {key}={state[key]}, now {mine}")
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        old_r = int(state.get("num_replicas", self.num_replicas))
        if old_r != self.num_replicas:
            # same epoch, approximately the same point in it; the order of later batches is not the same
            log.warning("resuming with %d processes instead of %d: the rest of epoch %d is re-sharded, "
                        "so the run is not an exact continuation", self.num_replicas, old_r, self.epoch)
            self.position = (self.position * old_r) // self.num_replicas


# --------------------------------------------------------------------------------------------------
# collation
# --------------------------------------------------------------------------------------------------

@dataclass
class Batch:
    """Padded tensors of one batch (right padding with ``pad_id``).

    ``src`` (B, S) ends each row with EOS; ``tgt_in`` = BOS + y and ``tgt_out`` = y + EOS, (B, T);
    ``channels`` maps channel names to (B, S) or (B, S, S) long tensors; ``ntokens`` is the number of
    non-pad target tokens (the loss normaliser); ``indices`` are the dataset indices of the rows.
    """
    src: torch.Tensor
    tgt_in: torch.Tensor | None
    tgt_out: torch.Tensor | None
    channels: dict[str, torch.Tensor]
    ntokens: int
    indices: list[int]

    def to(self, device: torch.device | str, non_blocking: bool = False) -> "Batch":
        mv = (lambda t: None if t is None else t.to(device, non_blocking=non_blocking))
        return Batch(mv(self.src), mv(self.tgt_in), mv(self.tgt_out),
                     {k: mv(v) for k, v in self.channels.items()}, self.ntokens, self.indices)

    def __len__(self) -> int:
        return self.src.shape[0]

    @property
    def src_tokens(self) -> int:
        return int((self.src != PAD_ID).sum())


def collate(items: Sequence[Example], *, pad_id: int = PAD_ID, bos_id: int = BOS_ID, eos_id: int = EOS_ID,
            add_seq: bool = True) -> Batch:
    """Pad examples into a :class:`Batch`. ``add_seq`` adds the ``seq`` channel (0..len-1, pad 0)."""
    if not items:
        raise ValueError("cannot collate an empty batch")
    B = len(items)
    slen = [len(x.src) for x in items]
    S = max(slen)
    src = np.full((B, S), pad_id, dtype=np.int64)
    for i, x in enumerate(items):
        src[i, :slen[i]] = x.src
    tgt_in = tgt_out = None
    ntokens = 0
    if items[0].tgt is not None:
        tlen = [len(x.tgt) for x in items]
        T = max(tlen) + 1
        tgt_in = np.full((B, T), pad_id, dtype=np.int64)
        tgt_out = np.full((B, T), pad_id, dtype=np.int64)
        for i, x in enumerate(items):
            n = tlen[i]
            tgt_in[i, 0] = bos_id
            tgt_in[i, 1:n + 1] = x.tgt
            tgt_out[i, :n] = x.tgt
            tgt_out[i, n] = eos_id
        ntokens = sum(tlen) + B
    channels: dict[str, torch.Tensor] = {}
    if add_seq:
        seq = np.zeros((B, S), dtype=np.int64)
        for i in range(B):
            seq[i, :slen[i]] = np.arange(slen[i])
        channels["seq"] = torch.from_numpy(seq)
    for name in items[0].channels:
        ch = get_channel(name)
        pad = ch.pad
        if ch.pair:
            arr = np.full((B, S, S), pad, dtype=np.int64)
            for i, x in enumerate(items):
                n = slen[i]
                arr[i, :n, :n] = np.asarray(x.channels[name]).reshape(n, n)
        else:
            arr = np.full((B, S), pad, dtype=np.int64)
            for i, x in enumerate(items):
                v = x.channels[name]
                if len(v) != slen[i]:
                    raise ConfigError(f"channel {name!r} of example {x.index} has {len(v)} values for "
                                      f"{slen[i]} source tokens")
                arr[i, :slen[i]] = v
        channels[name] = torch.from_numpy(arr)
    return Batch(torch.from_numpy(src), None if tgt_in is None else torch.from_numpy(tgt_in),
                 None if tgt_out is None else torch.from_numpy(tgt_out), channels, ntokens,
                 [x.index for x in items])
