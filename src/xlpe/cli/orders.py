"""``xlpe orders``: alignments -> oracle ranks, permutations, pos_XL, DPE targets and the 2PT reordered source
(:func:`xlpe.reorder.orders.orders_files`)."""

from __future__ import annotations

import argparse
import json

from xlpe.reorder.orders import orders_files


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--src", required=True, help="source text (tokenised, one sentence per line)")
    p.add_argument("--tgt", help="target text; when given, target indices are validated against it")
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--align", help="Pharaoh alignment file (i-j sure, ipj possible; all links are used)")
    g.add_argument("--lader-align", help="lader alignment file ('SRCLEN-TRGLEN ||| i-j ...', 0-based)")
    p.add_argument("--align-base", type=int, choices=(0, 1), default=0, help="index base of --align")
    p.add_argument("--ranks", help="output: lader oracle ranks per source word (ties share a rank)")
    p.add_argument("--order", help="output: a permutation consistent with the ranks (lader `order` lines)")
    p.add_argument("--pos-xl", help="output: its inverse, the cross-lingual positions pos_XL (SPEC §4.1)")
    p.add_argument("--dpe", help="output: DPE targets as 'i-p(i)' pairs, unaligned tokens omitted (SPEC §6.2)")
    p.add_argument("--dpe-subword-model", help="with --dpe: project the word alignments to the pieces of this "
                   "sentencepiece model (every piece of a word takes its links, SPEC §8.3) and write subword-level "
                   "targets, what a model on that subword model trains with (SPEC §6.2)")
    p.add_argument("--reordered-src", help="output: the 2PT reordered source text (SPEC §6.5)")
    p.add_argument("--unaligned", choices=("drop", "keep"), default="drop",
                   help="2PT: drop unaligned words (paper example) or keep them after their left neighbour")
    p.add_argument("--attach-null", choices=("right", "left", "none"), default="right",
                   help="lader: unaligned words copy the span of their right (default) or left neighbour")
    p.add_argument("--no-combine-blocks", action="store_true", help="lader: do not merge overlapping target spans")
    p.add_argument("--no-brackets", action="store_true", help="lader: do not place null-aligned brackets specially")


def cli_main(args: argparse.Namespace) -> int:
    r = orders_files(args.src, align=args.align, lader_align=args.lader_align, align_base=args.align_base,
                     tgt=args.tgt, ranks=args.ranks, order=args.order, pos_xl=args.pos_xl, dpe=args.dpe,
                     reordered_src=args.reordered_src, dpe_subword_model=args.dpe_subword_model,
                     unaligned=args.unaligned, attach_null=args.attach_null,
                     combine_blocks=not args.no_combine_blocks, align_brackets=not args.no_brackets)
    print(json.dumps(r))
    return 0
