"""Error messages of the Python API in the words of the command line: API parameter names become the flags the
user typed (:func:`flag_message`), for the entry point and for commands that report errors themselves."""

from __future__ import annotations

import argparse
import re


def _flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """``field name -> --flag`` for the options of ``parser`` and of its sub-commands (a dest ``train.lr``
    names the field ``lr``)."""
    out: dict[str, str] = {}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                for k, v in _flags(sub).items():
                    out.setdefault(k, v)
            continue
        longs = [o for o in a.option_strings if o.startswith("--")]
        if longs and a.dest not in (argparse.SUPPRESS, "help"):
            out.setdefault(a.dest.rsplit(".", 1)[-1], longs[0])
    return out


def flag_message(message: str, parser: argparse.ArgumentParser | None, aliases: dict[str, str] | None = None) -> str:
    """``message`` of an error from the Python API, with the API's parameter names replaced by the command-line
    flags the user typed: ``best_metric='bleu' needs dev_bleu=True`` -> ``--best-metric 'bleu' needs
    --dev-bleu``. A flag of the message that this command does not have, but has for training or dev data
    (``--orders`` for ``--train-orders``), is replaced too. ``aliases``: API names whose flag is named otherwise
    (``{"rel_iterations": "--length"}``)."""
    if parser is None:
        return message
    flags = _flags(parser)
    names = {**flags, **(aliases or {})}
    for name, flag in sorted(names.items(), key=lambda kv: -len(kv[0])):
        if "_" not in name or flag in message:      # a word of prose as well (only as name=value below), or named
            continue
        message = re.sub(rf"(?<![\w.\-/]){re.escape(name)}(?:=True\b|=(?=\S)|(?![\w\-]|\.\w))",
                         lambda m: flag + (" " if m.group(0).endswith("=") else ""), message)
    for name, flag in names.items():                     # name=value for one-word names: pe=['xl'] -> --pe ['xl']
        message = re.sub(rf"(?<![\w.\-/]){re.escape(name)}(?:=True\b|=(?=\S))",
                         lambda m: flag + (" " if m.group(0).endswith("=") else ""), message)
    known = set(flags.values())
    side = "--dev-" if re.search(r"\bdev data\b", message) else "--train-"

    def swap(m):
        flag = m.group(0)
        if flag in known:
            return flag
        other = side + flag[2:]
        return other if other in known else flag
    return re.sub(r"(?<![\w-])--[a-z][a-z0-9-]*", swap, message)
