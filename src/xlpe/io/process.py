"""A killed run leaves nothing behind: SIGTERM handled like Ctrl-C, child processes that die with their parent,
and the temporary files of an earlier run that was killed (``kill -9``) removed by the next one.

Every command that starts worker processes does it here: :class:`WorkerPool` (the parser's and the preorderer's
workers) and :func:`become_worker` (the first call of any worker, e.g. a recipe's parallel stages) make workers that
stop with the command on SIGTERM, Ctrl-C or a closed pipe without a word, and die with it even when it is killed
with SIGKILL. :class:`FolderLock` keeps a second run out of a folder that a running one writes.

Temporary files and directories carry an owner tag (:func:`owner_tag`: a hash of the host name and the process
id) so that :func:`remove_stale` can tell the leftovers of a dead process from the files of a run that is still
going (on this host, or on another one that shares the folder).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import re
import shutil
import signal
import socket
import sys
import threading
import zlib
from multiprocessing.connection import wait
from pathlib import Path
from typing import Callable, Iterable, Iterator

from xlpe.errors import ConfigError, XlpeError

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


# -- worker processes ------------------------------------------------------------------------------------------------

_STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


#: seconds a worker stopped by SIGTERM has to clean up before SIGALRM ends it (see :func:`become_worker`)
CLEAN_UP_SECONDS = 20


def _terminate_once(signum, frame):
    # further SIGTERMs (from the parent, its pool, the parent's death) must not cut the clean-up short; an alarm
    # ends a clean-up that does not end
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if hasattr(signal, "alarm"):
        signal.alarm(CLEAN_UP_SECONDS)
    raise Terminated(f"terminated by signal {signum}")


def become_worker(parent: int | None = None, *, clean_up: bool = False) -> None:
    """The first call of a worker process, so that it ends with the command that started it, quietly: Ctrl-C
    (SIGINT, which reaches the whole process group) is left to the parent, which stops its workers; the parent's
    death, even by SIGKILL, ends it (:func:`die_with_parent`; ``parent``: its pid); SIGTERM ends it at once and
    without a word, or (``clean_up=True``, a worker that writes outputs) raises :class:`Terminated` once, so that
    its atomic writes and temporary files clean up as the main process's do (later SIGTERMs are ignored, and
    SIGALRM ends a clean-up that takes over :data:`CLEAN_UP_SECONDS`); the parent's death then sends it SIGTERM
    rather than SIGKILL for the same reason."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _terminate_once if clean_up else signal.SIG_DFL)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)     # blocked by the parent around the fork
    die_with_parent(signal.SIGTERM if clean_up else signal.SIGKILL, parent)


