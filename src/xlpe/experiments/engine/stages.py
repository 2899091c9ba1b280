"""The stages every recipe shares, each cached by content and resumable (:mod:`xlpe.experiments.engine.cache`):
the built-in data, subwords, statistical alignment, the BTG preorderer. ``xlpe demo`` and every
``xlpe experiment`` are short compositions of these plus their own runs (:mod:`xlpe.experiments.engine.runs`)
and report; a new recipe adds stages, not copies.

Each function takes the recipe's output folder and returns the stage's result dict (paths and numbers); a
stage runs again only when its parameters (file contents included) change.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import file_sig, run_stage
from xlpe.keys import Inputs, config_material, keyed
from xlpe.reorder.oracle import corpus_ranks
from xlpe.io.atomic import atomic_write

log = logging.getLogger("xlpe.experiments")


def read_text(path) -> list[str]:
    """The lines of a text file (validated UTF-8, no line ends)."""
    from xlpe.io.text import read_lines
    return [t for _, t in read_lines(path)]

SPLITS = ("train", "dev", "test")


# The declared inputs of each stage (the key rule: xlpe.keys). ``files`` are signatures by content.

@dataclass(frozen=True)
class SynthInputs(Inputs):
    synthetic: dict                        # the generator's config (xlpe.keys.config_material)
    sizes: list                            # train, dev, test pairs
    layout: int = keyed("result")          # the layout of the stage's folder and result


@dataclass(frozen=True)
class DataInputs(Inputs):
    data: dict                             # the [data] table
    files: list                            # training and gold files
    exclude: str = ""                      # which training pairs a gold sentence removes ("" = none)


@dataclass(frozen=True)
class SubwordInputs(Inputs):
    vocab: int
    files: list


@dataclass(frozen=True)
class AlignInputs(Inputs):
    files: list
    lower: bool
    sym: str


@dataclass(frozen=True)
class PreorderInputs(Inputs):
    files: list                            # training links and source, every split's source
    sentences: int = keyed("n")
    iterations: int = keyed("its")
    btg: dict = keyed("btg")
    model: str = keyed("model")            # a trained preorderer to load ("" = train one)
    seed: int = keyed("seed")
    attach_null: str = keyed("attach_null")
    level: str = "word"                    # word | subword
    spm: list | None = None                # the subword model, at the subword level


@dataclass(frozen=True)
class ParseInputs(Inputs):
    files: list
    model: str


@dataclass(frozen=True)
class DPEInputs(Inputs):
    files: list                            # source, word links, subword model


@dataclass
class DataSpec:
    """A recipe's ``[data]`` table: the built-in pair (``builtin``: a synthetic profile) or the file paths."""

    builtin: str = ""                      # synthetic profile (sov, v2, svo-flip, identity); "" = files below
    builtin_sizes: list[int] = field(default_factory=lambda: [20000, 500, 500])   # train, dev, test pairs
    train_src: str = ""
    train_tgt: str = ""
    dev_src: str = ""
    dev_tgt: str = ""
    test_src: str = ""
    test_tgt: str = ""
    extra_tests: dict[str, list[str]] = field(default_factory=dict)   # name -> [src, tgt]
    train_align: str = ""                  # Pharaoh alignments of the training pairs (0-based); "" = eflomal
    gold_src: str = ""                     # gold alignment set for Table 3 (built-in: the test set)
    gold_tgt: str = ""
    gold_align: str = ""
    gold_base: int = 1
    gold_reverse: bool = False             # gold file is tgt-src (e.g. the De-En RWTH file for En->De)
    exclude_gold: bool = True              # drop training pairs whose source or target is a gold sentence
    # the first N gold lines are a dev part for choices (preorderer settings, budgets); the rest is the reported
    # gold set, and the test set when the test set is the gold set (0 = no split). The whole gold set stays a
    # second test set, marked as including the dev part (for comparison with the papers)
    gold_dev_lines: int = 0
    # dependency trees of the sources (CoNLL-U, one tree per line), for structural PE; "" = parse them
    # (built-in pairs: the generator's gold trees)
    train_trees: str = ""
    dev_trees: str = ""
    test_trees: str = ""
    align_lowercase: bool = True           # lowercase for eflomal (the gold-AER protocol)




