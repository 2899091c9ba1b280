"""The training loss (output projection + label-smoothed loss, forward and backward) in bf16 over batches whose
count of target tokens differs from batch to batch, as in training; this tree against an older one; one JSON.

    python benchmarks/bench_loss_shapes.py --before-src ../xlpe-before/src --threads 2 --rounds 5

Why: bf16 matrix products on CPU go through oneDNN, which builds a primitive (milliseconds of code generation) for
every product shape it has not cached, and the loss's products are shaped by the batch's count of target tokens.
:func:`xlpe.train.losses.projected_label_smoothed_nll` pads the rows to whole score blocks in 16 bits so that its
products take a few shapes only. Each round runs every source tree in a fresh process (each its own oneDNN caches,
capped at 64 entries as ``xlpe train`` caps them) over the same batches: ``--batches`` counts drawn uniformly from
``--tokens`` (Multi30k's updates hold 3,700-3,950 target tokens at 4,096 tokens per batch), after ``--warmup``
batches. Medians over rounds, ms per batch. Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def worker(a: argparse.Namespace) -> None:
    """Time the loss of this process's xlpe over the batches; print ms per batch."""
    import torch
    from xlpe.runtime import limit_onednn_caches
    limit_onednn_caches()
    torch.set_num_threads(a.threads)
    from xlpe.train.losses import projected_label_smoothed_nll
    g = torch.Generator().manual_seed(0)
    h = torch.randn(a.tokens[1], a.d_model, generator=g).bfloat16()
    w = (0.1 * torch.randn(a.vocab, a.d_model, generator=g)).bfloat16()
    counts = torch.randint(a.tokens[0], a.tokens[1] + 1, (a.warmup + a.batches,), generator=g).tolist()
    target = torch.randint(4, a.vocab, (a.tokens[1],), generator=g)
    t0 = 0.0
    for k, n in enumerate(counts):
        if k == a.warmup:
            t0 = time.perf_counter()
        hb, wb = h[:n].clone().requires_grad_(True), w.clone().requires_grad_(True)
        loss, _ = projected_label_smoothed_nll(hb, wb, target[:n], 0.1, ignore_index=0)
        loss.backward()
    print(json.dumps({"ms_per_batch": (time.perf_counter() - t0) / a.batches * 1000}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before-src", type=Path, required=True, help="an older xlpe source tree (its src/)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batches", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--tokens", type=int, nargs=2, default=[3700, 3950], help="range of target tokens per batch")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        worker(a)
        return
    trees = {"after": HERE.parent / "src", "before": a.before_src.resolve()}
    args = [sys.executable, __file__, "--worker", "--before-src", str(a.before_src), "--threads", str(a.threads),
            "--batches", str(a.batches), "--warmup", str(a.warmup), "--tokens", *map(str, a.tokens),
            "--vocab", str(a.vocab), "--d-model", str(a.d_model)]
    runs: dict[str, list[float]] = {k: [] for k in trees}
    for _ in range(a.rounds):
        for name, src in trees.items():
            env = {**os.environ, "PYTHONPATH": str(src)}
            out = subprocess.run(args, env=env, check=True, capture_output=True, text=True).stdout
            runs[name].append(round(json.loads(out.strip().splitlines()[-1])["ms_per_batch"], 2))
    med = {k: statistics.median(v) for k, v in runs.items()}
    print(json.dumps({"threads": a.threads, "rounds": a.rounds, "batches": a.batches, "tokens": a.tokens,
                      "vocab": a.vocab, "d_model": a.d_model, "ms_per_batch": runs, "median_ms": med,
                      "after_over_before_speed": round(med["before"] / med["after"], 3),
                      "rounds_after_faster": sum(x < y for x, y in zip(runs["after"], runs["before"]))}, indent=1))


if __name__ == "__main__":
    main()
