"""``xlpe preorder train|apply``: the command line of :class:`xlpe.reorder.btg.BTGPreorderer`.

``train`` reads a source text and its word alignments (Pharaoh with an explicit index base, or lader's
``SRCLEN-TRGLEN ||| i-j ...``), turns the alignments into lader oracle ranks
(:func:`xlpe.reorder.oracle.training_ranks`) and trains the BTG model; ``apply`` writes lader ``order`` or
``string`` lines for any source text, with several processes if asked.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys

from xlpe.config import check_workers
from xlpe.errors import ConfigError
from xlpe.io.atomic import check_outputs, write_lines
from xlpe.io.text import read_sentences
from xlpe.reorder.btg import BTGConfig, BTGPreorderer, parse_loss_profile
from xlpe.reorder.oracle import training_ranks

log = logging.getLogger("xlpe.preorder")


#: the widest BTG training beam: combining two spans costs beam² a split (beam 100 took minutes for 20 sentences)
MAX_BTG_BEAM = 64


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="preorder_command", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train a BTG preorderer from a source text and its alignments",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--src", required=True,
                   help="source text, tokenised; tokens may carry factor columns word|class|...")
    g = t.add_mutually_exclusive_group(required=True)
    g.add_argument("--align", help="Pharaoh alignments of --src (i-j / ipj; all links are used)")
    g.add_argument("--lader-align", help="lader alignment file 'SRCLEN-TRGLEN ||| i-j ...' (0-based)")
    t.add_argument("--align-base", type=int, choices=(0, 1), default=0, help="index base of --align")
    t.add_argument("--tgt", help="target text, to validate target indices of --align")
    t.add_argument("--model", required=True, help="output model directory (model.json + weights.npz)")
    t.add_argument("--init", help="continue training this saved model instead of starting from zero")
    t.add_argument("--iterations", type=int, default=10, help="passes over the data (stops early at zero loss gap)")
    t.add_argument("--attach-null", choices=("right", "left", "none", "free"), default="right",
                   help="lader oracle: where unaligned words go ('free': nowhere, they are left out of the "
                        "loss; needs --loss tau=W)")
    t.add_argument("--skip-long", action="store_true",
                   help="skip and count sentences over --max-len instead of failing")
    d = BTGConfig()
    t.add_argument("--max-term", type=int, default=d.max_term, help="longest terminal span")
    t.add_argument("--use-reverse", action="store_true", help="allow backward (reversed) terminals")
    t.add_argument("--factors", type=int, default=d.factors, help="factor columns per token (word|class|pos ...)")
    t.add_argument("--factor-sep", default=d.factor_sep, help="separator of factor columns inside a token")
    t.add_argument("--hash-bits", type=int, default=d.hash_bits, help="feature hashing: 2^bits weights")
    t.add_argument("--loss", default=d.loss, help="loss profile: chunk=1, tau=1 or chunk=1|tau=1")
    t.add_argument("--learner", choices=("pegasos", "perceptron"), default=d.learner, help="update rule")
    t.add_argument("--cost", type=float, default=d.cost, help="Pegasos lambda")
    t.add_argument("--beam", type=int, default=d.beam, help="hypotheses per span in loss-augmented search")
    t.add_argument("--max-len", type=int, default=d.max_len, help="longest training sentence (words)")
    t.add_argument("--seed", type=int, default=d.seed, help="shuffling seed")
    t.add_argument("--average", action="store_true", help="predict with averaged weights")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    a = sub.add_parser("apply", help="reorder a source text with a trained preorderer",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a.add_argument("--model", required=True, help="model directory from `xlpe preorder train`")
    a.add_argument("--input", default="-", help="source text ('-' = stdin)")
    a.add_argument("--output", default="-", help="output file ('-' = stdout)")
    a.add_argument("--format", choices=("order", "string"), default="order",
                   help="lader `order` lines (0-based original indices) or the reordered words")
    a.add_argument("--processes", type=int, default=1, help="worker processes")
    a.add_argument("--quiet", action="store_true", help="no progress bar")


def cli_main(args: argparse.Namespace) -> int:
    if args.preorder_command == "train":
        if not 1 <= args.beam <= MAX_BTG_BEAM:
            raise ConfigError(f"--beam must be from 1 to {MAX_BTG_BEAM} (the search costs beam² a split), not "
                              f"{args.beam}")
        if args.iterations < 1:
            raise ConfigError(f"--iterations must be >= 1, not {args.iterations} (0 would write an untrained model)")
        check_outputs([args.model], [args.src, args.align, args.lader_align, args.tgt])
        if args.init:
            model = BTGPreorderer.load(args.init)
        else:
            cfg = BTGConfig(max_term=args.max_term, use_reverse=args.use_reverse, factors=args.factors,
                            factor_sep=args.factor_sep, hash_bits=args.hash_bits, loss=args.loss,
                            learner=args.learner, cost=args.cost, beam=args.beam, max_len=args.max_len,
                            seed=args.seed, average=args.average)
            model = BTGPreorderer(cfg)
        if args.attach_null == "free" and parse_loss_profile(model.config.loss)["chunk"]:
            raise ConfigError(f"--attach-null free leaves unaligned words without a rank, which only the τ loss "
                              f"can handle: use --loss tau=1, not {model.config.loss!r}")
        sents, ranks, skipped = training_ranks(
            args.src, align=args.align, lader_align=args.lader_align, align_base=args.align_base, tgt=args.tgt,
            attach_null=args.attach_null, factor_sep=model.config.factor_sep, max_len=model.config.max_len,
            skip_long=args.skip_long)
        if skipped:
            log.warning("skipped %d sentence(s) over %d words", skipped, model.config.max_len)
        stats = model.train(sents, ranks, iterations=args.iterations, progress=not args.quiet)
        model.save(args.model)
        print(json.dumps({"model": args.model, "sentences": len(sents), "skipped_long": skipped,
                          "iterations": stats, "config": dataclasses.asdict(model.config)}, default=list))
        return 0
    check_workers(args.processes, "--processes")
    model = BTGPreorderer.load(args.model)
    sents = list(read_sentences(args.input, allow_empty=True))
    lines = model.apply(sents, out_format=args.format, processes=args.processes,
                        progress=not args.quiet and sys.stderr.isatty())
    write_lines(args.output, lines)
    return 0
