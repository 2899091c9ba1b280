"""The report of ``xlpe experiment dpe`` (:mod:`xlpe.experiments.recipes.dpe`): Markdown tables and a plot."""

from __future__ import annotations

import os
from pathlib import Path

from xlpe.experiments.engine.summary import (claim_lines, closing_lines, dev_curve_lines, dev_scores_lines, fmt,
                                      gold_split_lines, mean_std, p_cell)


def lambda_name(cfg, lam: float) -> str:
    """The run name of the λ sweep's run of ``lam`` (``cfg``: a ``DPEConfig``): ``dpe`` itself when it is the dpe
    system's fixed λ."""
    e = cfg.experiment
    return "dpe" if lam == e.dpe_lambda and e.lambda_choice == "fixed" else f"dpe-l{lam:g}"


def _row(s: dict, n: str, label: str, extra: str = "") -> tuple[str, list[str]]:
    v = s.get(n) or {}
    t = v.get("tests", {}).get("test")
    if not t:
        return f"| {label} | (not run) | | | |{extra}", []
    c = t.get("compare_bleu")
    d = "—" if not c else f"{c['delta']:+.2f}"
    return (f"| {label} | {v['params']:,} | {fmt(t['bleu'], v['seeds'])} | {d} | {p_cell(c)} |{extra}",
            claim_lines(f"{label} vs baseline", t) if c else [])


def _probe(v: dict) -> str:
    pr = v.get("probe")
    if not pr:
        return " — | — | — |"
    mse, mse_id, tau, ident = (mean_std([x[k] for x in pr]) for k in ("mse", "mse_identity", "tau", "tau_identity"))
    return f" {mse[0]:.4f} (identity {mse_id[0]:.4f}) | {100 * tau[0]:.1f} | {100 * ident[0]:.1f} |"


def _lambda(cfg, results: dict) -> str:
    e = cfg.experiment
    if "lambda_chosen" not in results:
        return f"λ = {e.dpe_lambda:g} (fixed)"
    dev = ", ".join(f"{float(k):g}: {v:.2f}" for k, v in results["lambda_dev_bleu"].items())
    return (f"λ = {results['lambda_chosen']:g}, chosen on the dev set (mean dev BLEU over seeds "
            f"{e.lambda_seeds or e.seeds}: {dev})")


