"""Cached, resumable stages for the experiment recipes (``xlpe demo``, ``xlpe experiment``).

A stage is a function ``fn(stage_dir) -> dict`` with a JSON-able dict of parameters. :func:`run_stage` runs it
unless ``stage_dir/done.json`` records the same parameters, and writes that marker atomically only when the
stage finished. A killed recipe therefore resumes at the first unfinished stage. A stage that trains a model
resumes from its own checkpoints.

A stage directory belongs to one set of parameters: ``started.json`` records them when the stage starts. When
the parameters change (a new model size, a new budget, ...), the old directory, finished or half-done, is
moved aside to ``<name>.stale-<old key>`` before the stage runs again, so that no stage resumes from a
checkpoint trained under other parameters.

A stage runs under an exclusive lock (``.<name>.lock`` beside its directory), so that two invocations of a recipe
on one folder, e.g. a second process filling an idle core with a later run of the same table, never train the same
run at once: the one that comes second waits and then finds the stage cached.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from xlpe.keys import Inputs, digest
from xlpe.io.atomic import atomic_write
from xlpe.io.process import Terminated, become_worker
from xlpe.io.text import file_sha256

log = logging.getLogger("xlpe.experiments")


_SIGS: dict[tuple, str] = {}


def file_sig(*paths: Path | str) -> list:
    """``[file name, size, content hash]`` of files, for stage parameters that must change when an input does.

    The content, not the path or the modification time: a corpus copied to a new machine (new mtimes) or a
    run directory moved elsewhere keeps its cached stages. Hashes are memoised per (path, size, mtime) within
    a process, so a file named by many stages is read once.
    """
    out = []
    for p in paths:
        st = Path(p).stat()
        k = (str(Path(p).resolve()), st.st_size, st.st_mtime_ns)
        if k not in _SIGS:
            _SIGS[k] = file_sha256(p)[:16]
        out.append([Path(p).name, st.st_size, _SIGS[k]])
    return out


def cached_result(out: Path, name: str, params: Inputs) -> dict | None:
    """The result of stage ``name`` if ``out/name/done.json`` records these inputs, else None (nothing runs)."""
    marker = Path(out) / name / "done.json"
    if marker.exists():
        saved = json.loads(marker.read_text())
        if saved.get("key") == params.key():
            return saved["result"]
    return None


def recorded_params(out: Path, name: str) -> dict:
    """The inputs that ``out/name/done.json`` records for stage ``name`` ({} when it has not finished)."""
    marker = Path(out) / name / "done.json"
    return json.loads(marker.read_text()).get("params", {}) if marker.exists() else {}


def lock_path(stage_dir: Path) -> Path:
    """The lock file of a stage: beside its folder (which may be renamed to ``*.stale-*``), hidden."""
    return stage_dir.parent / f".{stage_dir.name}.lock"


@contextlib.contextmanager
def stage_lock(stage_dir: Path, name: str):
    """Hold the stage's exclusive lock for the block. Another process running the same stage (a second recipe
    invocation on the same folder) holds it: wait for it, logging that, rather than write the same checkpoints.
    The operating system releases the lock of a process that dies, however it dies."""
    try:
        import fcntl
    except ImportError:                      # no POSIX locks (Windows): one invocation per folder is the rule
        yield
        return
    path = lock_path(stage_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("stage %s: running in another process; waiting for it (%s)", name, stage_dir)
            fcntl.flock(f, fcntl.LOCK_EX)
        except OSError as e:                 # a file system without locks (some network mounts)
            log.warning("stage %s: cannot lock %s (%s); run one invocation per folder", name, path, e)
            yield
            return
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def stage_running(stage_dir: Path) -> bool:
    """Whether a process holds the stage's lock now (it is running the stage). False where locks are unknown."""
    try:
        import fcntl
    except ImportError:
        return False
    path = lock_path(stage_dir)
    if not path.exists():
        return False
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def run_stage(out: Path, name: str, params: Inputs, fn: Callable[[Path], dict], force: bool = False) -> dict:
    """Run ``fn(out / name) -> result`` unless ``out/name/done.json`` records the same params. The stage runs
    under its lock (:func:`stage_lock`): a second process asking for it meanwhile waits, then takes the result."""
    if not isinstance(params, Inputs):
        raise TypeError(f"stage {name}: its inputs must be declared as an xlpe.keys.Inputs dataclass, not "
                        f"{type(params).__name__}")
    d = Path(out) / name
    with stage_lock(d, name):
        return _run_stage(d, name, params.key_material(), fn, force)


