"""One NMT run of a recipe: train a model (resuming from its checkpoints), translate the test sets, score BLEU /
chrF, and optionally align the gold set from attention (SPEC §4.6); and the interleaved cost measurement that
compares systems' training speed on one machine."""

from __future__ import annotations

import contextlib
import csv
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.experiments.archive import checkpoint_signature
from xlpe.experiments.cache import cached_result, digest, file_sig, run_stage, run_stages
from xlpe.experiments.reuse import maybe_adopt, output_entries, take_results
from xlpe.experiments.stages import read_text
from xlpe.experiments.status import log_rows
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


def run_system(run_dir: Path, *, pe: list[str], pe_options: dict, encoder_free: bool, seed: int,
               model: dict, train_opts: dict, spm: str, train_src: str, train_tgt: str, dev_src: str | None,
               dev_tgt: str | None, train_channels: dict[str, str], dev_channels: dict[str, str],
               tests: dict[str, tuple[str, str, dict[str, str]]], beam: int, lenpen: float, threads: int,
               noise: float = 0.0, noise_unit: str = "indices", gold: dict | None = None,
               more_gold: dict[str, dict] | None = None, attention_layer: int = -2,
               attention_merge: str = "any", tokenized_by_design: bool = False,
               reuse_runs: list[str] | None = None, probe: Any = None) -> dict:
    """Train one model (resuming from its checkpoints), translate every test set, and score it.

    Channels are ``name -> [KIND:]PATH`` specs (:mod:`xlpe.sources`) for the training, dev and test sources;
    each is passed only to a model that reads it, so one set of specs serves every system of a recipe.
    ``tests`` maps a name to ``(source, reference, channels)``. ``gold`` (optional) is ``{src, tgt,
    alignments (list of Alignment), channels}``: with it the run also reports the AER / P / R of alignments
    extracted from its attention (SPEC §4.6); ``more_gold`` (name -> such a dict) scores further gold sets the
    same way (``attention_alignment_more``). ``noise`` perturbs the training ``xl`` channel (SPEC §4.8).
    ``tokenized_by_design`` (the built-in pairs) silences sacrebleu's "forgot to detokenize" warning only.
    ``reuse_runs``: recipe folders whose finished runs with the same training this run adopts instead of training
    (:mod:`xlpe.experiments.reuse`). ``probe`` (optional, picklable): a measurement of the trained model with
    ``applies(model_config) -> bool``, ``signature() -> JSON`` (what it reads, by content) and ``probe(model,
    subword_model) -> dict``, kept in the result as ``probe``. It runs with the run, while the checkpoint is
    certainly there (a run restored by :mod:`xlpe.experiments.archive` has none); e.g.
    :class:`xlpe.experiments.dpe.DPEProbe`.
    """
    import torch

    from xlpe.data.subword import SubwordModel
    from xlpe.evaluate import bleu
    from xlpe.infer.translate import translate_lines
    from xlpe.nn.transformer import count_parameters
    from xlpe.sources import open_sources
    from xlpe.train.trainer import train

    sw = SubwordModel.load(spm)
    mcfg, tcfg, dcfg = _train_configs(
        run_dir / "train", pe=pe, pe_options=pe_options, encoder_free=encoder_free, seed=seed, model=model,
        train_opts=train_opts, spm=spm, train_src=train_src, train_tgt=train_tgt, dev_src=dev_src,
        dev_tgt=dev_tgt, train_channels=train_channels, dev_channels=dev_channels, threads=threads, noise=noise,
        noise_unit=noise_unit)
    reads = _reads(mcfg)
    if probe is not None and not probe.applies(mcfg):
        probe = None
    evaluation = evaluation_signature(tests, reads, beam=beam, lenpen=lenpen, gold=gold, more_gold=more_gold,
                                      attention_layer=attention_layer, attention_merge=attention_merge, probe=probe)
    reused = maybe_adopt(run_dir / "train", mcfg, tcfg, dcfg, reuse_runs)
    if reused is None:
        taken = take_results(run_dir, mcfg, tcfg, dcfg, reuse_runs, evaluation)
        if taken is not None:
            return taken
    t0 = time.time()
    res = train(mcfg, tcfg, dcfg)
    train_s = time.time() - t0
    net = res.model.eval()
    out: dict[str, Any] = {"pe": pe, "pe_options": mcfg.pe_options, "encoder_free": encoder_free, "seed": seed,
                           "threads": threads, "updates": res.step, "stop_reason": res.stop_reason,
                           "params": count_parameters(net), "train_seconds": round(train_s, 1),
                           "tokens_per_s": _median_tokens_per_s(run_dir / "train"), "tests": {},
                           "evaluation": evaluation, **(reused or {})}
    for name, (src, ref, channels) in tests.items():
        lines = read_text(src)
        t0 = time.time()
        with torch.inference_mode():
            hyps = translate_lines(net, sw, lines, beam=beam, lenpen=lenpen, batch_size=64,
                                   channels=open_sources(_only(channels, reads)))
        dec_s = time.time() - t0
        hyp_path = run_dir / f"{name}.hyp"
        with atomic_write(hyp_path) as f:
            f.writelines(h + "\n" for h in hyps)
        with (bleu.tokenized_by_design() if tokenized_by_design else contextlib.nullcontext()):
            sc = bleu.corpus_scores(hyps, read_text(ref))
        out["tests"][name] = {"bleu": sc["bleu"].score, "chrf": sc["chrf"].score, "hyp": str(hyp_path),
                              "decode_sent_per_s": round(len(lines) / max(dec_s, 1e-9), 1),
                              "signature": sc["bleu"].signature}
    if probe is not None:
        with torch.inference_mode():
            found = probe(net, sw)
        if found:
            out["probe"] = found
    if gold is not None:
        from xlpe.evaluate.aer import corpus_aer
        from xlpe.infer.attention_align import align_from_model
        ckpt = res.last_checkpoint
        if not -mcfg.dec_layers <= attention_layer < mcfg.dec_layers:
            log.warning("attention layer %d does not exist in a %d-layer decoder; using the last layer",
                        attention_layer, mcfg.dec_layers)
            attention_layer = -1

        def score(g: dict, name: str) -> dict:
            from xlpe.io.alignments import write_alignments
            hyp_al = align_from_model(ckpt, read_text(g["src"]), read_text(g["tgt"]), layer=attention_layer,
                                      merge=attention_merge, channels=_only(g["channels"], reads), device="cpu")
            write_alignments(run_dir / f"{name}.align", hyp_al, 0)          # kept for seed-aware AER tests
            sc = corpus_aer(hyp_al, g["alignments"])
            return {"aer": sc.aer, "precision": sc.precision, "recall": sc.recall, "layer": attention_layer,
                    "merge": attention_merge, "sentences": sc.sentences, "file": str(run_dir / f"{name}.align")}
        out["attention_alignment"] = score(gold, "gold")
        if more_gold:
            out["attention_alignment_more"] = {k: score(g, k) for k, g in more_gold.items()}
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
    signature give the same results (:func:`xlpe.experiments.reuse.take_results`)."""
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


def run_grid(out: Path, systems: dict[str, dict], seeds: list[int], *, key: dict, jobs: int = 1,
             gold_for: set[str] = frozenset(), gold: dict | None = None, more_gold: dict | None = None,
             system_keys: dict[str, dict] | None = None, **common: Any) -> dict[str, dict]:
    """:func:`run_system` for every system and seed, cached and resumable as ``out/<system>/seed<k>``.

    ``systems`` maps a name to its run options (``pe``, ``pe_options``, ``encoder_free``, ``noise``, and overrides
    of the common arguments: ``model`` and ``train`` entries merged into ``model`` / ``train_opts``,
    ``train_channels`` replacing channels of the same name: a deeper control, a loss weight); ``key``
    holds everything else that changes a run's result (model, budget, data signatures) and enters each run's
    cache key with the options, the seed and whether it aligns the gold set (systems in ``gold_for``);
    ``system_keys`` replaces ``key`` for the systems it names (e.g. with the signatures of inputs only they
    read). Threads and jobs are not in the key: they change the speed, not the model a budget of updates
    trains, so a table can be filled with one thread per run in one sitting and two in another. Runs go seed by
    seed, so an interrupted grid has every system of the first seeds rather than all seeds of a few. Returns
    ``{"<system>/seed<k>": result}``.
    """
    import functools

    tasks, keys = [], []
    for seed in seeds:
        for name, ro in systems.items():
            want_gold = gold is not None and name in gold_for
            # a system's own channels (e.g. DPE targets from other links) by content, not by where they are
            run_key = {**ro, "train_channels": channels_by_content(ro["train_channels"])} if ro.get(
                "train_channels") else ro
            params = {"run": run_key, "seed": seed, **(system_keys or {}).get(name, key), "gold": want_gold}
            if not want_gold:
                params.pop("more_gold", None)
            fn = functools.partial(run_system, pe=ro["pe"], pe_options=ro.get("pe_options", {}),
                                   encoder_free=ro.get("encoder_free", False), noise=ro.get("noise", 0.0),
                                   seed=seed, gold=gold if want_gold else None,
                                   more_gold=more_gold if want_gold else None, **_overridden(common, ro))
            tasks.append((out, f"{name}/seed{seed}", params, fn))
            keys.append(f"{name}/seed{seed}")
    log.info("%d runs (%d systems x %d seeds), %d at a time", len(tasks), len(systems), len(seeds), jobs)
    # each run's dev validations, read from its log (so cached runs have them too)
    return {k: {**_here(r, out / k), "dev_curve": dev_curve(out / k / "train")}
            for k, r in zip(keys, run_stages(tasks, jobs))}


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


def _overridden(common: dict, ro: dict) -> dict:
    """``common`` run arguments with a system's ``model`` / ``train`` / ``train_channels`` overrides merged in."""
    out = dict(common)
    for k, arg in (("model", "model"), ("train", "train_opts"), ("train_channels", "train_channels")):
        if ro.get(k):
            out[arg] = {**(common.get(arg) or {}), **ro[k]}
    return out


