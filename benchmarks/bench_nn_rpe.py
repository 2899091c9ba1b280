"""Training-step speed of source position encodings: forward + backward tokens/s, printed as JSON.

    python benchmarks/bench_nn_rpe.py --preset small --batch 32 --src-len 32 --steps 5

Compares ``pe=["ape"]`` with ``["ape", "rpe"]`` (Shaw; explicit attention with O(T^2 d_k) relative tables) by
default; fairseq's maintainers found Shaw RPE "quite a bit slower" (SPEC §2). Not a test; numbers depend on
the machine. Source and target lengths are equal; tokens/s counts source + target tokens.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import torch

from xlpe.nn.transformer import TransformerConfig, build_model, count_parameters


def bench(pe: list[str], args) -> dict:
    torch.manual_seed(0)
    cfg = TransformerConfig.from_preset(args.preset, src_vocab_size=args.vocab, pe=pe, rpe_k=args.rpe_k)
    model = build_model(cfg).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    src = torch.randint(4, args.vocab, (args.batch, args.src_len))
    src[:, -1] = cfg.eos_id
    tgt_in = torch.randint(4, args.vocab, (args.batch, args.src_len))
    tgt_out = torch.randint(4, args.vocab, (args.batch, args.src_len))

    def step():
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        step()
    dt = (time.perf_counter() - t0) / args.steps
    return {"pe": pe, "params": count_parameters(model), "sec_per_step": round(dt, 4),
            "tokens_per_sec": round(2 * args.batch * args.src_len / dt, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--src-len", type=int, default=32)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--rpe-k", type=int, default=16)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--pe", nargs="+", default=["ape", "ape,rpe"], help="encoding sets, comma-separated")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    results = [bench(s.split(","), args) for s in args.pe]
    base = results[0]["tokens_per_sec"]
    for r in results:
        r["relative_speed"] = round(r["tokens_per_sec"] / base, 3)
    print(json.dumps({"benchmark": "nn_rpe", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "machine": platform.machine(), "preset": args.preset, "batch": args.batch,
                      "src_len": args.src_len, "results": results}, indent=2))


if __name__ == "__main__":
    main()
