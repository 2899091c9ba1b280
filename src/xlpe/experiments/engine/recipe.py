"""What every recipe's configuration shares: the TOML tables ``[data]``, ``[experiment]`` (the recipe's own
dataclass), ``[model]`` and ``[train]``, read with :mod:`xlpe.config` and checked when they are loaded
(:class:`Config`); for the NMT recipes ``[data]`` is a :class:`~xlpe.experiments.engine.stages.DataSpec`, ``[model]``
a preset plus TransformerConfig fields and ``[train]`` the per-run budget and optimiser (:class:`RecipeConfig`)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

from xlpe.config import apply_sets, build, read_toml
from xlpe.errors import ConfigError
from xlpe.experiments.engine.runs import STOPS
from xlpe.experiments.engine.stages import DataSpec, data_stage, subword_stage
from xlpe.io.atomic import atomic_write
from xlpe.runtime import versions

log = logging.getLogger("xlpe.experiments")

TOML_TABLES = ("data", "experiment", "model", "train")
#: what a recipe sets itself for each run: never keys of its [model] / [train] tables
PER_SYSTEM_MODEL = ("src_vocab_size", "tgt_vocab_size", "pe", "pe_options", "encoder_free")
PER_RUN_TRAIN = ("out", "seed", "resume")


def check_run_tables(model: dict[str, Any], train: dict[str, Any], source: str = "config") -> None:
    """Refuse, when the config is loaded, what the runs of a recipe could not use: an unknown or mistyped key or an
    invalid value of ``[model]`` (a preset plus :class:`~xlpe.nn.config.TransformerConfig` fields) or of ``[train]``
    (:class:`~xlpe.train.config.TrainConfig` fields), and the keys the recipe sets per system or per run."""
    from xlpe.nn.config import PRESETS, TransformerConfig
    from xlpe.train.config import TrainConfig

    m = dict(model)
    preset = m.pop("preset", "small")
    if preset not in PRESETS:
        raise ConfigError(f"{source} [model]: unknown preset {preset!r}; valid: {', '.join(PRESETS)}")
    for table, values, own in (("model", m, PER_SYSTEM_MODEL), ("train", train, PER_RUN_TRAIN)):
        mine = sorted(set(values) & set(own))
        if mine:
            raise ConfigError(f"{source} [{table}]: {mine} are set by the recipe for each "
                              f"{'system' if table == 'model' else 'run'}, not in [{table}]")
    build(TransformerConfig, {**PRESETS[preset], **m}, f"{source} [model]")
    build(TrainConfig, train, f"{source} [train]")


def check_pe_options(options: dict[str, Any], source: str = "experiment.pe_options") -> None:
    """Every key of a recipe's ``pe_options`` is an option some position encoding reads (each system then gets the
    options of its own encodings); a misspelt key is an error, never dropped."""
    from xlpe.nn.positions import ENCODINGS

    valid = sorted({k for enc in ENCODINGS.values() for k in enc.options})
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ConfigError(f"{source}: {unknown} is no option of any position encoding; valid: {', '.join(valid)}")


@dataclasses.dataclass
class RecipeExperiment:
    """The ``[experiment]`` settings every recipe has; a recipe's own dataclass extends it."""

    seeds: list[int] = field(default_factory=lambda: [1, 2, 3])
    # the seed of the built-in data, the subword model and the preorderer, shared by every run: running a subset
    # of ``seeds`` (e.g. one per sitting) reuses the same data and cached runs
    base_seed: int = 1
    vocab_size: int = 8000
    subword_model: str = ""                  # a sentencepiece model to use instead of training one
    beam: int = 5
    lenpen: float = 0.6
    bootstrap_samples: int = 1000
    threads: int = 1                         # torch threads per run
    jobs: int = 1                            # runs at once, in separate processes (not part of a run's cache key)
    # other recipe folders whose finished runs of the same training (model, options, data by content, seed) a run
    # takes instead of training again, e.g. xl-pe Europarl's baseline for structural-pe's
    # (xlpe.experiments.engine.reuse)
    reuse_runs: list[str] = field(default_factory=list)
    # the cost stage: every system trains cost_updates updates in turn, cost_rounds times after a warm-up round,
    # on the recipe's own model and data (0 rounds = no cost stage)
    cost_rounds: int = 0
    cost_updates: int = 10
    # where every tuned setting came from, printed in the report: {"train.max_updates" = "baseline learning
    # curve on the dev set", ...}; each key names a setting of this config (dev/test discipline)
    chosen_on: dict[str, str] = field(default_factory=dict)


