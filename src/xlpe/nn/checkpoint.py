"""Checkpoints: one ``torch.save`` file holding everything needed to translate with a model or to resume
its training exactly.

Contents (a plain dict; ``torch.load(path, weights_only=True)`` reads it without xlpe)::

    format          "xlpe-checkpoint"
    version         1
    model           the model's state_dict
    model_config    TransformerConfig.to_dict()
    train_config    TrainConfig as a dict (None for a model-only file)
    subwords        {"src": {"path", "proto"}, "tgt": {...} or None (joint)}; the sentencepiece model bytes
                    travel with the checkpoint, so translation never depends on a file that moved
    optimizer, scheduler, sampler   their state_dicts (resumption)
    rng             python / numpy / torch (+ CUDA) generator states, one entry per DDP rank
    step, epoch, best, ...          counters and whatever the trainer adds

Files are written atomically (temp file + rename). Reading checks the zip container's CRCs first, so a
truncated or bit-flipped file gives a clear :class:`XlpeError` instead of silently wrong weights.
Training directories hold ``checkpoint_<step>.pt`` (the last ``keep_last`` are kept) and
``checkpoint_best.pt``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any, Iterable, Mapping

import torch

from xlpe.errors import XlpeError
from xlpe.data.subword import SubwordModel
from xlpe.io.atomic import atomic_write
from xlpe.io.process import stop_signals_deferred
from xlpe.nn.config import TransformerConfig
from xlpe.nn.transformer import build_model

log = logging.getLogger(__name__)

FORMAT = "xlpe-checkpoint"
VERSION = 1
_STEP_RE = re.compile(r"^checkpoint_(\d+)\.pt$")


# -- save / load --------------------------------------------------------------------------------------

def subword_entry(model) -> dict | None:
    """What a checkpoint stores of a :class:`xlpe.data.subword.SubwordModel` (path and model bytes)."""
    if model is None:
        return None
    return {"path": model.path, "proto": torch.frombuffer(bytearray(model.proto), dtype=torch.uint8)}


def save_checkpoint(path: str | os.PathLike, state: Mapping[str, Any]) -> None:
    """Write ``state`` (see the module docstring for the keys) atomically, adding format and version. A Ctrl-C or
    SIGTERM during the write lands once the file is whole: torch's zip writer, cut short, fails with a C++ error
    or aborts the process instead of stopping it."""
    payload = {"format": FORMAT, "version": VERSION, **state}
    with stop_signals_deferred(), atomic_write(path, "wb") as f:
        torch.save(payload, f)


def load_checkpoint(path: str | os.PathLike, map_location: str | torch.device = "cpu") -> dict:
    """Read and validate a checkpoint. Raises :class:`XlpeError` naming the file when it is missing,
    truncated, corrupted, not an xlpe checkpoint, or from a newer format version."""
    name = os.fspath(path)
    if not os.path.isfile(name):
        raise XlpeError(f"{name}: checkpoint not found")
    try:
        with zipfile.ZipFile(name) as z:
            bad = z.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise XlpeError(f"{name}: not a readable checkpoint: the file is truncated, corrupted or not a PyTorch "
                        f"checkpoint ({e})") from None
    except Exception as e:   # zlib errors, struct errors from a damaged directory
        raise XlpeError(f"{name}: checkpoint is corrupted ({type(e).__name__}: {e})") from None
    if bad is not None:
        raise XlpeError(f"{name}: checkpoint is corrupted (checksum mismatch in {bad!r}); "
                        "use an earlier checkpoint")
    try:
        ck = torch.load(name, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as e:
        what = re.search(r"GLOBAL (\S+)", str(e))
        raise XlpeError(f"{name}: checkpoint refused: it holds Python objects other than tensors and plain data"
                        f"{' (' + what.group(1) + ')' if what else ''}, and loading them could run code (xlpe "
                        "checkpoints never hold any)") from None
    except Exception as e:
        raise XlpeError(f"{name}: checkpoint cannot be loaded ({type(e).__name__}: "
                        f"{str(e).splitlines()[0][:200]})") from None
    if not isinstance(ck, dict) or ck.get("format") != FORMAT:
        raise XlpeError(f"{name}: not an xlpe checkpoint (expected a dict with format={FORMAT!r}; "
                        f"got {type(ck).__name__} "
                        f"{'with format=' + repr(ck.get('format')) if isinstance(ck, dict) else ''})")
    version = ck.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise XlpeError(f"{name}: checkpoint format version {version!r} is newer than this xlpe reads "
                        f"(up to {VERSION}); upgrade xlpe")
    for key in ("model", "model_config"):
        if key not in ck:
            raise XlpeError(f"{name}: checkpoint has no {key!r} entry")
    return ck


# -- training directories -------------------------------------------------------------------------------

def checkpoint_path(out_dir: str | os.PathLike, step: int) -> Path:
    return Path(out_dir) / f"checkpoint_{step}.pt"


def list_checkpoints(out_dir: str | os.PathLike) -> list[tuple[int, Path]]:
    """``(step, path)`` of the step checkpoints in ``out_dir``, oldest first."""
    d = Path(out_dir)
    if not d.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in d.iterdir() if (m := _STEP_RE.match(p.name))]
    return sorted(found)


def latest_checkpoint(out_dir: str | os.PathLike) -> Path | None:
    """The newest step checkpoint of ``out_dir`` that loads; unreadable newer ones are reported and passed over."""
    for step, p in reversed(list_checkpoints(out_dir)):
        try:
            load_checkpoint(p)          # validates; the caller loads it again (small price for safety)
            return p
        except XlpeError as e:
            log.warning("ignoring %s", e)
    return None


def prune_checkpoints(out_dir: str | os.PathLike, keep_last: int) -> list[Path]:
    """Delete all but the ``keep_last`` newest step checkpoints (``keep_last <= 0`` keeps all)."""
    if keep_last <= 0:
        return []
    old = list_checkpoints(out_dir)[:-keep_last]
    for _, p in old:
        p.unlink(missing_ok=True)
    return [p for _, p in old]


# -- averaging ------------------------------------------------------------------------------------------

def average_checkpoints(paths: Iterable[str | os.PathLike]) -> dict[str, torch.Tensor]:
    """The element-wise mean of the models in ``paths`` (a model state_dict).

    Floating-point tensors are averaged in float64 and cast back (averaging copies of one checkpoint is
    exactly the identity); integer buffers are taken from the last checkpoint. All checkpoints must have
    the same parameter names and shapes.
    """
    return _average(paths)[0]


def _average(paths: Iterable[str | os.PathLike]) -> tuple[dict[str, torch.Tensor], dict, list]:
    """``(mean state_dict, the last checkpoint without its model and optimizer, every input's step)``,
    reading each file once."""
    paths = [os.fspath(p) for p in paths]
    if not paths:
        raise XlpeError("average_checkpoints needs at least one checkpoint")
    acc: dict[str, torch.Tensor] = {}
    ref: dict[str, torch.Tensor] = {}
    steps, last, first = [], {}, {}
    for k, p in enumerate(paths):
        ck = load_checkpoint(p)
        sd = ck.pop("model")
        ck.pop("optimizer", None)
        steps.append(ck.get("step"))
        last = ck
        if k == 0:
            first = ck
        else:
            _check_same_model(first, ck, paths[0], p)
        if k == 0:
            ref = sd
            acc = {n: t.to(torch.float64).clone() if t.is_floating_point() else t.clone() for n, t in sd.items()}
            continue
        if sd.keys() != ref.keys():
            diff = sorted(set(sd) ^ set(ref))[:5]
            raise XlpeError(f"{p}: cannot average with {paths[0]}: different parameters ({', '.join(diff)} ...)")
        for n, t in sd.items():
            if t.shape != ref[n].shape:
                raise XlpeError(f"{p}: cannot average: {n} has shape {tuple(t.shape)}, "
                                f"{paths[0]} has {tuple(ref[n].shape)}")
            if t.is_floating_point():
                acc[n] += t.to(torch.float64)
            else:
                acc[n] = t.clone()
    state = {n: (a / len(paths)).to(ref[n].dtype) if ref[n].is_floating_point() else a for n, a in acc.items()}
    return state, last, steps


def _check_same_model(a: Mapping, b: Mapping, path_a: str, path_b: str) -> None:
    """Checkpoints of one model only: the same model config (encodings, sizes, ...) and the same subword models
    (parameter names and shapes alone cannot tell an APE model from an XL one, or two vocabularies apart)."""
    ma, mb = a.get("model_config") or {}, b.get("model_config") or {}
    diff = sorted(k for k in set(ma) | set(mb) if ma.get(k) != mb.get(k))
    if diff:
        raise XlpeError(f"{path_b}: cannot average with {path_a}: the models differ in "
                        + ", ".join(f"{k} ({ma.get(k)!r} vs {mb.get(k)!r})" for k in diff[:4]))

    def protos(ck):
        sw = ck.get("subwords") or {}
        return [None if sw.get(side) is None or sw[side].get("proto") is None
                else bytes(sw[side]["proto"].numpy().tobytes()) for side in ("src", "tgt")]
    if protos(a) != protos(b):
        raise XlpeError(f"{path_b}: cannot average with {path_a}: they were trained with different subword models")


def last_checkpoints(out_dir: str | os.PathLike, n: int) -> list[Path]:
    """The ``n`` newest step checkpoints of a training directory, oldest first (an error if it has fewer)."""
    found = [p for _, p in list_checkpoints(out_dir)]
    if n < 1:
        raise XlpeError(f"need a positive number of checkpoints, got {n}")
    if len(found) < n:
        raise XlpeError(f"{os.fspath(out_dir)}: {len(found)} step checkpoints (checkpoint_<step>.pt), {n} asked for; "
                        "train with a smaller --save-every or a larger --keep-last")
    return found[-n:]


def save_average(paths: Iterable[str | os.PathLike], output: str | os.PathLike) -> dict:
    """Write the average of ``paths`` (:func:`average_checkpoints`) as a model-only checkpoint: the newest
    input's config, subword models and counters, no optimizer or RNG state (it translates; it does not
    resume training). Returns a summary: inputs, their steps and the output path."""
    paths = [os.fspath(p) for p in paths]
    out = Path(output).resolve()
    if any(Path(p).resolve() == out for p in paths):
        raise XlpeError(f"output {os.fspath(output)} is one of the checkpoints to average; choose another path")
    resumable = False
    if out.is_file():
        with contextlib.suppress(XlpeError):           # an unreadable file there is simply replaced
            resumable = load_checkpoint(out).get("optimizer") is not None
    if resumable:
        raise XlpeError(f"output {os.fspath(output)} is a resumable training checkpoint; writing a model-only "
                        "average over it would end that run's resumption: choose another path")
    if out.is_dir():
        raise XlpeError(f"output {os.fspath(output)} is a directory; give a file path")
    state, last, steps = _average(paths)
    keep = ("model_config", "subwords", "data_config", "step", "epoch")
    payload = {k: last[k] for k in keep if k in last}
    payload.update(model=state, train_config=None, averaged_from=paths, averaged_steps=steps)
    save_checkpoint(output, payload)
    return {"output": os.fspath(output), "inputs": paths, "steps": steps}


# -- models from checkpoints ----------------------------------------------------------------------------

def load_model(checkpoint: str | os.PathLike | Iterable[str | os.PathLike], device: str | torch.device = "cpu"):
    """Build the model a checkpoint describes and load its weights (eval mode).

    Args:
        checkpoint: one path, or several to average (:func:`average_checkpoints`; the first one's config and
            subword models are used).

    Returns:
        ``(model, config, (src_subword, tgt_subword))`` where the subword models are
        :class:`xlpe.data.subword.SubwordModel` built from the bytes stored in the checkpoint (the same
        object twice for a joint vocabulary).
    """

    paths = [checkpoint] if isinstance(checkpoint, (str, os.PathLike)) else list(checkpoint)
    ck = load_checkpoint(paths[0])
    cfg = TransformerConfig.from_dict(ck["model_config"])
    model = build_model(cfg)
    state = ck["model"] if len(paths) == 1 else average_checkpoints(paths)
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise XlpeError(f"{os.fspath(paths[0])}: weights do not fit the model its config describes: "
                        f"{str(e).splitlines()[0]}") from None
    model.to(device).eval()
    sw = ck.get("subwords") or {}

    def subword(entry):
        if entry is None:
            return None
        if "proto" in entry and entry["proto"] is not None:
            return SubwordModel(bytes(entry["proto"].numpy().tobytes()), entry.get("path"))
        return SubwordModel.load(entry["path"])

    src = subword(sw.get("src"))
    if src is None:
        raise XlpeError(f"{os.fspath(paths[0])}: checkpoint holds no subword model; cannot translate text with it")
    tgt = subword(sw.get("tgt")) or src
    return model, cfg, (src, tgt)
