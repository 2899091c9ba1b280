"""``xlpe experiment NAME``: the recipes that reproduce the papers' tables at small scale.

Each recipe is a module with ``add_cli_arguments``/``cli_main``; :data:`RECIPES` names them.
"""

from __future__ import annotations

import argparse
import importlib

RECIPES: dict[str, tuple[str, str]] = {
    "xl-pe": ("xlpe.experiments.xl_pe", "Ding et al. 2020: Tables 1, 3, 4 and Figures 3, 4 (XL PE, InXL, HeadXL, "
                                        "Combination)"),
}


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="recipe", metavar="NAME", required=True)
    for name, (mod, help_) in RECIPES.items():
        sp = sub.add_parser(name, help=help_, description=help_, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        module = importlib.import_module(mod)
        module.add_cli_arguments(sp)
        sp.set_defaults(_recipe_main=module.cli_main)


def cli_main(args: argparse.Namespace) -> int:
    return args._recipe_main(args)
