"""xlpe's own decoding against CTranslate2 on the same exported model, interleaved round by round (so both meet
the same machine noise); prints one JSON object with medians over rounds and the agreement of the outputs.

    python benchmarks/bench_ctranslate2.py --checkpoint runs/x/checkpoint_best.pt --input test.src \\
        [--sentences 500 --beam 5 --rounds 3 --threads 1 --batch 64 --dtype float32|bfloat16|int8 \\
         --compute-type int8 --before-src ../xlpe-before/src --shortlist table.pt \\
         --shortlist-build train.en train.de --reference val.de --json-out results.json]

The model must be exportable (``pe`` of ``ape``, ``learned`` or ``rpe`` alone; ``xlpe export``). Sentences/s
count decoding only (the tokenisation into pieces and the model loading are outside the timed part, for both).
CTranslate2's length limit is xlpe's rule (1.2 S + 10) at the longest input: it has no per-sentence rule.

Every system decodes in a fresh process per round, as a user runs it, CTranslate2 too (``--ct2-worker``; in the
process that had exported the model with torch it ran slower: docs/results/speed.md). xlpe's worker (``--worker``)
calls ``retain_freed_memory()`` as ``xlpe translate`` does. The xlpe systems: ``xlpe`` (this checkout,
``--dtype``), ``xlpe-before`` (the source tree ``--before-src``, e.g. a
``git worktree`` of an earlier commit, in float32; a second tree is ``xlpe-before-2``, and so on),
``xlpe-shortlist`` (``--shortlist``, built from ``--shortlist-build`` when missing) and ``xlpe-int8``
(``--int8``), ``xlpe-workers`` (``--workers N``: N batches at once on threads, ``xlpe translate --workers``;
CTranslate2 then also runs as ``ctranslate2-workers`` with ``inter_threads`` N). With ``--reference`` every
system's BLEU is reported (sacreBLEU through ``xlpe.evaluate.bleu``);
choose settings on val, never on a test set.

``--full-steps N`` times the decoding step apart from the search's shape: both systems decode a copy of the model
whose EOS rows (embeddings, output projection) are zero, for exactly N steps (xlpe's length limit and
CTranslate2's ``max_decoding_length``), so no hypothesis ends early and every step has all ``beam`` rows of every
sentence; the report counts the CTranslate2 hypotheses that ran the N steps. There the outputs are compared on
their first N - 1 tokens (xlpe's last one is the EOS it is forced to), and as the two rank hypotheses of the
forced end differently, their agreement says little.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def worker(a) -> None:
    """Decode ``a.input`` with whatever xlpe is first on the path; print ``{"sent_per_s", "outputs"}``."""
    import torch
    from xlpe.infer.translate import decoding_model, translate_lines
    from xlpe.nn.checkpoint import load_model
    from xlpe.runtime import retain_freed_memory

    retain_freed_memory()
    torch.set_num_threads(a.threads)
    model, cfg, (sw, tgt_sw) = load_model(a.checkpoint)
    model = decoding_model(model, a.dtype)                   # cast once, outside the timed part
    kw = dict(beam=a.beam, lenpen=a.lenpen, batch_size=a.batch, beam_stop="fairseq", dtype=a.dtype)
    if a.full_steps:
        kw.update(max_len_a=0, max_len_b=a.full_steps - 1)     # EOS forced at step N - 1: N steps
    if a.decode_workers > 1:
        kw["workers"] = a.decode_workers
    if a.shortlist:
        from xlpe.infer.shortlist import prepare_shortlist
        kw["shortlist"] = prepare_shortlist(a.shortlist, cfg, (sw, tgt_sw))
    lines = open(a.input, encoding="utf-8").read().splitlines()[:a.sentences]
    with torch.inference_mode():
        translate_lines(model, sw, lines[:20], **kw)                                   # warm-up
        t0, c0 = time.perf_counter(), time.process_time()
        out = translate_lines(model, sw, lines, **kw)
        speed, cpu = len(lines) / (time.perf_counter() - t0), len(lines) / (time.process_time() - c0)
    print(json.dumps({"sent_per_s": speed, "cpu_sent_per_s": cpu, "outputs": out}))


def run_worker(a, src: Path, dtype: str, shortlist: str | None = None, workers: int = 1) -> dict:
    """One timed decoding in a fresh process with ``src`` first on PYTHONPATH."""
    cmd = [sys.executable, __file__, "--worker", "--checkpoint", a.checkpoint, "--input", a.input,
           "--sentences", str(a.sentences), "--beam", str(a.beam), "--lenpen", str(a.lenpen),
           "--threads", str(a.threads), "--batch", str(a.batch), "--dtype", dtype,
           "--decode-workers", str(workers), "--full-steps", str(a.full_steps)]
    if shortlist:
        cmd += ["--shortlist", shortlist]
    env = {**os.environ, "PYTHONPATH": str(src), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"worker failed ({' '.join(cmd)}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def ctranslate2_round(tr, pieces, a, max_len: int) -> tuple[float, float, list[list[str]]]:
    """Sentences/s by the clock and by this process's CPU time, and the best hypotheses (pieces)."""
    t0, c0 = time.perf_counter(), time.process_time()
    res = tr.translate_batch(pieces, beam_size=a.beam, length_penalty=a.lenpen, max_batch_size=a.batch,
                             max_decoding_length=max_len)
    n = len(pieces)
    return n / (time.perf_counter() - t0), n / (time.process_time() - c0), [r.hypotheses[0] for r in res]


