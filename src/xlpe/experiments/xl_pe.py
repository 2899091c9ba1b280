"""``xlpe experiment xl-pe``: Ding, Wang, Tao (2020) at small scale, as one cached and resumable run.

The recipe goes from a bitext to the paper's tables:

1. ``data``: the built-in pair (``[data] builtin = "sov"``) or your files. Training pairs whose source or target
   also occurs in the gold alignment set are removed (``exclude_gold``).
2. ``subword``: a joint sentencepiece model (or yours).
3. ``align``: eflomal with grow-diag-final-and over train + gold sentences (or your ``train_align``).
4. ``preorder``: a BTG preorderer trained on those alignments. It predicts the orders of every split from the
   source alone. Oracle orders of the training data come from the same alignments.
5. ``runs``: one NMT model per (system, seed). Each is trained for the same budget (``[train]``: updates
   and/or minutes), decoded with beam search, scored with sacreBLEU, and, for the Table 3 systems,
   force-decoded on the gold set to extract alignments from attention (SPEC §4.6).
6. ``report``: Markdown tables and PNG plots, and a JSON with every number, the configs and the versions.

What is reproduced:

* Table 1: baseline / +RPE / +InXL / +HeadXL / +Combination. BLEU is mean ± std over seeds. The paired
  bootstrap against the baseline runs on the outputs of all seeds joined. Parameter counts are listed. The
  training cost of each system, relative to the baseline, is measured apart by the ``cost`` stage
  (:func:`measure_cost`): the systems train a few updates each in turn, in interleaved rounds, on the
  recipe's own model and data, so all of them meet the same machine load. The runs' own logs cannot give
  this figure when runs share the machine or use different thread counts.
* Figure 3: BLEU vs τ for HeadXL (``taus``).
* Table 3: AER / P / R of attention alignments.
* Table 4: the encoder-free model with no PE / APE / InXL (RPE is not defined there, SPEC §4.7).
* Figure 4: BLEU vs the noise ratio of the training indices (``noise``, on ``noise_system``).

The training indices come from ``xl_train_source``: ``predicted`` (the default, SPEC §4.1) or ``oracle``. Test
indices are always predicted from the source alone.

Every finished run is cached under ``OUT/runs/<name>/seed<k>``. A killed run resumes from its last checkpoint
when the command is repeated, so a table too large for one sitting fills up over several.

    xlpe experiment xl-pe --config examples/xl-pe-builtin.toml --out runs/xl-builtin
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import functools
import json
import logging
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlpe import __version__
from xlpe.errors import ConfigError
from xlpe.experiments.cache import file_sig, run_stage, run_stages
from xlpe.io.atomic import atomic_write

log = logging.getLogger("xlpe.experiments.xl_pe")

#: Table 1 systems: name -> (pe list, encoder_free)
SYSTEMS: dict[str, tuple[list[str], bool]] = {
    "baseline": (["ape"], False),
    "rpe": (["ape", "rpe"], False),
    "xl": (["xl"], False),
    "inxl": (["inxl"], False),
    "headxl": (["ape", "headxl"], False),
    "combination": (["ape", "combination"], False),
}
#: Table 4 systems (encoder-free): name -> pe list
ENCODER_FREE: dict[str, list[str]] = {"none": ["none"], "ape": ["ape"], "xl": ["xl"], "inxl": ["inxl"],
                                      "headxl": ["ape", "headxl"], "combination": ["ape", "combination"]}
XL_OPTIONS = ("tau", "tau_ratio", "xl_fusion_param")
#: the stopping rules of [train] (the per-run budget)
_STOPS = ("max_updates", "max_epochs", "max_time_minutes")
TABLES = ("table1", "fig3", "table3", "table4", "fig4")


@dataclass
class XLData:
    """``[data]``: the corpus. Either ``builtin`` (a synthetic profile) or the file paths."""

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
    align_lowercase: bool = True           # lowercase for eflomal (the gold-AER protocol)


@dataclass
class XLExperiment:
    """``[experiment]``: what to run."""

    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    # the seed of the built-in data and of the preorderer, shared by every run: running a subset of
    # ``seeds`` (e.g. one per sitting) reuses the same data, orders and cached runs
    base_seed: int = 1
    systems: list[str] = field(default_factory=lambda: ["baseline", "rpe", "inxl", "headxl", "combination"])
    taus: list[int] = field(default_factory=list)               # Figure 3: HeadXL tau grid ([] = skip)
    encoder_free: list[str] = field(default_factory=lambda: ["none", "ape", "inxl"])   # Table 4 ([] = skip)
    noise: list[float] = field(default_factory=lambda: [0.05, 0.10, 0.15, 0.20])        # Figure 4 ([] = skip)
    noise_system: str = "combination"
    alignment_systems: list[str] = field(default_factory=lambda: ["baseline", "inxl", "headxl", "combination"])
    xl_train_source: str = "predicted"                          # predicted | oracle (SPEC §4.1)
    pe_options: dict[str, Any] = field(default_factory=dict)    # tau, tau_ratio, xl_fusion_param
    vocab_size: int = 8000
    subword_model: str = ""
    preorder_sentences: int = 0                                  # 0 = all training pairs
    preorder_iterations: int = 3
    preorder: dict[str, Any] = field(default_factory=dict)      # BTGConfig overrides
    # unaligned source words in the preorderer's training labels: "right" (lader: the right neighbour's
    # rank) or "free" (no rank, left out of the tau loss; tau-only losses; measured better with eflomal
    # labels on Europarl, benchmarks/bench_btg.py). Oracle orders (xl_train_source=oracle) always use "right"
    preorder_attach_null: str = "right"
    preorderer: str = ""                                         # a trained preorderer directory to use instead
    beam: int = 5
    lenpen: float = 0.6
    attention_layer: int = -2
    attention_merge: str = "any"
    bootstrap_samples: int = 1000
    threads: int = 1                                             # torch threads per run
    # Table 1's cost column: every system trains cost_updates updates in turn, cost_rounds times after a
    # warm-up round, on the recipe's model and data (0 rounds = use each run's own log, a rough figure)
    cost_rounds: int = 5
    cost_updates: int = 10
    jobs: int = 1                                                # runs at once, in separate processes


@dataclass
class XLConfig:
    data: XLData = field(default_factory=XLData)
    experiment: XLExperiment = field(default_factory=XLExperiment)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "small"})
    train: dict[str, Any] = field(default_factory=lambda: {"max_updates": 2000})

    def validate(self) -> "XLConfig":
        e, d = self.experiment, self.data
        for s in e.systems + e.alignment_systems + [e.noise_system]:
            if s not in SYSTEMS:
                raise ConfigError(f"unknown system {s!r}; valid: {', '.join(SYSTEMS)}")
        for s in e.encoder_free:
            if s not in ENCODER_FREE:
                raise ConfigError(f"unknown encoder-free system {s!r}; valid: {', '.join(ENCODER_FREE)} "
                                  "(rpe is not defined without an encoder, SPEC §4.7)")
        if "baseline" not in e.systems:
            raise ConfigError("experiment.systems must include 'baseline' (everything is compared with it)")
        if e.preorder_attach_null not in ("right", "free"):
            raise ConfigError("experiment.preorder_attach_null must be 'right' or 'free', "
                              f"not {e.preorder_attach_null!r}")
        from xlpe.reorder.btg import BTGConfig, parse_loss_profile
        if e.preorder_attach_null == "free" and not e.preorderer and \
                parse_loss_profile(e.preorder.get("loss", BTGConfig.loss))["chunk"]:
            raise ConfigError("experiment.preorder_attach_null = 'free' needs a tau-only loss: set "
                              "experiment.preorder.loss = 'tau=1' (the chunk loss has no cost for unranked words)")
        if e.xl_train_source not in ("predicted", "oracle"):
            raise ConfigError(f"xl_train_source must be 'predicted' or 'oracle', not {e.xl_train_source!r}")
        unknown = sorted(set(e.pe_options) - set(XL_OPTIONS))
        if unknown:
            raise ConfigError(f"experiment.pe_options {unknown} unknown; valid: {', '.join(XL_OPTIONS)}")
        if not e.seeds:
            raise ConfigError("experiment.seeds is empty")
        if e.cost_rounds < 0 or e.cost_updates < 2:
            raise ConfigError("experiment.cost_rounds must be >= 0 and experiment.cost_updates >= 2")
        if not d.builtin:
            for k in ("train_src", "train_tgt", "test_src", "test_tgt"):
                if not getattr(d, k):
                    raise ConfigError(f"[data] {k} is required unless builtin is set")
                if not Path(getattr(d, k)).exists():
                    raise ConfigError(f"[data] {k}: {getattr(d, k)} does not exist")
        if e.alignment_systems and not (d.builtin or d.gold_align):
            log.warning("no gold alignments ([data] gold_align): Table 3 is skipped")
        if not set(_STOPS) & set(self.train):
            raise ConfigError("[train] needs a budget: max_updates and/or max_time_minutes (the same for every run)")
        return self

    @classmethod
    def from_dict(cls, doc: dict[str, Any], source: str = "config") -> "XLConfig":
        unknown = sorted(set(doc) - {"data", "experiment", "model", "train"})
        if unknown:
            raise ConfigError(f"{source}: unknown table(s) {unknown}; expected data, experiment, model, train")
        parts = {}
        for name, klass in (("data", XLData), ("experiment", XLExperiment)):
            valid = {f.name for f in dataclasses.fields(klass)}
            extra = sorted(set(doc.get(name, {})) - valid)
            if extra:
                raise ConfigError(f"{source}: unknown key(s) {extra} in [{name}]; valid: {', '.join(sorted(valid))}")
            parts[name] = klass(**doc.get(name, {}))
        model = {"preset": "small", **doc.get("model", {})}
        train = dict(doc.get("train", {"max_updates": 2000}))
        return cls(parts["data"], parts["experiment"], model, train).validate()

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ==================================================================================================== stages

def _read(path) -> list[str]:
    from xlpe.io.text import read_lines
    return [t for _, t in read_lines(path)]


def stage_data(cfg: XLConfig, out: Path) -> dict:
    """Paths of every split (synthesised for the built-in pair), training pairs minus gold sentences."""
    d = cfg.data
    if d.builtin:
        from xlpe.data.synthetic import SyntheticConfig, synth
        scfg = SyntheticConfig(profile=d.builtin, seed=cfg.experiment.base_seed)
        params = {"synthetic": scfg.to_dict(), "sizes": d.builtin_sizes}

        def fn(sd: Path) -> dict:
            n_train, n_dev, n_test = d.builtin_sizes
            synth(sd, scfg, sizes={"train": n_train, "dev": n_dev, "test": n_test})
            p = {f"{s}_{side}": str(sd / f"{s}.{side}") for s in ("train", "dev", "test") for side in ("src", "tgt")}
            return {"paths": {**p, "gold_src": p["test_src"], "gold_tgt": p["test_tgt"],
                              "gold_align": str(sd / "test.align")}, "gold_base": 0, "gold_reverse": False,
                    "extra_tests": {}, "excluded": 0}
        return run_stage(out, "data", params, fn)

    inputs = [d.train_src, d.train_tgt] + [p for p in (d.gold_src, d.gold_tgt) if p]
    params = {"data": dataclasses.asdict(d), "files": file_sig(*inputs)}
    if d.exclude_gold and d.gold_src:
        params["exclude"] = "source or target"     # a pair goes when either side is a gold sentence

    def fn(sd: Path) -> dict:
        paths = {k: getattr(d, k) for k in ("train_src", "train_tgt", "dev_src", "dev_tgt", "test_src", "test_tgt",
                                            "gold_src", "gold_tgt", "gold_align")}
        excluded = 0
        if d.exclude_gold and d.gold_src:
            # either side: Europarl repeats boilerplate ("Die Abstimmung findet morgen um 12.00 Uhr statt .")
            # under other English wordings, and a gold target in training leaks the test reference
            gold_src = set(_read(d.gold_src))
            gold_tgt = set(_read(d.gold_tgt)) if d.gold_tgt else set()
            src, tgt = _read(d.train_src), _read(d.train_tgt)
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
                    al = _read(d.train_align)
                    with atomic_write(sd / "train.align") as f:
                        f.writelines(al[i] + "\n" for i in keep)
        log.info("data: %d training pairs removed because their source or target is a gold sentence", excluded)
        return {"paths": paths, "gold_base": d.gold_base, "gold_reverse": d.gold_reverse,
                "extra_tests": dict(d.extra_tests), "excluded": excluded,
                "train_align": str(sd / "train.align") if (excluded and d.train_align) else d.train_align}
    return run_stage(out, "data", params, fn)


def stage_subword(cfg: XLConfig, out: Path, data: dict) -> str:
    e = cfg.experiment
    if e.subword_model:
        return e.subword_model
    p = data["paths"]
    params = {"vocab": e.vocab_size, "files": file_sig(p["train_src"], p["train_tgt"])}

    def fn(sd: Path) -> dict:
        from xlpe.data.subword import train_subwords
        train_subwords([p["train_src"], p["train_tgt"]], sd / "spm.model", vocab_size=e.vocab_size)
        return {"model": str(sd / "spm.model")}
    return run_stage(out, "subword", params, fn)["model"]


def stage_align(cfg: XLConfig, out: Path, data: dict) -> str:
    """Training alignments: given, or eflomal grow-diag-final-and over train + gold sentences."""
    if data.get("train_align"):
        return data["train_align"]
    p = data["paths"]
    extra = [p["gold_src"], p["gold_tgt"]] if p.get("gold_src") and p["gold_src"] != p.get("test_src") else []
    params = {"files": file_sig(p["train_src"], p["train_tgt"], *extra), "lower": cfg.data.align_lowercase,
              "sym": "grow-diag-final-and"}

    def fn(sd: Path) -> dict:
        from xlpe.align.eflomal import EflomalAligner
        from xlpe.io import read_bitext, write_alignments
        pairs = list(read_bitext(p["train_src"], p["train_tgt"]))
        more = list(read_bitext(extra[0], extra[1])) if extra else []
        low = (lambda ws: [w.lower() for w in ws]) if cfg.data.align_lowercase else (lambda ws: ws)
        als = EflomalAligner(sym="grow-diag-final-and", quiet=True).align(
            [low(s) for s, _ in pairs + more], [low(t) for _, t in pairs + more])
        write_alignments(sd / "train.align", als[:len(pairs)], 0)
        return {"train_align": str(sd / "train.align"), "pairs": len(pairs), "extra_pairs": len(more)}
    return run_stage(out, "align", params, fn)["train_align"]


def _split_sources(data: dict) -> dict[str, str]:
    p = data["paths"]
    splits = {"train": p["train_src"], "test": p["test_src"]}
    if p.get("dev_src"):
        splits["dev"] = p["dev_src"]
    if p.get("gold_src"):
        splits["gold"] = p["gold_src"]
    for name, (src, _) in data.get("extra_tests", {}).items():
        splits[f"extra-{name}"] = src
    return splits


def stage_preorder(cfg: XLConfig, out: Path, data: dict, train_align: str) -> dict:
    """Train (or load) the BTG preorderer; predicted orders of every split; oracle orders of the training data."""
    e = cfg.experiment
    splits = _split_sources(data)
    params = {"files": file_sig(train_align, *splits.values()), "n": e.preorder_sentences,
              "its": e.preorder_iterations, "btg": e.preorder, "model": e.preorderer, "seed": e.base_seed}
    if e.preorder_attach_null != "right":       # only when set, so stages cached before the option keep their key
        params["attach_null"] = e.preorder_attach_null

    def fn(sd: Path) -> dict:
        from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
        from xlpe.io import read_alignments, read_sentences
        from xlpe.io.orders import write_orders
        from xlpe.reorder.btg import BTGConfig, BTGPreorderer
        from xlpe.reorder.oracle import lader_ranks, order_from_ranks

        src = list(read_sentences(splits["train"]))
        als = list(read_alignments(train_align, 0, lengths=None))
        if len(als) != len(src):
            raise ConfigError(f"{train_align} has {len(als)} lines for {len(src)} training sentences")
        ranks = [lader_ranks(sorted(a.links), len(s), src_words=s) for s, a in zip(src, als)]
        write_orders(sd / "train.oracle.order", [order_from_ranks(r) for r in ranks])
        res: dict[str, Any] = {}
        if e.preorderer:
            model = BTGPreorderer.load(e.preorderer)
        else:
            n = e.preorder_sentences or len(src)
            model = BTGPreorderer(BTGConfig(**{"seed": e.base_seed, **e.preorder}))
            t0 = time.time()
            labels = ranks if e.preorder_attach_null == "right" else \
                [lader_ranks(sorted(a.links), len(s), src_words=s, attach_null=e.preorder_attach_null)
                 for s, a in zip(src[:n], als[:n])]
            hist = model.train(src[:n], labels[:n], iterations=e.preorder_iterations, progress=sys.stderr.isatty())
            res.update(train_sentences=n, iterations=len(hist),
                       seconds_per_iteration=round((time.time() - t0) / max(1, len(hist)), 1))
            model.save(sd / "model")
        orders = {}
        for name, path in splits.items():
            t0 = time.time()
            sents = list(read_sentences(path))
            orders[name] = str(sd / f"{name}.order")
            pred = model.predict_many(sents, processes=max(1, e.threads))
            write_orders(orders[name], pred)
            res[f"{name}_sent_per_s"] = round(len(sents) / max(time.time() - t0, 1e-9), 1)
            if name == "train":
                res["train_vs_oracle"] = corpus_reorder_scores(pred, ranks)
                res["train_identity"] = corpus_reorder_scores([list(range(len(s))) for s in sents], ranks)
        if "gold" in splits and data["paths"].get("gold_align"):
            gsrc = list(read_sentences(splits["gold"]))
            gold = _gold_alignments(data)
            granks = [lader_ranks(sorted(a.links), len(s), src_words=s) for s, a in zip(gsrc, gold)]
            pred = [list(map(int, l.split())) if l.strip() else [] for l in _read(orders["gold"])]
            res["gold_btg"] = corpus_reorder_scores(pred, granks)
            res["gold_identity"] = corpus_reorder_scores([list(range(len(s))) for s in gsrc], granks)
        return {**res, "orders": orders, "oracle_train": str(sd / "train.oracle.order"),
                "model": e.preorderer or str(sd / "model")}
    return run_stage(out, "preorder", params, fn)


def _gold_alignments(data: dict) -> list:
    from xlpe.io import read_alignments
    als = list(read_alignments(data["paths"]["gold_align"], data["gold_base"]))
    if data["gold_reverse"]:
        als = [a.reversed() for a in als]
    return als


def _diagonal_reference(gold: dict) -> dict:
    """AER / P / R of the position-only diagonal alignment of the gold set: Table 3's floor of meaning."""
    from xlpe.evaluate.aer import corpus_aer, diagonal_alignment
    from xlpe.io.text import tokenize
    hyps = [diagonal_alignment(len(tokenize(s)), len(tokenize(t)))
            for s, t in zip(_read(gold["src"]), _read(gold["tgt"]))]
    return corpus_aer(hyps, gold["alignments"]).to_dict()


