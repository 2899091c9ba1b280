"""Loss per update of two training variants on Multi30k En->De: validation NLL after N updates, paired by seed.

Speed changes that alter what a run trains on (e.g. the length tie-break of the batches, ``--bucket-ties``) must
not cost learning per update. This trains every seed once with variant A's and once with variant B's extra
``xlpe train`` flags and compares their val NLL at the last validation, paired by seed::

    # the length tie-break against the default batches, 3 more seeds, 400 updates each (~5 min per run, 2 threads)
    python benchmarks/loss_per_update.py --b=--bucket-ties --seeds 4 5 6 --updates 400 --threads 2 \\
        --data ../shared/data/multi30k/raw --work ../runs/loss-per-update

The recipe is the speed benchmarks' (``bench_fairseq_peer.py``, ``multi30k_budget.py``): the ``small`` preset with
sinusoidal APE and one shared embedding table, dropout 0.3, label smoothing 0.1, lr 1e-3 with 400 warm-up updates,
4,096 tokens per batch, ``--amp bf16-pure``; a joint 8k BPE of train (trained into ``--work`` once). Every run
lives in ``--work/<A|B>-seed<k>`` and resumes or is skipped when it has finished, so seeds can be added over several
sittings. Prints one JSON object: per seed the two NLLs and B − A, their mean and standard deviation, and the paired
t-test over seeds (two-sided p, and the one-sided p that B is worse). Training seeds are the unit of the test: more
seeds, not more validation sentences, make it stronger. Nothing is written into the repository.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import shlex
import statistics
import subprocess
import sys
from pathlib import Path


def last_valid_nll(run: Path) -> tuple[int, float] | None:
    f = run / "valid_log.csv"
    if not f.exists():
        return None
    rows = [r for r in csv.DictReader(open(f, newline="")) if r.get("valid_nll")]
    return (int(rows[-1]["step"]), float(rows[-1]["valid_nll"])) if rows else None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--a", default="", help="extra `xlpe train` flags of variant A, written --a=FLAGS (default: none)")
    ap.add_argument("--b", required=True,
                    help="extra `xlpe train` flags of variant B, written --b=FLAGS (e.g. --b=--bucket-ties)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--updates", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--amp", default="bf16-pure")
    ap.add_argument("--data", default="../shared/data/multi30k/raw")
    ap.add_argument("--work", default="../runs/loss-per-update")
    args = ap.parse_args()
    data, work = Path(args.data), Path(args.work)
    for f in ("train.en", "train.de", "val.en", "val.de"):
        if not (data / f).is_file():
            ap.error(f"{data / f}: missing (--data is the folder of Multi30k's raw text)")
    work.mkdir(parents=True, exist_ok=True)
    spm = work / "spm.model"
    xlpe = [sys.executable, "-m", "xlpe.cli"]
    if not spm.exists():
        subprocess.run(xlpe + ["subword", "train", "--input", str(data / "train.en"), str(data / "train.de"),
                               "--model", str(spm), "--vocab-size", "8000"], check=True)
    common = ["--train-src", str(data / "train.en"), "--train-tgt", str(data / "train.de"), "--dev-src",
              str(data / "val.en"), "--dev-tgt", str(data / "val.de"), "--subword-model", str(spm), "--preset", "small",
              "--pe", "ape", "--share-embeddings", "--max-tokens", "4096", "--lr", "1e-3", "--warmup", "400",
              "--dropout", "0.3", "--label-smoothing", "0.1", "--max-updates", str(args.updates),
              "--validate-every", str(args.updates), "--amp", args.amp, "--threads", str(args.threads),
              "--resume", "auto", "--log-every", "50"]
    nll: dict[str, dict[int, float]] = {"A": {}, "B": {}}
    for seed in args.seeds:
        for label, extra in (("A", args.a), ("B", args.b)):
            run = work / f"{label}-seed{seed}"
            done = last_valid_nll(run)
            if done is None or done[0] < args.updates:
                print(f"training {run} ({extra or 'no extra flags'})", file=sys.stderr, flush=True)
                subprocess.run(xlpe + ["train", *common, "--seed", str(seed), "--out", str(run),
                                       *shlex.split(extra)], check=True)
                done = last_valid_nll(run)
            nll[label][seed] = done[1]
    from xlpe.evaluate.significance import paired_t
    a = [nll["A"][s] for s in args.seeds]
    b = [nll["B"][s] for s in args.seeds]
    diffs = [y - x for x, y in zip(a, b)]
    out = {"a": args.a, "b": args.b, "updates": args.updates, "amp": args.amp, "threads": args.threads,
           "per_seed": {s: {"A": x, "B": y, "B_minus_A": round(y - x, 4)} for s, x, y in zip(args.seeds, a, b)},
           "mean_B_minus_A": round(statistics.mean(diffs), 4)}
    if len(diffs) > 1:
        t, df, p2 = paired_t(b, a)
        out.update(std_B_minus_A=round(statistics.stdev(diffs), 4), t=round(t, 3), df=df, p_two_sided=round(p2, 4),
                   p_one_sided_B_worse=round(p2 / 2 if t > 0 else 1 - p2 / 2, 4) if math.isfinite(t) else
                   (0.0 if t > 0 else 1.0))
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
