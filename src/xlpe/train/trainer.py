"""NMT training: one plain-code loop (read :func:`train` top to bottom), DDP-ready.

The loop owns everything it does, like a torchtune recipe: read the data, build the model, Adam with the
inverse-sqrt schedule, gradient accumulation over ``update_freq`` batches, clipping, optional autocast,
a progress bar and a metrics log, validation (loss, optional greedy BLEU) with early stopping, checkpoints.

* **Loss normalisation.** An update's gradient is that of ``(Σ label-smoothed CE + Σ_k w_k·aux_k·n_b) / N``
  where ``N`` is the number of target tokens of all accumulated batches on all ranks and ``n_b`` a batch's
  tokens: the per-token mean of SPEC §6.3 ``'paper'`` mode, ``L = L_nll + λ·L_pe``, whatever the batching.
* **Exact resumption.** Checkpoints hold model, optimizer, scheduler, grad scaler, batch sampler
  ``(epoch, position)``, the RNG states of every rank, and the counters; ``resume='auto'`` continues from
  the newest readable checkpoint in ``out`` and the run goes on as if it had never stopped (same batches
  in the same order, same dropout masks). Only ``max_*`` limits, logging and validation options may change
  between a run and its resumption without changing the result.
* **Distributed.** Launched by ``torchrun`` (``WORLD_SIZE > 1``), the model is wrapped in
  ``DistributedDataParallel`` (gloo on CPU, nccl on GPU) and the batch sampler deals each rank every
  ``WORLD_SIZE``-th batch. Rank 0 validates, logs and writes checkpoints.

Outputs in ``out``: ``checkpoint_<step>.pt`` (the last ``keep_last``), ``checkpoint_best.pt``,
``train_log.csv`` / ``valid_log.csv`` (or ``.jsonl``), ``run.json`` (command, configs, library versions).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import logging
import math
import os
import random
import sys
import time
import typing
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from xlpe.data.batching import CHANNEL_FILES, ParallelData, TokenBatchSampler, collate, read_channel_file
from xlpe.data.subword import PAD_ID, SubwordModel
from xlpe.errors import ConfigError, XlpeError
from xlpe.train.checkpoint import (checkpoint_path, get_rng_state, latest_checkpoint, list_checkpoints,
                                   load_checkpoint, prune_checkpoints, save_checkpoint, set_rng_state, subword_entry)
from xlpe.train.losses import combine_losses, label_smoothed_nll
from xlpe.train.schedule import KINDS as SCHEDULES, Schedule, build_scheduler

log = logging.getLogger(__name__)


def _opt(default: Any = dataclasses.MISSING, help: str = "", *, factory=None, choices=None, metavar=None):
    meta = {"help": help, "choices": choices, "metavar": metavar}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# ======================================================================================================
# configuration
# ======================================================================================================

@dataclass
class DataConfig:
    """Where the data is. Paths are plain text, one pre-tokenised sentence a line (words split on ASCII space)."""

    train_src: str = _opt("", "source side of the training bitext")
    train_tgt: str = _opt("", "target side of the training bitext (line-aligned with --train-src)")
    dev_src: str | None = _opt(None, "source side of the development set (validation loss / BLEU)")
    dev_tgt: str | None = _opt(None, "target side of the development set (also the BLEU reference)")
    subword_model: str | None = _opt(None, "joint sentencepiece model for both sides (from `xlpe subword train`)")
    src_subword: str | None = _opt(None, "source-side sentencepiece model (separate vocabularies)")
    tgt_subword: str | None = _opt(None, "target-side sentencepiece model (separate vocabularies)")
    train_orders: str | None = _opt(None, "lader order lines for the training source (word level): "
                                          "gives channel 'xl', pos_XL = inverse order (SPEC §4.1)")
    dev_orders: str | None = _opt(None, "lader order lines for the dev source (channel 'xl')")
    orders_level: str = _opt("word", "granularity of the order files: 'word' (expanded to subwords, each word's "
                                     "pieces kept together) or 'subword' (one index per subword)",
                             choices=("word", "subword"))
    train_orders_noise: float = _opt(0.0, "noise attack (SPEC §4.8): swap this ratio of the training pos_XL "
                                          "indices, in disjoint pairs; dev data stays clean")
    noise_seed: int = _opt(0, "seed of the noise attack")
    noise_unit: str = _opt("indices", "what the noise ratio counts: 'indices' (SPEC §4.8) or 'pairs' (§12.9)",
                           choices=("indices", "pairs"))
    train_dpe: str | None = _opt(None, "DPE targets for the training source, Pharaoh 'i-p' lines over subword "
                                       "indices (channel 'dpe_target', SPEC §6.2)")
    train_channels: dict[str, str] = _opt(help="extra per-word integer channel files for training, NAME=FILE "
                                               "(one line of integers per sentence)", factory=dict, metavar="NAME=FILE")
    dev_channels: dict[str, str] = _opt(help="extra per-word integer channel files for the dev set, NAME=FILE",
                                        factory=dict, metavar="NAME=FILE")
    skip_long: bool = _opt(False, "skip (and count) training pairs longer than the model's max_len, or with an "
                                  "empty side, instead of stopping with an error")

    def subword_paths(self) -> tuple[str, str | None]:
        """``(source model, target model or None for joint)``."""
        if self.subword_model and (self.src_subword or self.tgt_subword):
            raise ConfigError("give either subword_model (joint) or src_subword + tgt_subword, not both")
        if self.subword_model:
            return self.subword_model, None
        if self.src_subword and self.tgt_subword:
            return self.src_subword, self.tgt_subword
        raise ConfigError("no subword model: give subword_model (joint vocabulary) or src_subword and tgt_subword")


#: weights of the auxiliary losses models may return (SPEC §10: DPE lambda 0.5)
DEFAULT_AUX_WEIGHTS: dict[str, float] = {"loss_dpe": 0.5}


@dataclass
class TrainConfig:
    """Every training option. Limits of 0 mean "no limit"; at least one of the ``max_*`` limits must be set."""

    out: str = _opt("runs/nmt", "output directory: checkpoints, logs, run.json")
    resume: str = _opt("auto", "'auto' = continue from the newest checkpoint in --out if there is one; 'none' = "
                               "start fresh (refused when --out already holds checkpoints); or a checkpoint path")
    seed: int = _opt(1, "random seed (model init, batch order, dropout)")
    # optimisation
    lr: float = _opt(5e-4, "peak learning rate (reached at the end of warm-up)")
    betas: tuple[float, float] = _opt((0.9, 0.98), "Adam betas", metavar=("B1", "B2"))
    adam_eps: float = _opt(1e-8, "Adam epsilon")
    weight_decay: float = _opt(0.0, "Adam weight decay (L2, as torch.optim.Adam applies it)")
    schedule: str = _opt("inverse_sqrt", "learning-rate schedule (see xlpe.train.schedule)", choices=SCHEDULES)
    warmup: int = _opt(4000, "linear warm-up updates")
    warmup_init_lr: float = _opt(1e-7, "learning rate of the first update (start of the warm-up)")
    end_lr: float = _opt(0.0, "final learning rate of the 'linear' schedule (reached at max_updates)")
    label_smoothing: float = _opt(0.1, "label smoothing epsilon")
    clip_norm: float = _opt(0.0, "clip the gradient norm to this value (0 = no clipping)")
    aux_weights: dict[str, float] = _opt(help="weight of each auxiliary loss the model returns, NAME=W; added to "
                                              "the defaults (loss_dpe: DPE's lambda, SPEC §6.3; 0 switches one off)",
                                         factory=lambda: dict(DEFAULT_AUX_WEIGHTS), metavar="NAME=W")
    # batching
    max_tokens: int = _opt(4096, "token budget of one batch, padding included (per process)")
    max_sentences: int | None = _opt(None, "cap on sentences per batch")
    batch_multiple: int = _opt(1, "round full batches down to a multiple of this many sentences, the rest going "
                                  "to the next batch (fairseq's --required-batch-size-multiple, 8 there)")
    update_freq: int = _opt(1, "accumulate gradients over this many batches per update")
    bucket: bool = _opt(True, "batch sentences of similar length together")
    # stopping
    max_updates: int = _opt(0, "stop after this many updates (0 = no limit)")
    max_epochs: int = _opt(0, "stop after this many passes over the training data (0 = no limit)")
    max_time_minutes: float = _opt(0.0, "stop after this much training time, summed over resumptions (0 = no limit)")
    patience: int = _opt(0, "early stopping: stop after this many validations without improvement (0 = off)")
    # validation and checkpoints
    validate_every: int = _opt(1000, "validate every N updates (and at the end; 0 = only at the end)")
    dev_bleu: bool = _opt(False, "also compute dev BLEU (greedy decoding, sacrebleu) when validating")
    best_metric: str = _opt("loss", "metric for checkpoint_best.pt and early stopping", choices=("loss", "bleu"))
    save_every: int = _opt(1000, "write a checkpoint every N updates (and at the end; 0 = only at the end)")
    keep_last: int = _opt(5, "keep the newest N step checkpoints (0 = keep all)")
    # execution
    amp: str = _opt("none", "autocast: bf16 (GPU or CPU) or fp16 (GPU, with loss scaling)",
                    choices=("none", "bf16", "fp16"))
    device: str = _opt("auto", "cpu, cuda, cuda:N, or auto (cuda when available)")
    threads: int = _opt(0, "torch CPU threads per process (0 = torch's default)")
    log_every: int = _opt(100, "write a training log row every N updates")
    log_format: str = _opt("csv", "format of train_log / valid_log", choices=("csv", "jsonl"))
    progress: bool = _opt(True, "show a progress bar (rank 0)")
    cache_data: bool = _opt(True, "keep the encoded training data in OUT/cache/*.npz and reuse it while the "
                                  "text, channel and subword files are unchanged")

    def __post_init__(self):
        self.betas = tuple(float(b) for b in self.betas)
        self.aux_weights = {**DEFAULT_AUX_WEIGHTS, **{str(k): float(v) for k, v in dict(self.aux_weights).items()}}
        bad = []
        if len(self.betas) != 2:
            bad.append("betas needs two values")
        if self.update_freq < 1:
            bad.append("update_freq must be >= 1")
        if self.max_tokens < 1:
            bad.append("max_tokens must be >= 1")
        if not 0.0 <= self.label_smoothing < 1.0:
            bad.append("label_smoothing must be in [0, 1)")
        for name, choices in (("amp", ("none", "bf16", "fp16")), ("best_metric", ("loss", "bleu")),
                              ("log_format", ("csv", "jsonl")), ("schedule", SCHEDULES)):
            if getattr(self, name) not in choices:
                bad.append(f"{name} must be one of {', '.join(choices)}, not {getattr(self, name)!r}")
        if min(self.max_updates, self.max_epochs, self.patience, self.save_every, self.validate_every,
               self.keep_last, self.threads) < 0 or self.max_time_minutes < 0:
            bad.append("limits and intervals must be >= 0")
        if self.log_every < 1:
            bad.append("log_every must be >= 1")
        if bad:
            raise ConfigError("invalid TrainConfig: " + "; ".join(bad))

    def schedule_obj(self) -> Schedule:
        return Schedule(self.schedule, self.lr, self.warmup, self.warmup_init_lr,
                        self.max_updates or None, self.end_lr)


#: the fields whose change on resumption would change what the remaining run computes
_RESUME_FIXED = ("seed", "lr", "betas", "adam_eps", "weight_decay", "schedule", "warmup", "warmup_init_lr",
                 "label_smoothing", "clip_norm", "aux_weights", "max_tokens", "max_sentences", "update_freq",
                 "bucket", "amp", "batch_multiple")


@dataclass
class TrainResult:
    """What :func:`train` returns: where it stopped and why, and the trained model (unwrapped)."""
    step: int
    epoch: int
    stop_reason: str
    best: float | None
    last_checkpoint: Path | None
    out: Path
    model: torch.nn.Module
    model_config: Any
    valid: dict[str, float] = field(default_factory=dict)


# ======================================================================================================
# pieces of the loop
# ======================================================================================================

@dataclass
class _Dist:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    initialized_here: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world > 1


def _init_distributed(device_opt: str) -> _Dist:
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist()
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    here = False
    if not dist.is_initialized():
        cuda = torch.cuda.is_available() and device_opt != "cpu"
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
        here = True
    return _Dist(dist.get_rank(), dist.get_world_size(), local, here)


def _device(opt: str, d: _Dist) -> torch.device:
    if opt == "auto":
        opt = "cuda" if torch.cuda.is_available() else "cpu"
    if opt == "cuda" and d.enabled:
        return torch.device("cuda", d.local_rank)
    dev = torch.device(opt)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' asked for but no GPU is available")
    return dev


def _autocast(amp: str, device: torch.device):
    if amp == "none":
        return contextlib.nullcontext
    if amp == "fp16" and device.type != "cuda":
        raise ConfigError("amp='fp16' needs a GPU; on CPU use amp='bf16'")
    dtype = torch.bfloat16 if amp == "bf16" else torch.float16
    return lambda: torch.autocast(device_type=device.type, dtype=dtype)


def _seed_all(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _channel_files(orders: str | None, dpe: str | None, extra: Mapping[str, str], orders_level: str = "word",
                   noise: dict | None = None) -> dict[str, tuple]:
    """channel name -> (file kind, path, read options)."""
    files: dict[str, tuple] = {}
    if orders:
        files["xl"] = ("orders" if orders_level == "word" else "subword-orders", orders, noise or {})
    if dpe:
        files["dpe_target"] = ("dpe", dpe, {})
    for name, path in extra.items():
        if name in files:
            raise ConfigError(f"channel {name!r} is given twice")
        files[name] = ("ints", path, {})
    return files


def _check_channels(mcfg, files: Mapping[str, tuple], which: str) -> None:
    """A :class:`ConfigError` before any work when the model reads a channel that the data does not give."""
    from xlpe.nn.positions import required_channels

    how = {"xl": "orders (lader order lines from `xlpe preorder apply`, or oracle orders from `xlpe orders`)",
           "dpe_target": "dpe (DPE targets from `xlpe orders`)"}
    for ch in sorted(required_channels(mcfg) - set(files)):
        raise ConfigError(f"the model (pe={mcfg.pe}) reads position channel {ch!r}, but the {which} data has no "
                          f"{which}_{how.get(ch, 'channels ' + ch + '=FILE')}")


def _encode_corpus(src: str, tgt: str, src_sw: SubwordModel, tgt_sw: SubwordModel, channel_files: Mapping,
                   max_len: int, skip_long: bool, cache_dir: Path | None, d: "_Dist") -> ParallelData:
    """Encode a bitext (with its channel files), through an ``.npz`` cache keyed by the inputs' paths, sizes,
    modification times, the subword models and the options; with DDP rank 0 encodes and the others load."""
    def build() -> ParallelData:
        ch = {k: read_channel_file(kind, path, **opts) for k, (kind, path, opts) in channel_files.items()}
        lv = {k: CHANNEL_FILES[kind][1] for k, (kind, _, _) in channel_files.items()}
        return ParallelData.from_files(src, tgt, src_sw, tgt_sw, max_src_len=max_len, max_tgt_len=max_len,
                                       skip_long=skip_long, channels=ch, channel_level=lv)
    if cache_dir is None:
        return build()
    import hashlib

    def stat(p):
        st = os.stat(p)
        return [os.path.abspath(p), st.st_size, st.st_mtime_ns]
    key = {"v": 2, "src": stat(src), "tgt": stat(tgt), "max_len": max_len, "skip_long": skip_long,
           "sw": [hashlib.sha256(src_sw.proto).hexdigest(), hashlib.sha256(tgt_sw.proto).hexdigest()],
           "channels": {k: [kind, *stat(path), opts] for k, (kind, path, opts) in sorted(channel_files.items())}}
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
    if d.enabled:
        import torch.distributed as dist
        dist.barrier()
        if data is None:
            data = ParallelData.load(path)
    return data


class _MetricsLog:
    """Append-only CSV / JSON-lines log. On resumption, rows after the resumed step are dropped first."""

    def __init__(self, path: Path, fmt: str, resume_step: int | None):
        self.path, self.fmt = path, fmt
        self.header: list[str] | None = None
        if resume_step is None:
            path.unlink(missing_ok=True)
        elif path.exists():
            rows = self._read()
            kept = [r for r in rows if int(float(r.get("step", 0))) <= resume_step]
            self._rewrite(kept, self.header)

    def _read(self) -> list[dict]:
        with open(self.path, encoding="utf-8", newline="") as f:
            if self.fmt == "jsonl":
                return [json.loads(l) for l in f if l.strip()]
            r = csv.DictReader(f)
            self.header = list(r.fieldnames or [])
            return list(r)

    def _rewrite(self, rows: list[dict], header: list[str] | None) -> None:
        from xlpe.io.atomic import atomic_write
        with atomic_write(self.path) as f:
            if self.fmt == "jsonl":
                for r in rows:
                    f.write(json.dumps(r) + "\n")
            elif header:
                w = csv.DictWriter(f, header, restval="")
                w.writeheader()
                w.writerows(rows)

    def write(self, row: dict) -> None:
        row = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in row.items()}
        if self.fmt == "jsonl":
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(row) + "\n")
            return
        if self.header is None and self.path.exists() and self.path.stat().st_size:
            self._read()
        if self.header is None or set(row) - set(self.header):
            old = self._read() if self.path.exists() and self.path.stat().st_size else []
            self.header = (self.header or []) + [k for k in row if k not in (self.header or [])]
            self._rewrite(old, self.header)
        with open(self.path, "a", encoding="utf-8", newline="") as f:
            csv.DictWriter(f, self.header, restval="").writerow(row)


@torch.no_grad()
def evaluate_loss(model: torch.nn.Module, data: ParallelData, *, max_tokens: int, device: torch.device,
                  label_smoothing: float = 0.0, autocast=contextlib.nullcontext) -> dict[str, float]:
    """Per-token label-smoothed loss, NLL and perplexity of ``model`` on ``data`` (eval mode, no dropout)."""
    was_training = model.training
    model.eval()
    budget = max(max_tokens, int(data.num_tokens.max()))
    loss = nll = 0.0
    ntok = 0
    for idx in TokenBatchSampler(data.num_tokens, budget, shuffle=False):
        b = collate([data[i] for i in idx]).to(device)
        with autocast():
            logits = model(b.src, b.tgt_in, b.channels)
        l, n = label_smoothed_nll(logits, b.tgt_out, label_smoothing, ignore_index=PAD_ID, reduction="sum")
        loss, nll, ntok = loss + l.item(), nll + n.item(), ntok + b.ntokens
    model.train(was_training)
    return {"valid_loss": loss / ntok, "valid_nll": nll / ntok, "valid_ppl": math.exp(min(nll / ntok, 50.0))}


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


# ======================================================================================================
# the loop
# ======================================================================================================

def train(model_cfg, train_cfg: TrainConfig, data: DataConfig) -> TrainResult:
    """Train an NMT model; see the module docstring.

    Args:
        model_cfg: a :class:`xlpe.nn.transformer.TransformerConfig` (or its dict). Its vocabulary sizes are
            set from the subword models.
        train_cfg: the training options.
        data: the data files.
    """
    from xlpe.nn.transformer import TransformerConfig, build_model, count_parameters

    cfg = train_cfg
    dist_ = _init_distributed(cfg.device)
    try:
        device = _device(cfg.device, dist_)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        autocast = _autocast(cfg.amp, device)
        out = Path(cfg.out)
        if dist_.is_main:
            out.mkdir(parents=True, exist_ok=True)

        # -- where do we start? ---------------------------------------------------------------------
        resume_from = _resume_path(cfg.resume, out)
        ck = load_checkpoint(resume_from) if resume_from is not None else None

        # -- subwords, model config, data -------------------------------------------------------------
        src_path, tgt_path = data.subword_paths()
        src_sw = SubwordModel.load(src_path)
        tgt_sw = SubwordModel.load(tgt_path) if tgt_path else src_sw
        mdict = model_cfg.to_dict() if hasattr(model_cfg, "to_dict") else dict(model_cfg)
        mdict.update(src_vocab_size=src_sw.vocab_size, tgt_vocab_size=None if tgt_path is None else tgt_sw.vocab_size)
        mcfg = TransformerConfig.from_dict(mdict)
        if ck is not None:
            _check_resume_compatible(ck, mcfg, cfg, resume_from)
        if not data.train_src or not data.train_tgt:
            raise ConfigError("train_src and train_tgt are required")
        cache = out / "cache" if cfg.cache_data else None
        noise = ({"noise": data.train_orders_noise, "noise_seed": data.noise_seed, "noise_unit": data.noise_unit}
                 if data.train_orders_noise else None)
        train_files = _channel_files(data.train_orders, data.train_dpe, data.train_channels, data.orders_level, noise)
        _check_channels(mcfg, train_files, "train")
        dev_files = None
        if data.dev_src or data.dev_tgt:
            if not (data.dev_src and data.dev_tgt):
                raise ConfigError("give both dev_src and dev_tgt")
            dev_files = _channel_files(data.dev_orders, None, data.dev_channels, data.orders_level)
            _check_channels(mcfg, dev_files, "dev")
        train_data = _encode_corpus(data.train_src, data.train_tgt, src_sw, tgt_sw, train_files,
                                    mcfg.max_len, data.skip_long, cache, dist_)
        dev_data = dev_refs = None
        if dev_files is not None:
            dev_data = _encode_corpus(data.dev_src, data.dev_tgt, src_sw, tgt_sw, dev_files,
                                      mcfg.max_len, False, None, dist_)
            if cfg.dev_bleu:
                from xlpe.io.text import read_lines
                dev_refs = [t for _, t in read_lines(data.dev_tgt)]
        if cfg.best_metric == "bleu" and not cfg.dev_bleu:
            raise ConfigError("best_metric='bleu' needs dev_bleu=True")
        if not (cfg.max_updates or cfg.max_epochs or cfg.max_time_minutes or (cfg.patience and dev_data)):
            raise ConfigError("no stopping rule: set max_updates, max_epochs, max_time_minutes or patience (with a dev set)")

        # -- model, optimizer, schedule, batches ------------------------------------------------------
        _seed_all(cfg.seed)
        model = build_model(mcfg).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr, betas=cfg.betas, eps=cfg.adam_eps,
                                     weight_decay=cfg.weight_decay)
        scheduler = build_scheduler(optimizer, cfg.schedule_obj())
        scaler = torch.amp.GradScaler("cuda") if cfg.amp == "fp16" else None
        sampler = TokenBatchSampler(train_data.num_tokens, cfg.max_tokens, max_sentences=cfg.max_sentences,
                                    shuffle=True, seed=cfg.seed, bucket=cfg.bucket,
                                    num_replicas=dist_.world, rank=dist_.rank, batch_multiple=cfg.batch_multiple)
        step, best, bad_vals, wall_before, last_valid = 0, None, 0, 0.0, {}
        if ck is not None:
            model.load_state_dict(ck["model"])
            optimizer.load_state_dict(ck["optimizer"])
            scheduler.load_state_dict(ck["scheduler"])
            if scaler is not None and ck.get("scaler"):
                scaler.load_state_dict(ck["scaler"])
            sampler.load_state_dict(ck["sampler"])
            step, best, bad_vals = int(ck["step"]), ck.get("best"), int(ck.get("bad_validations", 0))
            wall_before = float(ck.get("wall_time", 0.0))
            rng = ck["rng"]
            if len(rng) != dist_.world:
                log.warning("checkpoint has RNG states of %d processes, this run has %d: dropout masks will differ",
                            len(rng), dist_.world)
            set_rng_state(rng[dist_.rank % len(rng)])
            if dist_.is_main:
                log.info("resumed from %s at update %d (epoch %d, batch %d)", resume_from, step, sampler.epoch,
                         sampler.position)
        elif dist_.rank:
            _seed_all(cfg.seed + dist_.rank)    # other dropout masks on other ranks
        if dist_.enabled:
            from torch.nn.parallel import DistributedDataParallel
            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        net = _unwrap(model)

        if dist_.is_main:
            log.info("model: %s parameters; %d training pairs (%d skipped), %d batches per epoch per process",
                     f"{count_parameters(net):,}", len(train_data), train_data.skipped, len(sampler))
            _write_run_info(out, mcfg, cfg, data)
        resumed_step = step if ck is not None else None
        suffix = ".csv" if cfg.log_format == "csv" else ".jsonl"
        train_log = _MetricsLog(out / f"train_log{suffix}", cfg.log_format, resumed_step) if dist_.is_main else None
        valid_log = _MetricsLog(out / f"valid_log{suffix}", cfg.log_format, resumed_step) if dist_.is_main else None
        del ck

        def state_dict() -> dict:
            rng = [get_rng_state()]
            if dist_.enabled:
                import torch.distributed as dist
                rng = [None] * dist_.world
                dist.all_gather_object(rng, get_rng_state())
            return {"model": net.state_dict(), "model_config": mcfg.to_dict(), "train_config": dataclasses.asdict(cfg),
                    "data_config": dataclasses.asdict(data),
                    "subwords": {"src": subword_entry(src_sw), "tgt": None if tgt_path is None else subword_entry(tgt_sw)},
                    "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                    "scaler": scaler.state_dict() if scaler is not None else None, "sampler": sampler.state_dict(),
                    "rng": rng, "step": step, "epoch": sampler.epoch, "best": best, "bad_validations": bad_vals,
                    "wall_time": wall_before + (time.monotonic() - t0)}

        def save(path: Path) -> None:
            t = time.monotonic()
            state = state_dict()             # every rank takes part (RNG gather)
            if dist_.is_main:
                save_checkpoint(path, state)
                prune_checkpoints(out, cfg.keep_last)
            interval.paused += time.monotonic() - t

        def log_row() -> None:
            row = interval.flush(dist_)       # every rank takes part (all-reduce)
            row = {"step": step, "epoch": sampler.epoch, **row, "wall_time": wall_before + (time.monotonic() - t0)}
            if train_log is not None:
                train_log.write(row)
            if bar is not None:
                bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}")

        def validate() -> bool:
            nonlocal last_valid, bad_vals, best, valid_step
            t = time.monotonic()
            last_valid, improved, bad_vals, best = _validate(net, dev_data, dev_refs, tgt_sw, cfg, device, autocast,
                                                             dist_, best, bad_vals)
            interval.paused += time.monotonic() - t
            valid_step = step
            if valid_log is not None:
                valid_log.write({"step": step, "epoch": sampler.epoch, **last_valid, "best": best,
                                 "wall_time": wall_before + (time.monotonic() - t0)})
            return improved

        # -- the loop -----------------------------------------------------------------------------
        t0 = time.monotonic()
        valid_step = None
        model.train()
        bar = _progress(cfg, dist_, step)
        interval = _Interval()
        stop_reason, last_saved = None, None
        batches = iter(sampler)
        while stop_reason is None:
            if cfg.max_updates and step >= cfg.max_updates:
                stop_reason = "max_updates"
                break
            group = list(islice(batches, cfg.update_freq))
            if not group:                                    # end of an epoch
                if cfg.max_epochs and sampler.epoch + 1 >= cfg.max_epochs:
                    stop_reason = "max_epochs"
                    break
                sampler.set_epoch(sampler.epoch + 1)
                batches = iter(sampler)
                continue

            # one update: forward/backward over the group, then clip, step, schedule
            micro = [collate([train_data[i] for i in idx]).to(device, non_blocking=True) for idx in group]
            ntok = sum(b.ntokens for b in micro)
            total_tokens = _all_sum(ntok, dist_) if dist_.enabled else ntok
            scale = dist_.world / total_tokens
            optimizer.zero_grad(set_to_none=True)
            for k, b in enumerate(micro):
                sync = model.no_sync() if dist_.enabled and k < len(micro) - 1 else contextlib.nullcontext()
                with sync:
                    with autocast():
                        logits, aux = model(b.src, b.tgt_in, b.channels, return_aux=True)
                    loss_sum, nll_sum = label_smoothed_nll(logits, b.tgt_out, cfg.label_smoothing,
                                                           ignore_index=PAD_ID, reduction="sum",
                                                           overwrite_logits=True)
                    del logits          # now the loss's softmax buffer: nothing else may read it
                    obj, parts = combine_losses(loss_sum, {n: v * b.ntokens for n, v in aux.items()
                                                           if torch.is_tensor(v) and v.dim() == 0}, cfg.aux_weights)
                    obj = obj * scale
                    (scaler.scale(obj) if scaler is not None else obj).backward()
                interval.add(loss_sum.item(), nll_sum.item(), b.ntokens, len(b), {n: p.item() for n, p in parts.items()})
            interval.lr = optimizer.param_groups[0]["lr"]          # the rate this update uses
            if scaler is not None:
                scaler.unscale_(optimizer)
            gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm if cfg.clip_norm > 0 else math.inf)
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            scheduler.step()
            step += 1
            interval.gnorm += float(gnorm)
            interval.updates += 1
            if bar is not None:
                bar.update(1)

            # logging, validation, checkpoints, limits
            wall = wall_before + (time.monotonic() - t0)
            if step % cfg.log_every == 0:
                log_row()
            if cfg.max_time_minutes and _decide(wall >= cfg.max_time_minutes * 60, dist_):
                stop_reason = "max_time"
            if dev_data is not None and cfg.validate_every and step % cfg.validate_every == 0:
                improved = validate()
                if cfg.patience and bad_vals >= cfg.patience and stop_reason is None:
                    stop_reason = "early_stopping"
                if improved:
                    save(out / "checkpoint_best.pt")
            if cfg.save_every and step % cfg.save_every == 0:
                save(checkpoint_path(out, step))
                last_saved = step

        # -- the end: a last validation, log row and checkpoint for the final state ---------------------------
        if dev_data is not None and valid_step != step:
            if validate():
                save(out / "checkpoint_best.pt")
        if interval.ntok:
            log_row()
        if last_saved != step:
            save(checkpoint_path(out, step))
        if bar is not None:
            bar.close()
        if dist_.is_main:
            log.info("stopped after update %d (%s)%s", step, stop_reason,
                     "" if best is None else f"; best {cfg.best_metric} {best:.4f}")
        if dist_.enabled:
            import torch.distributed as dist
            dist.barrier()                      # the last checkpoint is on disk before any rank returns
        return TrainResult(step, sampler.epoch, stop_reason or "", best, checkpoint_path(out, step), out, net, mcfg,
                           last_valid)
    finally:
        if dist_.initialized_here:
            import torch.distributed as dist
            dist.destroy_process_group()


class _Interval:
    """Sums over the updates since the last log row (``lr`` is the last update's, ``grad_norm`` the mean
    pre-clipping norm)."""

    def __init__(self):
        self._reset()

    def _reset(self):
        self.loss = self.nll = 0.0
        self.ntok = self.nsent = 0
        self.aux: dict[str, float] = {}
        self.gnorm = self.lr = 0.0
        self.updates = 0
        self.t = time.monotonic()
        self.paused = 0.0           # validation and checkpoint time, not counted in tokens/s

    def add(self, loss: float, nll: float, ntok: int, nsent: int, aux: Mapping[str, float]) -> None:
        self.loss += loss
        self.nll += nll
        self.ntok += ntok
        self.nsent += nsent
        for k, v in aux.items():
            self.aux[k] = self.aux.get(k, 0.0) + v

    def flush(self, d: _Dist) -> dict:
        keys = sorted(self.aux)
        vals = [self.loss, self.nll, float(self.ntok), float(self.nsent)] + [self.aux[k] for k in keys]
        if d.enabled:
            import torch.distributed as dist
            t = torch.tensor(vals, dtype=torch.float64)
            dist.all_reduce(t)
            vals = t.tolist()
        loss, nll, ntok, nsent = vals[:4]
        ntok = max(ntok, 1.0)
        dt = max(time.monotonic() - self.t - self.paused, 1e-9)
        row = {"loss": loss / ntok, "nll": nll / ntok, "ppl": math.exp(min(nll / ntok, 50.0))}
        row.update({k: v / ntok for k, v in zip(keys, vals[4:])})     # aux_k·n_b summed / N = token-weighted mean
        row.update({"lr": self.lr, "grad_norm": self.gnorm / max(self.updates, 1), "tokens_per_s": ntok / dt, "sentences": int(nsent)})
        self._reset()
        return row


def _all_sum(x: int, d: _Dist) -> int:
    import torch.distributed as dist
    t = torch.tensor([x], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def _decide(flag: bool, d: _Dist) -> bool:
    """Rank 0's decision, shared with every rank."""
    if not d.enabled:
        return flag
    import torch.distributed as dist
    obj = [flag]
    dist.broadcast_object_list(obj, src=0)
    return bool(obj[0])