def _reads(mcfg, training: bool = False) -> set[str]:
    """The channels a model reads (inference inputs; with ``training`` its targets too)."""
    from xlpe.nn.positions import required_inputs, required_targets
    return required_inputs(mcfg) | (required_targets(mcfg) if training else set())


def _only(channels: dict[str, str] | None, names: set[str]) -> dict[str, str]:
    return {k: v for k, v in (channels or {}).items() if k in names}


def _train_configs(train_dir: Path, *, pe: list[str], pe_options: dict, encoder_free: bool, seed: int, model: dict,
                   train_opts: dict, spm: str, train_src: str, train_tgt: str, dev_src: str | None = None,
                   dev_tgt: str | None = None, train_channels: dict[str, str] | None = None,
                   dev_channels: dict[str, str] | None = None, threads: int = 1, noise: float = 0.0,
                   noise_unit: str = "indices"):
    """The model, training and data configs of one recipe run (each channel passed only if the model reads it)."""
    from xlpe.data.subword import SubwordModel
    from xlpe.nn.config import TransformerConfig
    from xlpe.train.config import DataConfig, TrainConfig

    m = dict(model)
    preset = m.pop("preset", "small")
    opts = {k: v for k, v in pe_options.items() if k in _declared_options(pe)}
    mcfg = TransformerConfig.from_preset(preset, **{**m, "src_vocab_size": SubwordModel.load(spm).vocab_size,
                                                    "pe": pe, "pe_options": opts, "encoder_free": encoder_free})
    if noise and "xl" not in _reads(mcfg):
        raise ConfigError(f"a noise ratio applies to XL positions, but the encodings {pe} read none")
    tcfg = TrainConfig(**{"log_every": 50, "progress": sys.stderr.isatty(), "threads": threads,
                          "validate_every": 0, "keep_last": 1, **train_opts, "out": str(train_dir),
                          "seed": seed, "resume": "auto"})
    dcfg = DataConfig(train_src=train_src, train_tgt=train_tgt, dev_src=dev_src, dev_tgt=dev_tgt,
                      subword_model=spm, train_channels=_only(train_channels, _reads(mcfg, training=True)),
                      dev_channels=_only(dev_channels, _reads(mcfg)) if dev_src else {},
                      train_orders_noise=noise, noise_seed=seed, noise_unit=noise_unit)
    return mcfg, tcfg, dcfg


