"""``xlpe orders`` — alignments -> oracle ranks, permutations, ``pos_XL`` and DPE targets, as files.

The command-line face of :mod:`xlpe.reorder.oracle`; each requested output is written atomically, one
line per sentence pair.
"""

from __future__ import annotations

import argparse
import json
from contextlib import ExitStack

from xlpe.errors import ConfigError
from xlpe.io.alignments import read_alignments, read_lader_alignments
from xlpe.io.atomic import atomic_write
from xlpe.io.orders import format_order
from xlpe.io.text import read_sentences
from xlpe.reorder.oracle import dpe_targets, invert_order, lader_ranks, order_from_ranks, reordered_order


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
    p.add_argument("--reordered-src", help="output: the 2PT reordered source text (SPEC §6.5)")
    p.add_argument("--unaligned", choices=("drop", "keep"), default="drop",
                   help="2PT: drop unaligned words (paper example) or keep them after their left neighbour")
    p.add_argument("--attach-null", choices=("right", "left", "none"), default="right",
                   help="lader: unaligned words copy the span of their right (default) or left neighbour")
    p.add_argument("--no-combine-blocks", action="store_true", help="lader: do not merge overlapping target spans")
    p.add_argument("--no-brackets", action="store_true", help="lader: do not place null-aligned brackets specially")


def orders_files(src: str, *, align: str | None = None, lader_align: str | None = None, align_base: int = 0,
                 tgt: str | None = None, ranks: str | None = None, order: str | None = None,
                 pos_xl: str | None = None, dpe: str | None = None, reordered_src: str | None = None,
                 unaligned: str = "drop", attach_null: str = "right", combine_blocks: bool = True,
                 align_brackets: bool = True) -> dict:
    """File-level API of ``xlpe orders``; returns counts."""
    outs = {"ranks": ranks, "order": order, "pos_xl": pos_xl, "dpe": dpe, "reordered_src": reordered_src}
    if not any(outs.values()):
        raise ConfigError("nothing to write: give at least one of --ranks --order --pos-xl --dpe --reordered-src")
    srcs = list(read_sentences(src))
    if align:
        lens = [len(s) for s in srcs]
        tl = [len(t) for t in read_sentences(tgt)] if tgt else [None] * len(srcs)
        als = read_alignments(align, align_base, lengths=zip(lens, tl), check_base=False)
    else:
        als = (a for _, _, a in read_lader_alignments(lader_align, src_lengths=[len(s) for s in srcs]))
    n = 0
    with ExitStack() as stack:
        files = {k: stack.enter_context(atomic_write(v)) for k, v in outs.items() if v}
        for words, a in zip(srcs, als):
            links = sorted(a.links)
            r = lader_ranks(links, len(words), src_words=words, attach_null=attach_null,
                            combine_blocks=combine_blocks, align_brackets=align_brackets)
            o = order_from_ranks(r)
            if "ranks" in files:
                files["ranks"].write(" ".join(map(str, r)) + "\n")
            if "order" in files:
                files["order"].write(format_order(o) + "\n")
            if "pos_xl" in files:
                files["pos_xl"].write(format_order(invert_order(o)) + "\n")
            if "dpe" in files:
                p = dpe_targets(links, len(words))
                pairs = sorted((t, i) for i, t in enumerate(p) if t >= 0)     # in target-order, as SPEC §12.5
                files["dpe"].write(" ".join(f"{i}-{t}" for t, i in pairs) + "\n")
            if "reordered_src" in files:
                ro = reordered_order(links, len(words), unaligned=unaligned)
                files["reordered_src"].write(" ".join(words[i] for i in ro) + "\n")
            n += 1
    return {"sentences": n, "written": {k: v for k, v in outs.items() if v}}


def cli_main(args: argparse.Namespace) -> int:
    r = orders_files(args.src, align=args.align, lader_align=args.lader_align, align_base=args.align_base,
                     tgt=args.tgt, ranks=args.ranks, order=args.order, pos_xl=args.pos_xl, dpe=args.dpe,
                     reordered_src=args.reordered_src, unaligned=args.unaligned, attach_null=args.attach_null,
                     combine_blocks=not args.no_combine_blocks, align_brackets=not args.no_brackets)
    print(json.dumps(r))
    return 0
