"""``xlpe evaluate``: BLEU / chrF with signatures and paired bootstrap (seed-aware over K seeds per system with
``--seeds K``, :mod:`xlpe.evaluate.significance`); Kendall τ / chunk of orders."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict

from xlpe.errors import ConfigError, FormatError
from xlpe.evaluate.bleu import check_tokenize, corpus_scores, paired_bootstrap
from xlpe.io.text import read_lines

#: the most paired-bootstrap samples (p-values to 1e-5; sacrebleu's default is 1000)
MAX_BOOTSTRAP = 100_000


def _read(path: str) -> list[str]:
    return [t for _, t in read_lines(path)]


def _seed_aware(args: argparse.Namespace, names: list[str], systems: list[list[list[str]]],
                refs: list[list[str]]) -> dict:
    """Every system against the first over K seeds each: per metric the seed mean ± std, the seed-aware paired
    bootstrap and the t-test across seeds, and a verdict that needs both (printed unless ``--json``)."""
    import numpy as np

    from xlpe.evaluate.significance import compare, metric_label, text_stats
    res: dict = {"seeds": args.seeds, "systems": {}, "comparisons": {}}
    for metric in args.metrics:
        stats, score = [], None            # per system, per seed: the per-sentence statistics, extracted once
        for name, outs in zip(names, systems):
            stats.append([])
            for h in outs:
                st, score = text_stats(metric, h, refs, args.tokenize)
                stats[-1].append(st)
            scores = [score(st.sum(0)) for st in stats[-1]]
            res["systems"].setdefault(name, {})[metric] = {"per_seed": scores, "mean": float(np.mean(scores)),
                                                           "std": float(np.std(scores, ddof=1))}
        for name, st in zip(names[1:], stats[1:]):
            c = compare(metric_label(metric), stats[0], st, score, resamples=args.bootstrap, seed=args.seed,
                        paired_seeds=args.paired_seeds)
            res["comparisons"].setdefault(name, {})[metric] = {**c.to_dict(), "verdict": c.verdict()}
    if not args.json:
        print(f"{args.seeds} seeds per system; against {names[0]}: seed-aware paired bootstrap ({args.bootstrap} "
              "resamples, one-sided) / t-test across seeds (two-sided)")
        print("system".ljust(24) + "".join(m.rjust(30) for m in args.metrics))
        for name in names:
            cells = []
            for m in args.metrics:
                v, c = res["systems"][name][m], res["comparisons"].get(name, {}).get(m)
                p = "" if c is None else (f" p={c['p_bootstrap']:.3f}/" + ("–" if c["p_seeds"] is None
                                                                          else f"{c['p_seeds']:.3f}"))
                cells.append(f"{v['mean']:.2f} ±{v['std']:.2f}{p}".rjust(30))
            print(name.ljust(24) + "".join(cells))
        for name, cs in res["comparisons"].items():
            for m, c in cs.items():
                print(f"  {name} vs {names[0]}, {m}: {c['verdict']}")
    return res


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ref", nargs="+", help="reference file(s), detokenised, one sentence per line")
    p.add_argument("--hyp", nargs="+", help="system output file(s); with several, the first is the baseline "
                                            "of the paired bootstrap test (with --seeds K: K files per system)")
    p.add_argument("--seeds", type=int, default=1,
                   help="training seeds per system: --hyp then lists K files per system, the baseline's first, and "
                        "each comparison is the seed-aware paired bootstrap (a test sentence's K outputs resampled "
                        "together) plus a t-test across the seeds (xlpe.evaluate.significance)")
    p.add_argument("--paired-seeds", action="store_true",
                   help="with --seeds: the i-th file of every system comes from the same seed (paired t-test "
                        "across seeds instead of Welch's)")
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
    if not 1 <= args.bootstrap <= MAX_BOOTSTRAP:
        raise ConfigError(f"--bootstrap must be from 1 to {MAX_BOOTSTRAP}, not {args.bootstrap}")
    if args.orders and not args.order_ref:          # before any scoring
        raise ConfigError("--orders needs reference alignments (--order-ref)")
    if args.hyp:
        if not args.ref:
            raise ConfigError("--hyp needs --ref")
        check_tokenize(args.tokenize)
        refs = [_read(r) for r in args.ref]
        k = args.seeds
        if k < 1 or len(args.hyp) % k:
            raise ConfigError(f"--seeds {k}: --hyp must list the same number of files (K >= 1) for every system, "
                              f"but it has {len(args.hyp)} files")
        names = args.names or [os.path.basename(h) for h in args.hyp[::k]]
        if len(names) * k != len(args.hyp):
            raise ConfigError("--names must name every system" + (f" (one name per {k} --hyp files)" if k > 1 else
                                                                  " (one name per --hyp file)"))
        outputs = [_read(h) for h in args.hyp]
        for h, lines in zip(args.hyp, outputs):
            for r, ref in zip(args.ref, refs):
                if len(lines) != len(ref) and lines and ref:
                    raise FormatError(f"{len(lines)} lines but the reference {r} has {len(ref)}", h,
                                      expected="one hypothesis line per reference line")
        if k > 1:
            result.update(_seed_aware(args, names, [outputs[i:i + k] for i in range(0, len(outputs), k)], refs))
        elif len(outputs) == 1:
            sc = corpus_scores(outputs[0], refs, metrics=args.metrics, tokenize=args.tokenize)
            result["scores"] = {m: asdict(v) for m, v in sc.items()}
            if not args.json:
                for v in sc.values():
                    print(f"{v.text}\n  signature: {v.signature}")
        else:
            systems = list(zip(names, outputs))
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
                        cell = f"{c.scores[k]:.2f} ±{c.ci[k]:.2f}" + ("" if p is None else f" p={p:.4f}")
                        cells.append(cell.rjust(22))
                    print(c.system.ljust(24) + "".join(cells))
                for k, s in sigs.items():
                    print(f"  {k}: {s}")
    elif args.seeds != 1:
        raise ConfigError("--seeds groups --hyp files: give --hyp/--ref")
    if args.orders:
        from xlpe.evaluate.reorder_metrics import order_scores_files
        rs = order_scores_files(args.orders, args.order_ref, ref_base=args.order_ref_base, src=args.order_src)
        result["reordering"] = rs
        if not args.json:
            print("reordering: " + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                             for k, v in rs.items()))
    if not args.hyp and not args.orders:
        raise ConfigError("nothing to evaluate: give --hyp/--ref and/or --orders/--order-ref")
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    return 0
