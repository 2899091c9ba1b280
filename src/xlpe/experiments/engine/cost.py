"""What the systems of a grid cost on one machine: training tokens/s (:func:`measure_cost`) and decoding
sentences/s (:func:`measure_decode_cost`, :func:`decode_cost_stage`) relative to the first system, each measured in
interleaved rounds so that every system meets the same machine noise."""

from __future__ import annotations

import csv
import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.experiments.engine.archive import checkpoint_signature
from xlpe.experiments.engine.cache import cached_result, file_sig, recorded_params, run_stage
from xlpe.experiments.engine.runs import STOPS, RunSpec, Shared, System, only_channels, model_reads, train_configs
from xlpe.experiments.engine.stages import read_text
from xlpe.keys import Inputs

log = logging.getLogger("xlpe.experiments")


@dataclass(frozen=True)
class CostInputs(Inputs):
    """The cost stage's key: the systems as ``[pe, pe_options(, overrides)]`` (:func:`cost_systems`), the recipe's
    [model] and [train] without its budget, the rounds, and the training data by content."""

    systems: dict
    model: dict
    train: dict
    rounds: int
    updates: int
    threads: int
    files: Any


def cost_systems(systems: dict[str, System], overrides: bool = False) -> dict[str, list]:
    """The systems as the cost stage's key holds them: ``[pe, pe_options]``, with ``overrides`` a third entry, the
    system's ``model`` / ``train`` overrides."""
    return {n: [s.pe, s.pe_options] + ([{k: getattr(s, k) for k in ("model", "train") if getattr(s, k)}]
                                       if overrides else []) for n, s in systems.items()}


def measured_train(train: dict) -> dict:
    """The recipe's [train] as the cost measurement trains it: without its budget and checkpointing, and with a
    schedule that decays over the budget (``linear``, ``linear_time``) held at its peak after the warm-up
    (``constant``): a round ends at a few updates, which such a schedule cannot describe, and the learning rate
    changes what an update computes, not what it costs."""
    opts = {k: v for k, v in train.items() if k not in STOPS + ("save_every", "log_every")}
    if opts.get("schedule") in ("linear", "linear_time"):
        opts["schedule"] = "constant"
    return opts


def measure_cost(out_dir: Path, systems: dict[str, System], shared: Shared, *, rounds: int, updates: int,
                 seed: int = 1) -> dict:
    """Training speed of each system relative to the first, measured in interleaved rounds.

    Every system trains with the grid's own model, optimiser, batches and data (``shared``, its encoder kept: the
    cost compares encodings; the schedule as :func:`measured_train` says), through :func:`xlpe.train.trainer.train`.
    Round ``r`` takes every system in turn from update ``r·updates`` to ``(r+1)·updates``, resuming its checkpoint,
    so that all systems meet the same machine noise. Round 0 is warm-up and is not counted. The tokens/s of a round
    is the trainer's own figure for that round's second half, which excludes model loading and checkpoint writing.
    Each system gets the median of its per-round tokens/s and of its per-round ratio to the reference. All systems
    see the same batches, since they share the seed.
    """
    from xlpe.train.trainer import train

    if rounds < 1 or updates < 2:
        raise ConfigError("the cost measurement needs cost_rounds >= 1 and cost_updates >= 2")
    opts = measured_train(shared.train)
    tps: dict[str, list[float]] = {n: [] for n in systems}
    for r in range(rounds + 1):
        for name, system in systems.items():
            budget = {"max_updates": (r + 1) * updates, "save_every": updates, "log_every": updates // 2,
                      "keep_last": 1, "cache_data": True, "progress": False}
            spec = RunSpec(system=dataclasses.replace(system, encoder_free=False, noise=0.0,
                                                      train={**system.train, **budget}), seed=seed,
                           shared=dataclasses.replace(shared, train=opts, corpus=dataclasses.replace(
                               shared.corpus, dev_src=None, dev_tgt=None)))
            train(*train_configs(out_dir / name, spec))
            if r:
                with open(out_dir / name / "train_log.csv", newline="") as f:
                    row = [x for x in csv.DictReader(f) if int(x["step"]) == (r + 1) * updates]
                tps[name].append(float(row[-1]["tokens_per_s"]))
    return {"rounds": rounds, "updates": updates, "threads": shared.threads, **_relative(tps, "tokens_per_s")}


@dataclass(frozen=True)
class DecodeCostInputs(Inputs):
    """The decoding-cost stage's key: the models by their checkpoints' signatures, the source and its channels by
    content, the decoding and the measurement's size. Threads are in it: they are what the stage measures."""

    checkpoints: dict
    src: list
    beam: int
    lenpen: float
    threads: int
    rounds: int
    sentences: int
    channels: dict


def _timeable(out: Path, names: list[str], seeds: list[int], copies: str) -> tuple[dict, dict, dict]:
    """Per system of ``names``, the model :func:`decode_cost_stage` times: ``(picked, signatures, checkpoints)``,
    where ``picked`` names a seed of ``out/runs`` (an int) or a copy in ``out/<copies>`` (``"copy of seed k"``),
    and ``checkpoints`` has the systems whose picked model is on this disk. Only finished runs count."""
    from xlpe.nn.checkpoint import latest_checkpoint

    recorded = recorded_params(Path(out), "decode-cost").get("checkpoints", {})
    cks, sigs, picked = {}, {}, {}
    for n in names:
        found: dict[Any, tuple] = {}
        places = [(s, Path(out) / "runs" / n / f"seed{s}" / "train") for s in seeds]
        if copies:
            places += [(f"copy of seed {s}", Path(out) / copies / n / f"seed{s}" / "train") for s in seeds]
        for label, train_dir in places:
            if not (train_dir.parent / "done.json").is_file():         # not trained, or still training
                continue
            sig = checkpoint_signature(train_dir)
            if sig is not None:
                ck = latest_checkpoint(train_dir) if train_dir.is_dir() else None
                found[label] = (sig, str(ck) if ck is not None else None)
        if not found:
            continue
        same = [s for s, (sig, _) in found.items() if sig == recorded.get(n)]
        local = [s for s, (_, ck) in found.items() if ck is not None]
        picked[n] = (same or local or list(found))[0]
        sigs[n], ck = found[picked[n]]
        if ck is not None:
            cks[n] = ck
    return picked, sigs, cks


