"""Dev study on a finished ``xlpe experiment cross-align`` folder: an ensemble of the SSA rounds' models, their two
directions' softmax probabilities averaged at one layer before thresholding, against each model alone.

Every combination of ``--models`` (stage names: ``ssa``, ``ssa-r2``, ...; the folders
``train-<dev pair>-s<seed>-<stage>``) is read on the dev part of the dev pair (its first ``data.dev_lines`` gold
sentences) with each τ of ``--taus`` and four joins: the paper's piece-level intersection, grow-diag-final-and over
each direction's word links, and a threshold on the mean or the geometric mean of ``P^f`` and ``P^b``. Prints JSON,
best first. Uses the dev part only: it is for choosing, not for reporting.

Not a test. Usage::

    python benchmarks/crossalign_round_ensemble.py runs/cross-align --config examples/cross-align.toml \\
        --models ssa ssa-r2 ssa-r3
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np
import torch

from xlpe.align.crossalign import CrossAligner
from xlpe.align.crossalign_extract import key_mask, softmax_both_ways, symmetrized_word_links, word_links
from xlpe.evaluate.significance import aer_score, aer_stats
from xlpe.experiments.cross_align import RecipeRun, load_config
from xlpe.io.alignments import Alignment

JOINS = ("pieces", "grow-diag-final-and", "mean", "geometric")


def _links(pf, pb, tau, join, sw, tw):
    if join == "pieces":
        return word_links((pf > tau) & (pb > tau), sw, tw)
    if join == "mean":
        return word_links((pf + pb) / 2 > tau, sw, tw)
    if join == "geometric":
        return word_links((pf * pb).sqrt() > tau, sw, tw)
    return symmetrized_word_links(pf > tau, pb > tau, sw, tw, join)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished xlpe experiment cross-align folder")
    ap.add_argument("--config", required=True, help="the recipe's config (for the dev pair and its dev part)")
    ap.add_argument("--models", nargs="+", default=["ssa", "ssa-r2", "ssa-r3"])
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--layer", type=int, default=7)
    ap.add_argument("--taus", type=float, nargs="+", default=[0.15, 0.2, 0.25, 0.3, 0.35, 0.4])
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args(argv)
    cfg = load_config(args.config, [])
    run = RecipeRun(cfg, args.run)
    dev = cfg.data.dev_pair
    run.data_stage(dev)
    src, tgt, gold = run.dev_part(dev)
    models = {m: CrossAligner.from_pretrained(args.run / f"train-{dev}-s{args.seed}-{m}" / "ssa" / "model")
              for m in args.models}
    combos = [c for k in range(1, len(models) + 1) for c in itertools.combinations(models, k)]
    stats: dict[tuple, np.ndarray] = {}
    first = next(iter(models.values()))            # every round shares the stage-1 model's vocabulary
    for k in range(0, len(src), args.batch_size):
        batch = first.encode([s.split(" ") for s in src[k:k + args.batch_size]],
                             [t.split(" ") for t in tgt[k:k + args.batch_size]], first_line=k + 1)
        sw, tw = batch.words[:batch.size], batch.words[batch.size:]
        probs = {}
        with torch.inference_mode():
            for name, m in models.items():
                hs, ht = m.hidden_states(batch, args.layer)
                scores = torch.bmm(hs.float(), ht.float().transpose(1, 2))
                probs[name] = softmax_both_ways(scores, key_mask(sw, "cls"), key_mask(tw, "cls"))
        for combo in combos:
            pf = sum(probs[n][0] for n in combo) / len(combo)
            pb = sum(probs[n][1] for n in combo) / len(combo)
            for tau, join in itertools.product(args.taus, JOINS):
                hyps = [Alignment.from_links((x[0], x[1]) for x in row) for row in _links(pf, pb, tau, join, sw, tw)]
                key = ("+".join(combo), tau, join)
                stats[key] = stats.get(key, 0) + aer_stats(hyps, gold[k:k + args.batch_size]).sum(0)
    rows = [{"models": m, "tau": t, "join": j, "dev_aer": round(100 * aer_score(v), 2)}
            for (m, t, j), v in stats.items()]
    print(json.dumps(sorted(rows, key=lambda r: r["dev_aer"]), indent=1))


if __name__ == "__main__":
    main()
