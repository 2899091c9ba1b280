"""One NMT run of a recipe, typed: a :class:`System` of a table, a seed and what a grid shares (:class:`Shared`: the
:class:`Corpus`, the :class:`Evaluation`); :func:`run_system` trains the model (resuming from its checkpoints),
translates the test sets, scores BLEU / chrF and optionally aligns the gold set from attention (SPEC §4.6);
:func:`run_grid` runs systems x seeds as cached stages. The training and decoding cost: :mod:`.cost`."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import logging
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import digest, file_sig, run_stages
from xlpe.keys import Inputs
from xlpe.experiments.engine.reuse import maybe_adopt, output_entries, take_results
from xlpe.experiments.engine.stages import read_text
from xlpe.experiments.engine.status import log_rows
from xlpe.io.atomic import atomic_write

log = logging.getLogger("xlpe.experiments")

#: the stopping rules of a recipe's [train] table (the per-run budget)
STOPS = ("max_updates", "max_epochs", "max_time_minutes")


def _median_tokens_per_s(run_dir: Path) -> float | None:
    log_file = run_dir / "train_log.csv"
    if not log_file.exists():
        return None
    with open(log_file, newline="") as f:
        vals = [float(r["tokens_per_s"]) for r in csv.DictReader(f) if r.get("tokens_per_s")]
    return round(statistics.median(vals), 1) if vals else None


def dev_curve(train_dir: Path) -> list[dict[str, float]]:
    """The dev-set validations of one run (``valid_log.csv`` or ``.jsonl``): ``step`` and the logged metrics
    (``valid_loss``, ``valid_nll``, ``valid_bleu`` with ``dev_bleu``), in update order; [] without a dev set."""
    keep = ("step", "valid_loss", "valid_nll", "valid_bleu")
    rows = log_rows(train_dir, "valid_log")
    curve = {int(r["step"]): {"step": int(r["step"]),
                              **{k: float(r[k]) for k in keep[1:] if r.get(k) not in (None, "")}} for r in rows}
    return [curve[k] for k in sorted(curve)]       # a resumed run may log a step twice: the last one counts


@dataclass(frozen=True)
class System(Inputs):
    """One system of a recipe's table: its encodings and what it changes of the run every system shares. Its key
    material (:mod:`xlpe.keys`) is the ``run`` entry of each of its runs' keys; a recipe whose
    systems always stated some option declares them without a default
    (:class:`xlpe.experiments.recipes.xl_pe.XLSystem`)."""

    pe: list
    pe_options: dict = field(default_factory=dict)
    encoder_free: bool = False
    noise: float = 0.0                       # the noise attack on the training xl channel (SPEC §4.8)
    model: dict = field(default_factory=dict)     # TransformerConfig fields over the recipe's [model]
    train: dict = field(default_factory=dict)     # TrainConfig fields over its [train] (a loss weight)
    # channel specs over the shared ones (e.g. DPE targets from other links)
    train_channels: dict = field(default_factory=dict)
    orders: dict = field(default_factory=dict)    # signatures of the XL orders only this system reads
    targets: list = field(default_factory=list)   # signatures of the DPE targets only this system reads

    def key_material(self) -> dict[str, Any]:
        m = super().key_material()
        if self.train_channels:              # by content, not by where they are
            m["train_channels"] = channels_by_content(self.train_channels)
        return m


@dataclass(frozen=True)
class Corpus:
    """What the runs of a grid train on and are tested on. Channels are ``name -> [KIND:]PATH`` specs
    (:mod:`xlpe.sources`), each passed only to a model that reads it, so one set serves every system; ``tests`` maps a
    name to ``(source, reference, channels)``. ``tokenized_by_design`` (the built-in pairs) silences sacrebleu's
    "forgot to detokenize" warning only."""

    spm: str
    train_src: str
    train_tgt: str
    dev_src: str | None = None
    dev_tgt: str | None = None
    train_channels: dict = field(default_factory=dict)
    dev_channels: dict = field(default_factory=dict)
    tests: dict = field(default_factory=dict)
    tokenized_by_design: bool = False

    @classmethod
    def of(cls, spm: str, paths: dict, tests: dict, *, train_channels: dict | None = None,
           dev_channels: dict | None = None, builtin: bool = False) -> "Corpus":
        """The corpus of a recipe's data stage (``paths``: its ``train_src``, ``train_tgt`` and optional
        ``dev_src``, ``dev_tgt``); ``builtin``: the built-in pairs' tokenised text."""
        return cls(spm=spm, train_src=paths["train_src"], train_tgt=paths["train_tgt"],
                   dev_src=paths.get("dev_src") or None, dev_tgt=paths.get("dev_tgt") or None,
                   train_channels=train_channels or {}, dev_channels=dev_channels or {}, tests=tests,
                   tokenized_by_design=builtin)