def measure_cost(out_dir: Path, systems: dict[str, tuple[list[str], dict]], *, model: dict, train_opts: dict,
                 spm: str, train_src: str, train_tgt: str, train_channels: dict[str, str], threads: int,
                 rounds: int, updates: int, seed: int = 1) -> dict:
    """Training speed of each system relative to the first, measured in interleaved rounds.

    ``systems`` maps a name to ``(pe, pe_options)`` or ``(pe, pe_options, overrides)`` (``model`` / ``train`` /
    ``train_channels`` as in :func:`run_grid`); the first is the reference. Every system trains with the
    recipe's own model, optimiser, batches and data, through :func:`xlpe.train.trainer.train`. Round ``r``
    takes every system in turn from update ``r·updates`` to ``(r+1)·updates``, resuming its checkpoint, so
    that all systems meet the same machine noise. Round 0 is warm-up and is not counted. The tokens/s of a
    round is the trainer's own figure for that round's second half, which excludes model loading and
    checkpoint writing. Each system gets the median of its per-round tokens/s and of its per-round ratio
    to the reference. All systems see the same batches, since they share the seed.
    """
    from xlpe.train.trainer import train

    if rounds < 1 or updates < 2:
        raise ConfigError("the cost measurement needs cost_rounds >= 1 and cost_updates >= 2")
    opts = {k: v for k, v in train_opts.items() if k not in STOPS + ("save_every", "log_every")}
    tps: dict[str, list[float]] = {n: [] for n in systems}
    for r in range(rounds + 1):
        for name, (pe, pe_options, *over) in systems.items():
            o = _overridden({"model": model, "train_opts": opts, "train_channels": train_channels},
                            over[0] if over else {})
            mcfg, tcfg, dcfg = _train_configs(
                out_dir / name, pe=pe, pe_options=pe_options, encoder_free=False, seed=seed, model=o["model"],
                train_opts={**o["train_opts"], "max_updates": (r + 1) * updates, "save_every": updates,
                            "log_every": updates // 2, "keep_last": 1, "cache_data": True, "progress": False},
                spm=spm, train_src=train_src, train_tgt=train_tgt, train_channels=o["train_channels"],
                threads=threads)
            train(mcfg, tcfg, dcfg)
            if r:
                with open(out_dir / name / "train_log.csv", newline="") as f:
                    row = [x for x in csv.DictReader(f) if int(x["step"]) == (r + 1) * updates]
                tps[name].append(float(row[-1]["tokens_per_s"]))
    return {"rounds": rounds, "updates": updates, "threads": threads, **_relative(tps, "tokens_per_s")}


def decode_cost_stage(out: Path, names: list[str], seed: int, *, src: str, channels: dict[str, str], beam: int,
                      lenpen: float, threads: int, rounds: int, sentences: int = 200) -> dict:
    """:func:`measure_decode_cost` of the seed-``seed`` models of ``names`` (the first is the reference), found in
    ``out/runs/<name>/seed<seed>/train``, as the cached stage ``decode-cost``; systems without a trained model
    are left out (with a warning). Models whose checkpoints an archive left out (:mod:`xlpe.experiments.archive`)
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
    params = {"checkpoints": sigs, "src": file_sig(src), "beam": beam,
              "lenpen": lenpen, "threads": threads, "rounds": rounds, "sentences": sentences,
              "channels": {k: file_sig(v.split(":", 1)[-1]) for k, v in channels.items()}}
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
