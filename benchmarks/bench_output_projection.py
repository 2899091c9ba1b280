"""The decoder's output projection at inference: ``x @ W.t()`` against oneDNN's linear kernel with ``W`` packed once.

Beam search projects 1 to ``batch * beam`` decoder rows onto the whole target vocabulary at every step; on CPU the
decoder does it through ``torch.ops.mkldnn._linear_pointwise`` with the weight packed once
(:class:`xlpe.nn.transformer.Decoder`, chosen by :mod:`xlpe.nn.device`). This measures both on random float32
weights of the given shape, at each row count, the two methods alternating within every round; prints one JSON
object with the median microseconds per product, the ratio, and each round's figures. The `small` Multi30k model's
shape is the default (8,000 pieces, d = 256).

    python benchmarks/bench_output_projection.py --threads 2 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def timed(f, reps: int) -> float:
    """Microseconds per call of ``f`` over ``reps`` calls (after two warm-up calls)."""
    f()
    f()
    t = time.perf_counter()
    for _ in range(reps):
        f()
    return (time.perf_counter() - t) / reps * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 5, 16, 32, 64, 128, 320])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    w = torch.randn(a.vocab, a.d_model) * a.d_model ** -0.5
    runs: dict[int, dict[str, list[float]]] = {m: {"plain": [], "onednn": []} for m in a.rows}
    with torch.inference_mode():
        packed = torch.ops.mkldnn._reorder_linear_weight(w)
        for _ in range(a.rounds):
            for m in a.rows:
                x = torch.randn(m, a.d_model)
                runs[m]["plain"].append(timed(lambda: x @ w.t(), a.reps))
                runs[m]["onednn"].append(timed(
                    lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""), a.reps))
    med = {m: {k: round(statistics.median(v), 1) for k, v in r.items()} for m, r in runs.items()}
    print(json.dumps({"vocab": a.vocab, "d_model": a.d_model, "threads": a.threads, "rounds": a.rounds,
                      "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "median_us": med,
                      "plain_over_onednn": {m: round(v["plain"] / v["onednn"], 2) for m, v in med.items()},
                      "onednn_won_rounds": {m: sum(p > o for p, o in zip(r["plain"], r["onednn"]))
                                            for m, r in runs.items()},
                      "runs": {m: {k: [round(t, 1) for t in v] for k, v in r.items()} for m, r in runs.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