@dataclass(frozen=True)
class Evaluation:
    """How a trained model is measured: beam search on every test set; with ``gold`` (``{src, tgt, alignments,
    channels}``) also the AER / P / R of alignments read from its attention (SPEC §4.6), and of each ``more_gold``
    set; ``probe`` (optional, picklable): ``applies(model_config)``, ``signature()`` (what it reads, by content) and
    ``probe(model, subword_model) -> dict``, run while the checkpoint is there (e.g.
    :class:`xlpe.experiments.recipes.dpe.DPEProbe`)."""

    beam: int = 5
    lenpen: float = 0.6
    gold: dict | None = None
    more_gold: dict | None = None
    attention_layer: int = -2
    attention_merge: str = "any"
    probe: Any = None


@dataclass(frozen=True)
class Shared:
    """What every run of a grid shares: the recipe's [model] and [train] tables, the corpus, the evaluation, the
    threads per run, what a noise ratio counts, and the recipe folders whose finished runs of the same training a run
    takes (:mod:`xlpe.experiments.engine.reuse`)."""

    model: dict
    train: dict
    corpus: Corpus
    evaluation: Evaluation = field(default_factory=Evaluation)
    threads: int = 1
    noise_unit: str = "indices"
    reuse_runs: tuple = ()


@dataclass(frozen=True)
class RunSpec:
    """One NMT run: a system, a seed and what the grid shares, with the system's overrides merged in."""

    system: System
    seed: int
    shared: Shared

    @property
    def model(self) -> dict:
        return {**self.shared.model, **self.system.model}

    @property
    def train(self) -> dict:
        return {**self.shared.train, **self.system.train}

    @property
    def train_channels(self) -> dict:
        return {**self.shared.corpus.train_channels, **self.system.train_channels}


@dataclass(frozen=True)
class RunKey(Inputs):
    """What changes the result of every run of a grid besides its system, seed and gold set, by content: the
    recipe's [model] and [train], decoding, subwords, and the test sets, channels or data its runs read."""

    model: dict
    train: dict
    beam: int
    lenpen: float
    spm: list
    tests: Any = None
    channels: dict | None = None
    attention: list | None = None
    more_gold: list | None = None
    extra_tests: dict | None = None
    train_orders: list | None = None
    gold_orders: list | None = None
    data: list | None = None


@dataclass(frozen=True)
class RunInputs(Inputs):
    """A run's cache key: its system (``run``), seed, the grid's :class:`RunKey` and whether it aligns the gold
    set (``more_gold`` enters only then). Threads and jobs are not in it: they change the speed, not the model a
    budget of updates trains."""

    system: System
    seed: int
    shared: RunKey
    gold: bool

    def key_material(self) -> dict[str, Any]:
        shared = self.shared.key_material()
        if not self.gold:
            shared.pop("more_gold", None)
        return {"run": self.system.key_material(), "seed": self.seed, **shared, "gold": self.gold}


