"""``xlpe demo`` — the main job: the whole pipeline on the built-in synthetic language pair.

A short recipe over the shared stages of :mod:`xlpe.experiments.engine.stages` (each cached in the output folder: a
stage whose inputs and options are unchanged is skipped, so an interrupted demo resumes where it stopped):

1. ``synth``    generate the built-in pair (SVO source -> SOV target with postpositions by default);
2. ``subword``  train a joint sentencepiece BPE model and encode the corpus with exact word maps;
3. ``stats``    corpus statistics, and metric self-checks (AER, BLEU, Kendall tau / chunk on gold data);
4. ``align``    eflomal + grow-diag-final-and over all splits (the AER protocol), AER against the generator's
                gold alignments; ``align-train`` the same over the training pairs alone, for what trains on links;
5. ``preorder`` the BTG preorderer trained on the training pairs' links; Kendall tau / chunk of its predicted test
                orders against the gold orders, beside the identity order; orders of every split for the XL models;
6. ``nmt``      one small Transformer per source position encoding (none, APE, RPE, InXL, HeadXL,
                Combination, structural PE on gold trees, DPE), test BLEU / chrF with paired bootstrap against APE,
                and AER / P / R of alignments read from each model's attention.

The results table is printed and written to ``report.md`` and ``results.json``; plots go to ``plots/``.
The multi-seed version of the comparison, with every table of Ding et al., is ``xlpe experiment xl-pe``.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlpe.config import option
from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import digest, file_sig, run_stage, run_stages
from xlpe.keys import Inputs
from xlpe.experiments.engine.runs import Corpus, Evaluation, RunSpec, Shared, System, run_system
from xlpe.experiments.engine.recipe import write_outputs
from xlpe.experiments.engine.stages import SPLITS, align_stage, dpe_stage, preorder_stage, subword_stage, synth_stage
from xlpe.reorder.oracle import corpus_ranks
from xlpe.experiments.recipes.systems import SYSTEMS, pe_list
from xlpe.io import read_alignments
from xlpe.runtime import versions

#: what ``stages`` may name (synth and subword always run: everything else reads them)
STAGES = ("synth", "subword", "stats", "align", "preorder", "nmt")


@dataclass
class DemoConfig:
    """The demo's options (``xlpe demo --help``; a TOML ``[demo]`` table via ``--config``)."""

    out: str = option("demo-out", "output folder (stages are cached here; rerun resumes)")
    profile: str = option("sov", "target word-order profile of the built-in pair (sov, v2, svo-flip, identity)")
    seed: int = option(1, "seed of data generation and training")
    train: int = option(20000, "training pairs")
    dev: int = option(500, "development pairs")
    test: int = option(500, "test pairs")
    vocab_size: int = option(1000, "joint subword vocabulary size")
    preorder_sentences: int = option(5000, "training sentences of the BTG preorderer")
    preorder_iterations: int = option(3, "BTG training iterations")
    nmt_pe: list[str] = option(help=f"systems to compare: {', '.join(SYSTEMS)}, or encodings joined with '+' "
                                    "(e.g. ape+rpe)",
                               factory=lambda: ["none", "ape", "rpe", "disan", "inxl", "headxl", "combination",
                                                "struct", "dpe"])
    nmt_preset: str = option("tiny", "model preset of the demo NMT models")
    nmt_d_model: int = option(96, "model width of the demo NMT models")
    nmt_layers: int = option(2, "encoder and decoder layers")
    nmt_updates: int = option(300, "training updates per NMT model")
    nmt_max_tokens: int = option(2000, "tokens per batch")
    nmt_lr: float = option(2e-3, "peak learning rate")
    beam: int = option(4, "beam size for the test translations")
    threads: int = option(1, "torch CPU threads per NMT model")
    jobs: int = option(2, "NMT models trained at once, in separate processes (2 on a 2-core machine)")
    force: bool = option(False, "rerun every stage even when cached")
    stages: list[str] = option(help="stages to run, in order (synth and subword always run)",
                               factory=lambda: list(STAGES))


