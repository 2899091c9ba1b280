"""float32 against bf16 matrix products on the `small` model's GEMM shapes: does this CPU have bf16 in hardware?

On CPUs with AVX512-BF16 or AMX, bf16 products run at 2-5x float32's rate; without them torch emulates bf16 and it
is slower than float32 (docs/results/speed.md). The two dtypes alternate round by round; prints one JSON
object with the medians (GFLOP/s per shape) and what torch reports of the CPU.

    python benchmarks/bench_matmul_dtypes.py --threads 2 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_fairseq_peer import matmul_peak  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import torch
    from xlpe.runtime import native_bf16
    runs: dict[str, list[dict]] = {"float32": [], "bfloat16": []}
    for _ in range(a.rounds):
        for dtype in runs:
            runs[dtype].append(matmul_peak(a.threads, dtype, min_reps=1 if dtype == "bfloat16" else 3)["gflops"])
    med = {dt: {k: round(statistics.median(r[k] for r in rs), 2) for k in rs[0]} for dt, rs in runs.items()}
    ratio = {k: round(med["bfloat16"][k] / med["float32"][k], 3) for k in med["float32"]}
    print(json.dumps({"threads": a.threads, "rounds": a.rounds, "torch": torch.__version__,
                      "cpu_capability": torch.backends.cpu.get_cpu_capability(), "native_bf16": native_bf16("cpu"),
                      "gflops_median": med, "bf16_over_fp32": ratio, "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
