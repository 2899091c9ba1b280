"""``xlpe align``: statistical word alignment with eflomal (+ symmetrisation), priors save/load."""

from __future__ import annotations

import argparse
import logging
import sys

from xlpe.align.eflomal import OUTPUT_METHODS, EflomalAligner
from xlpe.align.symmetrize import METHODS as SYM_METHODS
from xlpe.cli.flags import flag_message
from xlpe.errors import ConfigError, XlpeError
from xlpe.io.atomic import check_outputs

logger = logging.getLogger("xlpe.align")

#: EflomalAligner parameters whose flag is named otherwise (for error messages)
API_FLAGS = {"rel_iterations": "--length", "subword": "--subword-model", "verbose": "--eflomal-verbose"}


def _iterations_arg(text: str):
    try:
        parts = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or N1,N2,N3, got {text!r}") from None
    if len(parts) == 1:
        return parts[0]
    if len(parts) == 3:
        return tuple(parts)
    raise argparse.ArgumentTypeError(f"expected N or N1,N2,N3, got {text!r}")


def add_cli_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options of ``xlpe align`` (eflomal + symmetrisation) to ``parser``."""
    parser.add_argument("inputs", nargs="+", metavar="FILE",
                        help="either SRC TGT (two line-aligned files of space-separated tokens) or one file of "
                             "'src tokens ||| tgt tokens' lines")
    parser.add_argument("-o", "--out", default="-",
                        help="output Pharaoh file, one 'i-j ...' line per input line, written atomically; '-' = stdout "
                             "(default: %(default)s)")
    parser.add_argument("--forward-out", metavar="FILE",
                        help="also write the forward (source->target model) links, source-target orientation")
    parser.add_argument("--reverse-out", metavar="FILE",
                        help="also write the reverse (target->source model) links, source-target orientation")
    parser.add_argument("--scores-out", metavar="FILE",
                        help="also write eflomal's per-sentence scores, 'forward<TAB>reverse' per line (eflomal "
                             "gives no per-link scores)")
    parser.add_argument("--sym", metavar="METHOD", default="grow-diag-final-and",
                        choices=list(OUTPUT_METHODS) + ["gd", "gdf", "gdfa", "intersect"],
                        help="symmetrisation (Moses symal semantics): " + ", ".join(SYM_METHODS) +
                             "; or 'forward'/'reverse' for one direction (default: %(default)s)")
    parser.add_argument("--model", type=int, choices=(1, 2, 3), default=3,
                        help="eflomal model: 1 = IBM1, 2 = +HMM, 3 = +fertility (default: %(default)s)")
    parser.add_argument("--iterations", type=_iterations_arg, metavar="N|N1,N2,N3",
                        help="sampling iterations per model stage; unset = eflomal's corpus-size-based numbers, about "
                             "5000/sqrt(sentences) for the last stage and a quarter of that for the others")
    parser.add_argument("--length", type=float, default=1.0, metavar="X",
                        help="multiply eflomal's default iteration numbers by X (default: %(default)s)")
    parser.add_argument("--n-samplers", type=int, default=3, metavar="N",
                        help="independent eflomal samplers, run in parallel (1 to 64, default: %(default)s)")
    parser.add_argument("--null-prior", type=float, default=0.2, metavar="P",
                        help="eflomal's prior probability of a NULL link (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=None,
                        help="recorded only: eflomal 2.0 seeds itself from /dev/urandom and cannot be seeded")
    parser.add_argument("--priors-in", metavar="FILE",
                        help="align with these eflomal priors (from --priors-out, or eflomal-makepriors); "
                             "settings saved beside them (lowercasing, subwords) are reused")
    parser.add_argument("--priors-out", metavar="FILE",
                        help="align the whole input jointly and save priors estimated from it, to align new "
                             "text consistently later with --priors-in")
    parser.add_argument("--subword-model", metavar="FILE",
                        help="sentencepiece model (xlpe subword train): align pieces, output words "
                             "(a word pair is linked if any of its pieces are)")
    parser.add_argument("--tgt-subword-model", metavar="FILE",
                        help="separate sentencepiece model for the target side (unset: --subword-model for both)")
    parser.add_argument("--subword-output", action="store_true",
                        help="with --subword-model, write piece-level links instead of word-level ones")
    parser.add_argument("--lowercase", action="store_true",
                        help="lowercase tokens before aligning (output indices do not change)")
    parser.add_argument("--skip-bad", action="store_true",
                        help="write an empty line for an empty, malformed or too long (>=1024 tokens) input "
                             "line instead of stopping; the number skipped is reported")
    parser.add_argument("--index-base", type=int, choices=(0, 1), default=0,
                        help="index base of the output links; 0 as fast_align/eflomal (default: %(default)s)")
    parser.add_argument("--chunk-size", type=int, metavar="N",
                        help="align in independent eflomal jobs of N pairs (bounded memory; use with "
                             "--priors-in)")
    parser.add_argument("--tmp-dir", metavar="DIR", help="directory for temporary files (unset: the system temp dir)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars or summary")
    parser.add_argument("--eflomal-verbose", action="store_true", help="show eflomal's own progress output")
    return parser


def cli_main(args: argparse.Namespace) -> int:
    """Run ``xlpe align`` with parsed ``args``; returns the exit status (errors go to stderr)."""
    try:
        if len(args.inputs) not in (1, 2):
            raise ConfigError(f"give SRC TGT or one 'src ||| tgt' file, not {len(args.inputs)} files")
        if not args.quiet and not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, format="%(message)s")
        subword = None
        if args.subword_model or args.tgt_subword_model:
            if not args.subword_model:
                raise ConfigError("--tgt-subword-model needs --subword-model for the source side")
            subword = (args.subword_model if not args.tgt_subword_model
                       else (args.subword_model, args.tgt_subword_model))
        src, tgt = args.inputs[0], (args.inputs[1] if len(args.inputs) == 2 else None)
        check_outputs([args.out, args.forward_out, args.reverse_out, args.scores_out, args.priors_out],
                      [src, tgt, args.priors_in])          # before any alignment work
        options = dict(sym=args.sym, model=args.model, iterations=args.iterations, rel_iterations=args.length,
                       n_samplers=args.n_samplers, null_prior=args.null_prior, seed=args.seed,
                       chunk_size=args.chunk_size, skip_bad=args.skip_bad, quiet=args.quiet,
                       verbose=args.eflomal_verbose, tmp_dir=args.tmp_dir)
        if args.priors_in:
            # settings saved with the priors apply unless given explicitly on the command line
            if args.lowercase:
                options["lowercase"] = True
            if subword is not None:
                options["subword"] = subword
            if args.subword_output:
                options["subword_output"] = True
            al = EflomalAligner.load(args.priors_in, **options)
        else:
            al = EflomalAligner(lowercase=args.lowercase, subword=subword, subword_output=args.subword_output,
                                **options)
        fit = bool(args.priors_out)
        if fit and args.priors_in:
            logger.info("--priors-in and --priors-out: aligning with the given priors, saving priors "
                        "estimated from this run's links")
        stats = al.align_files(src, tgt, args.out, index_base=args.index_base, forward_out=args.forward_out,
                               reverse_out=args.reverse_out, scores_out=args.scores_out, fit=fit)
        if fit:
            al.save(args.priors_out)
        if not args.quiet:
            msg = f"xlpe align: {stats['pairs']} sentence pairs aligned ({al.sym}) in {stats['seconds']:.1f} s"
            if stats["skipped"]:
                first = ", ".join(f"{n} ({why})" for n, why in stats["skipped_lines"][:5])
                msg += f"; skipped {stats['skipped']} bad lines (first: {first})"
            print(msg, file=sys.stderr)
        return 0
    except XlpeError as e:
        msg = flag_message(str(e), getattr(args, "_parser", None), API_FLAGS) if isinstance(e, ConfigError) else e
        print(f"xlpe align: error: {msg}", file=sys.stderr)
        return 2 if isinstance(e, ConfigError) else 1