# ------------------------------------------------------------------------------------------ stages
@dataclass(frozen=True)
class StatsInputs(Inputs):
    data: str                              # the built-in pair's train and test files, by content
    spm: str


@dataclass(frozen=True)
class DemoRunInputs(Inputs):
    """One model of the demo: its encodings, the shared model, budget and data, and what only some models read."""

    model: dict
    pe: list
    train: dict
    seed: int
    beam: int
    aer: bool                              # aligns the test set from attention
    threads: int
    vocab: int
    data: str                              # bitext, subwords, orders, by content
    trees: str = ""                        # the trees, for a model that reads them
    dpe: str = ""                          # the DPE targets, for a model trained on them


def stats_stage(cfg: DemoConfig, out: Path, spm: str) -> dict:
    """Corpus statistics and the metric self-checks (each must hold exactly; a failure is a bug)."""
    from xlpe.data.subword import SubwordModel
    from xlpe.evaluate.aer import corpus_aer, sentence_aer
    from xlpe.evaluate.bleu import corpus_scores, tokenized_by_design
    from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
    from xlpe.io import Alignment, read_alignments, read_bitext, read_orders

    data = out / "synth"
    params = StatsInputs(data=digest(file_sig(*(data / f"{s}.{e}" for s in ("train", "test")
                                                for e in ("src", "tgt", "align", "order")))),
                         spm=digest(file_sig(spm)))

    def fn(d: Path) -> dict:
        sp = SubwordModel.load(spm)
        res: dict[str, Any] = {}
        for split in ("train", "test"):
            pairs = list(read_bitext(data / f"{split}.src", data / f"{split}.tgt"))
            als = list(read_alignments(data / f"{split}.align", 0, lengths=[(len(s), len(t)) for s, t in pairs]))
            orders = list(read_orders(data / f"{split}.order", lengths=[len(s) for s, _ in pairs]))
            n_src = sum(len(s) for s, _ in pairs)
            n_tgt = sum(len(t) for _, t in pairs)
            pieces = sum(len(e.ids) for e in sp.encode_many(s for s, _ in pairs))
            ranks = corpus_ranks([s for s, _ in pairs], als)
            ident = corpus_reorder_scores([list(range(len(s))) for s, _ in pairs], ranks)
            gold = corpus_reorder_scores(orders, ranks)
            res[split] = {
                "pairs": len(pairs), "src_tokens": n_src, "tgt_tokens": n_tgt,
                "src_types": len({w for s, _ in pairs for w in s}), "tgt_types": len({w for _, t in pairs for w in t}),
                "src_len_mean": n_src / len(pairs), "subwords_per_word": pieces / n_src,
                "links_sure": sum(len(a.sure) for a in als),
                "links_possible_only": sum(len(a.possible_only) for a in als),
                "identity_tau": ident["tau"], "identity_chunk": ident["chunk"],
                "gold_order_tau": gold["tau"], "gold_order_chunk": gold["chunk"],
            }
            if split == "test":
                # self-checks: gold vs itself, SPEC §12 example 6, BLEU of the reference against itself
                refs = [" ".join(t) for _, t in pairs]
                res["check_aer_gold_vs_gold"] = corpus_aer(als, als).aer
                res["check_aer_spec_example_6"] = sentence_aer({(0, 0), (1, 1), (1, 2)},
                                                              Alignment({(0, 0)}, {(1, 1)})).aer
                with tokenized_by_design():
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


def _reference_orders(paths: dict, eflomal_test: str, gold_test: list) -> dict:
    """Kendall τ / chunk of two reference orders of the test set against the gold-alignment ranks: the oracle
    order of the eflomal alignments and the generator's gold order (1.0 by construction)."""
    from xlpe.evaluate.reorder_metrics import corpus_reorder_scores
    from xlpe.io import read_orders, read_sentences
    from xlpe.reorder.oracle import order_from_ranks

    src = list(read_sentences(paths["test_src"]))
    granks = corpus_ranks(src, gold_test)
    efl = [order_from_ranks(r) for r in corpus_ranks(src, list(read_alignments(eflomal_test, 0)))]
    return {"eflomal_oracle": corpus_reorder_scores(efl, granks),
            "gold_order": corpus_reorder_scores(list(read_orders(paths["test_order"])), granks)}


