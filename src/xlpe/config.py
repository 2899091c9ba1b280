"""One configuration mechanism for every command: dataclasses -> command-line options, TOML files and
``--set SECTION.KEY=VALUE`` overrides.

A config is a dataclass (or a few, one per TOML table) whose fields carry their help text via :func:`option`.
:func:`add_dataclass_arguments` turns the fields into ``--flag`` options; :func:`merge_sources` merges, in
order of precedence, the dataclass defaults < a ``--config`` TOML file < ``--set`` overrides < explicit flags
into one dict per table; :func:`build` makes the dataclass, naming an unknown key and the valid ones.
``xlpe train``, ``xlpe synth``, ``xlpe demo`` and every ``xlpe experiment`` use it.

(Why not jsonargparse or tyro: the commands are argparse sub-parsers loaded lazily, the option names and
``--help`` texts are a public contract, and the engine is ~150 lines with no dependency; a library would
bring its own naming and help layout for little gain.)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import types
import typing
from typing import Any, Iterable, Mapping

from xlpe.errors import ConfigError
from xlpe.keys import WHEN_SET

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10
    import tomli as tomllib


def option(default: Any = dataclasses.MISSING, help: str = "", *, factory=None, choices=None, metavar=None,
           aliases: tuple[str, ...] = (), when_set: bool = False):
    """A dataclass field with its command-line help (and optional ``choices``, ``metavar`` and flag ``aliases``,
    e.g. an older spelling that stays accepted). ``when_set``: the field enters a cache key that holds its whole
    config only when it differs from its default (:func:`xlpe.keys.when_set`)."""
    meta = {"help": help, "choices": choices, "metavar": metavar, "aliases": tuple(aliases)}
    if when_set:
        meta[WHEN_SET] = True
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def parse_value(text: str) -> Any:
    """A TOML value (``3``, ``0.5``, ``true``, ``[1, 2]``, ``"x"``), or the text itself when it is not one."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


#: the largest config file read (a config is a few kilobytes; ``--config /dev/zero`` would fill the memory)
MAX_CONFIG_BYTES = 16 << 20


def read_config_text(path: str | os.PathLike) -> str:
    """The text of a config file (UTF-8, a byte-order mark dropped); a missing file, a directory, a file over
    :data:`MAX_CONFIG_BYTES` or one that is not UTF-8 text is a :class:`ConfigError` naming it (and the line).
    A pipe (``--config <(...)``) is read like a file."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"config file {os.fspath(path)} not found") from None
    except IsADirectoryError:
        raise ConfigError(f"config file {os.fspath(path)} is a directory") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"config file {os.fspath(path)} is larger than {MAX_CONFIG_BYTES >> 20} MiB: not a config")
    try:
        return data.decode("utf-8-sig")            # a byte-order mark is not part of the text; drop it
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(f"{os.fspath(path)}:{line}: not UTF-8 text (byte 0x{data[e.start]:02x}); config files "
                          "are UTF-8") from None


def read_toml(path: str) -> dict[str, Any]:
    """A TOML file as a dict; a missing or invalid file (:func:`read_config_text`; not TOML) is a
    :class:`ConfigError` naming it."""
    text = read_config_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from None


def max_workers() -> int:
    """The most threads or processes one option may ask for: 8 per CPU of this machine, and at least 64 (more
    only thrash; a typing slip such as ``--processes 100000`` would otherwise start them)."""
    return max(64, 8 * (os.cpu_count() or 1))


def check_workers(n: Any, flag: str, *, zero: str | None = None) -> int:
    """``n`` as a count of threads or processes given by option ``flag``: an integer from 1 (or 0, when ``zero``
    says what 0 means, e.g. "torch's default") up to :func:`max_workers`; anything else is a
    :class:`ConfigError` naming ``flag``. Every command that takes ``--threads`` or ``--processes`` checks them
    here."""
    low = 0 if zero is not None else 1
    if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= max_workers():
        zero_text = f" ({zero})" if zero is not None else ""
        raise ConfigError(f"{flag} must be an integer from {low}{zero_text} to {max_workers()}, not {n!r}")
    return n


def parse_pairs(items: Iterable[str], what: str, value=str) -> dict[str, Any]:
    """``["A=x", "B=y"]`` -> ``{"A": value("x"), "B": value("y")}``; anything else names ``what`` in the error."""
    out = {}
    for item in items:
        if "=" not in item or not item.split("=", 1)[0].strip():
            raise ConfigError(f"{what} expects NAME=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        out[k.strip()] = value(v)
    return out


def _like(old: Any, new: Any) -> Any:
    """``new`` as a float where it overrides a float (``3`` over ``1.0`` is ``3.0``), element-wise in lists:
    a recipe's cache keys hash the values, so ``--set x=3`` and a config that says ``x = 3.0`` must agree."""
    def is_int(v):
        return isinstance(v, int) and not isinstance(v, bool)
    if isinstance(old, float) and is_int(new):
        return float(new)
    if isinstance(old, list) and old and all(isinstance(v, float) for v in old) and isinstance(new, list):
        return [float(v) if is_int(v) else v for v in new]
    return new


