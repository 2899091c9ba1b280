"""A parallel corpus as token ids and position channels, stored compactly: :class:`ParallelData` holds flat
``int32`` arrays plus offsets (one array per side and per channel), so a million sentence pairs cost a few
hundred MB, not a million tensors. Source sentences end with EOS; targets are stored bare (the collator of
:mod:`xlpe.data.batching` adds BOS/EOS). Channel values come from sources
(:class:`xlpe.data.channels.ChannelSource`) and are expanded to subwords, EOS included, by
:func:`xlpe.data.channels.expand_channel`.
"""

from __future__ import annotations

import logging
import os
from array import array
from dataclasses import dataclass, field
from itertools import islice
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from xlpe.data.channels import ChannelSource, as_source, expand_channel
from xlpe.data.subword import EOS_ID, SubwordModel
from xlpe.errors import ConfigError, FormatError
from xlpe.io.text import read_lines, tokenize

log = logging.getLogger(__name__)


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
                   channels: Mapping[str, ChannelSource | Iterable] | None = None,
                   channel_level: str | Mapping[str, str] = "word") -> "ParallelData":
        """Read and encode a line-aligned bitext (``tgt_path=None``: source only).

        Args:
            src_subword / tgt_subword: the subword model of each side; ``tgt_subword=None`` = joint vocabulary.
            max_src_len: the model's limit on source tokens *including EOS*; a longer line raises
                :class:`FormatError` naming ``file:line`` unless ``skip_long`` (then it is skipped and counted).
            max_tgt_len: the limit on decoder steps (target tokens + 1 for BOS/EOS).
            channels: name -> :class:`~xlpe.data.channels.ChannelSource` (or an iterable of per-sentence
                values, one item per *input line*, whose level ``channel_level`` gives: ``word`` or
                ``subword``, one for all or a dict by name); values are expanded to subwords with EOS by
                :func:`~xlpe.data.channels.expand_channel`.
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
                       channels: Mapping[str, ChannelSource | Iterable] | None = None,
                       channel_level: str | Mapping[str, str] = "word",
                       names: tuple[str | None, str | None] = ("<source>", "<target>"), first_line: int = 1,
                       finish_channels: bool = True, chunk_size: int = 2000) -> "ParallelData":
        """Encode sentences (lines or word lists) from iterables, ``chunk_size`` at a time; see
        :meth:`from_files` for the options. ``first_line`` numbers the first sentence in error messages;
        ``finish_channels=False`` leaves the rest of the channel sources for a later call (chunked input)."""
        tgt_subword = tgt_subword or src_subword
        src_name, tgt_name = names
        sources = {k: as_source(v, channel_level if isinstance(channel_level, str) else channel_level.get(k, "word"),
                                f"channel {k!r}") for k, v in (channels or {}).items()}
        src_it = _words(src)
        tgt_it = _words(tgt) if tgt is not None else None
        S, T = _Ragged(), (_Ragged() if tgt is not None else None)
        C = {k: _Ragged() for k in sources}
        lines = array("q")
        skipped = n_long = n_empty = 0
        lineno = first_line - 1
        while True:
            src_chunk = list(islice(src_it, chunk_size))
            tgt_chunk = list(islice(tgt_it, len(src_chunk) or 1)) if tgt_it is not None else None
            if tgt_chunk is not None and len(tgt_chunk) != len(src_chunk):
                short, long_ = (src_name, tgt_name) if len(src_chunk) < len(tgt_chunk) else (tgt_name, src_name)
                n = lineno + min(len(src_chunk), len(tgt_chunk))
                raise FormatError(f"{short} has {n} lines but {long_} has more", long_, n + 1,
                                  "line-aligned files with equal line counts")
            if not src_chunk:
                break
            values = {k: _take(k, source, src_chunk, lineno + 1) for k, source in sources.items()}
            enc_src = list(src_subword.encode_many(src_chunk))
            enc_tgt = list(tgt_subword.encode_many(tgt_chunk)) if tgt_chunk is not None else None
            for j, es in enumerate(enc_src):
                lineno += 1
                et = enc_tgt[j] if enc_tgt is not None else None
                problem = _pair_problem(es.ids, et.ids if et is not None else None, max_src_len, max_tgt_len,
                                        names)
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
                for k, source in sources.items():
                    word_of = es.word_of if source.level == "word" else None
                    try:
                        C[k].append(expand_channel(k, values[k][j], word_of, len(es.ids)))
                    except ConfigError as e:
                        raise FormatError(f"{e} of {src_name} line {lineno}", source.description, lineno,
                                          f"one value per {source.level} of the source sentence") from None
                lines.append(lineno)
        if finish_channels:
            for k, source in sources.items():
                try:
                    source.finish(lineno)
                except FormatError as e:
                    raise FormatError(f"channel {k!r} {e.message}", e.path, e.line, e.expected) from None
        n_read = lineno - first_line + 1
        if n_read == 0:
            raise FormatError("input is empty", src_name, expected="at least one sentence (pair)")
        if skipped:
            log.warning("skipped %d of %d lines of %s (%d too long, %d empty)", skipped, n_read, src_name,
                        n_long, n_empty)
        if len(lines) == 0:
            raise FormatError(f"all {n_read} lines were skipped", src_name, expected="at least one usable sentence")
        return cls(S.freeze(), T.freeze() if T is not None else None, {k: r.freeze() for k, r in C.items()},
                   np.frombuffer(lines, dtype=np.int64), skipped, src_name)

    @classmethod
    def from_ids(cls, src: Sequence[Sequence[int]], tgt: Sequence[Sequence[int]] | None = None,
                 channels: Mapping[str, Sequence[Sequence[int]]] | None = None, *,
                 add_eos: bool = True) -> "ParallelData":
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


def _take(name: str, source: ChannelSource, sentences: list, first_line: int) -> list:
    try:
        return source.take(sentences, first_line)
    except FormatError as e:
        raise FormatError(f"channel {name!r} {e.message}", e.path, e.line, e.expected) from None


def _words(it: Iterable) -> Iterator:
    for x in it:
        yield tokenize(x) if isinstance(x, str) else x


def _pair_problem(src_ids: list[int], tgt_ids: list[int] | None, max_src_len: int | None,
                  max_tgt_len: int | None, names: tuple[str | None, str | None]) -> tuple[str, str, str] | None:
    """Why a sentence pair cannot be used, as ``(message, file name, what was expected)``, or None: an empty
    side, or a side longer than its limit (counting EOS)."""
    src_name, tgt_name = names
    ns = len(src_ids) + 1
    nt = (len(tgt_ids) + 1) if tgt_ids is not None else 0
    if len(src_ids) == 0:
        return ("empty source sentence", src_name, "at least one token")
    if tgt_ids is not None and len(tgt_ids) == 0:
        return ("empty target sentence", tgt_name, "at least one token")
    if max_src_len is not None and ns > max_src_len:
        return (f"source sentence has {ns} tokens with EOS (subwords), more than the model's limit "
                f"{max_src_len}", src_name, f"at most {max_src_len} (or skip long lines)")
    if max_tgt_len is not None and tgt_ids is not None and nt > max_tgt_len:
        return (f"target sentence has {nt} tokens with EOS (subwords), more than the model's limit "
                f"{max_tgt_len}", tgt_name, f"at most {max_tgt_len} (or skip long lines)")
    return None
