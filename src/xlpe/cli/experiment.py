"""``xlpe experiment NAME``: the recipes that reproduce the papers' tables at small scale; ``xlpe experiment status
OUT``: how far one of their output folders has come (:mod:`xlpe.experiments.engine.status`); ``xlpe experiment
archive OUT --to DIR`` / ``restore DIR --into OUT``: its finished stages without checkpoints, to fill a table on
several machines (:mod:`xlpe.experiments.engine.archive`).

The recipes are the ones :data:`xlpe.experiments.recipes.RECIPES` names; every recipe gets the same options here.
"""

from __future__ import annotations

import argparse
import importlib
import json
from pathlib import Path

from xlpe.config import add_config_arguments, check_workers
from xlpe.experiments.engine.recipe import TOML_TABLES
from xlpe.experiments.recipes import RECIPES

def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="recipe", metavar="NAME", required=True)
    for name, (mod, help_) in RECIPES.items():
        sp = sub.add_parser(name, help=help_, description=help_, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module = importlib.import_module(mod)
        add_config_arguments(sp, TOML_TABLES, f" (see {mod} and examples/)")
        sp.add_argument("--out", required=True, help="output folder: cached stages, runs, report.md, results.json, "
                                                    "plots/")
        sp.add_argument("--only", nargs="+", choices=module.TABLES, default=None,
                        help="run only what these tables and figures need (default: all)")
        sp.set_defaults(_recipe=module)
    help_ = ("how far a recipe's output folder has come: every stage done or unfinished, and each unfinished run's "
             "updates, training time and the rest at its own pace (reads files only: safe beside a running recipe)")
    sp = sub.add_parser("status", help=help_, description=help_, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sp.add_argument("out", help="the --out folder of an `xlpe experiment NAME` or `xlpe demo` run")
    sp.add_argument("--json", action="store_true", help="print the status as JSON instead of a Markdown table")
    sp.set_defaults(_recipe=None)
    help_ = ("write the finished stages of a recipe's output folder, without model checkpoints and without the "
             "corpus's own text, as small archives (one .tar.xz per stage and a manifest) that can be kept under "
             "version control; stages already archived with the same cache key are not written again")
    sp = sub.add_parser("archive", help=help_, description=help_,
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sp.add_argument("out", help="the --out folder of an `xlpe experiment NAME` run")
    sp.add_argument("--to", required=True, help="the archive folder (created; updated if it exists)")
    sp.add_argument("--max-file-mb", type=float, default=16.0,
                    help="a stage with a larger file is left out (it runs again after a restore)")
    sp.set_defaults(_recipe="archive")
    help_ = ("put archived stages back into a recipe's output folder (before running the recipe there, which then "
             "trains only what the archive lacks); stages the folder already has are kept")
    sp = sub.add_parser("restore", help=help_, description=help_,
                        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sp.add_argument("archive", help="a folder written by `xlpe experiment archive`")
    sp.add_argument("--into", required=True, help="the recipe's --out folder (created if needed)")
    sp.set_defaults(_recipe="restore")


#: the thread and process counts of a recipe's [experiment] table, and what 0 means (None: 0 is refused)
PARALLELISM = {"threads": "torch's default", "jobs": "one at a time", "parser_processes": None}


def check_parallelism(cfg) -> None:
    """Refuse a negative or absurd thread or process count in a recipe's ``[experiment]`` table
    (:func:`xlpe.config.check_workers`), before any stage runs."""
    e = getattr(cfg, "experiment", None)
    for name, zero in PARALLELISM.items():
        if hasattr(e, name):
            check_workers(getattr(e, name), f"experiment.{name}", zero=zero)


def cli_main(args: argparse.Namespace) -> int:
    module = args._recipe
    if module is None:                      # xlpe experiment status OUT
        from xlpe.experiments.engine.status import folder_status, render_status
        st = folder_status(args.out)
        print(json.dumps(st, indent=1) if args.json else render_status(st).rstrip("\n"))
        return 0
    if module == "archive":
        from xlpe.experiments.engine.archive import archive_folder
        r = archive_folder(args.out, args.to, max_file_mb=args.max_file_mb)
        print(f"{args.to}: {len(r['written'])} stages written, {len(r['unchanged'])} unchanged, "
              f"{len(r['unfinished'])} unfinished (not archived)")
        for name, why in r["left_out"].items():
            print(f"  left out {name}: {why} (it runs again after a restore)")
        return 0
    if module == "restore":
        from xlpe.experiments.engine.archive import restore_folder
        r = restore_folder(args.archive, args.into)
        print(f"{args.into}: {len(r['restored'])} stages restored, {len(r['links'])} links, {len(r['kept'])} kept "
              "(the folder had them)")
        return 0
    cfg = module.load_config(args.config, args.set)
    check_parallelism(cfg)
    r = module.run_experiment(cfg, args.out, args.only)
    print(r["report"])
    print(f"report: {Path(args.out) / 'report.md'}   numbers: {Path(args.out) / 'results.json'}   "
          f"plots: {Path(args.out) / 'plots'}")
    return 0
