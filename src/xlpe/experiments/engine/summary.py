"""What every recipe reports of its runs: a system's mean ± std over seeds and its comparisons with a baseline
that account for seeds (BLEU and chrF per test set, AER on a gold set; :mod:`xlpe.evaluate.significance`)."""

from __future__ import annotations

import statistics
import sys
from typing import Any

from xlpe.experiments.engine.stages import read_text

#: why the test across seeds pairs two systems' runs that have the same seeds (:func:`system_summary`)
SAME_SEED_RUNS = ("run i of both systems was trained with the same seed, which sets its batch order, initial weights "
                  "and dropout masks")


def mean_std(xs: list[float]) -> tuple[float, float]:
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def system_summary(runs: dict, name: str, base: str | None, refs: dict[str, list[str]], *, seeds: list[int],
                   resamples: int, gold: list | None = None) -> dict:
    """Mean ± std over seeds of one system, and its comparison with ``base`` that accounts for seeds
    (:mod:`xlpe.evaluate.significance`: the seed-aware paired bootstrap and a t-test across seeds, paired when both
    systems ran the same seeds, Welch's otherwise). ``verdict_*`` holds each comparison's claim
    (:meth:`~xlpe.evaluate.significance.Comparison.claim`: the verdict and the tests it rests on)."""
    from xlpe.evaluate.significance import compare_texts

    rs = [runs[f"{name}/seed{s}"] for s in seeds if f"{name}/seed{s}" in runs]
    if not rs:
        return {}
    out: dict[str, Any] = {"seeds": len(rs), "params": rs[0]["params"], "pe": rs[0]["pe"],
                           "tokens_per_s": mean_std([r["tokens_per_s"] for r in rs if r.get("tokens_per_s")])[0],
                           "updates": mean_std([r["updates"] for r in rs])[0], "tests": {}}
    base_rs = [runs[f"{base}/seed{s}"] for s in seeds if f"{base}/seed{s}" in runs] if base and base != name else []
    for test, ref in refs.items():
        bleu = [r["tests"][test]["bleu"] for r in rs]
        chrf = [r["tests"][test]["chrf"] for r in rs]
        t = {"bleu": mean_std(bleu), "chrf": mean_std(chrf), "bleu_per_seed": bleu}
        if base_rs:
            same_seeds = [r["seed"] for r in rs] == [b["seed"] for b in base_rs]
            for metric in ("bleu", "chrf"):
                c = compare_texts(metric, [read_text(b["tests"][test]["hyp"]) for b in base_rs],
                                  [read_text(r["tests"][test]["hyp"]) for r in rs], ref,
                                  resamples=resamples, seed=12345, paired_seeds=same_seeds, pairing=SAME_SEED_RUNS)
                t[f"compare_{metric}"] = c.to_dict()
                t[f"verdict_{metric}"] = c.claim()
        out["tests"][test] = t
    al = [r["attention_alignment"] for r in rs if "attention_alignment" in r]
    if al:
        out["alignment"] = {k: mean_std([a[k] for a in al]) for k in ("aer", "precision", "recall")}
        base_al = [b["attention_alignment"] for b in base_rs if "attention_alignment" in b]
        if gold is not None and base_al and all("file" in a for a in al + base_al):
            from xlpe.evaluate.significance import aer_score, aer_stats, compare
            from xlpe.io.alignments import read_alignments
            stats = [[aer_stats(list(read_alignments(a["file"], 0, check_base=False)), gold) for a in group]
                     for group in (base_al, al)]
            c = compare("AER", stats[0], stats[1], aer_score, higher_is_better=False,
                        resamples=resamples, seed=12345,
                        paired_seeds=[r["seed"] for r in rs] == [b["seed"] for b in base_rs],
                        pairing=SAME_SEED_RUNS)
            out["alignment"]["compare"] = c.to_dict()
            out["alignment"]["verdict"] = c.claim()
    curves = [r["dev_curve"] for r in rs if r.get("dev_curve")]
    if curves:                  # mean over the seeds that validated at each step
        out["dev_curve"] = []
        for st in sorted({p["step"] for c in curves for p in c}):
            at = [p for c in curves for p in c if p["step"] == st]
            means = {k: mean_std([p[k] for p in at]) for k in at[0] if k != "step" and all(k in p for p in at)}
            out["dev_curve"].append({"step": st, "seeds": len(at), **means})
    more = [r["attention_alignment_more"]["all-gold"] for r in rs
            if "all-gold" in r.get("attention_alignment_more", {})]
    if more:
        out["alignment_all_gold"] = {k: mean_std([a[k] for a in more]) for k in ("aer", "precision", "recall")}
    return out


