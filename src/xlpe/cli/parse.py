"""``xlpe parse``: dependency trees of a pre-tokenised file with spaCy, tokens kept exactly
(:func:`xlpe.syntax.parse.parse_file`), or ``--gold`` to score a pipeline against a treebank (UAS / LAS)."""

from __future__ import annotations

import argparse
import json

from xlpe.config import check_workers
from xlpe.errors import ConfigError
from xlpe.syntax.parse import DEFAULT_MODEL, parse_file, score_treebank


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("input", nargs="?", help="pre-tokenised text, one sentence a line (tokens split on spaces)")
    p.add_argument("-o", "--output", help="CoNLL-U output (written atomically)")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="an installed spaCy pipeline: package name or directory (never downloaded)")
    p.add_argument("--processes", type=int, default=1, help="parser processes")
    p.add_argument("--batch-size", type=int, default=256, help="sentences per spaCy batch")
    p.add_argument("--gold", help="a gold CoNLL-U treebank: parse its own words and print UAS / LAS as JSON")
    p.add_argument("--progress", action="store_true", help="show a progress bar")


def cli_main(args: argparse.Namespace) -> int:
    check_workers(args.processes, "--processes")
    if args.gold:
        if args.input or args.output:
            raise ConfigError("--gold scores a pipeline on a treebank; give no INPUT / --output with it")
        print(json.dumps(score_treebank(args.gold, model=args.model, processes=args.processes,
                                        batch_size=args.batch_size)))
        return 0
    if not args.input or not args.output:
        raise ConfigError("give INPUT and -o OUTPUT.conllu (or --gold FILE.conllu to score a pipeline)")
    n = parse_file(args.input, args.output, model=args.model, processes=args.processes,
                   batch_size=args.batch_size, progress=args.progress)
    print(json.dumps({"trees": n, "output": args.output}))
    return 0
