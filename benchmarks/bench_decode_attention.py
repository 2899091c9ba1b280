"""Beam-search decoding speed with each kernel for a decoding step's attention, interleaved round by round so all
meet the same machine noise; prints one JSON object (medians over rounds, and the per-round ratios).

* ``lean``: the default on CPU, :mod:`xlpe.nn.decoding_step` (a lean layer step, the explicit product);
* ``sdpa``: the layer's general path, SDPA for the one-query self-attention and the beams' cross-attention;
* ``explicit``: the general path with the explicit product for the one-query self-attention
  (``xlpe.nn.attention.SDPA_FOR_ONE_QUERY = False``).

    python benchmarks/bench_decode_attention.py --checkpoint runs/x/checkpoint_best.pt --input test.src \\
        [--sentences 300 --beam 5 --rounds 5 --threads 1 --batch 64]

All settings must give the same hypotheses (checked on every round). One process alternates them (a weaker
protocol than fresh processes: ``bench_ctranslate2.py --before-src`` compares whole trees).
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

LEAN_PLAN = attention.lean_plan
SETTINGS = {"lean": (LEAN_PLAN, True), "sdpa": (lambda *a, **k: None, True),
            "explicit": (lambda *a, **k: None, False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="tokenised source text")
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64, help="sentences a batch")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model, cfg, sw = load_model(a.checkpoint)
    lines = open(a.input, encoding="utf-8").read().splitlines()[:a.sentences]
    kw = dict(beam=a.beam, lenpen=a.lenpen, batch_size=a.batch)
    speed: dict[str, list[float]] = {name: [] for name in SETTINGS}
    outputs = {}
    with torch.inference_mode():
        translate_lines(model, sw, lines[:20], **kw)          # warm-up
        for _ in range(a.rounds):
            for name, (plan, sdpa) in SETTINGS.items():
                attention.lean_plan, attention.SDPA_FOR_ONE_QUERY = plan, sdpa
                t0 = time.perf_counter()
                hyps = translate_lines(model, sw, lines, **kw)
                speed[name].append(len(lines) / (time.perf_counter() - t0))
                outputs.setdefault(name, hyps)
    attention.lean_plan, attention.SDPA_FOR_ONE_QUERY = LEAN_PLAN, True
    ratios = {name: [x / y for x, y in zip(speed["lean"], v)] for name, v in speed.items() if name != "lean"}
    print(json.dumps({"checkpoint": a.checkpoint, "d_model": cfg.d_model, "heads": cfg.n_heads,
                      "layers": [cfg.enc_layers, cfg.dec_layers], "sentences": len(lines), "beam": a.beam,
                      "batch": a.batch, "threads": a.threads, "rounds": a.rounds,
                      "sent_per_s_median": {k: round(statistics.median(v), 1) for k, v in speed.items()},
                      "lean_vs_median": {k: round(statistics.median(r), 3) for k, r in ratios.items()},
                      "lean_vs_per_round": {k: [round(x, 3) for x in r] for k, r in ratios.items()},
                      "same_hypotheses": all(o == outputs["lean"] for o in outputs.values())}, indent=1))


if __name__ == "__main__":
    main()