# ==================================================================================================== one run

def _median_tokens_per_s(run_dir: Path) -> float | None:
    log_file = run_dir / "train_log.csv"
    if not log_file.exists():
        return None
    with open(log_file, newline="") as f:
        vals = [float(r["tokens_per_s"]) for r in csv.DictReader(f) if r.get("tokens_per_s")]
    return round(statistics.median(vals), 1) if vals else None


def run_system(run_dir: Path, *, pe: list[str], pe_options: dict, encoder_free: bool, seed: int,
               model: dict, train_opts: dict, spm: str, train_src: str, train_tgt: str, dev_src: str | None,
               dev_tgt: str | None, train_orders: str | None, dev_orders: str | None,
               tests: dict[str, tuple[str, str, str | None]], beam: int, lenpen: float, threads: int,
               noise: float = 0.0, gold: dict | None = None, attention_layer: int = -2,
               attention_merge: str = "any") -> dict:
    """Train one model (resuming from its checkpoints), translate every test set, and score it.

    ``tests`` maps a name to ``(source, reference, predicted orders or None)``. ``gold`` (optional) is
    ``{src, tgt, alignments (list of Alignment), orders}``: with it the run also reports the AER / P / R of
    alignments extracted from its attention (SPEC §4.6).
    """
    import torch

    from xlpe.data.subword import SubwordModel
    from xlpe.evaluate.bleu import corpus_scores
    from xlpe.infer.translate import translate_lines
    from xlpe.io.orders import invert_order, read_orders
    from xlpe.nn.transformer import count_parameters
    from xlpe.train.trainer import train

    sw = SubwordModel.load(spm)
    mcfg, tcfg, dcfg, uses_xl = _train_configs(
        run_dir / "train", pe=pe, pe_options=pe_options, encoder_free=encoder_free, seed=seed, model=model,
        train_opts=train_opts, spm=spm, train_src=train_src, train_tgt=train_tgt, dev_src=dev_src,
        dev_tgt=dev_tgt, train_orders=train_orders, dev_orders=dev_orders, threads=threads, noise=noise)
    opts = mcfg.pe_options
    t0 = time.time()
    res = train(mcfg, tcfg, dcfg)
    train_s = time.time() - t0
    net = res.model.eval()
    out: dict[str, Any] = {"pe": pe, "pe_options": opts, "encoder_free": encoder_free, "seed": seed, "threads": threads,
                           "updates": res.step, "stop_reason": res.stop_reason, "params": count_parameters(net),
                           "train_seconds": round(train_s, 1),
                           "tokens_per_s": _median_tokens_per_s(run_dir / "train"), "tests": {}}
    for name, (src, ref, orders) in tests.items():
        lines = _read(src)
        ch = {"xl": [invert_order(o) for o in read_orders(orders)]} if uses_xl else None
        t0 = time.time()
        with torch.inference_mode():
            hyps = translate_lines(net, sw, lines, beam=beam, lenpen=lenpen, batch_size=64, channels=ch)
        dec_s = time.time() - t0
        hyp_path = run_dir / f"{name}.hyp"
        with atomic_write(hyp_path) as f:
            f.writelines(h + "\n" for h in hyps)
        sc = corpus_scores(hyps, _read(ref))
        out["tests"][name] = {"bleu": sc["bleu"].score, "chrf": sc["chrf"].score, "hyp": str(hyp_path),
                              "decode_sent_per_s": round(len(lines) / max(dec_s, 1e-9), 1),
                              "signature": sc["bleu"].signature}
    if gold is not None:
        from xlpe.evaluate.aer import corpus_aer
        from xlpe.infer.attention_align import align_from_model
        ckpt = res.last_checkpoint
        if not -mcfg.dec_layers <= attention_layer < mcfg.dec_layers:
            log.warning("attention layer %d does not exist in a %d-layer decoder; using the last layer",
                        attention_layer, mcfg.dec_layers)
            attention_layer = -1
        hyp_al = align_from_model(ckpt, _read(gold["src"]), _read(gold["tgt"]), layer=attention_layer,
                                  merge=attention_merge, orders=gold["orders"] if uses_xl else None,
                                  device="cpu")
        sc = corpus_aer(hyp_al, gold["alignments"])
        out["attention_alignment"] = {"aer": sc.aer, "precision": sc.precision, "recall": sc.recall,
                                      "layer": attention_layer, "merge": attention_merge}
    return out