def untimed(out: Path, names: list[str], seeds: list[int], copies: str) -> list[str]:
    """The systems of ``names`` that :func:`decode_cost_stage` cannot time on this disk: no model of theirs is here
    (in ``out/runs`` or ``out/<copies>``) and no recorded measurement names one that is still recorded."""
    recorded = recorded_params(Path(out), "decode-cost").get("checkpoints", {})
    _, sigs, cks = _timeable(out, names, seeds, copies)
    return [n for n in names if n not in cks and not (n in sigs and sigs[n] == recorded.get(n))]


def decode_cost_stage(out: Path, names: list[str], seeds: int | list[int], *, src: str, channels: dict[str, str],
                      beam: int, lenpen: float, threads: int, rounds: int, sentences: int = 200,
                      copies: str = "") -> dict:
    """:func:`measure_decode_cost` of one trained model per system of ``names`` (the first is the reference), found in
    ``out/runs/<name>/seed<k>/train`` or else, with ``copies``, in ``out/<copies>/<name>/seed<k>/train`` (runs
    trained again on this machine for the timing when the table's own were trained elsewhere), as the cached
    stage ``decode-cost``.

    Each system's model is that of the first of ``seeds`` whose checkpoint is on this disk, unless the stage's
    recorded measurement names a seed whose model is still there or archived (then that one, so that a made
    measurement stays). A table filled over several machines has each machine's checkpoints only; an archive keeps
    none, only their signatures: the recorded measurement is used then, and none is made without every checkpoint.
    The result names the seed timed per system (``seeds``; ``"copy of seed k"`` for a copy). Systems without any
    trained model are left out."""
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    picked, sigs, cks = _timeable(out, names, seeds, copies)
    for n in names:
        if n not in sigs:
            log.warning("decode cost: no trained model of %s (seeds %s); left out", n, seeds)
    if len(sigs) < 2 or names[0] not in sigs:
        return {}
    params = DecodeCostInputs(checkpoints=sigs, src=file_sig(src), beam=beam, lenpen=lenpen, threads=threads,
                              rounds=rounds, sentences=sentences,
                              channels={k: file_sig(v.split(":", 1)[-1]) for k, v in channels.items()})
    if len(cks) < len(sigs):                # restored from an archive: the recorded measurement or none
        cached = cached_result(Path(out), "decode-cost", params)
        if cached is None:
            log.warning("decode cost: the checkpoints of %s are not on this disk (another machine trained them, or an "
                        "archive left them out) and no measurement of them is recorded; left out",
                        ", ".join(sorted(set(sigs) - set(cks))))
        return cached or {}
    return run_stage(Path(out), "decode-cost", params, lambda d: dict(measure_decode_cost(
        cks, src=src, channels=channels, beam=beam, lenpen=lenpen, threads=threads, rounds=rounds,
        sentences=sentences), seeds=picked))


def _relative(per_round: dict[str, list[float]], unit: str) -> dict:
    """Each system's per-round speeds, their median and the median of its per-round ratios to the first system."""
    ref = next(iter(per_round))
    out: dict[str, Any] = {"reference": ref, "systems": {}}
    for name, v in per_round.items():
        ratios = [a / b for a, b in zip(v, per_round[ref])]
        out["systems"][name] = {unit: [round(x, 1) for x in v], f"{unit}_median": round(statistics.median(v), 1),
                                "relative_speed": round(statistics.median(ratios), 4),
                                "relative_speed_per_round": [round(x, 4) for x in ratios]}
    return out


def measure_decode_cost(checkpoints: dict[str, str], *, src: str, channels: dict[str, str], beam: int,
                        lenpen: float, threads: int, rounds: int, sentences: int = 200) -> dict:
    """Decoding speed (sentences/s, beam search from the source alone) of each system relative to the first, in
    interleaved rounds like :func:`measure_cost`: every round translates the same first ``sentences`` lines of
    ``src`` with every system in turn (models loaded once; round 0 is warm-up and is not counted), so that all
    systems meet the same machine noise. ``checkpoints`` maps a system to a trained checkpoint; ``channels`` are
    the test set's channel specs, each passed only to a model that reads it."""
    import torch

    from xlpe.infer.translate import translate_lines
    from xlpe.nn.checkpoint import load_model
    from xlpe.sources import open_sources

    if rounds < 1 or sentences < 1:
        raise ConfigError("the decoding cost measurement needs rounds >= 1 and sentences >= 1")
    lines = read_text(src)[:sentences]
    models = {n: load_model(ck) for n, ck in checkpoints.items()}
    sps: dict[str, list[float]] = {n: [] for n in checkpoints}
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for r in range(rounds + 1):
            for name, (model, _, sw) in models.items():
                specs = open_sources(only_channels(channels, model_reads(model.cfg)))
                t0 = time.perf_counter()
                with torch.inference_mode():
                    translate_lines(model, sw, lines, beam=beam, lenpen=lenpen, batch_size=64, channels=specs)
                if r:
                    sps[name].append(len(lines) / (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(before)
    return {"rounds": rounds, "sentences": len(lines), "beam": beam, "threads": threads,
            **_relative(sps, "sentences_per_s")}
