"""The ``xlpe`` command line: one entry point whose sub-commands mirror the Python API.

Each sub-command's argument parsing lives in its own module ``xlpe/cli/<command>.py``, which provides
``add_cli_arguments(parser)`` and ``cli_main(args) -> int`` and calls the Python API; API modules hold no
argparse code. Modules are imported only when their command runs, so ``xlpe --help`` is instant and a command
never pays for torch unless it needs it.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import importlib
import logging
import os
import re
import sys

from xlpe import __version__
from xlpe.cli.flags import flag_message
from xlpe.errors import ConfigError, XlpeError

# name -> (module, one-line help). The order is the data flow of DESIGN.md.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("xlpe.cli.demo", "the main job: the whole pipeline on the built-in synthetic language pair"),
    "synth": ("xlpe.cli.synth", "generate a built-in synthetic language pair (text, gold alignments, trees, orders)"),
    "subword": ("xlpe.cli.subword", "sentencepiece subwords: train | encode | decode (with word maps)"),
    "align": ("xlpe.cli.align", "statistical word alignment with eflomal (+ symmetrisation)"),
    "crossalign": ("xlpe.cli.crossalign", "Cross-Align neural word aligner: train (TLM, SSA) | align"),
    "aer": ("xlpe.cli.aer", "alignment error rate, precision and recall against a gold file"),
    "parse": ("xlpe.cli.parse", "dependency trees of tokenised text with spaCy (tokens kept) -> CoNLL-U; UAS/LAS"),
    "orders": ("xlpe.cli.orders", "alignments -> oracle ranks, permutations, pos_XL, DPE targets"),
    "preorder": ("xlpe.cli.preorder", "BTG preorderer: train | apply (lader formats)"),
    "train": ("xlpe.cli.train", "NMT training (single process, or torchrun for DDP)"),
    "average": ("xlpe.cli.average", "average the weights of several checkpoints (e.g. the last N of a run)"),
    "translate": ("xlpe.cli.translate", "translate files or stdin with a trained model (beam / greedy)"),
    "export": ("xlpe.cli.export", "a trained model as a CTranslate2 model directory (fast CPU/GPU inference)"),
    "align-from-model": ("xlpe.cli.align_from_model",
                         "word alignments from a trained model's attention (AER protocol, SPEC §4.6)"),
    "evaluate": ("xlpe.cli.evaluate",
                 "BLEU / chrF with signatures and paired bootstrap; Kendall tau / chunk for orders"),
    "experiment": ("xlpe.cli.experiment",
                   "recipes reproducing the papers' tables (xl-pe, structural-pe, dpe, cross-align) and comparing "
                   "every encoding (compare)"),
}


def build_parser(argv: list[str]) -> tuple[argparse.ArgumentParser, dict]:
    cmds = COMMANDS
    parser = argparse.ArgumentParser(
        prog="xlpe", description="Word-order-aware neural machine translation toolkit. "
        "Every sub-command is also a function of the Python API with the same options.")
    parser.add_argument("--version", action="version", version=f"xlpe {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (mod, help_) in cmds.items():
        p = sub.add_parser(name, help=help_, description=help_,
                           formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        if name == chosen:
            module = importlib.import_module(mod)
            module.add_cli_arguments(p)
            p.set_defaults(_main=module.cli_main, _parser=p, _api_flags=getattr(module, "API_FLAGS", {}))
    return parser, cmds


def main(argv: list[str] | None = None) -> int:
    """Run ``xlpe ARGV``; returns the exit status.

    0 on success; 1 for an error, reported in one line on standard error: a bad input or option
    (``xlpe COMMAND: error: ...``) or an operating-system error such as a full disk, a folder that cannot be
    written, a symlink loop or a closed standard stream (``xlpe COMMAND: PATH: strerror (ENAME)``); 2 for a bad
    command line; 130 on Ctrl-C (SIGINT); 143 on SIGTERM; 141 (128 + SIGPIPE, what a shell reports for a tool
    that SIGPIPE ended) without a message when the reader of the standard output went away (``xlpe ... | head``).
    No error leaves a traceback, a partial output or a temporary file (:mod:`xlpe.io.atomic`).
    """
    _guard_std_streams()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, _ = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    stdout = sys.stdout
    if stdout is not None and stdout is sys.__stdout__:
        sys.stdout = _NamedStdout(stdout)
    try:
        return _run(args)
    finally:
        if isinstance(sys.stdout, _NamedStdout):
            sys.stdout = stdout


def _run(args: argparse.Namespace) -> int:
    """Run the command of ``args``; every error it raises becomes one line on standard error and an exit
    status (:func:`main`)."""
    from xlpe.io.process import Terminated, sigterm_as_interrupt
    try:
        with sigterm_as_interrupt():            # SIGTERM cleans up as Ctrl-C does (outputs, temp files, children)
            code = int(args._main(args) or 0)
            _flush_stdout()
            return code
    except XlpeError as e:
        msg = flag_message(str(e), args._parser, args._api_flags) if isinstance(e, ConfigError) else str(e)
        print(f"xlpe {args.command}: error: {msg}", file=sys.stderr)
        return 1
    except Terminated:
        print(f"xlpe {args.command}: terminated (SIGTERM): stopped and cleaned up, no output half-written",
              file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print(f"xlpe {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader of our output went away (`xlpe ... | head`): stop quietly, as Unix tools do
        _stdout_failed()
        return 141
    except OSError as e:
        _stdout_failed()
        print(f"xlpe {args.command}: {os_error_message(_symlink_loop_behind(e))}", file=sys.stderr)
        return 1
    except RuntimeError as e:
        loop = _symlink_loop(e)
        if loop is None:
            raise
        print(f"xlpe {args.command}: {os_error_message(loop)}", file=sys.stderr)
        return 1


def os_error_message(e: OSError) -> str:
    """``PATH: strerror (ENAME)`` for an :class:`OSError` (``PATH -> PATH2`` for one of two paths; without a
    path or an errno, what there is)."""
    where = [os.fsdecode(p) if isinstance(p, (str, bytes)) else str(p)
             for p in (e.filename, e.filename2) if p is not None]
    text = e.strerror or str(e) or type(e).__name__
    name = errno.errorcode.get(e.errno) if isinstance(e.errno, int) else None
    return (" -> ".join(where) + ": " if where else "") + text + (f" ({name})" if name else "")


def _symlink_loop(e: RuntimeError) -> OSError | None:
    """The ``ELOOP`` error that :meth:`pathlib.Path.resolve` reports as ``RuntimeError("Symlink loop from
    PATH")`` (before Python 3.13), or None for any other ``RuntimeError``."""
    m = re.fullmatch(r"Symlink loop from (['\"])(.*)\1", str(e), re.S)
    return None if m is None else OSError(errno.ELOOP, os.strerror(errno.ELOOP), m.group(2))


def _symlink_loop_behind(e: OSError) -> OSError:
    """The ``ELOOP`` error of a path that ``mkdir`` reports as existing (``EEXIST``) because it is a symlink
    loop; any other error as it is."""
    if e.errno != errno.EEXIST or e.filename is None:
        return e
    try:
        os.stat(e.filename)
    except OSError as loop:
        if loop.errno == errno.ELOOP:
            return loop
    return e


class _NamedStdout:
    """Standard output whose write errors name it (``<stdout>``): what ``print`` raises on a full device names
    no file."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as e:
            raise _named_stdout(e)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as e:
            raise _named_stdout(e)

    def __getattr__(self, attr: str):
        return getattr(self._stream, attr)


def _named_stdout(e: OSError) -> OSError:
    if e.filename is None:
        e.filename = "<stdout>"
    return e


class _ClosedStream:
    """What a standard stream that was closed when xlpe started (``xlpe ... >&-``) is in ``sys``: reading or
    writing it is the error ``EBADF`` naming it; there is nothing to flush."""

    closed = True

    def __init__(self, name: str):
        self.name = name

    def flush(self) -> None:
        pass

    def __getattr__(self, attr: str):
        raise OSError(errno.EBADF, f"standard {self.name[1:-1].replace('std', '')}put is closed", self.name)


def _guard_std_streams() -> None:
    """Give a standard descriptor that is closed /dev/null, so that no file this process opens takes its number
    (and receives what a library prints there); ``sys.stdin``/``sys.stdout`` then raise ``EBADF`` when used
    (:class:`_ClosedStream`), and a closed standard error silences the messages."""
    for fd, name in ((0, "stdin"), (1, "stdout"), (2, "stderr")):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, os.O_RDWR)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
        if fd == 2:
            sys.stderr = open(fd, "w", closefd=False)
        else:
            setattr(sys, name, _ClosedStream(f"<{name}>"))


def _flush_stdout() -> None:
    """Flush standard output now, where a failure (a full device) is reported like any error."""
    try:
        sys.stdout.flush()
    except OSError as e:
        raise _named_stdout(e)


def _stdout_failed() -> bool:
    """Whether standard output cannot take what it still buffers (a closed pipe, a full device); if so it is
    pointed at /dev/null, so that the interpreter's final flush does not fail again."""
    try:
        sys.stdout.flush()
        return False
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return True