@dataclasses.dataclass
class PreorderSettings:
    """The ``[experiment]`` settings of the BTG preorderer behind a recipe's XL systems, with one meaning in every
    recipe (xl-pe, and the XL systems of structural-pe and dpe), so one XL system is the same system in each."""

    # the preorderer's tokens: subword (SPEC §4.1, Ding et al. fn. 1: BTG on the BPE text) or word
    preorder_level: str = "subword"
    preorder_sentences: int = 0                                  # 0 = all training pairs
    preorder_iterations: int = 3
    preorder: dict[str, Any] = field(default_factory=dict)      # BTGConfig overrides
    # unaligned source words in the preorderer's training labels: "right" (lader: the right neighbour's
    # rank) or "free" (no rank, left out of the tau loss; tau-only losses; measured better with eflomal
    # labels on Europarl, benchmarks/bench_btg.py). Oracle orders always use "right"
    preorder_attach_null: str = "right"
    preorderer: str = ""                                         # a trained preorderer directory to use instead

    def check_preorder(self) -> None:
        """Refuse settings the preorder stage cannot use, before any stage runs."""
        if self.preorder_level not in ("word", "subword"):
            raise ConfigError(f"experiment.preorder_level must be 'word' or 'subword', not {self.preorder_level!r}")
        if self.preorder_attach_null not in ("right", "free"):
            raise ConfigError("experiment.preorder_attach_null must be 'right' or 'free', "
                              f"not {self.preorder_attach_null!r}")
        from xlpe.reorder.btg import BTGConfig, parse_loss_profile
        unknown = sorted(set(self.preorder) - {f.name for f in dataclasses.fields(BTGConfig)})
        if unknown:
            raise ConfigError(f"experiment.preorder: unknown BTG option(s) {unknown}")
        if self.preorder_attach_null == "free" and not self.preorderer and \
                parse_loss_profile(self.preorder.get("loss", BTGConfig.loss))["chunk"]:
            raise ConfigError("experiment.preorder_attach_null = 'free' needs a tau-only loss: set "
                              "experiment.preorder.loss = 'tau=1' (the chunk loss has no cost for unranked words)")

    def preorder_options(self) -> dict[str, Any]:
        """These settings as keyword arguments of :func:`xlpe.experiments.engine.stages.preorder_stage`."""
        return {"sentences": self.preorder_sentences, "iterations": self.preorder_iterations, "btg": self.preorder,
                "attach_null": self.preorder_attach_null, "model": self.preorderer, "level": self.preorder_level}


