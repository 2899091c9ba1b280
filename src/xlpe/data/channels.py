"""Position channels on the data side (DESIGN.md "position channels"): one :class:`Channel` record per name,
and the sources that fill a channel with one value list per sentence.

A **channel** says how its values travel with a batch: the pad value, per token ``(B, S)`` or per pair of
tokens ``(B, S, S)``, the value EOS gets, how word-level values become subword-level ones, and whether it is
a training-only target. :data:`CHANNELS` maps names to records; adding a channel is one record here (or
:func:`register_channel` from your code) plus a source.

A **source** gives the values of each sentence: :meth:`ChannelSource.take` returns the values of the next
sentences, :meth:`ChannelSource.finish` checks that nothing is left over. File sources read one line per
sentence (lader orders, DPE targets, integers); sources that compute values from the text (a BTG
preorderer, a parser) live with what computes them (:mod:`xlpe.reorder`, :mod:`xlpe.syntax`) and
:mod:`xlpe.sources` opens any of them from a ``KIND:PATH`` spec. A :class:`Source` fills several channels
from one reading (a CoNLL-U file: ``depth``, ``tree_word`` and ``tree_head``); :meth:`Source.split` gives
a :class:`ChannelSource` per channel that share that reading.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from collections import deque
from itertools import islice
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np

from xlpe.data.subword import subword_order_from_word
from xlpe.errors import ConfigError, FormatError
from xlpe.io.text import read_lines, tokenize

LEVELS = ("word", "subword")


@dataclass(frozen=True)
class Channel:
    """How one channel's values travel with a batch.

    Args:
        name: the channel's name (what position encodings ask for).
        doc: what the values mean.
        pad: the value of pad positions in a batch.
        pair: one value per pair of source tokens, ``(S, S)`` per sentence, instead of one per token.
        expand: word -> subword rule: ``copy`` (every piece gets its word's value), ``permutation`` (the values
            are a permutation's inverse; each word's pieces keep their inner order, SPEC §4.1), ``pair`` (a
            pair channel: the word pair's value) or ``subword`` (defined on subwords only).
        eos: the value of the EOS token when a sentence's values do not include it: ``own_index`` (its
            position, as APE), ``max_plus_one`` (SPEC §3.2), an integer, or None (it must be given).
        training_only: a supervision target, never needed at inference (e.g. ``dpe_target``).
        hint: how a user produces the values (shown when a channel is missing).
        ranks: the values rank the sentence's tokens: each (the pad value aside) is in ``0..n-1`` for ``n``
            tokens, or the sentence is refused (e.g. DPE targets, SPEC §6.2: ``p(i) < src_len``).
    """

    name: str
    doc: str = "an integer per word"
    pad: int = 0
    pair: bool = False
    expand: str = "copy"
    eos: str | int | None = None
    training_only: bool = False
    hint: str = "--channel NAME=FILE (one line of integers per sentence)"
    ranks: bool = False

    def eos_value(self, values: np.ndarray, n_tokens: int) -> int:
        """The value of the EOS token appended after ``n_tokens`` subwords with (subword) ``values``."""
        if self.eos == "own_index":
            return n_tokens
        if self.eos == "max_plus_one":
            return int(values.max()) + 1 if len(values) else 0
        if isinstance(self.eos, int):
            return self.eos
        raise ConfigError(f"channel {self.name!r}: no rule for the EOS value; give one value more than there are "
                          "tokens (the last one is EOS's)")


#: the one name -> record mapping (DESIGN.md's channel table)
CHANNELS: dict[str, Channel] = {c.name: c for c in (
    Channel("seq", "0..n-1, the token's own position (added by the collator)", eos="own_index"),
    Channel("xl", "pos_XL: the inverse of a preorder permutation, pos_XL[o_j] = j (SPEC §4.1)",
            expand="permutation", eos="own_index",
            hint="--orders FILE (translate, align-from-model) or --train-orders FILE (train): lader order lines from "
                 "`xlpe preorder apply`, or oracle orders from `xlpe orders`; --preorderer DIR (translate, "
                 "align-from-model); or --channel / --train-channel xl=KIND:PATH (e.g. xl=preorderer:DIR)"),
    Channel("depth", "dependency depth; subwords share their word's; EOS = max + 1 (SPEC §3.2)", eos="max_plus_one",
            hint="--trees FILE.conllu, or --channel depth=FILE (one line of per-word depths per sentence)"),
    Channel("tree_rel", "structural relative positions, (S, S) per sentence, EOS included (SPEC §3.3)", pair=True,
            expand="pair", hint="a pair channel given in memory (NAME -> (n+1)x(n+1) matrices)"),
    Channel("tree_word", "the word a token belongs to (its pieces share it); EOS its own id, for structural "
            "relative positions (SPEC §3.3)", pad=-1, eos="own_index",
            hint="--trees FILE.conllu (dependency trees, one per source line)"),
    Channel("tree_head", "the word of the token's word's dependency head; -1 for roots and EOS (SPEC §3.3)",
            pad=-1, eos=-1, hint="--trees FILE.conllu (dependency trees, one per source line)"),
    Channel("dpe_target", "target-order rank of each source subword, -1 where none (SPEC §6.2)", pad=-1,
            expand="subword", eos=-1, training_only=True, ranks=True,
            hint="--channel dpe_target=dpe:FILE (DPE targets from `xlpe orders --dpe`)"),
)}


def register_channel(channel: Channel) -> Channel:
    """Add (or replace) a channel record, e.g. a new per-token channel of your own encoding."""
    if channel.expand not in ("copy", "permutation", "pair", "subword"):
        raise ConfigError(f"channel {channel.name!r}: expand must be copy, permutation, pair or subword")
    if channel.pair != (channel.expand == "pair"):
        raise ConfigError(f"channel {channel.name!r}: pair channels (and only they) use expand='pair'")
    CHANNELS[channel.name] = channel
    return channel


def get_channel(name: str) -> Channel:
    """The record of ``name``; a name without one is a plain per-word integer channel (copied to pieces)."""
    return CHANNELS.get(name) or Channel(name)


def expand_channel(name: str, values: Sequence | np.ndarray | Mapping, word_of: Sequence[int] | None,
                   n_pieces: int) -> np.ndarray:
    """One sentence's channel at subword level, EOS included (length ``n_pieces + 1``; pair channels
    ``(n_pieces + 1)²``, flattened row-major).

    Args:
        name: the channel (its record's rules apply, :func:`get_channel`).
        values: per-word values (``word_of`` given) or per-subword values (``word_of=None``), as a sequence
            or as a sparse mapping ``{index: value}`` (other tokens get the pad value). Either may carry one
            extra trailing value for EOS (a row and a column for pair channels); without it EOS gets the
            channel's rule. Pair channels must include EOS.
        word_of: subword -> word index map (:attr:`xlpe.data.subword.Encoded.word_of`), or None when
            ``values`` are already per subword.
        n_pieces: number of subwords (without EOS).
    """
    ch = get_channel(name)
    units = n_pieces if word_of is None else ((max(word_of) + 1) if len(word_of) else 0)
    unit_name = "subwords" if word_of is None else "words"
    if isinstance(values, Mapping):         # sparse {token index: value}; unlisted tokens get the pad value
        dense = np.full(units, ch.pad, dtype=np.int64)
        for i, x in values.items():
            if not 0 <= int(i) < units:
                raise ConfigError(f"channel {name!r} gives a value for token {i}, but the sentence has {units} "
                                  f"{unit_name}")
            dense[int(i)] = int(x)
        values = dense
    v = np.asarray(values, dtype=np.int64)
    if ch.ranks:
        _check_ranks(ch, v[:units], units, unit_name)
    if ch.pair:
        n = int(round(np.sqrt(v.size))) if v.ndim == 1 else v.shape[0]
        v = v.reshape(n, n)
        if n != units + 1:
            raise ConfigError(f"pair channel {name!r} has a {n}x{n} matrix for {units} {unit_name}; expected "
                              f"{units + 1}x{units + 1} (EOS included)")
        if word_of is None:
            return v.reshape(-1)
        idx = np.asarray(list(word_of) + [n - 1], dtype=np.int64)
        return v[np.ix_(idx, idx)].reshape(-1)

    if word_of is None:
        if len(v) == n_pieces + 1:
            if ch.eos == "own_index" and v[-1] != n_pieces:
                raise ConfigError(f"channel {name!r} has {len(v)} values for {n_pieces} subwords and gives EOS "
                                  f"index {v[-1]}; EOS keeps its own index {n_pieces} (SPEC §4.1)")
            return v
        if len(v) != n_pieces:
            raise ConfigError(f"channel {name!r} has {len(v)} values for {n_pieces} subwords")
        return np.append(v, ch.eos_value(v, n_pieces))

    if ch.expand == "subword":
        raise ConfigError(f"channel {name!r} is defined on subwords; give it at subword level")
    eos = None
    if len(v) == units + 1 and ch.expand != "permutation":   # orders cover the words only; EOS keeps its index
        v, eos = v[:-1], int(v[-1])
    elif len(v) != units:
        raise ConfigError(f"channel {name!r} has {len(v)} values for {units} words")
    wo = np.asarray(word_of, dtype=np.int64)
    if ch.expand == "permutation":
        order = np.argsort(v, kind="stable")              # word order o with pos[o[j]] = j
        out = np.empty(n_pieces, dtype=np.int64)
        out[subword_order_from_word(order.tolist(), wo.tolist())] = np.arange(n_pieces)
    else:
        out = v[wo]
    return np.append(out, eos if eos is not None else ch.eos_value(out, n_pieces))


def _check_ranks(ch: Channel, v: np.ndarray, n: int, unit_name: str) -> None:
    """A :class:`ConfigError` naming the first value of ``v`` outside ``0..n-1`` (the pad value aside)."""
    bad = np.flatnonzero((v != ch.pad) & ((v < 0) | (v >= n)))
    if len(bad):
        i = int(bad[0])
        raise ConfigError(f"channel {ch.name!r} gives token {i} the value {int(v[i])}, outside 0..{n - 1}: its "
                          f"values rank the {n} {unit_name}")


# ------------------------------------------------------------------------------------------------ sources

class ChannelSource:
    """Where a channel's values come from. ``level`` says what they index (``word`` or ``subword``);
    ``description`` names the source in errors (a file path, a model directory)."""

    level: str = "word"
    description: str = "<channel>"

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list:
        """The values of the next ``len(sentences)`` sentences (word lists), the first being input line
        ``first_line``; a source that runs out raises :class:`FormatError` naming itself and the line."""
        raise NotImplementedError

    def finish(self, lines: int) -> None:
        """Called after the last sentence (``lines`` in all): a file with more lines is an error."""


class IterableSource(ChannelSource):
    """Values given in memory (or any iterable: a generator, a file reader), one item per sentence."""

    def __init__(self, items: Iterable, level: str = "word", description: str = "<channel values>"):
        if level not in LEVELS:
            raise ConfigError(f"channel level must be 'word' or 'subword', not {level!r}")
        self._items: Iterator = iter(items)
        self.level, self.description = level, description

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list:
        out = list(islice(self._items, len(sentences)))
        if len(out) < len(sentences):
            line = first_line + len(out)
            raise FormatError(f"ends after {line - 1} sentences but the text has more",
                              self.description, line, "one channel line per source line")
        return out

    def finish(self, lines: int) -> None:
        if next(self._items, None) is not None:
            raise FormatError(f"has more lines than the text ({lines})", self.description, lines + 1,
                              "one channel line per source line")


class Source:
    """Where the values of several channels come from at once (a file or model that fills them all): ``channels``
    names them, and :meth:`take` reads the next sentences once for all of them. ``level`` and ``description`` as
    for :class:`ChannelSource`."""

    channels: tuple[str, ...] = ()
    level: str = "word"
    description: str = "<channels>"
    _split: dict | None = None

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list[dict[str, object]]:
        """One ``{channel: values}`` per sentence of ``sentences`` (see :meth:`ChannelSource.take`)."""
        raise NotImplementedError

    def finish(self, lines: int) -> None:
        """Called once after the last sentence (``lines`` in all), as :meth:`ChannelSource.finish`."""

    def split(self) -> dict[str, ChannelSource]:
        """A :class:`ChannelSource` per channel of :attr:`channels` (the same ones at every call). The first of them
        asked for a sentence reads it (once); the others take its values from a buffer. Every one must be asked for
        the same sentences, as the channels of one text are; :meth:`SharedReading.drop` stops buffering a channel
        nobody asks for."""
        if self._split is None:
            shared = SharedReading(self)
            self._split = {name: SharedChannel(shared, name) for name in self.channels}
        return dict(self._split)


class SharedReading:
    """The one reading of a :class:`Source` behind its :meth:`~Source.split` channels: the values read but
    not yet taken, per channel."""

    def __init__(self, source: Source):
        self.source = source
        self.buffers: dict[str, deque] = {name: deque() for name in source.channels}
        self.finished = False

    def take(self, name: str, sentences: Sequence[Sequence[str]], first_line: int) -> list:
        if name not in self.buffers:
            raise ConfigError(f"{self.source.description}: channel {name!r} was dropped from this reading")
        buf = self.buffers[name]
        have = len(buf)
        if have < len(sentences):
            for row in self.source.take(sentences[have:], first_line + have):
                for c, b in self.buffers.items():
                    b.append(row[c])
        return [buf.popleft() for _ in range(len(sentences))]

    def finish(self, lines: int) -> None:
        if not self.finished:
            self.finished = True
            self.source.finish(lines)

    def drop(self, names: Iterable[str]) -> None:
        """Stop keeping the values of ``names``."""
        for name in names:
            self.buffers.pop(name, None)


class SharedChannel(ChannelSource):
    """One channel of a :class:`SharedReading`."""

    def __init__(self, shared: SharedReading, name: str):
        self.shared, self.name = shared, name
        self.level, self.description = shared.source.level, shared.source.description

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list:
        return self.shared.take(self.name, sentences, first_line)

    def finish(self, lines: int) -> None:
        self.shared.finish(lines)


#: file kinds: kind -> (level, description)
FILE_KINDS: dict[str, tuple[str, str]] = {
    "orders": ("word", "lader order lines (a 0-based permutation per sentence); the channel is its inverse, "
                       "pos_XL (SPEC §4.1)"),
    "subword-orders": ("subword", "order lines over subwords (a preorderer run on subword text, as Ding et al.); "
                                  "the channel is its inverse"),
    "dpe": ("subword", "Pharaoh 'i-p' lines over subword indices, 0-based (SPEC §6.2); tokens without a link "
                       "get no target"),
    "ints": ("word", "space-separated integers, one value per word (one line per sentence)"),
}


def file_source(kind: str, path: str | os.PathLike) -> IterableSource:
    """A streaming reader of a channel file (:data:`FILE_KINDS`); malformed lines raise :class:`FormatError`
    with ``file:line``."""
    if kind not in FILE_KINDS:
        raise ConfigError(f"unknown channel file kind {kind!r} (expected one of {', '.join(FILE_KINDS)})")
    if not os.path.exists(path):
        raise ConfigError(f"channel file {os.fspath(path)} not found")
    return IterableSource(_file_items(kind, path), FILE_KINDS[kind][0], os.fspath(path))


def _file_items(kind: str, path: str | os.PathLike) -> Iterator:
    if kind in ("orders", "subword-orders"):
        from xlpe.io.orders import invert_order, read_orders
        return (invert_order(o) for o in read_orders(path))
    if kind == "dpe":
        return _dpe_items(path)
    return _int_items(path)


def _dpe_items(path) -> Iterator[dict[int, int]]:
    from xlpe.io.alignments import parse_alignment_line
    for lineno, text in read_lines(path):
        a = parse_alignment_line(text, 0, path=path, lineno=lineno)
        if a.possible_only:
            i, p = min(a.possible_only)
            raise FormatError(f"DPE target {i}p{p} is a possible link", path, lineno, "sure links 'i-p' only")
        targets: dict[int, int] = {}
        for i, p in sorted(a.sure):
            if i in targets:
                raise FormatError(f"source token {i} has two DPE targets", path, lineno,
                                  "at most one 'i-p' link per source token")
            targets[i] = p
        yield targets


def _int_items(path) -> Iterator[list[int]]:
    for lineno, text in read_lines(path):
        try:
            yield [int(t) for t in tokenize(text)]
        except ValueError:
            raise FormatError("non-integer value", path, lineno, "space-separated integers") from None


def as_source(value, level: str = "word", description: str = "<channel values>") -> ChannelSource:
    """``value`` if it is a :class:`ChannelSource`, else an :class:`IterableSource` over it (a string or path is
    refused: it would be read as a sequence of characters; open specs with :func:`xlpe.sources.open_source`)."""
    if isinstance(value, (str, bytes, os.PathLike)):
        raise ConfigError(f"{description}: {value!r} is a path or spec, not channel values; open it with "
                          "xlpe.sources.open_source, or pass it where specs are taken (translate_file, DataConfig)")
    return value if isinstance(value, ChannelSource) else IterableSource(value, level, description)
