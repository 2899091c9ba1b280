"""The command line's source shortcuts, in one table: ``--orders FILE``, ``--trees FILE`` and ``--preorderer DIR``
of ``xlpe translate`` and ``xlpe align-from-model``, and ``--train-orders`` / ``--dev-orders`` / ``--train-trees`` /
``--dev-trees`` of ``xlpe train`` (also its TOML ``[data]`` keys ``train_orders``, ...), each name one channel
source ``KIND:PATH`` (:mod:`xlpe.sources`) that fills the channels its kind declares. ``--orders-level subword``
reads the orders as subword orders."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any, Mapping

from xlpe.errors import ConfigError

LEVELS = ("word", "subword")


@dataclass(frozen=True)
class Shortcut:
    """One shortcut option: the source ``kind`` its value is (``subword_kind`` with ``--orders-level subword``),
    its help (``{side}`` names the text it belongs to), and whether ``xlpe train`` has it per split."""

    kind: str
    help: str
    splits: bool = True
    subword_kind: str | None = None
    metavar: str = "FILE"


#: option name -> shortcut
SHORTCUTS: dict[str, Shortcut] = {
    "orders": Shortcut("orders", "lader order lines of {side} -> channel 'xl' (XL-PE models), a shortcut for "
                                 "--{prefix}channel xl=orders:FILE", subword_kind="subword-orders"),
    "trees": Shortcut("conllu", "dependency trees of {side}, CoNLL-U, one tree per line (from `xlpe parse`): the "
                                "depth / tree_word / tree_head channels of structural PE that the model reads, read "
                                "once (a shortcut for --{prefix}channel NAME=conllu:FILE)"),
    "preorderer": Shortcut("preorderer", "BTG preorderer directory (`xlpe preorder train`): predict the orders of "
                                         "{side} on the fly, from the source alone (XL-PE models)", splits=False,
                           metavar="DIR"),
}
#: the splits of ``xlpe train``: option prefix -> the text it names
SPLITS = {"train": "the training source", "dev": "the dev source"}
LEVEL_HELP = ("granularity of {flags}: 'word' (expanded to subwords, each word's pieces kept together) or 'subword' "
              "(one index per subword)")


def add_shortcut_arguments(p: argparse.ArgumentParser, side: str) -> None:
    """``--orders``, ``--orders-level``, ``--trees`` and ``--preorderer`` (``side``: what the input is called)."""
    for name, sc in SHORTCUTS.items():
        p.add_argument("--" + name, default=None, metavar=sc.metavar, help=sc.help.format(side=side, prefix=""))
        if sc.subword_kind:
            p.add_argument(f"--{name}-level", default="word", choices=LEVELS,
                           help=LEVEL_HELP.format(flags=f"--{name}"))


def add_split_shortcut_arguments(group) -> None:
    """``--train-orders``, ``--dev-orders``, ``--train-trees``, ``--dev-trees`` and ``--orders-level`` of
    ``xlpe train`` (dests ``data.train_orders``, ...: the TOML ``[data]`` keys)."""
    for name, sc in SHORTCUTS.items():
        if not sc.splits:
            continue
        for split, side in SPLITS.items():
            group.add_argument(f"--{split}-{name}", dest=f"data.{split}_{name}", default=argparse.SUPPRESS,
                               metavar=sc.metavar, help=sc.help.format(side=side, prefix=split + "-"))
        if sc.subword_kind:
            flags = " / ".join(f"--{split}-{name}" for split in SPLITS)
            group.add_argument(f"--{name}-level", dest=f"data.{name}_level", default=argparse.SUPPRESS,
                               choices=LEVELS, help=LEVEL_HELP.format(flags=flags) + " (default: word)")


def shortcut_sources(given: Mapping[str, Any], levels: Mapping[str, str] | None = None) -> list[str]:
    """The ``KIND:PATH`` source specs of the shortcuts ``given`` (name -> value or None); ``levels``: the
    ``--NAME-level`` of a shortcut that has one."""
    levels = levels or {}
    out = []
    for name, value in given.items():
        sc = SHORTCUTS[name]
        level = levels.get(name, "word")
        if sc.subword_kind and level not in LEVELS:
            raise ConfigError(f"{name}_level must be 'word' or 'subword', not {level!r}")
        if value is None or value == "":
            continue
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a path, not {value!r}")
        out.append(f"{sc.subword_kind if level == 'subword' and sc.subword_kind else sc.kind}:{value}")
    return out


def sources_from_args(args: argparse.Namespace) -> list[str]:
    """The sources of the shortcut options of ``xlpe translate`` / ``xlpe align-from-model``."""
    given = {name: getattr(args, name, None) for name in SHORTCUTS}
    levels = {name: getattr(args, f"{name}_level") for name, sc in SHORTCUTS.items() if sc.subword_kind}
    if given.get("preorderer") and any(v != "word" for v in levels.values()):
        raise ConfigError("an on-the-fly preorderer orders words; --orders-level must be 'word'")
    return shortcut_sources(given, levels)


def data_with_shortcuts(data: Mapping[str, Any]) -> dict[str, Any]:
    """The ``[data]`` table of ``xlpe train`` with its split shortcuts (``train_orders``, ``dev_trees``, ...,
    ``orders_level``) moved into ``train_sources`` / ``dev_sources``."""
    data = dict(data)
    levels = {name: data.pop(f"{name}_level", "word") for name, sc in SHORTCUTS.items() if sc.subword_kind}
    for split in SPLITS:
        given = {name: data.pop(f"{split}_{name}", None) for name, sc in SHORTCUTS.items() if sc.splits}
        extra = shortcut_sources(given, levels)
        if extra:
            listed = data.get(f"{split}_sources", [])
            if not isinstance(listed, (list, tuple)):
                raise ConfigError(f"{split}_sources must be a list of [NAME=]KIND:PATH specs, not {listed!r}")
            data[f"{split}_sources"] = [*listed, *extra]
    return data
