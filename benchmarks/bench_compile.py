"""Does ``torch.compile`` pay for its compile time in xlpe's CPU training? One JSON object.

    python benchmarks/bench_compile.py --threads 2 --rounds 3 --updates 20

Issue 22 asks whether compiling the model is worth its compile time on these runs. Each run is a fresh process
that trains the `small` model (APE, shared embeddings, Multi30k-sized vocabulary of 8,000) on random token
batches: either one fixed shape (300 pairs of 14 + 14 tokens, ~4k target tokens: the best case for a compiler) or
five shapes of about the same token count, cycled (what token-budget batching gives). The model's forward runs
eager or through ``torch.compile`` (``default``: specialise on shapes, recompile per new shape up to the
recompile limit; ``dynamic``: one graph with symbolic shapes); the fused loss, the backward, clipping and Adam
are xlpe's own. Precision: ``fp32`` or ``bf16-pure`` (:class:`xlpe.train.master.MasterWeights`).

Reported per variant (medians over ``--rounds`` interleaved rounds): ``warmup_s`` (two passes over the
shapes: compilation, or eager's first-touch cost), ``tok_s`` over ``--updates`` further updates, and
``breakeven_updates``: after how many updates the compiled run's total time catches up with eager's (``null``
when it is slower per update, i.e. never). The inductor cache (``TORCHINDUCTOR_CACHE_DIR``) is a fresh temporary
folder per run, so every compiled run pays a cold compile, as a new training run on a new machine would.
Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

SHAPES = {"fixed": [(300, 14, 14)],
          "varying": [(300, 14, 14), (256, 16, 17), (341, 12, 12), (210, 20, 19), (180, 23, 22)]}


def one_run(precision: str, compile_mode: str, shapes: str, updates: int, threads: int) -> dict:
    import torch
    from xlpe.nn.transformer import TransformerConfig, build_model
    from xlpe.train.losses import projected_label_smoothed_nll
    from xlpe.train.master import MasterWeights

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cfg = TransformerConfig.from_preset("small", src_vocab_size=8000, pe=["ape"], share_embeddings=True,
                                        dropout=0.3)
    model = build_model(cfg).train()
    g = torch.Generator().manual_seed(1)
    batches = []
    for B, S, T in SHAPES[shapes]:
        src, tgt = torch.randint(4, 8000, (B, S), generator=g), torch.randint(4, 8000, (B, T), generator=g)
        src[:, -1] = tgt[:, -1] = 2
        batches.append((src, torch.cat((torch.full((B, 1), 2), tgt[:, :-1]), 1), tgt))
    master = MasterWeights(model) if precision == "bf16-pure" else None
    params = master.params if master is not None else list(model.parameters())
    opt = torch.optim.Adam(params, lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    fwd = model if compile_mode == "eager" else torch.compile(model, dynamic=compile_mode == "dynamic" or None)

    def step(i: int) -> int:
        src, tgt_in, tgt = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        h = fwd(src, tgt_in, features_only=True)
        loss, _ = projected_label_smoothed_nll(h, model.output_weight, tgt, 0.1, ignore_index=0)
        (loss / tgt.numel()).backward()
        if master is not None:
            master.collect_grads()
        torch.nn.utils.clip_grad_norm_(params, math.inf)
        opt.step()
        if master is not None:
            master.sync()
        return tgt.numel()

    t0 = time.perf_counter()
    for i in range(2 * len(batches)):
        step(i)
    warm = time.perf_counter() - t0
    t0, ntok = time.perf_counter(), 0
    for i in range(updates):
        ntok += step(i)
    dt = time.perf_counter() - t0
    return {"warmup_s": warm, "tok_s": ntok / dt, "s_per_update": dt / updates}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--updates", type=int, default=20, help="timed updates after the warm-up")
    ap.add_argument("--precisions", nargs="+", default=["bf16-pure", "fp32"], choices=["bf16-pure", "fp32"])
    ap.add_argument("--shapes", nargs="+", default=["fixed", "varying"], choices=list(SHAPES))
    ap.add_argument("--modes", nargs="+", default=["eager", "default", "dynamic"],
                    choices=["eager", "default", "dynamic"])
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(one_run(*a.child[:2], a.child[2], a.updates, a.threads)))
        return
    import torch
    variants = [(p, s, m) for p in a.precisions for s in a.shapes for m in a.modes
                if not (s == "fixed" and m == "dynamic")]
    runs: dict[str, list[dict]] = {}
    for _ in range(a.rounds):
        for p, s, m in variants:
            with tempfile.TemporaryDirectory() as cache:
                env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": cache}
                out = subprocess.run([sys.executable, __file__, "--child", p, m, s, "--updates", str(a.updates),
                                      "--threads", str(a.threads)], env=env, capture_output=True, text=True,
                                     check=True).stdout
            r = json.loads(out.strip().splitlines()[-1])
            runs.setdefault(f"{p}/{s}/{m}", []).append(r)
            print(json.dumps({"progress": f"{p}/{s}/{m}", **{k: round(v, 3) for k, v in r.items()}}),
                  file=sys.stderr, flush=True)
    report: dict = {"torch": torch.__version__, "threads": a.threads, "rounds": a.rounds, "updates": a.updates,
                    "variants": {}}
    for name, rs in runs.items():
        med = {k: statistics.median(r[k] for r in rs) for k in rs[0]}
        report["variants"][name] = {**{k: round(v, 3) for k, v in med.items()},
                                    "tok_s_runs": [round(r["tok_s"]) for r in rs]}
    for name, v in report["variants"].items():
        p, s, m = name.split("/")
        eager = report["variants"].get(f"{p}/{s}/eager")
        if m == "eager" or eager is None:
            continue
        v["over_eager"] = round(v["tok_s"] / eager["tok_s"], 3)
        gain = eager["s_per_update"] - v["s_per_update"]          # seconds saved per update
        v["breakeven_updates"] = round((v["warmup_s"] - eager["warmup_s"]) / gain) if gain > 0 else None
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
