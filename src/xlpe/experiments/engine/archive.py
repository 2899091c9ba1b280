"""``xlpe experiment archive OUT --to DIR`` and ``xlpe experiment restore DIR --into OUT``: a recipe folder's finished
stages without their model checkpoints, small enough to keep under version control, so that a table which needs more
training than one machine's lifetime (a laptop replaced, a cloud instance recycled) can be filled on several.

**Archive.** Every finished stage of OUT (a folder with ``done.json``, :mod:`xlpe.experiments.engine.cache`) becomes
``DIR/<stage>.tar.xz`` with every file of the stage except checkpoints (``*.pt``), the trainer's data caches
(``cache/``: the corpus encoded, rebuilt when needed) and the stages nested in it (each archived on its own). The
signatures of the checkpoints it leaves out go in as ``archived_checkpoints.json``: the stages that read a trained
model (the decoding cost, the DPE probe) then find their cached results after a restore (:func:`checkpoint_signature`).
Only files of the kinds in :data:`ARCHIVED_SUFFIXES` are archived: logs, results, translations, alignments, orders,
DPE targets, subword and preordering models. A stage that holds anything else (the corpus's own text: copies of the
data, CoNLL-U trees), or a file above ``max_file_mb``, is left out, and it runs again after a restore, which is cheap
for those stages; the report says which stages were left out and why. Unfinished stages and stale ones
(``*.stale-*``) are left out too. ``DIR/manifest.json`` lists every archived stage with its cache key; a stage whose
key has not changed is not written again, so the archive of a folder that grows is updated by adding files. Links
between stages (``dpe/seed1`` to a λ-sweep run) are kept in the manifest.

**Restore.** Every archived stage goes back where it was, unless OUT already holds a stage there (that one is kept
and reported). The files a stage's result names (its translations, the alignment file a later stage reads) are
archived relative to the folder and restored under OUT, wherever that is. Run ``restore`` before the recipe: its
stages are then cached, so it trains only what the archive lacks. A restored run has no checkpoint: it is finished
for its recipe (report, tables and significance tests read its translations and logs) and gives its results to a run
of another recipe with the same training and evaluation (``reuse_runs``,
:func:`xlpe.experiments.engine.reuse.take_results`), but it cannot be trained further.

The cache keys hold the inputs by content (:func:`xlpe.experiments.engine.cache.file_sig`), so a restored stage
counts as cached only with the same data, options and restored (or identically recomputed) earlier stages. The code
version is not compared: the manifest records the xlpe version of each archiving, and a table should be trained by
one.
"""

from __future__ import annotations

import json
import logging
import os
import tarfile
import time
from pathlib import Path
from typing import Any

from xlpe.errors import ConfigError
from xlpe.experiments.engine.cache import file_sig
from xlpe.experiments.engine.status import CHECKPOINTS_FILE, stage_folders
from xlpe.io.atomic import atomic_write

log = logging.getLogger("xlpe.experiments.engine.archive")

#: kinds of files an archive holds: results and logs, translations, alignments, orders, DPE targets, subword and
#: preordering models
ARCHIVED_SUFFIXES = frozenset({".json", ".csv", ".jsonl", ".hyp", ".align", ".talp", ".order", ".model", ".key",
                               ".npz", ".dpe"})
#: model checkpoints: left out, their signatures kept
CHECKPOINT_SUFFIX = ".pt"
#: the trainer's data caches (:class:`xlpe.train.config.TrainConfig` ``cache_data``): left out
CACHE_DIR = "cache"
MANIFEST = "manifest.json"


def _is_stage(d: Path) -> bool:
    return (d / "done.json").is_file() or (d / "started.json").is_file()


def _stage_files(d: Path) -> list[Path]:
    """Every file of the stage in ``d``, leaving out nested stages and linked folders."""
    out = []
    for cur, dirs, files in os.walk(d):
        here = Path(cur)
        dirs[:] = sorted(x for x in dirs if not (here / x).is_symlink() and not _is_stage(here / x))
        out += [here / f for f in sorted(files) if not f.startswith(".")]      # hidden: half-written temporaries
    return out


def _xlpe_version() -> str:
    try:
        from importlib.metadata import version
        return version("xlpe")
    except Exception:               # not installed (run from a source tree)
        return "unknown"


