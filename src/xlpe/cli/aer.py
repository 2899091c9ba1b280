"""``xlpe aer``: AER / precision / recall of an alignment file against a gold file
(:func:`xlpe.evaluate.aer.aer_files`)."""

from __future__ import annotations

import argparse
import json
import sys

from xlpe.evaluate.aer import aer_files

def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", required=True, help="gold alignment file (Pharaoh/talp: i-j sure, ipj possible)")
    p.add_argument("--hyp", required=True, help="hypothesis alignment file (Pharaoh)")
    p.add_argument("--ref-base", type=int, choices=(0, 1), required=True,
                   help="index base of the gold file (most gold sets: 1)")
    p.add_argument("--hyp-base", type=int, choices=(0, 1), default=0,
                   help="index base of the hypothesis file (tool output: 0; default 0)")
    p.add_argument("--reverse-ref", action="store_true", help="swap source/target of the gold links")
    p.add_argument("--reverse-hyp", action="store_true", help="swap source/target of the hypothesis links")
    p.add_argument("--src", help="source text in scoring orientation, to validate indices against lengths")
    p.add_argument("--tgt", help="target text in scoring orientation, to validate indices against lengths")
    p.add_argument("--all-sure", action="store_true", help="treat possible gold links as sure")
    p.add_argument("--ignore-possible", action="store_true", help="drop possible gold links")
    p.add_argument("--no-base-check", action="store_true",
                   help="do not refuse a 0-based file in which index 0 never occurs (100+ lines)")
    p.add_argument("--alpha", type=float, default=0.5, help="F-measure weight α (default 0.5)")
    p.add_argument("--json", action="store_true", help="print all counts as JSON")


def cli_main(args: argparse.Namespace) -> int:
    s = aer_files(args.ref, args.hyp, ref_base=args.ref_base, hyp_base=args.hyp_base,
                  reverse_ref=args.reverse_ref, reverse_hyp=args.reverse_hyp, src=args.src, tgt=args.tgt,
                  all_sure=args.all_sure, ignore_possible=args.ignore_possible,
                  check_base=not args.no_base_check, alpha=args.alpha)
    if args.json:
        json.dump(s.to_dict(), sys.stdout, indent=2)
        print()
    else:
        print(f"AER {s.format()}  [AER% (P%/R%/|A|), F={100 * s.f:.2f}, {s.sentences} sentences]")
    return 0