def synth_stage(out: Path, profile: str, seed: int, sizes: Sequence[int], force: bool = False) -> dict:
    """The built-in synthetic pair (``sizes`` = train, dev, test pairs): the paths of every split's files."""
    from xlpe.data.synthetic import SyntheticConfig, synth

    scfg = SyntheticConfig(profile=profile, seed=seed)
    params = SynthInputs(synthetic=config_material(scfg), sizes=list(sizes), layout=3)

    def fn(d: Path) -> dict:
        synth(d, scfg, sizes=dict(zip(SPLITS, sizes)))
        return {"paths": {f"{s}_{ext}": str(d / f"{s}.{ext}") for s in SPLITS
                          for ext in ("src", "tgt", "align", "order", "conllu")}}
    return run_stage(out, "synth", params, fn, force)


def data_stage(out: Path, d: DataSpec, seed: int = 1) -> dict:
    """Paths of every split (synthesised for the built-in pair, with ``seed``), training pairs minus gold
    sentences (``exclude_gold``)."""
    if d.builtin:            # the generator's gold alignments of the test set are the gold set
        p = synth_stage(out, d.builtin, seed, d.builtin_sizes)["paths"]
        return {"paths": {**{k: v for k, v in p.items() if k.endswith(("_src", "_tgt"))}, "gold_src": p["test_src"],
                          "gold_tgt": p["test_tgt"], "gold_align": p["test_align"],
                          **{f"{s}_trees": p[f"{s}_conllu"] for s in SPLITS}},
                "builtin_align": {s: p[f"{s}_align"] for s in SPLITS},     # the generator's word alignments
                "gold_base": 0, "gold_reverse": False, "extra_tests": dict(d.extra_tests), "excluded": 0}

    inputs = [d.train_src, d.train_tgt] + [p for p in (d.gold_src, d.gold_tgt) if p]
    # a pair goes when either side is a gold sentence
    params = DataInputs(data=config_material(d), files=file_sig(*inputs),
                        exclude="source or target" if d.exclude_gold and d.gold_src else "")

    def fn(sd: Path) -> dict:
        paths = {k: getattr(d, k) for k in ("train_src", "train_tgt", "dev_src", "dev_tgt", "test_src", "test_tgt",
                                            "gold_src", "gold_tgt", "gold_align", "train_trees", "dev_trees",
                                            "test_trees")}
        excluded = 0
        if d.exclude_gold and d.gold_src:
            # either side: Europarl repeats boilerplate ("Die Abstimmung findet morgen um 12.00 Uhr statt .")
            # under other English wordings, and a gold target in training leaks the test reference
            gold_src = set(read_text(d.gold_src))
            gold_tgt = set(read_text(d.gold_tgt)) if d.gold_tgt else set()
            src, tgt = read_text(d.train_src), read_text(d.train_tgt)
            if len(src) != len(tgt):
                raise ConfigError(f"{d.train_src} has {len(src)} lines but {d.train_tgt} has {len(tgt)}")
            keep = [i for i, (s, t) in enumerate(zip(src, tgt)) if s not in gold_src and t not in gold_tgt]
            excluded = len(src) - len(keep)
            if excluded:
                for side, lines in (("src", src), ("tgt", tgt)):
                    with atomic_write(sd / f"train.{side}") as f:
                        f.writelines(lines[i] + "\n" for i in keep)
                paths.update(train_src=str(sd / "train.src"), train_tgt=str(sd / "train.tgt"))
                if d.train_align:
                    al = read_text(d.train_align)
                    with atomic_write(sd / "train.align") as f:
                        f.writelines(al[i] + "\n" for i in keep)
                if d.train_trees:                 # the trees of the kept pairs only, so they stay line-aligned
                    from xlpe.io.conllu import read_conllu, write_conllu
                    trees = list(read_conllu(d.train_trees))
                    if len(trees) != len(src):
                        raise ConfigError(f"{d.train_trees} has {len(trees)} trees for {len(src)} training lines")
                    write_conllu(sd / "train.conllu", (trees[i] for i in keep))
                    paths["train_trees"] = str(sd / "train.conllu")
        log.info("data: %d training pairs removed because their source or target is a gold sentence", excluded)
        extra, split = dict(d.extra_tests), {}
        if d.gold_dev_lines:
            split = _split_gold(d, sd, paths)
            if d.test_src == d.gold_src:      # BLEU on the reported part; the whole set as a marked extra test
                paths.update(test_src=paths["gold_src"], test_tgt=paths["gold_tgt"])
                extra["all-gold"] = [d.gold_src, d.gold_tgt]
            if not d.dev_src:
                paths.update(dev_src=paths["gold_dev_src"], dev_tgt=paths["gold_dev_tgt"])
        return {"paths": paths, "gold_base": d.gold_base, "gold_reverse": d.gold_reverse, "gold_split": split,
                "extra_tests": extra, "excluded": excluded,
                "train_align": str(sd / "train.align") if (excluded and d.train_align) else d.train_align}
    return run_stage(out, "data", params, fn)


