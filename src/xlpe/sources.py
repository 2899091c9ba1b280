"""Channel sources: what fills the position channels (DESIGN.md "position channels"), opened from specs.

A **source spec** is ``[NAME=][KIND:]PATH``. Its kind says what the path holds and which channels it fills,
as data in one table, :data:`KINDS`: ``orders``, ``subword-orders`` and ``preorderer`` fill ``xl``, ``dpe``
fills ``dpe_target``, ``conllu`` fills ``depth``, ``tree_word`` and ``tree_head`` (``conllu-strict`` too, from
trees that must have exactly the source line's tokens and one root each), and ``ints`` the one channel its spec
names. ``NAME=`` makes a spec fill that one channel: any channel for a kind that fills one, one of its channels for
a kind that fills several (``depth=conllu:t.conllu``). A named spec without a kind is of the
channel's usual kind (``xl`` -> ``orders``, ``dpe_target`` -> ``dpe``, ``tree_word`` / ``tree_head`` ->
``conllu``, anything else ``ints``).

The API takes ``sources=[...]`` (specs, or opened :class:`~xlpe.data.channels.Source` objects such as a
:class:`~xlpe.syntax.source.TreesSource`) and, channel by channel, ``channels={NAME: spec or ChannelSource}``.
:func:`channel_specs` turns both into one ``name -> spec`` mapping (a source fills the channels the model reads
among those it declares); :func:`open_sources` opens it, each file or model once for all the channels it fills.
The command line's ``--channel NAME=[KIND:]PATH`` is the per-channel form, its ``--orders`` / ``--trees`` /
``--preorderer`` shortcuts are sources (:mod:`xlpe.cli.shortcuts`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from xlpe.data.channels import FILE_KINDS, ChannelSource, SharedChannel, Source, file_source, get_channel
from xlpe.errors import ConfigError
from xlpe.nn.positions import required_inputs, required_targets
from xlpe.reorder.preorderer_source import PreordererSource
from xlpe.syntax.source import TREE_CHANNELS, TreesSource

Opener = Callable[[str, tuple, int], dict]


def _file_opener(kind: str) -> Opener:
    return lambda path, names, processes: {name: file_source(kind, path) for name in names}


def _open_trees(path: str, names: tuple, processes: int) -> dict:
    return TreesSource(path, names).split()


def _open_strict_trees(path: str, names: tuple, processes: int) -> dict:
    return TreesSource(path, names, strict=True).split()


def _open_preorderer(path: str, names: tuple, processes: int) -> dict:
    return {name: PreordererSource(path, processes) for name in names}


@dataclass(frozen=True)
class SourceKind:
    """A kind of source: what ``KIND:PATH`` opens and which channels it fills.

    Args:
        name: the kind, as specs write it.
        fills: the channels one source of this kind fills; empty: the one channel its spec names.
        doc: what the path holds.
        open: ``(path, channel names, processes) -> {name: ChannelSource}``, reading the path once for all of them.
        usual_for: the channels whose named specs without a kind are of this kind.
    """

    name: str
    fills: tuple[str, ...]
    doc: str
    open: Opener
    usual_for: tuple[str, ...] = ()


#: the one kind -> record table
KINDS: dict[str, SourceKind] = {k.name: k for k in (
    SourceKind("orders", ("xl",), FILE_KINDS["orders"][1], _file_opener("orders"), usual_for=("xl",)),
    SourceKind("subword-orders", ("xl",), FILE_KINDS["subword-orders"][1], _file_opener("subword-orders")),
    SourceKind("dpe", ("dpe_target",), FILE_KINDS["dpe"][1], _file_opener("dpe"), usual_for=("dpe_target",)),
    SourceKind("ints", (), FILE_KINDS["ints"][1], _file_opener("ints")),
    SourceKind("conllu", TREE_CHANNELS, "dependency trees in CoNLL-U, one per source line", _open_trees,
               usual_for=("tree_word", "tree_head")),
    SourceKind("conllu-strict", TREE_CHANNELS, "dependency trees in CoNLL-U, one per source line, with exactly the "
                                               "line's tokens and one root each", _open_strict_trees),
    SourceKind("preorderer", ("xl",), "a BTG preorderer directory (`xlpe preorder train`), predicting pos_XL on "
                                      "the fly", _open_preorderer),
)}
#: the kinds that hold a permutation's inverse (for channels whose record says ``expand="permutation"``)
ORDER_KINDS = ("orders", "subword-orders", "preorderer")
_NAME = re.compile(r"[A-Za-z_]\w*")

SourceSpec = str | os.PathLike | Source
ChannelSpec = str | os.PathLike | ChannelSource


def split_spec(name: str, spec: str) -> tuple[str, str]:
    """``(kind, path)`` of a ``[KIND:]PATH`` spec for channel ``name`` (a colon that names no kind belongs to the
    path)."""
    kind, sep, path = spec.partition(":")
    if sep and kind in KINDS:
        return kind, path
    return next((k.name for k in KINDS.values() if name in k.usual_for), "ints"), spec


def parse_spec(spec: str | os.PathLike) -> tuple[str | None, str, str]:
    """``(name or None, kind, path)`` of a ``[NAME=][KIND:]PATH`` source spec."""
    text = os.fspath(spec)
    name, sep, rest = text.partition("=")
    if sep and _NAME.fullmatch(name):
        return (name, *split_spec(name, rest))
    kind, sep, path = text.partition(":")
    if not (sep and kind in KINDS):
        raise ConfigError(f"source {text!r} names no kind: write KIND:PATH (kinds: {', '.join(KINDS)}) or "
                          "NAME=[KIND:]PATH")
    return None, kind, path


def _check(name: str, kind: str, path: str, spec: str) -> None:
    """A :class:`ConfigError` for a named spec that cannot fill channel ``name``."""
    if not path:
        raise ConfigError(f"channel {name!r}: empty path in source {spec!r}")
    fills = KINDS[kind].fills
    if len(fills) > 1 and name not in fills:
        raise ConfigError(f"a {kind!r} source fills the channels {', '.join(fills)}, not {name!r}")
    if get_channel(name).expand == "permutation" and kind not in ORDER_KINDS:
        raise ConfigError(f"channel {name!r} holds a permutation's inverse: give an orders file "
                          f"(orders:PATH or subword-orders:PATH) or a preorderer, not {kind!r}")


def _ignored(who: str, names, what: str) -> ConfigError:
    return ConfigError(f"{who} reads no channel {sorted(names)}{what}: it would be ignored; leave it out")


def channel_specs(sources: Iterable[SourceSpec] = (), channels: Mapping[str, ChannelSpec | Any] | None = None, *,
                  reads: set[str] | None = None, who: str = "the model") -> dict[str, Any]:
    """``name -> spec`` of the channels that ``sources`` and ``channels`` fill, without opening anything.

    Args:
        sources: ``[NAME=][KIND:]PATH`` specs, or :class:`~xlpe.data.channels.Source` objects: each fills the
            channels it declares, those in ``reads`` when given (a source that fills none of them is a
            :class:`ConfigError`: it would be ignored).
        channels: the per-channel form, ``name -> [KIND:]PATH``, a :class:`ChannelSource` or in-memory values
            (kept as they are), whatever ``reads`` says (:func:`check_read` checks them against it).
        reads: the channels the model reads (None: every channel the sources declare).
        who: how errors name the reader.

    Returns the specs as ``KIND:PATH`` (named by kind, so :func:`split_spec` reads them back), in the order given,
    with a source object's channels as the :class:`ChannelSource` views of one reading. A channel filled twice is
    a :class:`ConfigError`.
    """
    if isinstance(sources, (str, os.PathLike, Source)):
        raise ConfigError(f"sources must be a list of specs or Source objects, not {sources!r}")
    out: dict[str, Any] = {}
    given: dict[str, str] = {}

    def put(name: str, value: Any, what: str) -> None:
        if name in out:
            raise ConfigError(f"channel {name!r} is filled twice: by {given[name]} and by {what}")
        out[name], given[name] = value, what

    for src in sources:
        if isinstance(src, Source):
            keep = [c for c in src.channels if reads is None or c in reads]
            if not keep:
                raise _ignored(who, src.channels, f" of {src.description}")
            views = src.split()
            for name, view in views.items():
                if name not in keep and isinstance(view, SharedChannel):
                    view.shared.drop([name])
            for name in keep:
                put(name, views[name], src.description)
            continue
        if isinstance(src, ChannelSource):
            raise ConfigError(f"{src.description}: a ChannelSource fills one channel; give it by name, "
                              "channels={NAME: source}")
        name, kind, path = parse_spec(src)
        text = os.fspath(src)
        if name is not None:
            _check(name, kind, path, text)
            if reads is not None and name not in reads:
                raise _ignored(who, [name], f" of {text}")
            put(name, f"{kind}:{path}", text)
            continue
        if not path:
            raise ConfigError(f"empty path in source {text!r}")
        fills = KINDS[kind].fills
        if not fills:
            raise ConfigError(f"a {kind!r} source fills the one channel its spec names: write NAME={text}")
        keep = [c for c in fills if reads is None or c in reads]
        if not keep:
            raise _ignored(who, fills, f" of {text}")
        for c in keep:
            put(c, f"{kind}:{path}", text)
    for name, value in (channels or {}).items():
        if isinstance(value, (str, os.PathLike)):
            kind, path = split_spec(name, os.fspath(value))
            _check(name, kind, path, os.fspath(value))
            put(name, f"{kind}:{path}", f"channel {name}={os.fspath(value)}")
        else:
            put(name, value, f"channel {name}={getattr(value, 'description', '<values>')}")
    return out


def check_read(channels: Iterable[str], reads: set[str], who: str = "the model") -> None:
    """A :class:`ConfigError` when the per-channel form gives a channel that the model does not read."""
    unread = sorted(set(channels) - reads)
    if unread:
        raise ConfigError(f"{who} reads no channel {unread}: those --channel options would be ignored; leave them "
                          "out")


def open_sources(sources: Iterable[SourceSpec] | Mapping[str, ChannelSpec | Any] = (),
                 channels: Mapping[str, ChannelSpec | Any] | None = None, *, reads: set[str] | None = None,
                 processes: int = 1, who: str = "the model") -> dict[str, Any]:
    """The channel sources of ``sources`` and ``channels`` (see :func:`channel_specs`; a mapping as ``sources``
    is the per-channel form), opened: a file or model that fills several channels (``depth=conllu:t``,
    ``tree_word=conllu:t``, or ``conllu:t`` alone) is read once for all of them. ``processes``: of an on-the-fly
    preorderer. :class:`ChannelSource` objects and in-memory values are returned as they are."""
    if isinstance(sources, Mapping):
        sources, channels = (), {**sources, **(channels or {})}
    specs = channel_specs(sources, channels, reads=reads, who=who)
    groups: dict[tuple[str, str], list[str]] = {}
    for name, spec in specs.items():
        if isinstance(spec, str):
            groups.setdefault(split_spec(name, spec), []).append(name)
    opened: dict[str, ChannelSource] = {}
    for (kind, path), names in groups.items():
        if len(KINDS[kind].fills) > 1:
            opened.update(KINDS[kind].open(path, tuple(names), processes))
        else:                               # one reader per channel: a file of one channel is read by one
            for name in names:
                opened.update(KINDS[kind].open(path, (name,), processes))
    return {name: opened.get(name, spec) if isinstance(spec, str) else spec for name, spec in specs.items()}


def open_source(name: str, spec: ChannelSpec, *, processes: int = 1) -> ChannelSource:
    """The source of channel ``name`` that a ``[KIND:]PATH`` spec names (a :class:`ChannelSource` is returned as
    is)."""
    return open_sources({name: spec}, processes=processes)[name]


def source_paths(sources: Iterable[SourceSpec] = (), channels: Mapping[str, Any] | None = None) -> list[str]:
    """The paths that the specs among ``sources`` and ``channels`` read (for checks that an output does not
    overwrite an input)."""
    out = [parse_spec(s)[2] for s in sources if isinstance(s, (str, os.PathLike))]
    out += [split_spec(k, os.fspath(v))[1] for k, v in (channels or {}).items() if isinstance(v, (str, os.PathLike))]
    return out


def check_channels(cfg, names, where: str, *, training: bool) -> None:
    """A :class:`ConfigError` before any work when the model ``cfg`` reads a channel that ``names`` (what the
    data gives) lacks. Training data must give the encodings' inputs and targets; dev, test and inference
    data their inputs only."""
    needed = required_inputs(cfg) | (required_targets(cfg) if training else set())
    missing = sorted(needed - set(names))
    if missing:
        hints = "; ".join(f"{m}: {get_channel(m).hint}" for m in missing)
        raise ConfigError(f"the model (pe={list(cfg.pe)}) reads position channel(s) {missing}, which the {where} data "
                          f"lacks; give {hints}")
