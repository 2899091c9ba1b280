"""Does a decoder layer's step without Python (``torch.compile``, TorchScript) pay in beam search on CPU? One JSON
object.

    python benchmarks/bench_decode_compile.py --checkpoint M/mark_12min.pt \
        --input ../shared/data/multi30k/raw/test_2016_flickr.en --rounds 3 --threads 2
    python benchmarks/bench_decode_compile.py --variant script --checkpoint CHECKPOINT --input val.en \
        --batches 8 --batch-sentences 128 --rounds 3 --threads 2            # then --batch-size 1 --batch-sentences 16

A fifth of an fp32 decoding step was Python and dispatch (speed.md), which a compiler or TorchScript removes. One
float32 model and a copy of it decode the same batches in one process, alternating batch by batch (so both see the
same load on a shared host): ``eager`` as ``xlpe translate`` does (:func:`xlpe.infer.translate.decoding_model`), and
``compiled``, the copy with every decoder layer's ``forward`` through ``torch.compile(dynamic=True)`` (the cached
keys grow by one position per step and the live rows change, so the shapes are symbolic). Its stacked Q/K/V and
K/V weights are built once beforehand, as eager builds them on first use, so that the compiled graphs need not
break at the stack's staleness check. ``compile_s``: the first batch of the compiled copy (one compilation, cold
cache). ``--variant script`` instead runs every decoder layer's float32 step
(:func:`xlpe.nn.decoding_step.lean_step`) through a TorchScript replica of it, :func:`scripted_step`: the same ATen
operations in the same order, run by TorchScript's interpreter instead of Python (the outputs must be identical).
It measures what a step outside Python's per-operation dispatch gains while keeping torch's kernels.
Reported: sentences/s over all rounds, per-batch seconds, in how many batches the other system was faster (over
all rounds, and after the first, whose new shapes a compiled copy compiles again), and how many hypotheses are
identical.
Never run as a test.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import sys
import time
import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

import xlpe.nn.attention
from xlpe.infer.translate import decoding_model, translate_lines
from xlpe.nn.attention import MultiheadAttention
from xlpe.nn.checkpoint import load_model
from xlpe.nn.decoding_step import LeanPlan
from xlpe.runtime import host


def compiled_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A float32 copy of ``model`` whose decoder layers run through ``torch.compile``."""
    m = copy.deepcopy(model).float().eval()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, MultiheadAttention):
                stacks = {names: mod._stacked(names) for names in ("qkv", "kv")}
                mod._stacked = stacks.__getitem__
    for layer in m.decoder.layers:
        layer.forward = torch.compile(layer.forward, dynamic=True)
    return m


def _appended(cached: Tensor, new: Tensor, rows: Optional[Tensor]) -> Tensor:
    t = cached.shape[2]
    out = new.new_empty([new.shape[0], new.shape[1], t + new.shape[2], new.shape[3]])
    torch.index_select(cached, 0, torch.arange(cached.shape[0]) if rows is None else rows, out=out[:, :, :t])
    out[:, :, t:] = new
    return out


def _residual(x: Tensor, a: Tensor, norms: List[Tensor], i: int, pre_norm: bool) -> Tuple[Tensor, Tensor]:
    d = x.shape[1]
    if not pre_norm:
        x = F.layer_norm(x + a, [d], norms[2 * i], norms[2 * i + 1], 1e-5)
        return x, x
    x = x + a
    if i == 2:
        return x, x
    return x, F.layer_norm(x, [d], norms[2 * i + 2], norms[2 * i + 3], 1e-5)


def scripted_step(x: Tensor, w: List[Tensor], norms: List[Tensor], pre_norm: bool, heads: int, d_k: int,
                  k_cache: Optional[Tensor], v_cache: Optional[Tensor], rows: Optional[Tensor], kt: Tensor,
                  vc: Tensor, pad: Optional[Tensor], slots: Optional[Tensor],
                  group: int) -> Tuple[Tensor, Tensor, Tensor]:
    """:func:`xlpe.nn.decoding_step.lean_step` of a ReLU layer (layer norms with eps 1e-5) for TorchScript:
    ``w`` the (weight, bias) pairs of Q/K/V, self-out, cross-Q, cross-out, FFN in, FFN out; returns the layer's
    output and the self-attention keys and values to cache."""
    B, d = x.shape[0], x.shape[2]
    scale = d_k ** -0.5
    x = x.view(B, d)
    h = F.layer_norm(x, [d], norms[0], norms[1], 1e-5) if pre_norm else x
    qkv = torch.addmm(w[1], h, w[0]).view(B, 3, heads, 1, d_k)
    q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    if k_cache is not None and v_cache is not None:
        k, v = _appended(k_cache, k, rows), _appended(v_cache, v, rows)
    alpha = torch.matmul(q, k.transpose(-1, -2)).mul_(scale).softmax(-1)
    x, h = _residual(x, torch.addmm(w[3], torch.matmul(alpha, v).view(B, d), w[2]), norms, 0, pre_norm)
    B_m = kt.shape[0]
    q = torch.addmm(w[5], h, w[4])
    if slots is not None:
        q = q.new_zeros([B_m * group, d]).index_copy_(0, slots, q)
    scores = torch.matmul(q.view(B_m, group, heads, d_k).transpose(1, 2), kt).mul_(scale)
    if pad is not None:
        scores.masked_fill_(pad[:, None, None, :], float("-inf"))
    a = torch.matmul(scores.softmax(-1), vc).transpose(1, 2).reshape(B_m * group, d)
    if slots is not None:
        a = a.index_select(0, slots)
    x, h = _residual(x, torch.addmm(w[7], a, w[6]), norms, 1, pre_norm)
    x, _ = _residual(x, torch.addmm(w[11], torch.addmm(w[9], h, w[8]).relu_(), w[10]), norms, 2, pre_norm)
    return x.view(B, 1, d), k, v