def _split_gold(d: DataSpec, sd: Path, paths: dict) -> dict:
    """Write the gold set's dev part (the first ``gold_dev_lines``) and its reported part; ``paths`` then
    names the reported part as the gold set and the dev part as ``gold_dev_*``."""
    parts = {k: read_text(getattr(d, f"gold_{k}")) for k in ("src", "tgt", "align")}
    n, k = len(parts["src"]), d.gold_dev_lines
    if len({len(v) for v in parts.values()}) != 1:
        raise ConfigError(f"the gold files have {', '.join(str(len(v)) for v in parts.values())} lines")
    if not 0 < k < n:
        raise ConfigError(f"gold_dev_lines = {k}, but the gold set has {n} sentences: keep some for reporting")
    for part, lines in (("gold_dev", slice(0, k)), ("gold", slice(k, n))):
        for side, text in parts.items():
            with atomic_write(sd / f"{part}.{side}") as f:
                f.writelines(x + "\n" for x in text[lines])
            paths[f"{part}_{side}"] = str(sd / f"{part}.{side}")
    return {"dev": [1, k], "reported": [k + 1, n], "all": n}


def subword_stage(out: Path, files: Sequence[str | Path], vocab_size: int, force: bool = False) -> str:
    """A joint sentencepiece model trained on ``files``; returns its path."""
    params = SubwordInputs(vocab=vocab_size, files=file_sig(*files))

    def fn(d: Path) -> dict:
        from xlpe.data.subword import train_subwords
        m = train_subwords(list(files), d / "spm.model", vocab_size=vocab_size)
        return {"model": str(d / "spm.model"), "vocab_size": m.vocab_size}
    return run_stage(out, "subword", params, fn, force)["model"]


def align_stage(out: Path, splits: Mapping[str, tuple[str, str]], *, lowercase: bool = False,
                gold: Mapping[str, Sequence] | None = None, sym: str = "grow-diag-final-and",
                name: str = "align", force: bool = False) -> dict:
    """eflomal + symmetrisation over the sentence pairs of every split at once (the AER protocol aligns the
    gold sentences together with the training data); writes ``<split>.align`` (0-based) in ``out/name`` and
    scores the splits that have ``gold`` alignments. Returns ``{"paths": {split: file}, "aer": {split: {aer,
    precision, recall}}, "pairs", "align_seconds"}``.

    Links that train a model (BTG labels, DPE targets, oracle reorderings) come from a run over the training
    pairs alone: a run that also saw test pairs makes them a function of the test references."""
    params = AlignInputs(files=file_sig(*(p for pair in splits.values() for p in pair)), lower=lowercase, sym=sym)

    def fn(d: Path) -> dict:
        from xlpe.align.eflomal import EflomalAligner
        from xlpe.evaluate.aer import corpus_aer
        from xlpe.io import read_bitext, write_alignments

        pairs = {s: list(read_bitext(*splits[s])) for s in splits}
        low = (lambda ws: [w.lower() for w in ws]) if lowercase else (lambda ws: ws)
        src = [low(p[0]) for s in splits for p in pairs[s]]
        tgt = [low(p[1]) for s in splits for p in pairs[s]]
        t0 = time.time()
        als = EflomalAligner(sym=sym, quiet=True).align(src, tgt)
        res: dict[str, Any] = {"align_seconds": round(time.time() - t0, 1), "pairs": len(src), "paths": {},
                               "aer": {}}
        k = 0
        for s in splits:
            n = len(pairs[s])
            res["paths"][s] = str(d / f"{s}.align")
            write_alignments(d / f"{s}.align", als[k:k + n], 0)
            if gold and s in gold:
                res["aer"][s] = corpus_aer(als[k:k + n], gold[s]).to_dict()
            k += n
        return res
    return run_stage(out, name, params, fn, force)


