"""Atomic output: write to a temporary file beside the target, then ``os.replace`` it into place.

An interrupted job therefore never leaves a half-written file that looks complete: either the old
file (or nothing) is there, or the whole new one. The temporary file is named after its owner process
(:func:`xlpe.io.process.owner_tag`); one left by a run killed with SIGKILL is removed by the next write of the
same folder. :func:`atomic_group` makes several files appear together (or none of them).

What an output path names decides how it is written (:func:`atomic_write`; symlinks are followed and the file
they point to is judged):

* nothing, or a regular file: written atomically as above. Behind a symlink, the temporary file goes beside the
  link's target and replaces the target; the link stays a link.
* a device (``/dev/null``, ``/dev/full``), a FIFO, a socket, or the file this process's standard output or error
  is (``/dev/stdout``): written in place, streamed, never replaced (a rename would turn the device node or FIFO
  into a regular file). Nothing is atomic there; a FIFO waits for its reader.
* a directory: refused (:class:`~xlpe.errors.ConfigError`).

An :class:`OSError` of the writer names the output path the caller gave (``filename``), also where the system
named the temporary file or gave no name (a full disk: ``ENOSPC`` from ``write``), and is raised as itself where a
library wrapped it (torch's ``RuntimeError`` around a failed write), so that one handler can report it in one line
(:func:`xlpe.cli.main`). The temporary file is removed on every error, interruption included.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator

from xlpe.errors import ConfigError
from xlpe.io.process import TAG_RE, owner_tag, remove_stale

#: the temporary files of :func:`atomic_write`: ``.<name>.<owner tag>.<random>.tmp``.
TMP_PATTERN = r"\..+\." + TAG_RE + r"\.\w+\.tmp"
#: the temporary and replaced directories of :func:`atomic_dir`: ``.<name>.<owner tag>.dir(tmp|old)``.
DIR_PATTERN = r"\..+\." + TAG_RE + r"\.dir(tmp|old)"
#: errors only a write gives: raised inside an :func:`atomic_write` block, they are about its output
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS})

#: the renames an :func:`atomic_group` holds back: ``[(temporary file, target)]``
_PENDING: contextvars.ContextVar[list[tuple[str, Path]] | None] = contextvars.ContextVar("xlpe_atomic_group",
                                                                                         default=None)


def real_path(path: str | os.PathLike) -> Path:
    """``path`` with every symlink resolved (:func:`os.path.realpath`), where a symlink loop is the
    :class:`OSError` ``ELOOP`` that opening it gives (``realpath`` stops silently at a loop and
    :meth:`pathlib.Path.resolve` raises a ``RuntimeError``)."""
    output_status(path)
    return Path(os.path.realpath(path))


def link_target(path: str | os.PathLike) -> Path:
    """``path`` with its last component followed while it is a symlink (what renaming onto ``path`` would
    replace is the link; what should be replaced is this); the folders above stay as written. A symlink loop is
    the :class:`OSError` ``ELOOP``."""
    output_status(path)
    p = Path(path)
    for _ in range(64):
        if not p.is_symlink():
            return p
        p = p.parent / os.readlink(p)          # a relative link is read from the link's folder
    raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), os.fspath(path))


def output_status(path: str | os.PathLike) -> os.stat_result | None:
    """The status of the file ``path`` names, symlinks followed; None when nothing is there (a dangling symlink
    included). A symlink loop, a file used as a folder or a folder that cannot be searched raise their
    :class:`OSError`."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def is_special(st: os.stat_result | None) -> bool:
    """Whether a file of status ``st`` must be written in place: a device, FIFO or socket, or the file that this
    process's standard output or error is."""
    return st is not None and (not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode)
                               or _std_fd(st) is not None)


def _std_fd(st: os.stat_result) -> int | None:
    """1 or 2 when ``st`` is the file of this process's standard output or error, else None."""
    for fd in (1, 2):
        try:
            other = os.fstat(fd)
        except OSError:
            continue
        if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
            return fd
    return None