def render_report(cfg, results: dict, tables: set[str]) -> str:
    e, s = cfg.experiment, results["summary"]
    src = {"gold": "the built-in pair's generator alignments" if cfg.data.builtin else f"`{cfg.data.train_align}`",
           "eflomal": "eflomal + grow-diag-final-and"}[e.targets]
    L = [f"# DPE experiment (Zheng et al.), {len(e.seeds)} seed(s): {e.seeds}", "",
         f"- data: {'built-in `' + cfg.data.builtin + '` pair' if cfg.data.builtin else cfg.data.train_src}; "
         f"DPE targets and 2PT reordering from {src}, at the subword level (SPEC §6.2)",
         f"- budget per run: {', '.join(f'{k}={v}' for k, v in cfg.train.items() if k.startswith('max_'))}; "
         f"model: {cfg.model}; N_dpe = {e.dpe_layers}; {_lambda(cfg, results)} ({e.aux_loss_mode} loss, SPEC §6.3)",
         "- significance (xlpe.evaluate.significance): seed-aware paired bootstrap over test sentences / t-test over "
         "seeds; bold only when both are below 0.05; with one seed no claim about training variance is made"]
    L += gold_split_lines(results["data"])
    claims: list[str] = []

    def table(title: str, rows: list[tuple[str, str]], probe: bool = False) -> None:
        head = "| system | params | test BLEU | Δ vs baseline | p (bootstrap / seeds) |"
        L.extend(["", f"## {title}", "", head + (" MSE | τ % | τ % identity |" if probe else ""),
                  "|---|---|---|---|---|" + ("---|---|---|" if probe else "")])
        for n, label in rows:
            line, claim = _row(s, n, label, _probe(s.get(n, {})) if probe else "")
            L.append(line)
            if claim and claim[0] not in claims:
                claims.extend(claim)

    if "table3" in tables:
        rows = [("baseline", "baseline (APE)"), ("dpe", "+DPE")]
        if "dpe-eflomal" in s:
            rows.append(("dpe-eflomal", "+DPE, eflomal targets"))
        table("Table 3 analogue: baseline vs DPE (MSE and τ: the DPE layers' order on the test set)", rows, True)
    if "table4" in tables:
        table("Table 4 analogue: the weight λ of the reordering loss (λ = 0: DPE layers without supervision)",
              [(lambda_name(cfg, lam), f"λ = {lam:g}") for lam in e.lambdas], True)
    if "table5" in tables:
        table("Table 5 analogue: a parameter-matched control (the baseline with N_dpe more encoder layers)",
              [("baseline", "baseline (APE)"), ("deeper", f"baseline +{e.dpe_layers} encoder layers"),
               ("dpe", "+DPE")])
        c = s.get("dpe", {}).get("vs_deeper", {})
        if c.get("compare_bleu"):
            L += ["", "| +DPE vs the deeper control | Δ BLEU | p (bootstrap / seeds) | verdict |", "|---|---|---|---|",
                  f"| +DPE | {c['compare_bleu']['delta']:+.2f} | {p_cell(c['compare_bleu'])} | {c['verdict_bleu']} |"]
            claims += claim_lines(f"+DPE vs baseline +{e.dpe_layers} encoder layers", c)
        for key, what in (("speed_vs_baseline", "Training speed (tokens/s)"),
                          ("decode_speed_vs_baseline", "Decoding speed (sentences/s, beam search)")):
            sp = [f"{n} {s[n][key]:.2f}×" for n in ("dpe", "deeper") if key in s.get(n, {})]
            if sp:
                L += ["", f"{what} relative to the baseline (cost stage, interleaved rounds): " + ", ".join(sp)]
    if "xl" in tables and e.xl_systems:
        table("DPE against XL PE (same data, seeds and budget)", [("baseline", "baseline (APE)"), ("dpe", "+DPE")]
              + [(n, n) for n in e.xl_systems])
        L += ["", "| XL system vs DPE | Δ BLEU | p (bootstrap / seeds) | verdict |", "|---|---|---|---|"]
        for n in e.xl_systems:
            c = s.get(n, {}).get("vs_dpe", {})
            if c.get("compare_bleu"):
                L.append(f"| {n} | {c['compare_bleu']['delta']:+.2f} | {p_cell(c['compare_bleu'])} "
                         f"| {c['verdict_bleu']} |")
    if "table2" in tables and "2pt" in s:
        L += _twopass_lines(s, e)
        if s["2pt"]["tests"]["test"].get("verdict_bleu"):
            claims += claim_lines("2PT vs baseline", s["2pt"]["tests"]["test"])
    if claims:
        L += ["", "## Claims", ""] + claims
    L += dev_curve_lines(s.get("baseline", {}), "the baseline (APE)")
    labels = {**{lambda_name(cfg, lam): f"λ = {lam:g}" for lam in e.lambdas}, "baseline": "baseline (APE)",
              "dpe": "+DPE", "dpe-eflomal": "+DPE, eflomal targets", "deeper": f"baseline +{e.dpe_layers} encoder "
              "layers", "2pt-reorderer": "2PT reorderer", "2pt": "2PT translator"}
    L += dev_scores_lines(s, labels) + closing_lines(e.chosen_on)
    return "\n".join(L) + "\n"


def _twopass_lines(s: dict, e) -> list[str]:
    """Table 2 analogue: the reorderer, the baseline, 2PT and 2PT with the oracle reordering."""
    r, t = s.get("2pt-reorderer", {}), s["2pt"]
    L = ["", f"## Table 2 analogue: the two-pass pipeline (unaligned words: {e.twopass_unaligned}; reorderer "
             f"{e.reorderer_layers}+{e.reorderer_layers} layers)", "",
         "| what | BLEU | p vs baseline (bootstrap / seeds) |", "|---|---|---|"]
    if r.get("tests"):
        L.append(f"| reorderer vs the oracle reordered test source | {fmt(r['tests']['test']['bleu'], r['seeds'])} "
                 f"| — |")
    b = s.get("baseline", {}).get("tests", {}).get("test")
    if b:
        L.append(f"| baseline (APE) | {fmt(b['bleu'], s['baseline']['seeds'])} | — |")
    tt = t["tests"]["test"]
    L.append(f"| 2PT: source → reorderer → translator | {fmt(tt['bleu'], t['seeds'])} | "
             f"{p_cell(tt.get('compare_bleu'))} |")
    if t.get("oracle"):
        L.append(f"| 2PT with oracle reordering (upper bound: needs the reference) | "
                 f"{fmt(t['oracle']['bleu'], t['seeds'])} | — |")
    return L


def plot(summary: dict, out: Path) -> None:
    """``plots/bleu.png``: test BLEU (mean ± std over seeds) of every system the recipe ran."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n, v in summary.items() if v.get("tests", {}).get("test") and n != "2pt-reorderer"]
    if not names:
        return
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * len(names)), 3.4))
    ax.bar(names, [summary[n]["tests"]["test"]["bleu"][0] for n in names],
           yerr=[summary[n]["tests"]["test"]["bleu"][1] for n in names], capsize=3, color="#4878a8")
    ax.set(ylabel="test BLEU", title="DPE, its controls, XL PE and 2PT")
    ax.tick_params(axis="x", labelrotation=40)
    fig.tight_layout()
    path = out / "bleu.png"
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
