"""Relative attention with per-sentence indices (structural PE, SPEC §3.3): the gathered form xlpe uses against
the naive dense-table form, at T=100. Prints JSON: the time per forward+backward (median of rounds, the two
forms interleaved) and the memory each allocates (torch profiler, CPU).

    python benchmarks/bench_rel_attention.py --batch 32 --length 100 --rounds 5
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

from xlpe.nn.attention import MultiheadAttention
from xlpe.nn.positions import RelativeTerms


def dense(att, x, rel, pad):
    """The naive form: (B, T, T, d_k) key and value tables, then einsums."""
    q, k, v = (att._split(lin(x)) for lin in (att.q_proj, att.k_proj, att.v_proj))
    a_k, a_v = rel.table_k[rel.index], rel.table_v[rel.index]
    s = (q @ k.transpose(-1, -2) + torch.einsum("bhid,bijd->bhij", q, a_k)) / math.sqrt(att.d_k)
    a = s.masked_fill(pad[:, None, None, :], float("-inf")).softmax(-1)
    o = a @ v + torch.einsum("bhij,bijd->bhid", a, a_v)
    return att.out_proj(o.transpose(1, 2).reshape(x.shape))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=100)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    B, T, d, H, R = a.batch, a.length, a.d_model, a.heads, 2 * a.k + 1
    att = MultiheadAttention(d, H)
    x = torch.randn(B, T, d, requires_grad=True)
    pad = torch.zeros(B, T, dtype=torch.bool)
    rel = RelativeTerms(torch.randint(0, R, (B, T, T)), torch.randn(R, d // H, requires_grad=True),
                        torch.randn(R, d // H, requires_grad=True))
    forms = {"gathered": lambda: att(x, key_pad_mask=pad, rel=[rel])[0], "dense": lambda: dense(att, x, rel, pad)}
    out = {"batch": B, "length": T, "d_model": d, "heads": H, "table_rows": R, "threads": a.threads}
    for name, f in forms.items():                                     # memory: what each form allocates
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
            f().sum().backward()
        out[f"{name}_alloc_mb"] = round(sum(e.cpu_memory_usage for e in prof.key_averages()
                                            if e.cpu_memory_usage > 0) / 2**20, 1)
    times = {n: [] for n in forms}
    for _ in range(a.rounds):                                          # interleaved rounds, medians
        for name, f in forms.items():
            t0 = time.perf_counter()
            f().sum().backward()
            times[name].append(time.perf_counter() - t0)
    for name in forms:
        out[f"{name}_ms_median"] = round(1000 * statistics.median(times[name]), 1)
    out["speed_ratio_dense_over_gathered"] = round(out["dense_ms_median"] / out["gathered_ms_median"], 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
