"""Atomic output: write to a temporary file beside the target, then ``os.replace`` it into place.

An interrupted job therefore never leaves a half-written file that looks complete: either the old
file (or nothing) is there, or the whole new one. The temporary file is named after its owner process
(:func:`xlpe.io.process.owner_tag`); one left by a run killed with SIGKILL is removed by the next write of the
same folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator

from xlpe.io.process import TAG_RE, owner_tag, remove_stale

#: the temporary files of :func:`atomic_write`: ``.<name>.<owner tag>.<random>.tmp``.
TMP_PATTERN = r"\..+\." + TAG_RE + r"\.\w+\.tmp"
#: the temporary and replaced directories of :func:`atomic_dir`: ``.<name>.<owner tag>.dir(tmp|old)``.
DIR_PATTERN = r"\..+\." + TAG_RE + r"\.dir(tmp|old)"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success rename it to ``path``, on error delete it.

    ``path`` may be ``-`` for standard output (then nothing is atomic, and nothing is closed).
    """
    if os.fspath(path) == "-":
        import sys
        yield sys.stdout.buffer if "b" in mode else sys.stdout
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent, TMP_PATTERN)         # any output left half-written by a killed run
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{owner_tag()}.", suffix=".tmp", dir=path.parent)
    os.chmod(tmp, 0o666 & ~_umask())          # mkstemp makes 0600; give the file the usual permissions
    try:
        kwargs = {} if "b" in mode else {"encoding": encoding, "newline": "\n"}
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_dir_output(path: str | os.PathLike, marker: str, what: str) -> None:
    """Refuse an output directory :func:`atomic_dir` must not replace: an existing file, or a non-empty
    directory without ``marker``. Call it before long work so a bad path fails at once."""
    from xlpe.errors import ConfigError
    path = Path(path)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise ConfigError(f"output {path} exists and is not a directory: refusing to replace it with {what}")
        if any(path.iterdir()) and not (path / marker).is_file():
            raise ConfigError(f"output {path} is a non-empty directory that is not {what} (no {marker}): "
                              "refusing to replace its contents; choose a new path or remove it")


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike, marker: str, what: str) -> Iterator[Path]:
    """Yield an empty temporary directory beside ``path``; on success it replaces ``path`` in one rename, on
    error it is deleted. The directory appears complete or not at all.

    Only a directory this kind of writer made may be replaced: ``path`` must not exist, be an empty directory
    or hold the file ``marker`` (what the writer puts in every directory it makes). Anything else -- a file, a
    user's folder -- is refused before any work (:class:`~xlpe.errors.ConfigError`), so a mistyped output path
    never deletes data. ``what`` names the kind of directory in that message.
    """
    path = Path(path)
    check_dir_output(path, marker, what)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent, DIR_PATTERN)
    tag = owner_tag()
    tmp, old = path.parent / f".{path.name}.{tag}.dirtmp", path.parent / f".{path.name}.{tag}.dirold"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    mode = 0o666 & ~_umask()
    for p in tmp.rglob("*"):                  # some writers create 0600 files (mkstemp): give the usual modes
        if p.is_file():
            p.chmod(mode)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_lines(path: str | os.PathLike, lines: Iterable[str]) -> int:
    """Write one string per line atomically; returns the number of lines written.

    The iterable is consumed lazily, so a generator keeps memory flat; if it raises, no file appears.
    """
    n = 0
    with atomic_write(path) as f:
        for line in lines:
            if "\n" in line:
                raise ValueError(f"line {n + 1} to be written to {path} contains a newline")
            f.write(line)
            f.write("\n")
            n += 1
    return n


def check_outputs(outputs: Iterable[str | os.PathLike | None], inputs: Iterable[str | os.PathLike | None]) -> None:
    """Refuse, before any work, an output that is one of the inputs (it would be replaced), a directory, or
    two outputs that are the same file. ``None`` and ``-`` (standard streams) are skipped."""
    from xlpe.errors import ConfigError

    def real(p):
        return None if p is None or os.fspath(p) == "-" else Path(p).resolve()
    ins = {r: p for p in inputs if (r := real(p)) is not None}
    seen: dict[Path, str] = {}
    for p in outputs:
        r = real(p)
        if r is None:
            continue
        if r.is_dir():
            raise ConfigError(f"output {os.fspath(p)} is a directory; give a file path")
        same = next((q for q in ins if q == r or (q.exists() and r.exists() and os.path.samefile(q, r))), None)
        if same is not None:
            raise ConfigError(f"output {os.fspath(p)} is the input {os.fspath(ins[same])}: writing it would replace "
                              "the input; choose another output path")
        if r in seen:
            raise ConfigError(f"two outputs are the same file: {os.fspath(p)}")
        seen[r] = os.fspath(p)
