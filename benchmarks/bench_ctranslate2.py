"""xlpe's own decoding against CTranslate2 on the same exported model, interleaved round by round (so both meet
the same machine noise); prints one JSON object with medians over rounds and the agreement of the outputs.

    python benchmarks/bench_ctranslate2.py --checkpoint runs/x/checkpoint_best.pt --input test.src \\
        [--sentences 500 --beam 5 --rounds 3 --threads 1 --batch 64 --dtype float32|bfloat16 --compute-type int8]

The model must be exportable (``pe`` of ``ape``, ``learned`` or ``rpe`` alone; ``xlpe export``). Sentences/s
count decoding only (the tokenisation into pieces and the model loading are outside the timed part, for both).
CTranslate2's length limit is xlpe's rule (1.2 S + 10) at the longest input: it has no per-sentence rule.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import torch

from xlpe.infer.export import export_model
from xlpe.infer.translate import translate_lines
from xlpe.nn.checkpoint import load_model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--input", required=True, help="tokenised source text")
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=0.6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="xlpe's weights")
    ap.add_argument("--compute-type", default="float32",
                    help="CTranslate2's compute_type (float32, int8, int8_float32, bfloat16 where supported, ...)")
    a = ap.parse_args()
    import ctranslate2

    torch.set_num_threads(a.threads)
    model, cfg, (sw, tgt_sw) = load_model(a.checkpoint)
    from xlpe.infer.translate import decoding_model
    model = decoding_model(model, a.dtype)                   # cast once, outside the timed part
    lines = open(a.input, encoding="utf-8").read().splitlines()[:a.sentences]
    pieces = [sw.encode(line.split()).pieces for line in lines]
    # CTranslate2 has no per-sentence length rule: bound it by xlpe's (1.2 S + 10) for the longest input, so that a
    # weak model's run-away hypotheses stop where xlpe's longest could (not at the model's max_len of 1024)
    ct2_max_len = min(cfg.max_len, int(1.2 * (max(map(len, pieces)) + 1) + 10))
    with tempfile.TemporaryDirectory() as d:
        export_model(a.checkpoint, Path(d) / "ct2")
        tr = ctranslate2.Translator(str(Path(d) / "ct2"), device="cpu", intra_threads=a.threads, inter_threads=1,
                                    compute_type=a.compute_type)
        speed: dict[str, list[float]] = {"xlpe": [], "ctranslate2": []}
        outs: dict[str, list[str]] = {}
        with torch.inference_mode():
            translate_lines(model, sw, lines[:20], beam=a.beam, lenpen=a.lenpen, dtype=a.dtype)   # warm-up
            tr.translate_batch(pieces[:20], beam_size=a.beam, length_penalty=a.lenpen)
            for _ in range(a.rounds):
                t0 = time.perf_counter()
                outs["xlpe"] = translate_lines(model, sw, lines, beam=a.beam, lenpen=a.lenpen, batch_size=a.batch,
                                               beam_stop="fairseq", dtype=a.dtype)
                speed["xlpe"].append(len(lines) / (time.perf_counter() - t0))
                t0 = time.perf_counter()
                res = tr.translate_batch(pieces, beam_size=a.beam, length_penalty=a.lenpen,
                                         max_batch_size=a.batch, max_decoding_length=ct2_max_len)
                speed["ctranslate2"].append(len(lines) / (time.perf_counter() - t0))
                outs["ctranslate2"] = [tgt_sw.decode_pieces(r.hypotheses[0]) for r in res]
    ratios = [x / c for x, c in zip(speed["xlpe"], speed["ctranslate2"])]
    print(json.dumps({"checkpoint": a.checkpoint, "dtype": a.dtype, "compute_type": a.compute_type,
                      "d_model": cfg.d_model, "layers": [cfg.enc_layers, cfg.dec_layers],
                      "sentences": len(lines), "beam": a.beam, "threads": a.threads, "rounds": a.rounds,
                      "ctranslate2_max_decoding_length": ct2_max_len,
                      "sent_per_s_median": {k: round(statistics.median(v), 1) for k, v in speed.items()},
                      "xlpe_vs_ctranslate2_median": round(statistics.median(ratios), 3),
                      "same_output": sum(x == c for x, c in zip(outs["xlpe"], outs["ctranslate2"])) / len(lines)},
                     indent=1))


if __name__ == "__main__":
    main()
