"""Parallel data as token ids, token-budget batching with length bucketing, and collation.

Three pieces, used in this order by :mod:`xlpe.train.trainer` and :mod:`xlpe.infer.translate`:

* :class:`ParallelData` holds a corpus as flat ``int32`` arrays plus offsets (one array per side and per
  position channel), so a million sentence pairs cost a few hundred MB, not a million tensors.
  Source sentences end with EOS; targets are stored bare (``y``) and the collator adds BOS/EOS.
* :class:`TokenBatchSampler` cuts the corpus into batches whose *padded* size
  ``len(batch) * max(num_tokens)`` stays within ``max_tokens``. Sentences of similar length are batched
  together (bucketing), the batch order is shuffled, and everything is a pure function of
  ``(seed, epoch)``. Its state is ``(epoch, position)``, so training resumes on the very next batch.
  With ``num_replicas > 1`` each rank takes every ``num_replicas``-th batch (DDP).
* :func:`collate` pads a list of examples into a :class:`Batch` of tensors, including the position
  channels of DESIGN.md ("position channels"): ``seq``, ``xl``, ``depth`` (B, S), ``tree_rel`` (B, S, S) and
  ``dpe_target`` (B, S). Pads are 0, except ``dpe_target`` whose pad is -1 ("no target").

Word-level channels (one value per pre-BPE word) are expanded to subwords with the subword model's word
map (:func:`expand_channel`); EOS gets the value SPEC gives it (``xl``: its own index, ``depth``: max+1,
``dpe_target``: -1).
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np
import torch

from xlpe.data.subword import BOS_ID, EOS_ID, PAD_ID, SubwordModel
from xlpe.errors import ConfigError, FormatError
from xlpe.io.text import read_lines, tokenize

log = logging.getLogger(__name__)

#: pad value of each channel in a batch (every other channel pads with 0)
CHANNEL_PAD: dict[str, int] = {"dpe_target": -1}
#: channels holding one value per *pair* of source tokens, shape (S, S) per sentence
PAIR_CHANNELS = frozenset({"tree_rel"})


def channel_pad(name: str) -> int:
    return CHANNEL_PAD.get(name, 0)


# --------------------------------------------------------------------------------------------------
# channel expansion: word level -> subword level (+ EOS)
# --------------------------------------------------------------------------------------------------

def _eos_value(name: str, values: np.ndarray, n_tokens: int) -> int:
    """The channel value of the EOS token appended after ``n_tokens`` subwords (SPEC §3.2, §4.1, §6.2)."""
    if name in ("xl", "seq"):
        return n_tokens                       # EOS keeps its APE index
    if name == "depth":
        return int(values.max()) + 1 if len(values) else 0
    if name == "dpe_target":
        return -1                             # EOS is never supervised
    raise ConfigError(f"channel {name!r}: no rule for the EOS value; give one value more than there are tokens "
                      "(the last one is EOS's)")


def expand_channel(name: str, values: Sequence | np.ndarray, word_of: Sequence[int] | None, n_pieces: int) -> np.ndarray:
    """One sentence's channel at subword level, EOS included (length ``n_pieces + 1``; pair channels
    ``(n_pieces + 1)²``, flattened row-major).

    Args:
        name: the channel (``xl``, ``depth``, ``dpe_target``, ``tree_rel`` or a new one).
        values: per-word values (``word_of`` given) or per-subword values (``word_of=None``), as a sequence
            or as a sparse mapping ``{index: value}`` (other tokens get the channel's pad value). Either may
            carry one extra trailing value for EOS (a row and a column for pair channels); without it EOS
            gets the channel's rule (:func:`_eos_value`). ``tree_rel`` must include EOS.
        word_of: subword -> word index map (:class:`xlpe.data.subword.Encoded.word_of`), or None when
            ``values`` are already per subword.
        n_pieces: number of subwords (without EOS).

    Word-level rules: ``xl`` holds a permutation's inverse, so it is expanded as a permutation (each word's
    pieces keep their inner order, SPEC §4.1); ``tree_rel`` takes the value of the word pair (pieces of one
    word pair with the word itself, 0, SPEC §3.3); any other channel is copied to every piece of its word
    (``depth``: "sub-words share the absolute structural position", SPEC §3.2). ``dpe_target`` ranks are
    defined on subwords (SPEC §6.2) and cannot be given per word.
    """
    if isinstance(values, Mapping):         # sparse {token index: value}; unlisted tokens get the pad value
        units = n_pieces if word_of is None else ((max(word_of) + 1) if len(word_of) else 0)
        dense = np.full(units, channel_pad(name), dtype=np.int64)
        for i, x in values.items():
            if not 0 <= int(i) < units:
                raise ConfigError(f"channel {name!r} gives a value for token {i}, but the sentence has {units} "
                                  f"{'subwords' if word_of is None else 'words'}")
            dense[int(i)] = int(x)
        values = dense
    v = np.asarray(values, dtype=np.int64)
    if name in PAIR_CHANNELS:
        n = int(round(np.sqrt(v.size))) if v.ndim == 1 else v.shape[0]
        v = v.reshape(n, n)
        units = n_pieces if word_of is None else (max(word_of) + 1 if len(word_of) else 0)
        if n != units + 1:
            raise ConfigError(f"pair channel {name!r} has a {n}x{n} matrix for {units} "
                              f"{'subwords' if word_of is None else 'words'}; expected {(units + 1)}x{(units + 1)} (EOS included)")
        if word_of is None:
            return v.reshape(-1)
        idx = np.asarray(list(word_of) + [n - 1], dtype=np.int64)
        return v[np.ix_(idx, idx)].reshape(-1)

    if word_of is None:
        if len(v) == n_pieces + 1:
            if name == "xl" and v[-1] != n_pieces:
                raise ConfigError(f"channel 'xl' has {len(v)} values for {n_pieces} subwords and gives EOS index "
                                  f"{v[-1]}; EOS keeps its own index {n_pieces} (SPEC §4.1)")
            return v
        if len(v) != n_pieces:
            raise ConfigError(f"channel {name!r} has {len(v)} values for {n_pieces} subwords")
        return np.append(v, _eos_value(name, v, n_pieces))

    n_words = (max(word_of) + 1) if len(word_of) else 0
    if name == "dpe_target":
        raise ConfigError("channel 'dpe_target' is defined on subwords (SPEC §6.2); give it at subword level")
    eos = None
    if len(v) == n_words + 1 and name != "xl":     # xl: orders cover the words only, EOS keeps its index
        v, eos = v[:-1], int(v[-1])
    elif len(v) != n_words:
        raise ConfigError(f"channel {name!r} has {len(v)} values for {n_words} words")
    wo = np.asarray(word_of, dtype=np.int64)
    if name == "xl":
        order = np.argsort(v, kind="stable")              # word order o with pos_XL[o[j]] = j
        first = np.searchsorted(wo, np.arange(n_words))   # word_of is non-decreasing
        counts = np.bincount(wo, minlength=n_words)
        sub_order = np.concatenate([np.arange(first[w], first[w] + counts[w]) for w in order]) if n_words else wo
        out = np.empty(n_pieces, dtype=np.int64)
        out[sub_order] = np.arange(n_pieces)
    else:
        out = v[wo]
    return np.append(out, eos if eos is not None else _eos_value(name, out, n_pieces))


# --------------------------------------------------------------------------------------------------
# channel files
# --------------------------------------------------------------------------------------------------

#: channel file kinds: kind -> (channel name, level, description)
CHANNEL_FILES: dict[str, tuple[str | None, str, str]] = {
    "orders": ("xl", "word", "lader order lines (a 0-based permutation per sentence); pos_XL is its inverse (SPEC §4.1)"),
    "subword-orders": ("xl", "subword", "order lines over subwords (a preorderer run on subword text, as Ding et "
                                        "al.); pos_XL is its inverse (SPEC §4.1)"),
    "dpe": ("dpe_target", "subword", "Pharaoh 'i-p' lines over subword indices, 0-based (SPEC §6.2); "
                                     "tokens without a link get no target"),
    "ints": (None, "word", "space-separated integers, one value per word (one line per sentence)"),
}


class ChannelFile:
    """An iterator over a channel file's items that knows the file's name, for error messages."""

    def __init__(self, items: Iterator, path: str | os.PathLike):
        self.items, self.path = items, str(path)

    def __iter__(self) -> "ChannelFile":
        return self

    def __next__(self):
        return next(self.items)


def read_channel_file(kind: str, path: str | os.PathLike, *, noise: float = 0.0, noise_seed: int = 0,
                      noise_unit: str = "indices") -> ChannelFile:
    """Stream one channel item per line of a channel file (see :data:`CHANNEL_FILES`), for
    :meth:`ParallelData.from_files` ``channels``. Malformed lines raise :class:`FormatError` with ``file:line``.

    ``noise`` (orders only): the noise attack of SPEC §4.8. Each ``pos_XL`` line gets
    :func:`xlpe.reorder.noise.swap_noise` at ratio ``noise``, seeded by ``noise_seed``, at the granularity of the
    file (word or subword). Use it for training data only.
    """
    if noise and kind not in ("orders", "subword-orders"):
        raise ConfigError(f"noise applies to order files, not to channel files of kind {kind!r}")
    if kind in ("orders", "subword-orders"):
        from xlpe.io.orders import invert_order, read_orders
        items = (invert_order(o) for o in read_orders(path))
        if noise:
            from xlpe.reorder.noise import noisy_positions
            items = noisy_positions(items, noise, noise_seed, noise_unit)
        return ChannelFile(items, path)
    return ChannelFile(_read_channel_items(kind, path), path)


def _read_channel_items(kind: str, path: str | os.PathLike) -> Iterator:
    if kind == "dpe":
        from xlpe.io.alignments import parse_alignment_line

        def dpe():
            for lineno, text in read_lines(path):
                a = parse_alignment_line(text, 0, path=path, lineno=lineno)
                targets: dict[int, int] = {}
                for i, p in sorted(a.sure):
                    if i in targets:
                        raise FormatError(f"source token {i} has two DPE targets", path, lineno,
                                          "at most one 'i-p' link per source token")
                    targets[i] = p
                yield targets
        return dpe()
    if kind == "ints":
        def ints():
            for lineno, text in read_lines(path):
                try:
                    yield [int(t) for t in tokenize(text)]
                except ValueError:
                    raise FormatError("non-integer value", path, lineno, "space-separated integers") from None
        return ints()
    raise ConfigError(f"unknown channel file kind {kind!r} (expected one of {', '.join(CHANNEL_FILES)})")


# --------------------------------------------------------------------------------------------------
# the dataset
# --------------------------------------------------------------------------------------------------

class _Ragged:
    """Variable-length int32 rows in one flat array + int64 offsets (row i = flat[off[i]:off[i+1]])."""

    def __init__(self):
        self._buf = array("i")
        self._off = array("q", [0])
        self.flat: np.ndarray | None = None
        self.off: np.ndarray | None = None

    def append(self, row) -> None:
        if isinstance(row, np.ndarray):
            self._buf.frombytes(np.ascontiguousarray(row, dtype=np.int32).tobytes())
        else:
            self._buf.extend(row)
        self._off.append(len(self._buf))

    def freeze(self) -> "_Ragged":
        self.flat = np.frombuffer(self._buf, dtype=np.int32) if len(self._buf) else np.zeros(0, np.int32)
        self.off = np.frombuffer(self._off, dtype=np.int64)
        return self

    @classmethod
    def from_arrays(cls, flat: np.ndarray, off: np.ndarray) -> "_Ragged":
        r = cls()
        r.flat, r.off = np.asarray(flat, dtype=np.int32), np.asarray(off, dtype=np.int64)
        return r

    def __getitem__(self, i: int) -> np.ndarray:
        return self.flat[self.off[i]:self.off[i + 1]]

    def __len__(self) -> int:
        return len(self.off) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.off)


@dataclass
class Example:
    """One sentence pair as numpy arrays: ``src`` ends with EOS, ``tgt`` is bare (``None`` when translating)."""
    index: int
    src: np.ndarray
    tgt: np.ndarray | None
    channels: dict[str, np.ndarray] = field(default_factory=dict)


class ParallelData:
    """A corpus of token ids and position channels, stored compactly.

    Build it with :meth:`from_files` (a bitext and subword model(s)), :meth:`from_sentences` (tokenised
    sentences in memory) or :meth:`from_ids` (ids you already have). Index it to get an :class:`Example`.

    Attributes:
        line_numbers: the 1-based input line of every kept sentence (skipped lines leave gaps).
        skipped: how many lines were skipped (only with ``skip_long=True``).
    """

    def __init__(self, src: _Ragged, tgt: _Ragged | None, channels: dict[str, _Ragged],
                 line_numbers: np.ndarray, skipped: int = 0, source_name: str | None = None):
        self._src, self._tgt, self._channels = src, tgt, channels
        self.line_numbers = line_numbers
        self.skipped = skipped
        self.source_name = source_name
        self.src_lengths = src.lengths()                       # includes EOS
        self.tgt_lengths = tgt.lengths() if tgt is not None else None   # bare y

    # -- construction ------------------------------------------------------------------------------

    @classmethod
    def from_files(cls, src_path: str | os.PathLike, tgt_path: str | os.PathLike | None,
                   src_subword: SubwordModel, tgt_subword: SubwordModel | None = None, *,
                   max_src_len: int | None = None, max_tgt_len: int | None = None, skip_long: bool = False,
                   channels: Mapping[str, Iterable] | None = None, channel_level: str | Mapping[str, str] = "word") -> "ParallelData":
        """Read and encode a line-aligned bitext (``tgt_path=None``: source only).

        Args:
            src_subword / tgt_subword: the subword model of each side; ``tgt_subword=None`` = joint vocabulary.
            max_src_len: the model's limit on source tokens *including EOS*; a longer line raises
                :class:`FormatError` naming ``file:line`` unless ``skip_long`` (then it is skipped and counted).
            max_tgt_len: the limit on decoder steps (target tokens + 1 for BOS/EOS).
            channels: name -> iterable of per-sentence values, one item per *input line* (see
                :func:`expand_channel`); ``channel_level`` says whether they are per ``word`` or ``subword``
                (one level for all, or a dict by channel name, default ``word``). :func:`read_channel_file`
                reads the standard files.
        Empty lines are errors (a pair without a side cannot be trained on) unless ``skip_long``, which then
        skips them too.
        """
        src_lines = (t for _, t in read_lines(src_path))
        tgt_lines = (t for _, t in read_lines(tgt_path)) if tgt_path is not None else None
        return cls.from_sentences(src_lines, tgt_lines, src_subword, tgt_subword, max_src_len=max_src_len,
                                  max_tgt_len=max_tgt_len, skip_long=skip_long, channels=channels,
                                  channel_level=channel_level,
                                  names=(os.fspath(src_path), None if tgt_path is None else os.fspath(tgt_path)))

    @classmethod
    def from_sentences(cls, src: Iterable[str | Sequence[str]], tgt: Iterable[str | Sequence[str]] | None,
                       src_subword: SubwordModel, tgt_subword: SubwordModel | None = None, *,
                       max_src_len: int | None = None, max_tgt_len: int | None = None, skip_long: bool = False,
                       channels: Mapping[str, Iterable] | None = None, channel_level: str | Mapping[str, str] = "word",
                       names: tuple[str | None, str | None] = ("<source>", "<target>")) -> "ParallelData":
        """Encode sentences (lines or word lists) from iterables; see :meth:`from_files` for the options."""
        levels = {k: (channel_level if isinstance(channel_level, str) else channel_level.get(k, "word"))
                  for k in (channels or {})}
        for k, lv in levels.items():
            if lv not in ("word", "subword"):
                raise ConfigError(f"channel {k!r}: level must be 'word' or 'subword', not {lv!r}")
        tgt_subword = tgt_subword or src_subword
        src_name, tgt_name = names
        src_words = _words(src)
        enc_src = src_subword.encode_many(src_words)
        enc_tgt = tgt_subword.encode_many(_words(tgt)) if tgt is not None else None
        ch_iters = {k: iter(v) for k, v in (channels or {}).items()}
        ch_names = {k: getattr(v, "path", src_name) for k, v in (channels or {}).items()}
        S, T = _Ragged(), (_Ragged() if tgt is not None else None)
        C = {k: _Ragged() for k in ch_iters}
        lines = array("q")
        skipped = n_long = n_empty = 0
        lineno = 0
        _end = object()
        while True:
            es = next(enc_src, _end)
            et = next(enc_tgt, _end) if enc_tgt is not None else None
            if es is _end or et is _end:
                if enc_tgt is not None and (es is _end) != (et is _end):
                    short, long_ = (src_name, tgt_name) if es is _end else (tgt_name, src_name)
                    raise FormatError(f"{short} has {lineno} lines but {long_} has more", long_, lineno + 1,
                                      "line-aligned files with equal line counts")
                break
            lineno += 1
            ch_vals = {}
            for k, it in ch_iters.items():
                val = next(it, _end)
                if val is _end:
                    raise FormatError(f"channel {k!r} ends after {lineno - 1} sentences but {src_name} has more",
                                      ch_names[k], lineno, "one channel line per source line")
                ch_vals[k] = val
            ns = len(es.ids) + 1
            nt = (len(et.ids) + 1) if et is not None else 0
            problem = None
            if len(es.ids) == 0:
                problem = ("empty source sentence", src_name, "at least one token")
            elif et is not None and len(et.ids) == 0:
                problem = ("empty target sentence", tgt_name, "at least one token")
            elif max_src_len is not None and ns > max_src_len:
                problem = (f"source sentence has {ns} tokens with EOS (subwords), more than the model's limit "
                           f"{max_src_len}", src_name, f"at most {max_src_len} (or skip long lines)")
            elif max_tgt_len is not None and et is not None and nt > max_tgt_len:
                problem = (f"target sentence has {nt} tokens with EOS (subwords), more than the model's limit "
                           f"{max_tgt_len}", tgt_name, f"at most {max_tgt_len} (or skip long lines)")
            if problem is not None:
                if not skip_long:
                    raise FormatError(problem[0], problem[1], lineno, problem[2])
                skipped += 1
                n_empty += problem[0].startswith("empty")
                n_long += not problem[0].startswith("empty")
                continue
            S.append(es.ids + [EOS_ID])
            if et is not None:
                T.append(et.ids)
            for k, val in ch_vals.items():
                try:
                    C[k].append(expand_channel(k, val, es.word_of if levels[k] == "word" else None, len(es.ids)))
                except ConfigError as e:
                    raise FormatError(f"{e} of {src_name} line {lineno}", ch_names[k], lineno,
                                      f"one value per {levels[k]} of the source sentence") from None
            lines.append(lineno)
        for k, it in ch_iters.items():
            if next(it, _end) is not _end:
                raise FormatError(f"channel {k!r} has more lines than {src_name} ({lineno})", ch_names[k],
                                  lineno + 1, "one channel line per source line")
        if lineno == 0:
            raise FormatError("input is empty", src_name, expected="at least one sentence (pair)")
        if skipped:
            log.warning("skipped %d of %d lines of %s (%d too long, %d empty)", skipped, lineno, src_name,
                        n_long, n_empty)
        if len(lines) == 0:
            raise FormatError(f"all {lineno} lines were skipped", src_name, expected="at least one usable sentence")
        return cls(S.freeze(), T.freeze() if T is not None else None, {k: r.freeze() for k, r in C.items()},
                   np.frombuffer(lines, dtype=np.int64), skipped, src_name)

    @classmethod
    def from_ids(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]] | None = None,
                 channels: Mapping[str, Sequence[Sequence[int]]] | None = None, *, add_eos: bool = True) -> "ParallelData":
        """Wrap ids you already have. ``src`` rows get EOS appended when ``add_eos``; channel rows are per
        subword (EOS value optional, see :func:`expand_channel`)."""
        S = _Ragged()
        for row in src:
            S.append(list(row) + [EOS_ID] if add_eos else row)
        T = None
        if tgt is not None:
            if len(tgt) != len(src):
                raise ConfigError(f"{len(src)} source rows but {len(tgt)} target rows")
            T = _Ragged()
            for row in tgt:
                T.append(row)
        C = {}
        for k, rows in (channels or {}).items():
            C[k] = _Ragged()
            for i, row in enumerate(rows):
                n = len(src[i]) if add_eos else len(src[i]) - 1
                C[k].append(expand_channel(k, row, None, n))
        n = len(src)
        return cls(S.freeze(), T.freeze() if T is not None else None, {k: r.freeze() for k, r in C.items()},
                   np.arange(1, n + 1, dtype=np.int64))

    # -- access ------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._src)

    def __getitem__(self, i: int) -> Example:
        return Example(int(i), self._src[i], self._tgt[i] if self._tgt is not None else None,
                       {k: r[i] for k, r in self._channels.items()})

    @property
    def channel_names(self) -> list[str]:
        return list(self._channels)

    @property
    def num_tokens(self) -> np.ndarray:
        """Per-example padded cost: ``max(source length, target length + 1)`` (what a batch row costs)."""
        if self.tgt_lengths is None:
            return self.src_lengths.copy()
        return np.maximum(self.src_lengths, self.tgt_lengths + 1)

    def nbytes(self) -> int:
        r = [self._src] + ([self._tgt] if self._tgt is not None else []) + list(self._channels.values())
        return sum(x.flat.nbytes + x.off.nbytes for x in r)

    # -- persistence (an encoded corpus can be cached and memory-mapped) -----------------------------

    def save(self, path: str | os.PathLike) -> None:
        """Write all arrays to one ``.npz`` (atomically)."""
        from xlpe.io.atomic import atomic_write
        arrays = {"src_flat": self._src.flat, "src_off": self._src.off, "lines": self.line_numbers,
                  "meta": np.asarray([self.skipped], dtype=np.int64)}
        if self._tgt is not None:
            arrays.update(tgt_flat=self._tgt.flat, tgt_off=self._tgt.off)
        for k, r in self._channels.items():
            arrays[f"ch_{k}_flat"], arrays[f"ch_{k}_off"] = r.flat, r.off
        with atomic_write(path, "wb") as f:
            np.savez(f, **arrays)

    @classmethod
    def load(cls, path: str | os.PathLike) -> "ParallelData":
        try:
            z = np.load(path, allow_pickle=False)
            src = _Ragged.from_arrays(z["src_flat"], z["src_off"])
            tgt = _Ragged.from_arrays(z["tgt_flat"], z["tgt_off"]) if "tgt_flat" in z.files else None
            chans = {f[3:-5]: _Ragged.from_arrays(z[f], z[f[:-5] + "_off"]) for f in z.files
                     if f.startswith("ch_") and f.endswith("_flat")}
            return cls(src, tgt, chans, z["lines"], int(z["meta"][0]), os.fspath(path))
        except (OSError, ValueError, KeyError) as e:
            raise FormatError(f"not a readable encoded corpus ({e})", path) from None


def _words(it: Iterable) -> Iterator:
    for x in it:
        yield tokenize(x) if isinstance(x, str) else x


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
        num_replicas, rank: DDP sharding. The epoch's batch list is extended by repeating its first batches
            until its length divides by ``num_replicas``, then rank ``r`` takes batches ``r, r+R, r+2R, …``, so
            every rank runs the same number of steps (with R > 1 a few examples are seen twice per epoch).

    Iterate to get the current epoch's remaining batches (lists of ints). :meth:`set_epoch` starts an epoch;
    :meth:`state_dict` is ``{epoch, position}`` where ``position`` counts batches already handed out.
    """

    def __init__(self, lengths: Sequence[int] | np.ndarray, max_tokens: int, *, max_sentences: int | None = None,
                 shuffle: bool = True, seed: int = 0, bucket: bool = True, num_replicas: int = 1, rank: int = 0,
                 batch_multiple: int = 1):
        self.lengths = np.asarray(lengths, dtype=np.int64)
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
        if self.bucket:
            order = order[np.argsort(self.lengths[order], kind="stable")]
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
        pad = channel_pad(name)
        if name in PAIR_CHANNELS:
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