def archive_folder(out: str | os.PathLike, to: str | os.PathLike, max_file_mb: float = 16.0) -> dict[str, Any]:
    """Archive the finished stages of the recipe folder ``out`` into ``to`` (see the module docstring).

    Returns ``{"written": [...], "unchanged": [...], "left_out": {stage: reason}, "unfinished": [...]}``."""
    root, dest = Path(out), Path(to)
    if not root.is_dir():
        raise ConfigError(f"{root}: no such folder (the --out of an `xlpe experiment` run)")
    if dest.resolve() == root.resolve() or root.resolve() in dest.resolve().parents:
        raise ConfigError(f"{dest}: the archive must not be inside the folder it archives ({root})")
    manifest_path = dest / MANIFEST
    manifest = _read_manifest(dest) if manifest_path.exists() else {"format": 1, "stages": {}, "links": {}}
    stages, links = stage_folders(root)
    report: dict[str, Any] = {"written": [], "unchanged": [], "left_out": {}, "unfinished": []}
    for d in stages:
        name = d.relative_to(root).as_posix()
        if not (d / "done.json").is_file():
            report["unfinished"].append(name)
            continue
        key = json.loads((d / "done.json").read_text()).get("key")
        target = dest / f"{name}.tar.xz"
        if manifest["stages"].get(name, {}).get("key") == key and target.is_file():
            report["unchanged"].append(name)
            continue
        files = _stage_files(d)
        checkpoints = [f for f in files if f.suffix == CHECKPOINT_SUFFIX]
        kept = [f for f in files if f.suffix != CHECKPOINT_SUFFIX and f.name != CHECKPOINTS_FILE
                and f.parent.name != CACHE_DIR]
        other = [f.relative_to(d).as_posix() for f in kept if f.suffix not in ARCHIVED_SUFFIXES]
        big = [f.relative_to(d).as_posix() for f in kept if f.stat().st_size > max_file_mb * 1e6]
        if other or big:
            report["left_out"][name] = (f"holds files of a kind an archive does not keep: {', '.join(other[:3])}"
                                        if other else f"files above {max_file_mb:g} MB: {', '.join(big[:3])}")
            continue
        ckpt_sigs = _checkpoint_sigs(d, checkpoints)
        target.parent.mkdir(parents=True, exist_ok=True)
        with atomic_write(target, "wb", encoding=None) as f:
            with tarfile.open(fileobj=f, mode="w:xz") as tar:
                for p in kept:
                    if p == d / "done.json":            # its result names files of the folder: made relative
                        marker = json.loads(p.read_text())
                        marker["result"] = _paths(marker.get("result"), lambda x: _to_marker(x, root))
                        _add_bytes(tar, "done.json", json.dumps(marker, indent=2).encode())
                        continue
                    tar.add(p, arcname=p.relative_to(d).as_posix(), filter=_plain)
                if ckpt_sigs:
                    _add_bytes(tar, CHECKPOINTS_FILE, json.dumps(ckpt_sigs, indent=1).encode())
        manifest["stages"][name] = {"key": key, "files": len(kept), "bytes": sum(p.stat().st_size for p in kept),
                                    "checkpoints_left_out": len(checkpoints), "xlpe": _xlpe_version(),
                                    "archived": time.strftime("%Y-%m-%d", time.gmtime())}
        report["written"].append(name)
    manifest["links"].update({name: os.readlink(link) for name, link in links.items()})
    dest.mkdir(parents=True, exist_ok=True)
    with atomic_write(manifest_path) as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return report


#: how an archived stage result names a file of the archived folder (made absolute again by the restore)
PATH_MARKER = "{archived folder}/"


def _paths(obj: Any, fn) -> Any:
    """``obj`` (JSON) with ``fn`` applied to every string."""
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, list):
        return [_paths(x, fn) for x in obj]
    if isinstance(obj, dict):
        return {k: _paths(v, fn) for k, v in obj.items()}
    return obj


def _to_marker(s: str, root: Path) -> str:
    """A path (or a ``KIND:path`` channel spec) to a file under ``root`` as ``[KIND:]{archived folder}/<relative>``;
    any other string unchanged."""
    kind, _, rest = s.partition(":") if ":" in s and not Path(s).exists() else ("", "", s)
    if not rest or "\n" in rest:
        return s
    p = Path(rest)
    rel = None
    try:
        if p.exists():
            rel = p.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        pass
    if rel is None and not p.is_absolute():
        # a path relative to where the recipe ran (``--out runs/x``): the part after the folder's own name
        parts = p.parts
        for i in (i for i, x in enumerate(parts) if x == root.name):
            if parts[i + 1:] and (root / Path(*parts[i + 1:])).exists():
                rel = Path(*parts[i + 1:])
                break
    if rel is None:
        return s
    return (f"{kind}:" if kind else "") + PATH_MARKER + rel.as_posix()


