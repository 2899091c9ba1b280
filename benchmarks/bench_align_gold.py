"""AER of xlpe's eflomal aligner on real gold sets, against raw eflomal in the same run. Prints JSON.

Not a test. Protocol (per language pair):

* training text = the pair's unlabelled parallel corpus with the gold sentences appended, lowercased;
  the aligner runs once over all of it (no priors) and the last lines are scored;
* symmetrisation grow-diag-final-and (:mod:`xlpe.align.symmetrize`, Moses ``symal`` semantics);
* gold: ``../shared/data/word-alignment-gold/<pair>/<pair>.talp``, 1-based, sure ``i-j`` / possible ``ipj``;
  micro-averaged AER = 1 − (|A∩S| + |A∩P|) / (|A| + |S|) (:func:`xlpe.evaluate.aer.corpus_aer`).

Corpora: de-en Europarl ComTrans (23,580 lines); en-fr the first 100k lines of the ISI Hansards (untokenised,
no accents: tokenised and normalised below to the gold's conventions, accents stripped on both sides);
zh-en BTEC 44k; ja-en KFTT train 30k + dev (``tune`` left out: the gold set is drawn from it).

Timing protocol (each run in a fresh worker process, runs of the two aligners interleaved, same data files):

* ``xlpe``: ``EflomalAligner(sym="grow-diag-final-and").align_files(src, tgt, out)``, what ``xlpe align SRC TGT
  -o OUT`` does: read the text files, write eflomal's input, run the sampler, symmetrise, write Pharaoh;
* ``raw_eflomal``: ``eflomal.Aligner().align(open(src), open(tgt), links_filename_fwd=FWD,
  links_filename_rev=REV)``, what ``eflomal-align -s SRC -t TGT -f FWD -r REV`` does (read, index, sampler,
  write both directions), with **no** symmetrisation; ``raw_sym_seconds`` is the symmetrisation of its
  output afterwards with xlpe's reference per-sentence :func:`xlpe.align.symmetrize.symmetrize` (eflomal
  has no symmetriser), reported apart;
* wall times are measured inside the worker around that one call (imports excluded); ``ratio_median`` =
  median xlpe / median raw (both without interpreter start-up), ``ratio_mean`` likewise with means;
* ``peak_rss_mb`` (max over runs): ``python`` = the worker's own peak RSS during the call (``VmHWM``),
  ``eflomal`` = the sampler binary's peak RSS (its ``VmHWM``, sampled every 0.1 s). ``getrusage``'s
  ``ru_maxrss`` is not used: a child inherits the maximum of the process it is forked from.

AER: raw eflomal's links are symmetrised with the same function as xlpe's.

Usage::

    python benchmarks/bench_align_gold.py --pairs deen --runs 3
    python benchmarks/bench_align_gold.py --pairs deen,enfr,zhen,jaen --runs 3 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
GOLD = DATA / "word-alignment-gold"
REFERENCE = {"deen": "26.6–26.8", "enfr": "9.0–9.1", "zhen": "32.5–33.6", "jaen": "53.2–53.9"}


def _vm_hwm_mb(pid="self"):
    """Peak resident set of a process's current program (``VmHWM``; reset by exec, unlike ``ru_maxrss``,
    which a child inherits from the process it was forked from)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class _ChildPeak(threading.Thread):
    """Samples the ``VmHWM`` of this process's children (the eflomal binary) every 0.1 s; VmHWM only grows,
    so the last sample before the child exits is (nearly) its peak."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak, self.done = 0.0, threading.Event()

    def run(self):
        me = os.getpid()
        while not self.done.is_set():
            for d in os.listdir("/proc"):
                if not d.isdigit():
                    continue
                try:
                    with open(f"/proc/{d}/stat") as f:
                        stat = f.read()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2:].split()[1]) == me:  # field 4: parent pid
                    self.peak = max(self.peak, _vm_hwm_mb(d) or 0.0)
            self.done.wait(0.1)


def _worker(args) -> int:
    """One timed alignment in this (fresh) process; prints JSON. Imports only what the aligner needs."""
    res = {}
    child = _ChildPeak()
    child.start()
    if args.worker == "xlpe":
        from xlpe.align.eflomal import EflomalAligner
        al = EflomalAligner(sym="grow-diag-final-and", n_samplers=args.n_samplers, quiet=True)
        t0 = time.perf_counter()
        al.align_files(args.src, args.tgt, args.align_out)
        res["seconds"] = time.perf_counter() - t0
        rss_python = _vm_hwm_mb()
    else:
        import eflomal
        fwd, rev = args.align_out + ".fwd", args.align_out + ".rev"
        t0 = time.perf_counter()
        with open(args.src, encoding="utf-8") as s, open(args.tgt, encoding="utf-8") as t:
            eflomal.Aligner(n_samplers=args.n_samplers).align(s, t, links_filename_fwd=fwd, links_filename_rev=rev)
        res["seconds"] = time.perf_counter() - t0
        rss_python = _vm_hwm_mb()
        from xlpe.align.symmetrize import symmetrize
        from xlpe.io.alignments import format_alignment
        t1 = time.perf_counter()
        parse = lambda line: [tuple(map(int, x.split("-"))) for x in line.split()]  # noqa: E731
        with open(fwd) as f, open(rev) as r, open(args.align_out, "w") as o:
            for a, b in zip(f, r):
                o.write(format_alignment(symmetrize(parse(a), parse(b), method="grow-diag-final-and"), 0,
                                         possible=False) + "\n")
        res["raw_sym_seconds"] = time.perf_counter() - t1
    child.done.set()
    child.join()
    res["peak_rss_mb"] = {"python": None if rss_python is None else round(rss_python, 1),
                          "eflomal": round(child.peak, 1) if child.peak else None}
    print(json.dumps(res))
    return 0


def load_pair(pair: str):
    """(src_lines, tgt_lines, n_gold, gold_alignments), lowercased; the gold lines are the last n_gold
    (:mod:`xlpe.data.gold_sets` reads and normalises the corpora)."""
    from xlpe.data.gold_sets import load_gold_set
    try:
        g = load_gold_set(pair, DATA, lowercase=True)
    except Exception as e:  # noqa: BLE001 - an unknown pair or missing data ends the benchmark with its reason
        raise SystemExit(str(e)) from None
    return g.train_src + g.gold_src, g.train_tgt + g.gold_tgt, len(g.gold_src), g.gold


def score(hyps, gold) -> dict:
    try:
        from xlpe.evaluate.aer import corpus_aer
        s = corpus_aer(hyps, gold)
        return {"aer": round(100 * s.aer, 2), "precision": round(100 * s.precision, 2),
                "recall": round(100 * s.recall, 2), "links": s.n_hyp}
    except ImportError:  # local fallback: same formula
        a = sum(len(h.links) for h in hyps)
        s = sum(len(g.sure) for g in gold)
        a_s = sum(len(h.links & g.sure) for h, g in zip(hyps, gold))
        a_p = sum(len(h.links & g.possible) for h, g in zip(hyps, gold))
        return {"aer": round(100 * (1 - (a_s + a_p) / (a + s)), 2), "precision": round(100 * a_p / a, 2),
                "recall": round(100 * a_s / s, 2), "links": a}


def run_one(kind, src_path, tgt_path, work, n_gold, n_samplers, tag):
    """One timed run of ``kind`` (xlpe / raw) in a fresh worker; returns (hypotheses for the gold lines, info)."""
    from xlpe.io.alignments import read_alignments
    out = os.path.join(work, f"{kind}.{tag}.align")
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--src", src_path, "--tgt", tgt_path,
           "--align-out", out, "--n-samplers", str(n_samplers)]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    process_seconds = time.perf_counter() - t0
    if r.returncode:
        raise SystemExit(f"{kind} worker failed:\n{r.stderr}")
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info["seconds"] = round(info["seconds"], 2)
    if "raw_sym_seconds" in info:
        info["raw_sym_seconds"] = round(info["raw_sym_seconds"], 2)
    info["process_seconds"] = round(process_seconds, 2)
    hyps = list(read_alignments(out, 0))[-n_gold:]
    for f in (out, out + ".fwd", out + ".rev"):
        if os.path.exists(f):
            os.unlink(f)
    return hyps, info


def _summary(runs) -> dict:
    aers = [r["aer"] for r in runs]
    secs = [r["seconds"] for r in runs]
    out = {"aer_mean": round(statistics.mean(aers), 2), "aer_min": min(aers), "aer_max": max(aers),
           "seconds_mean": round(statistics.mean(secs), 2), "seconds_median": round(statistics.median(secs), 2),
           "peak_rss_mb": {k: max((r["peak_rss_mb"][k] or 0) for r in runs) or None for k in ("python", "eflomal")}}
    if "raw_sym_seconds" in runs[0]:
        out["raw_sym_seconds_median"] = round(statistics.median(r["raw_sym_seconds"] for r in runs), 2)
    out["runs"] = runs
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pairs", default="deen", help="comma-separated subset of deen,enfr,zhen,jaen")
    ap.add_argument("--runs", type=int, default=3, help="runs per aligner (eflomal cannot be seeded)")
    ap.add_argument("--n-samplers", type=int, default=3, help="eflomal samplers (default 3, as eflomal)")
    ap.add_argument("--only", choices=("both", "xlpe", "raw"), default="both")
    ap.add_argument("--out", help="also write the JSON here")
    ap.add_argument("--worker", choices=("xlpe", "raw"), help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    ap.add_argument("--tgt", help=argparse.SUPPRESS)
    ap.add_argument("--align-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker(args)
    if not GOLD.is_dir():
        print(json.dumps({"skipped": f"data not found at {DATA.resolve()}"}))
        return 0
    from xlpe.align.eflomal import eflomal_version
    report = {"command": " ".join([os.path.basename(sys.executable)] + sys.argv), "eflomal": eflomal_version(),
              "python": platform.python_version(), "cpus": os.cpu_count(), "pairs": {}}
    kinds = [k for k in ("xlpe", "raw") if args.only in ("both", k)]
    for pair in args.pairs.split(","):
        t0 = time.time()
        src, tgt, n_gold, gold = load_pair(pair)
        entry = {"train_lines": len(src), "gold_lines": n_gold, "load_seconds": round(time.time() - t0, 1),
                 "reference_raw_gdfa_aer": REFERENCE.get(pair)}
        runs = {k: [] for k in kinds}
        with tempfile.TemporaryDirectory(prefix="bench-align-") as work:
            src_path, tgt_path = os.path.join(work, "train.src"), os.path.join(work, "train.tgt")
            Path(src_path).write_text("".join(x + "\n" for x in src), encoding="utf-8")
            Path(tgt_path).write_text("".join(x + "\n" for x in tgt), encoding="utf-8")
            for r in range(args.runs):  # interleaved, so that a change in machine load hits both alike
                for kind in kinds:
                    hyps, info = run_one(kind, src_path, tgt_path, work, n_gold, args.n_samplers, r)
                    runs[kind].append({**score(hyps, gold), **info})
                    print(f"[{pair}] {kind}: {runs[kind][-1]}", file=sys.stderr, flush=True)
        for kind in kinds:
            entry["xlpe" if kind == "xlpe" else "raw_eflomal"] = _summary(runs[kind])
        if len(kinds) == 2:
            x, r = entry["xlpe"], entry["raw_eflomal"]
            entry["ratio_median"] = round(x["seconds_median"] / r["seconds_median"], 3)
            entry["ratio_mean"] = round(x["seconds_mean"] / r["seconds_mean"], 3)
            entry["aer_difference"] = round(x["aer_mean"] - r["aer_mean"], 2)
        report["pairs"][pair] = entry
    text = json.dumps(report, indent=1, ensure_ascii=False)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
