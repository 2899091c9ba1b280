"""The report of ``xlpe experiment xl-pe``: per-system summaries over seeds, the Markdown tables of Ding et al.
Tables 1, 3, 4 and Figures 3, 4, and their plots. ``cfg`` is the recipe's ``XLConfig``
(:mod:`xlpe.experiments.recipes.xl_pe`, which imports this module)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from xlpe.experiments.engine.stages import read_text
from xlpe.experiments.engine.summary import (claim_lines, closing_lines, dev_curve_lines, dev_scores_lines, fmt, p_cell,
                                      system_summary)
from xlpe.experiments.recipes.systems import LABELS

#: how report headers name test sets the recipe adds itself
TEST_LABELS = {"all-gold": "all gold (incl. dev part)"}


def summarise(cfg, results: dict, tables: set[str], tests: dict, tau0: int,
              gold: list | None = None) -> dict:
    """Every system's summary over seeds, and the points of Figures 3 and 4 (``tau0``: Table 1's HeadXL τ)."""
    e, runs = cfg.experiment, results["runs"]
    refs = {k: read_text(v[1]) for k, v in tests.items()}
    names = {n.split("/")[0] for n in runs}
    s: dict[str, Any] = {"systems": {}}
    for n in sorted(names):
        base = "ef-none" if n.startswith("ef-") else "baseline"
        if n.startswith("ef-") and "ef-ape" in names:
            base = "ef-ape"
        s["systems"][n] = system_summary(runs, n, base, refs, seeds=cfg.experiment.seeds,
                                         resamples=cfg.experiment.bootstrap_samples, gold=gold)
    cost = results.get("cost", {}).get("systems", {})
    base_tps = s["systems"].get("baseline", {}).get("tokens_per_s")
    for n, v in s["systems"].items():
        if n in cost:
            v["speed_vs_baseline"] = cost[n]["relative_speed"]
            per_round = cost[n]["relative_speed_per_round"]
            v["speed_vs_baseline_range"] = [min(per_round), max(per_round)]
        elif base_tps and v.get("tokens_per_s") and not cost:
            v["speed_vs_baseline"] = v["tokens_per_s"] / base_tps
    s["fig3"] = ([(0, "baseline")] + [(t, "headxl" if t == tau0 else f"headxl-tau{t}") for t in e.taus if t > 0]
                 if "fig3" in tables else [])
    s["fig4"] = ([(0.0, e.noise_system)] + [(r, f"{e.noise_system}-noise{r:g}") for r in e.noise if r > 0]
                 if "fig4" in tables and e.noise else [])
    return s


def _preorder_lines(results: dict) -> list[str]:
    """The preorderer's τ / chunk against gold-alignment ranks, beside the identity order's, on every split with
    gold alignments: the dev part of a split gold set (what preorder settings are chosen on) first."""
    pre, split = results["preorder"], results["data"].get("gold_split") or {}
    names = {"dev": f"the gold set's dev part (sentences 1–{split['dev'][1]}, for choices)" if split else "dev set",
             "gold": (f"the reported gold sentences {split['reported'][0]}–{split['reported'][1]}" if split
                      else "the gold set"),
             "extra-all-gold": f"all {split.get('all')} gold sentences (dev part included)"}
    return [f"- preorderer on {label}, against gold-alignment ranks: τ {pre[k + '_btg']['tau']:.4f} "
            f"(identity {pre[k + '_identity']['tau']:.4f}), chunk {pre[k + '_btg']['chunk']:.4f} "
            f"(identity {pre[k + '_identity']['chunk']:.4f})" for k, label in names.items() if f"{k}_btg" in pre]


def render_preorder_report(cfg, results: dict) -> str:
    """``--only preorder``: the preorderer's settings and scores, for choosing them on a dev part."""
    e, pre = cfg.experiment, results["preorder"]
    L = ["# XL PE experiment (Ding, Wang, Tao 2020): the preorder stage only", "",
         f"- preorderer: {pre.get('level', 'word')} level, {e.preorder_iterations} iteration(s), "
         f"attach_null={e.preorder_attach_null}, settings {dict(e.preorder)}"
         + (f", {pre['train_sentences']} training sentences, {pre['seconds_per_iteration']} s per iteration"
            if "train_sentences" in pre else f", loaded from {pre.get('model')}"),
         f"- on the training data (against its oracle orders): τ {pre['train_vs_oracle']['tau']:.4f} "
         f"(identity {pre['train_identity']['tau']:.4f})"] + _preorder_lines(results)
    if not any(k.endswith("_btg") for k in pre):
        L.append("- no split has gold alignments: only the training-oracle τ above can guide a choice")
    return "\n".join(L + closing_lines(e.chosen_on)) + "\n"