def ct2_worker(a) -> None:
    """Decode the pieces in ``a.pieces`` with the CTranslate2 model ``a.ct2_worker``; print
    ``{"sent_per_s", "cpu_sent_per_s", "outputs"}`` (the best hypotheses, as pieces)."""
    import ctranslate2

    pieces = json.loads(Path(a.pieces).read_text(encoding="utf-8"))
    w = a.decode_workers
    tr = ctranslate2.Translator(a.ct2_worker, device="cpu", intra_threads=max(1, a.threads // w), inter_threads=w,
                                compute_type=a.compute_type)
    tr.translate_batch(pieces[:20], beam_size=a.beam, length_penalty=a.lenpen)      # warm-up
    speed, cpu, hyps = ctranslate2_round(tr, pieces, a, a.max_len)
    print(json.dumps({"sent_per_s": speed, "cpu_sent_per_s": cpu, "outputs": hyps}))


def run_ct2_worker(a, model_dir: Path, pieces_file: Path, max_len: int, workers: int = 1) -> dict:
    """One timed CTranslate2 decoding in a fresh process (``workers``: its ``inter_threads``, the threads divided
    among them)."""
    cmd = [sys.executable, __file__, "--ct2-worker", str(model_dir), "--pieces", str(pieces_file),
           "--max-len", str(max_len), "--checkpoint", a.checkpoint, "--input", a.input, "--beam", str(a.beam),
           "--lenpen", str(a.lenpen), "--threads", str(a.threads), "--batch", str(a.batch),
           "--compute-type", a.compute_type, "--decode-workers", str(workers)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode:
        raise SystemExit(f"CTranslate2 worker failed ({' '.join(cmd)}):\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def systems(a) -> dict[str, tuple[Path, str, str | None, int]]:
    """The xlpe systems timed: name -> (source tree, dtype, shortlist table, decoding workers)."""
    out = {"xlpe": (REPO / "src", a.dtype, None, 1)}
    for i, src in enumerate(a.before_src or []):
        out["xlpe-before" + (f"-{i + 1}" if i else "")] = (Path(src).resolve(), "float32", None, 1)
    if a.shortlist:
        out["xlpe-shortlist"] = (REPO / "src", a.dtype, a.shortlist, 1)
    if a.int8:
        out["xlpe-int8"] = (REPO / "src", "int8", None, 1)
    if a.workers > 1:
        out["xlpe-workers"] = (REPO / "src", a.dtype, None, a.workers)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="tokenised source text")
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "int8"), help="xlpe's weights")
    ap.add_argument("--compute-type", default="float32",
                    help="CTranslate2's compute_type (float32, int8, int8_float32, bfloat16 where supported, ...)")
    ap.add_argument("--before-src", nargs="+", default=None,
                    help="earlier xlpe src/ folders, timed in the same rounds (xlpe-before, xlpe-before-2, ...)")
    ap.add_argument("--shortlist", default=None, help="also time xlpe with this vocabulary shortlist table")
    ap.add_argument("--shortlist-build", nargs=2, default=None, metavar=("TRAIN_SRC", "TRAIN_TGT"),
                    help="build the --shortlist table from this training text first when it does not exist")
    ap.add_argument("--shortlist-size", nargs=2, type=int, default=None, metavar=("PER_SOURCE", "FREQUENT"))
    ap.add_argument("--int8", action="store_true", help="also time xlpe with --dtype int8")
    ap.add_argument("--workers", type=int, default=1,
                    help="also time both with this many batches decoded at once, the threads divided among them "
                         "(xlpe-workers: translate --workers; ctranslate2-workers: inter_threads)")
    ap.add_argument("--reference", default=None, help="reference translations of --input: BLEU per system")
    ap.add_argument("--no-ctranslate2", action="store_true", help="time the xlpe systems only")
    ap.add_argument("--json-out", default=None, help="also write the JSON object to this file")
    ap.add_argument("--full-steps", type=int, default=0, metavar="N",
                    help="decode exactly N steps with every beam alive (the model's EOS row zeroed; see above)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--ct2-worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--pieces", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--max-len", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--decode-workers", type=int, default=1, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.ct2_worker:
        return ct2_worker(a)
    from xlpe.nn.checkpoint import load_model

    model, cfg, (sw, tgt_sw) = load_model(a.checkpoint)
    if a.shortlist and not os.path.exists(a.shortlist):
        from xlpe.infer.shortlist import FREQUENT, PER_SOURCE, prepare_shortlist
        per_source, frequent = a.shortlist_size or (PER_SOURCE, FREQUENT)
        prepare_shortlist(a.shortlist, cfg, (sw, tgt_sw), a.shortlist_build, per_source=per_source,
                          frequent=frequent)
    lines = open(a.input, encoding="utf-8").read().splitlines()[:a.sentences]
    pieces = [sw.encode(line.split()).pieces for line in lines]
    # CTranslate2 has no per-sentence length rule: bound it by xlpe's (1.2 S + 10) for the longest input, so that a
    # weak model's run-away hypotheses stop where xlpe's longest could (not at the model's max_len of 1024)
    ct2_max_len = a.full_steps or min(cfg.max_len, int(1.2 * (max(map(len, pieces)) + 1) + 10))
    checkpoint = a.checkpoint
    with tempfile.TemporaryDirectory() as d:
        if a.full_steps:
            a.checkpoint = without_eos(a.checkpoint, cfg, Path(d) / "no-eos.pt")
        speed, outs, full = timed_rounds(a, pieces, ct2_max_len, tgt_sw)
    a.checkpoint = checkpoint
    report = summary(a, cfg, lines, speed, outs, ct2_max_len)
    if a.full_steps:
        report.update(full_steps=a.full_steps, ctranslate2_ran_all_steps=full)
    text = json.dumps(report, indent=1)
    print(text)
    if a.json_out:
        Path(a.json_out).write_text(text + "\n", encoding="utf-8")


def without_eos(checkpoint: str, cfg, out: Path) -> str:
    """A copy of ``checkpoint`` whose every embedding or output matrix over the vocabulary has a zero EOS row:
    EOS's logit is 0, below the top candidates of a trained model at every step (``--full-steps``)."""
    import torch

    ck = torch.load(checkpoint, map_location="cpu", weights_only=False)
    vocab = {cfg.src_vocab_size, cfg.tgt_vocab}
    for name, w in ck["model"].items():
        if w.dim() == 2 and w.shape[0] in vocab and name.endswith(("embed.weight", "out.weight")):
            w[cfg.eos_id] = 0.0
    torch.save(ck, out)
    return str(out)


def ct2_systems(a) -> dict[str, int]:
    """The CTranslate2 systems timed: name -> inter_threads."""
    return {"ctranslate2": 1, **({"ctranslate2-workers": a.workers} if a.workers > 1 else {})}


def timed_rounds(a, pieces, ct2_max_len: int, tgt_sw) -> tuple[dict, dict, dict]:
    """Every system once per round, in the same order each round; CTranslate2 last. Speeds by the clock under
    the system's name, by the process's CPU time under ``<name> cpu`` (steadier on a shared machine; with one
    thread it is the decoding's own work). Returns the speeds, the outputs, and with ``--full-steps`` the share of
    CTranslate2's hypotheses that ran all N steps."""
    speed: dict[str, list[float]] = {}
    outs: dict[str, list[str]] = {}
    full: dict[str, float] = {}       # --full-steps: the CTranslate2 hypotheses that ran all N steps
    with tempfile.TemporaryDirectory() as d:
        if not a.no_ctranslate2:
            from xlpe.infer.export import export_model

            export_model(a.checkpoint, Path(d) / "ct2")
            (Path(d) / "pieces.json").write_text(json.dumps(pieces), encoding="utf-8")
        for r in range(a.rounds):
            for name, (src, dtype, table, workers) in systems(a).items():
                res = run_worker(a, src, dtype, table, workers)
                speed.setdefault(name, []).append(res["sent_per_s"])
                speed.setdefault(f"{name} cpu", []).append(res["cpu_sent_per_s"])
                outs[name] = res["outputs"]
            for name, workers in ({} if a.no_ctranslate2 else ct2_systems(a)).items():
                res = run_ct2_worker(a, Path(d) / "ct2", Path(d) / "pieces.json", ct2_max_len, workers)
                speed.setdefault(name, []).append(res["sent_per_s"])
                speed.setdefault(f"{name} cpu", []).append(res["cpu_sent_per_s"])
                hyps = res["outputs"]
                if a.full_steps:    # N tokens, no EOS; xlpe's last step is its forced EOS: compare N - 1
                    full[name] = sum(len(h) == a.full_steps for h in hyps) / len(hyps)
                    hyps = [h[:a.full_steps - 1] for h in hyps]
                outs[name] = [tgt_sw.decode_pieces(h) for h in hyps]
            print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in speed.items()), file=sys.stderr)
    return speed, outs, full


