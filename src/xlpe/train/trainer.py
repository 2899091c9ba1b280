"""NMT training: one plain-code loop (read :func:`train` top to bottom), DDP-ready.

The loop owns its steps, like a torchtune recipe: :func:`train` sets up the run, then its ``while`` loop takes
``update_freq`` batches at a time, makes one update, and decides on logging, validation, checkpoints and
stopping; the helpers each do one of those things. The run: read the data, build the model, Adam with the
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
``train_log.csv`` / ``valid_log.csv`` (or ``.jsonl``), ``run.json`` (command, configs, library versions, host), and
``.run.lock``, locked while a run writes there: a second run into the same folder stops at once, naming the first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import time
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from xlpe.data.batching import TokenBatchSampler, collate
from xlpe.data.subword import PAD_ID
from xlpe.errors import ConfigError
from xlpe.io.process import RUN_LOCK, FolderLock, Terminated, lock_run_folder, stop_signals_deferred  # noqa: F401
from xlpe.nn.checkpoint import checkpoint_path, load_checkpoint, prune_checkpoints, save_checkpoint, subword_entry
from xlpe.nn.transformer import build_model, count_parameters
from xlpe.runtime import (AMP_FP32_FIX, Distributed, MetricsLog, adam_kwargs, autocast_context, device_policy,
                          get_rng_state, init_distributed, limit_onednn_caches, progress_bar, release_freed_memory,
                          resolve_device, resume_path, retain_freed_memory, seed_all, set_rng_state, unwrap,
                          warn_if_emulated_bf16, write_run_info)
from xlpe.train.config import DataConfig, TrainConfig
from xlpe.train.inputs import TrainInputs, read_inputs
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
# the loop
# ======================================================================================================

def _save_on_stop(run: "_Run | None", last_saved: int | None, d: Distributed) -> None:
    """A run stopped by Ctrl-C or SIGTERM keeps its updates: the loop holds those signals inside an update, so
    the state is whole and is saved as a checkpoint the same command resumes from. Not under DDP, whose ranks
    may stop at different updates (the checkpoint's gather would wait for the others)."""
    if run is None or d.enabled or run.step == 0 or run.step == last_saved:
        return
    path = checkpoint_path(run.out, run.step)
    if path.exists():
        return
    with stop_signals_deferred():                    # a second stop does not cut the checkpoint short
        run.save(path)
    log.warning("stopped at update %d: saved %s; the same command resumes from it", run.step, path)


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
    out, created, lock, run, last_saved = None, False, None, None, None
    try:
        device, pure, autocast = _set_up_process(cfg, dist_)
        out, created, lock = _output_dir(cfg, dist_)
        ck, resume_from = _resume_checkpoint(cfg, out, dist_)
        inputs = read_inputs(model_cfg, cfg, data, ck, resume_from, out, dist_)
        run = _Run(cfg, data, inputs, device, pure, autocast, out, dist_, ck, resume_from)
        run.begin(resumed_step=run.step if ck is not None else None)
        del ck
        run.model.train()
        stop_reason = None
        batches = iter(run.sampler)
        while stop_reason is None:
            if cfg.max_updates and run.step >= cfg.max_updates:
                stop_reason = "max_updates"
                break
            with stop_signals_deferred():                    # a Ctrl-C or SIGTERM lands between updates
                group = list(islice(batches, cfg.update_freq))
                if not group:                                # end of an epoch
                    if cfg.max_epochs and run.sampler.epoch + 1 >= cfg.max_epochs:
                        stop_reason = "max_epochs"
                        break
                    run.sampler.set_epoch(run.sampler.epoch + 1)
                    batches = iter(run.sampler)
                    continue
                wall = run.update(group)

            # logging, validation, checkpoints, limits
            if run.step % cfg.log_every == 0:
                run.log_row()
            if cfg.max_time_minutes and dist_.decide(wall >= cfg.max_time_minutes * 60):
                stop_reason = "max_time"
            if inputs.dev is not None and cfg.validate_every and run.step % cfg.validate_every == 0:
                improved = run.validate()
                if cfg.patience and run.bad_vals >= cfg.patience and stop_reason is None:
                    stop_reason = "early_stopping"
                if improved:
                    run.save(out / "checkpoint_best.pt")
            if cfg.save_every and run.step % cfg.save_every == 0:
                run.save(checkpoint_path(out, run.step))
                last_saved = run.step
        return run.finish(stop_reason, last_saved)
    except (KeyboardInterrupt, Terminated):
        _save_on_stop(run, last_saved, dist_)
        raise
    except BaseException:
        if dist_.is_main and created and not any(out.glob("checkpoint_*.pt")):
            shutil.rmtree(out, ignore_errors=True)       # a run that failed before its first checkpoint leaves nothing
        raise
    finally:
        if lock is not None:
            lock.release()
        dist_.close()


# ======================================================================================================
# set-up: the process, the output directory, the checkpoint to resume from (the data: xlpe.train.inputs)
# ======================================================================================================

def _set_up_process(cfg: TrainConfig, d: Distributed) -> tuple[torch.device, bool, Callable]:
    """The device, threads, allocator and precision of this process: ``(device, pure, autocast)``, where
    ``pure`` is ``amp == 'bf16-pure'`` (a bf16 model with float32 master weights, :mod:`xlpe.train.master`)
    and ``autocast`` a factory of autocast contexts."""
    device = resolve_device(cfg.device, d)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    # on CPU: every update allocates and frees the same megabyte-sized activations, served from glibc's heap, not
    # from fresh pages (process-wide, as `xlpe translate` does; MALLOC_* settings win), and oneDNN's caches would
    # keep a bf16 primitive per batch shape (peak RSS); docs/results/speed.md. The device's policy decides.
    policy = device_policy(device)
    if policy.retain_freed_memory:
        retain_freed_memory()
    if policy.limit_onednn_caches:
        limit_onednn_caches()
    pure = cfg.amp == "bf16-pure"
    if pure:
        warn_if_emulated_bf16(device, AMP_FP32_FIX)
    return device, pure, autocast_context("none" if pure else cfg.amp, device)


def _output_dir(cfg: TrainConfig, d: Distributed) -> tuple[Path, bool, FolderLock | None]:
    """The output directory (made by rank 0), whether this run creates it, and its lock (rank 0's; a folder that
    another run writes is a :class:`ConfigError` on every rank, before anything is written)."""
    out = Path(cfg.out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output directory {out} is a file")
    created = not out.exists()
    return out, created, lock_run_folder(out, "training run", main=d.is_main, share=d.broadcast)


def _resume_checkpoint(cfg: TrainConfig, out: Path, d: Distributed) -> tuple[dict | None, Path | None]:
    """The checkpoint to continue from (``cfg.resume``) and its path, or ``(None, None)`` for a fresh start;
    rank 0 removes the temporary file of a checkpoint write that was killed mid-way."""
    resume_from = resume_path(cfg.resume, out)
    ck = load_checkpoint(resume_from) if resume_from is not None else None
    if ck is not None and ck.get("optimizer") is None:
        raise ConfigError(f"{resume_from} is a model-only checkpoint (from `xlpe average`?): it holds no "
                          "optimizer state to resume training from; translate with it, or train in a new "
                          "directory")
    if ck is not None and d.is_main:
        for tmp in out.glob(".checkpoint_*.pt.*.tmp"):     # a write killed mid-way (atomic: never renamed)
            tmp.unlink(missing_ok=True)
    return ck, resume_from


# ======================================================================================================
# the run: model, optimizer, schedule, batches and counters, and what the loop does with them
# ======================================================================================================

class _Run:
    """One training run's state and its steps: :meth:`update`, :meth:`log_row`, :meth:`validate`,
    :meth:`save`, :meth:`finish`; :func:`train` decides when each happens."""

    def __init__(self, cfg: TrainConfig, data: DataConfig, inputs: TrainInputs, device: torch.device, pure: bool,
                 autocast: Callable, out: Path, d: Distributed, ck: Mapping | None, resume_from: Path | None):
        """Build the model, the optimizer, the schedule and the batch sampler (seeded by ``cfg.seed``), and
        restore them from ``ck`` when resuming."""
        self.cfg, self.data, self.inputs, self.device, self.pure = cfg, data, inputs, device, pure
        self.autocast, self.out, self.d = autocast, out, d
        seed_all(cfg.seed)
        model = build_model(inputs.mcfg).to(device)
        if ck is not None:
            model.load_state_dict(ck["model"])
        self.master = MasterWeights(model) if pure else None
        self.optimizer = torch.optim.Adam(self.master.params if pure else model.parameters(), lr=cfg.lr,
                                          betas=cfg.betas, eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                                          **adam_kwargs(cfg.adam))
        self.budget_used = 0.0        # linear_time: the share of max_time_minutes spent, set before each step
        self.scheduler = build_scheduler(self.optimizer, cfg.schedule_obj(), progress=lambda: self.budget_used)
        self.scaler = torch.amp.GradScaler(device.type) if device_policy(device).grad_scaler(cfg.amp) else None
        self.sampler = TokenBatchSampler(inputs.train.num_tokens, cfg.max_tokens, max_sentences=cfg.max_sentences,
                                         shuffle=True, seed=cfg.seed, bucket=cfg.bucket, num_replicas=d.world,
                                         rank=d.rank, batch_multiple=cfg.batch_multiple,
                                         ties=_length_ties(inputs.train) if cfg.bucket_ties else ())
        self.step, self.best, self.bad_vals, self.wall_before = 0, None, 0, 0.0
        self.last_valid: dict[str, float] = {}
        self.valid_step: int | None = None
        if ck is not None:
            self._restore(ck, resume_from)
        elif d.rank:
            seed_all(cfg.seed + d.rank)    # other dropout masks on other ranks
        if d.enabled:
            model = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        self.model, self.net = model, unwrap(model)

    def _restore(self, ck: Mapping, resume_from: Path) -> None:
        """Continue from checkpoint ``ck``: optimizer, schedule, grad scaler, batch position, counters, RNG."""
        d = self.d
        self.optimizer.load_state_dict(ck["optimizer"])
        self.scheduler.load_state_dict(ck["scheduler"])
        if self.scaler is not None and ck.get("scaler"):
            self.scaler.load_state_dict(ck["scaler"])
        self.sampler.load_state_dict(ck["sampler"])
        self.step, self.best, self.bad_vals = int(ck["step"]), ck.get("best"), int(ck.get("bad_validations", 0))
        self.wall_before = float(ck.get("wall_time", 0.0))
        rng = ck["rng"]
        if len(rng) != d.world:
            log.warning("checkpoint has RNG states of %d processes, this run has %d: dropout masks will differ",
                        len(rng), d.world)
        set_rng_state(rng[d.rank % len(rng)])
        if d.is_main:
            log.info("resumed from %s at update %d (epoch %d, batch %d)", resume_from, self.step,
                     self.sampler.epoch, self.sampler.position)

    def begin(self, resumed_step: int | None) -> None:
        """Record the run (rank 0: a log line and ``run.json``), open the metrics logs (cut back to
        ``resumed_step`` when resuming), start the clock and the progress bar."""
        cfg, d = self.cfg, self.d
        if d.is_main:
            log.info("model: %s parameters; %d training pairs (%d skipped), %d batches per epoch per process",
                     f"{count_parameters(self.net):,}", len(self.inputs.train), self.inputs.train.skipped,
                     len(self.sampler))
            write_run_info(self.out, data=self.data.to_dict(), model=self.inputs.mcfg.to_dict(),
                           train=dataclasses.asdict(cfg))
        suffix, main = (".csv" if cfg.log_format == "csv" else ".jsonl"), d.is_main
        self.train_log = MetricsLog(self.out / f"train_log{suffix}", cfg.log_format, resumed_step) if main else None
        self.valid_log = MetricsLog(self.out / f"valid_log{suffix}", cfg.log_format, resumed_step) if main else None
        self.t0 = time.monotonic()
        self.bar = progress_bar(cfg.progress and d.is_main, cfg.max_updates, self.step)
        self.interval = _Interval()

    def wall(self) -> float:
        """Training time so far, summed over resumptions."""
        return self.wall_before + (time.monotonic() - self.t0)

    def update(self, group: list) -> float:
        """One update from the batches ``group``: forward and backward over each, then clip, step and
        schedule. Returns the training time so far, this update included."""
        cfg, optimizer, scaler = self.cfg, self.optimizer, self.scaler
        self._accumulate_gradients(group)
        self.interval.lr = optimizer.param_groups[0]["lr"]          # the rate this update uses
        if scaler is not None:
            scaler.unscale_(optimizer)
        params = self.master.params if self.pure else self.model.parameters()
        if cfg.clip_norm > 0:
            gnorm = torch.nn.utils.clip_grad_norm_(params, cfg.clip_norm)
        else:                               # the norm for the log only (clipping at inf would rescale by 1)
            gnorm = torch.nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if self.pure:
            self.master.sync()
        if cfg.trim_memory_every and (self.step + 1) % cfg.trim_memory_every == 0:
            release_freed_memory()
        wall = self.wall()
        if cfg.schedule == "linear_time":           # every rank uses the main process's clock
            self.budget_used = self.d.broadcast(wall) / (cfg.max_time_minutes * 60)
        self.scheduler.step()
        self.step += 1
        self.interval.gnorm += float(gnorm)
        self.interval.updates += 1
        if self.bar is not None:
            self.bar.update(1)
        return wall

    def _accumulate_gradients(self, group: list) -> None:
        """Forward and backward over the batches ``group``, the loss of each scaled by the world size over
        the target tokens of the update on all ranks; DDP all-reduces once, after the last batch."""
        cfg, d, net, inputs = self.cfg, self.d, self.net, self.inputs
        micro = [collate([inputs.train[i] for i in idx]).to(self.device, non_blocking=True) for idx in group]
        ntok = sum(b.ntokens for b in micro)
        total_tokens = d.all_sum(ntok)
        scale = d.world / total_tokens
        self.optimizer.zero_grad(set_to_none=True)
        for k, b in enumerate(micro):
            sync = self.model.no_sync() if d.enabled and k < len(micro) - 1 else contextlib.nullcontext()
            with sync:
                with self.autocast():
                    hidden, aux = self.model(b.src, b.tgt_in, b.channels, return_aux=True, features_only=True)
                    # the output projection and the loss, fused and in row blocks (no float32 (N, V) buffers)
                    loss_sum, nll_sum = projected_label_smoothed_nll(hidden, net.output_weight, b.tgt_out,
                                                                     cfg.label_smoothing, ignore_index=PAD_ID)
                obj, parts = combine_losses(loss_sum, aux, inputs.aux_weights, mode=cfg.aux_loss_mode,
                                            ntokens=b.ntokens)
                obj = obj * scale
                (self.scaler.scale(obj) if self.scaler is not None else obj).backward()
            if self.pure and (not d.enabled or k == len(micro) - 1):   # DDP: after its all-reduce
                self.master.collect_grads()
            self.interval.add(loss_sum.item(), nll_sum.item(), b.ntokens, len(b),
                              {n: p.item() * b.ntokens for n, p in parts.items()})

    def log_row(self) -> None:
        """A training log row of the updates since the last one (every rank takes part: all-reduce)."""
        row = self.interval.flush(self.d)
        row = {"step": self.step, "epoch": self.sampler.epoch, **row, "wall_time": self.wall()}
        if self.train_log is not None:
            self.train_log.write(row)
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{row['loss']:.3f}", lr=f"{row['lr']:.2e}")

    def validate(self) -> bool:
        """Validate on the dev set (rank 0, shared with all), log it; whether the best metric improved."""
        t = time.monotonic()
        self.last_valid, improved, self.bad_vals, self.best = validate_on_dev(
            self.net, self.inputs.dev, self.inputs.dev_refs, self.inputs.tgt_sw, self.cfg, self.device,
            self.autocast, self.d, self.best, self.bad_vals)
        self.interval.paused += time.monotonic() - t
        self.valid_step = self.step
        if self.valid_log is not None:
            self.valid_log.write({"step": self.step, "epoch": self.sampler.epoch, **self.last_valid,
                                  "best": self.best, "wall_time": self.wall()})
        return improved

    def save(self, path: Path) -> None:
        """Write a checkpoint (rank 0; every rank takes part in gathering the RNG states) and prune old ones."""
        t = time.monotonic()
        state = self.state_dict()
        if self.d.is_main:
            save_checkpoint(path, state)
            prune_checkpoints(self.out, self.cfg.keep_last)
        self.interval.paused += time.monotonic() - t

    def state_dict(self) -> dict:
        """Everything a resumption needs, with the configs and subword models (a checkpoint's contents)."""
        rng = [get_rng_state()]
        if self.d.enabled:
            rng = [None] * self.d.world
            dist.all_gather_object(rng, get_rng_state())
        weights = self.master.model_state_dict() if self.pure else self.net.state_dict()  # bf16-pure: float32
        inputs, sampler = self.inputs, self.sampler
        return {"model": weights, "model_config": inputs.mcfg.to_dict(), "train_config": dataclasses.asdict(self.cfg),
                "data_config": self.data.to_dict(),
                "subwords": {"src": subword_entry(inputs.src_sw),
                             "tgt": None if inputs.joint else subword_entry(inputs.tgt_sw)},
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "scaler": self.scaler.state_dict() if self.scaler is not None else None,
                "sampler": sampler.state_dict(), "rng": rng, "step": self.step, "epoch": sampler.epoch,
                "best": self.best, "bad_validations": self.bad_vals, "wall_time": self.wall()}

    def finish(self, stop_reason: str | None, last_saved: int | None) -> TrainResult:
        """A last validation, log row and checkpoint for the final state (each unless the loop just made
        it), and the result; the caller gets the float32 model the checkpoint holds."""
        step, out = self.step, self.out
        if self.inputs.dev is not None and self.valid_step != step:
            if self.validate():
                self.save(out / "checkpoint_best.pt")
        if self.interval.ntok:
            self.log_row()
        if last_saved != step:
            self.save(checkpoint_path(out, step))
        if self.bar is not None:
            self.bar.close()
        if self.d.is_main:
            log.info("stopped after update %d (%s)%s", step, stop_reason,
                     "" if self.best is None else f"; best {self.cfg.best_metric} {self.best:.4f}")
        self.d.barrier()                         # the last checkpoint is on disk before any rank returns
        if self.pure:
            self.master.restore()
        return TrainResult(step, self.sampler.epoch, stop_reason or "", self.best, checkpoint_path(out, step), out,
                           self.net, self.inputs.mcfg, self.last_valid)


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
        row.update({"lr": self.lr, "grad_norm": self.gnorm / max(self.updates, 1), "tokens_per_s": ntok / dt,
                    "sentences": int(nsent)})
        self._reset()
        return row


def _length_ties(data) -> tuple[np.ndarray, ...]:
    """The batch sampler's tie-break keys: source, then target length (``TrainConfig.bucket_ties``)."""
    return tuple(x for x in (data.src_lengths, data.tgt_lengths) if x is not None)
