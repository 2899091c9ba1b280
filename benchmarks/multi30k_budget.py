"""Multi30k En->De at an equal training-time budget: train xlpe or fairseq, then sacreBLEU on the test sets.

One command trains one system for ``--minutes`` of training time on ``--threads`` CPU threads, decodes val,
test_2016_flickr and test_2017_flickr with beam 5 and prints one JSON object with sacreBLEU (cased, default
13a tokenizer, detokenised hypotheses against the raw references) at every time mark (default 20, 30 and the
final ``--minutes``). Settings are chosen on val and reported on the two test sets. xlpe's optimisation can
differ from the peer's recipe below (``--lr``, ``--warmup``, ``--schedule linear_time``, ``--max-tokens``,
``--dropout``; each changes the run folder's name)::

    # xlpe, `small` preset with sinusoidal absolute PE (`ape`), fp32, 40 minutes on 2 threads
    python benchmarks/multi30k_budget.py --system xlpe --pe ape --amp none --minutes 40 --threads 2 \\
        --data ../shared/data/multi30k/raw --work ../runs/multi30k
    # xlpe, bf16, a 20-minute budget with the learning rate decaying to 0 over it (one mark: --marks alone)
    python benchmarks/multi30k_budget.py --system xlpe --pe ape --amp bf16 --minutes 20 --marks --threads 2 \
        --schedule linear_time --lr 2e-3 --save-every 100 --average 5
    # the fairseq peer, same shape and optimiser (needs the venv described in bench_fairseq_peer.py)
    python benchmarks/multi30k_budget.py --system fairseq --minutes 40 --threads 2 \\
        --data ../shared/data/multi30k/raw --work ../runs/multi30k --fairseq-venv ../fairseq-venv

Every path is an argument; the defaults are relative to the repository root (``../shared/data/multi30k/raw``,
``../runs/multi30k``, ``../fairseq-venv``). Nothing is written into the repository.

The shared set-up (both systems see exactly the same subwords): a joint sentencepiece BPE of 8k pieces trained
by ``xlpe subword train`` on the English and German sides of Multi30k train (raw, cased, untokenised text);
every split encoded to pieces by ``xlpe subword encode``; for fairseq those pieces are binarised by
``fairseq-preprocess --joined-dictionary``. fairseq's hypotheses (pieces) are detokenised with the same
sentencepiece model, so both systems are scored by the same code (``xlpe.evaluate.bleu.corpus_scores``).

The model (issue: "7.5M parameters"): d=256, FFN 1024, 4 heads, 3+3 layers, post-norm, ReLU, one embedding
table shared by encoder, decoder and output projection; dropout 0.3 (no attention/activation dropout); label
smoothing 0.1; Adam (0.9, 0.98), eps 1e-8, no weight decay, no clipping; lr 1e-3, inverse-sqrt with 400
warm-up updates; 4096 tokens per batch (padding included, xlpe's and fairseq's definition alike); seed 1.

Resumable and time-marked: training runs in segments that end at the marks (e.g. 20, 30, 40 minutes of
cumulative training time: xlpe's ``--max-time-minutes`` and fairseq's ``--stop-time-hours`` both count the time
of earlier runs of the same directory); each segment resumes from the previous one's last checkpoint (xlpe:
``--resume auto``, an exact continuation; fairseq: ``checkpoint_last.pt``, its default ``--restore-file``) and its
final checkpoint is kept as ``mark_<M>min.pt``. Rerunning the command skips finished segments and decodes, so an
interrupted run continues, and a finished one only prints its JSON again. A larger ``--minutes`` later extends
the same run. Decoding: ``xlpe translate`` / ``fairseq-generate`` (with ``--required-batch-size-multiple 1``
and ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1``, see bench_fairseq_peer.py), beam 5, length penalty ``--lenpen``
(default 1.0 for both, fairseq's default), each tool's own maximum-length rule (xlpe 1.2*S+10, fairseq 200).
The checkpoint scored at a mark is the last one (not the best on the dev set) for both systems.

Checkpoint averaging (``--save-every S --average N``): both tools save every S updates (xlpe ``--save-every``,
fairseq ``--save-interval-updates``, which also validates at each save, as fairseq does) and, at every mark, the
newest N checkpoints up to that mark are averaged (``xlpe average``; for fairseq the same mean of the "model"
weights in its venv) and scored beside the last checkpoint (results keyed ``"<M>.avg<N>"``). Early in training,
consecutive checkpoints differ by about one BLEU point (xlpe, 40-minute run of 2026-11-22 afternoon: 32.79 at
update 1000, 31.74 at update 1060; fairseq's 30-minute checkpoint of the evening run: 20.52 with outputs 1.41x
the reference length, its 5-checkpoint average 28.29), so one last checkpoint is a noisy measurement.

Measured 2026-11-22 evening, both in the same hour (2 threads, fp32, ``--save-every 50 --average 5``;
test_2016 / test_2017 BLEU at 40 minutes)::

    xlpe    ape  1187 updates   last 33.61 / 25.16   avg5 33.95 / 24.87   peak RSS 1.62 GB
    fairseq      1127 updates   last 32.96 / 24.83   avg5 32.92 / 24.23   peak RSS 1.64 GB (2.34 GB with workers)
    xlpe    ape  bf16 autocast (--amp bf16), right after: 1666 updates (1.40x fp32)
                        last 36.07 / 27.40   avg5 36.05 / 28.23   peak RSS 1.92 GB

The JSON reports per mark: updates done, BLEU/chrF on both test sets, the sacreBLEU signature; per segment the
wall time and the peak RSS of the training process (own: ``ru_maxrss``; tree: the largest sum over the
process and its children, e.g. fairseq's data-loader worker). Never run as a test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "multi30k" / "raw"
DEFAULT_WORK = REPO.parent / "runs" / "multi30k"
DEFAULT_VENV = REPO.parent / "fairseq-venv"
SPLITS = ("train", "val", "test_2016_flickr", "test_2017_flickr")
TESTS = {"test_2016_flickr": "test", "test_2017_flickr": "test1"}     # our name -> fairseq's gen-subset
DEV = {"val": "valid"}          # scored too: settings are chosen on val, reported on the tests
SRC, TGT = "en", "de"

#: the `small` shape and optimiser of the issue, in each tool's words
XLPE_MODEL = ["--preset", "small", "--share-embeddings", "--tie-output", "--dropout", "0.3"]
XLPE_OPTIM = ["--lr", "1e-3", "--warmup", "400", "--betas", "0.9", "0.98", "--adam-eps", "1e-8",
              "--label-smoothing", "0.1", "--max-tokens", "4096", "--seed", "1"]
FAIRSEQ_MODEL = ["--arch", "transformer", "--share-all-embeddings",
                 "--encoder-layers", "3", "--decoder-layers", "3",
                 "--encoder-embed-dim", "256", "--decoder-embed-dim", "256",
                 "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
                 "--encoder-attention-heads", "4", "--decoder-attention-heads", "4",
                 "--dropout", "0.3", "--attention-dropout", "0.0", "--activation-dropout", "0.0"]
FAIRSEQ_OPTIM = ["--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
                 "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--adam-eps", "1e-8",
                 "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "400",
                 "--max-tokens", "4096", "--seed", "1", "--clip-norm", "0.0", "--weight-decay", "0.0"]


# ======================================================================================================
# processes: wall time and peak memory
# ======================================================================================================

def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        ppid = int(st[st.rfind(")") + 2:].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree_rss_kb(root: int) -> int:
    """Summed resident set size (KiB) of ``root`` and all its descendants (shared pages counted per process)."""
    kids = _children_map()
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(kids.get(pid, []))
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
        except OSError:
            pass
    return total


def run(cmd: list[str], *, log: Path | None = None, env: dict | None = None, cwd: str | None = None,
        sample_every: float = 0.5, check: bool = True) -> dict:
    """Run ``cmd`` (stdout+stderr to ``log`` or captured); returns ``{rc, wall_s, peak_rss_mb, peak_tree_rss_mb,
    output}``. ``peak_rss_mb`` is the child's own ``ru_maxrss`` (largest of it and its waited-for children);
    ``peak_tree_rss_mb`` the largest summed RSS of its process tree, sampled every ``sample_every`` s."""
    full_env = {**os.environ, **(env or {})}
    out = open(log, "w") if log is not None else subprocess.PIPE
    t = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=cwd,
                         text=True)
    captured: list[str] = []
    peak_tree = 0
    if log is None:                       # read in a thread so the pipe never fills
        import threading
        th = threading.Thread(target=lambda: captured.append(p.stdout.read()), daemon=True)
        th.start()
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        peak_tree = max(peak_tree, tree_rss_kb(p.pid))
        time.sleep(sample_every)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    if log is None:
        th.join()
    else:
        out.close()
    text = "".join(captured) if log is None else Path(log).read_text(errors="replace")
    res = {"rc": p.returncode, "wall_s": round(wall, 2), "peak_rss_mb": round(ru.ru_maxrss / 1024, 1),
           "peak_tree_rss_mb": round(max(peak_tree, ru.ru_maxrss) / 1024, 1), "output": text}
    if check and p.returncode != 0:
        tail = "\n".join(text.splitlines()[-30:])
        raise SystemExit(f"command failed (exit {p.returncode}): {' '.join(map(str, cmd))}\n{tail}")
    return res


def machine_state() -> dict:
    """What else the machine was doing when a timed run started: a timed run is only meaningful on an otherwise
    idle machine. ``nice`` does not protect it where the kernel groups processes by session
    (``sched_autogroup_enabled`` = 1): a nice-19 job started from another shell then still takes a full core.
    Another runnable process also stalls the threads of a 2-thread OpenMP run at every barrier."""
    state: dict = {"loadavg_1_5_15": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}
    try:
        state["sched_autogroup_enabled"] = int(Path("/proc/sys/kernel/sched_autogroup_enabled").read_text())
    except (OSError, ValueError):
        pass
    if state["loadavg_1_5_15"][0] > 0.5:
        print(f"warning: load average {state['loadavg_1_5_15'][0]} at the start of a timed run: other work on this "
              "machine will lower the measured speed", file=sys.stderr)
    return state


def xlpe_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "xlpe.cli", *map(str, args)]


def fairseq_bin(venv: Path, tool: str) -> Path:
    p = Path(venv) / "bin" / tool
    if not p.exists():
        raise SystemExit(f"{p} not found: create the fairseq venv first (see benchmarks/bench_fairseq_peer.py)")
    return p


def fairseq_env(threads: int) -> dict:
    return {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads),
            "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "PYTHONWARNINGS": "ignore"}


# ======================================================================================================
# data: joint BPE, pieces, fairseq binarisation (cached under WORK/prep)
# ======================================================================================================

def prepare(data: Path, work: Path, *, vocab: int = 8000, venv: Path | None = None, threads: int = 2) -> Path:
    """``WORK/prep`` with ``spm.model``, ``pieces/<split>.<lang>`` and (with ``venv``) ``fairseq-bin/``."""
    prep = work / "prep"
    pieces = prep / "pieces"
    pieces.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in (SRC, TGT):
            if not (data / f"{split}.{lang}").is_file():
                raise SystemExit(f"{data / f'{split}.{lang}'} not found (--data should be the Multi30k raw/ folder)")
    spm = prep / "spm.model"
    if not spm.exists():
        run(xlpe_cmd("subword", "train", "--input", data / f"train.{SRC}", data / f"train.{TGT}",
                     "--model", spm, "--vocab-size", vocab), log=prep / "spm.log")
    for split in SPLITS:
        for lang in (SRC, TGT):
            p = pieces / f"{split}.{lang}"
            if not p.exists():
                run(xlpe_cmd("subword", "encode", "--model", spm, "--input", data / f"{split}.{lang}",
                             "--output", p), log=prep / "encode.log")
    if venv is not None:
        bin_ = prep / "fairseq-bin"
        if not (bin_ / "done").exists():
            shutil.rmtree(bin_, ignore_errors=True)
            run([fairseq_bin(venv, "fairseq-preprocess"), "--source-lang", SRC, "--target-lang", TGT,
                 "--trainpref", pieces / "train", "--validpref", pieces / "val",
                 "--testpref", f"{pieces / 'test_2016_flickr'},{pieces / 'test_2017_flickr'}",
                 "--destdir", bin_, "--joined-dictionary", "--workers", str(threads)],
                log=prep / "fairseq-preprocess.log", env=fairseq_env(threads))
            (bin_ / "done").write_text("ok\n")
    return prep


# ======================================================================================================
# training commands
# ======================================================================================================

def xlpe_train_cmd(data: Path, prep: Path, out: Path, *, pe: list[str], amp: str, threads: int,
                   init: str = "fairseq", batch_multiple: int = 1, minutes: float | None = None,
                   max_updates: int | None = None, dev: bool = True,
                   log_every: int = 100, save_every: int = 1000, validate_every: int = 1000,
                   keep_last: int = 5, optim: dict | None = None) -> list[str]:
    """``optim`` overrides options of XLPE_OPTIM / adds others (``{"--lr": "2e-3", "--schedule": "linear_time"}``)."""
    opts = list(XLPE_OPTIM)
    for flag, value in (optim or {}).items():
        if flag in opts:
            opts[opts.index(flag) + 1] = str(value)
        else:
            opts += [flag, str(value)]
    model = list(XLPE_MODEL)
    if "--dropout" in opts:                       # a model option: replace the peer's 0.3
        i = opts.index("--dropout")
        model[model.index("--dropout") + 1] = opts[i + 1]
        del opts[i:i + 2]
    cmd = xlpe_cmd("train", "--train-src", data / f"train.{SRC}", "--train-tgt", data / f"train.{TGT}",
                   "--subword-model", prep / "spm.model", *model, "--pe", *pe, *opts,
                   "--init", init, "--batch-multiple", batch_multiple,
                   "--amp", amp, "--threads", threads, "--device", "cpu", "--no-progress", "--out", out,
                   "--log-every", log_every, "--save-every", save_every, "--validate-every", validate_every,
                   "--keep-last", keep_last)
    if dev:
        cmd += ["--dev-src", str(data / f"val.{SRC}"), "--dev-tgt", str(data / f"val.{TGT}")]
    if minutes:
        cmd += ["--max-time-minutes", str(minutes)]
    if max_updates:
        cmd += ["--max-updates", str(max_updates)]
    return cmd


def fairseq_train_cmd(venv: Path, prep: Path, out: Path, *, threads: int, minutes: float | None = None,
                      max_updates: int | None = None, log_every: int = 100, num_workers: int = 1,
                      validate: bool = True, save: bool = True, save_every: int = 0,
                      keep_last: int = 10) -> list[str]:
    cmd = [str(fairseq_bin(venv, "fairseq-train")), str(prep / "fairseq-bin"), "--task", "translation",
           "--source-lang", SRC, "--target-lang", TGT, *FAIRSEQ_MODEL, *FAIRSEQ_OPTIM,
           "--cpu", "--save-dir", str(out), "--no-epoch-checkpoints", "--log-format", "json",
           "--log-interval", str(log_every), "--num-workers", str(num_workers), "--no-progress-bar"]
    if minutes:
        cmd += ["--stop-time-hours", repr(minutes / 60.0)]
    if max_updates:
        cmd += ["--max-update", str(max_updates)]
    if save_every:
        cmd += ["--save-interval-updates", str(save_every), "--keep-interval-updates", str(keep_last)]
    if not validate:
        cmd += ["--disable-validation"]
    if not save:
        cmd += ["--no-save"]
    return cmd


def fairseq_updates(log_text: str) -> int | None:
    """The last ``num_updates`` fairseq logged."""
    hits = re.findall(r'num_updates": "?(\d+)', log_text)     # also valid_num_updates, train_num_updates
    return int(hits[-1]) if hits else None


# ======================================================================================================
# decoding and scoring
# ======================================================================================================

def read_lines(path: Path) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [l.rstrip("\n") for l in f]


def _max_len(a: float | None, b: float | None) -> list:
    return ([] if a is None else ["--max-len-a", f"{a:g}"]) + ([] if b is None else ["--max-len-b", f"{b:g}"])


def xlpe_decode(ckpt: Path, src: Path, hyp: Path, *, beam: int = 5, greedy: bool = False, batch_size: int = 64,
                lenpen: float = 1.0, threads: int = 2, max_len_a: float | None = None,
                max_len_b: float | None = None) -> dict:
    cmd = xlpe_cmd("translate", "--checkpoint", ckpt, "--input", src, "--output", hyp, "--beam", beam,
                   "--lenpen", lenpen, "--batch-size", batch_size, "--threads", threads, "--device", "cpu",
                   *_max_len(max_len_a, max_len_b))
    if greedy:
        cmd.append("--greedy")
    r = run(cmd, log=hyp.with_suffix(hyp.suffix + ".log"))
    return {"wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"]}


def fairseq_decode(venv: Path, prep: Path, ckpt: Path, subset: str, hyp: Path, *, beam: int = 5,
                   batch_size: int = 64, lenpen: float = 1.0, threads: int = 2, expect: int | None = None,
                   max_len_a: float | None = None, max_len_b: float | None = None,
                   bin_dir: Path | None = None, env: dict | None = None) -> dict:
    """fairseq-generate on the binarised ``subset`` (of ``bin_dir``, default ``prep/fairseq-bin``); hypotheses
    (pieces) detokenised with the shared sentencepiece model and written in the original order. Returns wall time
    and fairseq's own timing. ``env``: extra environment variables (e.g. glibc's ``MALLOC_*``)."""
    from xlpe.data.subword import SubwordModel
    log = hyp.with_suffix(hyp.suffix + ".log")
    cmd = [fairseq_bin(venv, "fairseq-generate"), bin_dir or prep / "fairseq-bin", "--task", "translation",
           "--source-lang", SRC, "--target-lang", TGT, "--path", ckpt, "--gen-subset", subset,
           "--beam", beam, "--nbest", 1, "--lenpen", lenpen, "--batch-size", batch_size,
           "--required-batch-size-multiple", 1, "--cpu", "--num-workers", 0, *_max_len(max_len_a, max_len_b)]
    r = run(cmd, log=log, env={**fairseq_env(threads), **(env or {})})
    hyps: dict[int, str] = {}
    for line in r["output"].splitlines():
        if line.startswith("H-"):
            head, _score, *rest = line.split("\t")
            hyps[int(head[2:])] = rest[0] if rest else ""
    n = expect if expect is not None else (max(hyps) + 1 if hyps else 0)
    missing = [i for i in range(n) if i not in hyps]
    if missing:
        raise SystemExit(f"fairseq-generate returned no hypothesis for {len(missing)} of {n} sentences "
                         f"(e.g. {missing[:5]}); see {log}")
    sw = SubwordModel.load(prep / "spm.model")
    tmp = hyp.with_suffix(hyp.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for i in range(n):
            f.write(sw.decode_pieces(hyps[i].split()).replace("\n", " ") + "\n")
    os.replace(tmp, hyp)
    m = re.search(r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s \(([\d.]+) sentences/s",
                  r["output"])
    own = {}
    if m:
        own = {"sentences": int(m.group(1).replace(",", "")), "tokens": int(m.group(2).replace(",", "")),
               "generate_s": float(m.group(3)), "sentences_per_s": float(m.group(4))}
    return {"wall_s": r["wall_s"], "peak_rss_mb": r["peak_rss_mb"], "fairseq_reported": own}


def score(hyp: Path, ref: Path) -> dict:
    from xlpe.evaluate.bleu import corpus_scores
    h, r = read_lines(hyp), read_lines(ref)
    sc = corpus_scores(h, r, metrics=("bleu", "chrf"), tokenize="13a")
    return {"bleu": round(sc["bleu"].score, 2), "chrf": round(sc["chrf"].score, 2),
            "bleu_signature": sc["bleu"].signature, "lines": len(h)}


# ======================================================================================================
# the budget run
# ======================================================================================================

#: fairseq's own averaging (scripts/average_checkpoints.py is not part of the pip package): the mean of the
#: "model" entries, the rest of the newest checkpoint kept; run with the venv's python
FAIRSEQ_AVERAGE = """
import sys, torch
paths, dest = sys.argv[1:-1], sys.argv[-1]
states = [torch.load(p, map_location="cpu", weights_only=False) for p in paths]
avg = {k: sum(s["model"][k].double() for s in states).div(len(states)).to(v.dtype) if v.is_floating_point() else v
       for k, v in states[-1]["model"].items()}
