"""Benchmark of the BTG preorderer on Europarl German→English (SPEC §5): speed, memory and quality.

Trains :class:`xlpe.reorder.btg.BTGPreorderer` on the ComTrans Europarl sample with its automatic
alignments (``comtrans.auto-align.de-en``: ``i-j``, 0-based, i = German), from lader oracle ranks
(:func:`xlpe.reorder.oracle.lader_ranks`, default options), and evaluates on the 508 RWTH gold De→En
sentences against the ranks of their gold alignments (1-based talp, sure ``i-j`` and possible ``ipj``
links, all used). Gold sentences that also occur verbatim in the training data are removed from training.

Prints one JSON object: chunk and τ accuracy (lader ``evaluate-lader`` corpus totals, 0–1) of the identity
order, of the preorderer and of the oracle order; seconds per training iteration; sentences per second
when applying the model with ``--processes``; peak RSS of this process and of its worker processes.

Example (lader's defaults: Pegasos, chunk loss, beam 4)::

    python benchmarks/bench_btg.py --iterations 1 --processes 2

The best setting measured (2 CPU cores, 2026-11; identity τ 0.9250, chunk 0.7706)::

    python benchmarks/bench_btg.py --iterations 4 --learner perceptron --average --loss tau=1 \
        --classes 50 --shape-factor --extra-templates 'P%SP%ET' --processes 2
    # gold τ 0.9349, chunk 0.7959; 118 s/iteration; 414-608 sentences/s applying; peak RSS 0.9 GB

lader's defaults gave τ 0.9243 / chunk 0.7781 after one iteration (326 s, RSS 0.4 GB); the words-only
averaged perceptron with the τ loss τ 0.9310 after three (112 s/iteration). The automatic alignments are
noisy: on 1000 held-out training sentences (automatic ranks) no setting beat the identity's τ (0.933).

Quick look on a subset::

    python benchmarks/bench_btg.py --train-limit 3000 --iterations 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import sys
import time
from pathlib import Path

import numpy as np

from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
from xlpe.reorder.btg import BTGConfig, BTGPreorderer
from xlpe.reorder.oracle import lader_ranks, order_from_ranks

DATA = Path(os.environ.get("XLPE_SHARED_DATA", "/work/shared/data"))


def read_tokens(path: Path) -> list[list[str]]:
    with open(path, encoding="utf-8") as f:
        return [[t for t in line.rstrip("\n").split(" ") if t] for line in f]


def read_links(path: Path, base: int) -> list[list[tuple[int, int]]]:
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            links = []
            for item in line.split():
                i, j = re.split(r"[-p?]", item)
                links.append((int(i) - base, int(j) - base))
            out.append(links)
    return out


def shape_factor(word: str) -> str:
    """A cheap word-class stand-in (no mkcls/POS available offline): case pattern + 3-letter suffix."""
    case = "C" if word[:1].isupper() else ("d" if word[:1].isdigit() else ("l" if word[:1].isalpha() else "p"))
    return case + word[-3:].lower()


def induce_classes(sents: list[list[str]], k: int = 50, top: int = 300, min_count: int = 3, dims: int = 50,
                   iters: int = 20, seed: int = 0) -> dict[str, str]:
    """Unsupervised word classes (a stand-in for mkcls, which the paper used): k-means on SVD-reduced
    left/right-neighbour count vectors of the words seen ``min_count`` times. Unknown words fall back to
    :func:`shape_factor` at lookup time."""
    from collections import Counter

    counts = Counter(w for s in sents for w in s)
    vocab = [w for w, c in counts.most_common() if c >= min_count]
    wid = {w: i for i, w in enumerate(vocab)}
    ctx = {w: i for i, w in enumerate(vocab[:top])}
    other, bos = top, top + 1
    rows, lcols, rcols = [], [], []
    for s in sents:
        c = [bos] + [ctx.get(w, other) for w in s] + [bos]
        for p, w in enumerate(s):
            i = wid.get(w)
            if i is not None:
                rows.append(i)
                lcols.append(c[p])
                rcols.append(top + 2 + c[p + 2])
    m = np.zeros((len(vocab), 2 * (top + 2)))
    np.add.at(m, (np.array(rows), np.array(lcols)), 1.0)
    np.add.at(m, (np.array(rows), np.array(rcols)), 1.0)
    m = np.log1p(m)
    m /= np.linalg.norm(m, axis=1, keepdims=True) + 1e-9
    u, sv, _ = np.linalg.svd(m, full_matrices=False)
    x = u[:, :dims] * sv[:dims]
    x /= np.linalg.norm(x, axis=1, keepdims=True) + 1e-9
    rng = np.random.default_rng(seed)
    cent = x[rng.choice(len(x), size=k, replace=False)]
    for _ in range(iters):
        lab = np.argmax(x @ cent.T, axis=1)
        for j in range(k):
            sel = x[lab == j]
            if len(sel):
                cent[j] = sel.mean(0) / (np.linalg.norm(sel.mean(0)) + 1e-9)
    lab = np.argmax(x @ cent.T, axis=1)
    return {w: f"k{lab[i]}" for w, i in wid.items()}


def rss_mb() -> dict:
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"peak_rss_mb": round(me, 1), "peak_rss_children_mb": round(kids, 1)}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-limit", type=int, default=0, help="use the first N training sentences (0 = all)")
    ap.add_argument("--iterations", type=int, default=3)
    ap.add_argument("--processes", type=int, default=2, help="worker processes when applying the model")
    ap.add_argument("--beam", type=int, default=BTGConfig.beam)
    ap.add_argument("--loss", default=BTGConfig.loss)
    ap.add_argument("--hash-bits", type=int, default=BTGConfig.hash_bits)
    ap.add_argument("--max-term", type=int, default=BTGConfig.max_term)
    ap.add_argument("--max-len", type=int, default=BTGConfig.max_len)
    ap.add_argument("--learner", default=BTGConfig.learner, choices=["pegasos", "perceptron", "mira"])
    ap.add_argument("--mira-c", type=float, default=BTGConfig.mira_c)
    ap.add_argument("--cost", type=float, default=BTGConfig.cost)
    ap.add_argument("--average", action="store_true", help="predict with averaged weights")
    ap.add_argument("--attach-null", default="right", choices=["right", "left"])
    ap.add_argument("--shape-factor", action="store_true",
                    help="add a second factor column (case + suffix) as a stand-in for word classes")
    ap.add_argument("--classes", default="",
                    help="comma-separated K: add one factor column of K induced word classes per K "
                         "(k-means on neighbour counts; a stand-in for mkcls)")
    ap.add_argument("--extra-templates", default="",
                    help="comma-separated templates added to the word templates, e.g. 'P%%SP%%ET'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default="", help="save the trained model to this directory")
    ap.add_argument("--progress", action="store_true")
    args = ap.parse_args(argv)

    europarl = DATA / "europarl-comtrans-de-en"
    gold = DATA / "word-alignment-gold" / "deen"
    de = read_tokens(europarl / "comtrans.de")
    al = read_links(europarl / "comtrans.auto-align.de-en", base=0)
    g_de = read_tokens(gold / "deen.de")
    g_al = read_links(gold / "deen.talp", base=1)

    gold_set = {" ".join(s) for s in g_de}
    keep = [k for k, s in enumerate(de) if " ".join(s) not in gold_set]
    excluded = len(de) - len(keep)
    if args.train_limit:
        keep = keep[: args.train_limit]
    t0 = time.perf_counter()
    tr_words = [de[k] for k in keep]
    tr_ranks = [lader_ranks(al[k], len(de[k]), src_words=de[k], attach_null=args.attach_null) for k in keep]
    g_ranks = [lader_ranks(a, len(s), src_words=s, attach_null=args.attach_null) for s, a in zip(g_de, g_al)]
    t_ranks = time.perf_counter() - t0

    class_sizes = [int(k) for k in args.classes.split(",") if k]
    class_maps = [induce_classes(tr_words, k=k, seed=args.seed) for k in class_sizes]

    def annotate(sents):
        if not args.shape_factor and not class_maps:
            return sents
        out = []
        for s in sents:
            toks = []
            for w in s:
                cols = [w]
                for classes in class_maps:
                    cols.append(classes.get(w) or "u" + shape_factor(w))
                if args.shape_factor:
                    cols.append(shape_factor(w))
                toks.append("|".join(c.replace("|", "/") for c in cols))
            out.append(toks)
        return out

    extra = tuple(t for t in args.extra_templates.split(",") if t)
    cfg = BTGConfig(templates=BTGConfig.templates + extra, beam=args.beam, loss=args.loss,
                    hash_bits=args.hash_bits, max_term=args.max_term, max_len=args.max_len,
                    learner=args.learner, cost=args.cost, mira_c=args.mira_c, average=args.average,
                    seed=args.seed, factors=1 + bool(args.shape_factor) + len(class_maps))
    model = BTGPreorderer(cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    hist = model.train(annotate(tr_words), tr_ranks, iterations=args.iterations, progress=args.progress,
                       early_stop=False)
    t_train, c_train = time.perf_counter() - t0, time.process_time() - c0
    if args.save:
        model.save(args.save)

    g_in = annotate(g_de)
    t0 = time.perf_counter()
    orders = model.predict_many(g_in, processes=args.processes)
    t_apply = time.perf_counter() - t0
    # a longer apply run for a steadier speed figure: the training sentences (first 2000)
    speed_in = annotate(tr_words[:2000])
    t0 = time.perf_counter()
    model.predict_many(speed_in, processes=args.processes)
    t_apply2 = time.perf_counter() - t0

    identity = corpus_reorder_scores([list(range(len(s))) for s in g_de], g_ranks)
    system = corpus_reorder_scores(orders, g_ranks)
    oracle = corpus_reorder_scores([order_from_ranks(r) for r in g_ranks], g_ranks)
    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "config": cfg.to_dict() | {"templates": "default" + ("+" + ",".join(extra) if extra else ""),
                                   "factor_templates": "default"},
        "train_sentences": len(keep),
        "train_used": hist[0]["sentences"] if hist else 0,
        "train_skipped_long": hist[0]["skipped"] if hist else 0,
        "gold_excluded_from_train": excluded,
        "ranks_seconds": round(t_ranks, 2),
        "iterations": [{k: (round(v, 2) if isinstance(v, float) else v) for k, v in h.items()} for h in hist],
        "seconds_per_iteration": round(t_train / max(len(hist), 1), 2),
        "cpu_seconds_per_iteration": round(c_train / max(len(hist), 1), 2),
        "apply_gold_sentences_per_s": round(len(g_in) / t_apply, 1),
        "apply_train2000_sentences_per_s": round(len(speed_in) / t_apply2, 1),
        "processes": args.processes,
        "gold_identity": {k: identity[k] for k in ("tau", "chunk", "tau_sent", "chunk_sent")},
        "gold_preorder": {k: system[k] for k in ("tau", "chunk", "tau_sent", "chunk_sent")},
        "gold_oracle": {k: oracle[k] for k in ("tau", "chunk")},
        **rss_mb(),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
