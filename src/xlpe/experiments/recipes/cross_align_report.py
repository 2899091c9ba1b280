"""The report of ``xlpe experiment cross-align``: AER / P / R of every system on each pair's test part, seed-aware
bootstraps over gold sentences, the Table 2 and 3 analogues, where every choice came from, Figures 3 and 5."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from xlpe.align.crossalign_extract import Extraction
from xlpe.evaluate.significance import aer_score, aer_stats, compare
from xlpe.experiments.recipes.cross_align_sweep import DevChoices, ModelChoices, sweep_key

log = logging.getLogger("xlpe.experiments.recipes.cross_align")
DEV = "dev"
#: why the test across seeds pairs two trained stages' runs (:meth:`xlpe.evaluate.significance.Comparison.basis`)
SAME_CHAIN = "run i of both stages is one seed's training chain (each stage trains on from the stage before it)"


ROWS = {"eflomal": "eflomal + {sym}", "untrained-argmax": "untrained encoder, mutual argmax{sa} (layer {la})",
        "untrained-softmax": "untrained encoder, softmax τ={ts:g}{ss} (layer {ls})",
        "no-training": "Cross-Align, no training ({nt})",
        "+tlm": "+TLM ({tlm})", "+ssa": "++SSA (Cross-Align, {ssa})"}


def trained_stages(e) -> list[str]:
    """The trained models of one seed, in order: ``tlm``, ``ssa`` (the paper's two stages), then ``ssa-r2``, ...
    for each of ``experiment.ssa_rounds``; the last is the recipe's Cross-Align."""
    return ["tlm", "ssa"] + [f"ssa-r{k}" for k in range(2, len(e.ssa_rounds) + 2)]


def _row(name: str, fmt: dict) -> str:
    if name.startswith("+ssa-r"):
        return f"+ SSA round {name[len('+ssa-r'):]} [I] (labels from the round before; {fmt[name[1:]]})"
    return ROWS[name].format(**fmt)


def summarise(run, systems: dict, grids: dict, fig3: dict[int, tuple[ModelChoices, ModelChoices]]) -> dict:
    """Every number of the report from the recipe's run (``RecipeRun``), per pair and system; ``fig3``: the dev
    choices of the TLM and SSA models of each number of cross layers."""
    e = run.cfg.experiment
    res: dict[str, Any] = {"choices": run.choices.to_json(), "pairs": {}, "comparisons": {}, "fig3": {}, "fig5": {}}
    for pair, rows in systems.items():
        sl = run.test_slice(pair)
        gold = run.gold[pair][sl]
        stats = {name: [aer_stats(a[sl], gold) for a in seeds] for name, seeds in rows.items()}
        scores = {}
        for name, per_seed in stats.items():
            tot = [s.sum(0) for s in per_seed]
            aers = [aer_score(t) for t in tot]
            scores[name] = {"aer": 100 * float(np.mean(aers)), "aer_seeds": [100 * a for a in aers],
                            "precision": 100 * float(np.mean([t[1] / t[2] if t[2] else 0.0 for t in tot])),
                            "recall": 100 * float(np.mean([t[0] / t[3] if t[3] else 0.0 for t in tot])),
                            "links": float(np.mean([t[2] for t in tot]))}
            if pair == run.cfg.data.dev_pair:          # the whole gold set, for comparison with the papers
                full = [aer_score(aer_stats(a, run.gold[pair]).sum(0)) for a in rows[name]]
                scores[name]["aer_all_gold"] = 100 * float(np.mean(full))
        res["pairs"][pair] = {"sentences": len(gold), "dev_excluded": sl.start or 0, "systems": scores,
                              "corpus_lines": run.data[pair]["corpus"], "sources": run.data[pair]["sources"]}
        comps = {}
        stages = [f"+{s}" for s in trained_stages(e)]
        final = stages[-1]                                   # the last round also against the round before it
        for cand, base in dict.fromkeys(((final, "eflomal"), (final, "untrained-argmax"), (final, "untrained-softmax"),
                                         ("+tlm", "no-training"), ("+ssa", "+tlm"), ("+tlm", "untrained-argmax"),
                                         (final, "+ssa"), (final, stages[-2]))):
            if cand == base:
                continue
            if cand in stats and base in stats:
                # two trained stages come from the same seeds' chains: their test across seeds is paired
                c = compare("AER", stats[base], stats[cand], aer_score, higher_is_better=False,
                            resamples=e.bootstrap_samples, paired_seeds=base in stages and cand in stages,
                            pairing=SAME_CHAIN)
                comps[f"{cand} vs {base}"] = {**c.to_dict(), "verdict": c.claim()}
        res["comparisons"][pair] = comps
    for n, (tlm, ssa) in fig3.items():
        res["fig3"][n] = {"tlm": 100 * tlm.best.aer, "ssa": 100 * ssa.best.aer,
                          "tlm_extraction": sweep_key(tlm.best.extraction),
                          "ssa_extraction": sweep_key(ssa.best.extraction), "tlm_layer": tlm.best.extraction.layer,
                          "ssa_layer": ssa.best.extraction.layer, "label_tau": tlm.label.extraction.threshold,
                          "ssa_tau": ssa.label.extraction.threshold, "tlm_joined": sweep_key(tlm.joined.extraction),
                          "ssa_joined": sweep_key(ssa.joined.extraction)}
    for name, grid in grids.items():
        res["fig5"][name] = {lay: {"argmax": 100 * aer_score(np.asarray(row["argmax"])),
                                   "softmax_best": 100 * min(aer_score(np.asarray(row[t])) for t in e.thresholds)}
                             for lay, row in sorted(grid.items())}
    return res


def _sym_name(sym: str, vec: str = "pieces") -> str:
    return ("" if sym == "pieces" else f" + {sym}") + ("" if vec == "pieces" else f", word {vec} states")


def _ext_name(ext: Extraction) -> str:
    return ("mutual argmax" if ext.method == "argmax" else f"softmax τ={float(ext.threshold):g}") + _sym_name(
        ext.symmetrize, ext.word_vectors)


def _menu_name(vectors: list[str]) -> str:
    return "" if vectors == ["pieces"] else f"; on {' or '.join(vectors)} states"


def _cell(s: dict | None) -> str:
    return "—" if s is None else f"{s['aer']:.1f} ({s['precision']:.0f}/{s['recall']:.0f})"


def render_report(cfg, results: dict, chosen: set[str], ch: DevChoices) -> str:
    d, e = cfg.data, cfg.experiment
    stages = trained_stages(e)
    rounds = [f"+{stage}" for stage in stages[2:]]
    pairs = list(results["pairs"])
    seeds = len(e.seeds)
    ua, us = ch.untrained_argmax.extraction, ch.untrained_softmax.extraction
    fmt = {"sym": e.eflomal_sym, "la": ua.layer, "ls": us.layer, "ts": us.threshold,
           "sa": _sym_name(ua.symmetrize, ua.word_vectors), "ss": _sym_name(us.symmetrize, us.word_vectors)}
    at = {stage: "" if e.trained_layer == "c" else f", layer {ch.models[stage].best.extraction.layer}"
          for stage in ch.links}
    fmt.update({stage: _ext_name(ext) + at[stage] for stage, ext in ch.links.items()})
    if stages[-1] in ch.links:
        fmt["nt"] = _ext_name(ch.links[stages[-1]])
    pruned = " (vocabulary pruned to each pair's text)" if e.prune_vocab else ""
    lines = ["# Cross-Align (Lai et al. 2022) at small scale", "",
             f"Encoder: `{e.encoder}`{pruned}; "
             f"Cross-Align m={ch.m} self + n={ch.n} cross layers, alignment layer c={ch.m + 1}; "
             f"{seeds} training seed(s) {e.seeds}.", "",
             f"**Dev set:** the first {d.dev_lines} gold sentences of `{d.dev_pair}`. **Test:** every other gold "
             "sentence: all of every other pair, the rest of the dev pair. Every AER below is on the test part "
             "(AER % with precision/recall in brackets).", ""]
    head = "| system | " + " | ".join(f"{p} ({results['pairs'][p]['sentences']})" for p in pairs) + " |"
    if chosen & {"table2", "table3"}:
        for title, rows in (("Table 2 analogue", ["eflomal", "untrained-argmax", "untrained-softmax",
                                                  f"+{stages[-1]}"]),
                            ("Table 3 analogue (ablation)", ["no-training", "+tlm", "+ssa", *rounds])):
            key = "table2" if title.startswith("Table 2") else "table3"
            if key not in chosen:
                continue
            lines += [f"## {title}", "", head, "|---|" + "---|" * len(pairs)]
            for r in rows:
                cells = [_cell(results["pairs"][p]["systems"].get(r)) for p in pairs]
                lines.append(f"| {_row(r, fmt)} | " + " | ".join(cells) + " |")
            lines.append("")
        lines += ["## Significance (paired bootstrap over test gold sentences, seeds kept together)", ""]
        for p in pairs:
            for name, c in results["comparisons"][p].items():
                lines.append(f"- `{p}` {name}: {c['verdict']}")
        dp = results["pairs"][d.dev_pair]["systems"]
        lines += ["", f"`{d.dev_pair}` on all its gold sentences (dev included, for comparison with the papers only): "
                  + ", ".join(f"{k} {v['aer_all_gold']:.1f}" for k, v in dp.items() if "aer_all_gold" in v), ""]
    lines += ["## Where every choice came from", "", *_choice_lines(cfg, ch, fmt)]
    for k, v in e.chosen_on.items():
        lines.append(f"- {k}: {v}")
    if results["fig3"]:
        lines += ["", "## Figure 3 analogue: number of cross layers n (dev AER, each with its dev-best extractor; "
                  "a small budget)", "",
                  "| n | +TLM | ++SSA |", "|---|---|---|"]
        for n, f in sorted(results["fig3"].items()):
            lines.append(f"| {n} | {f['tlm']:.1f} | {f['ssa']:.1f} |")
    if results["fig5"] and "fig5" in chosen:
        lines += ["", "## Figure 5 analogue: extraction layer (dev AER; softmax at its best τ)", "",
                  "| layer | " + " | ".join(f"{k} argmax | {k} softmax" for k in results["fig5"]) + " |",
                  "|---|" + "---|---|" * len(results["fig5"])]
        layers = sorted({lay for g in results["fig5"].values() for lay in g})
        for lay in layers:
            cells = []
            for g in results["fig5"].values():
                r = g.get(lay)
                cells += ["—", "—"] if r is None else [f"{r['argmax']:.1f}", f"{r['softmax_best']:.1f}"]
            lines.append(f"| {lay} | " + " | ".join(cells) + " |")
    lines += ["", "Paper (mBERT, 1.1–1.9M pairs, Table 2): Cross-Align De-En 13.6, En-Fr 3.4, Zh-En 10.1, "
              "Ja-En 35.4; SimAlign 18.8 / 7.6 / 21.6 / 46.6.", ""]
    return "\n".join(lines)


def _choice_lines(cfg, ch: DevChoices, fmt: dict) -> list[str]:
    """The report's list of where every dev choice came from."""
    e, stages = cfg.experiment, trained_stages(cfg.experiment)
    ua, us = ch.untrained_argmax.extraction, ch.untrained_softmax.extraction
    lines = [f"- untrained baselines: mutual argmax{fmt['sa']} at layer {ua.layer} "
             f"(dev AER {100 * ch.untrained_argmax.aer:.1f}), softmax at layer "
             f"{us.layer} with τ={us.threshold:g}{fmt['ss']} "
             f"(dev AER {100 * ch.untrained_softmax.aer:.1f}): the best of the sweep on the dev set",
             f"- m={ch.m}: " + ("the best untrained mutual-argmax layer (piece-level join) minus 1, on the dev set"
                                if cfg.model.get("m", DEV) == DEV else "set in [model]")]
    for stage in (s for s in stages if s in ch.links):
        best = ch.models[stage].best
        src = "set in [model]"
        if cfg.model.get("threshold", DEV) == DEV:
            src = (f"the best of {', '.join(e.trained_extractors)} (joined by "
                   f"{' or '.join(e.symmetrize)}{_menu_name(e.word_vectors)}) on the dev set, "
                   f"dev AER {100 * best.aer:.1f}")
        at = "c" if e.trained_layer == "c" else f"layer {best.extraction.layer} (the dev-best layer)"
        lines.append(f"- {stage.upper()} model extraction at {at}: {_ext_name(ch.links[stage])} ({src})")
    if cfg.train.get("label_threshold") == DEV and "tlm" in ch.models:
        lines.append(f"- SSA label τ={ch.models['tlm'].label.extraction.threshold:g}: the stage-1 model's best τ on "
                     "the dev set")
        for prev, stage in zip(stages[1:], stages[2:]):
            if e.round_labels == DEV and prev in ch.models:
                lines.append(f"- {stage.upper()} labels {_ext_name(ch.models[prev].joined.extraction)}: the "
                             f"{prev.upper()} model's best softmax extraction at c on the dev set "
                             "(experiment.round_labels = dev)")
            else:
                lines.append(f"- {stage.upper()} label τ={ch.models[prev].label.extraction.threshold:g}: the "
                             f"{prev.upper()} model's best τ at c on the dev set")
    return lines


def plot_figures(results: dict, plots: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no plots")
        return
    if results["fig5"]:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, g in results["fig5"].items():
            xs = sorted(g)
            ax.plot(xs, [g[x]["argmax"] for x in xs], marker="o", label=f"{name} argmax")
            ax.plot(xs, [g[x]["softmax_best"] for x in xs], marker="x", linestyle="--", label=f"{name} softmax")
        ax.set_xlabel("extraction layer")
        ax.set_ylabel("dev AER (%)")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(plots / "fig5_layers.png", dpi=120)
        plt.close(fig)
    if results["fig3"]:
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ns = sorted(results["fig3"])
        for k in ("tlm", "ssa"):
            ax.plot(ns, [results["fig3"][n][k] for n in ns], marker="o", label=f"+{k.upper()}")
        ax.set_xlabel("cross layers n")
        ax.set_ylabel("dev AER (%)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(plots / "fig3_cross_layers.png", dpi=120)
        plt.close(fig)