out = states[-1]; out["model"] = avg; out["last_optimizer_state"] = None
torch.save(out, dest)
"""


def mark_average(a, out: Path, key: str, updates: int) -> Path | None:
    """``mark_<M>min.avg<N>.pt``: the average of the mark's final checkpoint ``mark_<M>min.pt`` and the ``N - 1``
    newest step checkpoints before it (xlpe: ``train/checkpoint_<step>.pt``, averaged by ``xlpe average``;
    fairseq: ``train/checkpoint_<epoch>_<step>.pt``), written right after the segment ends, before later
    segments prune them. None if too few are left."""
    n = a.average
    dest = out / f"mark_{key}min.avg{n}.pt"
    if dest.exists():
        return dest
    pat = re.compile(r"checkpoint_(\d+)\.pt$" if a.system == "xlpe" else r"checkpoint_\d+_(\d+)\.pt$")
    found = sorted((int(m.group(1)), p) for p in (out / "train").iterdir() if (m := pat.match(p.name)))
    # the segment's final state is mark_<M>min.pt (fairseq saves it only as checkpoint_last.pt)
    before = [p for step, p in found if step < updates]
    cks = (before[-(n - 1):] if n > 1 else []) + [out / f"mark_{key}min.pt"]
    if len(cks) < n:
        print(f"[mark {key}] only {len(cks)} checkpoints up to update {updates} are left; no average of {n}",
              file=sys.stderr)
        return None
    log = out / f"average_{key}min.log"
    if a.system == "xlpe":
        run(xlpe_cmd("average", "--checkpoints", *cks, "--output", dest), log=log)
    else:
        run([Path(a.fairseq_venv) / "bin" / "python", "-c", FAIRSEQ_AVERAGE, *cks, dest], log=log,
            env=fairseq_env(a.threads))
    return dest


def xlpe_optim(a) -> dict:
    """The optimisation settings that differ from XLPE_OPTIM's (flag -> value)."""
    base, flag = {}, None
    for tok in XLPE_OPTIM:             # a flag may take more than one value (--betas 0.9 0.98)
        if tok.startswith("--"):
            flag = tok
        else:
            base[flag] = tok if flag not in base else f"{base[flag]} {tok}"
    want = {"--lr": a.lr, "--warmup": a.warmup, "--max-tokens": a.max_tokens, "--schedule": a.schedule,
            "--dropout": a.dropout}
    base["--schedule"] = "inverse_sqrt"
    base["--dropout"] = XLPE_MODEL[XLPE_MODEL.index("--dropout") + 1]

    def same(k, v):
        return str(v) == base[k] if k == "--schedule" else float(v) == float(base[k])
    return {k: f"{v:g}" if isinstance(v, float) else str(v) for k, v in want.items()
            if v is not None and not same(k, v)}