def _validate(net, dev_data, dev_refs, tgt_sw, cfg: TrainConfig, device, autocast, d: _Dist, best, bad_vals):
    """Validation on rank 0, its outcome shared with all ranks: ``(metrics, improved, bad_vals, best)``."""
    out = None
    if d.is_main:
        metrics = evaluate_loss(net, dev_data, max_tokens=cfg.max_tokens, device=device,
                                label_smoothing=cfg.label_smoothing, autocast=autocast)
        if cfg.dev_bleu:
            import sacrebleu
            from xlpe.infer.translate import translate_data
            hyps = translate_data(net, dev_data, tgt_sw, greedy=True, max_tokens=cfg.max_tokens, device=device)
            metrics["valid_bleu"] = sacrebleu.corpus_bleu(hyps, [dev_refs]).score
        value = metrics["valid_bleu"] if cfg.best_metric == "bleu" else metrics["valid_loss"]
        improved = best is None or (value > best if cfg.best_metric == "bleu" else value < best)
        out = (metrics, improved, 0 if improved else bad_vals + 1, value if improved else best)
    if d.enabled:
        import torch.distributed as dist
        obj = [out]
        dist.broadcast_object_list(obj, src=0)
        out = obj[0]
    return out


def _progress(cfg: TrainConfig, d: _Dist, step: int):
    if not (cfg.progress and d.is_main):
        return None
    from tqdm.auto import tqdm
    return tqdm(total=cfg.max_updates or None, initial=step, unit="upd", dynamic_ncols=True, desc="train")


