"""Cross-Align training (Lai et al. 2022, §3.3): stage 1 TLM, stage 2 self-supervised alignment (SSA).

* **TLM** (SPEC §7.3, paper Eq. 11): the source and the target are masked independently, 15% of the word
  pieces (never [CLS], [SEP] or pads), of those 80% -> [MASK], 10% -> a token drawn uniformly from the vocabulary,
  10% unchanged; the loss is ``CE_mean(src) + CE_mean(tgt)`` of the MLM head on the last layer's states.
* **SSA** (SPEC §7.4, paper Eq. 12): the frozen stage-1 model labels the data (word alignments at layer ``c``,
  τ = 0.001, [CLS] as null sink; ``label_symmetrize`` [I] joins the two directions' word links by a word-level
  symmetrisation instead of at the piece level), mapped back to all piece pairs of linked words; a piece with no link
  points at the other side's [CLS]. The loss is the cross-entropy of ``P^f`` against ``G`` with the source-[CLS] row
  zeroed plus that of ``P^b`` against ``G`` with the target-[CLS] column zeroed, each divided by the number of real
  pieces, ``1e-10`` inside the log. Only layer ``c`` trains by default (``freeze_embeddings=False`` also trains the
  embeddings, as the authors' code does). The labels do not change while the student trains (the teacher is frozen and
  runs without dropout), so they are computed once, in one pass over the data before the first update, and kept in
  ``OUT/ssa_labels.npz`` (:mod:`xlpe.align.crossalign_data`, with the batches): every epoch and a resumed run read the
  same labels, and the teacher's forward pass leaves the training step.
* **The loop** (SPEC §7.5): AdamW (eps 1e-8, no weight decay), linear decay to 0 with no warm-up, gradient
  clipping at 1.0, gradient accumulation, optional bf16 autocast, ``torchrun`` DDP, checkpoints
  (:mod:`xlpe.nn.checkpoint` format) holding model, optimiser, scheduler, RNG states of every rank and the data
  position, so a killed run resumes exactly. Each stage writes ``OUT/checkpoint_<step>.pt``, ``train_log.csv``,
  ``run.json`` (SSA also ``ssa_labels.npz``) and the finished aligner as a directory ``OUT/model``
  (:meth:`CrossAligner.save_pretrained`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import Tensor

from xlpe.align.crossalign import CONFIG_NAME, Batch, CrossAligner
from xlpe.align.crossalign_extract import WORD_VECTORS, Extraction, key_mask, softmax_both_ways
from xlpe.align.crossalign_data import LABELS, PairData, PairSampler, WordLinks, cached_labels
from xlpe.config import option
from xlpe.errors import ConfigError
from xlpe.io.atomic import atomic_write
from xlpe.io.process import lock_run_folder, stop_signals_deferred
from xlpe.nn.checkpoint import checkpoint_path, load_checkpoint, prune_checkpoints, save_checkpoint
from xlpe.runtime import (ADAM_IMPLS, AMP_MODES, MetricsLog, adam_kwargs, autocast_context, device_policy,
                          get_rng_state, init_distributed, limit_onednn_caches, progress_bar, resolve_device,
                          resume_path, retain_freed_memory, seed_all, set_rng_state, unwrap, write_run_info)

log = logging.getLogger(__name__)

STAGES = ("tlm", "ssa")
TLM_TRAINABLE = ("all", "cross")
SSA_TRAINABLE = ("align", "upto")
DONE = "DONE.json"


@dataclass
class TrainConfig:
    """Options of both stages (defaults: SPEC §7.5; per-stage values carry the stage's prefix)."""

    batch_size: int = option(12, "sentence pairs per batch and process")
    tlm_lr: float = option(5e-4, "stage 1 peak learning rate")
    tlm_epochs: float = option(2.0, "stage 1 passes over the data")
    tlm_max_steps: int = option(200_000, "stage 1 cap on optimiser updates")
    tlm_accumulation: int = option(4, "stage 1 batches per update (gradient accumulation)")
    mask_prob: float = option(0.15, "TLM: share of word pieces masked on each side")
    tlm_trainable: str = option("all", "TLM: 'all' parameters (the paper) or 'cross' (the cross layers and the MLM "
                                       "head's transform and bias; the encoder's own layers and embeddings keep "
                                       "their weights) [I]", choices=TLM_TRAINABLE)
    ssa_lr: float = option(1e-5, "stage 2 peak learning rate")
    ssa_epochs: float = option(1.0, "stage 2 passes over the data")
    ssa_max_steps: int = option(5_000, "stage 2 cap on optimiser updates")
    ssa_accumulation: int = option(1, "stage 2 batches per update (1 in the authors' script, 4 in the paper)")
    label_threshold: float = option(1e-3, "SSA: tau with which the frozen stage-1 model labels the data")
    label_symmetrize: str = option("pieces", "SSA: how the labelling model's two directions are joined: 'pieces' "
                                             "(both pass at the piece level, the paper) or a word-level "
                                             "symmetrisation of each direction's word links (grow-diag-final-and, "
                                             "gdfa, ...) [I]", when_set=True)
    label_word_vectors: str = option("pieces", "SSA: the states the labelling model's softmaxes compare: 'pieces' "
                                               "(the paper) or 'mean' (each word's mean piece state, as the "
                                               "extraction's word_vectors) [I]", choices=WORD_VECTORS, when_set=True)
    ssa_trainable: str = option("align", "SSA: 'align' (layer c only, the paper) or 'upto' (every layer up to c: "
                                         "the encoder's own layers as awesome-align fine-tunes them, and the cross "
                                         "layers up to c; the labels still come from the frozen stage-1 model) [I]",
                                choices=SSA_TRAINABLE)
    freeze_embeddings: bool = option(True, "SSA: freeze the embeddings too (only layer c trains); "
                                           "--no-freeze-embeddings = the authors' code")
    clip_norm: float = option(1.0, "gradient norm clipping (0 = none)")
    adam_eps: float = option(1e-8, "AdamW epsilon")
    weight_decay: float = option(0.0, "AdamW weight decay")
    adam: str = option("fused", "AdamW's implementation: 'fused' (one kernel for all parameters), 'foreach' or "
                                "'for-loop' (torch's default on CPU; xlpe's up to 0.1.x)", choices=ADAM_IMPLS)
    seed: int = option(42, "seed of the weights' random part, masking, dropout and batch order")
    amp: str = option("none", "autocast: none, bf16 (CPU or GPU) or fp16 (GPU)", choices=AMP_MODES)
    device: str = option("auto", "cpu, cuda, cuda:N or auto")
    save_every: int = option(1000, "write a checkpoint every N updates (and at the end)")
    keep_last: int = option(2, "keep the newest N step checkpoints (0 = all)")
    log_every: int = option(50, "log the mean loss every N updates")
    resume: str = option("auto", "auto (continue from the newest checkpoint in the output directory), none "
                                 "(fresh start) or a checkpoint path")
    progress: bool = option(True, "progress bar")

    def __post_init__(self):
        for name in ("batch_size", "tlm_accumulation", "ssa_accumulation", "save_every", "log_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be >= 1, not {getattr(self, name)}")
        if not 0 < self.mask_prob < 1 or not 0 <= self.label_threshold < 1:
            raise ConfigError("mask_prob must be in (0, 1) and label_threshold in [0, 1)")
        if self.tlm_trainable not in TLM_TRAINABLE:
            raise ConfigError(f"tlm_trainable must be one of {', '.join(TLM_TRAINABLE)}, not {self.tlm_trainable!r}")
        if self.ssa_trainable not in SSA_TRAINABLE:
            raise ConfigError(f"ssa_trainable must be one of {', '.join(SSA_TRAINABLE)}, not {self.ssa_trainable!r}")
        if self.amp not in AMP_MODES:
            raise ConfigError(f"amp must be one of {', '.join(AMP_MODES)}, not {self.amp!r}")
        adam_kwargs(self.adam)                                  # refuses an unknown implementation
        self.label_symmetrize = self.labels(None).symmetrize     # checks the labels' extraction settings

    def labels(self, layer: int | None) -> Extraction:
        """The extraction SSA's labels come from at the teacher's alignment ``layer`` (SPEC §7.4.1): softmax both
        ways at ``label_threshold`` with the [CLS] null sink, joined and on the states ``label_symmetrize`` and
        ``label_word_vectors`` say."""
        return Extraction(threshold=self.label_threshold, null_sink="cls", symmetrize=self.label_symmetrize,
                          word_vectors=self.label_word_vectors, layer=layer)

    def stage(self, stage: str) -> tuple[float, float, int, int]:
        """``(lr, epochs, max_steps, accumulation)`` of a stage."""
        return tuple(getattr(self, f"{stage}_{k}") for k in ("lr", "epochs", "max_steps", "accumulation"))


@dataclass
class TrainResult:
    stage: str
    step: int
    epoch: int
    out: Path
    model_dir: Path
    aligner: CrossAligner


# -- objectives ---------------------------------------------------------------------------------------------

def mask_tokens(ids: Tensor, words: Tensor, *, vocab_size: int, mask_id: int, prob: float = 0.15,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """TLM masking of one ``(N, T)`` batch (SPEC §7.3): ``(inputs, labels)``, labels -100 where not chosen.
    Only word pieces (``words >= 0``) are eligible; each side of a batch is its own rows, so the sides are
    masked independently."""
    u = torch.rand(ids.shape, generator=generator, device=ids.device)
    chosen = (u < prob) & (words >= 0)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    r = torch.rand(ids.shape, generator=generator, device=ids.device)
    to_mask = chosen & (r < 0.8)
    to_random = chosen & (r >= 0.8) & (r < 0.9)
    rand = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(to_mask, torch.full_like(ids, mask_id), ids)
    return torch.where(to_random, rand, inputs), labels


def ssa_labels(word_links: Tensor, src_words: Tensor, tgt_words: Tensor) -> Tensor:
    """Piece-level labels ``G (B, Ts, Tt)`` from word links ``(B, Ws, Wt)`` (SPEC §7.4.2): ``G[a, b] = 1`` when
    the words of pieces ``a`` and ``b`` are linked; a source piece with no link gets ``G[a, CLS_tgt] = 1``, a target
    piece with none ``G[CLS_src, b] = 1`` ([CLS] is position 0 on both sides)."""
    B = word_links.shape[0]
    bi = torch.arange(B, device=word_links.device)[:, None, None]
    real = (src_words >= 0)[:, :, None] & (tgt_words >= 0)[:, None, :]
    g = word_links[bi, src_words.clamp(min=0)[:, :, None], tgt_words.clamp(min=0)[:, None, :]] & real
    g[:, :, 0] |= (src_words >= 0) & ~g.any(2)
    g[:, 0, :] |= (tgt_words >= 0) & ~g.any(1)
    return g.float()


def ssa_loss(hs: Tensor, ht: Tensor, labels: Tensor, src_words: Tensor, tgt_words: Tensor) -> Tensor:
    """``-mean_batch[(Σ G^f log P^f)/I + (Σ G^b log P^b)/J]`` with the [CLS] null sink (SPEC §7.4.3)."""
    scores = torch.bmm(hs.float(), ht.float().transpose(1, 2))
    pf, pb = softmax_both_ways(scores, key_mask(src_words, "cls"), key_mask(tgt_words, "cls"))
    gf, gb = labels.clone(), labels.clone()
    gf[:, 0, :] = 0
    gb[:, :, 0] = 0
    n_src = (src_words >= 0).sum(1).clamp(min=1)
    n_tgt = (tgt_words >= 0).sum(1).clamp(min=1)
    lf = (gf * torch.log(pf + 1e-10)).sum((1, 2)) / n_src
    lb = (gb * torch.log(pb + 1e-10)).sum((1, 2)) / n_tgt
    return -(lf + lb).mean()


def set_trainable(model, stage: str, align_layer: int, freeze_embeddings: bool = True,
                  tlm_trainable: str = "all", ssa_trainable: str = "align") -> list:
    """Stage 1: every parameter (``tlm_trainable='cross'``: the cross layers and the MLM head's transform and bias
    only; the output matrix is tied to the frozen word embeddings). Stage 2: layer ``c`` only
    (``ssa_trainable='upto'``: layers 1..c), + the embeddings when not frozen."""
    if stage == "tlm":
        for p in model.parameters():
            p.requires_grad_(tlm_trainable == "all")
        if tlm_trainable == "cross":
            for p in list(model.cross_layers.parameters()) + list(model.cls.predictions.transform.parameters()):
                p.requires_grad_(True)
            model.cls.predictions.bias.requires_grad_(True)
        return [p for p in model.parameters() if p.requires_grad]
    if align_layer < 1:
        raise ConfigError("SSA trains the alignment layer: align_layer must be >= 1")
    layers = list(model.self_layers) + list(model.cross_layers)
    if align_layer > len(layers):
        raise ConfigError(f"align_layer {align_layer} is beyond the model's {len(layers)} layers")
    for p in model.parameters():
        p.requires_grad_(False)
    for layer in layers[align_layer - 1 if ssa_trainable == "align" else 0:align_layer]:
        for p in layer.parameters():
            p.requires_grad_(True)
    if not freeze_embeddings:
        for p in model.embeddings.parameters():
            p.requires_grad_(True)
    return [p for p in model.parameters() if p.requires_grad]


# -- the loop -----------------------------------------------------------------------------------------------

def train_stage(stage: str, aligner: CrossAligner, src: str, tgt: str, out: str | Path, cfg: TrainConfig, *,
                data: PairData | None = None) -> TrainResult:
    """Run one stage (``tlm`` or ``ssa``) from ``aligner`` (for ``ssa``: the stage-1 model, which also labels)."""
    if stage not in STAGES:
        raise ConfigError(f"stage must be one of {', '.join(STAGES)}, not {stage!r}")
    out = Path(out)
    dist_ = init_distributed(cfg.device)
    try:
        device = resolve_device(cfg.device, dist_)
        # as xlpe train, where the device's policy says (CPU): freed activations stay in glibc's heap, and bf16
        # products keep at most 64 oneDNN primitives (one per batch shape otherwise; docs/results/speed.md)
        if device_policy(device).retain_freed_memory:
            retain_freed_memory()
        if device_policy(device).limit_onednn_caches:
            limit_onednn_caches()
        autocast = autocast_context(cfg.amp, device)
        data = data if data is not None else PairData(aligner, src, tgt)     # bad input fails before out/ exists
        out.mkdir(parents=True, exist_ok=True)
        resume_from = resume_path(cfg.resume, out)
        ck = load_checkpoint(resume_from) if resume_from is not None else None
        links = _ssa_links(out, aligner, data, cfg, dist_, device, autocast) if stage == "ssa" else None
        model_config = _model_record(aligner)
        if ck is not None:
            _check_resumable(ck, resume_from, stage, model_config, cfg, dist_.world)
            aligner.model.load_state_dict(ck["model"])
        run = _Updates.start(stage, aligner, len(data), cfg, dist_, device, model_config, ck, resume_from)
        if dist_.is_main:
            write_run_info(out, stage=stage, train_config=dataclasses.asdict(cfg), model=describe(aligner),
                           data={"src": str(src), "tgt": str(tgt), "pairs": len(data), "truncated": data.truncated},
                           updates=run.total, world=dist_.world)
        mlog = (MetricsLog(out / "train_log.csv", "csv", run.step if ck is not None else None) if dist_.is_main
                else None)
        bar = progress_bar(cfg.progress and dist_.is_main, run.total, run.step, desc=stage)
        if stage == "tlm" and aligner.tokenizer.mask_token_id is None:
            raise ConfigError(f"{aligner.source}: the tokenizer has no mask token; TLM needs one")
        run.loop(data, _micro_loss(stage, run.net, aligner, cfg, links), device, autocast, out, mlog, bar)
        if bar is not None:
            bar.close()
        aligner.config.stages = [*aligner.config.stages, stage]
        model_dir = out / "model"
        if dist_.is_main:
            aligner.model.eval()
            aligner.save_pretrained(model_dir)
            with atomic_write(out / DONE) as f:
                json.dump({"stage": stage, "step": run.step, "model": str(model_dir)}, f)
        dist_.barrier()
        return TrainResult(stage, run.step, run.sampler.epoch, out, model_dir, aligner)
    finally:
        dist_.close()


def _ssa_links(out: Path, aligner: CrossAligner, data: PairData, cfg: TrainConfig, dist_, device,
               autocast) -> WordLinks:
    """SSA's word links: the stage-1 model, before any update, labels the data once (the main process; the others
    read its file)."""
    links = None
    if dist_.is_main:
        links = cached_labels(out / LABELS, aligner.model.to(device), data, cfg.labels(aligner.config.align_layer),
                              device=device, autocast=autocast, progress=cfg.progress)
    dist_.barrier()
    if links is None:
        with np.load(out / LABELS) as z:
            links = WordLinks(z["offsets"], z["links"])
    return links


def _model_record(aligner: CrossAligner) -> dict:
    """The model's configuration as a checkpoint records it: a run resumes only from one of the same model."""
    bert = {k: v for k, v in aligner.model.config.to_dict().items()
            if not k.startswith("_") and k not in ("transformers_version", "dtype", "architectures")}
    return {"bert": bert, "crossalign": dataclasses.asdict(aligner.config)}


def _check_resumable(ck: dict, resume_from, stage: str, model_config: dict, cfg: TrainConfig, world: int) -> None:
    """Refuse to resume from checkpoint ``ck`` unless it is a run of this stage and model that continues exactly:
    the same batch size, seed, accumulation, trainable parameters and number of processes."""
    if ck.get("stage") != stage or _norm(ck["model_config"]) != _norm(model_config):
        raise ConfigError(f"cannot resume from {resume_from}: it is a {ck.get('stage')} run of another model "
                          "configuration; use another output directory or resume='none' in a new one")
    old = ck.get("train_config") or {}
    keys = ("batch_size", "seed", f"{stage}_accumulation", f"{stage}_trainable")
    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}   # checkpoints older than an option
    diff = [k for k in keys if old.get(k, defaults[k]) != getattr(cfg, k)]
    if len(ck["rng"]) != world:
        diff.append("the number of processes")
    if diff:
        raise ConfigError(f"cannot resume from {resume_from} exactly: {', '.join(diff)} differ(s) from the "
                          "interrupted run; keep them, or start a new run")


def _micro_loss(stage: str, net, aligner: CrossAligner, cfg: TrainConfig, links: WordLinks | None):
    """The loss of one micro-batch (a :class:`Batch` and its pair indices) through ``net``: TLM on newly masked
    pieces, or SSA against the batch's labels at the alignment layer."""
    tok, align_layer = aligner.tokenizer, aligner.config.align_layer

    def micro_loss(batch: Batch, idx: list[int]) -> Tensor:
        B = batch.size
        if stage == "tlm":
            inputs, labels = mask_tokens(batch.ids, batch.words, vocab_size=len(tok), mask_id=tok.mask_token_id,
                                         prob=cfg.mask_prob)
            return net(inputs, batch.attention, mlm_labels=labels)
        sw, tw = batch.words[:B], batch.words[B:]
        g = ssa_labels(links.tensor(idx, sw, tw), sw, tw)
        h = net(batch.ids, batch.attention, layer=align_layer)
        return ssa_loss(h[:B], h[B:], g, sw, tw)
    return micro_loss


@dataclass
class _Updates:
    """The optimiser updates of one stage: the model (``net``: wrapped for DDP when distributed), its trainable
    ``params``, optimiser, schedule and data order, the number of updates done (``step``) and to do (``total``)."""

    stage: str
    cfg: TrainConfig
    dist: Any
    net: Any
    params: list
    optimizer: torch.optim.Optimizer
    scheduler: Any
    sampler: PairSampler
    total: int
    accum: int
    model_config: dict
    step: int = 0

    @classmethod
    def start(cls, stage: str, aligner: CrossAligner, n_pairs: int, cfg: TrainConfig, dist_, device,
              model_config: dict, ck: dict | None, resume_from) -> "_Updates":
        """Fresh updates of ``aligner``'s model on ``device`` (seeded), or continued from checkpoint ``ck``."""
        model = aligner.model.to(device)
        params = set_trainable(model, stage, aligner.config.align_layer, cfg.freeze_embeddings, cfg.tlm_trainable,
                               cfg.ssa_trainable)
        lr, epochs, max_steps, accum = cfg.stage(stage)
        sampler = PairSampler(n_pairs, cfg.batch_size, cfg.seed, dist_.rank, dist_.world)
        total = max(1, min(max_steps, math.ceil(epochs * sampler.per_epoch / accum)))
        optimizer = torch.optim.AdamW(params, lr=lr, eps=cfg.adam_eps, weight_decay=cfg.weight_decay,
                                      **adam_kwargs(cfg.adam))
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: max(0.0, 1.0 - s / total))
        run = cls(stage, cfg, dist_, model, params, optimizer, scheduler, sampler, total, accum, model_config)
        seed_all(cfg.seed + dist_.rank)
        if ck is not None:
            optimizer.load_state_dict(ck["optimizer"])
            scheduler.load_state_dict(ck["scheduler"])
            sampler.load_state_dict(ck["sampler"])
            set_rng_state(ck["rng"][dist_.rank % len(ck["rng"])])
            run.step = int(ck["step"])
            log.info("%s: resumed from %s at update %d of %d", stage, resume_from, run.step, total)
        if dist_.enabled:
            from torch.nn.parallel import DistributedDataParallel
            run.net = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        return run

    def save(self, out: Path) -> None:
        """A checkpoint of this update in ``out`` (every rank takes part: the RNG states are gathered)."""
        rng = [get_rng_state()]
        if self.dist.enabled:
            import torch.distributed as tdist
            rng = [None] * self.dist.world
            tdist.all_gather_object(rng, get_rng_state())
        if self.dist.is_main:
            save_checkpoint(checkpoint_path(out, self.step), {
                "model": unwrap(self.net).state_dict(), "model_config": self.model_config, "stage": self.stage,
                "train_config": dataclasses.asdict(self.cfg), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "sampler": self.sampler.state_dict(), "rng": rng,
                "step": self.step, "epoch": self.sampler.epoch})
            prune_checkpoints(out, self.cfg.keep_last)

    def accumulate(self, data: PairData, micro_loss, device, autocast) -> tuple[float, int]:
        """The gradients of ``accum`` micro-batches (synchronised across processes after the last one); returns
        their mean loss and the number of pairs."""
        loss_sum, pairs = 0.0, 0
        for k in range(self.accum):
            idx = self.sampler.next()
            batch = data.batch(idx).to(device)
            sync = self.net.no_sync() if self.dist.enabled and k < self.accum - 1 else contextlib.nullcontext()
            with sync:
                with autocast():
                    loss = micro_loss(batch, idx)
                (loss / self.accum).backward()
            loss_sum += float(loss.detach()) / self.accum
            pairs += batch.size
        return loss_sum, pairs

    def loop(self, data: PairData, micro_loss, device, autocast, out: Path, mlog: MetricsLog | None, bar) -> None:
        """Update until ``total``, a checkpoint every ``save_every`` (and at the end). Ctrl-C or SIGTERM waits
        for the update in progress, whose checkpoint is then written (not under DDP: ranks may stop apart)."""
        clock, last_saved = {"t0": time.monotonic(), "window": [], "pairs": 0}, self.step
        try:
            while self.step < self.total:
                with stop_signals_deferred():               # a stop lands between updates
                    self._update(data, micro_loss, device, autocast, mlog, bar, clock)
                    if self.step % self.cfg.save_every == 0 or self.step == self.total:
                        self.save(out)
                        last_saved = self.step
        except KeyboardInterrupt:                           # Ctrl-C, or SIGTERM (Terminated)
            if not self.dist.enabled and self.step != last_saved:
                with stop_signals_deferred():               # a second stop does not cut the checkpoint short
                    self.save(out)
                log.warning("stopped at update %d: checkpoint in %s; the same command resumes", self.step, out)
            raise

    def _update(self, data: PairData, micro_loss, device, autocast, mlog: MetricsLog | None, bar, clock) -> None:
        """One update: clipped gradients, the linear schedule, the mean loss logged every ``log_every``."""
        cfg = self.cfg
        self.net.train()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, n = self.accumulate(data, micro_loss, device, autocast)
        gnorm = torch.nn.utils.clip_grad_norm_(self.params, cfg.clip_norm if cfg.clip_norm > 0 else math.inf)
        self.optimizer.step()
        lr_used = self.scheduler.get_last_lr()[0]
        self.scheduler.step()
        self.step += 1
        clock["window"].append(loss_sum)
        clock["pairs"] += n
        if bar is not None:
            bar.update(1)
            bar.set_postfix(loss=f"{loss_sum:.3f}")
        if mlog is not None and (self.step % cfg.log_every == 0 or self.step == self.total):
            dt, window = time.monotonic() - clock["t0"], clock["window"]
            mlog.write({"step": self.step, "epoch": self.sampler.epoch, "loss": sum(window) / len(window),
                        "lr": lr_used, "grad_norm": float(gnorm),
                        "pairs_per_s": clock["pairs"] * self.dist.world / max(dt, 1e-9)})
            clock.update(t0=time.monotonic(), window=[], pairs=0)


