"""One NMT run of a recipe: train a model (resuming from its checkpoints), translate the test sets, score BLEU /
chrF, and optionally align the gold set from attention (SPEC §4.6); and the interleaved cost measurement that
compares systems' training speed on one machine."""

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
from xlpe.experiments.engine.archive import checkpoint_signature
from xlpe.experiments.engine.cache import cached_result, digest, file_sig, run_stage, run_stages
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
    systems always stated some option declares them without a default (:class:`xlpe.experiments.recipes.xl_pe.XLSystem`)."""

    pe: list
    pe_options: dict = field(default_factory=dict)
    encoder_free: bool = False
    noise: float = 0.0                       # the noise attack on the training xl channel (SPEC §4.8)
    model: dict = field(default_factory=dict)     # TransformerConfig fields over the recipe's [model]
    train: dict = field(default_factory=dict)     # TrainConfig fields over its [train] (a loss weight)
    train_channels: dict = field(default_factory=dict)  # channel specs over the shared ones (DPE targets of other links)
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
    mcfg, tcfg, dcfg = _train_configs(run_dir / "train", spec)
    reads = _reads(mcfg)
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
                                   channels=open_sources(_only(channels, reads)))
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
                                  merge=ev.attention_merge, channels=_only(g["channels"], reads), device="cpu")
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
        return channels_by_content(_only(channels, reads))

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


def _reads(mcfg, training: bool = False) -> set[str]:
    """The channels a model reads (inference inputs; with ``training`` its targets too)."""
    from xlpe.nn.positions import required_inputs, required_targets
    return required_inputs(mcfg) | (required_targets(mcfg) if training else set())


def _only(channels: dict[str, str] | None, names: set[str]) -> dict[str, str]:
    return {k: v for k, v in (channels or {}).items() if k in names}


def _train_configs(train_dir: Path, spec: RunSpec):
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
    if s.noise and "xl" not in _reads(mcfg):
        raise ConfigError(f"a noise ratio applies to XL positions, but the encodings {s.pe} read none")
    tcfg = TrainConfig(**{"log_every": 50, "progress": sys.stderr.isatty(), "threads": sh.threads,
                          "validate_every": 0, "keep_last": 1, **spec.train, "out": str(train_dir),
                          "seed": spec.seed, "resume": "auto"})
    dcfg = DataConfig(train_src=c.train_src, train_tgt=c.train_tgt, dev_src=c.dev_src, dev_tgt=c.dev_tgt,
                      subword_model=c.spm, train_channels=_only(spec.train_channels, _reads(mcfg, training=True)),
                      dev_channels=_only(c.dev_channels, _reads(mcfg)) if c.dev_src else {},
                      train_orders_noise=s.noise, noise_seed=spec.seed, noise_unit=sh.noise_unit)
    return mcfg, tcfg, dcfg


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


def measure_cost(out_dir: Path, systems: dict[str, System], shared: Shared, *, rounds: int, updates: int,
                 seed: int = 1) -> dict:
    """Training speed of each system relative to the first, measured in interleaved rounds.

    Every system trains with the grid's own model, optimiser, batches and data (``shared``, its encoder kept: the
    cost compares encodings), through :func:`xlpe.train.trainer.train`. Round ``r`` takes every system in turn from
    update ``r·updates`` to ``(r+1)·updates``, resuming its checkpoint, so that all systems meet the same machine
    noise. Round 0 is warm-up and is not counted. The tokens/s of a round is the trainer's own figure for that
    round's second half, which excludes model loading and checkpoint writing. Each system gets the median of its
    per-round tokens/s and of its per-round ratio to the reference. All systems see the same batches, since they
    share the seed.
    """
    from xlpe.train.trainer import train

    if rounds < 1 or updates < 2:
        raise ConfigError("the cost measurement needs cost_rounds >= 1 and cost_updates >= 2")
    opts = {k: v for k, v in shared.train.items() if k not in STOPS + ("save_every", "log_every")}
    tps: dict[str, list[float]] = {n: [] for n in systems}
    for r in range(rounds + 1):
        for name, system in systems.items():
            budget = {"max_updates": (r + 1) * updates, "save_every": updates, "log_every": updates // 2,
                      "keep_last": 1, "cache_data": True, "progress": False}
            spec = RunSpec(system=dataclasses.replace(system, encoder_free=False, noise=0.0,
                                                      train={**system.train, **budget}), seed=seed,
                           shared=dataclasses.replace(shared, train=opts, corpus=dataclasses.replace(
                               shared.corpus, dev_src=None, dev_tgt=None)))
            train(*_train_configs(out_dir / name, spec))
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


def decode_cost_stage(out: Path, names: list[str], seed: int, *, src: str, channels: dict[str, str], beam: int,
                      lenpen: float, threads: int, rounds: int, sentences: int = 200) -> dict:
    """:func:`measure_decode_cost` of the seed-``seed`` models of ``names`` (the first is the reference), found in
    ``out/runs/<name>/seed<seed>/train``, as the cached stage ``decode-cost``; systems without a trained model
    are left out (with a warning). Models whose checkpoints an archive left out (:mod:`xlpe.experiments.engine.archive`)
    count by their recorded signatures: their cached measurement is used, and none is made without them."""
    from xlpe.nn.checkpoint import latest_checkpoint

    cks, sigs = {}, {}
    for n in names:
        train_dir = Path(out) / "runs" / n / f"seed{seed}" / "train"
        sig = checkpoint_signature(train_dir)
        if sig is None:
            log.warning("decode cost: no trained model of %s (seed %d); left out", n, seed)
            continue
        sigs[n] = sig
        ck = latest_checkpoint(train_dir) if train_dir.is_dir() else None
        if ck is not None:
            cks[n] = str(ck)
    if len(sigs) < 2 or names[0] not in sigs:
        return {}
    params = DecodeCostInputs(checkpoints=sigs, src=file_sig(src), beam=beam, lenpen=lenpen, threads=threads,
                              rounds=rounds, sentences=sentences,
                              channels={k: file_sig(v.split(":", 1)[-1]) for k, v in channels.items()})
    if len(cks) < len(sigs):                # restored from an archive: the recorded measurement or none
        cached = cached_result(Path(out), "decode-cost", params)
        if cached is None:
            log.warning("decode cost: the checkpoints of %s were archived away and no measurement of them is "
                        "recorded; left out", ", ".join(sorted(set(sigs) - set(cks))))
        return cached or {}
    return run_stage(Path(out), "decode-cost", params, lambda d: measure_decode_cost(
        cks, src=src, channels=channels, beam=beam, lenpen=lenpen, threads=threads, rounds=rounds,
        sentences=sentences))


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
                specs = open_sources(_only(channels, _reads(model.cfg)))
                t0 = time.perf_counter()
                with torch.inference_mode():
                    translate_lines(model, sw, lines, beam=beam, lenpen=lenpen, batch_size=64, channels=specs)
                if r:
                    sps[name].append(len(lines) / (time.perf_counter() - t0))
    finally:
        torch.set_num_threads(before)
    return {"rounds": rounds, "sentences": len(lines), "beam": beam, "threads": threads,
            **_relative(sps, "sentences_per_s")}


def _declared_options(pe: list[str]) -> set[str]:
    from xlpe.nn.positions import ENCODINGS
    return {k for n in pe for k in ENCODINGS[n].options}