def _resume_path(resume: str, out: Path) -> Path | None:
    if resume in ("none", "", None):
        if list_checkpoints(out):
            raise ConfigError(f"{out} already holds checkpoints of a run: continue it with resume='auto' "
                              "(--resume auto) or choose another output directory")
        return None
    if resume == "auto":
        p = latest_checkpoint(out)
        if p is None and list_checkpoints(out):
            raise XlpeError(f"{out}: no checkpoint there can be read (all are damaged); cannot resume")
        return p
    p = Path(resume)
    if not p.is_file():
        raise ConfigError(f"resume checkpoint {resume} not found")
    return p


def _check_resume_compatible(ck: Mapping, mcfg, cfg: TrainConfig, path: Path) -> None:
    old_m = ck["model_config"]
    diff = sorted(k for k, v in mcfg.to_dict().items() if old_m.get(k) != v)
    if diff:
        raise ConfigError(f"cannot resume from {path}: the model config differs in {', '.join(diff)} "
                          f"(checkpoint: {', '.join(f'{k}={old_m.get(k)!r}' for k in diff)})")
    old_t = ck.get("train_config") or {}
    changed = [k for k in _RESUME_FIXED if k in old_t and _norm(old_t[k]) != _norm(getattr(cfg, k))]
    if changed:
        log.warning("resuming %s with changed %s: the run is no longer an exact continuation", path,
                    ", ".join(f"{k} ({old_t[k]!r} -> {getattr(cfg, k)!r})" for k in changed))


