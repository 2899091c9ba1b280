"""Training variance of the recipe's Cross-Align on one pair: further training seeds of that pair alone, in a
``xlpe experiment cross-align`` folder, scored on its test part with seed-aware significance.

The dev choices come from the dev pair's first seed, as in the recipe (its stages are cached in the folder; they
are trained if missing). ``--pair``'s chain (TLM, SSA, each further round) is then trained for every seed of
``--seeds`` with the recipe's own stages: the same folders ``train-<pair>-s<seed>-<stage>`` and cache keys as
``experiment.seeds`` would give, resumable after a kill. Every trained system's links are extracted the recipe's
way (``links-<pair>/<stage>-s<seed>.align``). Printed as JSON: the test-part AER / P / R of each stage and seed,
and the recipe's Cross-Align (the last stage) over all seeds against each baseline and the stage before it with
:func:`xlpe.evaluate.significance.compare` (a paired bootstrap with the seeds kept together, and the test across
seeds once both sides have two or more).

Not a test. Usage (one pair's chain is ~2 hours on 2 cores in float32)::

    python benchmarks/crossalign_more_seeds.py runs/ca34 --config examples/cross-align.toml --pair deen \\
        --seeds 42 43 --set train.amp=none --threads 2
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from xlpe.evaluate.significance import aer_score, aer_stats, compare
from xlpe.experiments.recipes.cross_align import RecipeRun, load_config
from xlpe.experiments.recipes.cross_align_report import trained_stages
from xlpe.experiments.engine.stages import read_text
from xlpe.io.alignments import read_alignments


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="an xlpe experiment cross-align folder (its dev stages are reused)")
    ap.add_argument("--config", required=True, help="the recipe's config")
    ap.add_argument("--pair", required=True)
    ap.add_argument("--seeds", type=int, nargs="+", required=True, help="every seed to score (trained if missing)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as the recipe's --set")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--resamples", type=int, default=1000)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = load_config(args.config, args.set)
    cfg.validate()
    run = RecipeRun(cfg, args.run)
    e, dev, pair = cfg.experiment, cfg.data.dev_pair, args.pair
    for p in dict.fromkeys((dev, pair)):
        run.data_stage(p)
    enc = run.encoder()
    vocab = {p: run.vocab(p, enc) for p in dict.fromkeys((dev, pair))}
    run.dev_untrained(vocab[dev])
    run.train_chain(dev, e.seeds[0], vocab[dev], grids={})             # the dev choices
    stages = trained_stages(e)
    test, gold = run.test_slice(pair), run.gold[pair]
    stats = {}
    for seed in args.seeds:
        models = run.train_chain(pair, seed, vocab[pair])
        for stage in stages:
            stats[(stage, seed)] = aer_stats(run.trained_links(pair, stage, seed, models[stage])[test], gold[test])
    pp = run.data[pair]["paths"]
    lengths = [(len(a.split(" ")), len(b.split(" "))) for a, b in
               zip(read_text(pp["gold.src"]), read_text(pp["gold.tgt"]))]
    baselines = {"eflomal": args.run / f"eflomal-{pair}" / "align" / "gold.align",
                 "untrained-argmax": args.run / f"links-{pair}" / "untrained-argmax.align",
                 "untrained-softmax": args.run / f"links-{pair}" / "untrained-softmax.align"}
    base = {n: [aer_stats(list(read_alignments(f, 0, lengths=lengths))[test], gold[test])]
            for n, f in baselines.items() if f.is_file()}
    base.update({f"+{s}": [stats[(s, seed)] for seed in args.seeds] for s in stages[:-1]})

    def row(s: np.ndarray) -> dict:
        t = s.sum(0)
        return {"aer": round(100 * aer_score(t), 2), "precision": round(100 * t[1] / t[2], 1),
                "recall": round(100 * t[0] / t[3], 1)}
    final = [stats[(stages[-1], seed)] for seed in args.seeds]
    out = {"pair": pair, "test_sentences": len(gold[test]), "seeds": args.seeds,
           "per_seed": {f"+{s}": {str(seed): row(stats[(s, seed)]) for seed in args.seeds} for s in stages},
           "comparisons": {f"+{stages[-1]} vs {n}": compare(       # a stage before it: the same seeds' chains
               "AER", b, final, aer_score, higher_is_better=False, resamples=args.resamples,
               paired_seeds=n.startswith("+")).verdict() for n, b in base.items()}}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
