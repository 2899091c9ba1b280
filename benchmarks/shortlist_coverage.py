"""How much of the references a vocabulary shortlist keeps, without a model: for each table size, the mean size of
a batch's shortlist and the share of the reference target pieces (and of whole reference sentences) inside it.
Prints one JSON object per size (one line each); choose the size on val, never on a test set.

    python benchmarks/shortlist_coverage.py --subword-model spm.model --train train.en train.de \\
        --eval val.en val.de [--batch 64] [--sizes 10:100 20:100 50:200 100:200 100:500]

Batches are consecutive sentences after sorting by source length, as ``xlpe translate`` forms them (by sentence
count only: ``--batch`` sentences a batch). The table is :func:`xlpe.infer.shortlist.build_shortlist`'s.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from xlpe.data.subword import BOS_ID, EOS_ID, PAD_ID, SubwordModel
from xlpe.infer.shortlist import build_shortlist
from xlpe.io.text import read_lines


def coverage(sl, src_ids, tgt_ids, batch: int, vocab: int) -> dict:
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    sizes, hit, total, whole = [], 0, 0, 0
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        src = torch.zeros(len(idx), max(len(src_ids[i]) for i in idx), dtype=torch.long)
        for r, i in enumerate(idx):
            src[r, :len(src_ids[i])] = torch.tensor(src_ids[i])
        ids = set(sl.batch(src, torch.zeros(vocab, 1), (PAD_ID, BOS_ID, EOS_ID)).ids.tolist())
        sizes.append(len(ids))
        for i in idx:
            inside = [t in ids for t in tgt_ids[i]]
            hit, total, whole = hit + sum(inside), total + len(inside), whole + all(inside)
    return {"mean_batch_shortlist": round(sum(sizes) / len(sizes), 1), "ref_piece_coverage": round(hit / total, 4),
            "ref_sentences_fully_covered": round(whole / len(src_ids), 4)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--subword-model", required=True, help="the model's joint sentencepiece model")
    ap.add_argument("--train", nargs=2, required=True, metavar=("SRC", "TGT"))
    ap.add_argument("--eval", nargs=2, required=True, metavar=("SRC", "TGT"), help="e.g. val (never test)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sizes", nargs="+", default=["10:100", "20:100", "50:200", "100:200", "100:500"],
                    help="PER_SOURCE:FREQUENT table sizes")
    a = ap.parse_args()
    sw = SubwordModel.load(a.subword_model)
    vocab = len(sw)

    def ids(path):
        return [e.ids for e in sw.encode_many(t for _, t in read_lines(path))]
    tr_s, tr_t, ev_s, ev_t = ids(a.train[0]), ids(a.train[1]), ids(a.eval[0]), ids(a.eval[1])
    for size in a.sizes:
        per_source, frequent = map(int, size.split(":"))
        t0 = time.perf_counter()
        sl = build_shortlist(zip(tr_s, tr_t), vocab, vocab, per_source=per_source, frequent=frequent,
                             exclude=(PAD_ID, BOS_ID))
        row = {"per_source": per_source, "frequent": frequent, "vocab": vocab, "batch": a.batch,
               "build_seconds": round(time.perf_counter() - t0, 1)}
        print(json.dumps({**row, **coverage(sl, ev_s, ev_t, a.batch, vocab)}), flush=True)


if __name__ == "__main__":
    main()
