"""A killed run leaves nothing behind: SIGTERM handled like Ctrl-C, child processes that die with their parent,
and the temporary files of an earlier run that was killed (``kill -9``) removed by the next one.

Temporary files and directories carry an owner tag (:func:`owner_tag`: a hash of the host name and the process
id) so that :func:`remove_stale` can tell the leftovers of a dead process from the files of a run that is still
going (on this host, or on another one that shares the folder).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import sys
import threading
import zlib
from pathlib import Path
from typing import Callable, Iterator

logger = logging.getLogger(__name__)


class Terminated(KeyboardInterrupt):
    """Raised in the main thread when the process receives SIGTERM inside :func:`sigterm_as_interrupt`.

    A :class:`KeyboardInterrupt`, so every clean-up that Ctrl-C runs (atomic outputs, temporary directories,
    child processes started with :func:`subprocess.run`) runs for SIGTERM too."""


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Raise :class:`Terminated` on SIGTERM for the duration (main thread only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Terminated(f"terminated by signal {signum}")
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


_PR_SET_PDEATHSIG = 1
_prctl: Callable | None | bool = False        # False: not looked up yet; None: not available


def _libc_prctl():
    global _prctl
    if _prctl is False:
        _prctl = None
        if sys.platform.startswith("linux"):
            try:
                import ctypes
                _prctl = ctypes.CDLL(None, use_errno=True).prctl
            except (OSError, AttributeError):
                pass
    return _prctl


def die_with_parent(sig: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Ask Linux to send this process ``sig`` when its parent dies, even by SIGKILL (``PR_SET_PDEATHSIG``), and
    exit at once if the parent is already gone (``parent``: its pid; unset: "re-parented to init"). Elsewhere
    (no prctl) nothing happens: children then end with their parent as usual, or not."""
    prctl = _libc_prctl()
    if prctl is None:
        return
    prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if (os.getppid() != parent) if parent is not None else (os.getppid() == 1):
        os._exit(1)                                      # the parent died before prctl took effect


def child_dies_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None] | None:
    """A ``preexec_fn`` for :mod:`subprocess` that makes the child die with this process (see
    :func:`die_with_parent`), or None where that is not possible. prctl is looked up here, before the fork."""
    if _libc_prctl() is None:
        return None
    parent = os.getpid()
    return lambda: die_with_parent(sig, parent)


def owner_tag() -> str:
    """``<host hash>-<pid>``: names a temporary file after the process that owns it (see :func:`remove_stale`)."""
    return f"{zlib.crc32(socket.gethostname().encode()):08x}-{os.getpid()}"


#: the owner tag inside a regular expression: named groups ``host`` and ``pid``.
TAG_RE = r"(?P<host>[0-9a-f]{8})-(?P<pid>\d+)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:                              # someone else's process
        return True
    return True


def remove_stale(folder: str | os.PathLike, pattern: str) -> list[Path]:
    """Remove the files and directories in ``folder`` whose whole name matches the regular expression
    ``pattern`` (which holds :data:`TAG_RE`) and whose owner was a process of this host that no longer runs (a run
    killed before it could clean up). Returns what was removed; anything that cannot be read or removed is left
    alone."""
    host = owner_tag().split("-")[0]
    rx = re.compile(pattern)
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for e in entries:
        m = rx.fullmatch(e.name)
        if m is None or m.group("host") != host or _alive(int(m.group("pid"))):
            continue
        try:
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
        except OSError:
            continue
        removed.append(Path(e.path))
    if removed:
        logger.info("removed %d temporary file(s) left by an earlier run that was killed: %s", len(removed),
                    ", ".join(str(p) for p in removed[:3]) + (" ..." if len(removed) > 3 else ""))
    return removed
