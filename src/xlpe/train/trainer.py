"""NMT training: one plain-code loop (read :func:`train` top to bottom), DDP-ready.

The loop owns everything it does, like a torchtune recipe: read the data, build the model, Adam with the
inverse-sqrt schedule, gradient accumulation over ``update_freq`` batches, clipping, optional autocast or pure
bf16 with float32 master weights (:mod:`xlpe.train.master`),
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

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from xlpe.data.batching import TokenBatchSampler, collate
from xlpe.data.corpus import ParallelData
from xlpe.data.channels import ChannelSource
from xlpe.data.subword import PAD_ID, SubwordModel
from xlpe.errors import ConfigError, XlpeError
from xlpe.nn.checkpoint import checkpoint_path, load_checkpoint, prune_checkpoints, save_checkpoint, subword_entry
from xlpe.nn.config import TransformerConfig
from xlpe.nn.positions import aux_loss_weights, required_inputs, required_targets
from xlpe.nn.transformer import build_model, count_parameters
from xlpe.runtime import (AMP_FP32_FIX, Distributed, MetricsLog, adam_kwargs, autocast_context, get_rng_state,
                          init_distributed, limit_onednn_caches, progress_bar, release_freed_memory, resolve_device,
                          resume_path, retain_freed_memory, seed_all, set_rng_state, unwrap, warn_if_emulated_bf16,
                          write_run_info)
from xlpe.sources import check_channels, open_sources
from xlpe.train.config import PRE_OPTION_VALUES, RESUME_FIXED, DataConfig, TrainConfig
from xlpe.train.losses import combine_losses, projected_label_smoothed_nll
from xlpe.train.master import MasterWeights
from xlpe.train.schedule import build_scheduler
from xlpe.train.validation import validate as validate_on_dev

log = logging.getLogger(__name__)


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

def _encode_corpus(src: str, tgt: str, src_sw: SubwordModel, tgt_sw: SubwordModel,
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
    import hashlib

    def stat(p):
        p = Path(p)
        files = sorted(p.rglob("*")) if p.is_dir() else [p]
        return [[os.path.abspath(f), f.stat().st_size, f.stat().st_mtime_ns] for f in files if f.is_file()]
    from xlpe.sources import split_spec
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
    cfg = train_cfg
    dist_ = init_distributed(cfg.device)
    try:
        device = resolve_device(cfg.device, dist_)
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        # every update allocates and frees the same megabyte-sized activations: served from glibc's heap, not
        # from fresh pages (process-wide, as `xlpe translate` does; MALLOC_* settings win; docs/results/speed.md)
        retain_freed_memory()
        # bf16 products: oneDNN's caches would keep a primitive per batch shape (peak RSS; docs/results/speed.md)
        limit_onednn_caches()
        pure = cfg.amp == "bf16-pure"         # bf16 model, float32 master weights (xlpe.train.master)
        if pure:
            warn_if_emulated_bf16(device, AMP_FP32_FIX)
        autocast = autocast_context("none" if pure else cfg.amp, device)
        out = Path(cfg.out)
        if out.exists() and not out.is_dir():
            raise ConfigError(f"output directory {out} is a file")
        created = not out.exists()
        if dist_.is_main:
            out.mkdir(parents=True, exist_ok=True)

        # -- where do we start? ---------------------------------------------------------------------
        resume_from = resume_path(cfg.resume, out)
        ck = load_checkpoint(resume_from) if resume_from is not None else None
        if ck is not None and ck.get("optimizer") is None:
            raise ConfigError(f"{resume_from} is a model-only checkpoint (from `xlpe average`?): it holds no "
                              "optimizer state to resume training from; translate with it, or train in a new "
                              "directory")
        if ck is not None and dist_.is_main:
            for tmp in out.glob(".checkpoint_*.pt.*.tmp"):     # a write killed mid-way (atomic: never renamed)
                tmp.unlink(missing_ok=True)

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
        aux_weights = aux_loss_weights(mcfg, cfg.aux_weights)
        combine_losses(torch.zeros(()), {k: torch.zeros(()) for k in aux_weights}, aux_weights, mode=cfg.aux_loss_mode)  # refuses bad weights now, not at the first batch
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
            from xlpe.reorder.noise import NoisySource
            opts = {"noise": data.train_orders_noise, "seed": data.noise_seed, "unit": data.noise_unit}
            noise = {"xl": (opts, lambda s: NoisySource(s, data.train_orders_noise, data.noise_seed,
                                                        data.noise_unit))}
        dev_specs = None
        if data.dev_src or data.dev_tgt:
            if not (data.dev_src and data.dev_tgt):
                raise ConfigError("give both dev_src and dev_tgt")
            dev_specs = {k: v for k, v in data.channel_specs("dev", train_reads).items() if k in required_inputs(mcfg)}
            check_channels(mcfg, dev_specs, "dev", training=False)
        train_data = _encode_corpus(data.train_src, data.train_tgt, src_sw, tgt_sw, train_specs,
                                    mcfg.max_len, data.skip_long, cache, dist_, noise)
        dev_data = dev_refs = None
        if dev_specs is not None:
            dev_data = _encode_corpus(data.dev_src, data.dev_tgt, src_sw, tgt_sw, dev_specs,
                                      mcfg.max_len, False, None, dist_)
            if cfg.dev_bleu:
                from xlpe.io.text import read_lines
                dev_refs = [t for _, t in read_lines(data.dev_tgt)]
        if cfg.best_metric == "bleu" and not cfg.dev_bleu:
            raise ConfigError("best_metric='bleu' needs dev_bleu=True")
        if not (cfg.max_updates or cfg.max_epochs or cfg.max_time_minutes or (cfg.patience and dev_data)):
            raise ConfigError("no stopping rule: set max_updates, max_epochs, max_time_minutes or patience (with a dev set)")

        # -- model, optimizer, schedule, batches ------------------------------------------------------
        seed_all(cfg.seed)
        model = build_model(mcfg).to(device)
        if ck is not None:
            model.load_state_dict(ck["model"])
        master = MasterWeights(model) if pure else None
        optimizer = torch.optim.Adam(master.params if pure else model.parameters(), lr=cfg.lr, betas=cfg.betas,
                                     eps=cfg.adam_eps, weight_decay=cfg.weight_decay, **adam_kwargs(cfg.adam))
        budget_used = [0.0]         # linear_time: the share of max_time_minutes spent, set before each step
        scheduler = build_scheduler(optimizer, cfg.schedule_obj(), progress=lambda: budget_used[0])
        scaler = torch.amp.GradScaler("cuda") if cfg.amp == "fp16" else None
        sampler = TokenBatchSampler(train_data.num_tokens, cfg.max_tokens, max_sentences=cfg.max_sentences,
                                    shuffle=True, seed=cfg.seed, bucket=cfg.bucket,
                                    num_replicas=dist_.world, rank=dist_.rank, batch_multiple=cfg.batch_multiple,
                                    ties=_length_ties(train_data) if cfg.bucket_ties else ())
        step, best, bad_vals, wall_before, last_valid = 0, None, 0, 0.0, {}
        if ck is not None:
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
            seed_all(cfg.seed + dist_.rank)    # other dropout masks on other ranks
        if dist_.enabled:
            from torch.nn.parallel import DistributedDataParallel
            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        net = unwrap(model)

        if dist_.is_main:
            log.info("model: %s parameters; %d training pairs (%d skipped), %d batches per epoch per process",
                     f"{count_parameters(net):,}", len(train_data), train_data.skipped, len(sampler))
            write_run_info(out, data=data.to_dict(), model=mcfg.to_dict(), train=dataclasses.asdict(cfg))
        resumed_step = step if ck is not None else None
        suffix = ".csv" if cfg.log_format == "csv" else ".jsonl"
        train_log = MetricsLog(out / f"train_log{suffix}", cfg.log_format, resumed_step) if dist_.is_main else None
        valid_log = MetricsLog(out / f"valid_log{suffix}", cfg.log_format, resumed_step) if dist_.is_main else None
        del ck

        def state_dict() -> dict:
            rng = [get_rng_state()]
            if dist_.enabled:
                import torch.distributed as dist
                rng = [None] * dist_.world
                dist.all_gather_object(rng, get_rng_state())
            weights = master.model_state_dict() if pure else net.state_dict()     # bf16-pure: the float32 masters
            return {"model": weights, "model_config": mcfg.to_dict(), "train_config": dataclasses.asdict(cfg),
                    "data_config": data.to_dict(),
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
            last_valid, improved, bad_vals, best = validate_on_dev(net, dev_data, dev_refs, tgt_sw, cfg, device,
                                                                   autocast, dist_, best, bad_vals)
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
        bar = progress_bar(cfg.progress and dist_.is_main, cfg.max_updates, step)
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
            total_tokens = dist_.all_sum(ntok)
            scale = dist_.world / total_tokens
            optimizer.zero_grad(set_to_none=True)
            for k, b in enumerate(micro):
                sync = model.no_sync() if dist_.enabled and k < len(micro) - 1 else contextlib.nullcontext()
                with sync:
                    with autocast():
                        hidden, aux = model(b.src, b.tgt_in, b.channels, return_aux=True, features_only=True)
                        # the output projection and the loss, fused and in row blocks (no float32 (N, V) buffers)
                        loss_sum, nll_sum = projected_label_smoothed_nll(hidden, net.output_weight, b.tgt_out,
                                                                         cfg.label_smoothing, ignore_index=PAD_ID)
                    obj, parts = combine_losses(loss_sum, aux, aux_weights, mode=cfg.aux_loss_mode,
                                                ntokens=b.ntokens)
                    obj = obj * scale
                    (scaler.scale(obj) if scaler is not None else obj).backward()
                if pure and (not dist_.enabled or k == len(micro) - 1):   # DDP: after its all-reduce
                    master.collect_grads()
                interval.add(loss_sum.item(), nll_sum.item(), b.ntokens, len(b),
                             {n: p.item() * b.ntokens for n, p in parts.items()})
            interval.lr = optimizer.param_groups[0]["lr"]          # the rate this update uses
            if scaler is not None:
                scaler.unscale_(optimizer)
            params = master.params if pure else model.parameters()
            if cfg.clip_norm > 0:
                gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
            else:                               # the norm for the log only (clipping at inf would rescale by 1)
                gnorm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
            if scaler is not None:
                scaler.step(optimizer)
                scaler.update()
            else:
                optimizer.step()
            if pure:
                master.sync()
            if cfg.trim_memory_every and (step + 1) % cfg.trim_memory_every == 0:
                release_freed_memory()
            wall = wall_before + (time.monotonic() - t0)    # training time so far, this update included
            if cfg.schedule == "linear_time":           # every rank uses the main process's clock
                budget_used[0] = dist_.broadcast(wall) / (cfg.max_time_minutes * 60)
            scheduler.step()
            step += 1
            interval.gnorm += float(gnorm)
            interval.updates += 1
            if bar is not None:
                bar.update(1)

            # logging, validation, checkpoints, limits
            if step % cfg.log_every == 0:
                log_row()
            if cfg.max_time_minutes and dist_.decide(wall >= cfg.max_time_minutes * 60):
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
        dist_.barrier()                         # the last checkpoint is on disk before any rank returns
        if pure:
            master.restore()                    # the caller gets the float32 model the checkpoint holds
        return TrainResult(step, sampler.epoch, stop_reason or "", best, checkpoint_path(out, step), out, net, mcfg,
                           last_valid)
    except BaseException:
        if dist_.is_main and "created" in locals() and created and not any(out.glob("checkpoint_*.pt")):
            shutil.rmtree(out, ignore_errors=True)       # a run that failed before its first checkpoint leaves nothing
        raise
    finally:
        dist_.close()


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

    def flush(self, d: Distributed) -> dict:
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


def _length_ties(data) -> tuple[np.ndarray, ...]:
    """The batch sampler's tie-break keys: source, then target length (``TrainConfig.bucket_ties``)."""
    return tuple(x for x in (data.src_lengths, data.tgt_lengths) if x is not None)


def _check_resume_compatible(ck: Mapping, mcfg, cfg: TrainConfig, path: Path) -> None:
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