def fmt(ms: tuple[float, float], seeds: int, scale: float = 1.0, digits: int = 2) -> str:
    """``mean ± std``; the value alone for one seed (a std of one run is no spread)."""
    m, sd = ms
    return f"{scale * m:.{digits}f}" + (f" ± {scale * sd:.{digits}f}" if seeds > 1 else "")


def p_cell(c: dict | None) -> str:
    """A comparison's ``bootstrap / seeds`` p-values for a table cell, bold when both are below 0.05 (the reports'
    rule for a claim); without a test across seeds, why (one seed, or runs that do not vary); "—" without a
    comparison."""
    if not c:
        return "—"
    none = "n/a (1 seed)" if min(c.get("base_seeds", 1), c.get("sys_seeds", 1)) < 2 else "n/a (no seed variance)"
    p = f"{c['p_bootstrap']:.3f} / " + (none if c["p_seeds"] is None else f"{c['p_seeds']:.3f}")
    return f"**{p}**" if c["p_bootstrap"] < 0.05 and c["p_seeds"] is not None and c["p_seeds"] < 0.05 else p


def claim_lines(head: str, t: dict) -> list[str]:
    """A report's claim of one comparison on one test set (``t``: a test of :func:`system_summary`): the BLEU
    verdict, then the chrF verdict beneath it, so that a reader sees whether the second metric agrees."""
    lines = [f"- {head}: {t['verdict_bleu']}"]
    if t.get("verdict_chrf"):
        lines.append(f"  - chrF: {t['verdict_chrf']}")
    return lines


def dev_curve_lines(summary: dict, label: str) -> list[str]:
    """A report section: ``label``'s dev loss (and greedy dev BLEU, when logged) at every validation, mean ± std
    over seeds; what a budget is chosen on (``train.validate_every``, ``train.dev_bleu``). [] without one."""
    curve = summary.get("dev_curve") or []
    if len(curve) < 2:
        return []
    bleu = all("valid_bleu" in p for p in curve)
    lines = ["", f"## Dev learning curve of {label}", "",
             "| updates | seeds | dev loss | dev NLL |" + (" dev BLEU (greedy) |" if bleu else ""),
             "|---|---|---|---|" + ("---|" if bleu else "")]
    return lines + [f"| {p['step']} | {_dev_cells(p, bleu)}" for p in curve]


def _dev_cells(p: dict, bleu: bool) -> str:
    """One validation's ``seeds | dev loss | dev NLL | (dev BLEU |)`` cells, mean ± std over seeds."""
    k = p["seeds"]
    return (f"{k} | {fmt(p['valid_loss'], k, digits=3)} | {fmt(p['valid_nll'], k, digits=3)} |"
            + (f" {fmt(p['valid_bleu'], k)} |" if bleu else ""))


def gold_split_lines(data: dict) -> list[str]:
    """A report line naming the parts of a split gold set (``[data] gold_dev_lines``) when the test set is the
    gold set: BLEU is on the reported part, the dev part is where choices are made. [] without a split."""
    split = data.get("gold_split") or {}
    if not split:
        return []
    (r0, r1), k = split["reported"], split["dev"][1]
    return [f"- test set: gold sentences {r0}–{r1} (the reported part of all {split['all']}); dev set: gold "
            f"sentences 1–{k} (validation and every choice; never reported as a result)"]


def dev_scores_lines(summaries: dict[str, dict], labels: dict[str, str]) -> list[str]:
    """A report section: every system's dev loss, dev NLL (and greedy dev BLEU, when logged) at its last
    validation, mean ± std over seeds: what a choice between systems is made on (e.g. the XL variant composed
    with another encoding), where the test columns are not. [] when no system validated."""
    rows = []
    for name, v in summaries.items():
        curve = (v or {}).get("dev_curve") or []
        if curve:
            rows.append((labels.get(name, name), curve[-1]))
    if not rows:
        return []
    bleu = all("valid_bleu" in p for _, p in rows)
    lines = ["", "## Dev scores of every system (last validation)", "",
             "| system | updates | seeds | dev loss | dev NLL |" + (" dev BLEU (greedy) |" if bleu else ""),
             "|---|---|---|---|---|" + ("---|" if bleu else "")]
    return lines + [f"| {label} | {p['step']} | {_dev_cells(p, bleu)}" for label, p in rows]


def closing_lines(chosen_on: dict[str, str]) -> list[str]:
    """The end of every recipe's report: where each setting was chosen (``experiment.chosen_on``), the command
    and the versions."""
    from xlpe.runtime import versions
    lines = []
    if chosen_on:
        lines += ["", "## Choices and the data they were made on", ""] + [f"- `{k}`: {v}" for k, v in chosen_on.items()]
    return lines + ["", "## Run", "", f"- command: `{' '.join(['xlpe'] + sys.argv[1:])}`",
                    "- versions: " + ", ".join(f"{k} {v}" for k, v in versions().items())]
