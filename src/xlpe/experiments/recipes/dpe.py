"""``xlpe experiment dpe``: dynamic position encoding and 2PT (Zheng et al.) at small scale, cached and resumable.

1. ``data``, ``subword``; ``align`` (eflomal + grow-diag-final-and over the training pairs) where the recipe
   trains on alignments the data does not give, and ``align-test`` (train + test pairs, for the test links of
   the probe and 2PT's oracle); ``dpe-*``: DPE targets at the subword level from word alignments (SPEC §6.2,
   §8.3) — the built-in pair's generator alignments (``targets = "gold"``) or eflomal's (``"eflomal"``);
   ``preorder`` for the XL PE systems of the comparison.
2. ``runs``: one model per (system, seed) with the same data, budget and seeds
   (:func:`xlpe.experiments.engine.runs.run_grid`):

   * Table 3 analogue: ``baseline`` (APE) vs ``dpe`` (λ = ``dpe_lambda``), with parameter counts; on the
     built-in pair also ``dpe-eflomal``, DPE trained on eflomal targets instead of the generator's;
   * Table 4 analogue: ``dpe-l<λ>`` for every λ of ``lambdas`` (λ = 0: the DPE layers without supervision);
   * Table 5 analogue: ``deeper``, the baseline with ``dpe_layers`` more encoder layers (the paper's 8E / 10E
     rows), so that a DPE gain is not just depth;
   * ``xl``: DPE against XL PE (InXL, HeadXL, Combination) on the same data, seeds and budget (in none of the
     papers);
   * Table 2 analogue (2PT, :mod:`xlpe.experiments.recipes.twopass`): the reorderer's BLEU against the oracle reordered
     test source, the pipeline from the source alone, and the oracle reordering (an upper bound that needs the
     reference).
3. ``probe``: how well each DPE model's layers learned the order on the test set (MSE, and Kendall τ of the
   decoded positions against the oracle order and of the identity order; :mod:`xlpe.infer.dpe_probe`).
4. ``cost``: training (tokens/s) and decoding (sentences/s) speed of ``dpe`` and ``deeper`` relative to the
   baseline, each in interleaved rounds.
5. ``report``: Markdown, PNG, JSON; every comparison with the seed-aware tests of every recipe.

    xlpe experiment dpe --config examples/dpe-builtin.toml --out runs/dpe-builtin
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.evaluate.bleu import tokenized_by_design
from xlpe.experiments.engine.archive import checkpoint_signature
from xlpe.experiments.engine.cache import cached_result, file_sig, run_stage
from xlpe.experiments.recipes.dpe_report import lambda_name, plot, render_report
from xlpe.keys import Inputs, keyed
from xlpe.experiments.engine.cost import CostInputs, cost_systems, decode_cost_stage, measure_cost
from xlpe.experiments.engine.runs import STOPS, Corpus, Evaluation, RunKey, Shared, System, run_grid
from xlpe.experiments.engine.recipe import PreorderSettings, RecipeConfig, RecipeExperiment
from xlpe.experiments.engine.stages import align_stage, dpe_stage, preorder_stage, read_text
from xlpe.experiments.engine.summary import system_summary
from xlpe.experiments.recipes.systems import pe_list
from xlpe.experiments.recipes.twopass import UNALIGNED, reordered_stage, twopass_runs

log = logging.getLogger("xlpe.experiments.recipes.dpe")

TABLES = ("table2", "table3", "table4", "table5", "xl")
TARGETS = ("gold", "eflomal")


@dataclass
class DPEExperiment(PreorderSettings, RecipeExperiment):
    """``[experiment]``: what to run (the settings every recipe shares are in ``RecipeExperiment``, the
    preorderer's in ``PreorderSettings``)."""

    dpe_layers: int = 2                      # N_dpe (SPEC §6.1)
    dpe_lambda: float = 0.5                  # λ of the dpe system (SPEC §6.3 default; choose it on dev data)
    aux_loss_mode: str = "paper"             # SPEC §6.3: paper | fairseq
    # the alignments DPE and 2PT learn from: gold = the built-in pair's generator alignments or [data]
    # train_align; eflomal = eflomal + grow-diag-final-and on the training pairs
    targets: str = "gold"
    eflomal_targets_too: bool = True         # with targets = gold: also a DPE system on eflomal targets
    lambdas: list[float] = field(default_factory=lambda: [0.0, 0.1, 0.3, 0.5, 1.0])     # Table 4
    lambda_seeds: list[int] = field(default_factory=list)   # seeds of the λ sweep ([] = seeds)
    # fixed: the dpe system uses dpe_lambda; dev: the λ of the sweep with the best mean dev BLEU over
    # lambda_seeds (the sweep then also translates the dev set), the choice printed in the report
    lambda_choice: str = "fixed"
    xl_systems: list[str] = field(default_factory=lambda: ["inxl", "headxl", "combination"])
    twopass_unaligned: str = "drop"          # SPEC §6.5: drop (the paper's example) | keep
    reorderer_layers: int = 2                # 2PT reorderer: encoder and decoder layers


@dataclass
class DPEConfig(RecipeConfig):
    EXPERIMENT = DPEExperiment
    EXTRA_TEST_PARTS = ()           # the tables report one test set (and the DPE probe reads it)
    experiment: DPEExperiment = field(default_factory=DPEExperiment)

    def validate(self) -> "DPEConfig":
        super().validate()
        e = self.experiment
        e.check_preorder()
        if e.lambda_choice not in ("fixed", "dev"):
            raise ConfigError(f"experiment.lambda_choice must be 'fixed' or 'dev', not {e.lambda_choice!r}")
        if e.lambda_choice == "dev" and (not e.lambdas or not (self.data.builtin or self.data.dev_src
                                                                 or self.data.gold_dev_lines)):
            raise ConfigError("experiment.lambda_choice = 'dev' needs experiment.lambdas and a dev set")
        if e.targets not in TARGETS:
            raise ConfigError(f"experiment.targets must be one of {', '.join(TARGETS)}, not {e.targets!r}")
        if e.targets == "gold" and not (self.data.builtin or self.data.train_align):
            raise ConfigError("experiment.targets = 'gold' needs the built-in pair or [data] train_align; "
                              "use targets = 'eflomal' for other data")
        if e.twopass_unaligned not in UNALIGNED:
            raise ConfigError(f"experiment.twopass_unaligned must be one of {', '.join(UNALIGNED)}")
        if e.dpe_layers < 1 or e.reorderer_layers < 1:
            raise ConfigError("experiment.dpe_layers and experiment.reorderer_layers must be >= 1")
        if any(not lam >= 0 for lam in e.lambdas + [e.dpe_lambda]):
            raise ConfigError(f"λ must be >= 0: dpe_lambda={e.dpe_lambda}, lambdas={e.lambdas}")
        if e.aux_loss_mode == "fairseq" and max(e.lambdas + [e.dpe_lambda]) > 1:
            raise ConfigError("aux_loss_mode = 'fairseq' weighs the translation loss by 1 - λ: λ must be <= 1")
        for s in e.xl_systems:
            if not {"xl", "inxl", "headxl", "combination"} & set(pe_list(s)):
                raise ConfigError(f"experiment.xl_systems: {s!r} has no XL position encoding")
        return self


def load_config(path: str | None, sets: list[str]) -> DPEConfig:
    """``--config`` TOML, then ``--set section.key=value`` overrides."""
    return DPEConfig.load(path, sets)


def _dpe_run(cfg: DPEConfig, lam: float) -> System:
    e = cfg.experiment
    return System(pe=["dpe"], pe_options={"dpe_layers": e.dpe_layers},
                  train={"aux_weights": {"loss_dpe": lam}, "aux_loss_mode": e.aux_loss_mode})


def _systems(cfg: DPEConfig, tables: set[str], enc_layers: int, builtin_gold: bool) -> dict[str, System]:
    """Every system the selected tables need."""
    e = cfg.experiment
    sys_: dict[str, System] = {"baseline": System(pe=["ape"]), "dpe": _dpe_run(cfg, e.dpe_lambda)}
    if "table3" in tables and builtin_gold and e.eflomal_targets_too:
        sys_["dpe-eflomal"] = _dpe_run(cfg, e.dpe_lambda)      # its eflomal targets are added by run_experiment
    if "table5" in tables:
        sys_["deeper"] = System(pe=["ape"], model={"enc_layers": enc_layers + e.dpe_layers})
    if "xl" in tables:
        sys_.update({s: System(pe=pe_list(s)) for s in e.xl_systems})
    return sys_


def run_experiment(cfg: DPEConfig, out: str | os.PathLike, only: list[str] | None = None) -> dict:
    """Run (or resume) the recipe; returns every number (also in ``results.json``) and the report text."""
    from xlpe.nn.config import TransformerConfig

    out, tables, data, spm = cfg.begin(out, only, TABLES)
    e, p = cfg.experiment, data["paths"]
    m = dict(cfg.model)
    enc_layers = TransformerConfig.from_preset(m.pop("preset", "small"), **m).enc_layers
    gold_al = data.get("builtin_align") or ({"train": cfg.data.train_align} if cfg.data.train_align else {})
    aligns, eflomal = _alignments(cfg, out, tables, p, gold_al)
    results: dict[str, Any] = {"data": data, "alignments": aligns, "targets": e.targets}
    targets = {s: dpe_stage(out, src=p[f"{s}_src"], align=aligns[s], spm=spm, name=s) for s in ("train", "test")}
    channels: dict[str, dict[str, str]] = {"train": {"dpe_target": "dpe:" + targets["train"]}, "dev": {},
                                           "test": {}}
    systems = _systems(cfg, tables, enc_layers, bool(gold_al) and e.targets == "gold")
    if "dpe-eflomal" in systems:
        eff = dpe_stage(out, src=p["train_src"], align=eflomal["train"], spm=spm, name="train-eflomal")
        systems["dpe-eflomal"] = dataclasses.replace(systems["dpe-eflomal"], targets=file_sig(eff),
                                                     train_channels={"dpe_target": "dpe:" + eff})
    if "xl" in tables and e.xl_systems:
        results["preorder"] = _xl_orders(cfg, out, p, spm, eflomal["train"], channels, systems)
    # what every run's result depends on; the XL orders enter only the XL systems' keys (above), so running a
    # subset of the tables (--only) reuses the other systems' runs
    key = RunKey(model=cfg.model, train=cfg.train, beam=e.beam, lenpen=e.lenpen, spm=file_sig(spm),
                 channels={"train": {"dpe_target": file_sig(targets["train"])}},
                 tests=file_sig(p["test_src"], p["test_tgt"]))
    shared = Shared(model=cfg.model, train=cfg.train, threads=e.threads, reuse_runs=tuple(e.reuse_runs),
                    corpus=Corpus.of(spm, p, {"test": (p["test_src"], p["test_tgt"], channels["test"])},
                                     train_channels=channels["train"], dev_channels=channels["dev"],
                                     builtin=bool(cfg.data.builtin)),
                    evaluation=Evaluation(beam=e.beam, lenpen=e.lenpen,
                                          probe=DPEProbe(p["test_src"], targets["test"], spm)))
    runs = _lambda_sweep(cfg, out, tables, p, shared, key, systems, results)
    # the first seed's runs, the decoding cost of their models, then the other seeds: a table filled on several
    # machines (xlpe experiment archive) measures the decoding cost while the first seed's checkpoints are there
    runs.update(run_grid(out / "runs", systems, e.seeds[:1], shared, key, jobs=e.jobs))
    costed = [n for n in ("baseline", "dpe", "deeper") if n in systems]
    if e.cost_rounds:
        results["decode_cost"] = decode_cost_stage(out, costed, e.seeds[0], src=p["test_src"], channels={},
                                                   beam=e.beam, lenpen=e.lenpen, threads=e.threads,
                                                   rounds=e.cost_rounds)
    if e.seeds[1:]:
        runs.update(run_grid(out / "runs", systems, e.seeds[1:], shared, key, jobs=e.jobs))
    if "table2" in tables:
        results["reordered"] = reordered = reordered_stage(
            out, {s: (p[f"{s}_src"], aligns[s]) for s in ("train", "test")}, unaligned=e.twopass_unaligned)
        runs.update(twopass_runs(out / "runs", e.seeds, shared, dataclasses.replace(key, channels=None),
                                 reordered=reordered, test_src=p["test_src"], test_tgt=p["test_tgt"],
                                 reorderer_layers=e.reorderer_layers, jobs=e.jobs))
    results["runs"] = runs
    results["probe"] = _probe(out, runs, spm, p["test_src"], targets["test"])
    if e.cost_rounds:
        results["cost"] = _training_cost(cfg, out, {n: systems[n] for n in costed}, shared, key)
    with tokenized_by_design() if cfg.data.builtin else contextlib.nullcontext():
        results["summary"] = summarise(cfg, results, p)
    plot(results["summary"], out / "plots")
    return cfg.finish(out, render_report(cfg, results, tables), results)


def _alignments(cfg: DPEConfig, out: Path, tables: set[str], p: dict, gold_al: dict) -> tuple[dict, dict]:
    """The word links of the training and test pairs that the targets come from (gold or eflomal), and the eflomal
    links the recipe needs: ``(aligns, eflomal)``.

    eflomal links that train something (DPE targets, the XL systems' BTG labels, 2PT's reordered training source)
    come from the training pairs alone, as in xl-pe; the test links (the probe's targets and 2PT's oracle test
    reordering, analyses that read the reference anyway) from a run over train + test, as the AER protocol aligns
    them. One joint run would make the training links a function of the test references."""
    e = cfg.experiment
    pairs = {s: (p[f"{s}_src"], p[f"{s}_tgt"]) for s in ("train", "test")}
    eflomal: dict[str, str] = {}
    if e.targets == "eflomal" or ("xl" in tables and e.xl_systems) or (
            "table3" in tables and e.eflomal_targets_too and e.targets == "gold"):
        eflomal["train"] = align_stage(out, {"train": pairs["train"]},
                                       lowercase=cfg.data.align_lowercase)["paths"]["train"]
    if e.targets == "eflomal" or "test" not in gold_al:
        eflomal["test"] = align_stage(out, pairs, lowercase=cfg.data.align_lowercase,
                                      name="align-test")["paths"]["test"]
    aligns = {s: (gold_al.get(s) if e.targets == "gold" else None) or eflomal[s] for s in ("train", "test")}
    return aligns, eflomal


def _xl_orders(cfg: DPEConfig, out: Path, p: dict, spm: str, train_align: str, channels: dict,
               systems: dict[str, System]) -> dict:
    """The BTG preorderer's orders of every split as the ``xl`` channel (in ``channels``) and in the XL systems'
    keys (only the systems that read them); returns the preorder stage's result without the orders."""
    e = cfg.experiment
    splits = {s: p[f"{s}_src"] for s in ("train", "dev", "test") if p.get(f"{s}_src")}
    pre = preorder_stage(out, train_src=p["train_src"], train_align=train_align, splits=splits, seed=e.base_seed,
                         spm=spm, processes=e.threads, **e.preorder_options())
    kind = "orders:" if pre["level"] == "word" else "subword-orders:"
    for s in splits:
        channels[s]["xl"] = kind + pre["orders"][s]
    for n in e.xl_systems:
        systems[n] = dataclasses.replace(systems[n], orders={s: file_sig(pre["orders"][s]) for s in splits})
    return {k: v for k, v in pre.items() if k != "orders"}


def _lambda_sweep(cfg: DPEConfig, out: Path, tables: set[str], p: dict, shared: Shared, key: RunKey,
                  systems: dict[str, System], results: dict) -> dict[str, dict]:
    """The λ sweep (Table 4), and with ``lambda_choice = "dev"`` the λ chosen on the dev set, which the DPE systems
    (in ``systems``) then take; returns the sweep's runs."""
    e = cfg.experiment
    if not ("table4" in tables or e.lambda_choice == "dev"):
        return {}
    sweep = {lambda_name(cfg, lam): _dpe_run(cfg, lam) for lam in e.lambdas if lambda_name(cfg, lam) != "dpe"}
    swept = shared
    if e.lambda_choice == "dev":            # the sweep also translates the dev set, on which λ is chosen
        swept = dataclasses.replace(shared, corpus=dataclasses.replace(shared.corpus, tests={
            **shared.corpus.tests, "dev": (p["dev_src"], p["dev_tgt"], shared.corpus.dev_channels)}))
    runs = run_grid(out / "runs", sweep, e.lambda_seeds or e.seeds, swept, key, jobs=e.jobs)
    if e.lambda_choice == "dev":
        results["lambda_dev_bleu"] = {lam: _mean_bleu(runs, lambda_name(cfg, lam), "dev") for lam in e.lambdas}
        best = max(e.lambdas, key=lambda lam: results["lambda_dev_bleu"][lam])
        results["lambda_chosen"] = best
        log.info("λ chosen on the dev set: %g (mean dev BLEU %s)", best, results["lambda_dev_bleu"])
        chosen = _dpe_run(cfg, best)
        for n in ("dpe", "dpe-eflomal"):
            if n in systems:
                systems[n] = dataclasses.replace(systems[n], pe=chosen.pe, pe_options=chosen.pe_options,
                                                 train=chosen.train)
        if "dpe" in systems:
            _share_sweep_runs(out / "runs", lambda_name(cfg, best), e.lambda_seeds or e.seeds)
    return runs


def _training_cost(cfg: DPEConfig, out: Path, systems: dict[str, System], shared: Shared, key: RunKey) -> dict:
    """The cost stage: the systems' training speed on the shared channels (a system's own are not measured)."""
    e = cfg.experiment
    costed = {n: dataclasses.replace(s, train_channels={}) for n, s in systems.items()}
    params = CostInputs(systems=cost_systems(costed, overrides=True), model=cfg.model, rounds=e.cost_rounds,
                        updates=e.cost_updates, train={k: v for k, v in cfg.train.items() if k not in STOPS},
                        threads=e.threads, files=key.channels["train"])
    return run_stage(out, "cost", params, lambda d: measure_cost(
        d, costed, shared, rounds=e.cost_rounds, updates=e.cost_updates, seed=e.base_seed))


def _share_sweep_runs(runs_dir: Path, chosen: str, seeds: list[int]) -> None:
    """The dpe system at the λ chosen on dev is, for the sweep's seeds, the sweep's run of that λ (same options,
    seed and cache key): link ``dpe/seed<k>`` to it (relative symlink) instead of training it again. A link to
    another λ (an earlier choice) is replaced; a real ``dpe/seed<k>`` directory is left alone."""
    for seed in seeds:
        link, target = runs_dir / "dpe" / f"seed{seed}", runs_dir / chosen / f"seed{seed}"
        if link.is_symlink():
            if link.resolve() == target.resolve():
                continue
            link.unlink()
        if link.exists() or not (target / "done.json").exists():
            continue
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path("..") / chosen / f"seed{seed}", target_is_directory=True)
        log.info("dpe/seed%d is the λ sweep's run %s/seed%d (linked, not trained again)", seed, chosen, seed)


