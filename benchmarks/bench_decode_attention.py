"""Beam-search decoding speed with SDPA or the explicit product for the one-query attention of each decoding step
(``xlpe.nn.attention.SDPA_FOR_ONE_QUERY``), interleaved round by round so both meet the same machine noise;
prints one JSON object (medians over rounds, and the per-round ratios).

    python benchmarks/bench_decode_attention.py --checkpoint runs/x/checkpoint_best.pt --input test.src \\
        [--sentences 300 --beam 5 --rounds 5 --threads 1]

Both settings must give the same hypotheses (checked on every round).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from xlpe.infer.translate import translate_lines
from xlpe.nn import attention
from xlpe.nn.checkpoint import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="tokenised source text")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, cfg, sw = load_model(a.checkpoint)
    lines = open(a.input, encoding="utf-8").read().splitlines()[:a.sentences]
    speed: dict[str, list[float]] = {"sdpa": [], "explicit": []}
    outputs = {}
    with torch.inference_mode():
        translate_lines(model, sw, lines[:20], beam=a.beam, lenpen=a.lenpen)          # warm-up
        for _ in range(a.rounds):
            for name, flag in (("sdpa", True), ("explicit", False)):
                attention.SDPA_FOR_ONE_QUERY = flag
                t0 = time.perf_counter()
                hyps = translate_lines(model, sw, lines, beam=a.beam, lenpen=a.lenpen)
                speed[name].append(len(lines) / (time.perf_counter() - t0))
                outputs.setdefault(name, hyps)
    attention.SDPA_FOR_ONE_QUERY = False
    ratios = [e / s for e, s in zip(speed["explicit"], speed["sdpa"])]
    print(json.dumps({"checkpoint": a.checkpoint, "d_model": cfg.d_model, "heads": cfg.n_heads,
                      "layers": [cfg.enc_layers, cfg.dec_layers], "sentences": len(lines), "beam": a.beam,
                      "threads": a.threads, "rounds": a.rounds,
                      "sent_per_s_median": {k: round(statistics.median(v), 1) for k, v in speed.items()},
                      "explicit_vs_sdpa_median": round(statistics.median(ratios), 3),
                      "explicit_vs_sdpa_per_round": [round(r, 3) for r in ratios],
                      "same_hypotheses": outputs["sdpa"] == outputs["explicit"]}, indent=1))


if __name__ == "__main__":
    main()
