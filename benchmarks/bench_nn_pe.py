"""Training-step speed of source position encodings: forward + backward tokens/s, printed as JSON.

    python benchmarks/bench_nn_pe.py --preset small --threads 2 --rounds 5
    python benchmarks/bench_nn_pe.py --pe ape ape,rpe --rounds 3          # Shaw RPE cost (SPEC §2)

By default it compares the Table 1 systems of Ding et al.: ``ape`` (the baseline), ``ape,rpe``, ``inxl``,
``ape,headxl`` and ``ape,combination``. The XL encodings read a random permutation per sentence as ``pos_XL``.
The systems are measured in interleaved rounds (A B C … A B C …) so that they share the machine's noise;
the medians are reported, with each system's speed relative to the first. Source and target lengths are equal,
and tokens/s counts source + target tokens. This is not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch

from xlpe.nn.transformer import TransformerConfig, build_model, count_parameters


def make(pe: list[str], args):
    torch.manual_seed(0)
    cfg = TransformerConfig.from_preset(args.preset, src_vocab_size=args.vocab, pe=pe, rpe_k=args.rpe_k)
    model = build_model(cfg).train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, args.vocab, (args.batch, args.src_len), generator=g)
    src[:, -1] = cfg.eos_id
    tgt_in = torch.randint(4, args.vocab, (args.batch, args.src_len), generator=g)
    tgt_out = torch.randint(4, args.vocab, (args.batch, args.src_len), generator=g)
    n = args.src_len - 1
    xl = torch.stack([torch.cat([torch.randperm(n, generator=g), torch.tensor([n])]) for _ in range(args.batch)])
    channels = {"xl": xl}

    def step():
        logits = model(src, tgt_in, channels)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model, step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="small", help="model size preset")
    ap.add_argument("--batch", type=int, default=32, help="sentences per batch")
    ap.add_argument("--src-len", type=int, default=32, help="source (= target) length in tokens")
    ap.add_argument("--vocab", type=int, default=8000, help="vocabulary size")
    ap.add_argument("--rpe-k", type=int, default=16, help="Shaw clipping distance")
    ap.add_argument("--steps", type=int, default=5, help="timed steps per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (the median is reported)")
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps per system before the first round")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = torch default)")
    ap.add_argument("--pe", nargs="+", default=["ape", "ape,rpe", "inxl", "ape,headxl", "ape,combination"],
                    help="encoding sets, comma-separated; the first is the reference")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    systems = {s: make(s.split(","), args) for s in args.pe}
    for _, step in systems.values():
        for _ in range(args.warmup):
            step()
    times: dict[str, list[float]] = {s: [] for s in systems}
    for _ in range(args.rounds):
        for s, (_, step) in systems.items():
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            times[s].append((time.perf_counter() - t0) / args.steps)
    results = []
    for s, (model, _) in systems.items():
        dt = statistics.median(times[s])
        results.append({"pe": s.split(","), "params": count_parameters(model), "sec_per_step_median": round(dt, 4),
                        "sec_per_step_all": [round(t, 4) for t in times[s]],
                        "tokens_per_sec": round(2 * args.batch * args.src_len / dt, 1)})
    base = results[0]["tokens_per_sec"]
    for r in results:
        r["relative_speed"] = round(r["tokens_per_sec"] / base, 3)
    print(json.dumps({"benchmark": "nn_pe", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "machine": platform.machine(), "preset": args.preset, "batch": args.batch,
                      "src_len": args.src_len, "rounds": args.rounds, "results": results}, indent=2))


if __name__ == "__main__":
    main()
