"""``xlpe train``: options from :class:`~xlpe.train.config.DataConfig`, a model preset plus
:class:`~xlpe.nn.config.TransformerConfig` overrides, and :class:`~xlpe.train.config.TrainConfig`; a TOML
``--config`` with tables ``[data]``, ``[model]``, ``[train]`` and ``--set`` overrides (:mod:`xlpe.config`)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from xlpe.cli.shortcuts import add_split_shortcut_arguments, data_with_shortcuts
from xlpe.config import (add_config_arguments, add_dataclass_arguments, build, check_values, check_workers,
                         merge_sources)
from xlpe.errors import ConfigError
from xlpe.nn.config import PRESETS, TransformerConfig
from xlpe.train.config import DataConfig, TrainConfig
from xlpe.train.trainer import train

TABLES = ("data", "model", "train")
#: model fields that the subword models set
MODEL_SKIP = {"src_vocab_size", "tgt_vocab_size", "pad_id", "unk_id", "bos_id", "eos_id"}


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, TABLES, " (model: preset + TransformerConfig fields)")
    data = parser.add_argument_group("data")
    add_dataclass_arguments(data, DataConfig, prefix="data.")
    add_split_shortcut_arguments(data)
    g = parser.add_argument_group("model (a preset, then TransformerConfig overrides)")
    g.add_argument("--preset", dest="model.preset", default=argparse.SUPPRESS, choices=list(PRESETS),
                   help="model size preset (default: small)")
    add_dataclass_arguments(g, TransformerConfig, prefix="model.", skip=MODEL_SKIP, show_default=False)
    add_dataclass_arguments(parser.add_argument_group("training"), TrainConfig, prefix="train.")


def configs_from_args(args: argparse.Namespace) -> tuple[Any, TrainConfig, DataConfig]:
    """Merge defaults < ``--config`` TOML < ``--set`` < command line into
    ``(TransformerConfig, TrainConfig, DataConfig)``."""
    merged = merge_sources(args, TABLES)
    model = dict(merged["model"])
    preset = model.pop("preset", "small")
    bad = sorted(set(model) & MODEL_SKIP)
    if bad:
        raise ConfigError(f"model keys {bad} are set from the subword models and cannot be given")
    source = ", ".join([getattr(args, "config", None)] * bool(getattr(args, "config", None))
                       + ["--set"] * bool(getattr(args, "set", None))) or "options"
    check_values(TransformerConfig, model, f"{source} [model]")
    mcfg = TransformerConfig.from_preset(preset, **model)
    if "threads" in merged["train"]:
        check_workers(merged["train"]["threads"], "--threads", zero="torch's default")
    return (mcfg, build(TrainConfig, merged["train"], f"{source} [train]"),
            build(DataConfig, data_with_shortcuts(merged["data"]), f"{source} [data]"))


def cli_main(args: argparse.Namespace) -> int:
    mcfg, tcfg, dcfg = configs_from_args(args)
    result = train(mcfg, tcfg, dcfg)
    if result.last_checkpoint is not None and not int(os.environ.get("RANK", "0")):
        print(json.dumps({"step": result.step, "epoch": result.epoch, "stop_reason": result.stop_reason,
                          "best": result.best, "checkpoint": str(result.last_checkpoint), **result.valid}))
    return 0
