"""SDPA against the explicit product (q·kᵀ, softmax, ·v) on CPU, fp32 and bf16, at the shapes xlpe runs; one JSON.

    python benchmarks/bench_attention_kernels.py --threads 2 --rounds 5

Why: ``xlpe.nn.attention.MultiheadAttention`` takes the explicit product for bf16/fp16 on CPU (autocast in
training, bf16 weights in decoding) and SDPA otherwise; this benchmark is the evidence for that rule. Shapes
(``small`` model: 4 heads of 64): training self-attention over a batch of 4k tokens (256 sentences of 16 tokens,
forward and backward, padding mask or causal), a decoding step's self-attention (320 beams, one query, 12 cached
keys) and its cross-attention (64 sentences x 5 beams sharing one memory of 16 tokens). The explicit product's
softmax runs in float32 for bf16 inputs, as in xlpe. Medians over ``--rounds`` interleaved rounds, in ms per call.
Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F


def explicit(q, k, v, mask=None, causal=False):
    s = (q @ k.transpose(-1, -2)) * (1 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if causal:
        n = s.shape[-1]
        s = s.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    w = s.float().softmax(-1).to(q.dtype) if q.dtype != torch.float32 else s.softmax(-1)
    return w @ v


def sdpa(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


def cases():
    """name -> (q shape, k shape, mask shape or None, causal, backward)"""
    return {
        "train_encoder_self_masked": ((256, 4, 16, 64), (256, 4, 16, 64), (256, 1, 1, 16), False, True),
        "train_decoder_self_causal": ((256, 4, 16, 64), (256, 4, 16, 64), None, True, True),
        "decode_step_self": ((320, 4, 1, 64), (320, 4, 12, 64), None, False, False),
        "decode_step_cross_shared_memory": ((64, 4, 5, 64), (64, 4, 16, 64), (64, 1, 1, 16), False, False),
    }


def time_once(fn, q, k, v, mask, causal, backward, reps):
    def call():
        out = fn(q, k, v, mask, causal)
        if backward:
            out.float().sum().backward()
    call()
    t = time.perf_counter()
    for _ in range(reps):
        call()
    return (time.perf_counter() - t) / reps * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=20, help="calls timed per measurement")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    report: dict = {"benchmark": "bench_attention_kernels", "threads": a.threads, "rounds": a.rounds,
                    "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                    "unit": "ms per call (median over rounds)", "results": {}}
    times: dict[tuple, list[float]] = {}
    inputs = {}
    for dtype in (torch.float32, torch.bfloat16):
        for name, (qs, ks, ms, causal, backward) in cases().items():
            q, k, v = (torch.randn(s, dtype=dtype, requires_grad=backward) for s in (qs, ks, ks))
            mask = None
            if ms is not None:
                mask = torch.ones(ms, dtype=torch.bool)
                mask[::2, ..., -4:] = False
            inputs[(str(dtype).split(".")[1], name)] = (q, k, v, mask, causal, backward)
    for _ in range(a.rounds):                      # interleaved: every case and kernel once per round
        for key, (q, k, v, mask, causal, backward) in inputs.items():
            for kernel, fn in (("sdpa", sdpa), ("explicit", explicit)):
                times.setdefault((*key, kernel), []).append(time_once(fn, q, k, v, mask, causal, backward, a.reps))
    for (dtype, name, kernel), ts in times.items():
        report["results"].setdefault(dtype, {}).setdefault(name, {})[kernel] = round(statistics.median(ts), 3)
    for dtype, per in report["results"].items():
        for name, r in per.items():
            r["explicit_speedup_over_sdpa"] = round(r["sdpa"] / r["explicit"], 2)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