def render_report(cfg, results: dict, tables: set[str]) -> str:
    e, s = cfg.experiment, results["summary"]
    systems = s["systems"]
    tests = list(next((v["tests"] for v in systems.values() if v), {}).keys())
    L = _header_lines(cfg, results) + _preorder_lines(results)
    if "table1" in tables:
        L += _table_lines("Table 1: translation quality", [(LABELS[n], n) for n in dict.fromkeys(
            ["baseline"] + e.systems)], "baseline", systems, tests, results, e)
    if "fig3" in tables and s["fig3"]:
        L += ["", "## Figure 3: BLEU vs τ (HeadXL)", "", "| τ | " + " | ".join(tests) + " |",
              "|---|" + "---|" * len(tests)]
        for t, n in s["fig3"]:
            v = systems.get(n)
            if v:
                L.append(f"| {t} | " + " | ".join(fmt(v["tests"][x]["bleu"], v["seeds"]) for x in tests) + " |")
    if "table3" in tables:
        L += _alignment_lines(results, systems, e)
    if "table4" in tables and e.encoder_free:
        L += _table_lines("Table 4: encoder-free model (RPE is not defined without an encoder, SPEC §4.7)",
                          [(f"encoder-free {n}", f"ef-{n}") for n in e.encoder_free], "no PE / APE", systems, tests,
                          results, e)
    if "fig4" in tables and s["fig4"]:
        L += _noise_lines(s, systems, tests, e)
    sig = next((r["tests"][tests[0]]["signature"] for r in results["runs"].values()), None) if tests else None
    L += dev_curve_lines(systems.get("baseline", {}), "the baseline (APE)")
    L += dev_scores_lines(systems, LABELS) + closing_lines(e.chosen_on)
    if sig:
        L.append(f"- BLEU signature: `{sig}`")
    return "\n".join(L) + "\n"


def _header_lines(cfg, results: dict) -> list[str]:
    e = cfg.experiment
    L = [f"# XL PE experiment (Ding, Wang, Tao 2020), {len(e.seeds)} seed(s): {e.seeds}", "",
         f"- data: {'built-in `' + cfg.data.builtin + '` pair' if cfg.data.builtin else cfg.data.train_src}; "
         f"training pairs removed as gold sentences: {results['data'].get('excluded', 0)}",
         f"- budget per run: {', '.join(f'{k}={v}' for k, v in cfg.train.items() if k.startswith('max_'))}; "
         f"model: {cfg.model}",
         f"- XL indices for training: {e.xl_train_source}; at test time: BTG preorderer on the source alone; "
         f"the preorderer works on {results['preorder'].get('level', 'word')}s"
         + (" (its τ values below are over subwords)" if results['preorder'].get('level') == "subword" else ""),
         f"- significance against the baseline (xlpe.evaluate.significance): a seed-aware paired bootstrap "
         f"({e.bootstrap_samples} resamples of the test sentences, every seed's outputs kept together, seed "
         "means compared; one-sided p that the system is not better) and a t-test over the per-seed scores, "
         "paired when both systems ran the same seeds (run i of each trained with seed i), Welch's otherwise; a "
         "difference is called significant only when both are below 0.05, and with one seed no claim about "
         "training variance is made"]
    if not e.chosen_on:
        L += ["- choices: the config records no `experiment.chosen_on`, so this report cannot say which data its "
              "settings were tuned on"]
    return L


def _table_lines(title: str, rows: list, base_label: str, systems: dict, tests: list, results: dict,
                 e) -> list[str]:
    """A BLEU table (Table 1 or 4): each system's BLEU, its seed-aware test against the table's base, chrF and
    its training speed, then the claims and how the speed was measured."""
    L = ["", f"## {title}", "", "| system | params | "
         + " | ".join(f"{TEST_LABELS.get(t, t)} BLEU | p vs {base_label} (bootstrap / seeds)" for t in tests)
         + " | chrF | tok/s vs baseline |", "|---|---|" + "---|---|" * len(tests) + "---|---|"]
    for label, n in rows:
        v = systems.get(n)
        if not v:
            continue
        cells = []
        for t in tests:
            tt = v["tests"][t]
            cells += [fmt(tt["bleu"], v["seeds"]), p_cell(tt.get("compare_bleu"))]
        sp = v.get("speed_vs_baseline")
        speed = "—" if sp is None else f"{sp:.2f}×"
        lo_hi = v.get("speed_vs_baseline_range")
        if lo_hi and n != "baseline":
            speed += f" ({lo_hi[0]:.2f}–{lo_hi[1]:.2f})"
        L.append(f"| {label} | {v['params']:,} | " + " | ".join(cells) +
                 f" | {fmt(v['tests'][tests[0]]['chrf'], v['seeds'])} | {speed} |")
    claims = [line for label, n in rows if (v := systems.get(n)) for t in tests if "verdict_bleu" in v["tests"][t]
              for line in claim_lines(f"{label} vs {base_label}, {t}", v["tests"][t])]
    if claims:
        L += ["", "Claims (bold above = both tests below 0.05):"] + claims
    return L + _speed_lines(results, base_label, e)


