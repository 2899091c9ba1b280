"""Cross-Align trained from scratch on the built-in synthetic pair (what ``xlpe demo`` generates): a tiny random BERT
over the pair's word vocabulary (one piece per word), TLM then SSA, test AER at c for a few τ and both joins.

Why the main job has no Cross-Align stage: the method needs a multilingual pretrained encoder (SPEC §7.1), and the
built-in pair's invented words mean nothing to one (e5's pieces of "klafrap" or "zosori" carry no translation);
from random weights, minutes of TLM + SSA on this pair are far from eflomal's ≤ 5 % AER (numbers in
``docs/results/cross-align.md``). Prints JSON.

Not a test. Usage::

    python benchmarks/crossalign_builtin_pair.py --out runs/ca-builtin --pairs 5000 --tlm-steps 300 --ssa-steps 150
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from xlpe.align.crossalign import CrossAligner
from xlpe.align.crossalign_train import TrainConfig, train
from xlpe.evaluate.aer import corpus_aer
from xlpe.experiments.engine.stages import synth_stage
from xlpe.io.alignments import read_alignments
from xlpe.io.atomic import atomic_write


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--pairs", type=int, default=5000, help="training pairs (of the demo's 20k)")
    ap.add_argument("--tlm-steps", type=int, default=300)
    ap.add_argument("--ssa-steps", type=int, default=150)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    from transformers import BertConfig, BertTokenizer

    paths = synth_stage(args.out, "sov", args.seed, [20000, 500, 500])["paths"]
    src = Path(paths["train_src"]).read_text().splitlines()[:args.pairs]
    tgt = Path(paths["train_tgt"]).read_text().splitlines()[:args.pairs]
    for name, lines in (("train.src", src), ("train.tgt", tgt)):
        with atomic_write(args.out / name) as f:
            f.write("".join(x + "\n" for x in lines))
    words = sorted({w for line in src + tgt for w in line.split()})
    with atomic_write(args.out / "vocab.txt") as f:
        f.write("".join(w + "\n" for w in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + words))
    tok = BertTokenizer(str(args.out / "vocab.txt"), do_lower_case=False, tokenize_chinese_chars=False)
    torch.manual_seed(args.seed)
    bert = BertConfig(vocab_size=len(tok), hidden_size=args.hidden, num_hidden_layers=4, num_attention_heads=4,
                      intermediate_size=4 * args.hidden, max_position_embeddings=128)
    al = CrossAligner.from_config(bert, tok, m=2, n=2)
    cfg = TrainConfig(batch_size=32, tlm_lr=1e-3, tlm_max_steps=args.tlm_steps, tlm_accumulation=1, tlm_epochs=100,
                      ssa_lr=1e-4, ssa_max_steps=args.ssa_steps, ssa_epochs=100, label_threshold=0.1,
                      seed=args.seed, progress=False, save_every=100_000)
    t0 = time.monotonic()
    train(al, str(args.out / "train.src"), str(args.out / "train.tgt"), args.out / "model", cfg)
    out = {"pairs": len(src), "vocabulary": len(words), "tlm_steps": args.tlm_steps, "ssa_steps": args.ssa_steps,
           "hidden": args.hidden, "train_seconds": round(time.monotonic() - t0, 1), "test_aer": {}}
    ts, tt = Path(paths["test_src"]).read_text().splitlines(), Path(paths["test_tgt"]).read_text().splitlines()
    gold = list(read_alignments(paths["test_align"], 0))
    for stage in ("tlm", "ssa"):
        m = CrossAligner.from_pretrained(args.out / "model" / stage / "model")
        for sym in ("pieces", "grow-diag-final-and"):
            for tau in (0.05, 0.1, 0.2, 0.3):
                a = corpus_aer(m.align(ts, tt, extraction=m.extraction(threshold=tau, symmetrize=sym)), gold)
                out["test_aer"][f"{stage} τ={tau} {sym}"] = [round(100 * x, 2) for x in (a.aer, a.precision, a.recall)]
    print(json.dumps(out, indent=1, ensure_ascii=False))


if __name__ == "__main__":
    main()