def _mean_bleu(runs: dict, name: str, test: str) -> float:
    xs = [r["tests"][test]["bleu"] for k, r in runs.items() if k.rsplit("/", 1)[0] == name]
    return sum(xs) / len(xs)


@dataclass(frozen=True)
class DPEProbe:
    """:func:`xlpe.infer.dpe_probe.dpe_order_quality` of a DPE model just trained (``run_system``'s ``probe``), with
    the signature of the test files it read; it applies to models with DPE layers only."""
    test_src: str
    test_targets: str
    spm: str

    def applies(self, model_config) -> bool:
        return "dpe" in model_config.pe

    def signature(self) -> list:
        return ["dpe-probe", file_sig(self.test_src, self.test_targets, self.spm)]

    def __call__(self, model, subword) -> dict:
        from xlpe.infer.dpe_probe import dpe_order_quality
        return {**dpe_order_quality(model, subword, read_text(self.test_src), self.test_targets),
                "test": file_sig(self.test_src, self.test_targets, self.spm)}


def _probe(out: Path, runs: dict, spm: str, test_src: str, test_targets: str) -> dict:
    """:func:`xlpe.infer.dpe_probe.dpe_order_quality` of every DPE run's final model: the probe the run made when it
    was trained (:class:`DPEProbe`), or else one of its checkpoint, cached per run."""
    res = {}
    for name, r in runs.items():
        if "dpe" not in r["pe"]:
            continue
        own = r.get("probe")
        if own and own.get("test") == file_sig(test_src, test_targets, spm):
            res[name] = {k: v for k, v in own.items() if k != "test"}
            continue
        from xlpe.nn.checkpoint import latest_checkpoint
        train_dir = out / "runs" / name / "train"
        sig = checkpoint_signature(train_dir)
        if sig is None:
            log.warning("no checkpoint in %s: not probed", train_dir)
            continue
        ck = latest_checkpoint(train_dir) if train_dir.is_dir() else None

        def fn(d: Path, ck=ck) -> dict:
            from xlpe.infer.dpe_probe import dpe_order_quality
            from xlpe.nn.checkpoint import load_model
            model, _, (sw, _) = load_model(ck)
            return dpe_order_quality(model, sw, read_text(test_src), test_targets)
        params = ProbeInputs(layout=2, checkpoint=sig, test=file_sig(test_src, test_targets, spm))
        if ck is None:                  # restored from an archive without checkpoints: the recorded probe or none
            cached = cached_result(out / "probe", name.replace("/", "-"), params)
            if cached is None:
                log.warning("%s: checkpoint archived away and no probe of it recorded: not probed", train_dir)
            else:
                res[name] = cached
            continue
        res[name] = run_stage(out / "probe", name.replace("/", "-"), params, fn)
    return res


