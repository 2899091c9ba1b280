"""xlpe's NMT core against fairseq on this machine, same `small` shape, same data, same run; prints one JSON object.

    python benchmarks/bench_fairseq_peer.py --data ../shared/data/multi30k/raw --work ../runs/multi30k \\
        --fairseq-venv ../fairseq-venv --threads 2 --updates 60 --warmup-updates 10 --rounds 2
    # decoding speed of trained checkpoints (by default the newest time mark of multi30k_budget.py runs in --work)
    python benchmarks/bench_fairseq_peer.py --only decode [--xlpe-checkpoint X.pt --fairseq-checkpoint Y.pt]
    # ... and xlpe's decoding before a change, in the same rounds (a worktree of the older commit)
    git worktree add ../xlpe-before HEAD~1
    python benchmarks/bench_fairseq_peer.py --only decode --decode-rounds 3 --before-src ../xlpe-before/src

The fairseq peer lives in its own venv beside the same torch (these commands worked on this machine, with
PyPI reachable, Python 3.11, torch 2.13.0+cpu from the local wheel directory so that pip never pulls a CUDA
build; ``pip<24.1`` because omegaconf/hydra releases of fairseq's era carry metadata that newer pip rejects)::

    python -m venv ../fairseq-venv                        # a clean venv (no --system-site-packages)
    ../fairseq-venv/bin/pip install "pip<24.1" wheel setuptools
    ../fairseq-venv/bin/pip install torch==2.13.0         # resolves to the local 2.13.0+cpu wheel here
    ../fairseq-venv/bin/pip install "cython<3.1" "numpy<2"
    ../fairseq-venv/bin/pip install --no-build-isolation fairseq-fixed==0.12.3.1
    ../fairseq-venv/bin/fairseq-train --help              # check

(pip also installs torchaudio 2.11.0, whose binary does not load with torch 2.13; fairseq's text tasks never
import it, so it is left alone.) fairseq's commands run with ``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` = ``--threads``
and ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` (torch >= 2.6 refuses fairseq's checkpoints otherwise);
``fairseq-generate`` gets ``--required-batch-size-multiple 1`` (otherwise it silently drops sentences), and the
number of hypotheses is checked against the test set.

What is measured (systems interleaved round by round — xlpe ape, xlpe rpe, fairseq, xlpe ape bf16 (autocast), xlpe
ape bf16pure (bf16 weights, float32 masters), then again —
so that they share the machine's noise; medians over rounds are reported):

* **Training throughput**: target tokens per second (non-pad target tokens incl. EOS, both tools' count) of
  short fresh runs of ``--warmup-updates + --updates`` updates, over the last ``--updates`` only (from the
  trainers' own logs every 10 updates: xlpe ``train_log.csv`` tokens_per_s x interval; fairseq ``train_inner``
  wpb x updates / wps). No validation, no checkpoint inside the window. Same data, subwords, batch budget,
  model and optimiser as ``multi30k_budget.py``.
* **Two processes of one thread** (``xlpe-ape-bf16pure-ddp``, ``fairseq-ddp``, not in the default set): DDP over
  ``--threads`` CPU processes with ``--max-tokens`` split between them (the same tokens per update), xlpe through
  ``torch.distributed.run``, fairseq with every rank started here (gloo, ``legacy_ddp``). ``over_fairseq_ddp``
  compares with fairseq's best use of the cores, not only with its default.
* **Other token budgets** (``--budgets 4096 8192``): every training system at each ``--max-tokens`` (named
  ``<system>:8192``), interleaved in the same rounds; ``over_fairseq`` is against fairseq at the peer recipe's
  4,096, ``over_fairseq_same_budget`` against fairseq at the same budget.
* **MFU**: model FLOPs per target token from the corpus' own lengths (below), times tokens/s, over a matmul peak
  measured in the same run (``torch.mm`` at ``--threads`` threads on the model's GEMM shapes — forward and the
  transposed backward ones — and a square 2048^3 one; the best GFLOP/s of them is the peak). One count for all
  systems: that of the `small` ape model, so ``rpe``'s extra relative-attention work counts as overhead.
  Forward FLOPs (2 per multiply-add) of one pair with S source and T target positions (EOS/BOS included),
  d=256, f=1024, V=8000: encoder layers ``8d²S + 4dfS + 4S²d`` (QKVO projections, FFN, scores and weighted
  sum); decoder layers ``8d²T + 4d²T + 4d²S + 4dfT + 4T²d + 4TSd`` (self-attention projections; cross-attention
  Q,O on T and K,V on S; FFN; full TxT self-attention and TxS cross-attention); output projection ``2dVT``.
  Training = 3x forward. Embedding look-ups, softmax, layer norms, loss and Adam are not counted.
* **Peak RSS** of each training process (``ru_maxrss``) and of its process tree (fairseq's data-loader worker).
* **Decoding** (``--only decode`` or the default ``all``): test_2016_flickr En->De, sentences/s for beam 5 and
  greedy (fairseq: beam 1), batch 64, lenpen 1.0, each tool's own length limit, of trained checkpoints (not
  necessarily of the same age; the JSON names them): xlpe decode-only time (model loaded first, then
  ``translate_lines`` timed) and end-to-end wall, also with the fairseq stopping rule (``beam_stop``) and with
  bf16 weights (``dtype``); fairseq ``fairseq-generate``'s own "Translated ... in Xs"
  (generation only) and end-to-end wall, also with glibc's allocator set as ``xlpe translate`` sets it
  (``fairseq_*_malloc``: ``MALLOC_MMAP_THRESHOLD_``/``MALLOC_TRIM_THRESHOLD_``, see
  ``xlpe.runtime.retain_freed_memory``); xlpe batched beam against ``batch_size=1`` beam. BLEU of every output
  is included as a sanity check.

All paths are arguments (defaults relative to the repository root); prepared data is cached in ``--work/prep``
(shared with multi30k_budget.py), runs in ``--work/bench``. Never run as a test.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import multi30k_budget as mb  # noqa: E402

D, F, H, L_ENC, L_DEC = 256, 1024, 4, 3, 3
SYSTEMS = ("xlpe-ape", "xlpe-rpe", "fairseq", "xlpe-ape-bf16", "xlpe-ape-bf16pure", "xlpe-ape-bf16pure-ddp",
           "fairseq-ddp")
DDP = "-ddp"        # --threads processes of one thread each, --max-tokens / --threads tokens per process and update
TOKENS = 4096       # both tools' --max-tokens in the peer recipe; "<system>:<N>" is the system at N tokens (--budgets)


def _amp(system: str) -> str:
    """The training precision of a system: ``...-bf16`` autocast, ``...-bf16pure`` bf16 weights with float32
    masters (``xlpe.train.master``), otherwise float32."""
    system = system.split("@")[0].split(":")[0].removesuffix(DDP)
    return "bf16-pure" if system.endswith("bf16pure") else "bf16" if system.endswith("bf16") else "none"


def _ddp_fairseq(cmd: list, a, run_dir: Path) -> tuple[list, list]:
    """fairseq 0.12 on ``a.threads`` CPU processes: its torchrun path divides by the GPU count and its default
    DDP wrapper passes GPU device ids, so every rank is started here, with gloo and ``legacy_ddp``. Returns the
    rank-0 command and the other ranks' processes (started)."""
    i = cmd.index("--max-tokens")
    cmd = cmd[:i + 1] + [str(int(cmd[i + 1]) // a.threads)] + cmd[i + 2:] + [
        "--distributed-backend", "gloo", "--distributed-world-size", str(a.threads), "--distributed-no-spawn",
        "--ddp-backend", "legacy_ddp", "--distributed-init-method", f"tcp://127.0.0.1:{29500 + os.getpid() % 400}",
        "--device-id", "0"]
    others = [subprocess.Popen([str(c) for c in cmd] + ["--distributed-rank", str(r)], stdout=subprocess.DEVNULL,
                               stderr=open(run_dir / f"rank{r}.log", "w"), env={**os.environ, **mb.fairseq_env(1)})
              for r in range(1, a.threads)]
    return cmd + ["--distributed-rank", "0"], others

#: with --before-src, these xlpe systems are also trained from the older source tree, named "<system>@before"
BEFORE_SUFFIX = "@before"


# ======================================================================================================
# FLOPs and the matmul peak
# ======================================================================================================

def pair_lengths(prep: Path) -> tuple[list[int], list[int]]:
    """(S, T) of every training pair: pieces + EOS on the source, pieces + 1 (BOS in / EOS out) on the target."""
    src = [len(l.split()) + 1 for l in mb.read_lines(prep / "pieces" / f"train.{mb.SRC}")]
    tgt = [len(l.split()) + 1 for l in mb.read_lines(prep / "pieces" / f"train.{mb.TGT}")]
    return src, tgt


def flops_per_target_token(src: list[int], tgt: list[int], vocab: int) -> dict:
    import numpy as np
    S, T = np.asarray(src, dtype=np.float64), np.asarray(tgt, dtype=np.float64)
    d, f = D, F
    enc = L_ENC * (8 * d * d * S + 4 * d * f * S + 4 * S * S * d)
    dec = L_DEC * (8 * d * d * T + 4 * d * d * T + 4 * d * d * S + 4 * d * f * T + 4 * T * T * d + 4 * T * S * d)
    out = 2 * d * vocab * T
    ntok = T.sum()
    parts = {"encoder": enc.sum() / ntok, "decoder": dec.sum() / ntok, "output_projection": out.sum() / ntok}
    fwd = sum(parts.values())
    return {"train_flops_per_target_token": round(3 * fwd), "forward_flops_per_target_token": round(fwd),
            "forward_share": {k: round(v / fwd, 3) for k, v in parts.items()},
            "mean_src_len": round(float(S.mean()), 2), "mean_tgt_len": round(float(T.mean()), 2),
            "vocab": vocab, "definition": "see module docstring (3x forward; matmul FLOPs of the ape model)"}


def matmul_peak(threads: int, dtype: str = "float32", tokens: int = 4096, vocab: int = 8000,
                min_time: float = 0.4, min_reps: int = 3) -> dict:
    """GFLOP/s of ``F.linear`` (what the models' projections call) on the model's GEMM shapes, ``dtype`` operands."""
    import torch
    import torch.nn.functional as Fn
    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    M, d, f, V = tokens, D, F, vocab
    shapes = {  # (m, k, n): forward and the backward (input-grad, weight-grad) GEMMs of the model
        "x@Wqkvo": (M, d, d), "x@W1": (M, d, f), "h@W2": (M, f, d), "x@Wout": (M, d, V),
        "dy@Wout^T": (M, V, d), "x^T@dy(out)": (d, M, V), "x^T@dh(ffn)": (d, M, f), "square2048": (2048, 2048, 2048)}
    g = torch.Generator().manual_seed(0)
    res = {}
    for name, (m, k, n) in shapes.items():
        a = torch.randn(m, k, generator=g).to(dt)
        w = torch.randn(n, k, generator=g).to(dt)
        Fn.linear(a, w)                                           # warm-up
        reps, t0 = 0, time.perf_counter()
        while True:
            Fn.linear(a, w)
            reps += 1
            el = time.perf_counter() - t0
            if el >= min_time and reps >= min_reps:
                break
        res[name] = round(2.0 * m * k * n * reps / el / 1e9, 2)
    return {"dtype": dtype, "threads": threads, "gflops": res, "peak_gflops": max(res.values())}


# ======================================================================================================
# training throughput
# ======================================================================================================

def _xlpe_window(log_csv: Path, warm: int) -> dict:
    rows = list(csv.DictReader(open(log_csv)))
    tok = sec = 0.0
    n = 0
    prev_wall, prev_step = 0.0, 0
    for r in rows:
        step, wall, tps = int(r["step"]), float(r["wall_time"]), float(r["tokens_per_s"])
        if prev_step >= warm:
            dt = wall - prev_wall
            tok += tps * dt
            sec += dt
            n += step - prev_step
        prev_wall, prev_step = wall, step
    return {"tokens_per_s": tok / sec if sec else None, "s_per_update": sec / n if n else None, "updates": n,
            "tokens_per_update": tok / n if n else None}


def _fairseq_window(text: str, warm: int) -> dict:
    tok = sec = 0.0
    n = 0
    prev = 0
    for line in text.splitlines():
        if "| train_inner |" not in line:
            continue
        rec = json.loads(line.split("| train_inner |", 1)[1])
        upd = int(rec["num_updates"])
        if prev >= warm:
            k = upd - prev
            t = float(rec["wpb"]) * k
            tok += t
            sec += t / float(rec["wps"])
            n += k
        prev = upd
    return {"tokens_per_s": tok / sec if sec else None, "s_per_update": sec / n if n else None, "updates": n,
            "tokens_per_update": tok / n if n else None}


def train_once(system: str, a, data: Path, prep: Path, run_dir: Path) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    env = None
    if system.endswith(BEFORE_SUFFIX):          # the same system from the older source tree (--before-src)
        system, env = system[:-len(BEFORE_SUFFIX)], {"PYTHONPATH": str(a.before_src)}
    timed = a.bf16_updates if _amp(system) != "none" else a.updates
    total = a.warmup_updates + timed
    log = run_dir / "stdout.log"
    system, _, budget = system.partition(":")
    tokens = int(budget or TOKENS)
    ddp = system.endswith(DDP)
    if system.startswith("xlpe"):
        pe = ["rpe"] if "-rpe" in system else ["ape"]
        amp = _amp(system)
        out = run_dir / "train"
        cmd = mb.xlpe_train_cmd(data, prep, out, pe=pe, amp=amp, threads=1 if ddp else a.threads, max_updates=total,
                                dev=False, log_every=10, save_every=0, validate_every=0,
                                optim={"--max-tokens": tokens // a.threads if ddp else tokens})
        if ddp:                 # xlpe's own DDP path (gloo on CPU); tokens/s in its log sum over the processes
            cmd = [cmd[0], "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(a.threads),
                   *cmd[1:]]                           # "-m xlpe.cli ..."
            env = {**(env or {}), "OMP_NUM_THREADS": "1"}
        r = mb.run(cmd, log=log, env=env)
        w = _xlpe_window(out / "train_log.csv", a.warmup_updates)
        rows = list(csv.DictReader(open(out / "train_log.csv")))
        w["final_loss"] = float(rows[-1]["loss"])
    else:
        out = run_dir / "train"
        cmd = mb.fairseq_train_cmd(a.fairseq_venv, prep, out, threads=1 if ddp else a.threads, max_updates=total,
                                   log_every=10, num_workers=a.fairseq_num_workers, validate=False, save=False)
        cmd[cmd.index("--max-tokens") + 1] = str(tokens)
        others = []
        if ddp:
            cmd, others = _ddp_fairseq(cmd, a, run_dir)
        r = mb.run(cmd, log=log, env=mb.fairseq_env(1 if ddp else a.threads))
        for p in others:
            p.wait()
        w = _fairseq_window(r["output"], a.warmup_updates)
        losses = [json.loads(l.split("| train_inner |", 1)[1])["loss"] for l in r["output"].splitlines()
                  if "| train_inner |" in l]
        w["final_loss_base2"] = float(losses[-1]) if losses else None   # fairseq logs losses in bits
    shutil.rmtree(out, ignore_errors=True)                             # checkpoints are not needed
    return {**{k: (round(v, 3) if isinstance(v, float) else v) for k, v in w.items()}, "wall_s": r["wall_s"],
            "peak_rss_mb": r["peak_rss_mb"], "peak_tree_rss_mb": r["peak_tree_rss_mb"]}


# ======================================================================================================
# decoding
# ======================================================================================================

def xlpe_decode_timed(ckpt: Path, src: Path, hyp: Path, *, beam: int, greedy: bool, batch_size: int,
                      lenpen: float, threads: int, dtype: str = "float32", beam_stop: str = "exhaust",
                      xlpe_src: Path | None = None, workers: int = 1) -> dict:
    """Run this file's ``_xlpe_decode`` mode in a fresh process: decode-only and end-to-end times. ``xlpe_src``:
    import xlpe from that source tree instead (an older checkout, for a before/after comparison in one run)."""
    cmd = [sys.executable, __file__, "_xlpe_decode", "--checkpoint", ckpt, "--input", src, "--output", hyp,
           "--beam", beam, "--batch-size", batch_size, "--lenpen", lenpen, "--threads", threads,
           "--beam-stop", beam_stop]
    if greedy:
        cmd.append("--greedy")
    if dtype != "float32":
        cmd += ["--dtype", dtype]
    if workers > 1:                               # batches decoded at once on threads (translate --workers)
        cmd += ["--workers", workers]
    r = mb.run(cmd, env=None if xlpe_src is None else {"PYTHONPATH": str(xlpe_src)})
    own = json.loads(r["output"].strip().splitlines()[-1])
    return {**own, "end_to_end_wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"]}


def _xlpe_decode_main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser()
    for k in ("--checkpoint", "--input", "--output"):
        ap.add_argument(k, required=True)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lenpen", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--greedy", action="store_true")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--beam-stop", default="exhaust")
    ap.add_argument("--workers", type=int, default=1)
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    try:                              # as `xlpe translate` does (older checkouts have no such set-up)
        from xlpe.runtime import retain_freed_memory
        retain_freed_memory()
    except ImportError:
        pass
    kw = {} if a.dtype == "float32" else {"dtype": a.dtype}        # older checkouts have no dtype option
    if a.beam_stop != "exhaust":
        kw["beam_stop"] = a.beam_stop
    if a.workers > 1:
        kw["workers"] = a.workers
    from xlpe.infer.translate import translate_lines
    from xlpe.nn.checkpoint import load_model
    t = time.perf_counter()
    model, _cfg, subwords = load_model(a.checkpoint, device="cpu")
    load = time.perf_counter() - t
    lines = mb.read_lines(Path(a.input))
    t = time.perf_counter()
    hyps = translate_lines(model, subwords, lines, beam=a.beam, lenpen=a.lenpen, batch_size=a.batch_size,
                           greedy=a.greedy, device="cpu", **kw)
    dec = time.perf_counter() - t
    Path(a.output).write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
    print(json.dumps({"sentences": len(lines), "load_s": round(load, 2), "decode_s": round(dec, 2),
                      "sentences_per_s": round(len(lines) / dec, 2)}))


def newest_mark(run_dir: Path) -> Path | None:
    marks = sorted(run_dir.glob("mark_*min.pt"), key=lambda p: float(p.stem[5:-3]))
    return marks[-1] if marks else None


def decode_bench(a, data: Path, prep: Path, work: Path) -> dict:
    from xlpe.runtime import retained_memory_env
    xck = a.xlpe_checkpoint or newest_mark(work / "budget" / f"xlpe-ape-none-t{a.threads}-fairseqinit")
    fck = a.fairseq_checkpoint or newest_mark(work / "budget" / f"fairseq-t{a.threads}-w{a.fairseq_num_workers}")
    test = "test_2016_flickr"
    src, ref = data / f"{test}.{mb.SRC}", data / f"{test}.{mb.TGT}"
    ddir = work / "bench" / "decode"
    ddir.mkdir(parents=True, exist_ok=True)
    bin_dir = None
    if a.decode_limit:                           # a quick check: the first N sentences (binarised for fairseq)
        sub = ddir / f"first{a.decode_limit}"
        sub.mkdir(exist_ok=True)
        for lang, path in ((mb.SRC, src), (mb.TGT, ref)):
            (sub / f"{test}.{lang}").write_text("".join(l + "\n" for l in mb.read_lines(path)[:a.decode_limit]),
                                               encoding="utf-8")
            (sub / f"pieces.{lang}").write_text("".join(l + "\n" for l in mb.read_lines(
                prep / "pieces" / f"{test}.{lang}")[:a.decode_limit]), encoding="utf-8")
        src, ref = sub / f"{test}.{mb.SRC}", sub / f"{test}.{mb.TGT}"
        if fck:
            bin_dir = sub / "fairseq-bin"
            shutil.rmtree(bin_dir, ignore_errors=True)
            mb.run([mb.fairseq_bin(a.fairseq_venv, "fairseq-preprocess"), "--source-lang", mb.SRC, "--target-lang",
                    mb.TGT, "--testpref", sub / "pieces", "--destdir", bin_dir, "--srcdict",
                    prep / "fairseq-bin" / f"dict.{mb.SRC}.txt", "--tgtdict",
                    prep / "fairseq-bin" / f"dict.{mb.TGT}.txt", "--workers", "1"], log=sub / "preprocess.log",
                   env=mb.fairseq_env(a.threads))
    out: dict = {"test_set": test, "sentences": len(mb.read_lines(src)), "batch_size": a.decode_batch_size,
                 "lenpen": a.lenpen, "xlpe_checkpoint": str(xck) if xck else None,
                 "fairseq_checkpoint": str(fck) if fck else None,
                 "note": "checkpoints need not be of the same age; xlpe's beam shrinks as hypotheses finish, "
                         "fairseq keeps 5 live until 5 finish; greedy = fairseq beam 1",
                 "fairseq_max_len": "1.2*S+10 (xlpe's)" if a.same_max_len else "fairseq's own (200)"}
    if xck is None and fck is None:
        out["skipped"] = ("no trained checkpoint: run multi30k_budget.py first or pass "
                          "--xlpe-checkpoint/--fairseq-checkpoint")
        return out
    runs: dict[str, list] = {}
    jobs = []                                   # interleaved: xlpe, fairseq, xlpe, fairseq, xlpe batch 1
    for kind, beam in (("beam5", 5), ("greedy", 1)):
        if xck:
            jobs.append((f"xlpe_{kind}", dict(beam=beam, greedy=beam == 1, batch_size=a.decode_batch_size)))
        if fck:
            jobs.append((f"fairseq_{kind}", dict(beam=beam, batch_size=a.decode_batch_size)))
            # fairseq with the allocator set-up of `xlpe translate` (xlpe.runtime.retain_freed_memory), through
            # glibc's environment variables: what the same set-up gives the peer
            jobs.append((f"fairseq_{kind}_malloc", dict(beam=beam, batch_size=a.decode_batch_size,
                                                                      env=retained_memory_env())))
    if xck:
        bs = a.decode_batch_size
        jobs.append(("xlpe_beam5_fairseqstop", dict(beam=5, greedy=False, batch_size=bs, beam_stop="fairseq")))
        if not a.no_bf16:
            jobs.append(("xlpe_beam5_bf16", dict(beam=5, greedy=False, batch_size=bs, dtype="bfloat16")))
            jobs.append(("xlpe_beam5_fairseqstop_bf16", dict(beam=5, greedy=False, batch_size=bs,
                                                             dtype="bfloat16", beam_stop="fairseq")))
            jobs.append(("xlpe_greedy_bf16", dict(beam=1, greedy=True, batch_size=bs, dtype="bfloat16")))
        if a.decode_workers > 1:
            w = a.decode_workers
            jobs.append(("xlpe_beam5_workers", dict(beam=5, greedy=False, batch_size=bs, workers=w)))
            jobs.append(("xlpe_greedy_workers", dict(beam=1, greedy=True, batch_size=bs, workers=w)))
        if a.before_src:
            jobs.append(("xlpe_before_beam5", dict(beam=5, greedy=False, batch_size=bs, xlpe_src=a.before_src)))
            jobs.append(("xlpe_before_greedy", dict(beam=1, greedy=True, batch_size=bs, xlpe_src=a.before_src)))
    if xck and not a.no_single:
        jobs.append(("xlpe_beam5_batch1", dict(beam=5, greedy=False, batch_size=1)))
    for r in range(a.decode_rounds):
        for name, kw in jobs:
            hyp = ddir / f"{name}.r{r}.{mb.TGT}"
            if name.startswith("xlpe"):
                t = xlpe_decode_timed(Path(xck), src, hyp, lenpen=a.lenpen, threads=a.threads, **kw)
                sps = t["sentences_per_s"]
            else:
                same = dict(max_len_a=1.2, max_len_b=10) if a.same_max_len else {}
                t = mb.fairseq_decode(a.fairseq_venv, prep, Path(fck), "test", hyp, lenpen=a.lenpen,
                                      threads=a.threads, expect=len(mb.read_lines(ref)), bin_dir=bin_dir, **same,
                                      **kw)
                sps = t["fairseq_reported"].get("sentences_per_s")
            t["end_to_end_sentences_per_s"] = round(out["sentences"] / t.get("end_to_end_wall_s", t.get("wall_s")), 2)
            t["bleu"] = mb.score(hyp, ref)["bleu"]
            t["sentences_per_s"] = sps
            runs.setdefault(name, []).append(t)
    for name, ts in runs.items():
        out[name] = {"sentences_per_s_median": statistics.median(t["sentences_per_s"] for t in ts),
                     "end_to_end_sentences_per_s_median": statistics.median(t["end_to_end_sentences_per_s"]
                                                                            for t in ts),
                     "bleu": ts[-1]["bleu"], "runs": ts}
    if "xlpe_beam5" in out and "xlpe_beam5_batch1" in out:
        out["xlpe_batched_over_single_beam"] = round(out["xlpe_beam5"]["sentences_per_s_median"]
                                                     / out["xlpe_beam5_batch1"]["sentences_per_s_median"], 2)

    def sps(name: str) -> float | None:
        return out[name]["sentences_per_s_median"] if name in out else None

    for k in ("beam5", "greedy"):                # speed ratios of the runs above (same rounds, same machine)
        for ratio, (num, den) in {f"xlpe_over_fairseq_{k}": (f"xlpe_{k}", f"fairseq_{k}"),
                                  f"xlpe_bf16_over_fairseq_{k}": (f"xlpe_{k}_bf16", f"fairseq_{k}"),
                                  f"xlpe_workers_over_fairseq_{k}": (f"xlpe_{k}_workers", f"fairseq_{k}"),
                                  f"xlpe_fairseqstop_over_fairseq_{k}": (f"xlpe_{k}_fairseqstop", f"fairseq_{k}"),
                                  f"xlpe_fairseqstop_bf16_over_fairseq_{k}": (f"xlpe_{k}_fairseqstop_bf16",
                                                                             f"fairseq_{k}"),
                                  f"xlpe_over_fairseq_malloc_{k}": (f"xlpe_{k}", f"fairseq_{k}_malloc"),
                                  f"xlpe_bf16_over_fairseq_malloc_{k}": (f"xlpe_{k}_bf16", f"fairseq_{k}_malloc"),
                                  f"fairseq_malloc_over_fairseq_{k}": (f"fairseq_{k}_malloc", f"fairseq_{k}"),
                                  f"xlpe_bf16_over_fp32_{k}": (f"xlpe_{k}_bf16", f"xlpe_{k}"),
                                  f"xlpe_{k}_over_before": (f"xlpe_{k}", f"xlpe_before_{k}")}.items():
            if sps(num) and sps(den):
                out[ratio] = round(sps(num) / sps(den), 2)
    return out


# ======================================================================================================
# main
# ======================================================================================================

def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "_xlpe_decode":
        return _xlpe_decode_main(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=mb.DEFAULT_DATA, help="Multi30k raw/ folder")
    ap.add_argument("--work", type=Path, default=mb.DEFAULT_WORK, help="working folder (prep/, bench/, budget/)")
    ap.add_argument("--fairseq-venv", type=Path, default=mb.DEFAULT_VENV)
    ap.add_argument("--fairseq-num-workers", type=int, default=1, help="fairseq data-loader workers (its default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", choices=("all", "train", "decode"), default="all")
    ap.add_argument("--systems", nargs="+", choices=SYSTEMS, default=[s for s in SYSTEMS if not s.endswith(DDP)])
    ap.add_argument("--updates", type=int, default=60, help="timed updates per training run")
    ap.add_argument("--budgets", type=int, nargs="+", default=[TOKENS],
                    help=f"--max-tokens of every training system (default {TOKENS}, the peer recipe's); a system at "
                         "another budget N is reported as <system>:N, with its ratio to fairseq at the peer recipe's "
                         "budget and at its own (over_fairseq_same_budget)")
    ap.add_argument("--warmup-updates", type=int, default=10, help="untimed first updates (multiple of 10)")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved rounds of training runs")
    ap.add_argument("--bf16-updates", type=int, default=10,
                    help="timed updates of the bf16 run (slow where the CPU has no native bf16)")
    ap.add_argument("--bf16-rounds", type=int, default=1, help="rounds that include the bf16 run")
    ap.add_argument("--xlpe-checkpoint", type=Path, default=None)
    ap.add_argument("--fairseq-checkpoint", type=Path, default=None)
    ap.add_argument("--decode-rounds", type=int, default=1)
    ap.add_argument("--decode-batch-size", type=int, default=64)
    ap.add_argument("--decode-workers", type=int, default=1,
                    help="also time xlpe with this many batches decoded at once on threads (translate --workers)")
    ap.add_argument("--decode-limit", type=int, default=0, help="decode only the first N test sentences (quick check)")
    ap.add_argument("--lenpen", type=float, default=1.0)
    ap.add_argument("--no-single", action="store_true", help="skip xlpe beam with batch_size=1")
    ap.add_argument("--no-bf16", action="store_true",
                    help="skip xlpe's bf16-weight decoding (emulated and slow where the CPU has no bf16 instructions)")
    ap.add_argument("--same-max-len", action="store_true",
                    help="fairseq-generate gets xlpe's output length limit (1.2*S + 10) instead of its own (200): a "
                         "weak model's few run-away hypotheses otherwise decide fairseq's time")
    ap.add_argument("--before-src", type=Path, default=None,
                    help="an older xlpe source tree (e.g. a `git worktree` of the commit before a change, its src/): "
                         "its training and decoding are timed in the same rounds, as <system>@before / xlpe_before_*")
    a = ap.parse_args()
    if a.warmup_updates % 10 or a.updates % 10 or a.bf16_updates % 10:
        ap.error("--warmup-updates, --updates and --bf16-updates must be multiples of 10 (the log interval)")
    machine = mb.machine_state()
    data, work = a.data.resolve(), a.work.resolve()
    use_fairseq = any(x.startswith("fairseq") for x in a.systems) or a.only == "decode"
    prep = mb.prepare(data, work, venv=a.fairseq_venv if use_fairseq else None, threads=a.threads)
    import platform
    import torch
    report: dict = {"benchmark": "bench_fairseq_peer", "command": [sys.executable, *sys.argv],
                    "threads": a.threads, "torch": torch.__version__,
                    "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.processor() or
                    platform.machine(), "data": str(data), "work": str(work), "machine_at_start": machine}
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                report["cpu"] = line.split(":", 1)[1].strip()
                break
    with open("/proc/cpuinfo") as f:
        flags = next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), [])
    report["cpu_bf16_native"] = any(x in flags for x in ("avx512_bf16", "amx_bf16"))
    report["onednn_bf16_supported"] = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())

    if a.only in ("all", "train"):
        src, tgt = pair_lengths(prep)
        flops = flops_per_target_token(src, tgt, vocab=8000)
        report["flops"] = flops
        peaks = {"fp32": [matmul_peak(a.threads)], "bf16": []}
        if any(_amp(s) != "none" for s in a.systems):
            peaks["bf16"].append(matmul_peak(a.threads, "bfloat16", min_reps=1))
        systems = [s if b == TOKENS else f"{s}:{b}" for b in a.budgets for s in a.systems]
        if a.before_src:
            systems += [s + BEFORE_SUFFIX for s in list(systems) if s.startswith("xlpe")]
        runs: dict[str, list] = {s: [] for s in systems}
        for r in range(a.rounds):
            for s in systems:
                if _amp(s) != "none" and r >= a.bf16_rounds:
                    continue
                res = train_once(s, a, data, prep, work / "bench" / f"{s}.r{r}")
                res["round"] = r
                runs[s].append(res)
                print(json.dumps({"progress": s, **res}), file=sys.stderr, flush=True)
        peaks["fp32"].append(matmul_peak(a.threads))
        peak32 = max(p["peak_gflops"] for p in peaks["fp32"])
        report["matmul_peak"] = {"fp32_gflops": peak32, "fp32_runs": peaks["fp32"]}
        if peaks["bf16"]:
            report["matmul_peak"]["bf16_gflops"] = max(p["peak_gflops"] for p in peaks["bf16"])
            report["matmul_peak"]["bf16_runs"] = peaks["bf16"]
        fpt = flops["train_flops_per_target_token"]
        train = {}
        for s, rs in runs.items():
            tps = statistics.median(x["tokens_per_s"] for x in rs)
            e = {"tokens_per_s_median": round(tps, 1), "tokens_per_s_runs": [x["tokens_per_s"] for x in rs],
                 "s_per_update_median": round(statistics.median(x["s_per_update"] for x in rs), 3),
                 "model_gflops_per_s": round(tps * fpt / 1e9, 2),
                 "mfu_vs_fp32_peak": round(tps * fpt / 1e9 / peak32, 3),
                 "peak_rss_mb_max": max(x["peak_rss_mb"] for x in rs),
                 "peak_tree_rss_mb_max": max(x["peak_tree_rss_mb"] for x in rs), "runs": rs}
            if _amp(s) != "none" and peaks["bf16"]:
                e["mfu_vs_bf16_peak"] = round(tps * fpt / 1e9 / report["matmul_peak"]["bf16_gflops"], 3)
            train[s] = e
        for peer in ("fairseq", "fairseq-ddp"):
            if peer in train:
                fs = train[peer]["tokens_per_s_median"]
                for s in train:
                    if not s.startswith("fairseq"):
                        train[s]["over_" + peer.replace("-", "_")] = round(train[s]["tokens_per_s_median"] / fs, 3)
                        same = peer + s[s.index(":"):].split("@")[0] if ":" in s else None
                        if same in train:          # against the peer at the same token budget
                            train[s]["over_" + peer.replace("-", "_") + "_same_budget"] = round(
                                train[s]["tokens_per_s_median"] / train[same]["tokens_per_s_median"], 3)
        if "xlpe-ape" in train and "xlpe-rpe" in train:
            train["rpe_cost_over_ape"] = round(train["xlpe-ape"]["tokens_per_s_median"]
                                               / train["xlpe-rpe"]["tokens_per_s_median"] - 1, 3)
        for s in list(train):
            if s.endswith(BEFORE_SUFFIX) and s[:-len(BEFORE_SUFFIX)] in train:
                train[s[:-len(BEFORE_SUFFIX)]]["over_before"] = round(
                    train[s[:-len(BEFORE_SUFFIX)]]["tokens_per_s_median"] / train[s]["tokens_per_s_median"], 3)
        if "xlpe-ape" in train and "xlpe-ape-bf16" in train:
            train["bf16_speedup_over_fp32"] = round(train["xlpe-ape-bf16"]["tokens_per_s_median"]
                                                    / train["xlpe-ape"]["tokens_per_s_median"], 3)
        if "xlpe-ape-bf16" in train and "xlpe-ape-bf16pure" in train:
            train["bf16pure_over_bf16_autocast"] = round(train["xlpe-ape-bf16pure"]["tokens_per_s_median"]
                                                         / train["xlpe-ape-bf16"]["tokens_per_s_median"], 3)
        report["train"] = {"warmup_updates": a.warmup_updates, "timed_updates": a.updates, "rounds": a.rounds,
                           "budgets": a.budgets,
                           "bf16_timed_updates": a.bf16_updates, "bf16_rounds": min(a.bf16_rounds, a.rounds),
                           "fairseq_num_workers": a.fairseq_num_workers, **train}
    if a.only in ("all", "decode"):
        report["decode"] = decode_bench(a, data, prep, work)
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
