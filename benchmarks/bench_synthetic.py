"""Speed and memory of the synthetic language-pair generator; prints one JSON object.

    python benchmarks/bench_synthetic.py                  # 100k pairs per profile, generate() only
    python benchmarks/bench_synthetic.py --write          # also synth() to a temporary folder (all 5 files)
    python benchmarks/bench_synthetic.py --n 1000000 --profiles sov   # memory stays flat (streaming)

Reported per profile: pairs/s by wall clock and by process CPU time (the CPU figure is the one to compare
on a shared machine), mean source/target length, and the growth of the peak RSS while streaming
(should stay at a few MB whatever ``--n`` is, since nothing is accumulated).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import tempfile
import time

from xlpe import __version__
from xlpe.data.synthetic import PROFILES, SyntheticConfig, generate, synth


def _maxrss_mb() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return r / (1024 * 1024) if sys.platform == "darwin" else r / 1024


def bench_generate(profile: str, n: int, seed: int) -> dict:
    cfg = SyntheticConfig(profile=profile, seed=seed)
    next(iter(generate(cfg, 1)))                    # build the lexicon once outside the timing
    rss0 = _maxrss_mb()
    w0, c0 = time.perf_counter(), time.process_time()
    src = tgt = 0
    for p in generate(cfg, n):
        src += len(p.src)
        tgt += len(p.tgt)
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    return {"pairs": n, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "pairs_per_s_wall": round(n / wall), "pairs_per_s_cpu": round(n / cpu),
            "mean_src_len": round(src / n, 2), "mean_tgt_len": round(tgt / n, 2),
            "peak_rss_growth_mb": round(_maxrss_mb() - rss0, 1)}


def bench_synth(profile: str, n: int, seed: int) -> dict:
    cfg = SyntheticConfig(profile=profile, seed=seed)
    with tempfile.TemporaryDirectory() as d:
        w0, c0 = time.perf_counter(), time.process_time()
        synth(d, cfg, {"train": n, "dev": 1000, "test": 1000})
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    total = n + 2000
    return {"pairs": total, "wall_s": round(wall, 3), "cpu_s": round(cpu, 3),
            "pairs_per_s_wall": round(total / wall), "pairs_per_s_cpu": round(total / cpu)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="pairs per profile")
    ap.add_argument("--profiles", nargs="+", default=list(PROFILES), choices=list(PROFILES), help="profiles to run")
    ap.add_argument("--seed", type=int, default=1, help="generator seed")
    ap.add_argument("--write", action="store_true", help="also time synth() writing all files")
    args = ap.parse_args(argv)
    out = {"benchmark": "synthetic", "xlpe_version": __version__, "python": platform.python_version(),
           "machine": platform.machine(), "n": args.n, "generate": {}, "synth": {}}
    for prof in args.profiles:
        out["generate"][prof] = bench_generate(prof, args.n, args.seed)
        if args.write:
            out["synth"][prof] = bench_synth(prof, args.n, args.seed)
    if not args.write:
        del out["synth"]
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