def _norm(v):
    return list(v) if isinstance(v, tuple) else v


def _write_run_info(out: Path, mcfg, cfg: TrainConfig, data: DataConfig) -> None:
    import platform
    import xlpe
    versions = {"xlpe": xlpe.__version__, "python": platform.python_version(), "torch": torch.__version__,
                "numpy": np.__version__}
    for mod in ("sentencepiece", "sacrebleu"):
        with contextlib.suppress(Exception):
            versions[mod] = __import__(mod).__version__
    info = {"command": sys.argv, "data": dataclasses.asdict(data), "model": mcfg.to_dict(),
            "train": dataclasses.asdict(cfg), "versions": versions, "time": time.strftime("%Y-%m-%d %H:%M:%S")}
    from xlpe.io.atomic import atomic_write
    runs = out / "run.json"
    history = []
    if runs.exists():
        with contextlib.suppress(Exception):
            old = json.loads(runs.read_text(encoding="utf-8"))
            history = old if isinstance(old, list) else [old]
    with atomic_write(runs) as f:
        json.dump(history + [info], f, indent=1, default=str)


# ======================================================================================================
# command line: `xlpe train`
# ======================================================================================================

_MODEL_HELP = {
    "d_model": "model width", "n_heads": "attention heads", "d_ff": "feed-forward inner width",
    "enc_layers": "encoder layers", "dec_layers": "decoder layers", "dropout": "dropout rate",
    "attn_dropout": "dropout on attention weights", "activation_dropout": "dropout inside the feed-forward block",
    "activation": "feed-forward activation (relu | gelu)", "pre_norm": "pre-LayerNorm instead of post-LN",
    "init": "initialisation of attention/FFN weights (xavier | fairseq)",
    "share_embeddings": "one embedding table for source and target (needs a joint vocabulary)",
    "tie_output": "tie the decoder output projection to its input embedding",
    "max_len": "longest sequence (subwords incl. EOS) the model accepts",
    "pe": "source position encodings, e.g. --pe ape rpe (see xlpe.nn.positions)",
    "pe_options": "options of the position-encoding plugins, KEY=VALUE (VALUE parsed as TOML)",
    "rpe_k": "Shaw relative-position clipping distance k", "encoder_free": "encoder-free (context-free) model",
    "sinusoid_layout": "sinusoid layout (interleave | concat)", "sinusoid_freq": "sinusoid frequencies (paper | t2t)",
    "sinusoid_base": "sinusoid base (10000)",
}
_MODEL_SKIP = {"src_vocab_size", "tgt_vocab_size", "pad_id", "unk_id", "bos_id", "eos_id"}   # set from subwords


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _kv_type(value_type):
    def parse(text: str):
        if "=" not in text:
            raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
        k, v = text.split("=", 1)
        return k.strip(), value_type(v)
    return parse


