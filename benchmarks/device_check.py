"""One command for whatever device is present: train Multi30k `small`, decode test_2016, print one JSON object.

It trains the `small` model of the fairseq peer recipe (``multi30k_budget.py``: d=256, 3+3 layers, shared
embeddings, dropout 0.3, Adam with inverse-sqrt warm-up, 4096 tokens per batch) with ``xlpe train`` on the device
for ``--minutes`` of training time or ``--updates`` updates, decodes the first ``--sentences`` lines of
test_2016_flickr with beam ``--beam`` (weights in ``--dtype``) and prints the device, its policy
(:mod:`xlpe.nn.device`: which of xlpe's CPU choices it takes), the training target tokens/s (after ``--warm``
updates, as ``bench_fairseq_peer.py`` counts them), the decoding sentences/s and output tokens/s (the outputs'
subword pieces plus EOS, decoding alone: the model is loaded before the clock starts), sacreBLEU on those sentences,
and the peak memory: the process's peak RSS after training and at the end, and on a GPU the peak of allocated device
memory in each phase. ``--amp auto`` trains in bf16 where the device has it in hardware (a GPU with bf16, a CPU with
AVX512-BF16 or AMX), fp16 with loss scaling on a GPU without bf16, float32 otherwise. When the fairseq venv exists
(``--fairseq-venv``), fairseq trains for the same updates and decodes the same sentences beside it (``"fairseq"`` in
the JSON; ``--no-fairseq`` to skip; its decoding runs on the CPU, as ``multi30k_budget.py`` runs it; how to build
the venv: ``bench_fairseq_peer.py``).

Examples (from the repository root; data from ``../shared/data/multi30k/raw``, work files in
``../runs/device-check``, nothing written into the repository)::

    python benchmarks/device_check.py --minutes 20                 # on a lent GPU: the whole check
    python benchmarks/device_check.py --updates 2 --sentences 4 --lines 300 --vocab 400 --max-tokens 256

The second is what ``tests/test_device_check.py`` runs on the CPU (a few updates, a handful of sentences, the
first 300 lines of every split and a small subword model) so that the script cannot rot; its BLEU means nothing.
The timings of one run depend on what else the machine is doing: compare runs made on an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import resource
import shutil
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_fairseq_peer as peer  # noqa: E402
import multi30k_budget as mb  # noqa: E402

from xlpe.cli import main as xlpe_main  # noqa: E402
from xlpe.infer.translate import translate_lines  # noqa: E402
from xlpe.nn.checkpoint import load_model  # noqa: E402
from xlpe.runtime import device_policy, host, native_bf16, resolve_device  # noqa: E402

DEFAULT_WORK = mb.REPO.parent / "runs" / "device-check"
TEST = "test_2016_flickr"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (a GPU when there is one)")
    budget = p.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=None, help="training time budget (default: 20)")
    budget.add_argument("--updates", type=int, default=None, help="train this many updates instead")
    p.add_argument("--amp", default="auto", choices=("auto", "none", "bf16", "fp16"), help="training precision")
    p.add_argument("--sentences", type=int, default=0, help="decode the first N test_2016 lines (0: all 1,000)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=64, help="sentences per decoding batch")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="weight type while decoding (float16: GPU only)")
    p.add_argument("--max-tokens", type=int, default=4096, help="tokens per training batch (the recipe's 4096)")
    p.add_argument("--warm", type=int, default=None, help="updates left out of the tokens/s (default: a tenth)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--lines", type=int, default=0, help="use the first N lines of every split (0: all)")
    p.add_argument("--vocab", type=int, default=8000, help="joint subword vocabulary (the recipe's 8000)")
    p.add_argument("--data", type=Path, default=mb.DEFAULT_DATA, help="Multi30k's raw/ folder")
    p.add_argument("--work", type=Path, default=DEFAULT_WORK, help="work folder (subwords cached, runs replaced)")
    p.add_argument("--fairseq-venv", type=Path, default=mb.DEFAULT_VENV)
    p.add_argument("--no-fairseq", action="store_true", help="do not run fairseq even when its venv exists")
    a = p.parse_args(argv)
    if a.minutes is None and a.updates is None:
        a.minutes = 20.0
    return a


def choose_amp(amp: str, device: torch.device) -> str:
    """``--amp auto``: bf16 where the device has it in hardware, else fp16 on a GPU, else float32."""
    if amp != "auto":
        return amp
    if native_bf16(device):
        return "bf16"
    return "fp16" if device.type == "cuda" else "none"


def subset(data: Path, work: Path, lines: int) -> Path:
    """``data`` itself, or (``lines`` > 0) a folder under ``work`` with the first ``lines`` lines of each split."""
    if not lines:
        return data
    out = work / f"data-{lines}"
    out.mkdir(parents=True, exist_ok=True)
    for split in mb.SPLITS:
        for lang in (mb.SRC, mb.TGT):
            (out / f"{split}.{lang}").write_text("".join(f"{x}\n" for x in mb.read_lines(data / f"{split}.{lang}")
                                                         [:lines]), encoding="utf-8")
    return out


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def device_peak_mb(device: torch.device) -> float | None:
    """The peak of allocated memory on a GPU since the last reset, in MB (None on other devices)."""
    if device.type != "cuda":
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2 ** 20, 1)


def reset_device_peak(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def train_xlpe(a, data: Path, prep: Path, device: torch.device, amp: str) -> dict:
    """Train in this process with ``xlpe train`` (the peer recipe's options); tokens/s from its log."""
    out = a.work / "xlpe"
    shutil.rmtree(out, ignore_errors=True)
    cmd = mb.xlpe_train_cmd(data, prep, out, pe=["ape"], amp=amp, threads=a.threads, minutes=a.minutes,
                            max_updates=a.updates, dev=False, log_every=1, save_every=0, validate_every=0,
                            optim={"--max-tokens": a.max_tokens})
    cmd[cmd.index("--device") + 1] = str(device)
    reset_device_peak(device)
    t = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):             # stdout carries this script's JSON alone
        if xlpe_main(cmd[3:]) != 0:                          # cmd = [python, -m, xlpe.cli, train, ...]
            raise SystemExit("xlpe train failed")
    wall = time.perf_counter() - t
    with open(out / "train_log.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    updates = int(rows[-1]["step"])
    warm = a.warm if a.warm is not None else updates // 10
    window = peer._xlpe_window(out / "train_log.csv", warm)
    ckpt = sorted(out.glob("checkpoint_*.pt"), key=lambda p: int(p.stem.split("_")[1]))[-1]
    return {"updates": updates, "warm_updates_excluded": warm, "wall_s": round(wall, 2),
            "target_tokens_per_s": _round(window["tokens_per_s"]), "s_per_update": _round(window["s_per_update"]),
            "final_loss": float(rows[-1]["loss"]), "peak_rss_mb": peak_rss_mb(),
            "device_peak_mb": device_peak_mb(device), "checkpoint": str(ckpt)}


def decode_xlpe(a, ckpt: Path, src: list[str], hyp: Path, device: torch.device) -> dict:
    """Decode ``src`` with the checkpoint on ``device``: sentences/s and output pieces/s of decoding alone."""
    model, _, sw = load_model(ckpt, device=device)
    reset_device_peak(device)
    t = time.perf_counter()
    out = translate_lines(model, sw, src, beam=a.beam, lenpen=1.0, batch_size=a.batch_size, device=device,
                          dtype=a.dtype)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    wall = time.perf_counter() - t
    hyp.write_text("".join(f"{x}\n" for x in out), encoding="utf-8")
    tgt_sw = sw[1] if isinstance(sw, tuple) else sw
    pieces = sum(len(tgt_sw.encode(x.split()).pieces) + 1 for x in out)       # + EOS, as a decoder emits it
    return {"sentences": len(src), "dtype": a.dtype, "wall_s": round(wall, 3),
            "sentences_per_s": _round(len(src) / wall), "output_tokens_per_s": _round(pieces / wall),
            "peak_rss_mb": peak_rss_mb(), "device_peak_mb": device_peak_mb(device)}


def fairseq_beside(a, prep: Path, updates: int, n: int, device: torch.device) -> dict:
    """fairseq trained for the same updates on the same pieces (on the GPU when ``device`` is one), decoding the
    same first ``n`` test lines (its ``test`` subset, all of it, scored on the first ``n`` hypotheses). Its
    decoding runs on the CPU: ``multi30k_budget.fairseq_decode`` passes ``--cpu``."""
    out = a.work / "fairseq"
    shutil.rmtree(out, ignore_errors=True)
    cmd = mb.fairseq_train_cmd(a.fairseq_venv, prep, out, threads=a.threads or 2, max_updates=updates, log_every=1,
                               validate=False)
    cmd[cmd.index("--max-tokens") + 1] = str(a.max_tokens)
    if device.type == "cuda":
        cmd.remove("--cpu")
    r = mb.run(cmd, log=a.work / "fairseq-train.log", env=mb.fairseq_env(a.threads or 2))
    window = peer._fairseq_window(r["output"], max(updates // 10, 0))
    hyp = a.work / "fairseq.hyp"
    d = mb.fairseq_decode(a.fairseq_venv, prep, out / "checkpoint_last.pt", "test", hyp, beam=a.beam,
                          threads=a.threads or 2, batch_size=a.batch_size)
    hyp.write_text("".join(f"{x}\n" for x in mb.read_lines(hyp)[:n]), encoding="utf-8")
    ref = a.work / "ref.de"
    return {"train": {"target_tokens_per_s": _round(window["tokens_per_s"]), "peak_rss_mb": r["peak_rss_mb"],
                      "wall_s": r["wall_s"]},
            "decode": {"device": "cpu", "wall_s": d["wall_s"], "fairseq_reported": d["fairseq_reported"],
                       "sentences": n},
            "score": mb.score(hyp, ref)}


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def main(argv: list[str] | None = None) -> dict:
    a = parse_args(argv)
    device = resolve_device(a.device)
    amp = choose_amp(a.amp, device)
    a.work.mkdir(parents=True, exist_ok=True)
    data = subset(a.data, a.work, a.lines)
    venv = a.fairseq_venv if a.fairseq_venv.is_dir() and not a.no_fairseq else None
    prep = mb.prepare(data, a.work / f"{a.lines or 'all'}-lines-{a.vocab}", vocab=a.vocab, venv=venv,
                      threads=a.threads or 2)
    policy = device_policy(device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else host()["cpu"]
    res: dict = {"device": str(device), "device_name": name, "machine": mb.machine_state(),
                 "native_bf16": native_bf16(device), "amp": amp,
                 "policy": {k: v for k, v in vars(policy).items() if k != "device_type"},
                 "torch": torch.__version__, "budget": {"minutes": a.minutes, "updates": a.updates}}
    res["train"] = train_xlpe(a, data, prep, device, amp)
    src = mb.read_lines(data / f"{TEST}.{mb.SRC}")
    n = min(a.sentences or len(src), len(src))
    ref = a.work / "ref.de"
    ref.write_text("".join(f"{x}\n" for x in mb.read_lines(data / f"{TEST}.{mb.TGT}")[:n]), encoding="utf-8")
    hyp = a.work / "xlpe.hyp"
    res["decode"] = decode_xlpe(a, Path(res["train"]["checkpoint"]), src[:n], hyp, device)
    res["score"] = mb.score(hyp, ref)
    res["peak_rss_mb"] = peak_rss_mb()
    if venv is not None:
        res["fairseq"] = fairseq_beside(a, prep, res["train"]["updates"], n, device)
    else:
        res["fairseq"] = None if a.no_fairseq else f"no fairseq venv at {a.fairseq_venv}"
    print(json.dumps(res))
    return res


if __name__ == "__main__":
    main()