def nmt_stage(cfg: DemoConfig, out: Path, spm: str, orders: dict[str, str], dpe: str) -> dict:
    """Train one small Transformer per source position encoding; score each on the test set.

    Every model sees the same data, subwords, seed and number of updates. XL models (InXL, HeadXL,
    Combination) read the BTG preorderer's predicted orders of every split, so test time needs the source
    alone; structural models read the generator's gold dependency trees (CoNLL-U); DPE is trained with targets from
    the eflomal alignments, projected to subwords (SPEC §6.2), and translates from the source alone. BLEU/chrF come
    with a paired bootstrap against the ``ape`` baseline (sacrebleu). For every model but ``none`` and ``rpe`` the
    test set is also force-decoded and aligned from attention (penultimate decoder layer, heads averaged, SPEC §4.6)
    and scored against the gold alignments.
    """
    from xlpe.data.subword import SubwordModel
    from xlpe.evaluate.bleu import tokenized_by_design
    from xlpe.evaluate.significance import compare_texts
    from xlpe.io import read_alignments
    from xlpe.io.text import read_lines

    data = out / "synth"
    results: dict[str, Any] = {}
    d = cfg.nmt_d_model
    model = dict(preset=cfg.nmt_preset, share_embeddings=True, d_model=d, n_heads=4, d_ff=4 * d,
                 enc_layers=cfg.nmt_layers, dec_layers=cfg.nmt_layers, dropout=0.1)
    train_opts = dict(lr=cfg.nmt_lr, warmup=min(200, cfg.nmt_updates // 4), max_tokens=cfg.nmt_max_tokens,
                      max_updates=cfg.nmt_updates, save_every=max(100, cfg.nmt_updates // 3), clip_norm=1.0)
    def channels(split: str) -> dict[str, str]:    # every model gets the channels it reads of these
        return {"xl": "orders:" + orders[split],
                **{c: f"conllu:{data / (split + '.conllu')}" for c in ("depth", "tree_word", "tree_head")},
                **({"dpe_target": "dpe:" + dpe} if split == "train" else {})}
    gold = {"src": str(data / "test.src"), "tgt": str(data / "test.tgt"),
            "alignments": list(read_alignments(data / "test.align", 0)), "channels": channels("test")}
    shared = Shared(model=model, train=train_opts, threads=cfg.threads,
                    corpus=Corpus(spm=str(spm), train_src=str(data / "train.src"), train_tgt=str(data / "train.tgt"),
                                  dev_src=str(data / "dev.src"), dev_tgt=str(data / "dev.tgt"),
                                  train_channels=channels("train"), dev_channels=channels("dev"),
                                  tests={"test": (str(data / "test.src"), str(data / "test.tgt"), channels("test"))},
                                  tokenized_by_design=True),
                    evaluation=Evaluation(beam=cfg.beam, lenpen=0.6, gold=gold))
    no_gold = dataclasses.replace(shared, evaluation=Evaluation(beam=cfg.beam, lenpen=0.6))
    tasks = []
    for name in cfg.nmt_pe:
        pe = pe_list(name)
        want_aer = name not in ("none", "rpe")
        params = DemoRunInputs(
            model=model, pe=pe, train=train_opts, seed=cfg.seed, beam=cfg.beam, aer=want_aer, threads=cfg.threads,
            vocab=SubwordModel.load(spm).vocab_size,
            data=digest(file_sig(data / "train.src", data / "train.tgt", spm, orders["train"], orders["test"])),
            trees=digest(file_sig(*(data / f"{s}.conllu" for s in ("train", "dev", "test"))))
            if any(p.startswith("struct") for p in pe) else "",
            dpe=digest(file_sig(dpe)) if "dpe" in pe else "")
        spec = RunSpec(system=System(pe=pe), seed=cfg.seed, shared=shared if want_aer else no_gold)
        tasks.append((out / "nmt", name, params, functools.partial(run_system, spec=spec)))
    for name, r in zip(cfg.nmt_pe, run_stages(tasks, cfg.jobs, cfg.force)):
        results[name] = {"pe": r["pe"], "params": r["params"], "updates": r["updates"],
                         "train_seconds": r["train_seconds"], "tokens_per_s": r["tokens_per_s"],
                         "decode_sent_per_s": r["tests"]["test"]["decode_sent_per_s"],
                         "hyp": r["tests"]["test"]["hyp"], "bleu": r["tests"]["test"]["bleu"],
                         "signature": r["tests"]["test"]["signature"],
                         "chrf": r["tests"]["test"]["chrf"], **({"attention_alignment": r["attention_alignment"]}
                                                               if "attention_alignment" in r else {})}
    refs = [t for _, t in read_lines(data / "test.tgt")]
    names = list(dict.fromkeys((["ape"] if "ape" in results else []) + list(results)))
    hyps = {n: [t for _, t in read_lines(results[n]["hyp"])] for n in names}
    if "ape" in hyps and len(hyps) >= 2:     # the seed-aware test of every recipe; one seed: the bootstrap only
        for n in names[1:]:
            with tokenized_by_design():      # the built-in pair is tokenised on purpose
                c = compare_texts("bleu", [hyps["ape"]], [hyps[n]], refs, resamples=1000, seed=cfg.seed)
            results[n].update(bleu_delta=c.delta, bleu_ci=list(c.ci95), bleu_p=c.p_bootstrap, verdict=c.verdict())
    _plot_nmt(results, out / "plots" / "nmt.png")
    return results


def _plot_nmt(results: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in results if not n.startswith("_")]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    vals = [results[n].get("bleu", 0) for n in names]
    ax.bar(names, vals, color="#4878a8")
    ax.set(title="test BLEU by source position encoding", ylabel="BLEU")
    ax.tick_params(axis="x", labelrotation=30)   # long names (combination) would run into each other
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------ report
def _report(cfg: DemoConfig, results: dict) -> str:
    lines = [f"# xlpe demo — built-in `{cfg.profile}` pair, seed {cfg.seed}", ""]
    st = results.get("stats")
    if st:
        lines += ["## Corpus", "", "| split | pairs | src tok | tgt tok | src types | tgt types | mean src len "
                  "| subwords/word | sure links | possible-only |",
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
        lines += ["", f"## Word alignment (eflomal, grow-diag-final-and, {al['pairs']} pairs, "
                      f"{al['align_seconds']:.0f} s)", "",
                  "| split | AER | precision | recall |", "|---|---|---|---|"]
        for split in ("train", "test"):
            a = al["aer"][split]
            lines.append(f"| {split} | {100 * a['aer']:.2f} | {100 * a['precision']:.2f} | {100 * a['recall']:.2f} |")
    po = results.get("preorder")
    if po:
        lines += ["", f"## Preordering (BTG, {po['train_sentences']} sentences x {po['iterations']} iterations, "
                      f"{po['seconds_per_iteration']:.0f} s/iteration, {po['test_sent_per_s']:.0f} sent/s; "
                      "test, against gold-alignment ranks)", "",
                  "| order | Kendall τ | chunk |", "|---|---|---|"]
        names = {"test_identity": "identity (source order)", "test_btg": "BTG preorderer (source only)",
                 "eflomal_oracle": "oracle from eflomal alignments", "gold_order": "gold order"}
        for k, label in names.items():
            r = po[k]
            lines.append(f"| {label} | {r['tau']:.4f} | {r['chunk']:.4f} |")
    nmt = results.get("nmt")
    if nmt:
        lines += ["", f"## Translation (test, beam {cfg.beam}; XL models read the BTG preorderer's orders, the "
                      "structural one the gold trees; AER / P / R of alignments from attention, penultimate decoder "
                      "layer)", "",
                  "One seed per system: the p-value is the paired bootstrap's over test sentences "
                  "(xlpe.evaluate.significance), one-sided, that the system is not better than `ape`; with one seed "
                  "no claim about training variance can be made (`xlpe experiment xl-pe` runs several seeds).", "",
                  "| source PE | params | updates | BLEU | Δ vs ape [95% CI] | p vs ape | chrF | AER % | P % | R % | "
                  "train s | decode sent/s |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for n, r in nmt.items():
            if n.startswith("_"):
                continue
            p = r.get("bleu_p")
            a = r.get("attention_alignment")
            aer = (f"{100 * a['aer']:.1f} | {100 * a['precision']:.1f} | {100 * a['recall']:.1f}" if a
                   else "— | — | —")
            ci = r.get("bleu_ci")
            delta = "—" if ci is None else f"{r['bleu_delta']:+.2f} [{ci[0]:+.2f}, {ci[1]:+.2f}]"
            lines.append(f"| {n} | {r['params']:,} | {r['updates']} | {r.get('bleu', float('nan')):.2f} | "
                         f"{delta} | {'—' if p is None else f'{p:.4f}'} | "
                         f"{r.get('chrf', float('nan')):.2f} | {aer} | {r['train_seconds']:.0f} | "
                         f"{r['decode_sent_per_s']:.0f} |")
        sig = next((r["signature"] for r in nmt.values() if isinstance(r, dict) and r.get("signature")), None)
        if sig:
            lines += ["", f"BLEU signature: `{sig}`"]
    lines += ["", "## Run", "", f"- command: `{' '.join(['xlpe'] + sys.argv[1:])}`",
              "- " + ", ".join(f"{k} {v}" for k, v in versions().items()) + f", {platform.platform()}",
              "- stage seconds: " + ", ".join(f"{k} {v.get('seconds', 0):.1f}" for k, v in results.items()
                                              if isinstance(v, dict) and "seconds" in v)]
    return "\n".join(lines) + "\n"


def demo(cfg: DemoConfig) -> dict:
    """Run (or resume) the demo; returns every number in a dict (also written to results.json)."""
    out = Path(cfg.out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    unknown = [s for s in cfg.stages if s not in STAGES]
    if unknown:
        raise ConfigError(f"unknown demo stage(s) {unknown} (expected some of {', '.join(STAGES)})")
    want, results = set(cfg.stages), {}
    paths = synth_stage(out, cfg.profile, cfg.seed, [cfg.train, cfg.dev, cfg.test], cfg.force)["paths"]
    results["synth"] = {"paths": paths}
    spm = subword_stage(out, [paths["train_src"], paths["train_tgt"]], cfg.vocab_size, cfg.force)
    if "stats" in want:
        results["stats"] = stats_stage(cfg, out, spm)
    if want & {"align", "preorder", "nmt"}:
        gold = {s: list(read_alignments(paths[f"{s}_align"], 0)) for s in SPLITS}
        results["align"] = align_stage(out, {s: (paths[f"{s}_src"], paths[f"{s}_tgt"]) for s in SPLITS}, gold=gold,
                                       force=cfg.force)
    if want & {"preorder", "nmt"}:
        # the links that train the preorderer and DPE: a run over the training pairs alone (the joint run above
        # follows the AER protocol and saw the dev and test references)
        train_align = align_stage(out, {"train": (paths["train_src"], paths["train_tgt"])}, name="align-train",
                                  force=cfg.force)["paths"]["train"]
        pre = preorder_stage(out, train_src=paths["train_src"], train_align=train_align,
                             splits={s: paths[f"{s}_src"] for s in SPLITS}, sentences=cfg.preorder_sentences,
                             iterations=cfg.preorder_iterations, seed=cfg.seed, gold={"test": gold["test"]},
                             force=cfg.force)
        results["preorder"] = {**pre, **_reference_orders(paths, results["align"]["paths"]["test"], gold["test"])}
    if "nmt" in want:
        dpe = dpe_stage(out, src=paths["train_src"], align=train_align, spm=spm)
        results["nmt"] = nmt_stage(cfg, out, spm, results["preorder"]["orders"], dpe)
    return write_outputs(out, dict(cfg.__dict__), _report(cfg, results), results)