def train(init: str | CrossAligner, src: str, tgt: str, out: str | Path, cfg: TrainConfig | None = None, *,
          stages: Sequence[str] = STAGES, model_options: dict | None = None) -> TrainResult:
    """Train Cross-Align: ``stages`` of ``("tlm", "ssa")`` into ``out/tlm`` and ``out/ssa``.

    ``init`` is a :class:`CrossAligner`, a Cross-Align directory (e.g. a stage-1 model for ``ssa`` alone) or a
    local BERT-like directory (then ``model_options`` are :class:`CrossAlignConfig` fields such as ``m``, ``n``).
    A stage whose ``DONE.json`` exists is not run again (with ``resume='auto'``); the aligner it wrote is used.
    """
    cfg = cfg or TrainConfig()
    stages = [s for s in STAGES if s in stages]
    if not stages or len(stages) != len(set(stages)):
        raise ConfigError(f"stages must be tlm, ssa or both, not {stages!r}")
    opts = dict(model_options or {})
    if isinstance(init, CrossAligner):
        aligner = init
    elif (Path(init) / CONFIG_NAME).is_file():
        aligner = CrossAligner.from_pretrained(init)
        for k, v in opts.items():               # extraction settings may change; the architecture may not
            if k in ("m", "n", "sequential_cross_update") and v != getattr(aligner.config, k):
                raise ConfigError(f"{init} is a Cross-Align model with {k}={getattr(aligner.config, k)}; "
                                  f"it cannot be changed to {v}")
            setattr(aligner.config, k, v)
        aligner.config.__post_init__()
    else:
        seed_all(cfg.seed)                      # the random cross-attention init
        aligner = CrossAligner.from_encoder(init, **opts)
    if stages[0] == "ssa" and not (isinstance(init, CrossAligner) or "tlm" in aligner.config.stages):
        log.warning("SSA from a model that had no TLM stage: its labels come from an untrained cross layer")
    result = None
    dist_ = init_distributed(cfg.device)        # one process group for both stages
    try:
        lock = lock_run_folder(Path(out), "Cross-Align training run", main=dist_.is_main,  # noqa: F841 (held)
                               share=dist_.broadcast)
        for stage in stages:
            sub = Path(out) / stage
            if cfg.resume == "auto" and (sub / DONE).is_file():
                log.info("%s: already done in %s, loading its model", stage, sub)
                aligner = CrossAligner.from_pretrained(sub / "model")
                result = TrainResult(stage, json.loads((sub / DONE).read_text())["step"], 0, sub, sub / "model",
                                     aligner)
                continue
            result = train_stage(stage, aligner, src, tgt, sub, cfg)
            aligner = result.aligner
    finally:
        dist_.close()
    return result


def describe(al: CrossAligner) -> dict:
    """The aligner's settings and size, for the run record."""
    return {"source": al.source, **dataclasses.asdict(al.config), "vocab": len(al.tokenizer),
            "hidden": al.model.config.hidden_size, "parameters": sum(p.numel() for p in al.model.parameters())}


def _norm(x):
    return json.loads(json.dumps(x, sort_keys=True, default=str))