def blame(exc: BaseException, path: str | os.PathLike, ours: bool = True) -> BaseException:
    """The exception to raise for ``exc``, met while writing ``path``: an :class:`OSError` (or the one a library
    wrapped in its own error, :data:`WRITE_ERRNOS` only) naming ``path`` where it named no file or a temporary
    one. ``ours``: raised by the writer itself (else by the caller's block, where only write errors are about
    ``path``)."""
    err = exc if isinstance(exc, OSError) else _wrapped_os_error(exc)
    if err is None or (not ours or err is not exc) and err.errno not in WRITE_ERRNOS:
        return exc
    if ours or err.filename is None:
        err.filename, err.filename2 = os.fspath(path), None
    return err


def _wrapped_os_error(exc: BaseException) -> OSError | None:
    """The first :class:`OSError` among the causes and contexts of ``exc``, or None."""
    seen = {id(exc)}
    e = exc.__cause__ or exc.__context__
    while e is not None and id(e) not in seen:
        if isinstance(e, OSError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[IO]:
    """Open a temporary file next to ``path``; on success rename it to ``path``, on error delete it.

    ``path`` may be ``-`` for standard output (then nothing is atomic, and nothing is closed). A device, FIFO,
    socket or standard stream is written in place and a directory refused (module docstring); a symlink is
    followed and its target replaced.
    """
    if os.fspath(path) == "-":
        if sys.stdout is None:
            raise OSError(errno.EBADF, "standard output is closed", "<stdout>")
        try:
            yield sys.stdout.buffer if "b" in mode else sys.stdout
        except OSError as e:
            raise blame(e, "<stdout>", ours=False)
        return
    kwargs = {} if "b" in mode else {"encoding": encoding, "newline": "\n"}
    st = output_status(path)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"output {os.fspath(path)} is a directory; give a file path")
    writer = _in_place(path, st, mode, kwargs) if is_special(st) else _replacing(path, mode, kwargs)
    with writer as f:
        yield f


@contextlib.contextmanager
def _in_place(path: str | os.PathLike, st: os.stat_result, mode: str, kwargs: dict) -> Iterator[IO]:
    """Write a device, FIFO, socket or standard stream where it is (a standard stream through a duplicate of its
    descriptor, so that its position and append mode hold)."""
    fd = _std_fd(st)
    try:
        if fd is not None:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            f = os.fdopen(os.dup(fd), mode, **kwargs)
        else:
            f = open(path, mode, **kwargs)
    except OSError as e:
        raise blame(e, path) from None
    try:
        yield f
    except BaseException as e:
        with contextlib.suppress(OSError):
            f.close()
        raise blame(e, path, ours=False)
    try:
        f.close()
    except OSError as e:
        raise blame(e, path) from None


@contextlib.contextmanager
def _replacing(path: str | os.PathLike, mode: str, kwargs: dict) -> Iterator[IO]:
    """Write a temporary file beside what ``path`` names (the target of a symlink) and rename it onto that."""
    target = link_target(path)
    with output_folder(target.parent):         # a folder made for the file goes again if the file does not come
        with _temporary(target, path, mode, kwargs) as f:
            yield f


@contextlib.contextmanager
def _temporary(target: Path, path: str | os.PathLike, mode: str, kwargs: dict) -> Iterator[IO]:
    """The temporary file beside ``target``, renamed onto it at the end (or held back by an
    :func:`atomic_group`); errors name ``path``, the output as the caller gave it."""
    try:
        remove_stale(target.parent, TMP_PATTERN)         # any output left half-written by a killed run
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.{owner_tag()}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise blame(e, path) from None
    f = None
    in_block = False
    try:
        os.chmod(tmp, 0o666 & ~_umask())          # mkstemp makes 0600; give the file the usual permissions
        f = os.fdopen(fd, mode, **kwargs)
        in_block = True
        yield f
        in_block = False
        f.flush()
        os.fsync(f.fileno())
        f.close()
        pending = _PENDING.get()
        if pending is None:
            os.replace(tmp, target)
        else:
            pending.append((tmp, target))
    except BaseException as e:
        _discard(f, fd, tmp)
        new = blame(e, path, ours=not in_block)
        if new is e:
            raise
        raise new from None


