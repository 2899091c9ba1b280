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
reuse runs made by the same xlpe version. A candidate counts only when its folder marks the run finished and its
training log reached its budget. A run restored from an archive has no checkpoints to adopt: it can still give its
results to a run whose evaluation is the same too (:func:`take_results`).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

from xlpe.experiments.engine.cache import digest, file_sig
from xlpe.experiments.engine.status import log_rows
from xlpe.train.config import NEUTRAL_DATA_VALUES, PRE_OPTION_VALUES

log = logging.getLogger("xlpe.experiments.engine.reuse")

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
        d = {k: (sig(v) if k in FILE_OPTIONS and v else v) for k, v in data.items()
             if k not in NEUTRAL_DATA_VALUES or v != NEUTRAL_DATA_VALUES[k]}
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
    if not (run_dir / "done.json").exists():
        return False
    rows = log_rows(run_dir / "train", "train_log")
    budget = train.get("max_updates") or 0
    try:
        return bool(rows) and budget > 0 and int(float(rows[-1]["step"])) >= budget
    except (TypeError, ValueError):          # a log line cut short: not a finished run
        return False


def _same_training(mcfg, tcfg, dcfg, folders: list[str | os.PathLike]):
    """The ``train/`` folders of the finished runs in ``folders`` (``<folder>/runs/<system>/seed<k>``) whose training
    is this run's, in folder order."""
    model, train, data = _config_dicts(mcfg, tcfg, dcfg)
    mine = training_signature(model, train, data)
    if mine is None:
        return
    for folder in folders:
        for run_json in sorted(Path(folder).glob(f"runs/*/seed{train['seed']}/train/run.json")):
            try:
                first = json.loads(run_json.read_text())[0]
            except (ValueError, IndexError, KeyError):
                continue
            if not _finished(run_json.parent.parent, first.get("train", {})):
                continue
            if training_signature(first["model"], first["train"], first["data"]) == mine:
                yield run_json.parent


def find_reusable(mcfg, tcfg, dcfg, folders: list[str | os.PathLike]) -> Path | None:
    """The ``train/`` folder of a finished run in ``folders`` whose training is this run's and whose checkpoints are
    there (a run restored from an archive has none); None if there is none."""
    return next((d for d in _same_training(mcfg, tcfg, dcfg, folders) if any(d.glob("*.pt"))), None)


def output_entries(result: dict) -> list[dict]:
    """The entries of a run's result that name its output files (``hyp`` of each test, ``file`` of each attention
    alignment)."""
    return [*result.get("tests", {}).values(), *[a for a in [result.get("attention_alignment")] if a],
            *(result.get("attention_alignment_more") or {}).values()]


def take_results(run_dir: Path, mcfg, tcfg, dcfg, folders: list[str | os.PathLike] | None,
                 evaluation: str) -> dict[str, Any] | None:
    """Before a run trains, when no run with checkpoints can be adopted (:func:`maybe_adopt`): a finished run in
    ``folders`` with the same training *and* the same evaluation (``evaluation``: the digest of the test sets, their
    channels, the decoding and the measurements, which :func:`xlpe.experiments.engine.runs.run_system` records in every
    result) gives its results instead: its translations, alignments and logs are copied into ``run_dir`` and its
    result is returned with its files named there and ``reused`` set. This is how a run restored from an archive
    (no checkpoints, :mod:`xlpe.experiments.engine.archive`) serves another recipe; None if there is no such run."""
    train_dir = run_dir / "train"
    if not folders or (train_dir.exists() and any(train_dir.iterdir())):
        return None
    for src in _same_training(mcfg, tcfg, dcfg, folders):
        source = src.parent
        result = json.loads((source / "done.json").read_text()).get("result", {})
        if result.get("evaluation") != evaluation:
            continue
        for f in sorted(source.rglob("*")):
            rel = f.relative_to(source)
            if (not f.is_file() or f.suffix == ".pt" or rel.parts[0] in ("done.json", "started.json")
                    or "cache" in rel.parts[:-1] or f.name.startswith(".")):
                continue
            (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, run_dir / rel)
        for entry in output_entries(result):
            for k in ("hyp", "file"):
                if entry.get(k):
                    entry[k] = str(run_dir / Path(entry[k]).name)
        log.info("%s: the results of %s (same training and evaluation; its checkpoints are not there), not trained "
                 "again", run_dir, source)
        return {**result, "reused": str(src), "reused_results_only": True}
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
