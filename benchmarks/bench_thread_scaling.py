"""How much a second (third, ...) intra-op thread speeds up each operation of a full beam-search step, at the
shapes of one: ``rows`` decoder rows (sentences x beam), the self-attention cache at ``steps`` keys, the
cross-attention as one row of ``beam`` queries per sentence over ``src`` source keys, the output projection and
log-softmax over the target vocabulary. Prints one JSON object: per operation the median microseconds on each
thread count (the counts alternating round by round) and the speed-up of the last count over the first.

    python benchmarks/bench_thread_scaling.py --threads 1 2 --rounds 7 \\
        [--d-model 256 --heads 4 --d-ff 1024 --vocab 8000 --rows 320 --beam 5 --steps 16 --src 16]

No model is read: the operands are random, as the kernels' speed does not depend on the values. A speed-up well
below the thread count is time the threads spend waiting for each other or starting a parallel region.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def operations(a) -> dict:
    """Name -> a callable running one operation of a decoding step at the shapes of ``a``."""
    d, dk, rows = a.d_model, a.d_model // a.heads, a.rows
    x, h = torch.randn(rows, d), torch.randn(rows, a.d_ff)
    calls = {}
    for n, k in ((3 * d, d), (d, d), (a.d_ff, d), (d, a.d_ff)):     # Q/K/V stacked, a projection, the FFN's two
        w, b, t = torch.randn(n, k), torch.randn(n), h if k == a.d_ff else x
        calls[f"linear {k}->{n}"] = lambda t=t, w=w, b=b: F.linear(t, w, b)
    out_w = torch.randn(a.vocab, d)
    q1, kv1 = torch.randn(rows, a.heads, 1, dk), torch.randn(rows, a.heads, a.steps, dk)
    sents = rows // a.beam
    qc, kvc = torch.randn(sents, a.heads, a.beam, dk), torch.randn(sents, a.heads, a.src, dk)
    mask = torch.ones(sents, 1, 1, a.src, dtype=torch.bool)
    mask[::2, ..., a.src - 3:] = False
    logits, norm, order = torch.randn(rows, a.vocab), torch.nn.LayerNorm(d), torch.randperm(rows)
    calls.update({
        "output projection (plain)": lambda: F.linear(x, out_w),
        "self-attention SDPA, 1 query": lambda: F.scaled_dot_product_attention(q1, kv1, kv1),
        "cross-attention SDPA, beam queries": lambda: F.scaled_dot_product_attention(qc, kvc, kvc, attn_mask=mask),
        "log_softmax over the vocabulary": lambda: torch.log_softmax(logits, -1),
        "layer norm": lambda: norm(x),
        "cache reorder (index_select)": lambda: kv1.index_select(0, order),
        "residual add": lambda: x + x,
    })
    if torch.backends.mkldnn.is_available():       # as xlpe's decoder runs it (xlpe.nn.transformer)
        packed = torch.ops.mkldnn._reorder_linear_weight(out_w)
        calls["output projection (oneDNN, packed)"] = (
            lambda: torch.ops.mkldnn._linear_pointwise(x, packed, None, "none", [], ""))
    return calls


def timed(f, calls: int) -> float:
    """Microseconds per call of ``f`` over ``calls`` calls."""
    t = time.perf_counter()
    for _ in range(calls):
        f()
    return (time.perf_counter() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=50, help="calls timed per operation, round and thread count")
    for name, default in (("d-model", 256), ("heads", 4), ("d-ff", 1024), ("vocab", 8000), ("rows", 320),
                          ("beam", 5), ("steps", 16), ("src", 16)):
        ap.add_argument(f"--{name}", type=int, default=default)
    a = ap.parse_args()
    ops = operations(a)
    times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in a.threads} for k in ops}
    with torch.inference_mode():
        for _ in range(a.rounds):
            for n in a.threads:
                torch.set_num_threads(n)
                for name, f in ops.items():
                    timed(f, 3)                                  # warm-up at this thread count
                    times[name][n].append(timed(f, a.calls))
    first, last = a.threads[0], a.threads[-1]
    report = {"threads": a.threads, "rounds": a.rounds, "shapes": {k: v for k, v in vars(a).items()
                                                                   if k not in ("threads", "rounds", "calls")},
              "us_median": {k: {n: round(statistics.median(v[n]), 1) for n in a.threads} for k, v in times.items()},
              f"speedup_{last}_over_{first}": {k: round(statistics.median(v[first]) / statistics.median(v[last]), 2)
                                               for k, v in times.items()}}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