def script_lean_step():
    """A stand-in for :func:`xlpe.nn.decoding_step.lean_step` that runs :func:`scripted_step` (ReLU layers with
    eps 1e-5 only, as the benchmark's models are; anything else is refused)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # TorchScript is deprecated; this measures what it would gain
        step = torch.jit.script(scripted_step)

    def run(plan: LeanPlan, x, memory, memory_pad_mask, cache, memory_slots):
        if not plan.relu or any(n.eps != 1e-5 for n in plan.norms):
            raise SystemExit("--variant script: ReLU layers with layer-norm eps 1e-5 only")
        kv, cross = cache.setdefault("self", {}), cache.setdefault("cross", {})
        if "kt" not in cross:      # the memory's keys and values, once, as the lean step projects them
            mem = torch.addmm(plan.cross_kv[1], memory.reshape(-1, x.shape[2]), plan.cross_kv[0])
            mem = mem.view(*memory.shape[:2], 2, plan.heads, plan.d_k)
            cross["kt"] = mem[:, :, 0].permute(0, 2, 3, 1).contiguous()
            cross["vc"] = mem[:, :, 1].transpose(1, 2).contiguous()
        if "w" not in cache:
            cache["w"] = [t for wb in (plan.qkv, plan.self_out, plan.cross_q, plan.cross_out, plan.ffn_in,
                                       plan.ffn_out) for t in wb]
            cache["norms"] = [t for n in plan.norms for t in (n.weight, n.bias)]
        slots, group = memory_slots if memory_slots is not None else (None, x.shape[0] // cross["kt"].shape[0])
        y, kv["k"], kv["v"] = step(x, cache["w"], cache["norms"], plan.pre_norm, plan.heads, plan.d_k,
                                   kv.get("k"), kv.get("v"), kv.pop("rows", None), cross["kt"], cross["vc"],
                                   memory_pad_mask, slots, group)
        return y
    return run


@contextlib.contextmanager
def layer_step(fn):
    """Decoder layers take ``fn`` as their lean step inside the block (None: as they are)."""
    saved = xlpe.nn.attention.lean_step
    xlpe.nn.attention.lean_step = fn or saved
    try:
        yield
    finally:
        xlpe.nn.attention.lean_step = saved


def steady(times: dict[str, list[float]], batches: int, other: str) -> dict | None:
    """``other`` over eager after the first round (whose new shapes a compiled copy compiles again); None if
    there was one round."""
    later = {k: v[batches:] for k, v in times.items()}
    if not later["eager"]:
        return None
    return {f"{other}_over_eager": round(sum(later["eager"]) / sum(later[other]), 3),
            f"{other}_faster_batches": sum(c < e for c, e in zip(later[other], later["eager"])),
            "batches": len(later["eager"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="source sentences, one per line")
    ap.add_argument("--variant", choices=("compile", "script"), default="compile")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--batch-sentences", type=int, default=128, help="sentences per timed batch")
    ap.add_argument("--batch-size", type=int, default=64, help="sentences decoded at once")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = 64
    model, _cfg, sw = load_model(args.checkpoint)
    other = "compiled" if args.variant == "compile" else "script"
    eager = decoding_model(model, "float32")
    systems = {"eager": (eager, None)}
    systems[other] = (compiled_copy(model), None) if other == "compiled" else (eager, script_lean_step())
    lines = open(args.input, encoding="utf-8").read().splitlines()
    n = args.batch_sentences
    chunks = [lines[i * n:(i + 1) * n] for i in range(args.batches)]
    kw = dict(beam=args.beam, lenpen=1.0, batch_size=args.batch_size)
    t = time.perf_counter()
    with layer_step(systems[other][1]):
        translate_lines(systems[other][0], sw, lines[:64], **kw)
    compile_s = time.perf_counter() - t
    translate_lines(eager, sw, lines[:64], **kw)
    times: dict[str, list[float]] = {k: [] for k in systems}
    outs: dict[str, list[str]] = {k: [] for k in systems}
    for _ in range(args.rounds):
        for chunk in chunks:
            for name, (m, step) in systems.items():
                with layer_step(step):
                    t = time.perf_counter()
                    outs[name] += translate_lines(m, sw, chunk, **kw)
                    times[name].append(time.perf_counter() - t)
    total = {k: sum(v) for k, v in times.items()}
    sents = sum(map(len, chunks)) * args.rounds
    print(json.dumps({
        "benchmark": "bench_decode_compile", "command": ["python", *sys.argv], "torch": torch.__version__,
        "cpu": host()["cpu"], "variant": args.variant, "batch_size": args.batch_size,
        "threads": args.threads, "beam": args.beam, "rounds": args.rounds, "compile_s": round(compile_s, 1),
        "sent_s": {k: round(sents / v, 1) for k, v in total.items()},
        f"{other}_over_eager": round(total["eager"] / total[other], 3),
        f"{other}_faster_batches": sum(c < e for c, e in zip(times[other], times["eager"])),
        "batches": len(times["eager"]), "after_the_first_round": steady(times, len(chunks), other),
        "identical": sum(a == b for a, b in zip(outs[other], outs["eager"])), "sentences": sents,
        "batch_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
