"""Benchmark of the BTG preorderer on Europarl German→English (SPEC §5): speed, memory and quality.

Trains :class:`xlpe.reorder.btg.BTGPreorderer` on the ComTrans Europarl sample from lader oracle ranks
(:func:`xlpe.reorder.oracle.corpus_ranks`) of its word alignments, and evaluates on the 508 RWTH gold De→En
sentences against the ranks of their gold alignments (1-based talp, sure ``i-j`` and possible ``ipj``
links, all used). Gold sentences that also occur verbatim in the training data are removed from training.

Training alignments (``--align``): ``shipped`` = the corpus' automatic ``comtrans.auto-align.de-en``
(default, as before); ``eflomal`` = xlpe's own eflomal run (:class:`xlpe.align.eflomal.EflomalAligner`,
lowercased, on the corpus plus the test text as is standard for alignment; cached in ``--align-cache``
because eflomal cannot be seeded), symmetrised with ``--sym``; or a Pharaoh file (0-based; when it has a line
for every gold sentence after the training lines, as ``xlpe crossalign align`` gives on the corpus plus the gold
text, those lines give ``gold_label_ceiling``). ``--direction reverse`` reorders the English side into German
order (gold links reversed); ``--data synth:DIR`` runs on an
``xlpe synth`` folder (train.*, test.src/test.align as gold). ``--pos`` adds HanTa POS tags (optional
package ``HanTa``) as a factor column.

Prints one JSON object: chunk and τ accuracy (lader ``evaluate-lader`` corpus totals, 0–1) of the identity
order, of the preorderer and of the oracle order; seconds per training iteration; sentences per second
when applying the model with ``--processes``; peak RSS of this process and of its worker processes.

Example (lader's defaults: Pegasos, chunk loss, beam 4)::

    python benchmarks/bench_btg.py --iterations 1 --processes 2

The settings measured and their results are in ``docs/results/reorder.md``; ``--align eflomal`` also reports
``gold_label_ceiling`` (the lader ranks of the aligner's own links of the gold sentences → their order → corpus
τ against the gold ranks: what a preorderer that imitated its labels perfectly would score).

Quick look on a subset::

    python benchmarks/bench_btg.py --train-limit 3000 --iterations 2

``--score-iterations`` scores the dev part (the first ``--dev-lines`` gold sentences) and the rest after every
iteration (``gold_tau_by_iteration``), so one run gives the curve the iteration count is chosen on.
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
from xlpe.reorder.oracle import corpus_ranks, order_from_ranks

DATA = Path(os.environ.get("XLPE_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


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


def eflomal_links(src: list[list[str]], tgt: list[list[str]], cache: Path, *, sym: str,
                  lowercase: bool = True, stem: int = 0) -> tuple[list[list[tuple[int, int]]], list[float]]:
    """xlpe's own eflomal alignments of ``src``–``tgt`` (one joint run; cached under ``cache``, because
    eflomal 2.0 cannot be seeded), symmetrised with ``sym`` (or ``forward``/``reverse``), and eflomal's
    per-sentence scores (forward + reverse, per token; lower = more probable). ``stem`` > 0 aligns words
    cut to their first ``stem`` characters (less sparse on a small corpus; link indices do not change)."""
    from xlpe.align.eflomal import EflomalAligner
    from xlpe.align.symmetrize import canonical_method, symmetrize_sets

    import hashlib
    if stem:
        src = [[w[:stem] for w in s] for s in src]
        tgt = [[w[:stem] for w in s] for s in tgt]
    key = hashlib.sha1(json.dumps([src, tgt, lowercase]).encode()).hexdigest()[:12]
    d = cache / f"eflomal-{key}"
    if not (d / "scores.txt").exists():
        d.mkdir(parents=True, exist_ok=True)
        res = EflomalAligner(sym="forward", lowercase=lowercase, quiet=True).fit(src, tgt, scores=True)
        for name, als in (("fwd", res.forward), ("rev", res.reverse)):
            with open(d / f"{name}.txt", "w", encoding="utf-8") as f:
                f.writelines(" ".join(f"{i}-{j}" for i, j in sorted(a.sure)) + "\n" for a in als)
        with open(d / "scores.txt", "w", encoding="utf-8") as f:
            f.writelines(f"{a}\t{b}\n" for a, b in zip(res.scores_forward, res.scores_reverse))
    fwd, rev = read_links(d / "fwd.txt", 0), read_links(d / "rev.txt", 0)
    with open(d / "scores.txt", encoding="utf-8") as f:
        scores = [sum(float(x) for x in line.split("\t")) for line in f]
    if sym == "forward":
        return fwd, scores
    if sym == "reverse":
        return rev, scores
    method = canonical_method(sym)
    return [sorted(symmetrize_sets(set(a), set(b), method).sure) for a, b in zip(fwd, rev)], scores


def pos_tags(sents: list[list[str]], lang: str, cache: Path | None) -> list[list[str]]:
    """POS tags from the HanTa tagger (Wartena 2019; models for German ``ger`` and English ``en`` ship in
    the package), cached under ``cache``."""
    import hashlib
    path = None
    if cache is not None:
        key = hashlib.sha1(json.dumps([sents, lang]).encode()).hexdigest()[:12]
        path = cache / f"hanta-{lang}-{key}.json"
        if path.exists():
            return json.loads(path.read_text(encoding="utf-8"))
    try:
        from HanTa import HanoverTagger
    except ImportError:
        raise SystemExit("--pos needs the HanTa tagger: pip install HanTa") from None
    tagger = HanoverTagger.HanoverTagger({"ger": "morphmodel_ger.pgz", "en": "morphmodel_en.pgz"}[lang])
    tags = [[t.replace("|", "/") for t in tagger.tag_sent(s, taglevel=0)] if s else [] for s in sents]
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(tags), encoding="utf-8")
    return tags


def load_data(args) -> dict:
    """Training source sentences and links, test source sentences and gold links, for ``--data``."""
    if args.data == "europarl":
        europarl = DATA / "europarl-comtrans-de-en"
        gold = DATA / "word-alignment-gold" / "deen"
        src, tgt = read_tokens(europarl / "comtrans.de"), read_tokens(europarl / "comtrans.en")
        g_src, g_tgt = read_tokens(gold / "deen.de"), read_tokens(gold / "deen.en")
        g_al = read_links(gold / "deen.talp", base=1)
        shipped = europarl / "comtrans.auto-align.de-en"
    else:
        folder = Path(args.data.partition(":")[2])
        src, tgt = read_tokens(folder / "train.src"), read_tokens(folder / "train.tgt")
        g_src, g_tgt = read_tokens(folder / "test.src"), read_tokens(folder / "test.tgt")
        g_al = read_links(folder / "test.align", base=0)
        shipped = folder / "train.align"
    scores = g_auto = None
    if args.align == "shipped":
        al = read_links(shipped, base=0)
    elif args.align == "eflomal":
        # eflomal on the training corpus plus the test sentences (standard practice for alignment; the
        # test's gold alignments are never seen)
        links, scores = eflomal_links(src + g_src, tgt + g_tgt, Path(args.align_cache), sym=args.sym,
                                      lowercase=not args.cased_alignment, stem=args.align_stem)
        al, scores = links[: len(src)], scores[: len(src)]
        g_auto = links[len(src):]  # the same aligner's links of the gold sentences: the labels' ceiling
    else:
        links = read_links(Path(args.align), base=0)
        al = links[: len(src)]
        if len(links) == len(src) + len(g_src):  # the file also aligns the gold sentences: the labels' ceiling
            g_auto = links[len(src):]
    if len(al) != len(src):
        raise SystemExit(f"{len(al)} alignment lines for {len(src)} training sentences")
    if args.direction == "reverse":  # reorder the target-language side into source order
        src, g_src = tgt, g_tgt
        al = [[(j, i) for i, j in a] for a in al]
        g_al = [[(j, i) for i, j in a] for a in g_al]
        g_auto = [[(j, i) for i, j in a] for a in g_auto] if g_auto is not None else None
    return {"src": src, "al": al, "scores": scores, "g_src": g_src, "g_al": g_al, "g_auto": g_auto}


def split_tau(orders: list[list[int]], ranks: list, dev_lines: int) -> dict:
    """Corpus τ of ``orders`` against the gold ``ranks``: on the first ``dev_lines`` sentences (the dev part, for
    choices), on the rest (the test part) and on all."""
    out = {"all": corpus_reorder_scores(orders, ranks)["tau"]}
    if dev_lines:
        out["dev"] = corpus_reorder_scores(orders[:dev_lines], ranks[:dev_lines])["tau"]
        out["test"] = corpus_reorder_scores(orders[dev_lines:], ranks[dev_lines:])["tau"]
    return out


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="europarl",
                    help="'europarl' (ComTrans train, RWTH gold test) or 'synth:DIR' (an `xlpe synth` folder: "
                         "train.* to train, test.src/test.align as gold)")
    ap.add_argument("--direction", default="forward", choices=["forward", "reverse"],
                    help="forward: reorder the source side (German) into target (English) order; reverse: "
                         "the target side into source order (En->De), gold links reversed")
    ap.add_argument("--align", default="shipped",
                    help="training alignments: 'shipped' (europarl: comtrans.auto-align; synth: gold "
                         "train.align), 'eflomal' (xlpe's eflomal on train + test text, see --sym), or a "
                         "0-based Pharaoh file whose first lines belong to the training sentences")
    ap.add_argument("--sym", default="grow-diag-final-and",
                    help="symmetrisation of the eflomal links (intersection, grow-diag, grow-diag-final-and, "
                         "union, forward, reverse)")
    ap.add_argument("--align-stem", type=int, default=0,
                    help="with --align eflomal: align words cut to their first N characters (0 = whole words)")
    ap.add_argument("--cased-alignment", action="store_true", help="align cased text (default: lowercased)")
    ap.add_argument("--align-cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", "/tmp"), "xlpe-bench-btg"),
                    help="folder caching the eflomal alignments (eflomal cannot be seeded)")
    ap.add_argument("--drop-worst", type=float, default=0.0,
                    help="with --align eflomal: drop this fraction of training pairs with the worst eflomal "
                         "score (per-token forward + reverse)")
    ap.add_argument("--dev-lines", type=int, default=150,
                    help="also score the first N gold sentences (the dev part, for choices) and the rest (the RWTH "
                         "dev/test split; 0 = all)")
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
    ap.add_argument("--no-loss-augmented", action="store_true",
                    help="update towards the oracle from the plain best derivation (not score + loss)")
    ap.add_argument("--attach-null", default="right", choices=["right", "left", "free"],
                    help="training oracle: where unaligned words go (free: nowhere, left out of the τ loss)")
    ap.add_argument("--shape-factor", action="store_true",
                    help="add a second factor column (case + suffix) as a stand-in for word classes")
    ap.add_argument("--classes", default="",
                    help="comma-separated K: add one factor column of K induced word classes per K "
                         "(k-means on neighbour counts; a stand-in for mkcls)")
    ap.add_argument("--pos", action="store_true",
                    help="add a factor column of POS tags from the HanTa tagger (optional package `HanTa`; "
                         "STTS for German, Penn tags for English)")
    ap.add_argument("--extra-templates", default="",
                    help="comma-separated templates added to the word templates, e.g. 'P%%SP%%ET'")
    ap.add_argument("--extra-factor-templates", default="",
                    help="comma-separated templates added to the templates of the factor columns")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default="", help="save the trained model to this directory")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--score-iterations", action="store_true",
                    help="also score the dev and test parts after every training iteration (one process; the "
                         "training itself is unchanged): the iteration count chosen on dev from one run")
    args = ap.parse_args(argv)

    data = load_data(args)
    de, al, g_de, g_al = data["src"], data["al"], data["g_src"], data["g_al"]

    gold_set = {" ".join(s) for s in g_de}
    keep = [k for k, s in enumerate(de) if " ".join(s) not in gold_set]
    excluded = len(de) - len(keep)
    dropped = 0
    if args.drop_worst:
        if data["scores"] is None:
            raise SystemExit("--drop-worst needs --align eflomal")
        sc = np.array([data["scores"][k] for k in keep])
        # exactly that share, the highest scores (worst) first; ties broken by corpus order, so the count never
        # depends on how many sentences share the cut's score
        n_drop = int(round(len(keep) * args.drop_worst))
        worst = set(np.argsort(-sc, kind="stable")[:n_drop].tolist())
        dropped, keep = n_drop, [k for i, k in enumerate(keep) if i not in worst]
    if args.train_limit:
        keep = keep[: args.train_limit]
    t0 = time.perf_counter()
    tr_words = [de[k] for k in keep]
    tr_ranks = corpus_ranks(tr_words, [al[k] for k in keep], attach_null=args.attach_null)
    # the gold is scored as lader's evaluator does; 'free' is a training-side choice only
    g_attach = "right" if args.attach_null == "free" else args.attach_null
    g_ranks = corpus_ranks(g_de, g_al, attach_null=g_attach)
    t_ranks = time.perf_counter() - t0

    class_sizes = [int(k) for k in args.classes.split(",") if k]
    class_maps = [induce_classes(tr_words, k=k, seed=args.seed) for k in class_sizes]

    tag_seconds = 0.0
    if args.pos:
        lang = {"forward": "ger", "reverse": "en"}[args.direction]
        all_tags = pos_tags(de, lang, Path(args.align_cache))
        tr_tags = [all_tags[k] for k in keep]
        g_tags = pos_tags(g_de, lang, Path(args.align_cache))
        t0 = time.perf_counter()
        pos_tags(g_de, lang, None)  # uncached: the tagging speed on the test set
        tag_seconds = time.perf_counter() - t0

    def annotate(sents, tags=None):
        if not args.shape_factor and not class_maps and not args.pos:
            return sents
        out = []
        for k, s in enumerate(sents):
            toks = []
            for p, w in enumerate(s):
                cols = [w]
                if args.pos:
                    cols.append(tags[k][p])
                for classes in class_maps:
                    cols.append(classes.get(w) or "u" + shape_factor(w))
                if args.shape_factor:
                    cols.append(shape_factor(w))
                toks.append("|".join(c.replace("|", "/") for c in cols))
            out.append(toks)
        return out

    extra = tuple(t for t in args.extra_templates.split(",") if t)
    fextra = tuple(t for t in args.extra_factor_templates.split(",") if t)
    cfg = BTGConfig(templates=BTGConfig.templates + extra, factor_templates=BTGConfig.factor_templates + fextra,
                    beam=args.beam, loss=args.loss,
                    hash_bits=args.hash_bits, max_term=args.max_term, max_len=args.max_len,
                    learner=args.learner, cost=args.cost, mira_c=args.mira_c, average=args.average,
                    loss_augmented=not args.no_loss_augmented,
                    seed=args.seed, factors=1 + bool(args.pos) + bool(args.shape_factor) + len(class_maps))
    model = BTGPreorderer(cfg)
    g_in = annotate(g_de, g_tags if args.pos else None)
    by_iteration, scoring = [], [0.0, 0.0]       # seconds spent scoring: wall, CPU (left out of training's)

    def score_iteration(st: dict) -> None:       # prediction reads the weights only: training is unchanged
        t1, c1 = time.perf_counter(), time.process_time()
        o = model.predict_many(g_in)
        by_iteration.append({"iteration": st["iteration"], **split_tau(o, g_ranks, args.dev_lines)})
        scoring[0] += time.perf_counter() - t1
        scoring[1] += time.process_time() - c1

    t0, c0 = time.perf_counter(), time.process_time()
    hist = model.train(annotate(tr_words, tr_tags if args.pos else None), tr_ranks, iterations=args.iterations,
                       progress=args.progress, early_stop=False,
                       callback=score_iteration if args.score_iterations else None)
    t_train, c_train = time.perf_counter() - t0 - scoring[0], time.process_time() - c0 - scoring[1]
    if args.save:
        model.save(args.save)

    t0 = time.perf_counter()
    orders = model.predict_many(g_in, processes=args.processes)
    t_apply = time.perf_counter() - t0
    # a longer apply run for a steadier speed figure: the training sentences (first 2000)
    speed_in = annotate(tr_words[:2000], tr_tags[:2000] if args.pos else None)
    t0 = time.perf_counter()
    model.predict_many(speed_in, processes=args.processes)
    t_apply2 = time.perf_counter() - t0

    identity = corpus_reorder_scores([list(range(len(s))) for s in g_de], g_ranks)
    system = corpus_reorder_scores(orders, g_ranks)
    oracle = corpus_reorder_scores([order_from_ranks(r) for r in g_ranks], g_ranks)
    # issue 17's split: choices are made on the first dev_lines gold sentences, the rest is reported
    dev, test = slice(None, args.dev_lines), slice(args.dev_lines, None)
    parts = (("identity", [list(range(len(s))) for s in g_de]), ("preorder", orders))
    dev_scores = ({name: corpus_reorder_scores(o[dev], g_ranks[dev])["tau"] for name, o in parts}
                  if args.dev_lines else None)
    test_scores = {name: corpus_reorder_scores(o[test], g_ranks[test])["tau"] for name, o in parts}
    ceiling = None
    if data["g_auto"] is not None:  # a model that reproduced its labels exactly would score this
        ceiling = corpus_reorder_scores(
            [order_from_ranks(r) for r in corpus_ranks(g_de, data["g_auto"], attach_null=g_attach)], g_ranks)
    result = {
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "config": cfg.to_dict() | {"templates": "default" + ("+" + ",".join(extra) if extra else ""),
                                   "factor_templates": "default" + ("+" + ",".join(fextra) if fextra else "")},
        "classes": args.classes, "shape_factor": args.shape_factor,
        "data": args.data, "direction": args.direction, "align": args.align,
        "sym": args.sym if args.align == "eflomal" else None,
        "align_stem": args.align_stem if args.align == "eflomal" else None, "attach_null": args.attach_null,
        "train_sentences": len(keep),
        "dropped_worst": dropped,
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
        "pos_tagging_sentences_per_s": round(len(g_de) / tag_seconds, 1) if args.pos else None,
        "gold_identity": {k: identity[k] for k in ("tau", "chunk", "tau_sent", "chunk_sent")},
        "gold_preorder": {k: system[k] for k in ("tau", "chunk", "tau_sent", "chunk_sent")},
        "gold_oracle": {k: oracle[k] for k in ("tau", "chunk")},
        "gold_label_ceiling": {k: ceiling[k] for k in ("tau", "chunk")} if ceiling else None,
        f"gold_first_{args.dev_lines}_tau": dev_scores,     # the dev part: choose settings on this
        f"gold_after_{args.dev_lines}_tau": test_scores,
        "gold_tau_by_iteration": by_iteration or None,     # --score-iterations: dev and test τ per iteration
        **rss_mb(),
    }
    print(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()