def apply_sets(doc: dict[str, Any], sets: Iterable[str]) -> dict[str, Any]:
    """``--set SECTION.KEY=VALUE`` overrides (TOML values) applied to ``doc``, in place; returns it. An integer
    that overrides a float becomes a float (:func:`_like`)."""
    for item in sets:
        key = item.split("=", 1)[0]
        if "=" not in item or "." not in key:
            raise ConfigError(f"--set expects SECTION.KEY=VALUE, got {item!r}")
        section, name = key.split(".", 1)
        table = doc.setdefault(section, {})
        table[name] = _like(table.get(name), parse_value(item.split("=", 1)[1]))
    return doc


def _field_type(cls, f: dataclasses.Field):
    tp = typing.get_type_hints(cls)[f.name]
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType) and type(None) in args:
        tp = next(a for a in args if a is not type(None))
    return tp


def add_dataclass_arguments(group, cls, *, prefix: str = "", skip: Iterable[str] = (),
                            help_table: Mapping[str, str] | None = None, show_default: bool = True) -> None:
    """One ``--flag`` per field of ``cls`` (underscores become dashes), with ``dest = prefix + name`` and no
    default (an absent flag leaves the TOML or dataclass value). bool -> ``--x/--no-x``; tuple -> that many
    values; list -> one or more; dict -> repeatable ``--x NAME=VALUE`` (the flag in the singular)."""
    skip = set(skip)
    for f in dataclasses.fields(cls):
        if f.name in skip or not f.init:
            continue
        tp = _field_type(cls, f)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        meta = f.metadata or {}
        help_ = (help_table or {}).get(f.name) or meta.get("help") or f"{cls.__name__}.{f.name}"
        default = (f.default if f.default is not dataclasses.MISSING
                   else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None))
        kw: dict[str, Any] = {"dest": prefix + f.name, "default": argparse.SUPPRESS}
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif origin is tuple:
            kw.update(nargs=len(args), type=args[0])
        elif origin is list:
            kw.update(nargs="+", type=args[0] if args else str)
        elif origin is dict:
            vt = args[1] if args else str
            kw.update(action="append", type=_pair_type(parse_value if vt is typing.Any else vt))
        else:
            kw["type"] = tp
        if meta.get("choices"):
            kw["choices"] = meta["choices"]
        if meta.get("metavar"):
            kw["metavar"] = meta["metavar"]
        elif origin is dict:
            kw["metavar"] = "KEY=VALUE"
        elif tp is not bool and "choices" not in kw:
            kw["metavar"] = f.name.upper()
        if show_default:
            help_ += f" (default: {default})" if default not in (None, "", {}, []) else ""
        else:
            help_ += " (default: from the preset)"
        flag = "--" + f.name.replace("_", "-")
        if origin is dict:             # repeatable NAME=VALUE options read best in the singular
            flag = flag[:-1] if flag.endswith("s") else flag
            help_ += " (repeatable)"
        group.add_argument(flag, *meta.get("aliases", ()), help=help_, **kw)


def _pair_type(value_type):
    def parse(text: str):
        if "=" not in text:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
        k, v = text.split("=", 1)
        return k.strip(), value_type(v)
    return parse