def _train_configs(train_dir: Path, *, pe: list[str], pe_options: dict, encoder_free: bool, seed: int, model: dict,
                   train_opts: dict, spm: str, train_src: str, train_tgt: str, dev_src: str | None = None,
                   dev_tgt: str | None = None, train_orders: str | None = None, dev_orders: str | None = None,
                   threads: int = 1, noise: float = 0.0):
    """The model, training and data configs of one recipe run, and whether the model reads XL indices."""
    from xlpe.data.subword import SubwordModel
    from xlpe.nn.positions import required_inputs
    from xlpe.nn.config import TransformerConfig
    from xlpe.train.config import DataConfig, TrainConfig

    m = dict(model)
    preset = m.pop("preset", "small")
    opts = {k: v for k, v in pe_options.items() if k in _declared_options(pe)}
    mcfg = TransformerConfig.from_preset(preset, **{**m, "src_vocab_size": SubwordModel.load(spm).vocab_size,
                                                    "pe": pe, "pe_options": opts, "encoder_free": encoder_free})
    uses_xl = "xl" in required_inputs(mcfg)
    tcfg = TrainConfig(**{"log_every": 50, "progress": sys.stderr.isatty(), "threads": threads,
                          "validate_every": 0, "keep_last": 1, **train_opts, "out": str(train_dir),
                          "seed": seed, "resume": "auto"})
    dcfg = DataConfig(train_src=train_src, train_tgt=train_tgt, dev_src=dev_src, dev_tgt=dev_tgt,
                      subword_model=spm, train_orders=train_orders if uses_xl else None,
                      dev_orders=dev_orders if uses_xl and dev_src else None,
                      train_orders_noise=noise if uses_xl else 0.0, noise_seed=seed)
    return mcfg, tcfg, dcfg, uses_xl


