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
    """BLEU mean ± std of every system on each test set, APE's mean as a line."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in systems if summary.get(n)]
    if not names:
        return
    tests = list(summary[names[0]]["tests"])
    fig, axes = plt.subplots(1, len(tests), figsize=(4.5 * len(tests) + 1, 3.6), squeeze=False)
    for ax, test in zip(axes[0], tests):
        have = [n for n in names if test in summary[n]["tests"]]
        ax.bar([LABELS.get(n, n) for n in have], [summary[n]["tests"][test]["bleu"][0] for n in have],
               yerr=[summary[n]["tests"][test]["bleu"][1] for n in have], capsize=3, color="#4878a8")
        if "ape" in have:
            ax.axhline(summary["ape"]["tests"][test]["bleu"][0], color="#c44e52", lw=1, ls="--", label="APE")
            ax.legend(loc="lower right")
        ax.set(ylabel="BLEU (mean ± std over seeds)", title=test)
        ax.tick_params(axis="x", labelrotation=60, labelsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