@dataclass(frozen=True)
class ProbeInputs(Inputs):
    layout: int = keyed("probe")                   # the layout of the probe's result
    checkpoint: Any = keyed("checkpoint")          # the model, by content (its checkpoint's signature)
    test: list = keyed("test")                     # the test source, its DPE targets and the subword model


def summarise(cfg: DPEConfig, results: dict, p: dict) -> dict:
    """Every system's mean ± std over its seeds and its seed-aware comparisons: DPE, the deeper control and the
    XL systems against the baseline (and the XL systems against DPE, DPE against the deeper control), λ = 0
    against the baseline, 2PT against the baseline; the reorderer against the oracle reordered source."""
    e, runs = cfg.experiment, results["runs"]
    refs = {"test": read_text(p["test_tgt"])}
    names = sorted({k.rsplit("/", 1)[0] for k in runs})
    s: dict[str, Any] = {}
    for n in names:
        seeds = e.lambda_seeds if n.startswith("dpe-l") and e.lambda_seeds else e.seeds
        if n == "2pt-reorderer":
            s[n] = system_summary(runs, n, None, {"test": read_text(results["reordered"]["test"])}, seeds=seeds,
                                  resamples=e.bootstrap_samples)
            continue
        s[n] = system_summary(runs, n, "baseline" if n != "baseline" else None, refs, seeds=seeds,
                              resamples=e.bootstrap_samples)
        if n == "2pt":
            s[n]["oracle"] = system_summary(runs, n, None, {"oracle": refs["test"]}, seeds=seeds,
                                            resamples=e.bootstrap_samples)["tests"]["oracle"]
        if n in e.xl_systems and "dpe" in names:
            s[n]["vs_dpe"] = system_summary(runs, n, "dpe", refs, seeds=seeds,
                                            resamples=e.bootstrap_samples)["tests"]["test"]
        if n == "dpe" and "deeper" in names:        # Table 5's question: is DPE's effect more than its depth?
            s[n]["vs_deeper"] = system_summary(runs, n, "deeper", refs, seeds=seeds,
                                               resamples=e.bootstrap_samples)["tests"]["test"]
    for n, pr in results.get("probe", {}).items():
        sysname = n.rsplit("/", 1)[0]
        s.setdefault(sysname, {}).setdefault("probe", []).append(pr)
    for n, c in results.get("cost", {}).get("systems", {}).items():
        s.setdefault(n, {})["speed_vs_baseline"] = c["relative_speed"]
    for n, c in results.get("decode_cost", {}).get("systems", {}).items():
        s.setdefault(n, {})["decode_speed_vs_baseline"] = c["relative_speed"]
    return s