def _run_stage(d: Path, name: str, params: dict, fn: Callable[[Path], dict], force: bool) -> dict:
    marker, started = d / "done.json", d / "started.json"
    key = digest(params)
    if not force and marker.exists():
        saved = json.loads(marker.read_text())
        if saved.get("key") == key:
            log.info("stage %s: cached (%s)", name, d)
            return saved["result"]
    old = None
    for f in (marker, started):
        if f.exists():
            old = json.loads(f.read_text()).get("key")
            break
    if old is not None and (old != key or force):
        stale = d.with_name(f"{d.name}.stale-{old}")
        if stale.exists():
            shutil.rmtree(stale)
        d.rename(stale)
        log.warning("stage %s: %s; the old directory is now %s", name,
                    "forced to run again" if old == key else "its parameters changed", stale)
    d.mkdir(parents=True, exist_ok=True)
    with atomic_write(started) as f:
        json.dump({"key": key, "params": params}, f, indent=2, default=str)
    t0 = time.time()
    log.info("stage %s: running", name)
    result = fn(d)
    result = dict(result, seconds=round(time.time() - t0, 2))
    with atomic_write(marker) as f:
        json.dump({"key": key, "params": params, "result": result}, f, indent=2, default=str)
    return result


def cached_file(path: Path, inputs: Inputs, make: Callable[[], Any], *, read: Callable[[Path], Any],
                write: Callable[[Path, Any], None]) -> Any:
    """A result kept in one file (e.g. a system's links) rather than a stage folder: ``read(path)`` when its key file
    (``path`` with the suffix ``.key``) holds the digest of ``inputs``, else ``make()``, written with ``write`` and
    the key file after it (atomically), under the same lock as a stage, so that two processes never compute it
    at once and a killed one never leaves a result that looks current."""
    path = Path(path)
    key_path, key = path.with_suffix(".key"), inputs.key()
    with stage_lock(path, path.name):
        if path.is_file() and key_path.is_file() and key_path.read_text() == key:
            return read(path)
        result = make()
        path.parent.mkdir(parents=True, exist_ok=True)
        write(path, result)
        with atomic_write(key_path) as f:
            f.write(key)
        return result


def _worker_init(level: int) -> None:
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    # a recipe stopped (SIGTERM, Ctrl-C), or killed even by SIGKILL, must not leave its workers training into the
    # output folder, where the next invocation's runs would meet them; a stopped worker cleans up its temporary files
    import multiprocessing
    parent = multiprocessing.parent_process()
    become_worker(parent.pid if parent is not None else None, clean_up=True)


def _stage_in_worker(*args) -> dict:
    """:func:`run_stage` in a worker; a worker stopped by SIGTERM ends once its stage has cleaned up, rather than
    take the next queued stage."""
    try:
        return run_stage(*args)
    except Terminated:
        os._exit(143)


def run_stages(tasks: list[tuple[Path, str, dict, Callable[[Path], dict]]], jobs: int = 1,
               force: bool = False) -> list[dict]:
    """:func:`run_stage` for every ``(out, name, params, fn)``; ``jobs > 1`` runs that many at once in separate
    processes (``fn`` must then be picklable, e.g. a ``functools.partial`` of a module-level function).
    Results come back in task order; the first failure is raised after the running tasks end."""
    if jobs <= 1 or len(tasks) <= 1:
        return [run_stage(o, n, p, f, force) for o, n, p, f in tasks]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    pending = []
    with ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_worker_init, initargs=(logging.getLogger().level or logging.INFO,)) as ex:
        try:
            for o, n, p, f in tasks:
                pending.append(ex.submit(_stage_in_worker, o, n, p, f, force))
            return [f.result() for f in pending]
        except KeyboardInterrupt:       # Ctrl-C or SIGTERM (xlpe.io.process.Terminated): stop now, not after the stages
            # the workers stop; the broken pool then fails the queued stages itself (cancelling them here made the
            # pool's thread raise InvalidStateError when it failed them: CPython 3.11's terminate_broken)
            for proc in list((getattr(ex, "_processes", None) or {}).values()):
                proc.terminate()
            raise