def measure_cost(out_dir: Path, systems: dict[str, tuple[list[str], dict]], *, model: dict, train_opts: dict,
                 spm: str, train_src: str, train_tgt: str, train_orders: str | None, threads: int, rounds: int,
                 updates: int, seed: int = 1) -> dict:
    """Training speed of each system relative to the first, measured in interleaved rounds.

    ``systems`` maps a name to ``(pe, pe_options)``; the first is the reference. Every system trains with the
    recipe's own model, optimiser, batches and data, through :func:`xlpe.train.trainer.train`. Round ``r``
    takes every system in turn from update ``r·updates`` to ``(r+1)·updates``, resuming its checkpoint, so
    that all systems meet the same machine noise. Round 0 is warm-up and is not counted. The tokens/s of a
    round is the trainer's own figure for that round's second half, which excludes model loading and
    checkpoint writing. Each system gets the median of its per-round tokens/s and of its per-round ratio
    to the reference. All systems see the same batches, since they share the seed.
    """
    from xlpe.train.trainer import train

    if rounds < 1 or updates < 2:
        raise ConfigError("the cost measurement needs cost_rounds >= 1 and cost_updates >= 2")
    opts = {k: v for k, v in train_opts.items() if k not in _STOPS + ("save_every", "log_every")}
    tps: dict[str, list[float]] = {n: [] for n in systems}
    for r in range(rounds + 1):
        for name, (pe, pe_options) in systems.items():
            mcfg, tcfg, dcfg, _ = _train_configs(
                out_dir / name, pe=pe, pe_options=pe_options, encoder_free=False, seed=seed, model=model,
                train_opts={**opts, "max_updates": (r + 1) * updates, "save_every": updates,
                            "log_every": updates // 2, "keep_last": 1, "cache_data": True, "progress": False},
                spm=spm, train_src=train_src, train_tgt=train_tgt, train_orders=train_orders, threads=threads)
            train(mcfg, tcfg, dcfg)
            if r:
                with open(out_dir / name / "train_log.csv", newline="") as f:
                    row = [x for x in csv.DictReader(f) if int(x["step"]) == (r + 1) * updates]
                tps[name].append(float(row[-1]["tokens_per_s"]))
    ref = next(iter(systems))
    out = {"rounds": rounds, "updates": updates, "threads": threads, "reference": ref, "systems": {}}
    for name, v in tps.items():
        ratios = [a / b for a, b in zip(v, tps[ref])]
        out["systems"][name] = {"tokens_per_s": [round(x, 1) for x in v],
                                "tokens_per_s_median": round(statistics.median(v), 1),
                                "relative_speed": round(statistics.median(ratios), 4),
                                "relative_speed_per_round": [round(x, 4) for x in ratios]}
    return out


def _declared_options(pe: list[str]) -> set[str]:
    from xlpe.nn.positions import ENCODINGS
    return {k for n in pe for k in ENCODINGS[n].options}


# ==================================================================================================== the recipe

def _runs(cfg: XLConfig, only: set[str]) -> list[tuple[str, str, dict]]:
    """(table, run name, run options) for everything the config asks for; shared runs are listed once."""
    e = cfg.experiment
    runs: dict[str, tuple[str, dict]] = {}

    def add(table, name, pe, free=False, options=None, noise=0.0):
        runs.setdefault(name, (table, {"pe": pe, "encoder_free": free, "pe_options": options or e.pe_options,
                                       "noise": noise}))
    if only & {"table1", "table3", "fig3", "fig4"}:
        for s in dict.fromkeys(["baseline"] + e.systems + (e.alignment_systems if "table3" in only else [])
                               + ([e.noise_system] if "fig4" in only and e.noise else [])):
            add("table1", s, SYSTEMS[s][0])
    if "fig3" in only:
        for t in e.taus:
            if t > 0:
                name = "headxl" if t == _default_tau(cfg) else f"headxl-tau{t}"
                add("table1" if name == "headxl" else "fig3", name, ["ape", "headxl"],
                    options=e.pe_options if name == "headxl" else {**e.pe_options, "tau": t})
    if "table4" in only:
        for s in e.encoder_free:
            add("table4", f"ef-{s}", ENCODER_FREE[s], free=True)
    if "fig4" in only:
        for r in e.noise:
            if r > 0:
                add("fig4", f"{e.noise_system}-noise{r:g}", SYSTEMS[e.noise_system][0], noise=r)
    return [(t, n, o) for n, (t, o) in runs.items()]


def _default_tau(cfg: XLConfig) -> int:
    """The τ of the Table 1 HeadXL system (so that Figure 3 reuses its runs)."""
    from xlpe.nn.positions.xl import resolve_tau
    from xlpe.nn.config import TransformerConfig
    m = dict(cfg.model)
    mcfg = TransformerConfig.from_preset(m.pop("preset", "small"), **{**m, "pe": ["ape"]})
    return resolve_tau(mcfg, {k: v for k, v in cfg.experiment.pe_options.items() if k in ("tau", "tau_ratio")})


def run_experiment(cfg: XLConfig, out: str | os.PathLike, only: list[str] | None = None) -> dict:
    """Run (or resume) the recipe; returns every number (also in ``results.json``) and the report text."""
    cfg.validate()
    tables = set(only or TABLES)
    bad = sorted(tables - set(TABLES))
    if bad:
        raise ConfigError(f"unknown table(s) {bad}; valid: {', '.join(TABLES)}")
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    e = cfg.experiment
    with atomic_write(out / "config.json") as f:
        json.dump(cfg.to_dict(), f, indent=2)

    data = stage_data(cfg, out)
    spm = stage_subword(cfg, out, data)
    train_align = stage_align(cfg, out, data)
    pre = stage_preorder(cfg, out, data, train_align)
    p, orders = data["paths"], pre["orders"]
    tests = {"test": (p["test_src"], p["test_tgt"], orders["test"])}
    for name, (src, tgt) in data.get("extra_tests", {}).items():
        tests[name] = (src, tgt, orders[f"extra-{name}"])
    gold = None
    if p.get("gold_align") and "table3" in tables:
        gold = {"src": p["gold_src"], "tgt": p["gold_tgt"], "alignments": _gold_alignments(data),
                "orders": orders["gold"]}
    train_orders = pre["oracle_train"] if e.xl_train_source == "oracle" else orders["train"]
    results: dict[str, Any] = {"data": data, "preorder": pre}
    if gold is not None:
        results["diagonal_alignment"] = _diagonal_reference(gold)
    planned = _runs(cfg, tables)
    tasks, keys = [], []
    # seed by seed: an interrupted recipe has every system of the first seeds rather than all seeds of a few
    for seed in e.seeds:
        for table, name, ro in planned:
            key = f"{name}/seed{seed}"
            want_gold = gold is not None and table == "table1" and name in e.alignment_systems
            params = {"run": ro, "seed": seed, "model": cfg.model, "train": cfg.train, "beam": e.beam,
                      "lenpen": e.lenpen, "spm": file_sig(spm), "train_orders": file_sig(train_orders),
                      "tests": {k: file_sig(*[x for x in v if x]) for k, v in tests.items()},
                      "gold": want_gold, "attention": [e.attention_layer, e.attention_merge]}
            # threads and jobs are not in the key: they change the speed, not the model a budget of updates
            # trains, so a table can be filled with one thread per run in one sitting and two in another
            fn = functools.partial(
                run_system, pe=ro["pe"], pe_options=ro["pe_options"], encoder_free=ro["encoder_free"], seed=seed,
                model=cfg.model, train_opts=cfg.train, spm=spm, train_src=p["train_src"], train_tgt=p["train_tgt"],
                dev_src=p.get("dev_src") or None, dev_tgt=p.get("dev_tgt") or None, train_orders=train_orders,
                dev_orders=orders.get("dev"), tests=tests, beam=e.beam, lenpen=e.lenpen, threads=e.threads,
                noise=ro["noise"], gold=gold if want_gold else None, attention_layer=e.attention_layer,
                attention_merge=e.attention_merge)
            tasks.append((out / "runs", key, params, fn))
            keys.append(key)
    log.info("%d runs (%d systems x %d seeds), %d at a time", len(tasks), len(planned), len(e.seeds), e.jobs)
    results["runs"] = dict(zip(keys, run_stages(tasks, e.jobs)))
    if "table1" in tables and e.cost_rounds:
        systems = {n: (SYSTEMS[n][0], e.pe_options) for n in dict.fromkeys(["baseline"] + e.systems)}
        params = {"systems": systems, "model": cfg.model,
                  "train": {k: v for k, v in cfg.train.items() if k not in _STOPS}, "rounds": e.cost_rounds,
                  "updates": e.cost_updates, "threads": e.threads,
                  "files": file_sig(spm, p["train_src"], p["train_tgt"], train_orders)}
        results["cost"] = run_stage(out, "cost", params, lambda d: measure_cost(
            d, systems, model=cfg.model, train_opts=cfg.train, spm=spm, train_src=p["train_src"],
            train_tgt=p["train_tgt"], train_orders=train_orders, threads=e.threads, rounds=e.cost_rounds,
            updates=e.cost_updates, seed=e.base_seed))
    results["summary"] = summarise(cfg, results, tables, tests)
    if results["summary"]["fig4"]:
        from xlpe.io.orders import read_orders
        from xlpe.reorder.noise import noise_stats
        lengths = [len(o) for o in read_orders(train_orders)]
        results["summary"]["fig4_noise"] = {f"{r:g}": noise_stats(lengths, r) for r, _ in results["summary"]["fig4"]}
    report = render_report(cfg, results, tables)
    plot_figures(cfg, results["summary"], out / "plots")
    with atomic_write(out / "report.md") as f:
        f.write(report)
    with atomic_write(out / "results.json") as f:
        json.dump({"config": cfg.to_dict(), "results": results, "versions": versions(),
                   "command": " ".join(["xlpe"] + sys.argv[1:])}, f, indent=2, default=str)
    return {"report": report, "results": results}


# ==================================================================================================== summary

def _mean_std(xs: list[float]) -> tuple[float, float]:
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def _system_summary(cfg: XLConfig, runs: dict, name: str, base: str | None, refs: dict[str, list[str]]) -> dict:
    """Mean ± std over seeds of one system; paired bootstrap (all seeds' outputs joined) against ``base``."""
    from xlpe.evaluate.bleu import paired_bootstrap

    e = cfg.experiment
    rs = [runs[f"{name}/seed{s}"] for s in e.seeds if f"{name}/seed{s}" in runs]
    if not rs:
        return {}
    out: dict[str, Any] = {"seeds": len(rs), "params": rs[0]["params"], "pe": rs[0]["pe"],
                           "tokens_per_s": _mean_std([r["tokens_per_s"] for r in rs if r.get("tokens_per_s")])[0],
                           "updates": _mean_std([r["updates"] for r in rs])[0], "tests": {}}
    for test, ref in refs.items():
        bleu = [r["tests"][test]["bleu"] for r in rs]
        chrf = [r["tests"][test]["chrf"] for r in rs]
        t = {"bleu": _mean_std(bleu), "chrf": _mean_std(chrf), "bleu_per_seed": bleu}
        base_rs = [runs.get(f"{base}/seed{s}") for s in e.seeds] if base and base != name else []
        pairs = [(r, b) for r, b in zip([runs.get(f"{name}/seed{s}") for s in e.seeds], base_rs) if r and b]
        if pairs:
            hyp = [h for r, _ in pairs for h in _read(r["tests"][test]["hyp"])]
            bhyp = [h for _, b in pairs for h in _read(b["tests"][test]["hyp"])]
            comps, _ = paired_bootstrap([("base", bhyp), ("sys", hyp)], ref * len(pairs),
                                        n_samples=e.bootstrap_samples, seed=12345)
            t["p_bleu"] = comps[1].p_values["BLEU"]
            t["p_chrf"] = comps[1].p_values.get("chrF2")
        out["tests"][test] = t
    al = [r["attention_alignment"] for r in rs if "attention_alignment" in r]
    if al:
        out["alignment"] = {k: _mean_std([a[k] for a in al]) for k in ("aer", "precision", "recall")}
    return out


def summarise(cfg: XLConfig, results: dict, tables: set[str], tests: dict) -> dict:
    e, runs = cfg.experiment, results["runs"]
    refs = {k: _read(v[1]) for k, v in tests.items()}
    names = {n.split("/")[0] for n in runs}
    s: dict[str, Any] = {"systems": {}}
    for n in sorted(names):
        base = "ef-none" if n.startswith("ef-") else "baseline"
        if n.startswith("ef-") and "ef-ape" in names:
            base = "ef-ape"
        s["systems"][n] = _system_summary(cfg, runs, n, base, refs)
    cost = results.get("cost", {}).get("systems", {})
    base_tps = s["systems"].get("baseline", {}).get("tokens_per_s")
    for n, v in s["systems"].items():
        if n in cost:
            v["speed_vs_baseline"] = cost[n]["relative_speed"]
            per_round = cost[n]["relative_speed_per_round"]
            v["speed_vs_baseline_range"] = [min(per_round), max(per_round)]
        elif base_tps and v.get("tokens_per_s") and not cost:
            v["speed_vs_baseline"] = v["tokens_per_s"] / base_tps
    tau0 = _default_tau(cfg)
    s["fig3"] = ([(0, "baseline")] + [(t, "headxl" if t == tau0 else f"headxl-tau{t}") for t in e.taus if t > 0]
                 if "fig3" in tables else [])
    s["fig4"] = ([(0.0, e.noise_system)] + [(r, f"{e.noise_system}-noise{r:g}") for r in e.noise if r > 0]
                 if "fig4" in tables and e.noise else [])
    return s


def _fmt(ms: tuple[float, float], seeds: int, scale: float = 1.0, digits: int = 2) -> str:
    """``mean ± std``; the value alone for one seed (a std of one run is no spread)."""
    m, sd = ms
    return f"{scale * m:.{digits}f}" + (f" ± {scale * sd:.{digits}f}" if seeds > 1 else "")


def render_report(cfg: XLConfig, results: dict, tables: set[str]) -> str:
    e, s = cfg.experiment, results["summary"]
    systems = s["systems"]
    tests = list(next((v["tests"] for v in systems.values() if v), {}).keys())
    L = [f"# XL PE experiment (Ding, Wang, Tao 2020), {len(e.seeds)} seed(s): {e.seeds}", "",
         f"- data: {'built-in `' + cfg.data.builtin + '` pair' if cfg.data.builtin else cfg.data.train_src}; "
         f"training pairs removed as gold sentences: {results['data'].get('excluded', 0)}",
         f"- budget per run: {', '.join(f'{k}={v}' for k, v in cfg.train.items() if k.startswith('max_'))}; "
         f"model: {cfg.model}",
         f"- XL indices for training: {e.xl_train_source}; at test time: BTG preorderer on the source alone",
         f"- significance: paired bootstrap ({e.bootstrap_samples} samples) of the outputs of all seeds joined, "
         "against the baseline"]
    pre = results["preorder"]
    if "gold_btg" in pre:
        L.append(f"- preorderer on the gold set (against gold-alignment ranks): τ {pre['gold_btg']['tau']:.4f} "
                 f"(identity {pre['gold_identity']['tau']:.4f}), chunk {pre['gold_btg']['chunk']:.4f} "
                 f"(identity {pre['gold_identity']['chunk']:.4f})")

    def table(title, rows, base_label):
        nonlocal L
        L += ["", f"## {title}", "", "| system | params | " + " | ".join(f"{t} BLEU | p vs {base_label}" for t in tests)
              + " | chrF | tok/s vs baseline |", "|---|---|" + "---|---|" * len(tests) + "---|---|"]
        for label, n in rows:
            v = systems.get(n)
            if not v:
                continue
            cells = []
            for t in tests:
                tt = v["tests"][t]
                p = tt.get("p_bleu")
                cells += [_fmt(tt["bleu"], v["seeds"]), "—" if p is None else f"{p:.4f}"]
            sp = v.get("speed_vs_baseline")
            speed = "—" if sp is None else f"{sp:.2f}×"
            lo_hi = v.get("speed_vs_baseline_range")
            if lo_hi and n != "baseline":
                speed += f" ({lo_hi[0]:.2f}–{lo_hi[1]:.2f})"
            L.append(f"| {label} | {v['params']:,} | " + " | ".join(cells) +
                     f" | {_fmt(v['tests'][tests[0]]['chrf'], v['seeds'])} | {speed} |")
        c = results.get("cost")
        if c and base_label == "baseline":
            L += ["", f"tok/s vs baseline: measured apart, in {c['rounds']} interleaved rounds after a warm-up "
                      f"round; each round trains every system for {c['updates']} updates in turn on this model and "
                      f"data ({c['threads']} thread(s)); the median of the per-round ratios, and in brackets "
                      "their range, which shows how noisy the machine was. Baseline: "
                      f"{c['systems'][c['reference']]['tokens_per_s_median']:,.0f} tok/s."]
        elif c:
            L += ["", "tok/s vs baseline: not measured for this table."]
        else:
            # runs cached before runs recorded their thread count say "unrecorded"
            threads = sorted({str(r.get("threads") or "unrecorded") for r in results["runs"].values()})
            L += ["", "tok/s: median of each run's own training log relative to the baseline's"
                  + (f"; runs used {' or '.join(threads)} threads" if len(threads) > 1 else "")
                  + (f"; {e.jobs} runs shared the machine at a time" if e.jobs > 1 else "")
                  + (", so this is a rough figure: set experiment.cost_rounds to measure it" if e.jobs > 1
                     or len(threads) > 1 else "") + "."]
    if "table1" in tables:
        labels = {"baseline": "baseline (APE)", "rpe": "+RPE", "xl": "XL PE only", "inxl": "+InXL",
                  "headxl": "+HeadXL", "combination": "+Combination"}
        table("Table 1: translation quality", [(labels[n], n) for n in dict.fromkeys(["baseline"] + e.systems)],
              "baseline")
    if "fig3" in tables and s["fig3"]:
        L += ["", "## Figure 3: BLEU vs τ (HeadXL)", "", "| τ | " + " | ".join(tests) + " |",
              "|---|" + "---|" * len(tests)]
        for t, n in s["fig3"]:
            v = systems.get(n)
            if v:
                L.append(f"| {t} | " + " | ".join(_fmt(v["tests"][x]["bleu"], v["seeds"]) for x in tests) + " |")
    if "table3" in tables:
        rows = [(n, systems.get(n, {}).get("alignment")) for n in e.alignment_systems]
        if any(a for _, a in rows):
            L += ["", f"## Table 3: alignment from attention (decoder layer {e.attention_layer}, heads averaged, "
                      f"merge `{e.attention_merge}`; gold set)", "",
                  "| system | AER % | P % | R % |", "|---|---|---|---|"]
            for n, a in rows:
                if a:
                    k = systems[n]["seeds"]
                    L.append(f"| {n} | {_fmt(a['aer'], k, 100)} | {_fmt(a['precision'], k, 100)} | "
                             f"{_fmt(a['recall'], k, 100)} |")
            dg = results.get("diagonal_alignment")
            if dg:
                L.append(f"| reference: diagonal (position only, no model) | {100 * dg['aer']:.2f} | "
                         f"{100 * dg['precision']:.2f} | {100 * dg['recall']:.2f} |")
    if "table4" in tables and e.encoder_free:
        table("Table 4: encoder-free model (RPE is not defined without an encoder, SPEC §4.7)",
              [(f"encoder-free {n}", f"ef-{n}") for n in e.encoder_free], "no PE / APE")
    if "fig4" in tables and s["fig4"]:
        L += ["", f"## Figure 4: noise attack on the training indices ({e.noise_system})", "",
              "Swaps are drawn per training sentence on its word-level order (SPEC §4.8); the last columns say "
              "what that does to the training data (short sentences get no swap at a small ratio).", "",
              "| noise ratio | " + " | ".join(tests) + " | swapped pairs / sentence | indices moved % "
              "| sentences touched % |", "|---|" + "---|" * (len(tests) + 3)]
        for r, n in s["fig4"]:
            v = systems.get(n)
            ns = s.get("fig4_noise", {}).get(f"{r:g}")
            extra = (f" {ns['pairs_per_sentence']:.2f} | {100 * ns['indices_moved']:.1f} | "
                     f"{100 * ns['sentences_touched']:.1f} |" if ns else " – | – | – |")
            if v:
                cells = " | ".join(_fmt(v["tests"][x]["bleu"], v["seeds"]) for x in tests)
                L.append(f"| {r:g} | {cells} |" + extra)
    sig = next((r["tests"][tests[0]]["signature"] for r in results["runs"].values()), None) if tests else None
    L += ["", "## Run", "", f"- command: `{' '.join(['xlpe'] + sys.argv[1:])}`",
          "- versions: " + ", ".join(f"{k} {v}" for k, v in versions().items())]
    if sig:
        L.append(f"- BLEU signature: `{sig}`")
    return "\n".join(L) + "\n"


def plot_figures(cfg: XLConfig, summary: dict, plots: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = summary["systems"]
    for key, xlabel, fname in (("fig3", "τ (XL heads)", "fig3_tau.png"), ("fig4", "noise ratio", "fig4_noise.png")):
        pts = [(x, systems[n]) for x, n in summary.get(key, []) if systems.get(n)]
        if len(pts) < 2:
            continue
        test = next(iter(pts[0][1]["tests"]))
        fig, ax = plt.subplots(figsize=(4.5, 3.2))
        ax.errorbar([x for x, _ in pts], [v["tests"][test]["bleu"][0] for _, v in pts],
                    yerr=[v["tests"][test]["bleu"][1] for _, v in pts], marker="o", capsize=3)
        ax.set(xlabel=xlabel, ylabel=f"BLEU ({test})", title=fname.split("_")[0].replace("fig", "Figure "))
        fig.tight_layout()
        tmp = plots / f".{fname}.tmp.png"
        fig.savefig(tmp, dpi=110)
        plt.close(fig)
        os.replace(tmp, plots / fname)
    names = [n for n in ["baseline"] + cfg.experiment.systems if systems.get(n)]
    if names:
        test = next(iter(systems[names[0]]["tests"]))
        fig, ax = plt.subplots(figsize=(5.5, 3.2))
        ax.bar(list(dict.fromkeys(names)), [systems[n]["tests"][test]["bleu"][0] for n in dict.fromkeys(names)],
               yerr=[systems[n]["tests"][test]["bleu"][1] for n in dict.fromkeys(names)], capsize=4, color="#4878a8")
        ax.set(ylabel=f"BLEU ({test})", title="Table 1")
        ax.tick_params(axis="x", labelrotation=30)
        fig.tight_layout()
        tmp = plots / ".table1.tmp.png"
        fig.savefig(tmp, dpi=110)
        plt.close(fig)
        os.replace(tmp, plots / "table1.png")


def versions() -> dict[str, str]:
    import numpy
    import sacrebleu
    import sentencepiece
    import torch
    return {"xlpe": __version__, "python": platform.python_version(), "torch": torch.__version__,
            "numpy": numpy.__version__, "sacrebleu": sacrebleu.__version__, "sentencepiece": sentencepiece.__version__}


# ==================================================================================================== CLI

def load_config(path: str | None, sets: list[str]) -> XLConfig:
    """``--config`` TOML, then ``--set section.key=value`` overrides (TOML values)."""
    import tomllib

    doc: dict[str, Any] = {}
    if path:
        try:
            with open(path, "rb") as f:
                doc = tomllib.load(f)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} not found") from None
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{path}: invalid TOML ({err})") from None
    for item in sets:
        if "=" not in item or "." not in item.split("=", 1)[0]:
            raise ConfigError(f"--set expects SECTION.KEY=VALUE, got {item!r}")
        k, v = item.split("=", 1)
        section, key = k.split(".", 1)
        try:
            value = tomllib.loads(f"v = {v}")["v"]
        except tomllib.TOMLDecodeError:
            value = v
        doc.setdefault(section, {})[key] = value
    return XLConfig.from_dict(doc, path or "--set")


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="TOML file with tables [data], [experiment], [model], [train] "
                                    "(see xlpe.experiments.xl_pe and examples/)")
    p.add_argument("--out", required=True, help="output folder: cached stages, runs, report.md, results.json, plots/")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override one config value (a TOML value), e.g. --set experiment.seeds=[1] (repeatable)")
    p.add_argument("--only", nargs="+", choices=TABLES, default=None,
                   help="run only what these tables and figures need (default: all)")


def cli_main(args: argparse.Namespace) -> int:
    cfg = load_config(args.config, args.set)
    r = run_experiment(cfg, args.out, args.only)
    print(r["report"])
    print(f"report: {Path(args.out) / 'report.md'}   numbers: {Path(args.out) / 'results.json'}   "
          f"plots: {Path(args.out) / 'plots'}")
    return 0
