"""The options of NMT training: :class:`DataConfig` (where the data and its channels are) and
:class:`TrainConfig` (optimisation, batching, stopping, checkpoints, execution). Their fields are the
options of ``xlpe train`` and the keys of its TOML ``[data]`` / ``[train]`` tables (:mod:`xlpe.config`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

from xlpe.config import option
from xlpe.errors import ConfigError
from xlpe.runtime import ADAM_IMPLS, AMP_MODES
from xlpe.sources import channel_specs
from xlpe.train.losses import AUX_LOSS_MODES
from xlpe.train.schedule import KINDS as SCHEDULES, Schedule

#: training precisions: the autocast modes, and bf16 weights with float32 master copies (xlpe.train.master)
PRECISIONS = AMP_MODES + ("bf16-pure",)


@dataclass
class DataConfig:
    """Where the data is. Paths are plain text, one pre-tokenised sentence a line (words split on ASCII space)."""

    train_src: str = option("", "source side of the training bitext")
    train_tgt: str = option("", "target side of the training bitext (line-aligned with --train-src)")
    dev_src: str | None = option(None, "source side of the development set (validation loss / BLEU)")
    dev_tgt: str | None = option(None, "target side of the development set (also the BLEU reference)")
    subword_model: str | None = option(None, "joint sentencepiece model for both sides (from `xlpe subword train`)")
    src_subword: str | None = option(None, "source-side sentencepiece model (separate vocabularies)")
    tgt_subword: str | None = option(None, "target-side sentencepiece model (separate vocabularies)")
    train_sources: list[str] = option(help="channel sources of the training source, [NAME=]KIND:PATH, each filling "
                                           "the channels the model reads among those its kind declares: orders:FILE "
                                           "(xl), conllu:FILE (depth, tree_word, tree_head; read once), dpe:FILE "
                                           "(dpe_target), ...; see xlpe.sources", factory=list,
                                      metavar="[NAME=]KIND:PATH")
    dev_sources: list[str] = option(help="channel sources of the dev source, [NAME=]KIND:PATH", factory=list,
                                    metavar="[NAME=]KIND:PATH")
    train_orders_noise: float = option(0.0, "noise attack (SPEC §4.8): swap this ratio of the training pos_XL "
                                          "indices, in disjoint pairs; dev data stays clean")
    noise_seed: int = option(0, "seed of the noise attack")
    noise_unit: str = option("indices", "what the noise ratio counts: 'indices' (SPEC §4.8), 'pairs' (§12.9) or "
                                        "'probability' (each index picked with that probability, SPEC §10)",
                             choices=("indices", "pairs", "probability"))
    train_channels: dict[str, str] = option(help="channel sources of the training source, channel by channel, "
                                                 "NAME=[KIND:]PATH; kinds: orders, subword-orders, dpe, ints (one "
                                                 "line per sentence), conllu (trees) or preorderer (a BTG model "
                                                 "directory, run on the fly); see xlpe.sources", factory=dict,
                                            metavar="NAME=[KIND:]PATH")
    dev_channels: dict[str, str] = option(help="channel sources of the dev source, NAME=[KIND:]PATH",
                                          factory=dict, metavar="NAME=[KIND:]PATH")
    skip_long: bool = option(False, "skip (and count) training pairs longer than the model's max_len, or with an "
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

    def to_dict(self) -> dict:
        """The config as plain data (a channel source object becomes its description), for checkpoints and logs."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for key in ("train_channels", "dev_channels"):
            d[key] = {k: _plain(v) for k, v in d[key].items()}
        for key in ("train_sources", "dev_sources"):
            d[key] = [_plain(v) for v in d[key]]
        return d

    def channel_specs(self, split: str, reads: set[str] | None = None) -> dict[str, str]:
        """``name -> KIND:PATH`` of the ``train`` or ``dev`` channels: those of the sources (each the channels in
        ``reads`` among those it declares; all of them when None) and the per-channel ones
        (:func:`xlpe.sources.channel_specs`). (From Python a value may also be a source object.)"""
        if split == "train":
            return channel_specs(self.train_sources, self.train_channels, reads=reads)
        return channel_specs(self.dev_sources, self.dev_channels, reads=reads)


def _plain(value):
    """A spec as it is, a source object as its description."""
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    return f"<{getattr(value, 'description', type(value).__name__)}>"


