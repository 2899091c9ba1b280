"""Paired test of the two ways of joining a trained Cross-Align model's directions, on a finished
``xlpe experiment cross-align`` folder: the links the recipe wrote for ++SSA (``links-<pair>/ssa-s<seed>.align``;
``--stage ssa-r2`` for a further round), with the join the dev set chose, against the paper's piece-level join at
the same layer and τ, re-extracted here.
Scores the test part of every pair (the dev pair without its first ``data.dev_lines`` sentences) with a paired
bootstrap over gold sentences (:func:`xlpe.evaluate.significance.compare`, 1,000 resamples). Prints JSON.

Not a test. Usage::

    python benchmarks/crossalign_join_ab.py runs/cross-align
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from xlpe.align.crossalign import CrossAligner
from xlpe.evaluate.significance import aer_score, aer_stats, compare
from xlpe.experiments.cross_align_report import split_key
from xlpe.io.alignments import read_alignments


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", type=Path, help="a finished xlpe experiment cross-align folder")
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--stage", default="ssa", help="the trained model: ssa (the paper's SSA) or ssa-r2, ... "
                    "(a further round of experiment.ssa_rounds)")
    args = ap.parse_args(argv)
    doc = json.loads((args.run / "results.json").read_text())
    cfg, ch = doc["config"], doc["results"]["choices"]
    st = args.stage
    base, sym, vec = split_key(ch[f"{st}_extraction"])
    if base == "argmax":
        kw = {"method": "argmax", "null_sink": "none"}
    else:
        kw = {"threshold": float(base)}
    kw["word_vectors"] = vec
    if cfg["experiment"]["trained_layer"] == "dev":
        kw["layer"] = ch[f"{st}_layer"]
    seed = cfg["experiment"]["seeds"][0]
    out = {"stage": st, "chosen": {"extraction": ch[f"{st}_extraction"], **kw}, "pairs": {}}
    for pair in doc["results"]["pairs"]:
        d = args.run / f"data-{pair}"
        src, tgt = (d / "gold.src").read_text().splitlines(), (d / "gold.tgt").read_text().splitlines()
        lengths = [(len(a.split(" ")), len(b.split(" "))) for a, b in zip(src, tgt)]
        gold = list(read_alignments(d / "gold.talp", 0, lengths=lengths))
        chosen = list(read_alignments(args.run / f"links-{pair}" / f"{st}-s{seed}.align", 0, lengths=lengths))
        al = CrossAligner.from_pretrained(args.run / f"train-{pair}-s{seed}-{st}" / "ssa" / "model")
        paper = al.align([s.split(" ") for s in src], [t.split(" ") for t in tgt], symmetrize="pieces", **kw)
        sl = slice(cfg["data"]["dev_lines"] if pair == cfg["data"]["dev_pair"] else 0, None)
        a, b = aer_stats(paper[sl], gold[sl]), aer_stats(chosen[sl], gold[sl])
        c = compare("AER", [a], [b], aer_score, higher_is_better=False, resamples=args.resamples)
        out["pairs"][pair] = {"sentences": c.sentences, "aer_pieces": round(100 * aer_score(a.sum(0)), 2),
                              f"aer_{sym}": round(100 * aer_score(b.sum(0)), 2), "p_bootstrap": round(c.p_bootstrap, 4),
                              "gain_ci95": [round(100 * x, 2) for x in c.ci95], "verdict": c.verdict()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
