"""Speed and memory of the training data path and the training loop; prints one JSON object.

    python benchmarks/bench_train.py --sentences 100000 --updates 20 --preset small

Measures (a) encoding a synthetic bitext into :class:`xlpe.data.batching.ParallelData` (sentences/s and
bytes per sentence, which tells whether 1M sentences fit), (b) building one epoch of token-budget batches,
(c) training throughput of :func:`xlpe.train.trainer.train` (target tokens/s, seconds per update).
Never run as a test.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import resource
import tempfile
import time
from pathlib import Path


def synthetic_bitext(folder: Path, n: int, seed: int = 0) -> tuple[Path, Path]:
    rng = random.Random(seed)
    s, t = folder / "bench.src", folder / "bench.tgt"
    with open(s, "w") as fs, open(t, "w") as ft:
        for _ in range(n):
            words = [f"w{int(rng.paretovariate(1.2)) % 5000}" for _ in range(rng.randint(3, 40))]
            fs.write(" ".join(words) + "\n")
            ft.write(" ".join("v" + w[1:] for w in reversed(words)) + "\n")
    return s, t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sentences", type=int, default=50000, help="synthetic sentence pairs")
    ap.add_argument("--updates", type=int, default=20, help="training updates to time")
    ap.add_argument("--preset", default="tiny", help="model preset")
    ap.add_argument("--max-tokens", type=int, default=4096, help="batch token budget")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    args = ap.parse_args()

    import torch
    from xlpe.data.batching import ParallelData, TokenBatchSampler
    from xlpe.data.subword import SubwordModel, train_subwords
    from xlpe.nn.transformer import TransformerConfig
    from xlpe.train import DataConfig, TrainConfig, train

    torch.set_num_threads(args.threads)
    result: dict = {"sentences": args.sentences, "preset": args.preset, "max_tokens": args.max_tokens,
                    "threads": args.threads, "torch": torch.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        src, tgt = synthetic_bitext(tmp, args.sentences)
        spm = tmp / "joint.model"
        train_subwords([src, tgt], spm, vocab_size=4000, max_sentences=50000)
        sw = SubwordModel.load(spm)

        t = time.perf_counter()
        data = ParallelData.from_files(src, tgt, sw, max_src_len=1024, max_tgt_len=1024)
        dt = time.perf_counter() - t
        result["encode_sentences_per_s"] = round(len(data) / dt)
        result["dataset_bytes_per_sentence"] = round(data.nbytes() / len(data), 1)
        result["dataset_mb_per_1M_sentences"] = round(data.nbytes() / len(data) * 1e6 / 2**20, 1)

        sampler = TokenBatchSampler(data.num_tokens, args.max_tokens, seed=1)
        t = time.perf_counter()
        batches = sampler.batches(0)
        result["batching_epoch_s"] = round(time.perf_counter() - t, 3)
        lengths = data.num_tokens
        real = int(lengths.sum())
        padded = sum(len(b) * int(lengths[b].max()) for b in batches)
        result["padding_fraction"] = round(1 - real / padded, 4)

        out = tmp / "run"
        tcfg = TrainConfig(out=str(out), max_updates=args.updates, max_tokens=args.max_tokens, warmup=10,
                           log_every=max(1, args.updates // 4), save_every=0, progress=False, threads=args.threads)
        t = time.perf_counter()
        train(TransformerConfig.from_preset(args.preset), tcfg,
              DataConfig(train_src=str(src), train_tgt=str(tgt), subword_model=str(spm)))
        result["train_wall_s"] = round(time.perf_counter() - t, 2)
        rows = list(csv.DictReader(open(out / "train_log.csv")))
        tps = [float(r["tokens_per_s"]) for r in rows[1:]] or [float(rows[0]["tokens_per_s"])]
        result["train_tokens_per_s"] = round(sum(tps) / len(tps))
        result["final_loss"] = float(rows[-1]["loss"])
    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