@dataclasses.dataclass
class Config:
    """Base of every recipe's config: the TOML tables ``[data]`` (``DATA``), ``[experiment]`` (``EXPERIMENT``),
    ``[model]`` and ``[train]``, built and checked when the config is loaded (every key of every table; a subclass
    adds its own checks to :meth:`check_run_tables` and :meth:`validate`), ``chosen_on`` naming real settings, and
    the report writer."""

    DATA: ClassVar[type] = object
    EXPERIMENT: ClassVar[type] = object
    data: Any = None
    experiment: Any = None
    model: dict[str, Any] = dataclasses.field(default_factory=dict)
    train: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def run_tables(cls, doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """``[model]`` and ``[train]`` of a config document, with the recipe's defaults."""
        return dict(doc.get("model", {})), dict(doc.get("train", {}))

    @classmethod
    def check_run_tables(cls, model: dict[str, Any], train: dict[str, Any], source: str) -> None:
        """Refuse what the recipe's runs could not use in ``[model]`` / ``[train]`` (before any stage runs)."""

    def validate(self):
        """The checks every recipe needs: ``experiment.chosen_on`` names settings of this config (dev/test
        discipline)."""
        tables = {"data": dataclasses.asdict(self.data), "experiment": dataclasses.asdict(self.experiment),
                  "model": self.model, "train": self.train}
        for key in getattr(self.experiment, "chosen_on", {}):
            section, _, name = key.partition(".")
            if name.split(".")[0] not in tables.get(section, {}):
                raise ConfigError(f"experiment.chosen_on names {key!r}, which is not a setting of this config "
                                  "(SECTION.KEY, e.g. train.max_updates)")
        return self

    @classmethod
    def from_dict(cls, doc: dict[str, Any], source: str = "config"):
        unknown = sorted(set(doc) - set(TOML_TABLES))
        if unknown:
            raise ConfigError(f"{source}: unknown table(s) {unknown}; expected {', '.join(TOML_TABLES)}")
        model, train = cls.run_tables(doc)
        cls.check_run_tables(model, train, source)
        return cls(build(cls.DATA, doc.get("data", {}), f"{source} [data]"),
                   build(cls.EXPERIMENT, doc.get("experiment", {}), f"{source} [experiment]"), model,
                   train).validate()

    @classmethod
    def load(cls, path: str | None, sets: list[str]):
        """``--config`` TOML, then ``--set section.key=value`` overrides (TOML values)."""
        return cls.from_dict(apply_sets(read_toml(path) if path else {}, sets), path or "--set")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def finish(self, out: Path, report: str, results: dict) -> dict:
        """Write ``report.md`` and ``results.json`` (:func:`write_outputs`)."""
        return write_outputs(out, self.to_dict(), report, results)


@dataclasses.dataclass
class RecipeConfig(Config):
    """Base of an NMT recipe's config (xl-pe, structural-pe, dpe): ``[data]`` is a :class:`DataSpec`, ``[model]`` a
    preset plus :class:`~xlpe.nn.config.TransformerConfig` fields and ``[train]`` the per-run budget and optimiser
    (:class:`~xlpe.train.config.TrainConfig` fields). A subclass sets ``EXPERIMENT`` (its ``[experiment]``
    dataclass), redeclares ``experiment`` with that type and extends :meth:`validate`."""

    DATA = DataSpec
    #: what an entry of ``data.extra_tests`` may hold: ``[source, reference]`` (2) and, for a recipe that reads
    #: trees, ``[source, reference, trees]`` (3); empty = the recipe translates no extra test set
    EXTRA_TEST_PARTS: ClassVar[tuple[int, ...]] = (2,)
    data: DataSpec = dataclasses.field(default_factory=DataSpec)
    model: dict[str, Any] = dataclasses.field(default_factory=lambda: {"preset": "small"})
    train: dict[str, Any] = dataclasses.field(default_factory=lambda: {"max_updates": 2000})

    @classmethod
    def run_tables(cls, doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return {"preset": "small", **doc.get("model", {})}, dict(doc.get("train", {"max_updates": 2000}))

    @classmethod
    def check_run_tables(cls, model: dict[str, Any], train: dict[str, Any], source: str) -> None:
        check_run_tables(model, train, source)

    def validate(self):
        """Seeds, a per-run budget, the encodings' options, data files, the cost stage's numbers, and the checks
        of every recipe (:meth:`Config.validate`)."""
        e, d = self.experiment, self.data
        if not e.seeds:
            raise ConfigError("experiment.seeds is empty")
        if not set(STOPS) & set(self.train):
            raise ConfigError("[train] needs a budget: max_updates and/or max_time_minutes (the same for every run)")
        if hasattr(e, "pe_options"):
            check_pe_options(e.pe_options)
        if getattr(e, "cost_rounds", 0) < 0 or getattr(e, "cost_updates", 2) < 2:
            raise ConfigError("experiment.cost_rounds must be >= 0 and experiment.cost_updates >= 2")
        if not d.builtin:
            for k in ("train_src", "train_tgt", "test_src", "test_tgt"):
                if not getattr(d, k):
                    raise ConfigError(f"[data] {k} is required unless builtin is set")
                if not Path(getattr(d, k)).exists():
                    raise ConfigError(f"[data] {k}: {getattr(d, k)} does not exist")
        self._check_extra_tests()
        return super().validate()

    def _check_extra_tests(self) -> None:
        parts = self.EXTRA_TEST_PARTS
        shape = " or ".join(("[source, reference]", "[source, reference, trees]")[n - 2] for n in parts)
        for name, files in self.data.extra_tests.items():
            if not parts:
                raise ConfigError(f"[data] extra_tests.{name}: this recipe translates no extra test set; "
                                  "remove data.extra_tests")
            if name in ("test", "dev", "train", "gold") or name.startswith("extra-") or not name:
                raise ConfigError(f"[data] extra_tests: {name!r} is not a usable test set name (it names a split)")
            if not isinstance(files, (list, tuple)) or len(files) not in parts or not all(
                    isinstance(f, str) and f for f in files):
                raise ConfigError(f"[data] extra_tests.{name}: expected {shape}, got {files!r}")
            for f in files:
                if not Path(f).exists():
                    raise ConfigError(f"[data] extra_tests.{name}: {f} does not exist")

    def begin(self, out: str | os.PathLike, only: list[str] | None, tables: tuple[str, ...]
              ) -> tuple[Path, set[str], dict, str]:
        """What every recipe does first: validate, check ``--only`` against ``tables``, create ``out`` and
        ``out/plots``, record the config, and run the shared ``data`` and ``subword`` stages. Returns ``(out,
        selected tables, data stage result, subword model path)``."""
        self.validate()
        chosen = set(only or tables)
        bad = sorted(chosen - set(tables))
        if bad:
            raise ConfigError(f"unknown table(s) {bad}; valid: {', '.join(tables)}")
        out = Path(out)
        (out / "plots").mkdir(parents=True, exist_ok=True)
        with atomic_write(out / "config.json") as f:
            json.dump(self.to_dict(), f, indent=2)
        e = self.experiment
        for folder in getattr(e, "reuse_runs", []):
            if not Path(folder, "runs").is_dir():
                log.warning("experiment.reuse_runs: %s has no runs/ folder (yet): nothing to reuse from it", folder)
        data = data_stage(out, self.data, e.base_seed)
        p = data["paths"]
        spm = e.subword_model or subword_stage(out, [p["train_src"], p["train_tgt"]], e.vocab_size)
        return out, chosen, data, spm


def write_outputs(out: Path, config: dict, report: str, results: dict) -> dict:
    """Write ``report.md`` and ``results.json`` (every number, the config, the versions, the command)."""
    with atomic_write(out / "report.md") as f:
        f.write(report)
    with atomic_write(out / "results.json") as f:
        json.dump({"config": config, "results": results, "versions": versions(),
                   "command": " ".join(["xlpe"] + sys.argv[1:])}, f, indent=2, default=str)
    return {"report": report, "results": results}
