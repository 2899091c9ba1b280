"""``xlpe demo``: the main job (:func:`xlpe.experiments.recipes.demo.demo`); its options are the fields of
:class:`~xlpe.experiments.recipes.demo.DemoConfig` (:mod:`xlpe.config`: flags, a TOML ``[demo]`` table, ``--set``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from xlpe.config import add_config_arguments, add_dataclass_arguments, build, check_workers, merge_sources
from xlpe.experiments.recipes.demo import DemoConfig, demo


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    add_config_arguments(p, ("demo",))
    add_dataclass_arguments(p, DemoConfig, prefix="demo.")


def cli_main(args: argparse.Namespace) -> int:
    cfg = build(DemoConfig, merge_sources(args, ("demo",))["demo"], "demo options")
    check_workers(cfg.threads, "--threads", zero="torch's default")
    check_workers(cfg.jobs, "--jobs", zero="one at a time")
    r = demo(cfg)
    print(r["report"])
    print(f"report: {Path(cfg.out) / 'report.md'}   numbers: {Path(cfg.out) / 'results.json'}   "
          f"plots: {Path(cfg.out) / 'plots'}")
    return 0
