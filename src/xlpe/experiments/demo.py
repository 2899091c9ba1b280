"""``xlpe demo`` — the main job: the whole pipeline on the built-in synthetic language pair.

Stages (each cached in the output folder: a stage whose inputs and options are unchanged is skipped, so
an interrupted demo resumes where it stopped):

1. ``synth``    generate the built-in pair (SVO source -> SOV target with postpositions by default);
2. ``subword``  train a joint sentencepiece BPE model and encode the corpus with exact word maps;
3. ``stats``    corpus statistics, and metric self-checks (AER, BLEU, Kendall tau / chunk on gold data);
4. ``align``    eflomal + grow-diag-final-and, AER against the generator's gold alignments;
5. ``preorder`` the BTG preorderer trained on those alignments; Kendall tau / chunk of its predicted test orders
                against the gold orders, beside the identity order; orders of every split for the XL models;
6. ``nmt``      one small Transformer per source position encoding (none, APE, RPE, InXL, HeadXL,
                Combination), test BLEU / chrF with paired bootstrap against APE, and AER / P / R of alignments
                read from each model's attention.

The results table is printed and written to ``report.md`` and ``results.json``; plots go to ``plots/``.
The multi-seed version of the comparison, with every table of Ding et al., is ``xlpe experiment xl-pe``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from xlpe import __version__
from xlpe.experiments.cache import digest, file_sig, run_stage, run_stages
from xlpe.io.atomic import atomic_write

log = logging.getLogger("xlpe.demo")


@dataclass
class DemoConfig:
    out: str = "demo-out"
    profile: str = "sov"
    seed: int = 1
    train: int = 20000
    dev: int = 500
    test: int = 500
    vocab_size: int = 1000
    preorder_sentences: int = 5000
    preorder_iterations: int = 3
    nmt_pe: list[str] = field(default_factory=lambda: ["none", "ape", "rpe", "inxl", "headxl", "combination"])
    nmt_preset: str = "tiny"
    nmt_d_model: int = 96
    nmt_layers: int = 2
    nmt_updates: int = 300
    nmt_max_tokens: int = 2000
    nmt_lr: float = 2e-3
    beam: int = 4
    threads: int = 1
    jobs: int = 2
    force: bool = False
    stages: list[str] = field(default_factory=lambda: list(STAGES))


# ------------------------------------------------------------------------------------------ stages
def stage_synth(cfg: DemoConfig, out: Path) -> dict:
    from xlpe.data.synthetic import SyntheticConfig, synth
    scfg = SyntheticConfig(profile=cfg.profile, seed=cfg.seed)
    params = {"synthetic": scfg.to_dict(), "sizes": [cfg.train, cfg.dev, cfg.test]}

    def fn(d: Path) -> dict:
        paths = synth(d, scfg, sizes={"train": cfg.train, "dev": cfg.dev, "test": cfg.test})
        return {"paths": {k: str(v) for k, v in paths.items()} if isinstance(paths, dict) else str(paths)}
    return run_stage(out, "synth", params, fn, cfg.force)


def stage_subword(cfg: DemoConfig, out: Path) -> dict:
    from xlpe.data.subword import train_subwords
    data = out / "synth"
    params = {"vocab": cfg.vocab_size, "data": digest(file_sig(data / "train.src", data / "train.tgt"))}

    def fn(d: Path) -> dict:
        m = train_subwords([data / "train.src", data / "train.tgt"], d / "spm.model", vocab_size=cfg.vocab_size)
        return {"model": str(d / "spm.model"), "vocab_size": m.vocab_size}
    return run_stage(out, "subword", params, fn, cfg.force)


def stage_stats(cfg: DemoConfig, out: Path) -> dict:
    """Corpus statistics and the metric self-checks (each must hold exactly; a failure is a bug)."""
    from xlpe.data.subword import SubwordModel
    from xlpe.evaluate.aer import corpus_aer, sentence_aer
    from xlpe.evaluate.bleu import corpus_scores
    from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
    from xlpe.io import Alignment, read_alignments, read_bitext, read_orders
    from xlpe.reorder.oracle import lader_ranks

    data = out / "synth"
    params = {"data": digest(file_sig(*(data / f"{s}.{e}" for s in ("train", "test") for e in ("src", "tgt", "align", "order")))),
              "spm": digest(file_sig(out / "subword" / "spm.model"))}

    def fn(d: Path) -> dict:
        sp = SubwordModel.load(out / "subword" / "spm.model")
        res: dict[str, Any] = {}
        for split in ("train", "test"):
            pairs = list(read_bitext(data / f"{split}.src", data / f"{split}.tgt"))
            als = list(read_alignments(data / f"{split}.align", 0, lengths=[(len(s), len(t)) for s, t in pairs]))
            orders = list(read_orders(data / f"{split}.order", lengths=[len(s) for s, _ in pairs]))
            n_src = sum(len(s) for s, _ in pairs)
            n_tgt = sum(len(t) for _, t in pairs)
            pieces = sum(len(e.ids) for e in sp.encode_many(s for s, _ in pairs))
            ranks = [lader_ranks(sorted(a.links), len(s), src_words=s) for (s, _), a in zip(pairs, als)]
            ident = corpus_reorder_scores([list(range(len(s))) for s, _ in pairs], ranks)
            gold = corpus_reorder_scores(orders, ranks)
            res[split] = {
                "pairs": len(pairs), "src_tokens": n_src, "tgt_tokens": n_tgt,
                "src_types": len({w for s, _ in pairs for w in s}), "tgt_types": len({w for _, t in pairs for w in t}),
                "src_len_mean": n_src / len(pairs), "subwords_per_word": pieces / n_src,
                "links_sure": sum(len(a.sure) for a in als), "links_possible_only": sum(len(a.possible_only) for a in als),
                "identity_tau": ident["tau"], "identity_chunk": ident["chunk"],
                "gold_order_tau": gold["tau"], "gold_order_chunk": gold["chunk"],
            }
            if split == "test":
                # self-checks: gold vs itself, SPEC §12 example 6, BLEU of the reference against itself
                refs = [" ".join(t) for _, t in pairs]
                res["check_aer_gold_vs_gold"] = corpus_aer(als, als).aer
                res["check_aer_spec_example_6"] = sentence_aer({(0, 0), (1, 1), (1, 2)},
                                                              Alignment({(0, 0)}, {(1, 1)})).aer
                res["check_bleu_ref_vs_ref"] = corpus_scores(refs, refs, metrics=("bleu",))["bleu"].score
                _plot_lengths(pairs, orders, out / "plots" / "corpus.png")
        return res
    return run_stage(out, "stats", params, fn, cfg.force)


def _plot_lengths(pairs, orders, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    src_len = [len(s) for s, _ in pairs]
    disp = [abs(p - k) for o in orders for p, k in zip(o, range(len(o)))]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].hist(src_len, bins=range(1, max(src_len) + 2), color="#4878a8")
    ax[0].set(title="source length (words)", xlabel="words", ylabel="sentences")
    ax[1].hist(disp, bins=range(0, max(disp) + 2), color="#a85448")
    ax[1].set(title="gold reordering: |new - old position|", xlabel="displacement", ylabel="words", yscale="log")
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


def stage_align(cfg: DemoConfig, out: Path) -> dict:
    """eflomal (grow-diag-final-and) over train+dev+test at once, as in the AER protocol; AER on test."""
    from xlpe.align.eflomal import EflomalAligner
    from xlpe.evaluate.aer import corpus_aer
    from xlpe.io import read_alignments, read_bitext, write_alignments

    data = out / "synth"
    splits = ("train", "dev", "test")
    params = {"data": digest(file_sig(*(data / f"{s}.{e}" for s in splits for e in ("src", "tgt")))),
              "sym": "grow-diag-final-and"}

    def fn(d: Path) -> dict:
        pairs = {s: list(read_bitext(data / f"{s}.src", data / f"{s}.tgt")) for s in splits}
        src = [p[0] for s in splits for p in pairs[s]]
        tgt = [p[1] for s in splits for p in pairs[s]]
        t0 = time.time()
        als = EflomalAligner(sym="grow-diag-final-and", quiet=True).align(src, tgt)
        secs = time.time() - t0
        res: dict[str, Any] = {"align_seconds": round(secs, 1), "pairs": len(src)}
        k = 0
        for s in splits:
            n = len(pairs[s])
            write_alignments(d / f"{s}.align", als[k:k + n], 0)
            gold = list(read_alignments(data / f"{s}.align", 0))
            sc = corpus_aer(als[k:k + n], gold)
            res[s] = {"aer": sc.aer, "precision": sc.precision, "recall": sc.recall}
            k += n
        return res
    return run_stage(out, "align", params, fn, cfg.force)


def stage_preorder(cfg: DemoConfig, out: Path) -> dict:
    """Train the BTG preorderer on eflomal alignments of the training data; score its test orders."""
    from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
    from xlpe.io import read_alignments, read_orders, read_sentences
    from xlpe.io.orders import write_orders
    from xlpe.reorder.btg import BTGConfig, BTGPreorderer
    from xlpe.reorder.oracle import lader_ranks, order_from_ranks

    data = out / "synth"
    params = {"n": cfg.preorder_sentences, "its": cfg.preorder_iterations, "seed": cfg.seed,
              "align": digest(file_sig(out / "align" / "train.align", data / "train.src", data / "test.src"))}

    def fn(d: Path) -> dict:
        train_src = list(read_sentences(data / "train.src"))[: cfg.preorder_sentences]
        train_al = list(read_alignments(out / "align" / "train.align", 0))[: len(train_src)]
        ranks = [lader_ranks(sorted(a.links), len(s), src_words=s) for s, a in zip(train_src, train_al)]
        model = BTGPreorderer(BTGConfig(seed=cfg.seed))
        t0 = time.time()
        hist = model.train(train_src, ranks, iterations=cfg.preorder_iterations, progress=False)
        train_s = time.time() - t0
        model.save(d / "model")
        res: dict[str, Any] = {"train_sentences": len(train_src), "iterations": len(hist),
                               "seconds_per_iteration": round(train_s / max(1, len(hist)), 1)}
        for split in ("train", "dev", "test"):
            src = list(read_sentences(data / f"{split}.src"))
            t0 = time.time()
            orders = model.predict_many(src, processes=1)
            speed = len(src) / (time.time() - t0)
            write_orders(d / f"{split}.order", orders)
            if split != "test":
                continue
            gold_al = list(read_alignments(data / "test.align", 0))
            gold_ranks = [lader_ranks(sorted(a.links), len(s), src_words=s) for s, a in zip(src, gold_al)]
            efl = list(read_alignments(out / "align" / "test.align", 0))
            efl_orders = [order_from_ranks(lader_ranks(sorted(a.links), len(s), src_words=s)) for s, a in zip(src, efl)]
            res["apply_sent_per_s"] = round(speed, 1)
            res["test"] = {
                "identity": corpus_reorder_scores([list(range(len(s))) for s in src], gold_ranks),
                "btg": corpus_reorder_scores(orders, gold_ranks),
                "eflomal_oracle": corpus_reorder_scores(efl_orders, gold_ranks),
                "gold_order": corpus_reorder_scores(list(read_orders(data / "test.order")), gold_ranks),
            }
        return res
    return run_stage(out, "preorder", params, fn, cfg.force)


#: demo system name -> source position encodings (``+`` joins several in --nmt-pe)
DEMO_SYSTEMS = {"none": ["none"], "ape": ["ape"], "rpe": ["ape", "rpe"], "inxl": ["inxl"],
                "headxl": ["ape", "headxl"], "combination": ["ape", "combination"]}


def _pe_list(name: str) -> list[str]:
    return DEMO_SYSTEMS.get(name, name.split("+"))


def stage_nmt(cfg: DemoConfig, out: Path) -> dict:
    """Train one small Transformer per source position encoding; score each on the test set.

    Every model sees the same data, subwords, seed and number of updates. XL models (InXL, HeadXL,
    Combination) read the BTG preorderer's predicted orders of every split, so test time needs the source
    alone. BLEU/chrF come with a paired bootstrap against the ``ape`` baseline (sacrebleu). For every model
    but ``none`` and ``rpe`` the test set is also force-decoded and aligned from attention (penultimate
    decoder layer, heads averaged, SPEC §4.6) and scored against the gold alignments.
    """
    from xlpe.data.subword import SubwordModel
    from xlpe.evaluate.bleu import paired_bootstrap
    from xlpe.experiments.xl_pe import run_system
    from xlpe.io import read_alignments
    from xlpe.io.text import read_lines

    data = out / "synth"
    spm = out / "subword" / "spm.model"
    pre = out / "preorder"
    results: dict[str, Any] = {}
    d = cfg.nmt_d_model
    model = dict(preset=cfg.nmt_preset, share_embeddings=True, d_model=d, n_heads=4, d_ff=4 * d,
                 enc_layers=cfg.nmt_layers, dec_layers=cfg.nmt_layers, dropout=0.1)
    train_opts = dict(lr=cfg.nmt_lr, warmup=min(200, cfg.nmt_updates // 4), max_tokens=cfg.nmt_max_tokens,
                      max_updates=cfg.nmt_updates, save_every=max(100, cfg.nmt_updates // 3), clip_norm=1.0)
    gold = {"src": str(data / "test.src"), "tgt": str(data / "test.tgt"),
            "alignments": list(read_alignments(data / "test.align", 0)), "orders": str(pre / "test.order")}
    tasks = []
    for name in cfg.nmt_pe:
        pe = _pe_list(name)
        want_aer = name not in ("none", "rpe")
        params = {"model": model, "pe": pe, "train": train_opts, "seed": cfg.seed, "beam": cfg.beam,
                  "aer": want_aer, "threads": cfg.threads, "vocab": SubwordModel.load(spm).vocab_size,
                  "data": digest(file_sig(data / "train.src", data / "train.tgt", spm, pre / "train.order",
                                          pre / "test.order"))}
        fn = functools.partial(
            run_system, pe=pe, pe_options={}, encoder_free=False, seed=cfg.seed, model=model, train_opts=train_opts,
            spm=str(spm), train_src=str(data / "train.src"), train_tgt=str(data / "train.tgt"),
            dev_src=str(data / "dev.src"), dev_tgt=str(data / "dev.tgt"), train_orders=str(pre / "train.order"),
            dev_orders=str(pre / "dev.order"),
            tests={"test": (str(data / "test.src"), str(data / "test.tgt"), str(pre / "test.order"))},
            beam=cfg.beam, lenpen=0.6, threads=cfg.threads, gold=gold if want_aer else None)
        tasks.append((out / "nmt", name, params, fn))
    for name, r in zip(cfg.nmt_pe, run_stages(tasks, cfg.jobs, cfg.force)):
        results[name] = {"pe": r["pe"], "params": r["params"], "updates": r["updates"],
                         "train_seconds": r["train_seconds"], "tokens_per_s": r["tokens_per_s"],
                         "decode_sent_per_s": r["tests"]["test"]["decode_sent_per_s"],
                         "hyp": r["tests"]["test"]["hyp"], "bleu": r["tests"]["test"]["bleu"],
                         "chrf": r["tests"]["test"]["chrf"], **({"attention_alignment": r["attention_alignment"]}
                                                               if "attention_alignment" in r else {})}
    refs = [t for _, t in read_lines(data / "test.tgt")]
    names = list(dict.fromkeys((["ape"] if "ape" in results else []) + list(results)))
    systems = [(n, [t for _, t in read_lines(results[n]["hyp"])]) for n in names]
    if len(systems) >= 2:
        comps, sigs = paired_bootstrap(systems, refs, n_samples=1000, seed=cfg.seed)
        for c in comps:
            results[c.system].update(bleu=c.scores["BLEU"], chrf=c.scores["chrF2"], bleu_p=c.p_values["BLEU"],
                                     bleu_ci=c.ci["BLEU"])
        results["_signatures"] = sigs
    _plot_nmt(results, out / "plots" / "nmt.png")
    return results


def _plot_nmt(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in results if not n.startswith("_")]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    vals = [results[n].get("bleu", 0) for n in names]
    err = [results[n].get("bleu_ci", 0) for n in names]
    ax.bar(names, vals, yerr=err, color="#4878a8", capsize=4)
    ax.set(title="test BLEU by source position encoding", ylabel="BLEU")
    ax.tick_params(axis="x", labelrotation=30)   # long names (combination) would run into each other
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


STAGES: dict[str, Callable[[DemoConfig, Path], dict]] = {
    "synth": stage_synth,
    "subword": stage_subword,
    "stats": stage_stats,
    "align": stage_align,
    "preorder": stage_preorder,
    "nmt": stage_nmt,
}


# ------------------------------------------------------------------------------------------ report
def _report(cfg: DemoConfig, results: dict) -> str:
    lines = [f"# xlpe demo — built-in `{cfg.profile}` pair, seed {cfg.seed}", ""]
    st = results.get("stats")
    if st:
        lines += ["## Corpus", "", "| split | pairs | src tok | tgt tok | src types | tgt types | mean src len | subwords/word | sure links | possible-only |",
                  "|---|---|---|---|---|---|---|---|---|---|"]
        for split in ("train", "test"):
            s = st[split]
            lines.append(f"| {split} | {s['pairs']} | {s['src_tokens']} | {s['tgt_tokens']} | {s['src_types']} | "
                         f"{s['tgt_types']} | {s['src_len_mean']:.1f} | {s['subwords_per_word']:.2f} | "
                         f"{s['links_sure']} | {s['links_possible_only']} |")
        t = st["test"]
        lines += ["", "## Reordering (test, lader ranks of the gold alignments)", "",
                  "| order | Kendall τ | chunk |", "|---|---|---|",
                  f"| identity (source order) | {t['identity_tau']:.4f} | {t['identity_chunk']:.4f} |",
                  f"| gold order | {t['gold_order_tau']:.4f} | {t['gold_order_chunk']:.4f} |",
                  "", "## Metric self-checks", "", "| check | value | expected |", "|---|---|---|",
                  f"| AER gold vs gold | {st['check_aer_gold_vs_gold']:.4f} | 0 |",
                  f"| AER SPEC §12 ex. 6 | {st['check_aer_spec_example_6']:.4f} | 0.25 |",
                  f"| BLEU reference vs reference | {st['check_bleu_ref_vs_ref']:.2f} | 100 |"]
    al = results.get("align")
    if al:
        lines += ["", f"## Word alignment (eflomal, grow-diag-final-and, {al['pairs']} pairs, {al['align_seconds']:.0f} s)", "",
                  "| split | AER | precision | recall |", "|---|---|---|---|"]
        for split in ("train", "test"):
            a = al[split]
            lines.append(f"| {split} | {100 * a['aer']:.2f} | {100 * a['precision']:.2f} | {100 * a['recall']:.2f} |")
    po = results.get("preorder")
    if po:
        lines += ["", f"## Preordering (BTG, {po['train_sentences']} sentences x {po['iterations']} iterations, "
                      f"{po['seconds_per_iteration']:.0f} s/iteration, {po['apply_sent_per_s']:.0f} sent/s; "
                      "test, against gold-alignment ranks)", "",
                  "| order | Kendall τ | chunk |", "|---|---|---|"]
        names = {"identity": "identity (source order)", "btg": "BTG preorderer (source only)",
                 "eflomal_oracle": "oracle from eflomal alignments", "gold_order": "gold order"}
        for k, label in names.items():
            r = po["test"][k]
            lines.append(f"| {label} | {r['tau']:.4f} | {r['chunk']:.4f} |")
    nmt = results.get("nmt")
    if nmt:
        lines += ["", f"## Translation (test, beam {cfg.beam}; paired bootstrap vs `ape`; XL models read the "
                      "BTG preorderer's orders; AER / P / R of alignments from attention, penultimate decoder layer)", "",
                  "| source PE | params | updates | BLEU | ±95% | p vs ape | chrF | AER % | P % | R % | train s | "
                  "decode sent/s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for n, r in nmt.items():
            if n.startswith("_"):
                continue
            p = r.get("bleu_p")
            a = r.get("attention_alignment")
            aer = (f"{100 * a['aer']:.1f} | {100 * a['precision']:.1f} | {100 * a['recall']:.1f}" if a
                   else "— | — | —")
            lines.append(f"| {n} | {r['params']:,} | {r['updates']} | {r.get('bleu', float('nan')):.2f} | "
                         f"{r.get('bleu_ci', float('nan')):.2f} | {'—' if p is None else f'{p:.4f}'} | "
                         f"{r.get('chrf', float('nan')):.2f} | {aer} | {r['train_seconds']:.0f} | "
                         f"{r['decode_sent_per_s']:.0f} |")
        if "_signatures" in nmt:
            lines += ["", "signatures: " + "; ".join(f"{k} `{v}`" for k, v in nmt["_signatures"].items())]
    lines += ["", "## Run", "", f"- command: `{' '.join(['xlpe'] + sys.argv[1:])}`",
              f"- xlpe {__version__}, Python {platform.python_version()}, {platform.platform()}",
              "- stage seconds: " + ", ".join(f"{k} {v.get('seconds', 0):.1f}" for k, v in results.items()
                                              if isinstance(v, dict) and "seconds" in v)]
    return "\n".join(lines) + "\n"


def demo(cfg: DemoConfig) -> dict:
    """Run (or resume) the demo; returns every number in a dict (also written to results.json)."""
    out = Path(cfg.out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    results = {}
    for name in cfg.stages:
        if name not in STAGES:
            from xlpe.errors import ConfigError
            raise ConfigError(f"unknown demo stage {name!r} (expected one of {', '.join(STAGES)})")
        results[name] = STAGES[name](cfg, out)
    report = _report(cfg, results)
    with atomic_write(out / "report.md") as f:
        f.write(report)
    with atomic_write(out / "results.json") as f:
        json.dump({"config": cfg.__dict__, "results": results}, f, indent=2, default=str)
    return {"report": report, "results": results}


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    d = DemoConfig()
    p.add_argument("--out", default=d.out, help="output folder (stages are cached here; rerun resumes)")
    p.add_argument("--profile", default=d.profile, help="target word-order profile of the built-in pair (sov, v2, svo-flip, identity)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of data generation and training")
    p.add_argument("--train", type=int, default=d.train, help="training pairs")
    p.add_argument("--dev", type=int, default=d.dev, help="development pairs")
    p.add_argument("--test", type=int, default=d.test, help="test pairs")
    p.add_argument("--vocab-size", type=int, default=d.vocab_size, help="joint subword vocabulary size")
    p.add_argument("--preorder-sentences", type=int, default=d.preorder_sentences,
                   help="training sentences of the BTG preorderer")
    p.add_argument("--preorder-iterations", type=int, default=d.preorder_iterations, help="BTG training iterations")
    p.add_argument("--nmt-pe", nargs="+", default=d.nmt_pe,
                   help=f"systems to compare: {', '.join(DEMO_SYSTEMS)}, or encodings joined with '+' (e.g. ape+rpe)")
    p.add_argument("--nmt-updates", type=int, default=d.nmt_updates, help="training updates per NMT model")
    p.add_argument("--nmt-d-model", type=int, default=d.nmt_d_model, help="model width of the demo NMT models")
    p.add_argument("--nmt-layers", type=int, default=d.nmt_layers, help="encoder and decoder layers")
    p.add_argument("--nmt-max-tokens", type=int, default=d.nmt_max_tokens, help="tokens per batch")
    p.add_argument("--beam", type=int, default=d.beam, help="beam size for the test translations")
    p.add_argument("--threads", type=int, default=d.threads, help="torch CPU threads per NMT model")
    p.add_argument("--jobs", type=int, default=d.jobs,
                   help="NMT models trained at once, in separate processes (2 on a 2-core machine)")
    p.add_argument("--stages", nargs="+", default=list(STAGES), help="stages to run, in order")
    p.add_argument("--force", action="store_true", help="rerun every stage even when cached")


def cli_main(args: argparse.Namespace) -> int:
    cfg = DemoConfig(out=args.out, profile=args.profile, seed=args.seed, train=args.train, dev=args.dev,
                     test=args.test, vocab_size=args.vocab_size, force=args.force, stages=args.stages,
                     preorder_sentences=args.preorder_sentences, preorder_iterations=args.preorder_iterations,
                     nmt_pe=args.nmt_pe, nmt_updates=args.nmt_updates, nmt_d_model=args.nmt_d_model,
                     nmt_layers=args.nmt_layers, nmt_max_tokens=args.nmt_max_tokens, beam=args.beam,
                     threads=args.threads, jobs=args.jobs)
    r = demo(cfg)
    print(r["report"])
    print(f"report: {Path(cfg.out) / 'report.md'}   numbers: {Path(cfg.out) / 'results.json'}   plots: {Path(cfg.out) / 'plots'}")
    return 0
