"""Linear layers at inference: the plain product against oneDNN's linear kernel with the weight packed once.

Beam search projects 1 to ``batch * beam`` decoder rows onto the whole target vocabulary at every step, and runs
every linear layer of the decoder on as many rows; on CPU the decoder takes ``torch.ops.mkldnn._linear_pointwise``
with the weight packed once for its float32 output projection (:class:`xlpe.nn.transformer.Decoder`, chosen by
:mod:`xlpe.nn.device`). This measures both on random weights of each shape (``OUTxIN``) and type (bf16: every
layer packed was tried and not kept, docs/results/speed.md), at each row count, the two methods alternating within
every round; prints one JSON object with the median microseconds per product, the ratio, and each round's figures.
The `small` Multi30k model's output projection is the default (8,000 pieces, d = 256); its other layers are
768x256 (stacked Q/K/V), 512x256 (stacked K/V), 256x256, 1024x256 and 256x1024.

    python benchmarks/bench_output_projection.py --threads 2 --rounds 5
    python benchmarks/bench_output_projection.py --dtype bfloat16 --shapes 8000x256 768x256 1024x256 256x1024
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


def shape(text: str) -> tuple[int, int]:
    """``OUTxIN`` as a pair of ints."""
    out, _, inp = text.partition("x")
    return int(out), int(inp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=shape, nargs="+", default=[(8000, 256)], help="weights as OUTxIN")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--rows", type=int, nargs="+", default=[1, 2, 5, 16, 32, 64, 128, 320])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = getattr(torch, a.dtype)
    names = [f"{o}x{i}" for o, i in a.shapes]
    runs = {n: {m: {"plain": [], "onednn": []} for m in a.rows} for n in names}
    with torch.inference_mode():
        weights = {n: (torch.randn(o, i) * i ** -0.5).to(dtype) for n, (o, i) in zip(names, a.shapes)}
        packed = {n: torch.ops.mkldnn._reorder_linear_weight(w) for n, w in weights.items()}
        for _ in range(a.rounds):
            for n, w in weights.items():
                for m in a.rows:
                    x = torch.randn(m, w.shape[1]).to(dtype)
                    runs[n][m]["plain"].append(timed(lambda: x @ w.t(), a.reps))
                    runs[n][m]["onednn"].append(timed(
                        lambda: torch.ops.mkldnn._linear_pointwise(x, packed[n], None, "none", [], ""), a.reps))
    med = {n: {m: {k: round(statistics.median(v), 1) for k, v in r.items()} for m, r in rs.items()}
           for n, rs in runs.items()}
    print(json.dumps({"shapes": names, "dtype": a.dtype, "threads": a.threads, "rounds": a.rounds,
                      "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                      "median_us": med,
                      "plain_over_onednn": {n: {m: round(v["plain"] / v["onednn"], 2) for m, v in ms.items()}
                                            for n, ms in med.items()},
                      "onednn_won_rounds": {n: {m: sum(p > o for p, o in zip(r["plain"], r["onednn"]))
                                                for m, r in rs.items()} for n, rs in runs.items()},
                      "runs": {n: {m: {k: [round(t, 1) for t in v] for k, v in r.items()} for m, r in rs.items()}
                               for n, rs in runs.items()}},
                     indent=1))


if __name__ == "__main__":
    main()
