"""``xlpe evaluate``: BLEU / chrF with signatures and paired bootstrap; Kendall τ / chunk of orders."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from xlpe.errors import ConfigError, FormatError
from xlpe.evaluate.bleu import check_tokenize, corpus_scores, paired_bootstrap
from xlpe.io.text import read_lines

def _read(path: str) -> list[str]:
    return [t for _, t in read_lines(path)]


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", nargs="+", help="reference file(s), detokenised, one sentence per line")
    p.add_argument("--hyp", nargs="+", help="system output file(s); with several, the first is the baseline "
                                            "of the paired bootstrap test")
    p.add_argument("--names", nargs="+", help="display names of the systems (default: file names)")
    p.add_argument("--metrics", nargs="+", default=["bleu", "chrf"], choices=["bleu", "chrf", "chrf++"],
                   help="metrics to compute (default: bleu chrf)")
    p.add_argument("--tokenize", default="13a", help="sacrebleu BLEU tokenizer (default 13a; spm ones need a download)")
    p.add_argument("--bootstrap", type=int, default=1000, help="paired bootstrap samples (default 1000)")
    p.add_argument("--seed", type=int, default=12345, help="bootstrap seed (default 12345)")
    p.add_argument("--orders", help="order file (lader `order` lines) to score for reordering accuracy")
    p.add_argument("--order-ref", help="reference alignments (Pharaoh) whose lader ranks score --orders")
    p.add_argument("--order-ref-base", type=int, choices=(0, 1), default=0, help="index base of --order-ref")
    p.add_argument("--order-src", help="source text of --orders (for lengths and bracket handling)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def cli_main(args: argparse.Namespace) -> int:
    result: dict = {}
    if args.bootstrap < 1:
        raise ConfigError(f"--bootstrap must be >= 1, not {args.bootstrap}")
    if args.orders and not args.order_ref:          # before any scoring
        raise ConfigError("--orders needs reference alignments (--order-ref)")
    if args.hyp:
        if not args.ref:
            raise ConfigError("--hyp needs --ref")
        check_tokenize(args.tokenize)
        refs = [_read(r) for r in args.ref]
        names = args.names or [os.path.basename(h) for h in args.hyp]
        if len(names) != len(args.hyp):
            raise ConfigError("--names must name every --hyp file")
        systems = [(n, _read(h)) for n, h in zip(names, args.hyp)]
        for h, (_, lines) in zip(args.hyp, systems):
            for r, ref in zip(args.ref, refs):
                if len(lines) != len(ref) and lines and ref:
                    raise FormatError(f"{len(lines)} lines but the reference {r} has {len(ref)}", h,
                                      expected="one hypothesis line per reference line")
        if len(systems) == 1:
            sc = corpus_scores(systems[0][1], refs, metrics=args.metrics, tokenize=args.tokenize)
            result["scores"] = {k: asdict(v) for k, v in sc.items()}
            if not args.json:
                for v in sc.values():
                    print(f"{v.text}\n  signature: {v.signature}")
        else:
            comps, sigs = paired_bootstrap(systems, refs, metrics=args.metrics, n_samples=args.bootstrap,
                                           seed=args.seed, tokenize=args.tokenize)
            result["systems"] = [asdict(c) for c in comps]
            result["signatures"] = sigs
            if not args.json:
                keys = list(comps[0].scores)
                print("system".ljust(24) + "".join(k.rjust(22) for k in keys))
                for c in comps:
                    cells = []
                    for k in keys:
                        p = c.p_values[k]
                        cells.append((f"{c.scores[k]:.2f} ±{c.ci[k]:.2f}" + ("" if p is None else f" p={p:.4f}")).rjust(22))
                    print(c.system.ljust(24) + "".join(cells))
                for k, s in sigs.items():
                    print(f"  {k}: {s}")
    if args.orders:
        from xlpe.evaluate.reorder_metrics import order_scores_files
        rs = order_scores_files(args.orders, args.order_ref, ref_base=args.order_ref_base, src=args.order_src)
        result["reordering"] = rs
        if not args.json:
            print("reordering: " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}" for k, v in rs.items()))
    if not args.hyp and not args.orders:
        raise ConfigError("nothing to evaluate: give --hyp/--ref and/or --orders/--order-ref")
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0