def preorder_stage(out: Path, *, train_src: str, train_align: str, splits: Mapping[str, str], sentences: int = 0,
                   iterations: int = 3, seed: int = 1, btg: Mapping[str, Any] | None = None,
                   attach_null: str = "right", model: str = "", processes: int = 1,
                   gold: Mapping[str, Sequence] | None = None, level: str = "word", spm: str | None = None,
                   force: bool = False) -> dict:
    """Train the BTG preorderer on ``sentences`` (0 = all) training sentences labelled by their alignments (or
    load ``model``), predict the order of every split's source (``<split>.order``), and write the oracle orders
    of the training data (``train.oracle.order``). Kendall τ / chunk against the training oracle, and against
    the ``gold`` alignments of the splits that have them, beside the identity order.

    ``attach_null``: unaligned source words in the training labels, ``right`` (lader) or ``free`` (no rank,
    left out of the τ loss; needs a τ-only loss). The oracle orders always use ``right``.

    ``level``: ``word``, or ``subword`` (SPEC §4.1 and Ding et al. fn. 1: the BTG model works on the BPE tokens
    of ``spm``): sentences become their pieces, word alignments are projected to pieces (all pairs, SPEC §8.3),
    and every order (and τ) is over pieces; the result's ``level`` says which.
    """
    if level not in ("word", "subword") or (level == "subword" and not spm):
        raise ConfigError(f"preorder level must be 'word' or 'subword' (with a subword model), not {level!r}")
    btg = dict(btg or {})
    if attach_null not in ("right", "free"):
        raise ConfigError(f"attach_null must be 'right' or 'free', not {attach_null!r}")
    params = PreorderInputs(files=file_sig(train_align, train_src, *splits.values()), sentences=sentences,
                            iterations=iterations, btg=btg, model=model, seed=seed, attach_null=attach_null,
                            level=level, spm=file_sig(spm) if level == "subword" else None)

    def fn(d: Path) -> dict:
        from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
        from xlpe.io import read_alignments, read_sentences
        from xlpe.io.orders import write_orders
        from xlpe.reorder.btg import BTGConfig, BTGPreorderer
        from xlpe.reorder.oracle import order_from_ranks

        to_level = _subword_view(spm) if level == "subword" else (lambda sents, als=None: (sents, als))
        src = list(read_sentences(train_src))
        als = list(read_alignments(train_align, 0))
        if len(als) != len(src):
            raise ConfigError(f"{train_align} has {len(als)} lines for {len(src)} training sentences")
        src, als = to_level(src, als)
        ranks = corpus_ranks(src, als)
        write_orders(d / "train.oracle.order", [order_from_ranks(r) for r in ranks])
        res: dict[str, Any] = {}
        if model:
            pre = BTGPreorderer.load(model)
        else:
            n = sentences or len(src)
            pre = BTGPreorderer(BTGConfig(**{"seed": seed, **btg}))
            labels = ranks[:n] if attach_null == "right" else corpus_ranks(src[:n], als[:n], attach_null=attach_null)
            t0 = time.time()
            hist = pre.train(src[:n], labels, iterations=iterations, progress=sys.stderr.isatty())
            res.update(train_sentences=n, iterations=len(hist),
                       seconds_per_iteration=round((time.time() - t0) / max(1, len(hist)), 1))
            pre.save(d / "model")
        orders: dict[str, str] = {}
        for name, path in splits.items():
            sents, gold_als = to_level(list(read_sentences(path)), list(gold[name]) if gold and name in gold else None)
            t0 = time.time()
            pred = pre.predict_many(sents, processes=max(1, processes))
            res[f"{name}_sent_per_s"] = round(len(sents) / max(time.time() - t0, 1e-9), 1)
            orders[name] = str(d / f"{name}.order")
            write_orders(orders[name], pred)
            if name == "train":
                res["train_vs_oracle"] = corpus_reorder_scores(pred, ranks)
                res["train_identity"] = corpus_reorder_scores([list(range(len(s))) for s in sents], ranks)
            if gold_als is not None:
                granks = corpus_ranks(sents, gold_als)
                res[f"{name}_btg"] = corpus_reorder_scores(pred, granks)
                res[f"{name}_identity"] = corpus_reorder_scores([list(range(len(s))) for s in sents], granks)
        return {**res, "orders": orders, "oracle_train": str(d / "train.oracle.order"),
                "model": model or str(d / "model"), "level": level}
    return run_stage(out, "preorder", params, fn, force)


