"""Does ``torch.compile`` of the decoder layers pay in beam search on CPU? One JSON object.

    python benchmarks/bench_decode_compile.py --checkpoint M/mark_12min.pt \
        --input ../shared/data/multi30k/raw/test_2016_flickr.en --rounds 3 --threads 2

A fifth of an fp32 decoding step is Python and dispatch (speed.md), which a compiler can remove. One float32 model
and a copy of it decode the same batches in one process, alternating batch by batch (so both see the same load on
a shared host): ``eager`` as ``xlpe translate`` does (:func:`xlpe.infer.translate.decoding_model`), and
``compiled``, the copy with every decoder layer's ``forward`` through ``torch.compile(dynamic=True)`` (the cached
keys grow by one position per step and the live rows change, so the shapes are symbolic). Its stacked Q/K/V and
K/V weights are built once beforehand, as eager builds them on first use, so that the compiled graphs need not
break at the stack's staleness check. ``compile_s``: the first batch of the compiled copy (one compilation, cold cache).
Reported: sentences/s over all rounds, per-batch seconds, in how many batches the compiled copy was faster (over
all rounds, and after the first, whose new shapes it compiles again), and how many hypotheses are identical.
Never run as a test.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time

import torch

from xlpe.infer.translate import decoding_model, translate_lines
from xlpe.nn.attention import MultiheadAttention
from xlpe.nn.checkpoint import load_model
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


def steady(times: dict[str, list[float]], batches: int) -> dict:
    """Compiled over eager after the first round (whose new shapes the compiled copy compiles again)."""
    later = {k: v[batches:] for k, v in times.items()}
    return {"compiled_over_eager": round(sum(later["eager"]) / sum(later["compiled"]), 3),
            "compiled_faster_batches": sum(c < e for c, e in zip(later["compiled"], later["eager"])),
            "batches": len(later["eager"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="source sentences, one per line")
    ap.add_argument("--batches", type=int, default=5)
    ap.add_argument("--batch-sentences", type=int, default=128, help="sentences per timed batch")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--beam", type=int, default=5)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch._dynamo.config.cache_size_limit = 64
    model, _cfg, sw = load_model(args.checkpoint)
    systems = {"eager": decoding_model(model, "float32"), "compiled": compiled_copy(model)}
    lines = open(args.input, encoding="utf-8").read().splitlines()
    n = args.batch_sentences
    chunks = [lines[i * n:(i + 1) * n] for i in range(args.batches)]
    t = time.perf_counter()
    translate_lines(systems["compiled"], sw, lines[:64], beam=args.beam, lenpen=1.0)
    compile_s = time.perf_counter() - t
    translate_lines(systems["eager"], sw, lines[:64], beam=args.beam, lenpen=1.0)
    times: dict[str, list[float]] = {k: [] for k in systems}
    outs: dict[str, list[str]] = {k: [] for k in systems}
    for _ in range(args.rounds):
        for chunk in chunks:
            for name, m in systems.items():
                t = time.perf_counter()
                outs[name] += translate_lines(m, sw, chunk, beam=args.beam, lenpen=1.0)
                times[name].append(time.perf_counter() - t)
    total = {k: sum(v) for k, v in times.items()}
    sents = sum(map(len, chunks)) * args.rounds
    print(json.dumps({
        "benchmark": "bench_decode_compile", "command": [sys.executable, *sys.argv], "torch": torch.__version__,
        "cpu": host()["cpu"],
        "threads": args.threads, "beam": args.beam, "rounds": args.rounds, "compile_s": round(compile_s, 1),
        "sent_s": {k: round(sents / v, 1) for k, v in total.items()},
        "compiled_over_eager": round(total["eager"] / total["compiled"], 3),
        "compiled_faster_batches": sum(c < e for c, e in zip(times["compiled"], times["eager"])),
        "batches": len(times["eager"]), "after_the_first_round": steady(times, len(chunks)),
        "identical": sum(a == b for a, b in zip(outs["compiled"], outs["eager"])), "sentences": sents,
        "batch_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }, indent=1))


if __name__ == "__main__":
    main()