def run_system(run_dir: Path, spec: RunSpec) -> dict:
    """Train one model (resuming from its checkpoints, or taking a finished run of ``reuse_runs``), translate every
    test set, score it, and measure what its :class:`Evaluation` asks for."""
    import torch

    from xlpe.data.subword import SubwordModel
    from xlpe.nn.transformer import count_parameters
    from xlpe.train.trainer import train

    sh, ev = spec.shared, spec.shared.evaluation
    mcfg, tcfg, dcfg = train_configs(run_dir / "train", spec)
    reads = model_reads(mcfg)
    probe = ev.probe if ev.probe is not None and ev.probe.applies(mcfg) else None
    evaluation = evaluation_signature(sh.corpus.tests, reads, beam=ev.beam, lenpen=ev.lenpen, gold=ev.gold,
                                      more_gold=ev.more_gold, attention_layer=ev.attention_layer,
                                      attention_merge=ev.attention_merge, probe=probe)
    reused = maybe_adopt(run_dir / "train", mcfg, tcfg, dcfg, list(sh.reuse_runs))
    if reused is None:
        taken = take_results(run_dir, mcfg, tcfg, dcfg, list(sh.reuse_runs), evaluation)
        if taken is not None:
            return taken
    t0 = time.time()
    res = train(mcfg, tcfg, dcfg)
    train_s = time.time() - t0
    net = res.model.eval()
    sw = SubwordModel.load(sh.corpus.spm)
    s = spec.system
    out: dict[str, Any] = {"pe": s.pe, "pe_options": mcfg.pe_options, "encoder_free": s.encoder_free,
                           "seed": spec.seed, "threads": sh.threads, "updates": res.step,
                           "stop_reason": res.stop_reason, "params": count_parameters(net),
                           "train_seconds": round(train_s, 1), "tokens_per_s": _median_tokens_per_s(run_dir / "train"),
                           "tests": _translate_tests(run_dir, net, sw, sh.corpus, ev, reads),
                           "evaluation": evaluation, **(reused or {})}
    if probe is not None:
        with torch.inference_mode():
            found = probe(net, sw)
        if found:
            out["probe"] = found
    if ev.gold is not None:
        out.update(_attention_alignments(run_dir, res.last_checkpoint, mcfg, ev, reads))
    return out


def _translate_tests(run_dir: Path, net, sw, corpus: Corpus, ev: Evaluation, reads: set[str]) -> dict:
    """Beam search on every test set (``<name>.hyp``), BLEU / chrF and the decoding speed of each."""
    import torch

    from xlpe.evaluate import bleu
    from xlpe.infer.translate import translate_lines
    from xlpe.sources import open_sources

    out = {}
    for name, (src, ref, channels) in corpus.tests.items():
        lines = read_text(src)
        t0 = time.time()
        with torch.inference_mode():
            hyps = translate_lines(net, sw, lines, beam=ev.beam, lenpen=ev.lenpen, batch_size=64,
                                   channels=open_sources(only_channels(channels, reads)))
        dec_s = time.time() - t0
        hyp_path = run_dir / f"{name}.hyp"
        with atomic_write(hyp_path) as f:
            f.writelines(h + "\n" for h in hyps)
        with (bleu.tokenized_by_design() if corpus.tokenized_by_design else contextlib.nullcontext()):
            sc = bleu.corpus_scores(hyps, read_text(ref))
        out[name] = {"bleu": sc["bleu"].score, "chrf": sc["chrf"].score, "hyp": str(hyp_path),
                     "decode_sent_per_s": round(len(lines) / max(dec_s, 1e-9), 1), "signature": sc["bleu"].signature}
    return out


