"""``xlpe experiment xl-pe``: Ding, Wang, Tao (2020) at small scale, as one cached and resumable run.

The recipe goes from a bitext to the paper's tables:

1. ``data``: the built-in pair (``[data] builtin = "sov"``) or your files. Training pairs whose source or target
   also occurs in the gold alignment set are removed (``exclude_gold``).
2. ``subword``: a joint sentencepiece model (or yours).
3. ``align``: eflomal with grow-diag-final-and over train + gold sentences (or your ``train_align``).
4. ``preorder``: a BTG preorderer trained on those alignments. It predicts the orders of every split from the
   source alone. Oracle orders of the training data come from the same alignments. Its Kendall τ is scored on
   every split with gold alignments, the dev part of a split gold set included; ``--only preorder`` stops
   here, to choose the preorder settings on that dev part before any NMT run.
5. ``runs``: one NMT model per (system, seed). Each is trained for the same budget (``[train]``: updates
   and/or minutes), decoded with beam search, scored with sacreBLEU, and, for the Table 3 systems,
   force-decoded on the gold set to extract alignments from attention (SPEC §4.6).
6. ``report``: Markdown tables and PNG plots, and a JSON with every number, the configs and the versions.

What is reproduced:

* Table 1: baseline / +RPE / +InXL / +HeadXL / +Combination (and +DiSAN with ``systems`` naming ``disan``). BLEU is
  mean ± std over seeds, compared with the baseline by the seed-aware tests of :mod:`xlpe.evaluate.significance` (a
  paired bootstrap over test sentences that keeps each sentence's seed outputs together, and a t-test across seeds).
  Parameter counts are listed. The training cost of each system, relative to the baseline, is measured apart by the
  ``cost`` stage (:func:`measure_cost`): the systems train a few updates each in turn, in interleaved rounds, on the
  recipe's own model and data, so all of them meet the same machine load. The runs' own logs cannot give this figure
  when runs share the machine or use different thread counts.
* Figure 3: BLEU vs τ for HeadXL (``taus``).
* Table 3: AER / P / R of attention alignments.
* Table 4: the encoder-free model with no PE / APE / InXL (RPE is not defined there, SPEC §4.7).
* Figure 4: BLEU vs the noise ratio of the training indices (``noise``, on ``noise_system``).

The training indices come from ``xl_train_source``: ``predicted`` (the default, SPEC §4.1) or ``oracle``. Test
indices are always predicted from the source alone.

Every finished run is cached under ``OUT/runs/<name>/seed<k>``. A killed run resumes from its last checkpoint
when the command is repeated, so a table too large for one sitting fills up over several.

    xlpe experiment xl-pe --config examples/xl-pe-builtin.toml --out runs/xl-builtin
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
from xlpe.experiments.engine.cache import file_sig, run_stage
from xlpe.experiments.engine.cost import CostInputs, cost_systems, measure_cost
from xlpe.experiments.engine.runs import STOPS, Corpus, Evaluation, RunKey, Shared, System, run_grid
from xlpe.experiments.engine.recipe import PreorderSettings, RecipeConfig, RecipeExperiment
from xlpe.experiments.engine.stages import align_stage, preorder_stage, read_text
from xlpe.experiments.recipes.systems import ENCODER_FREE, SYSTEMS, pe_list
from xlpe.experiments.recipes.xl_pe_report import plot_figures, render_preorder_report, render_report, summarise
from xlpe.nn.positions import inputs_of
from xlpe.reorder.noise import UNITS

log = logging.getLogger("xlpe.experiments.recipes.xl_pe")

XL_OPTIONS = ("tau", "tau_ratio", "layers", "xl_fusion_param")
TABLES = ("table1", "fig3", "table3", "table4", "fig4", "preorder")   # preorder: that stage alone, for choices


@dataclass
class XLExperiment(PreorderSettings, RecipeExperiment):
    """``[experiment]``: what to run (the settings every recipe shares are in ``RecipeExperiment``, the
    preorderer's in ``PreorderSettings``)."""

    # Table 1's rows (Ding et al. also have "+ DiSAN": add "disan")
    systems: list[str] = field(default_factory=lambda: ["baseline", "rpe", "inxl", "headxl", "combination"])
    taus: list[int] = field(default_factory=list)               # Figure 3: HeadXL tau grid ([] = skip)
    encoder_free: list[str] = field(default_factory=lambda: ["none", "ape", "inxl"])   # Table 4 ([] = skip)
    noise: list[float] = field(default_factory=lambda: [0.05, 0.10, 0.15, 0.20])        # Figure 4 ([] = skip)
    noise_system: str = "combination"
    # what a noise ratio counts (xlpe.reorder.noise): indices (SPEC §4.8), pairs (§12.9) or probability (§10)
    noise_unit: str = "indices"
    alignment_systems: list[str] = field(default_factory=lambda: ["baseline", "inxl", "headxl", "combination"])
    xl_train_source: str = "predicted"                          # predicted | oracle (SPEC §4.1)
    pe_options: dict[str, Any] = field(default_factory=dict)    # tau, tau_ratio, xl_fusion_param
    attention_layer: int = -2
    attention_merge: str = "any"
    # Table 1's cost column (0 rounds = use each run's own log, a rough figure)
    cost_rounds: int = 5


@dataclass(frozen=True)
class XLSystem(System):
    """A system of this recipe: its runs' keys always state the encoder, the options and the noise ratio."""

    pe_options: dict = field()
    encoder_free: bool = field()
    noise: float = field()


@dataclass
class XLConfig(RecipeConfig):
    EXPERIMENT = XLExperiment
    experiment: XLExperiment = field(default_factory=XLExperiment)

    def validate(self) -> "XLConfig":
        super().validate()
        e, d = self.experiment, self.data
        for s in e.systems + e.alignment_systems + [e.noise_system]:
            if s not in SYSTEMS:
                raise ConfigError(f"unknown system {s!r}; valid: {', '.join(SYSTEMS)}")
        for s in e.encoder_free:
            if s not in ENCODER_FREE:
                raise ConfigError(f"unknown encoder-free system {s!r}; valid: {', '.join(ENCODER_FREE)} "
                                  "(rpe is not defined without an encoder, SPEC §4.7)")
        if "baseline" not in e.systems:
            raise ConfigError("experiment.systems must include 'baseline' (everything is compared with it)")
        e.check_preorder()
        if e.noise and "xl" not in required_inputs_of(e.noise_system):
            raise ConfigError(f"experiment.noise perturbs XL positions, but noise_system {e.noise_system!r} reads "
                              "none; pick an XL system (inxl, headxl, combination) or set noise = []")
        if e.noise_unit not in UNITS:
            raise ConfigError(f"experiment.noise_unit must be one of {', '.join(UNITS)}, not {e.noise_unit!r}")
        if e.xl_train_source not in ("predicted", "oracle"):
            raise ConfigError(f"xl_train_source must be 'predicted' or 'oracle', not {e.xl_train_source!r}")
        unknown = sorted(set(e.pe_options) - set(XL_OPTIONS))
        if unknown:
            raise ConfigError(f"experiment.pe_options {unknown} unknown; valid: {', '.join(XL_OPTIONS)}")
        if e.alignment_systems and not (d.builtin or d.gold_align):
            log.warning("no gold alignments ([data] gold_align): Table 3 is skipped")
        return self


def required_inputs_of(system: str) -> set[str]:
    """The channels the encodings of ``system`` read."""
    from xlpe.nn.positions import ENCODINGS
    return {c for n in pe_list(system) for c in ENCODINGS[n].inputs}


def _gold_alignments(data: dict, path: str | None = None) -> list:
    """The gold alignments (the reported part, or the file ``path``) in the source-target orientation."""
    from xlpe.io import read_alignments
    als = list(read_alignments(path or data["paths"]["gold_align"], data["gold_base"]))
    if data["gold_reverse"]:
        als = [a.reversed() for a in als]
    return als


def _gold_sets(cfg: XLConfig, data: dict, splits: dict) -> dict | None:
    """The gold alignments of every preordered split that has them: ``gold`` (the reported part), and with a
    gold split also ``dev`` (the dev part, when it is the dev set: what preorder settings are chosen on) and
    ``extra-all-gold`` (the whole set)."""
    p = data["paths"]
    if not (p.get("gold_align") and p.get("gold_src")):
        return None
    sets = {"gold": _gold_alignments(data)}
    if data.get("gold_split"):
        if "dev" in splits and p.get("dev_src") == p.get("gold_dev_src"):
            sets["dev"] = _gold_alignments(data, p["gold_dev_align"])
        if "extra-all-gold" in splits:
            sets["extra-all-gold"] = _gold_alignments(data, cfg.data.gold_align)
    return sets


def _diagonal_reference(gold: dict) -> dict:
    """AER / P / R of the position-only diagonal alignment of the gold set: Table 3's floor of meaning."""
    from xlpe.evaluate.aer import corpus_aer, diagonal_alignment
    from xlpe.io.text import tokenize
    hyps = [diagonal_alignment(len(tokenize(s)), len(tokenize(t)))
            for s, t in zip(read_text(gold["src"]), read_text(gold["tgt"]))]
    return corpus_aer(hyps, gold["alignments"]).to_dict()


def _align(cfg: XLConfig, out: Path, data: dict) -> str:
    """Training alignments: eflomal grow-diag-final-and over the training pairs, plus the gold sentences when
    they are not the test set (the AER protocol aligns them together)."""
    p = data["paths"]
    splits = {"train": (p["train_src"], p["train_tgt"])}
    if p.get("gold_src") and p["gold_src"] != p.get("test_src"):
        splits["gold"] = (p["gold_src"], p["gold_tgt"])
    return align_stage(out, splits, lowercase=cfg.data.align_lowercase)["paths"]["train"]


def _runs(cfg: XLConfig, only: set[str]) -> list[tuple[str, str, "XLSystem"]]:
    """(table, run name, run options) for everything the config asks for; shared runs are listed once."""
    e = cfg.experiment
    runs: dict[str, tuple[str, XLSystem]] = {}

    def add(table, name, pe, free=False, options=None, noise=0.0):
        runs.setdefault(name, (table, XLSystem(pe=pe, encoder_free=free, pe_options=options or e.pe_options,
                                               noise=noise)))
    if only & {"table1", "table3", "fig3", "fig4"}:
        for s in dict.fromkeys(["baseline"] + e.systems + (e.alignment_systems if "table3" in only else [])
                               + ([e.noise_system] if "fig4" in only and e.noise else [])):
            add("table1", s, pe_list(s))
    if "fig3" in only:
        for t in e.taus:
            if t > 0:
                name = "headxl" if t == _default_tau(cfg) else f"headxl-tau{t}"
                add("table1" if name == "headxl" else "fig3", name, ["ape", "headxl"],
                    options=e.pe_options if name == "headxl" else {**e.pe_options, "tau": t})
    if "table4" in only:
        for s in e.encoder_free:
            add("table4", f"ef-{s}", pe_list(s), free=True)
    if "fig4" in only:
        for r in e.noise:
            if r > 0:
                add("fig4", f"{e.noise_system}-noise{r:g}", pe_list(e.noise_system), noise=r)
    return [(t, n, o) for n, (t, o) in runs.items()]


def _default_tau(cfg: XLConfig) -> int:
    """The τ of the Table 1 HeadXL system (so that Figure 3 reuses its runs)."""
    from xlpe.nn.positions.xl import resolve_tau
    from xlpe.nn.config import TransformerConfig
    m = dict(cfg.model)
    mcfg = TransformerConfig.from_preset(m.pop("preset", "small"), **{**m, "pe": ["ape"]})
    return resolve_tau(mcfg, {k: v for k, v in cfg.experiment.pe_options.items() if k in ("tau", "tau_ratio")})


def run_experiment(cfg: XLConfig, out: str | os.PathLike, only: list[str] | None = None) -> dict:
    """Run (or resume) the recipe; returns every number (also in ``results.json``) and the report text."""
    out, tables, data, spm = cfg.begin(out, only, TABLES)
    e, p = cfg.experiment, data["paths"]
    train_align = data.get("train_align") or _align(cfg, out, data)
    splits = {"train": p["train_src"], "test": p["test_src"], **({"dev": p["dev_src"]} if p.get("dev_src") else {}),
              **({"gold": p["gold_src"]} if p.get("gold_src") else {}),
              **{f"extra-{k}": v[0] for k, v in data.get("extra_tests", {}).items()}}
    pre = preorder_stage(out, train_src=p["train_src"], train_align=train_align, splits=splits,
                         seed=e.base_seed, processes=e.threads, spm=spm, **e.preorder_options(),
                         gold=_gold_sets(cfg, data, splits))
    if tables == {"preorder"}:          # the preorder settings are chosen on the dev part's τ: no NMT runs
        results = {"data": data, "preorder": pre}
        return cfg.finish(out, render_preorder_report(cfg, results), results)
    orders = pre["orders"]
    kind = "orders:" if pre["level"] == "word" else "subword-orders:"     # the level the preorderer worked at
    xl = {k: {"xl": kind + v} for k, v in orders.items()}
    tests = {"test": (p["test_src"], p["test_tgt"], xl["test"])}
    for name, (src, tgt) in data.get("extra_tests", {}).items():
        tests[name] = (src, tgt, xl[f"extra-{name}"])
    gold = None
    if p.get("gold_align") and "table3" in tables:
        gold = {"src": p["gold_src"], "tgt": p["gold_tgt"], "alignments": _gold_alignments(data),
                "channels": xl["gold"]}
    more_gold = None
    if gold is not None and data.get("gold_split"):     # the whole gold set, dev part included (marked)
        more_gold = {"all-gold": {"src": cfg.data.gold_src, "tgt": cfg.data.gold_tgt,
                                  "alignments": _gold_alignments(data, cfg.data.gold_align),
                                  "channels": xl["extra-all-gold"]}}
    train_orders = pre["oracle_train"] if e.xl_train_source == "oracle" else orders["train"]
    train_channels = {"xl": kind + train_orders}
    results: dict[str, Any] = {"data": data, "preorder": pre}
    if gold is not None:
        results["diagonal_alignment"] = _diagonal_reference(gold)
        if more_gold:
            results["diagonal_alignment_all_gold"] = _diagonal_reference(more_gold["all-gold"])
    planned = _runs(cfg, tables)
    gold_for = {name for table, name, _ in planned if gold is not None and table == "table1"
                and name in e.alignment_systems}
    # what every run's result depends on; the orders enter only the keys of the systems that read them, so a
    # rerun at the other preorder level (or with other preorder settings) keeps the baseline's and RPE's runs
    key = RunKey(model=cfg.model, train=cfg.train, beam=e.beam, lenpen=e.lenpen, spm=file_sig(spm),
                 tests={k: file_sig(v[0], v[1]) for k, v in tests.items()},
                 attention=[e.attention_layer, e.attention_merge], more_gold=sorted(more_gold) if more_gold else None)
    xl_key = dataclasses.replace(
        key, train_orders=file_sig(train_orders),
        tests={k: file_sig(v[0], v[1], orders[k if k == "test" else f"extra-{k}"]) for k, v in tests.items()},
        # the gold set's orders, unless the gold set is the test set (covered above)
        gold_orders=file_sig(orders["gold"]) if gold is not None and "gold" in orders
        and p["gold_src"] != p["test_src"] else None)
    shared = Shared(model=cfg.model, train=cfg.train, threads=e.threads, noise_unit=e.noise_unit,
                    reuse_runs=tuple(e.reuse_runs),
                    corpus=Corpus.of(spm, p, tests, train_channels=train_channels, dev_channels=xl.get("dev"),
                                     builtin=bool(cfg.data.builtin)),
                    evaluation=Evaluation(beam=e.beam, lenpen=e.lenpen, gold=gold, more_gold=more_gold,
                                          attention_layer=e.attention_layer, attention_merge=e.attention_merge))
    results["runs"] = run_grid(
        out / "runs", {name: system for _, name, system in planned}, e.seeds, shared, key, jobs=e.jobs,
        gold_for=gold_for, system_keys={name: xl_key for _, name, s in planned if "xl" in inputs_of(s.pe)})
    if "table1" in tables and e.cost_rounds:
        results["cost"] = _training_cost(cfg, out, shared, file_sig(spm, p["train_src"], p["train_tgt"],
                                                                    train_orders))
    with tokenized_by_design() if cfg.data.builtin else contextlib.nullcontext():    # the built-in pair: tokenised
        results["summary"] = summarise(cfg, results, tables, tests, _default_tau(cfg),
                                       gold["alignments"] if gold is not None else None)
    if results["summary"]["fig4"]:
        from xlpe.io.orders import read_orders
        from xlpe.reorder.noise import noise_stats
        lengths = [len(o) for o in read_orders(train_orders)]
        results["summary"]["fig4_noise"] = {f"{r:g}": noise_stats(lengths, r, e.noise_unit)
                                            for r, _ in results["summary"]["fig4"]}
    plot_figures(cfg, results["summary"], out / "plots")
    return cfg.finish(out, render_report(cfg, results, tables), results)


def _training_cost(cfg: XLConfig, out: Path, shared: Shared, files: list) -> dict:
    """Table 1's cost column: the systems' training speed relative to the baseline (the cost stage)."""
    e = cfg.experiment
    systems = {n: XLSystem(pe=pe_list(n), pe_options=e.pe_options, encoder_free=False, noise=0.0)
               for n in dict.fromkeys(["baseline"] + e.systems)}
    params = CostInputs(systems=cost_systems(systems), model=cfg.model,
                        train={k: v for k, v in cfg.train.items() if k not in STOPS}, rounds=e.cost_rounds,
                        updates=e.cost_updates, threads=e.threads, files=files)
    return run_stage(out, "cost", params, lambda d: measure_cost(
        d, systems, shared, rounds=e.cost_rounds, updates=e.cost_updates, seed=e.base_seed))


def load_config(path: str | None, sets: list[str]) -> XLConfig:
    """``--config`` TOML, then ``--set section.key=value`` overrides (TOML values)."""
    return XLConfig.load(path, sets)