def run_dir_name(a) -> str:
    if a.system == "xlpe":
        extra = "" if a.init == "xavier" else f"-{a.init}init"
        extra += "" if a.batch_multiple == 1 else f"-m{a.batch_multiple}"
        extra += "" if a.save_every == 1000 else f"-s{a.save_every}"
        extra += "".join(f"-{k.lstrip('-')}{v}" for k, v in xlpe_optim(a).items())
        return f"xlpe-{'+'.join(a.pe)}-{a.amp}-t{a.threads}{extra}"
    extra = "" if a.save_every == 1000 else f"-s{a.save_every}"
    return f"fairseq-t{a.threads}-w{a.fairseq_num_workers}{extra}"


def _fmt(m: float) -> str:
    return f"{m:g}"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", choices=("xlpe", "fairseq"), required=True)
    ap.add_argument("--pe", nargs="+", default=["ape"], help="xlpe source position encodings (ape | rpe | ...)")
    ap.add_argument("--amp", choices=("none", "bf16", "bf16-pure"), default="none",
                    help="xlpe precision: autocast bf16, or bf16-pure (bf16 weights, float32 masters); "
                         "fairseq: none only")
    ap.add_argument("--init", choices=("fairseq", "xavier"), default="fairseq",
                    help="xlpe weight initialisation (default: fairseq's, as the peer; xavier: OpenNMT/tensor2tensor)")
    ap.add_argument("--batch-multiple", type=int, default=1,
                    help="xlpe: round full batches to this many sentences (fairseq's peer uses 8)")
    ap.add_argument("--save-every", type=int, default=1000,
                    help="checkpoint every N updates (xlpe --save-every, fairseq --save-interval-updates; "
                         "xlpe default 1000, fairseq: end of epoch); needed by --average")
    ap.add_argument("--average", type=int, default=0,
                    help="also score, at every mark, the average of the last N checkpoints (0 = off)")
    ap.add_argument("--lr", type=float, default=None, help="xlpe peak learning rate (default 1e-3, the peer's)")
    ap.add_argument("--warmup", type=int, default=None, help="xlpe warm-up updates (default 400)")
    ap.add_argument("--schedule", choices=("inverse_sqrt", "linear_time"), default=None,
                    help="xlpe learning-rate schedule (default inverse_sqrt, the peer's; linear_time decays to 0 "
                         "over each segment's time budget, so use it with one mark: --marks with no value)")
    ap.add_argument("--max-tokens", type=int, default=None, help="xlpe batch token budget (default 4096)")
    ap.add_argument("--dropout", type=float, default=None, help="xlpe dropout (default 0.3, the peer's)")
    ap.add_argument("--minutes", type=float, default=40.0, help="training-time budget (minutes)")
    ap.add_argument("--marks", type=float, nargs="*", default=[20.0, 30.0],
                    help="earlier time marks (minutes) whose checkpoints are also scored")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads for training and decoding")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="Multi30k raw/ folder (<split>.en/.de)")
    ap.add_argument("--work", type=Path, default=DEFAULT_WORK, help="working folder (prepared data, runs)")
    ap.add_argument("--fairseq-venv", type=Path, default=DEFAULT_VENV, help="venv with fairseq-fixed 0.12.3.1")
    ap.add_argument("--fairseq-num-workers", type=int, default=1, help="fairseq data-loader workers (its default 1)")
    ap.add_argument("--vocab-size", type=int, default=8000, help="joint BPE size")
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--lenpen", type=float, default=1.0, help="length penalty for both systems (fairseq's default)")
    ap.add_argument("--batch-size", type=int, default=64, help="decoding batch size (sentences)")
    ap.add_argument("--max-len-a", type=float, default=None,
                    help="output length limit a*S+b for both systems (default: each tool's own, xlpe 1.2, fairseq 0)")
    ap.add_argument("--max-len-b", type=float, default=None, help="(default: xlpe 10, fairseq 200)")
    ap.add_argument("--no-decode", action="store_true", help="train only")
    a = ap.parse_args(argv)
    if a.system == "fairseq" and a.amp != "none":
        ap.error("--amp bf16 / bf16-pure are measured for xlpe only")
    if a.system == "fairseq" and any(v is not None for v in (a.lr, a.warmup, a.schedule, a.max_tokens, a.dropout)):
        ap.error("--lr/--warmup/--schedule/--max-tokens/--dropout change xlpe's settings only")
    machine = machine_state()
    data, work = a.data.resolve(), a.work.resolve()
    prep = prepare(data, work, vocab=a.vocab_size, venv=a.fairseq_venv if a.system == "fairseq" else None,
                   threads=a.threads)
    out = work / "budget" / run_dir_name(a)
    out.mkdir(parents=True, exist_ok=True)
    state_path = out / "segments.json"
    segments: dict = json.loads(state_path.read_text()) if state_path.exists() else {}
    marks = sorted({m for m in a.marks if 0 < m < a.minutes} | {a.minutes})

    # -- training, one segment per mark ------------------------------------------------------------------
    for m in marks:
        key = _fmt(m)
        mark_ck = out / f"mark_{key}min.pt"
        if key in segments and mark_ck.exists():
            continue
        seg_log = out / f"train_{key}min.log"
        if a.system == "xlpe":
            train_out = out / "train"
            r = run(xlpe_train_cmd(data, prep, train_out, pe=a.pe, amp=a.amp, threads=a.threads, init=a.init,
                                   batch_multiple=a.batch_multiple, minutes=m, save_every=a.save_every,
                                   keep_last=max(10, a.average), optim=xlpe_optim(a)),
                    log=seg_log)
            last = json.loads([l for l in r["output"].splitlines() if l.startswith("{")][-1])
            ck, updates, reason = Path(last["checkpoint"]), int(last["step"]), last["stop_reason"]
        else:
            train_out = out / "train"
            r = run(fairseq_train_cmd(a.fairseq_venv, prep, train_out, threads=a.threads, minutes=m,
                                      num_workers=a.fairseq_num_workers,
                                      save_every=a.save_every if a.save_every != 1000 else 0,
                                      keep_last=max(10, a.average)), log=seg_log, env=fairseq_env(a.threads))
            ck, updates, reason = train_out / "checkpoint_last.pt", fairseq_updates(r["output"]), "stop_time"
        shutil.copy2(ck, mark_ck)
        if a.average:
            mark_average(a, out, key, updates)
        segments[key] = {"minutes": m, "updates": updates, "stop_reason": reason, "segment_wall_s": r["wall_s"],
                         "peak_rss_mb": r["peak_rss_mb"], "peak_tree_rss_mb": r["peak_tree_rss_mb"],
                         "log": str(seg_log)}
        state_path.write_text(json.dumps(segments, indent=1))

    # -- decoding and scores ---------------------------------------------------------------------------
    results: dict = {}
    if not a.no_decode:
        todo = [(_fmt(m), "", out / f"mark_{_fmt(m)}min.pt") for m in marks]
        if a.average:
            todo += [(_fmt(m), f".avg{a.average}", out / f"mark_{_fmt(m)}min.avg{a.average}.pt") for m in marks]
        for key, tag, ck in todo:
            if not ck.exists():
                continue
            res = results.setdefault(key + tag, {"updates": segments[key]["updates"]})
            if tag:
                res["averaged_last"] = a.average
            for test, subset in {**DEV, **TESTS}.items():
                ml = "" if a.max_len_a is None and a.max_len_b is None else f".ml{a.max_len_a}-{a.max_len_b}"
                hyp = out / f"hyp_{key}min{tag}.{test}.beam{a.beam}.lp{a.lenpen:g}{ml}.{TGT}"
                timing_path = hyp.with_suffix(hyp.suffix + ".json")
                if not hyp.exists() or not timing_path.exists():
                    if a.system == "xlpe":
                        t = xlpe_decode(ck, data / f"{test}.{SRC}", hyp, beam=a.beam, lenpen=a.lenpen,
                                        batch_size=a.batch_size, threads=a.threads, max_len_a=a.max_len_a,
                                        max_len_b=a.max_len_b)
                    else:
                        t = fairseq_decode(a.fairseq_venv, prep, ck, subset, hyp, beam=a.beam, lenpen=a.lenpen,
                                           batch_size=a.batch_size, threads=a.threads,
                                           expect=len(read_lines(data / f"{test}.{TGT}")),
                                           max_len_a=a.max_len_a, max_len_b=a.max_len_b)
                    timing_path.write_text(json.dumps(t))
                res[test] = {**score(hyp, data / f"{test}.{TGT}"), "decode": json.loads(timing_path.read_text()),
                             "hyp": str(hyp)}

    report = {"benchmark": "multi30k_budget", "system": a.system,
              "pe": a.pe if a.system == "xlpe" else "sinusoidal (fairseq transformer)", "amp": a.amp,
              "minutes": a.minutes, "threads": a.threads, "machine_at_start": machine, "data": str(data),
              "work": str(work), "run_dir": str(out),
              "beam": a.beam, "lenpen": a.lenpen, "max_len_a": a.max_len_a, "max_len_b": a.max_len_b,
              "command": [sys.executable, *sys.argv] if argv is None else [sys.executable, __file__, *argv],
              "peak_rss_mb": max(s["peak_rss_mb"] for s in segments.values()),
              "peak_tree_rss_mb": max(s["peak_tree_rss_mb"] for s in segments.values()),
              "segments": [segments[_fmt(m)] for m in marks], "scores": results}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