def _attention_alignments(run_dir: Path, ckpt, mcfg, ev: Evaluation, reads: set[str]) -> dict:
    """AER / P / R of the alignments read from the model's attention on the gold set (and each ``more_gold`` set),
    kept as ``<name>.align`` for seed-aware AER tests."""
    from xlpe.evaluate.aer import corpus_aer
    from xlpe.infer.attention_align import align_from_model
    from xlpe.io.alignments import write_alignments

    layer = ev.attention_layer
    if not -mcfg.dec_layers <= layer < mcfg.dec_layers:
        log.warning("attention layer %d does not exist in a %d-layer decoder; using the last layer", layer,
                    mcfg.dec_layers)
        layer = -1

    def score(g: dict, name: str) -> dict:
        hyp_al = align_from_model(ckpt, read_text(g["src"]), read_text(g["tgt"]), layer=layer,
                                  merge=ev.attention_merge, channels=only_channels(g["channels"], reads), device="cpu")
        write_alignments(run_dir / f"{name}.align", hyp_al, 0)
        sc = corpus_aer(hyp_al, g["alignments"])
        return {"aer": sc.aer, "precision": sc.precision, "recall": sc.recall, "layer": layer,
                "merge": ev.attention_merge, "sentences": sc.sentences, "file": str(run_dir / f"{name}.align")}
    out = {"attention_alignment": score(ev.gold, "gold")}
    if ev.more_gold:
        out["attention_alignment_more"] = {k: score(g, k) for k, g in ev.more_gold.items()}
    return out


def channels_by_content(channels: dict | None) -> dict:
    """Channel specs (``name -> "kind:path"``) as cache keys see them: a file by its content, so a folder restored
    or moved elsewhere keeps its cached runs; a computed channel (no file) by its spec."""
    from xlpe.sources import split_spec

    out = {}
    for c, v in sorted((channels or {}).items()):
        path = split_spec(c, str(v))[1]
        out[c] = file_sig(path) if Path(path).is_file() else str(v)
    return out


def evaluation_signature(tests: dict, reads: set[str], *, beam: int, lenpen: float, gold: dict | None = None,
                         more_gold: dict | None = None, attention_layer: int = -2, attention_merge: str = "any",
                         probe: Any = None) -> str:
    """A digest of how :func:`run_system` evaluates a trained model: the test sets (source, reference and the
    channels the model reads, by content), beam and length penalty, the gold sets its attention is scored on (by
    content) and the probe that applies to the model (its ``signature()``). Two runs with the same training and this
    signature give the same results (:func:`xlpe.experiments.engine.reuse.take_results`)."""
    def chans(channels: dict | None) -> dict:
        return channels_by_content(only_channels(channels, reads))

    def gold_sig(g: dict) -> dict:
        return {"src": file_sig(g["src"]), "tgt": file_sig(g["tgt"]), "channels": chans(g.get("channels")),
                "alignments": digest([[sorted(a.sure), sorted(a.possible)] for a in g["alignments"]])}

    probe_sig = probe.signature() if probe is not None else None
    tests_sig = {n: [file_sig(src), file_sig(ref), chans(ch)] for n, (src, ref, ch) in sorted(tests.items())}
    return digest({"tests": tests_sig,
                   "beam": beam, "lenpen": lenpen, "gold": gold_sig(gold) if gold else None,
                   "more_gold": {k: gold_sig(g) for k, g in sorted((more_gold or {}).items())} if gold else None,
                   "attention": [attention_layer, attention_merge] if gold else None, "probe": probe_sig})


