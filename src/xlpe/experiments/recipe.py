"""What every recipe's configuration shares: the TOML tables ``[data]`` (:class:`~xlpe.experiments.stages.DataSpec`),
``[experiment]`` (the recipe's own dataclass), ``[model]`` (a preset plus TransformerConfig fields) and
``[train]`` (the per-run budget and optimiser), read with :mod:`xlpe.config`, and the checks they all need."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, ClassVar

from xlpe.config import apply_sets, build, read_toml
from xlpe.errors import ConfigError
from xlpe.experiments.nmt_runs import STOPS
from xlpe.experiments.stages import DataSpec

TOML_TABLES = ("data", "experiment", "model", "train")


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