def _toml_value(text: str):
    import tomllib
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except Exception:
        return text


def _add_fields(group, cls, *, dest_prefix: str, skip=(), help_table=None, show_default: bool = True) -> None:
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        tp = hints[f.name]
        meta = f.metadata or {}
        help_ = (help_table or {}).get(f.name) or meta.get("help") or f"{cls.__name__}.{f.name}"
        default = (f.default if f.default is not dataclasses.MISSING
                   else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None))
        kw: dict[str, Any] = {"dest": dest_prefix + f.name, "default": argparse.SUPPRESS}
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)) and type(None) in args:
            tp = next(a for a in args if a is not type(None))
            origin, args = typing.get_origin(tp), typing.get_args(tp)
        if tp is bool:
            kw["action"] = argparse.BooleanOptionalAction
        elif origin is tuple:
            kw.update(nargs=len(args), type=args[0])
        elif origin is list:
            kw.update(nargs="+", type=args[0] if args else str)
        elif origin is dict:
            vt = args[1] if args else str
            kw.update(action="append", type=_kv_type(_toml_value if vt is typing.Any else vt))
        else:
            kw["type"] = tp
        if meta.get("choices"):
            kw["choices"] = meta["choices"]
        if meta.get("metavar"):
            kw["metavar"] = meta["metavar"]
        elif origin is dict:
            kw["metavar"] = "KEY=VALUE"
        elif tp is not bool and "choices" not in kw:
            kw["metavar"] = f.name.upper()
        shown = f" (default: {default})" if show_default and default not in (None, "", {}, []) else \
            ("" if show_default else " (default: from the preset)")
        flag = _flag(f.name)
        if origin is dict:             # repeatable NAME=VALUE options read best in the singular
            flag = flag[:-1] if flag.endswith("s") else flag
            help_ += " (repeatable)"
        group.add_argument(flag, help=help_ + shown, **kw)


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``xlpe train``: data, model (a preset plus overrides), training, and ``--config``."""
    from xlpe.nn.transformer import PRESETS, TransformerConfig

    parser.add_argument("--config", help="TOML file with tables [data], [model] (preset + TransformerConfig fields) "
                                         "and [train]; its keys mirror the options here; command-line options win")
    _add_fields(parser.add_argument_group("data"), DataConfig, dest_prefix="data.")
    g = parser.add_argument_group("model (a preset, then TransformerConfig overrides)")
    g.add_argument("--preset", dest="model.preset", default=argparse.SUPPRESS, choices=list(PRESETS),
                   help="model size preset (default: small)")
    _add_fields(g, TransformerConfig, dest_prefix="model.", skip=_MODEL_SKIP, help_table=_MODEL_HELP,
                show_default=False)
    _add_fields(parser.add_argument_group("training"), TrainConfig, dest_prefix="train.")


_SECTIONS = ("data", "model", "train")


def configs_from_args(args: argparse.Namespace) -> tuple[Any, TrainConfig, DataConfig]:
    """Merge defaults < ``--config`` TOML < command line into ``(TransformerConfig, TrainConfig, DataConfig)``."""
    from xlpe.nn.transformer import TransformerConfig

    merged: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    if getattr(args, "config", None):
        merged = _read_toml(args.config)
    for key, value in vars(args).items():
        if "." not in key:
            continue
        section, name = key.split(".", 1)
        if isinstance(value, list) and value and isinstance(value[0], tuple):   # NAME=VALUE options
            value = {**merged[section].get(name, {}), **dict(value)}
        merged[section][name] = value
    model = dict(merged["model"])
    preset = model.pop("preset", "small")
    bad = sorted(set(model) & _MODEL_SKIP)
    if bad:
        raise ConfigError(f"model keys {bad} are set from the subword models and cannot be given")
    mcfg = TransformerConfig.from_preset(preset, **model)
    try:
        tcfg = TrainConfig(**merged["train"])
        dcfg = DataConfig(**merged["data"])
    except TypeError as e:
        raise ConfigError(f"configuration: {e}") from None
    return mcfg, tcfg, dcfg


def _read_toml(path: str) -> dict[str, dict[str, Any]]:
    import tomllib
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} not found") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML ({e})") from None
    unknown = sorted(set(doc) - set(_SECTIONS))
    if unknown:
        raise ConfigError(f"{path}: unknown table(s) {unknown}; expected {list(_SECTIONS)}")
    valid = {"data": {f.name for f in dataclasses.fields(DataConfig)},
             "train": {f.name for f in dataclasses.fields(TrainConfig)}}
    for s, names in valid.items():
        extra = sorted(set(doc.get(s, {})) - names)
        if extra:
            raise ConfigError(f"{path}: unknown key(s) {extra} in [{s}]; valid: {', '.join(sorted(names))}")
    return {s: dict(doc.get(s, {})) for s in _SECTIONS}


def cli_main(args: argparse.Namespace) -> int:
    mcfg, tcfg, dcfg = configs_from_args(args)
    result = train(mcfg, tcfg, dcfg)
    if result.last_checkpoint is not None and (not dist_rank()):
        print(json.dumps({"step": result.step, "epoch": result.epoch, "stop_reason": result.stop_reason,
                          "best": result.best, "checkpoint": str(result.last_checkpoint), **result.valid}))
    return 0


def dist_rank() -> int:
    return int(os.environ.get("RANK", "0"))
