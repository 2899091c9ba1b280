"""What a training run reads: the subword models, the model config completed with their vocabulary sizes, the
auxiliary losses' weights, and the encoded training and dev data (through an ``.npz`` cache), after checking the
options and the channels against the model and against the checkpoint a run resumes from."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch

from xlpe.data.channels import ChannelSource
from xlpe.data.corpus import ParallelData
from xlpe.data.subword import SubwordModel
from xlpe.errors import ConfigError, XlpeError
from xlpe.io.text import read_lines
from xlpe.nn.config import TransformerConfig
from xlpe.nn.positions import aux_loss_weights, required_inputs, required_targets
from xlpe.reorder.noise import NoisySource
from xlpe.runtime import Distributed
from xlpe.sources import check_channels, open_sources, split_spec
from xlpe.train.config import PRE_OPTION_VALUES, RESUME_FIXED, DataConfig, TrainConfig
from xlpe.train.losses import combine_losses

log = logging.getLogger("xlpe.train.trainer")     # the trainer's log: one logger for everything a run says


@dataclass
class TrainInputs:
    """The subword models, the model config with its vocabulary sizes, the auxiliary losses' weights, and the
    encoded training and dev data (``dev_refs``: the dev references, for BLEU)."""
    src_sw: SubwordModel
    tgt_sw: SubwordModel
    joint: bool                    # one subword model for both sides
    mcfg: TransformerConfig
    aux_weights: dict[str, float]
    train: ParallelData
    dev: ParallelData | None
    dev_refs: list[str] | None


def read_inputs(model_cfg, cfg: TrainConfig, data: DataConfig, ck: Mapping | None, resume_from: Path | None,
                out: Path, d: Distributed) -> TrainInputs:
    """Load the subword models, complete the model config, check the options against it (and against the
    checkpoint resumed from), and encode the training and dev data."""
    src_path, tgt_path = data.subword_paths()
    src_sw = SubwordModel.load(src_path)
    tgt_sw = SubwordModel.load(tgt_path) if tgt_path else src_sw
    mdict = model_cfg.to_dict() if hasattr(model_cfg, "to_dict") else dict(model_cfg)
    mdict.update(src_vocab_size=src_sw.vocab_size,
                 tgt_vocab_size=None if tgt_path is None else tgt_sw.vocab_size)
    mcfg = TransformerConfig.from_dict(mdict)
    if ck is not None:
        check_resume_compatible(ck, mcfg, cfg, resume_from)
    if not data.train_src or not data.train_tgt:
        raise ConfigError("train_src and train_tgt are required")
    cache = out / "cache" if cfg.cache_data else None
    aux_weights = aux_loss_weights(mcfg, cfg.aux_weights)
    combine_losses(torch.zeros(()), {k: torch.zeros(()) for k in aux_weights}, aux_weights,
                   mode=cfg.aux_loss_mode)                  # refuses bad weights now, not at the first batch
    train_specs, noise, dev_specs = _channel_specs(mcfg, data)
    train_data = encode_corpus(data.train_src, data.train_tgt, src_sw, tgt_sw, train_specs,
                                mcfg.max_len, data.skip_long, cache, d, noise)
    dev_data = dev_refs = None
    if dev_specs is not None:
        dev_data = encode_corpus(data.dev_src, data.dev_tgt, src_sw, tgt_sw, dev_specs,
                                  mcfg.max_len, False, None, d)
        if cfg.dev_bleu:
            dev_refs = [t for _, t in read_lines(data.dev_tgt)]
    if cfg.best_metric == "bleu" and not cfg.dev_bleu:
        raise ConfigError("best_metric='bleu' needs dev_bleu=True")
    if not (cfg.max_updates or cfg.max_epochs or cfg.max_time_minutes or (cfg.patience and dev_data)):
        raise ConfigError("no stopping rule: set max_updates, max_epochs, max_time_minutes or patience "
                          "(with a dev set)")
    return TrainInputs(src_sw, tgt_sw, tgt_path is None, mcfg, aux_weights, train_data, dev_data, dev_refs)


def _channel_specs(mcfg: TransformerConfig, data: DataConfig) -> tuple[dict, dict | None, dict | None]:
    """The training channels the model reads (checked), the noise attack's wrapper of channel ``xl`` (or
    None), and the dev channels (None without a dev set)."""
    train_reads = required_inputs(mcfg) | required_targets(mcfg)
    train_specs = data.channel_specs("train", train_reads)
    check_channels(mcfg, train_specs, "training", training=True)
    unread = sorted(set(train_specs) - train_reads)
    if unread:
        raise ConfigError(f"the model (pe={list(mcfg.pe)}) reads no channel {unread}: those training channels "
                          "would be ignored; leave them out")
    noise = None
    if data.train_orders_noise:
        if "xl" not in train_specs:
            raise ConfigError("train_orders_noise perturbs channel 'xl', but the training data has none")
        opts = {"noise": data.train_orders_noise, "seed": data.noise_seed, "unit": data.noise_unit}
        noise = {"xl": (opts, lambda s: NoisySource(s, data.train_orders_noise, data.noise_seed,
                                                    data.noise_unit))}
    dev_specs = None
    if data.dev_src or data.dev_tgt:
        if not (data.dev_src and data.dev_tgt):
            raise ConfigError("give both dev_src and dev_tgt")
        dev_specs = {k: v for k, v in data.channel_specs("dev", train_reads).items()
                     if k in required_inputs(mcfg)}
        check_channels(mcfg, dev_specs, "dev", training=False)
    return train_specs, noise, dev_specs


def encode_corpus(src: str, tgt: str, src_sw: SubwordModel, tgt_sw: SubwordModel,
                  specs: Mapping[str, str | ChannelSource],
                  max_len: int, skip_long: bool, cache_dir: Path | None, d: Distributed,
                  wrap: Mapping[str, tuple[dict, Any]] | None = None) -> ParallelData:
    """Encode a bitext with its channels (``name -> [KIND:]PATH``, :mod:`xlpe.sources`), through an ``.npz``
    cache keyed by the inputs' paths, sizes, modification times, the subword models and the options; with DDP
    rank 0 encodes and the others load. ``wrap`` maps a channel to ``(options, source -> source)``, e.g. the
    noise attack on the training ``xl`` channel; the options enter the cache key."""
    wrap = wrap or {}

    def build() -> ParallelData:
        sources: dict[str, ChannelSource] = open_sources(specs)
        for k, (_, fn) in wrap.items():
            sources[k] = fn(sources[k])
        return ParallelData.from_files(src, tgt, src_sw, tgt_sw, max_src_len=max_len, max_tgt_len=max_len,
                                       skip_long=skip_long, channels=sources)
    if cache_dir is None or any(isinstance(v, ChannelSource) for v in specs.values()):
        return build()                    # a source object has no content signature to key a cache by

    def stat(p):
        p = Path(p)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        return [[os.path.abspath(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]
    key = {"v": 3, "src": stat(src), "tgt": stat(tgt), "max_len": max_len, "skip_long": skip_long,
           "sw": [hashlib.sha256(src_sw.proto).hexdigest(), hashlib.sha256(tgt_sw.proto).hexdigest()],
           "channels": {k: [split_spec(k, v)[0], stat(split_spec(k, v)[1]), wrap.get(k, ({},))[0]]
                        for k, v in sorted(specs.items())}}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]
    path = cache_dir / f"{Path(src).name}-{digest}.npz"
    data = None
    if d.is_main:
        if path.exists():
            try:
                data = ParallelData.load(path)
            except XlpeError as e:
                log.warning("re-encoding: %s", e)
        if data is None:
            data = build()
            cache_dir.mkdir(parents=True, exist_ok=True)
            data.save(path)
    d.barrier()
    if data is None:
        data = ParallelData.load(path)
    return data



def check_resume_compatible(ck: Mapping, mcfg, cfg: TrainConfig, path: Path) -> None:
    """Refuse to resume a run whose model config differs from the checkpoint's; warn when an option that
    shapes the result (``RESUME_FIXED``) changed."""
    old_m = ck["model_config"]
    diff = sorted(k for k, v in mcfg.to_dict().items() if old_m.get(k) != v)
    if diff:
        raise ConfigError(f"cannot resume from {path}: the model config differs in {', '.join(diff)} "
                          f"(checkpoint: {', '.join(f'{k}={old_m.get(k)!r}' for k in diff)})")
    old_t = ck.get("train_config") or {}
    old_t = {**PRE_OPTION_VALUES, **old_t} if old_t else {}
    changed = [k for k in RESUME_FIXED if k in old_t and _norm(old_t[k]) != _norm(getattr(cfg, k))]
    if changed:
        log.warning("resuming %s with changed %s: the run is no longer an exact continuation", path,
                    ", ".join(f"{k} ({old_t[k]!r} -> {getattr(cfg, k)!r})" for k in changed))


def _norm(v):
    return list(v) if isinstance(v, tuple) else v