def summary(a, cfg, lines, speed, outs, ct2_max_len: int) -> dict:
    """The JSON report: medians, per-round ratios to CTranslate2 and to xlpe, agreement of outputs, BLEU."""
    med = {k: round(statistics.median(v), 1) for k, v in speed.items()}
    report = {"checkpoint": a.checkpoint, "input": a.input, "dtype": a.dtype, "compute_type": a.compute_type,
              "d_model": cfg.d_model, "layers": [cfg.enc_layers, cfg.dec_layers], "sentences": len(lines),
              "beam": a.beam, "lenpen": a.lenpen, "batch": a.batch, "threads": a.threads, "rounds": a.rounds,
              "load_average_at_end": os.getloadavg()[0], "ctranslate2_max_decoding_length": ct2_max_len,
              "sent_per_s_rounds": {k: [round(x, 1) for x in v] for k, v in speed.items()},
              "sent_per_s_median": med}
    for base in ("ctranslate2", "ctranslate2-workers", "xlpe"):
        if base not in speed:
            continue
        report[f"vs_{base}"] = {     # clock against clock, CPU time against CPU time
            k: {"median_of_ratios": round(statistics.median(x / b for x, b in zip(v, speed[ref])), 3),
                "rounds_faster": sum(x > b for x, b in zip(v, speed[ref]))}
            for k, v in speed.items() if k not in (base, f"{base} cpu")
            for ref in [f"{base} cpu" if k.endswith(" cpu") else base]}
        report[f"same_output_as_{base}"] = {k: sum(x == y for x, y in zip(v, outs[base])) / len(lines)
                                            for k, v in outs.items() if k != base}
    if a.reference:
        from xlpe.evaluate.bleu import corpus_scores
        refs = open(a.reference, encoding="utf-8").read().splitlines()[:len(lines)]
        report["bleu"] = {k: round(corpus_scores(v, refs, metrics=("bleu",))["bleu"].score, 2)
                          for k, v in outs.items()}
    return report


if __name__ == "__main__":
    main()