def _speed_lines(results: dict, base_label: str, e) -> list[str]:
    c = results.get("cost")
    if c and base_label == "baseline":
        return ["", f"tok/s vs baseline: measured apart, in {c['rounds']} interleaved rounds after a warm-up "
                    f"round; each round trains every system for {c['updates']} updates in turn on this model and "
                    f"data ({c['threads']} thread(s)); the median of the per-round ratios, and in brackets "
                    "their range, which shows how noisy the machine was. Baseline: "
                    f"{c['systems'][c['reference']]['tokens_per_s_median']:,.0f} tok/s."]
    if c:
        return ["", "tok/s vs baseline: not measured for this table."]
    # runs cached before runs recorded their thread count say "unrecorded"
    threads = sorted({str(r.get("threads") or "unrecorded") for r in results["runs"].values()})
    return ["", "tok/s: median of each run's own training log relative to the baseline's"
            + (f"; runs used {' or '.join(threads)} threads" if len(threads) > 1 else "")
            + (f"; {e.jobs} runs shared the machine at a time" if e.jobs > 1 else "")
            + (", so this is a rough figure: set experiment.cost_rounds to measure it" if e.jobs > 1
               or len(threads) > 1 else "") + "."]


def _alignment_lines(results: dict, systems: dict, e) -> list[str]:
    """Table 3: AER / P / R of the alignments read from attention, on the reported gold part and on the whole
    gold set, with the position-only diagonal as a reference row."""
    L: list[str] = []
    split = results["data"].get("gold_split") or {}
    which = (f"gold sentences {split['reported'][0]}–{split['reported'][1]} (1–{split['dev'][1]} are the dev "
             "part that choices were made on)" if split else "gold set")
    for key, dg_key, title in (("alignment", "diagonal_alignment", which),
                               ("alignment_all_gold", "diagonal_alignment_all_gold",
                                f"all {split.get('all')} gold sentences, dev part included — for comparison "
                                "with the papers only")):
        rows = [(n, systems.get(n, {}).get(key)) for n in e.alignment_systems]
        if not any(a for _, a in rows):
            continue
        L += ["", f"## Table 3: alignment from attention (decoder layer {e.attention_layer}, heads averaged, "
                  f"merge `{e.attention_merge}`; {title})", "",
              "| system | AER % | P % | R % |", "|---|---|---|---|"]
        for n, a in rows:
            if a:
                k = systems[n]["seeds"]
                L.append(f"| {n} | {fmt(a['aer'], k, 100)} | {fmt(a['precision'], k, 100)} | "
                         f"{fmt(a['recall'], k, 100)} |")
        dg = results.get(dg_key)
        if dg:
            L.append(f"| reference: diagonal (position only, no model) | {100 * dg['aer']:.2f} | "
                     f"{100 * dg['precision']:.2f} | {100 * dg['recall']:.2f} |")
        claims = [f"- {n} vs baseline: {a['verdict']}" for n, a in rows if a and "verdict" in a]
        if claims:
            L += ["", "AER claims (seed-aware bootstrap over gold sentences; a t-test over seeds, paired when the "
                      "systems ran the same seeds, Welch's otherwise):"] + claims
    return L


def _noise_lines(s: dict, systems: dict, tests: list, e) -> list[str]:
    """Figure 4: BLEU against the noise ratio of the training indices, with what the noise did to the data."""
    L = ["", f"## Figure 4: noise attack on the training indices ({e.noise_system})", "",
         f"Swaps are drawn per training sentence on its order (rule `{e.noise_unit}`, xlpe.reorder.noise); "
         "the last columns say what that does to the training data (with the `indices` rule short sentences "
         "get no swap at a small ratio: read the effective share, not the nominal ratio).", "",
         "| noise ratio | " + " | ".join(tests) + " | swapped pairs / sentence | indices moved % "
         "| sentences touched % |", "|---|" + "---|" * (len(tests) + 3)]
    for r, n in s["fig4"]:
        v = systems.get(n)
        ns = s.get("fig4_noise", {}).get(f"{r:g}")
        extra = (f" {ns['pairs_per_sentence']:.2f} | {100 * ns['indices_moved']:.1f} | "
                 f"{100 * ns['sentences_touched']:.1f} |" if ns else " – | – | – |")
        if v:
            cells = " | ".join(fmt(v["tests"][x]["bleu"], v["seeds"]) for x in tests)
            L.append(f"| {r:g} | {cells} |" + extra)
    return L


def plot_figures(cfg, summary: dict, plots: Path) -> None:
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
