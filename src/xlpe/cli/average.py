"""``xlpe average``: the mean of several checkpoints as one model-only checkpoint."""

from __future__ import annotations

import argparse
import json

from xlpe.nn.checkpoint import last_checkpoints, save_average


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--checkpoints", nargs="+", metavar="PT", help="checkpoint files to average")
    g.add_argument("--dir", metavar="DIR", help="training directory: average its newest --last step checkpoints")
    p.add_argument("--last", type=int, default=5, help="how many of the newest step checkpoints of --dir")
    p.add_argument("--output", required=True, help="averaged model-only checkpoint to write")


def cli_main(args: argparse.Namespace) -> int:
    paths = args.checkpoints or last_checkpoints(args.dir, args.last)
    print(json.dumps(save_average(paths, args.output)))
    return 0
