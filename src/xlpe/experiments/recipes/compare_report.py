"""The report of ``xlpe experiment compare``: one table per test set and one plot (:mod:`.compare`)."""

from __future__ import annotations

import os
from pathlib import Path

from xlpe.experiments.engine.summary import claim_lines, closing_lines, fmt, p_cell
from xlpe.experiments.recipes.systems import LABELS, SYSTEMS


def render_report(cfg, results: dict) -> str:
    """Markdown: the set-up, a table per test set, the claims (each naming its tests), the choices, the run."""
    e, s = cfg.experiment, results["summary"]
    data = f"built-in `{cfg.data.builtin}` pair" if cfg.data.builtin else cfg.data.train_src
    budget = ", ".join(f"{k}={v}" for k, v in cfg.train.items() if k.startswith("max_"))
    L = [f"# Which source position encoding? {len(e.systems)} systems, {len(e.seeds)} seed(s): {e.seeds}", "",
         f"- data: {data}; budget per run: {budget} (the same for every system); model: {cfg.model}",
         f"- encodings' options: {e.pe_options or 'defaults'}",
         "- every system against APE and against +RPE: Δ is the difference of the means over seeds; p is the "
         "seed-aware paired bootstrap over test sentences / the t-test across seeds (paired: run i of both systems "
         "has seed i); bold only when both are below 0.05; with one seed no claim about training variance is made",
         "- speeds relative to APE: training target tokens/s and beam decoding sentences/s, interleaved rounds in "
         "one process on the same machine load (—: not measured)"]
    timed = results.get("decode_cost", {}).get("seeds")
    if timed:
        label = {k: f"seed {k}" if isinstance(k, int) else k for k in timed.values()}
        L.append("- decoding speeds timed each system's model of " + ", ".join(
            f"{label[k]} ({', '.join(sorted(n for n, v in timed.items() if v == k))})"
            for k in sorted(label, key=lambda k: (isinstance(k, str), str(k))))
            + ("; a copy is that run trained again on the machine that timed it (the runs' own models were on "
               "other machines)" if any(isinstance(v, str) for v in timed.values()) else ""))
    claims: list[str] = []
    tests = next((list(v["tests"]) for v in s.values() if v), [])
    for test in tests:
        L += ["", f"## Test set `{test}`", "",
              "| system | encodings | params | BLEU | chrF | Δ BLEU vs APE (p) | Δ BLEU vs +RPE (p) | "
              "Δ chrF vs APE (p) | training vs APE | decoding vs APE |",
              "|---|---|---|---|---|---|---|---|---|---|"]
        for n in e.systems:
            v = s.get(n)
            if v and test in v["tests"]:
                L.append(_row(n, v, test, claims))
    if claims:
        L += ["", "## Claims (each names the tests it rests on)", ""] + claims
    return "\n".join(L + closing_lines(e.chosen_on)) + "\n"


def _row(n: str, v: dict, test: str, claims: list[str]) -> str:
    t, k = v["tests"][test], v["seeds"]
    cells = []
    for base, metric in (("ape", "bleu"), ("rpe", "bleu"), ("ape", "chrf")):
        c = t["vs"].get(base, {})
        comp = c.get(f"compare_{metric}")
        cells.append("—" if not comp else f"{comp['delta']:+.2f} ({p_cell(comp)})")
        if comp and metric == "bleu":
            claims += claim_lines(f"{LABELS.get(n, n)} vs {LABELS[base]} on `{test}`",
                                  {"verdict_bleu": c["verdict_bleu"], "verdict_chrf": c.get("verdict_chrf")})
    sp, dsp = v.get("speed_vs_ape"), v.get("decode_speed_vs_ape")
    return (f"| {LABELS.get(n, n)} | {'+'.join(SYSTEMS[n])} | {v['params']:,} | {fmt(t['bleu'], k)} | "
            f"{fmt(t['chrf'], k)} | {' | '.join(cells)} | {'—' if sp is None else f'{sp:.2f}×'} | "
            f"{'—' if dsp is None else f'{dsp:.2f}×'} |")


def plot(summary: dict, systems: list[str], path: Path) -> None:
    """Per test set, each system's BLEU difference from APE: the mean with the seed-aware bootstrap's 95% interval,
    one dot per seed (run i minus APE's run i, when both ran the same seeds), green where the report claims better,
    red where worse."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in systems if summary.get(n) and n != "ape"]
    if not names or not summary.get("ape"):
        return
    tests = list(summary["ape"]["tests"])
    fig, axes = plt.subplots(1, len(tests), figsize=(4.2 * len(tests) + 1.4, 0.32 * len(names) + 1.3),
                             squeeze=False, sharey=True)
    for ax, test in zip(axes[0], tests):
        ape = summary["ape"]["tests"][test]["bleu_per_seed"]
        for y, n in enumerate(names):
            t = summary[n]["tests"].get(test)
            c = (t or {}).get("vs", {}).get("ape", {})
            if not c.get("compare_bleu"):
                continue
            verdict = c.get("verdict_bleu", "")
            colour = ("#2e7d32" if verdict.startswith("significant at") else
                      "#c62828" if verdict.startswith("significantly worse") else "#607d8b")
            lo, hi = c["compare_bleu"]["ci95"]
            d = c["compare_bleu"]["delta"]
            ax.errorbar(d, y, xerr=[[d - lo], [hi - d]], fmt="o", color=colour, capsize=3)
            if c["compare_bleu"].get("seed_test") == "paired-t":       # the same seeds: run i against run i
                seeds = [a - b for a, b in zip(t["bleu_per_seed"], ape)]
                ax.scatter(seeds, [y + 0.22] * len(seeds), s=9, color=colour, alpha=0.6)
        ax.axvline(0, color="black", lw=0.8)
        ax.set(title=f"{test}: APE {summary['ape']['tests'][test]['bleu'][0]:.2f} BLEU", xlabel="Δ BLEU vs APE")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(range(len(names)), [LABELS.get(n, n) for n in names])
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
