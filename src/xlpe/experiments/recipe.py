"""What every recipe's configuration shares: the TOML tables ``[data]`` (:class:`~xlpe.experiments.stages.DataSpec`),
``[experiment]`` (the recipe's own dataclass), ``[model]`` (a preset plus TransformerConfig fields) and
``[train]`` (the per-run budget and optimiser), read with :mod:`xlpe.config`, and the checks they all need."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import field
from pathlib import Path
from typing import Any, ClassVar

from xlpe.config import apply_sets, build, read_toml
from xlpe.errors import ConfigError
from xlpe.experiments.nmt_runs import STOPS
from xlpe.experiments.stages import DataSpec, data_stage, subword_stage
from xlpe.io.atomic import atomic_write
from xlpe.runtime import versions

TOML_TABLES = ("data", "experiment", "model", "train")


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
    # the cost stage: every system trains cost_updates updates in turn, cost_rounds times after a warm-up round,
    # on the recipe's own model and data (0 rounds = no cost stage)
    cost_rounds: int = 0
    cost_updates: int = 10
    # where every tuned setting came from, printed in the report: {"train.max_updates" = "baseline learning
    # curve on the dev set", ...}; each key names a setting of this config (dev/test discipline)
    chosen_on: dict[str, str] = field(default_factory=dict)


@dataclasses.dataclass
class RecipeConfig:
    """Base of a recipe's config; a subclass sets ``EXPERIMENT`` (its ``[experiment]`` dataclass), redeclares
    ``experiment`` with that type and extends :meth:`validate`."""

    EXPERIMENT: ClassVar[type] = object
    data: DataSpec = dataclasses.field(default_factory=DataSpec)
    experiment: Any = None
    model: dict[str, Any] = dataclasses.field(default_factory=lambda: {"preset": "small"})
    train: dict[str, Any] = dataclasses.field(default_factory=lambda: {"max_updates": 2000})

    def validate(self):
        """The checks every recipe needs: seeds, a per-run budget, data files, the cost stage's numbers, and
        ``chosen_on`` naming real settings (dev/test discipline)."""
        e, d = self.experiment, self.data
        if not e.seeds:
            raise ConfigError("experiment.seeds is empty")
        if not set(STOPS) & set(self.train):
            raise ConfigError("[train] needs a budget: max_updates and/or max_time_minutes (the same for every run)")
        if getattr(e, "cost_rounds", 0) < 0 or getattr(e, "cost_updates", 2) < 2:
            raise ConfigError("experiment.cost_rounds must be >= 0 and experiment.cost_updates >= 2")
        if not d.builtin:
            for k in ("train_src", "train_tgt", "test_src", "test_tgt"):
                if not getattr(d, k):
                    raise ConfigError(f"[data] {k} is required unless builtin is set")
                if not Path(getattr(d, k)).exists():
                    raise ConfigError(f"[data] {k}: {getattr(d, k)} does not exist")
        tables = {"data": dataclasses.asdict(d), "experiment": dataclasses.asdict(e), "model": self.model,
                  "train": self.train}
        for key in getattr(e, "chosen_on", {}):
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
        return cls(build(DataSpec, doc.get("data", {}), f"{source} [data]"),
                   build(cls.EXPERIMENT, doc.get("experiment", {}), f"{source} [experiment]"),
                   {"preset": "small", **doc.get("model", {})},
                   dict(doc.get("train", {"max_updates": 2000}))).validate()

    @classmethod
    def load(cls, path: str | None, sets: list[str]):
        """``--config`` TOML, then ``--set section.key=value`` overrides (TOML values)."""
        return cls.from_dict(apply_sets(read_toml(path) if path else {}, sets), path or "--set")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

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
        data = data_stage(out, self.data, e.base_seed)
        p = data["paths"]
        spm = e.subword_model or subword_stage(out, [p["train_src"], p["train_tgt"]], e.vocab_size)
        return out, chosen, data, spm

    def finish(self, out: Path, report: str, results: dict) -> dict:
        """Write ``report.md`` and ``results.json`` (:func:`write_outputs`)."""
        return write_outputs(out, self.to_dict(), report, results)


def write_outputs(out: Path, config: dict, report: str, results: dict) -> dict:
    """Write ``report.md`` and ``results.json`` (every number, the config, the versions, the command)."""
    with atomic_write(out / "report.md") as f:
        f.write(report)
    with atomic_write(out / "results.json") as f:
        json.dump({"config": config, "results": results, "versions": versions(),
                   "command": " ".join(["xlpe"] + sys.argv[1:])}, f, indent=2, default=str)
    return {"report": report, "results": results}
