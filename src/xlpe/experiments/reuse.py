"""Runs that another recipe folder has already trained (``experiment.reuse_runs``).

Several recipes train the same model: the APE baseline of structural-pe and dpe on Europarl is xl-pe's baseline,
with the same data, subwords, budget, dev set and seeds. A run whose training is the same as a finished run in one
of the folders named in ``reuse_runs`` takes that run's checkpoints and logs (hard links, or copies across file
systems) instead of training again; it then resumes at the last update, which ends training at once, and
translates and scores its own test sets as usual.

"The same training" is :func:`training_signature`: every model option; every training option except those that
change only speed, logging or where files go (:data:`NOT_TRAINING`), an option the run predates counting as
the value it ran with (:data:`xlpe.train.config.PRE_OPTION_VALUES`); and every data option, with each input file
(bitext, dev set, subword model, channel files) by its content, not its path. The code version is not compared:
reuse runs made by the same xlpe version. A candidate counts only when its folder marks the run finished, its
training log reached its budget and its checkpoints are there (a run restored from an archive has none).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from xlpe.experiments.cache import digest, file_sig
from xlpe.train.config import PRE_OPTION_VALUES

log = logging.getLogger("xlpe.experiments.reuse")

#: training options that change speed, logging or file locations, not the model a budget of updates trains
NOT_TRAINING = frozenset({"out", "resume", "threads", "device", "log_every", "log_format", "progress", "save_every",
                          "keep_last", "trim_memory_every", "cache_data"})
#: data options that name files: compared by content
FILE_OPTIONS = ("train_src", "train_tgt", "dev_src", "dev_tgt", "subword_model", "src_subword", "tgt_subword",
                "train_orders", "dev_orders", "train_trees", "dev_trees")


def training_signature(model: dict, train: dict, data: dict, base: Path | None = None) -> str | None:
    """A digest of what decides the trained model (see the module docstring); relative paths are read from
    ``base`` (default: the working directory). None when an input file is missing (nothing to compare)."""
    from xlpe.sources import split_spec

    def sig(path: str) -> list:
        p = Path(path)
        return file_sig(p if p.is_absolute() or base is None else base / p)

    try:
        d = {k: (sig(v) if k in FILE_OPTIONS and v else v) for k, v in data.items()}
        for side in ("train_channels", "dev_channels"):
            d[side] = {}
            for name, spec in sorted((data.get(side) or {}).items()):
                kind, path = split_spec(name, str(spec))
                d[side][name] = [kind, sig(path)]
    except FileNotFoundError:
        return None
    t = {k: v for k, v in {**PRE_OPTION_VALUES, **train}.items() if k not in NOT_TRAINING}
    return digest({"model": model, "train": t, "data": d})


def _config_dicts(mcfg, tcfg, dcfg) -> tuple[dict, dict, dict]:
    """The configs as the trainer writes them to ``run.json`` (JSON round trip: tuples become lists)."""
    return tuple(json.loads(json.dumps(d, default=str)) for d in (mcfg.to_dict(), asdict(tcfg), dcfg.to_dict()))


def _finished(run_dir: Path, train: dict) -> bool:
    """The folder marks the run done and its training log reached the budget."""
    from xlpe.experiments.nmt_runs import log_rows
    if not (run_dir / "done.json").exists():
        return False
    rows = log_rows(run_dir / "train", "train_log")
    budget = train.get("max_updates") or 0
    try:
        return bool(rows) and budget > 0 and int(float(rows[-1]["step"])) >= budget
    except (TypeError, ValueError):          # a log line cut short: not a finished run
        return False


def find_reusable(mcfg, tcfg, dcfg, folders: list[str | os.PathLike]) -> Path | None:
    """The ``train/`` folder of a finished run in ``folders`` (``<folder>/runs/<system>/seed<k>``) whose training is
    this run's; None if there is none."""
    model, train, data = _config_dicts(mcfg, tcfg, dcfg)
    mine = training_signature(model, train, data)
    if mine is None:
        return None
    for folder in folders:
        for run_json in sorted(Path(folder).glob(f"runs/*/seed{train['seed']}/train/run.json")):
            try:
                first = json.loads(run_json.read_text())[0]
            except (ValueError, IndexError, KeyError):
                continue
            if not _finished(run_json.parent.parent, first.get("train", {})) or not any(run_json.parent.glob("*.pt")):
                continue                # unfinished, or restored from an archive without its checkpoints
            if training_signature(first["model"], first["train"], first["data"]) == mine:
                return run_json.parent
    return None


def adopt(source: Path, train_dir: Path) -> None:
    """Give ``train_dir`` (empty or absent) the checkpoints and logs of ``source``: hard links where the file system
    allows, copies otherwise. The logs are copied (training appends to them), the checkpoints linked (the trainer
    replaces a checkpoint it saves again by an atomic rename, so the source's file is never written)."""
    train_dir.mkdir(parents=True, exist_ok=True)
    for f in sorted(source.iterdir()):
        if not f.is_file():
            continue
        dst = train_dir / f.name
        if f.suffix == ".pt":
            try:
                os.link(f, dst)
                continue
            except OSError:
                pass
        shutil.copy2(f, dst)
    log.info("%s: the training of %s (same model, options, data and seed), not trained again", train_dir, source)


def maybe_adopt(train_dir: Path, mcfg, tcfg, dcfg, folders: list[str | os.PathLike] | None) -> dict[str, Any] | None:
    """Before a run trains: if ``train_dir`` holds nothing yet and a run in ``folders`` trained the same model,
    adopt it; returns ``{"reused": source}`` or None."""
    if not folders or (train_dir.exists() and any(train_dir.iterdir())):
        return None
    src = find_reusable(mcfg, tcfg, dcfg, folders)
    if src is None:
        return None
    adopt(src, train_dir)
    return {"reused": str(src)}