def _plain(info: tarfile.TarInfo) -> tarfile.TarInfo:
    """Archive members without owner or time: the same stage archives to the same bytes."""
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mtime = 0
    return info


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    import io
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def _checkpoint_sigs(d: Path, checkpoints: list[Path]) -> dict[str, Any]:
    """``{folder: {"latest": file_sig, "files": [names]}}`` of the checkpoints left out, per folder of the stage."""
    from xlpe.nn.checkpoint import latest_checkpoint
    out: dict[str, Any] = {}
    for folder in sorted({p.parent for p in checkpoints}):
        latest = latest_checkpoint(folder)
        out[folder.relative_to(d).as_posix() or "."] = {
            "latest": file_sig(latest)[0] if latest is not None else None,
            "files": sorted(p.name for p in checkpoints if p.parent == folder)}
    return out


def _read_manifest(src: Path) -> dict[str, Any]:
    try:
        m = json.loads((src / MANIFEST).read_text())
        if m.get("format") != 1 or not isinstance(m.get("stages"), dict):
            raise ValueError("not format 1")
        return m
    except (OSError, ValueError) as e:
        raise ConfigError(f"{src / MANIFEST}: not an archive manifest of `xlpe experiment archive` ({e})") from None


def restore_folder(src: str | os.PathLike, into: str | os.PathLike) -> dict[str, Any]:
    """Put the stages archived in ``src`` back into the recipe folder ``into`` (see the module docstring).

    Returns ``{"restored": [...], "kept": [...] (``into`` already had them), "links": [...]}``."""
    src, root = Path(src), Path(into)
    manifest = _read_manifest(src)
    report: dict[str, Any] = {"restored": [], "kept": [], "links": []}
    # parents before the stages nested in them
    for name in sorted(manifest["stages"], key=lambda n: n.count("/")):
        d, archive = root / name, src / f"{name}.tar.xz"
        if not archive.is_file():
            raise ConfigError(f"{archive}: missing (the manifest {src / MANIFEST} lists stage {name})")
        if _is_stage(d):
            report["kept"].append(name)
            continue
        tmp = d.with_name(f".{d.name}.restoring")
        if tmp.exists():
            import shutil
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        try:
            with tarfile.open(archive, mode="r:xz") as tar:
                tar.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError, EOFError) as e:
            import shutil
            shutil.rmtree(tmp, ignore_errors=True)
            raise ConfigError(f"{archive}: not a readable stage archive ({e})") from None
        done = tmp / "done.json"
        if done.is_file():                    # the result's files, named where they are now
            here = str(root.resolve()) + "/"
            marker = json.loads(done.read_text())
            marker["result"] = _paths(marker.get("result"), lambda x: x.replace(PATH_MARKER, here, 1))
            with atomic_write(done) as f:
                json.dump(marker, f, indent=2)
        if d.exists():                        # a folder holding only nested stages restored earlier
            for p in tmp.iterdir():
                p.rename(d / p.name)
            tmp.rmdir()
        else:
            tmp.rename(d)
        report["restored"].append(name)
    for name, target in sorted(manifest.get("links", {}).items()):
        link = root / name
        if not link.exists() and not link.is_symlink():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(target, target_is_directory=True)
            report["links"].append(name)
    return report


def checkpoint_signature(folder: str | os.PathLike) -> list | None:
    """The ``file_sig`` of the newest checkpoint of ``folder``: the file itself, or, when an archive left it out,
    the signature it recorded (``archived_checkpoints.json`` in the stage folder above); None without either."""
    from xlpe.nn.checkpoint import latest_checkpoint
    folder = Path(folder)
    ck = latest_checkpoint(folder) if folder.is_dir() else None
    if ck is not None:
        return file_sig(ck)
    for stage in (folder, *folder.parents):
        f = stage / CHECKPOINTS_FILE
        if f.is_file():
            rel = folder.relative_to(stage).as_posix() or "."
            sig = json.loads(f.read_text()).get(rel, {}).get("latest")
            return [sig] if sig else None
        if _is_stage(stage):
            return None
    return None