@dataclass
class TrainConfig:
    """Every training option. Limits of 0 mean "no limit"; at least one of the ``max_*`` limits must be set."""

    out: str = option("runs/nmt", "output directory: checkpoints, logs, run.json")
    resume: str = option("auto", "'auto' = continue from the newest checkpoint in --out if there is one; 'none' = "
                               "start fresh (refused when --out already holds checkpoints); or a checkpoint path")
    seed: int = option(1, "random seed (model init, batch order, dropout)")
    # optimisation
    lr: float = option(5e-4, "peak learning rate (reached at the end of warm-up)")
    betas: tuple[float, float] = option((0.9, 0.98), "Adam betas", metavar=("B1", "B2"))
    adam_eps: float = option(1e-8, "Adam epsilon")
    weight_decay: float = option(0.0, "Adam weight decay (L2, as torch.optim.Adam applies it)")
    adam: str = option("fused", "Adam's implementation: 'fused' (one kernel for all parameters), 'foreach' or "
                                "'for-loop' (torch's default on CPU; xlpe's up to 0.1.x): the same algorithm, "
                                "the update's rounding differs", choices=ADAM_IMPLS)
    schedule: str = option("inverse_sqrt", "learning-rate schedule (see xlpe.train.schedule)", choices=SCHEDULES)
    warmup: int = option(4000, "linear warm-up updates")
    warmup_init_lr: float = option(1e-7, "learning rate of the first update (start of the warm-up)")
    end_lr: float = option(0.0, "final learning rate of the 'linear' schedule (reached at max_updates) and of "
                                 "'linear_time' (reached when max_time_minutes is spent)")
    label_smoothing: float = option(0.1, "label smoothing epsilon")
    clip_norm: float = option(0.0, "clip the gradient norm to this value (0 = no clipping)")
    aux_weights: dict[str, float] = option(help="weight of an auxiliary loss the model returns, NAME=W, over the "
                                                "default its encoding declares (0 switches one off)",
                                           factory=dict, metavar="NAME=W")
    aux_loss_mode: str = option("paper", "how auxiliary losses enter the objective: 'paper' adds w·aux to the "
                                         "per-token translation loss (Zheng et al.; SPEC §6.3 dpe_loss_mode='paper'); "
                                         "'fairseq' is the DPE code's (1-w)·loss_sum + w·aux, then divided by the "
                                         "token count",
                                choices=AUX_LOSS_MODES)
    # batching
    max_tokens: int = option(4096, "token budget of one batch, padding included (per process)")
    max_sentences: int | None = option(None, "cap on sentences per batch")
    batch_multiple: int = option(1, "round full batches down to a multiple of this many sentences, the rest going "
                                  "to the next batch (fairseq's --required-batch-size-multiple, 8 there)")
    update_freq: int = option(1, "accumulate gradients over this many batches per update")
    bucket: bool = option(True, "batch sentences of similar length together")
    bucket_ties: bool = option(False, "with bucket: sort sentences of the same padded length by source, then target "
                                      "length (half the padding of each side, about 3 per cent faster per "
                                      "update, but about 0.05 nats worse val NLL after 400 updates over 6 "
                                      "seeds: docs/results/speed.md); "
                                      "off = random order")
    # stopping
    max_updates: int = option(0, "stop after this many updates (0 = no limit)")
    max_epochs: int = option(0, "stop after this many passes over the training data (0 = no limit)")
    max_time_minutes: float = option(0.0, "stop after this much training time, summed over resumptions (0 = no limit)")
    patience: int = option(0, "early stopping: stop after this many validations without improvement (0 = off)")
    # validation and checkpoints
    validate_every: int = option(1000, "validate every N updates (and at the end; 0 = only at the end)")
    dev_bleu: bool = option(False, "also compute dev BLEU (greedy decoding, sacrebleu) when validating")
    best_metric: str = option("loss", "metric for checkpoint_best.pt and early stopping", choices=("loss", "bleu"))
    save_every: int = option(1000, "write a checkpoint every N updates (and at the end; 0 = only at the end)")
    keep_last: int = option(5, "keep the newest N step checkpoints (0 = keep all)")
    # execution
    amp: str = option("none", "precision: autocast bf16 (GPU or CPU) or fp16 (GPU, with loss scaling), or "
                      "bf16-pure (bf16 weights and activations, float32 master weights and optimizer)",
                      choices=PRECISIONS)
    trim_memory_every: int = option(0, "return the memory glibc holds free to the OS every N updates (lower peak "
                                       "RSS, some speed lost to page faults; 0 = never)")
    device: str = option("auto", "cpu, cuda, cuda:N, or auto (cuda when available)")
    threads: int = option(0, "torch CPU threads per process (0 = torch's default)")
    log_every: int = option(100, "write a training log row every N updates")
    log_format: str = option("csv", "format of train_log / valid_log", choices=("csv", "jsonl"))
    progress: bool = option(True, "show a progress bar (rank 0)")
    cache_data: bool = option(True, "keep the encoded training data in OUT/cache/*.npz and reuse it while the "
                                  "text, channel and subword files are unchanged")

    def __post_init__(self):
        self.betas = tuple(float(b) for b in self.betas)
        self.aux_weights = {str(k): float(v) for k, v in dict(self.aux_weights).items()}
        bad = []
        if len(self.betas) != 2:
            bad.append("betas needs two values")
        if not self.lr > 0 or self.warmup_init_lr < 0 or self.end_lr < 0:
            bad.append("lr must be > 0 (warmup_init_lr and end_lr >= 0)")
        if self.warmup < 0 or self.adam_eps <= 0 or self.weight_decay < 0 or self.clip_norm < 0:
            bad.append("warmup, weight_decay and clip_norm must be >= 0 and adam_eps > 0")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            bad.append("Adam betas must lie in [0, 1)")
        if self.update_freq < 1:
            bad.append("update_freq must be >= 1")
        if self.max_tokens < 1:
            bad.append("max_tokens must be >= 1")
        if not 0.0 <= self.label_smoothing < 1.0:
            bad.append("label_smoothing must be in [0, 1)")
        for name, choices in (("amp", PRECISIONS), ("adam", ADAM_IMPLS), ("best_metric", ("loss", "bleu")),
                              ("log_format", ("csv", "jsonl")), ("schedule", SCHEDULES)):
            if getattr(self, name) not in choices:
                bad.append(f"{name} must be one of {', '.join(choices)}, not {getattr(self, name)!r}")
        if min(self.max_updates, self.max_epochs, self.patience, self.save_every, self.validate_every,
               self.keep_last, self.threads, self.trim_memory_every) < 0 or self.max_time_minutes < 0:
            bad.append("limits and intervals must be >= 0")
        if self.log_every < 1:
            bad.append("log_every must be >= 1")
        if self.schedule == "linear_time" and not self.max_time_minutes > 0:
            bad.append("schedule='linear_time' decays over the training-time budget: set max_time_minutes")
        neg = sorted(k for k, w in self.aux_weights.items() if not w >= 0)
        if neg:
            bad.append(f"aux_weights must be >= 0 (got {', '.join(f'{k}={self.aux_weights[k]}' for k in neg)})")
        if self.aux_loss_mode not in AUX_LOSS_MODES:
            bad.append(f"aux_loss_mode must be one of {', '.join(AUX_LOSS_MODES)}, not {self.aux_loss_mode!r}")
        elif self.aux_loss_mode == "fairseq" and sum(self.aux_weights.values()) > 1:
            bad.append("aux_loss_mode='fairseq' weighs the translation loss by 1 - sum(aux_weights): the weights "
                       "must sum to at most 1")
        if bad:
            raise ConfigError("invalid TrainConfig: " + "; ".join(bad))

    def schedule_obj(self) -> Schedule:
        return Schedule(self.schedule, self.lr, self.warmup, self.warmup_init_lr,
                        self.max_updates or None, self.end_lr)


#: the fields whose change on resumption would change what the remaining run computes
RESUME_FIXED = ("seed", "lr", "betas", "adam_eps", "weight_decay", "adam", "schedule", "warmup", "warmup_init_lr",
                "label_smoothing", "clip_norm", "aux_weights", "aux_loss_mode", "max_tokens", "max_sentences",
                "update_freq", "bucket", "bucket_ties", "amp", "batch_multiple")

#: what a run did before an option existed: a checkpoint or run.json without the key ran with this value
PRE_OPTION_VALUES = {"adam": "for-loop", "bucket_ties": False}

#: data keys that, at these values, give no channel: the sources when empty, and the orders / trees options that
#: a run.json written before train_sources and dev_sources holds (what decides a training leaves them out)
NEUTRAL_DATA_VALUES = {"train_sources": [], "dev_sources": [], "train_orders": None, "dev_orders": None,
                       "orders_level": "word", "train_trees": None, "dev_trees": None}