def run_grid(out: Path, systems: dict[str, System], seeds: list[int], shared: Shared, key: RunKey, *,
             jobs: int = 1, gold_for: set[str] = frozenset(),
             system_keys: dict[str, RunKey] | None = None) -> dict[str, dict]:
    """:func:`run_system` for every system and seed, cached and resumable as ``out/<system>/seed<k>``.

    ``key`` holds what changes every run's result besides its system and seed (:class:`RunKey`); ``system_keys``
    replaces it for the systems it names (with the signatures of inputs only they read). Only the systems in
    ``gold_for`` are aligned on the shared evaluation's gold sets. Runs go seed by seed, so an interrupted grid has
    every system of the first seeds rather than all seeds of a few. Returns ``{"<system>/seed<k>": result}`` with
    each run's dev validations (``dev_curve``).
    """
    import functools

    tasks, names = [], []
    no_gold = dataclasses.replace(shared, evaluation=dataclasses.replace(shared.evaluation, gold=None,
                                                                         more_gold=None))
    for seed in seeds:
        for name, system in systems.items():
            want_gold = shared.evaluation.gold is not None and name in gold_for
            inputs = RunInputs(system=system, seed=seed, shared=(system_keys or {}).get(name, key), gold=want_gold)
            spec = RunSpec(system=system, seed=seed, shared=shared if want_gold else no_gold)
            tasks.append((out, f"{name}/seed{seed}", inputs, functools.partial(run_system, spec=spec)))
            names.append(f"{name}/seed{seed}")
    log.info("%d runs (%d systems x %d seeds), %d at a time", len(tasks), len(systems), len(seeds), jobs)
    return {k: {**_here(r, out / k), "dev_curve": dev_curve(out / k / "train")}
            for k, r in zip(names, run_stages(tasks, jobs))}


def _here(result: dict, run_dir: Path) -> dict:
    """A run's result with its output files (translations, attention alignments) named where the run is now when
    the recorded ones are gone: a cached result records the paths of the folder it ran in, which may have moved or
    been restored elsewhere."""
    import copy
    r = copy.deepcopy(result)
    for entry in output_entries(r):
        for k in ("hyp", "file"):
            if entry.get(k) and not Path(entry[k]).exists() and (run_dir / Path(entry[k]).name).exists():
                entry[k] = str(run_dir / Path(entry[k]).name)
    return r


def model_reads(mcfg, training: bool = False) -> set[str]:
    """The channels a model reads (inference inputs; with ``training`` its targets too)."""
    from xlpe.nn.positions import required_inputs, required_targets
    return required_inputs(mcfg) | (required_targets(mcfg) if training else set())


def only_channels(channels: dict[str, str] | None, names: set[str]) -> dict[str, str]:
    return {k: v for k, v in (channels or {}).items() if k in names}


def train_configs(train_dir: Path, spec: RunSpec):
    """The model, training and data configs of one run (each channel passed only if the model reads it, each
    encoding given the options it declares)."""
    from xlpe.data.subword import SubwordModel
    from xlpe.nn.config import TransformerConfig
    from xlpe.train.config import DataConfig, TrainConfig

    s, sh, c = spec.system, spec.shared, spec.shared.corpus
    m = spec.model
    preset = m.pop("preset", "small")
    opts = {k: v for k, v in s.pe_options.items() if k in _declared_options(s.pe)}
    mcfg = TransformerConfig.from_preset(preset, **{**m, "src_vocab_size": SubwordModel.load(c.spm).vocab_size,
                                                    "pe": s.pe, "pe_options": opts, "encoder_free": s.encoder_free})
    if s.noise and "xl" not in model_reads(mcfg):
        raise ConfigError(f"a noise ratio applies to XL positions, but the encodings {s.pe} read none")
    tcfg = TrainConfig(**{"log_every": 50, "progress": sys.stderr.isatty(), "threads": sh.threads,
                          "validate_every": 0, "keep_last": 1, **spec.train, "out": str(train_dir),
                          "seed": spec.seed, "resume": "auto"})
    dcfg = DataConfig(train_src=c.train_src, train_tgt=c.train_tgt, dev_src=c.dev_src, dev_tgt=c.dev_tgt,
                      subword_model=c.spm,
                      train_channels=only_channels(spec.train_channels, model_reads(mcfg, training=True)),
                      dev_channels=only_channels(c.dev_channels, model_reads(mcfg)) if c.dev_src else {},
                      train_orders_noise=s.noise, noise_seed=spec.seed, noise_unit=sh.noise_unit)
    return mcfg, tcfg, dcfg


def _declared_options(pe: list[str]) -> set[str]:
    from xlpe.nn.positions import ENCODINGS
    return {k for n in pe for k in ENCODINGS[n].options}