def _subword_view(spm: str):
    """``(sentences, alignments) -> (piece lists, alignments over source pieces)``: each source word's links go
    to all its pieces (SPEC §8.3); target indices stay word indices, which the ranks only compare."""
    from xlpe.data.subword import SubwordModel, subword_alignment_from_word

    sp = SubwordModel.load(spm)

    def view(sents, als=None):
        enc = list(sp.encode_many(sents))
        pieces = [e.pieces for e in enc]
        if als is None:
            return pieces, None
        projected = []
        for e, a in zip(enc, als):
            m = max((j for _, j in a.possible), default=-1) + 1
            projected.append(subword_alignment_from_word(a, e.word_of, list(range(m))))
        return pieces, projected
    return view


def parse_stage(out: Path, splits: Mapping[str, str], *, model: str, processes: int = 1, force: bool = False) -> dict:
    """Dependency trees of every split's source with a spaCy pipeline, tokens kept (``<split>.conllu``;
    :func:`xlpe.syntax.parse.parse_file`)."""
    params = ParseInputs(files=file_sig(*splits.values()), model=model)

    def fn(d: Path) -> dict:
        from xlpe.syntax.parse import parse_file
        t0 = time.time()
        n = {k: parse_file(v, d / f"{k}.conllu", model=model, processes=processes) for k, v in splits.items()}
        return {"trees": {k: str(d / f"{k}.conllu") for k in splits}, "sentences": n,
                "sent_per_s": round(sum(n.values()) / max(time.time() - t0, 1e-9), 1)}
    return run_stage(out, "parse", params, fn, force)


def dpe_stage(out: Path, *, src: str, align: str, spm: str, name: str = "train", force: bool = False) -> str:
    """DPE targets of a source text at the subword level of ``spm`` from its word alignments (0-based Pharaoh):
    ``dpe/<name>.dpe``, one ``i-p(i)`` line per sentence (SPEC §6.2); returns its path."""
    params = DPEInputs(files=file_sig(src, align, spm))

    def fn(d: Path) -> dict:
        from xlpe.data.subword import SubwordModel
        from xlpe.io import read_alignments, read_sentences
        from xlpe.reorder.targets import format_dpe_line, subword_dpe_targets
        sp = SubwordModel.load(spm)
        sents = list(read_sentences(src))
        als = list(read_alignments(align, 0, lengths=None, check_base=False))
        if len(als) != len(sents):
            raise ConfigError(f"{align} has {len(als)} lines for {len(sents)} source lines of {src}")
        with atomic_write(d / f"{name}.dpe") as f:
            for enc, a in zip(sp.encode_many(sents), als):
                f.write(format_dpe_line(subword_dpe_targets(a, enc.word_of)) + "\n")
        return {"targets": str(d / f"{name}.dpe")}
    return run_stage(out, f"dpe-{name}", params, fn, force)["targets"]