def add_config_arguments(parser: argparse.ArgumentParser, tables: Iterable[str], what: str = "") -> None:
    """``--config FILE.toml`` and ``--set SECTION.KEY=VALUE`` for a command whose config has ``tables``."""
    names = ", ".join(f"[{t}]" for t in tables)
    parser.add_argument("--config", help=f"TOML file with tables {names}{what}; its keys mirror the options "
                                         "here; --set and command-line options win")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override one config value (a TOML value), e.g. --set train.max_updates=100 "
                             "(repeatable)")


def merge_sources(args: argparse.Namespace, tables: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Merge ``--config`` TOML < ``--set`` < explicit ``--flags`` (dests ``table.key``) into one dict per table.
    Unknown tables are a :class:`ConfigError`."""
    tables = list(tables)
    path = getattr(args, "config", None)
    doc = read_toml(path) if path else {}
    apply_sets(doc, getattr(args, "set", None) or [])
    unknown = sorted(set(doc) - set(tables))
    if unknown:
        raise ConfigError(f"{path or '--set'}: unknown table(s) {unknown}; expected {', '.join(tables)}")
    merged = {t: dict(doc.get(t, {})) for t in tables}
    for key, value in vars(args).items():
        if "." not in key:
            continue
        table, name = key.split(".", 1)
        if table not in merged:
            continue
        if isinstance(value, list) and value and isinstance(value[0], tuple):   # NAME=VALUE options
            value = {**merged[table].get(name, {}), **dict(value)}
        merged[table][name] = value
    return merged


_WANT = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
_ITEMS = {int: "integers", float: "numbers", bool: "true or false values", str: "strings"}


def _is(tp: type, value: Any) -> bool:
    """Whether ``value`` is a ``tp`` (an int is a float; a bool is not a number)."""
    if tp is bool:
        return isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    return not isinstance(value, bool) and isinstance(value, (int, float) if tp is float else int)


def check_value(cls, name: str, value: Any, source: str) -> None:
    """A :class:`ConfigError` naming ``source`` and the field when ``value`` does not fit field ``name`` of
    ``cls``: a field typed ``int``, ``float``, ``bool`` or ``str`` (or optional) gets a value of that type, a list
    or tuple field a list (of items of its type), a dict field a table. ``lr = "fast"`` or ``--set
    model.n_heads=[1,2]`` is named here, not as a traceback later."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    tp = _field_type(cls, f)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _WANT:
        ok, want = _is(tp, value), _WANT[tp]
    elif origin in (list, tuple):
        item = args[0] if args and all(a in (args[0], Ellipsis) for a in args) else None
        ok = isinstance(value, (list, tuple)) and (item not in _WANT or all(_is(item, v) for v in value))
        want = "a list" + (f" of {_ITEMS[item]}" if item in _ITEMS else "")
    elif origin is dict:
        ok, want = isinstance(value, dict), "a table of KEY = VALUE"
    else:
        return
    if not ok:
        raise ConfigError(f"{source}: {f.name} must be {want}, not {value!r}")


def check_values(cls, values: Mapping[str, Any], source: str = "config") -> None:
    """:func:`check_value` for every key of ``values`` that is a field of ``cls`` and not None."""
    names = {f.name for f in dataclasses.fields(cls)}
    for name, value in values.items():
        if name in names and value is not None:
            check_value(cls, name, value, source)


def build(cls, values: Mapping[str, Any], source: str = "config"):
    """``cls(**values)``; an unknown key is a :class:`ConfigError` that names the table and the valid keys."""
    valid = {f.name for f in dataclasses.fields(cls) if f.init}
    extra = sorted(set(values) - valid)
    if extra:
        raise ConfigError(f"{source}: unknown key(s) {extra}; valid: {', '.join(sorted(valid))}")
    values = dict(values)
    for f in dataclasses.fields(cls):          # TOML and argparse give lists where a field holds a tuple
        if f.name in values and isinstance(values[f.name], list) and typing.get_origin(_field_type(cls, f)) is tuple:
            values[f.name] = tuple(values[f.name])
    check_values(cls, values, source)
    try:
        return cls(**values)
    except TypeError as e:
        raise ConfigError(f"{source}: {e}") from None
