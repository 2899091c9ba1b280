"""The ``xlpe`` command line: one entry point whose sub-commands mirror the Python API.

Each sub-command's argument parsing lives in its own module ``xlpe/cli/<command>.py``, which provides
``add_cli_arguments(parser)`` and ``cli_main(args) -> int`` and calls the Python API; API modules hold no
argparse code. Modules are imported only when their command runs, so ``xlpe --help`` is instant and a command
never pays for torch unless it needs it.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
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
                   "recipes reproducing the papers' tables (xl-pe, structural-pe, dpe, cross-align)"),
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
    argv = list(sys.argv[1:] if argv is None else argv)
    parser, _ = build_parser(argv)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    if not getattr(args, "_main", None):
        parser.print_help()
        return 2
    from xlpe.io.process import Terminated, sigterm_as_interrupt
    try:
        with sigterm_as_interrupt():            # SIGTERM cleans up as Ctrl-C does (outputs, temp files, children)
            return int(args._main(args) or 0)
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
        # the reader of our output went away (`xlpe ... | head`): stop quietly, as Unix tools do; what is still
        # buffered goes nowhere, so that the interpreter's final flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141

