"""Open channel sources from ``NAME=KIND:PATH`` specs, whatever layer computes them.

Kinds: the channel files of :data:`xlpe.data.channels.FILE_KINDS` (``orders``, ``subword-orders``, ``dpe``,
``ints``) and ``preorderer`` (a BTG preorderer directory, run on the fly: :mod:`xlpe.reorder.preorderer_source`).
A spec without a kind is a file of the channel's usual kind (``xl`` -> ``orders``, ``dpe_target`` -> ``dpe``,
anything else ``ints``). ``xlpe train``, ``xlpe translate`` and ``xlpe align-from-model`` take
``--channel NAME=[KIND:]PATH``; their ``--orders`` / ``--preorderer`` options are shortcuts for ``xl``.
"""

from __future__ import annotations

import os
from typing import Mapping

from xlpe.data.channels import FILE_KINDS, ChannelSource, file_source, get_channel
from xlpe.errors import ConfigError

#: the kinds of computed sources (besides the file kinds)
COMPUTED_KINDS = {"preorderer": "a BTG preorderer directory (`xlpe preorder train`), predicting pos_XL on the fly",
                  "conllu": "dependency trees in CoNLL-U, one per source line (channels depth, tree_word, tree_head)"}
DEFAULT_KIND = {"xl": "orders", "dpe_target": "dpe", "tree_word": "conllu", "tree_head": "conllu"}
#: the channels a trees file (``--trees FILE``) gives
TREE_CHANNELS = ("depth", "tree_word", "tree_head")


def split_spec(name: str, spec: str) -> tuple[str, str]:
    """``(kind, path)`` of a ``[KIND:]PATH`` spec for channel ``name``."""
    kind, sep, path = spec.partition(":")
    if sep and (kind in FILE_KINDS or kind in COMPUTED_KINDS):
        return kind, path
    return DEFAULT_KIND.get(name, "ints"), spec


def open_source(name: str, spec: str | os.PathLike | ChannelSource, *, processes: int = 1) -> ChannelSource:
    """The source a spec names, for channel ``name`` (a :class:`ChannelSource` is returned as is)."""
    if isinstance(spec, ChannelSource):
        return spec
    kind, path = split_spec(name, os.fspath(spec))
    if not path:
        raise ConfigError(f"channel {name!r}: empty path in source {spec!r}")
    if kind == "preorderer":
        from xlpe.reorder.preorderer_source import PreordererSource
        return PreordererSource(path, processes)
    if kind == "conllu":
        from xlpe.syntax.source import TreesSource
        return TreesSource(path, name)
    if get_channel(name).expand == "permutation" and kind not in ("orders", "subword-orders"):
        raise ConfigError(f"channel {name!r} holds a permutation's inverse: give an orders file "
                          f"(orders:PATH or subword-orders:PATH) or a preorderer, not {kind!r}")
    return file_source(kind, path)


def open_sources(specs: Mapping[str, str | os.PathLike | ChannelSource], *, processes: int = 1
                 ) -> dict[str, ChannelSource]:
    """:func:`open_source` for every ``name -> spec``."""
    return {k: open_source(k, v, processes=processes) for k, v in specs.items()}


def check_channels(cfg, names, where: str, *, training: bool) -> None:
    """A :class:`ConfigError` before any work when the model ``cfg`` reads a channel that ``names`` (what the
    data gives) lacks. Training data must give the encodings' inputs and targets; dev, test and inference
    data their inputs only."""
    from xlpe.nn.positions import required_inputs, required_targets

    needed = required_inputs(cfg) | (required_targets(cfg) if training else set())
    missing = sorted(needed - set(names))
    if missing:
        hints = "; ".join(f"{m}: {get_channel(m).hint}" for m in missing)
        raise ConfigError(f"the model (pe={list(cfg.pe)}) reads position channel(s) {missing}, which the {where} data "
                          f"lacks; give {hints}")


def tree_specs(trees: str | os.PathLike | None, reads: set[str] | None = None) -> dict[str, str]:
    """``--trees FILE``: the ``conllu:FILE`` specs of the tree channels (those in ``reads`` when given)."""
    if not trees:
        return {}
    return {c: "conllu:" + os.fspath(trees) for c in TREE_CHANNELS if reads is None or c in reads}


def with_xl_shortcuts(channels: Mapping[str, str | os.PathLike | ChannelSource] | None, *,
                      orders: str | os.PathLike | None = None, orders_level: str = "word",
                      preorderer: str | os.PathLike | None = None) -> dict[str, str | ChannelSource]:
    """``channels`` plus the ``--orders`` / ``--preorderer`` shortcuts of the ``xl`` channel."""
    specs: dict[str, str | ChannelSource] = {k: v if isinstance(v, ChannelSource) else os.fspath(v)
                                             for k, v in (channels or {}).items()}
    if orders_level not in ("word", "subword"):
        raise ConfigError(f"orders_level must be 'word' or 'subword', not {orders_level!r}")
    if orders and preorderer:
        raise ConfigError("give either orders (a file) or a preorderer (predicts them), not both")
    if (orders or preorderer) and "xl" in specs:
        raise ConfigError("channel 'xl' is given twice: by --orders/--preorderer and by --channel xl=...")
    if orders:
        specs["xl"] = ("orders:" if orders_level == "word" else "subword-orders:") + os.fspath(orders)
    if preorderer:
        if orders_level != "word":
            raise ConfigError("an on-the-fly preorderer orders words; orders_level must be 'word'")
        specs["xl"] = "preorderer:" + os.fspath(preorderer)
    return specs


def with_trees(specs: dict, trees: str | os.PathLike | None, cfg) -> dict:
    """``specs`` plus the ``--trees FILE`` shortcut: the tree channels that the model ``cfg`` reads (a trees file
    for a model that reads none of them is a :class:`ConfigError`: it would be ignored)."""
    if not trees:
        return specs
    from xlpe.nn.positions import required_inputs

    extra = tree_specs(trees, required_inputs(cfg))
    if not extra:
        raise ConfigError(f"the model (pe={list(cfg.pe)}) reads no tree channel: --trees would be ignored")
    twice = sorted(set(extra) & set(specs))
    if twice:
        raise ConfigError(f"channel(s) {twice} given twice: by --trees and by --channel")
    return {**specs, **extra}