def _discard(f: IO | None, fd: int, tmp: str) -> None:
    """Close (without the flush that would fail again) and delete a temporary file."""
    with contextlib.suppress(OSError):
        if f is not None:
            f.close()
        else:
            os.close(fd)
    with contextlib.suppress(OSError):
        os.unlink(tmp)


@contextlib.contextmanager
def atomic_group() -> Iterator[None]:
    """The files that :func:`atomic_write` writes inside the block appear together when it ends without error
    (their temporary files renamed into place one after the other, after every one is complete), or none of them
    does: on error every temporary file is deleted. Outputs written in place (a device, a FIFO) are not held
    back."""
    pending: list[tuple[str, Path]] = []
    token = _PENDING.set(pending)
    try:
        yield
    except BaseException:
        for tmp, _ in pending:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise
    finally:
        _PENDING.reset(token)
    for k, (tmp, target) in enumerate(pending):
        try:
            os.replace(tmp, target)
        except OSError as e:
            for rest, _ in pending[k:]:
                with contextlib.suppress(OSError):
                    os.unlink(rest)
            raise blame(e, target) from None


@contextlib.contextmanager
def output_folder(path: str | os.PathLike) -> Iterator[Path]:
    """Make the folder ``path`` (and its missing parents) and yield ``path``; if the block fails, remove again
    those of them that this made and that are still empty, so that a failed command leaves no empty folder
    behind. A symlink is followed (the folder it names is made)."""
    target = link_target(path)                # a symlink to a folder, or a dangling one: the folder it names
    made = []
    p = target
    while output_status(p) is None and p != p.parent:
        made.append(p)
        p = p.parent
    try:
        target.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ConfigError(f"output {os.fspath(path)} is a file; give a folder") from None
    except OSError as e:
        raise blame(e, path) from None
    try:
        yield Path(path)
    except BaseException:
        for d in made:
            with contextlib.suppress(OSError):
                d.rmdir()
        raise


def check_dir_output(path: str | os.PathLike, marker: str, what: str) -> None:
    """Refuse an output directory :func:`atomic_dir` must not replace: an existing file, or a non-empty
    directory without ``marker``. Call it before long work so a bad path fails at once."""
    path = Path(path)
    st = output_status(path)
    if st is not None or path.is_symlink():
        if st is None or not stat.S_ISDIR(st.st_mode):
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
    never deletes data. ``what`` names the kind of directory in that message. A symlink is followed: the
    directory it points to is replaced, and the link stays.
    """
    check_dir_output(path, marker, what)
    path = link_target(path)
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
    two outputs that are the same file. ``None`` and ``-`` (standard streams) are skipped; a symlink loop is the
    :class:`OSError` ``ELOOP``."""
    def real(p):
        return None if p is None or os.fspath(p) == "-" else real_path(p)
    ins = {r: p for p in inputs if (r := real(p)) is not None}
    seen: dict[Path, str] = {}
    for p in outputs:
        r = real(p)
        if r is None:
            continue
        if r.is_dir():
            raise ConfigError(f"output {os.fspath(p)} is a directory; give a file path")
        if is_special(output_status(p)):             # written in place: a device or a stream replaces nothing
            continue
        same = next((q for q in ins if q == r or (q.exists() and r.exists() and os.path.samefile(q, r))), None)
        if same is not None:
            raise ConfigError(f"output {os.fspath(p)} is the input {os.fspath(ins[same])}: writing it would replace "
                              "the input; choose another output path")
        if r in seen:
            raise ConfigError(f"two outputs are the same file: {os.fspath(p)}")
        seen[r] = os.fspath(p)