@contextlib.contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """SIGINT and SIGTERM held back (not lost) while a worker is forked, so that the child never runs the parent's
    handler (a traceback of :class:`Terminated` in the worker) before :func:`become_worker` replaces it."""
    if not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def stop_signals_deferred() -> Iterator[None]:
    """SIGINT and SIGTERM put off inside the block and handled as it ends, by the handlers they had: a training
    update that Ctrl-C interrupts completes first, so the stop lands between updates. Python-level (a signal
    mask would not do: the kernel hands a process's signal to any thread that does not block it, e.g. one of
    torch's). Outside the main thread (where signals are handled) it puts off nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    old = {s: signal.signal(s, lambda signum, frame: caught.append(signum)) for s in _STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):
            handler = old[s]
            if callable(handler):
                handler(s, None)
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), s)


def start_method() -> str:
    """``fork`` where there is one (workers share the parent's loaded model without pickling it), else
    ``spawn``."""
    return "fork" if "fork" in mp.get_all_start_methods() else "spawn"


class WorkerError(XlpeError):
    """A worker process ended without answering (killed, out of memory), or its error could not be sent back."""


def _portable(e: BaseException) -> BaseException:
    """``e`` if it survives pickling (to be raised again in the parent), else a :class:`WorkerError` saying it."""
    try:
        pickle.loads(pickle.dumps(e))
        return e
    except Exception:
        return WorkerError(f"a worker failed: {type(e).__name__}: {e}")


def _serve(conn, parent: int, fn: Callable, initializer: Callable | None, initargs: tuple, inherited: list) -> None:
    """A worker of :class:`WorkerPool`: ``(item,)`` in, ``(True, fn(item))`` or ``(False, error)`` out, until
    ``None`` or the parent's end closes."""
    for c in inherited:                  # forked copies of the parent's pipe ends: EOF comes when the parent's close
        c.close()
    become_worker(parent)
    failed = None
    if initializer is not None:
        try:
            initializer(*initargs)
        except Exception as e:
            failed = _portable(e)
    try:
        while (msg := conn.recv()) is not None:
            if failed is not None:
                reply = (False, failed)
            else:
                try:
                    reply = (True, fn(msg[0]))
                except Exception as e:
                    reply = (False, _portable(e))
            try:
                conn.send(reply)
            except (pickle.PicklingError, TypeError, AttributeError) as e:
                conn.send((False, WorkerError(f"a worker's result cannot be sent back: {e}")))
    except (EOFError, OSError):          # the parent went away: nobody to answer
        pass


class WorkerPool:
    """``processes`` worker processes applying ``fn`` to the items of :meth:`map`, the results in input order;
    ``initializer(*initargs)`` runs first in each. Use it as a context manager.

    Unlike :class:`multiprocessing.pool.Pool`: the workers (:func:`become_worker`) print nothing when they are
    stopped and die with their parent, even when it is killed with SIGKILL; leaving the ``with`` block by an
    exception (an error, Ctrl-C, SIGTERM raised as :class:`Terminated`, a closed output pipe) stops them all at once;
    and a worker that dies (killed, out of memory) is a :class:`WorkerError`, not a hang. An error raised by ``fn``
    is raised again in the parent. Where workers are spawned rather than forked (:func:`start_method`), ``fn``,
    ``initializer`` and the items must be picklable (module-level functions)."""

    def __init__(self, fn: Callable, processes: int, *, initializer: Callable | None = None, initargs: tuple = ()):
        if processes < 1:
            raise ConfigError(f"processes must be >= 1, not {processes}")
        ctx = mp.get_context(start_method())
        self._workers: list = []                 # (process, connection)
        self._busy: dict = {}                    # connection -> index of the item it works on
        try:
            for k in range(processes):
                here, there = ctx.Pipe()
                others = [here] + [c for _, c in self._workers]        # the parent's ends, which the child closes
                proc = ctx.Process(target=_serve, name=f"xlpe-worker-{k + 1}", daemon=True,
                                   args=(there, os.getpid(), fn, initializer, initargs, others))
                with _stop_signals_blocked():
                    proc.start()
                there.close()
                self._workers.append((proc, here))
        except BaseException:
            self.terminate()
            raise

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None and not self._busy:
            self.close()
        else:
            self.terminate()

    def map(self, items: Iterable, *, ahead: int = 2) -> Iterator:
        """``fn(item)`` for every item, in order. A worker holds one item at a time (it is never sent one while it
        may be writing a result, so large items and results cannot deadlock the pipes); at most ``ahead`` results
        per worker wait for an earlier one."""
        if self._busy:
            raise RuntimeError("a WorkerPool runs one map at a time (an abandoned one leaves its workers busy)")
        items = iter(items)
        idle = [c for _, c in self._workers]
        done: dict[int, tuple] = {}
        sent = given = 0
        more = True
        limit = max(1, ahead) * len(self._workers)
        while True:
            while more and idle and sent - given < limit:
                item = next(items, _END)
                if item is _END:
                    more = False
                    break
                conn = idle.pop()
                conn.send((item,))
                self._busy[conn] = sent
                sent += 1
            while given in done:
                ok, value = done.pop(given)
                given += 1
                if not ok:
                    raise value
                yield value
            if not self._busy:
                if not more:
                    return
                continue
            for conn in wait(list(self._busy)):
                k = self._busy.pop(conn)
                try:
                    done[k] = conn.recv()
                except (EOFError, OSError):
                    raise self._died(conn) from None
                idle.append(conn)

    def _died(self, conn) -> WorkerError:
        proc = next(p for p, c in self._workers if c is conn)
        proc.join(1)
        code = proc.exitcode
        how = (f"was killed by {signal.Signals(-code).name}" if code is not None and code < 0 and -code in
               signal.valid_signals() else f"ended (exit code {code})")
        return WorkerError(f"worker process {proc.pid} {how} before it answered" +
                           (" (out of memory?)" if code == -signal.SIGKILL else ""))

    def close(self, timeout: float = 10.0) -> None:
        """Let the workers finish and end (those that do not within ``timeout`` seconds are stopped)."""
        for _, conn in self._workers:
            with contextlib.suppress(OSError):
                conn.send(None)
        for proc, _ in self._workers:
            proc.join(timeout)
        self.terminate()

    def terminate(self) -> None:
        """Stop every worker now (SIGTERM, then SIGKILL for one that does not end within a second) and wait for
        them."""
        for proc, _ in self._workers:
            if proc.exitcode is None:
                with contextlib.suppress(OSError):
                    proc.terminate()
        for proc, conn in self._workers:
            proc.join(1)
            if proc.exitcode is None:
                proc.kill()
                proc.join()
            conn.close()
        self._workers, self._busy = [], {}


_END = object()


# -- a folder one run writes at a time -------------------------------------------------------------------------------

#: the lock file a training run (``xlpe train``, ``xlpe crossalign train``) holds in its output folder
RUN_LOCK = ".run.lock"


class FolderLock:
    """An exclusive lock of ``folder`` (``fcntl.flock`` of the file ``name`` in it), held until :meth:`release`
    or the end of this process, however it ends. When another process holds it, a :class:`ConfigError` says which
    (its pid and host, written in the lock file) and that ``what`` is running there. Where there are no locks
    (Windows, some network file systems) nothing is locked and a warning says so."""

    def __init__(self, folder: str | os.PathLike, name: str = ".run.lock", what: str = "run"):
        self.path = Path(folder) / name
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:
            return
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
            os.close(fd)
            raise ConfigError(f"{folder} is in use: another {what} writes there ({_holder(holder)}); wait for it to "
                              "end, or choose another folder") from None
        except OSError as e:
            os.close(fd)
            logger.warning("cannot lock %s (%s): make sure no other %s writes into %s", self.path, e, what, folder)
            return
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Release the lock (the lock file stays: removing it would let two processes lock two different files).
        A lock that is no longer referenced is released too."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    __del__ = release


def lock_run_folder(folder: Path, what: str, *, main: bool = True, share=lambda refused: refused
                    ) -> FolderLock | None:
    """The main process (``main``; rank 0 of a ``torchrun`` job) makes ``folder`` and locks it (:data:`RUN_LOCK`);
    ``share`` gives its refusal to every rank (``Distributed.broadcast``), so that a folder another run writes is a
    :class:`ConfigError` on every rank before anything is written. Returns the main process's lock."""
    lock, refused = None, None
    if main:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            lock = FolderLock(folder, RUN_LOCK, what)
        except ConfigError as e:
            refused = str(e)
    refused = share(refused)
    if refused:
        raise ConfigError(refused)
    return lock


def _holder(fields: list[str]) -> str:
    """Who holds a lock, from its file's ``pid host`` (a dead pid of this host: an earlier holder's, not yet
    overwritten)."""
    here = len(fields) < 2 or fields[1] == socket.gethostname()
    if not fields or not fields[0].isdigit() or (here and not _alive(int(fields[0]))):
        return "a process that has not yet written its pid"
    return f"process {fields[0]}" + (" on this host" if here else f" on host {fields[1]}")
