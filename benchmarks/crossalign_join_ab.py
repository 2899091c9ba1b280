"""Paired test of a trained Cross-Align model's dev-chosen extraction against an alternative, on a finished
``xlpe experiment cross-align`` folder: the links the recipe wrote for ++SSA (``links-<pair>/ssa-s<seed>.align``;
``--stage ssa-r2`` for a further round), against

- ``--against paper-join`` (default): the paper's piece-level join at the same layer, τ and states;
- ``--against piece-states``: the dev set's best extraction on piece states alone (the paper's; the recipe's choice
  before ``experiment.word_vectors`` offered each word's mean state), read from the stage's cached dev sweep
  (``dev-<stage>``) with the recipe's layer rule,

re-extracted here. Scores the test part of every pair (the dev pair without its first ``data.dev_lines``
sentences) with a paired bootstrap over gold sentences (:func:`xlpe.evaluate.significance.compare`, 1,000
resamples). Prints JSON.

Not a test. Usage::

    python benchmarks/crossalign_join_ab.py runs/cross-align
    python benchmarks/crossalign_join_ab.py runs/cross-align --stage ssa-r3 --against piece-states
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from xlpe.align.crossalign import CONFIG_NAME, CrossAligner
from xlpe.evaluate.significance import aer_score, aer_stats, compare
from xlpe.experiments.recipes.cross_align_sweep import DevChoice, best, grid_from_json, key_extraction, menu
from xlpe.io.alignments import read_alignments


def _piece_states_choice(run: Path, cfg: dict, stage: str, null_sink: str) -> DevChoice:
    """The best extraction on piece states in the stage's cached dev sweep, among the recipe's extractors and
    joins, at c or at every layer as ``experiment.trained_layer`` says."""
    e = cfg["experiment"]
    res = json.loads((run / f"dev-{stage}" / "done.json").read_text())["result"]
    grid = grid_from_json(res["grid"])
    bases = (list(e["thresholds"]) if "softmax" in e["trained_extractors"] else []) + (
        ["argmax"] if "argmax" in e["trained_extractors"] else [])
    layers = [res["align_layer"]] if e["trained_layer"] == "c" else None
    return best(grid, menu(bases, null_sink, e["symmetrize"], ["pieces"]), layers)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished xlpe experiment cross-align folder")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--stage", default="ssa", help="the trained model: ssa (the paper's SSA) or ssa-r2, ... "
                    "(a further round of experiment.ssa_rounds)")
    ap.add_argument("--against", choices=("paper-join", "piece-states"), default="paper-join")
    ap.add_argument("--seeds", type=int, nargs="+", help="training seeds, each model's links scored (default: the "
                    "recipe's first); with two or more the test keeps them together and adds a paired t-test")
    ap.add_argument("--pairs", nargs="+", help="the pairs to score (default: the recipe's)")
    args = ap.parse_args(argv)
    doc = json.loads((args.run / "results.json").read_text())
    cfg, ch = doc["config"], doc["results"]["choices"]
    st = args.stage
    seeds = args.seeds or cfg["experiment"]["seeds"][:1]
    model = args.run / f"train-{cfg['data']['dev_pair']}-s{seeds[0]}-{st}" / "ssa" / "model"
    sink = json.loads((model / CONFIG_NAME).read_text())["null_sink"]       # its softmax extraction's null sink
    chosen_layer = ch[f"{st}_layer"] if cfg["experiment"]["trained_layer"] == "dev" else None
    chosen = key_extraction(ch[f"{st}_extraction"], null_sink=sink, layer=chosen_layer)
    dev_aer = None
    if args.against == "paper-join":
        against = dataclasses.replace(chosen, symmetrize="pieces")
    else:
        choice = _piece_states_choice(args.run, cfg, st, sink)
        against, dev_aer = choice.extraction, choice.aer
        against = against if chosen_layer is not None else dataclasses.replace(against, layer=None)
    out = {"stage": st, "seeds": seeds, "chosen": str(chosen),
           "against": {"what": args.against, "extraction": str(against),
                       **({"dev_aer": round(100 * dev_aer, 2)} if dev_aer is not None else {})}, "pairs": {}}
    for pair in args.pairs or doc["results"]["pairs"]:
        d = args.run / f"data-{pair}"
        src, tgt = (d / "gold.src").read_text().splitlines(), (d / "gold.tgt").read_text().splitlines()
        lengths = [(len(a.split(" ")), len(b.split(" "))) for a, b in zip(src, tgt)]
        gold = list(read_alignments(d / "gold.talp", 0, lengths=lengths))
        sl = slice(cfg["data"]["dev_lines"] if pair == cfg["data"]["dev_pair"] else 0, None)
        a, b = [], []
        for seed in seeds:
            chosen = list(read_alignments(args.run / f"links-{pair}" / f"{st}-s{seed}.align", 0, lengths=lengths))
            al = CrossAligner.from_pretrained(args.run / f"train-{pair}-s{seed}-{st}" / "ssa" / "model")
            other = al.align([s.split(" ") for s in src], [t.split(" ") for t in tgt], extraction=against)
            a.append(aer_stats(other[sl], gold[sl]))
            b.append(aer_stats(chosen[sl], gold[sl]))
        c = compare("AER", a, b, aer_score, higher_is_better=False, resamples=args.resamples, paired_seeds=True)
        out["pairs"][pair] = {"sentences": c.sentences,
                              "aer_against": [round(100 * aer_score(x.sum(0)), 2) for x in a],
                              "aer_chosen": [round(100 * aer_score(x.sum(0)), 2) for x in b],
                              "p_bootstrap": round(c.p_bootstrap, 4), "gain_ci95": [round(100 * x, 2) for x in c.ci95],
                              "verdict": c.verdict()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
