"""``xlpe synth``: generate a built-in synthetic language pair. The generator options are the fields of
:class:`~xlpe.data.synthetic.SyntheticConfig` (:mod:`xlpe.config`): flags, a TOML ``--config`` with a ``[synth]``
table, ``--set synth.KEY=VALUE``; ``--config`` also takes the ``config.json`` a previous run wrote, to draw the
same language pair again."""

from __future__ import annotations

import argparse
import json
import os

from xlpe.config import add_dataclass_arguments, apply_sets, build, merge_sources, read_toml
from xlpe.data.synthetic import SyntheticConfig, load_config, synth
from xlpe.errors import ConfigError


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", "-o", required=True, help="output folder (created if missing)")
    parser.add_argument("--train", type=int, default=10000, help="number of training pairs")
    parser.add_argument("--dev", type=int, default=500, help="number of development pairs")
    parser.add_argument("--test", type=int, default=500, help="number of test pairs")
    parser.add_argument("--config", help="generator options: a TOML file with a [synth] table, or the config.json "
                                         "that synth writes; options given on the command line win")
    parser.add_argument("--set", action="append", default=[], metavar="synth.KEY=VALUE",
                        help="override one generator option (a TOML value), e.g. --set synth.nouns=60 (repeatable)")
    add_dataclass_arguments(parser.add_argument_group("generator options"), SyntheticConfig, prefix="synth.")
    parser.add_argument("--no-dedup", dest="dedup", action="store_false",
                        help="do not make the splits disjoint (by default test is generated first, dev skips "
                             "test sentences and train skips dev and test sentences)")
    parser.add_argument("--progress", action="store_true", help="show a progress bar")


def config_from_args(args: argparse.Namespace) -> SyntheticConfig:
    """The :class:`SyntheticConfig` of parsed ``xlpe synth`` arguments: defaults < ``--config`` < ``--set`` < flags."""
    path = getattr(args, "config", None)
    if path and str(path).endswith(".json"):
        base = {"synth": load_config(path).to_dict()}
    else:
        base = read_toml(path) if path else {}
    sets = getattr(args, "set", None) or []
    other = [item for item in sets if "." in item.split("=", 1)[0] and not item.startswith("synth.")]
    if other:
        raise ConfigError(f"--set {other[0]}: xlpe synth reads only its generator options, --set synth.KEY=VALUE")
    apply_sets(base, sets)
    flags = merge_sources(argparse.Namespace(**{k: v for k, v in vars(args).items() if k not in ("config", "set")}),
                          ("synth",))["synth"]
    return build(SyntheticConfig, {**base.get("synth", {}), **flags}, f"{path or 'options'} [synth]")


def cli_main(args: argparse.Namespace) -> int:
    """Run ``xlpe synth``; returns 0. Bad options raise :class:`~xlpe.errors.ConfigError`."""
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise ConfigError(f"--out {args.out} is a file; synth writes a folder of files")
    if min(args.train, args.dev, args.test) < 0:
        raise ConfigError("--train, --dev and --test must be >= 0")
    cfg = config_from_args(args)
    sizes = {"train": args.train, "dev": args.dev, "test": args.test}
    paths = synth(args.out, cfg, sizes, dedup=args.dedup, progress=args.progress)
    with open(paths["config.json"], encoding="utf-8") as f:
        written = json.load(f)["written"]
    print(f"wrote {', '.join(f'{k} {v}' for k, v in written.items())} pairs ({cfg.profile}) to {args.out}")
    return 0
