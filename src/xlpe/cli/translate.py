"""``xlpe translate``: beam or greedy decoding of a file or stdin (:func:`xlpe.infer.translate.translate_file`)."""

from __future__ import annotations

import argparse
import logging

from xlpe.cli.shortcuts import add_shortcut_arguments, sources_from_args
from xlpe.config import check_workers, parse_pairs
from xlpe.errors import ConfigError
from xlpe.infer.beam import STOP_RULES
from xlpe.infer.shortlist import FREQUENT, PER_SOURCE
from xlpe.infer.translate import Decoding, translate_file
from xlpe.runtime import device_policy, limit_onednn_caches, resolve_device, retain_freed_memory, set_threads

log = logging.getLogger("xlpe.translate")


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, nargs="+",
                   help="checkpoint file (checkpoint_<step>.pt / checkpoint_best.pt); several are averaged")
    p.add_argument("--input", default="-", help="input text, one pre-tokenised sentence a line ('-' = stdin)")
    p.add_argument("--output", default="-", help="output file ('-' = stdout); written atomically")
    p.add_argument("--beam", type=int, default=None, help="beam size (default 5; not with --greedy)")
    p.add_argument("--greedy", action="store_true", help="greedy decoding instead of beam search")
    p.add_argument("--beam-stop", default="exhaust", choices=STOP_RULES,
                   help="beam stopping rule: fairseq (keep BEAM live, stop at BEAM finished) or exhaust (shrinking "
                        "beam, run until no live hypothesis is left)")
    p.add_argument("--lenpen", type=float, default=0.6,
                   help="length penalty alpha: scores are logprob / length**alpha (fairseq style)")
    p.add_argument("--max-len-a", type=float, default=1.2, help="output length limit a·S + b, S = source subwords")
    p.add_argument("--max-len-b", type=float, default=10, help="output length limit a·S + b")
    p.add_argument("--batch-size", type=int, default=64, help="most sentences per batch")
    p.add_argument("--max-tokens", type=int, default=None, help="most padded source tokens per batch (optional)")
    p.add_argument("--chunk-size", type=int, default=10000, help="lines read, translated and written at a time")
    add_shortcut_arguments(p, "the input")
    p.add_argument("--preorder-processes", type=int, default=1, help="processes for the on-the-fly preorderer")
    p.add_argument("--channel", action="append", default=[], metavar="NAME=[KIND:]PATH",
                   help="a channel source of the input (repeatable); kinds: orders, subword-orders, dpe, ints, "
                        "conllu, preorderer (see xlpe.sources)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--workers", type=int, default=1,
                   help="batches decoded at once, each on its own thread, the --threads divided among them (CPU; "
                        "more throughput for small models)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16", "int8"),
                   help="weight type while decoding: bfloat16 (on CPU the linear layers as bf16 products) is "
                        "faster on CPUs with bf16 instructions (float16: GPU only; int8: the linear layers "
                        "dynamically quantised, CPU only)")
    p.add_argument("--shortlist", default=None, metavar="TABLE",
                   help="score only a vocabulary shortlist per batch (faster, approximate; off by default): the "
                        "table of each source piece's likely target pieces (xlpe.infer.shortlist)")
    p.add_argument("--shortlist-build", nargs=2, default=None, metavar=("TRAIN_SRC", "TRAIN_TGT"),
                   help="build the --shortlist table from this training text when it does not exist yet")
    p.add_argument("--shortlist-size", nargs=2, type=int, default=[PER_SOURCE, FREQUENT],
                   metavar=("PER_SOURCE", "FREQUENT"),
                   help="when building: target pieces kept per source piece, most frequent target pieces always "
                        "kept")
    p.add_argument("--progress", action="store_true", help="show a progress bar on stderr")
    p.add_argument("--skip-long", action="store_true",
                   help="write an empty line for a line longer than the model's limit (counted in a warning) "
                        "instead of stopping with an error")


def cli_main(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    check_workers(args.preorder_processes, "--preorder-processes")
    policy = device_policy(resolve_device(args.device))        # CPU: the allocator and oneDNN settings
    if policy.retain_freed_memory:
        retain_freed_memory()     # no page faults for each step's megabyte-sized blocks (docs/results/speed.md)
    if policy.limit_onednn_caches:
        limit_onednn_caches()     # --dtype bfloat16: else oneDNN keeps a primitive per step shape (speed.md)
    channels = parse_pairs(args.channel, "--channel")
    if args.shortlist_build and not args.shortlist:
        raise ConfigError("--shortlist-build needs --shortlist TABLE (where the table is written)")
    if args.greedy and args.beam is not None:
        raise ConfigError("--greedy decodes without a beam: leave out --beam, or drop --greedy")
    decoding = Decoding(beam=5 if args.beam is None else args.beam, lenpen=args.lenpen, max_len_a=args.max_len_a,
                        max_len_b=args.max_len_b, batch_size=args.batch_size, max_tokens=args.max_tokens,
                        greedy=args.greedy, beam_stop=args.beam_stop, dtype=args.dtype, workers=args.workers)
    n = translate_file(args.checkpoint, args.input, args.output, decoding=decoding, sources=sources_from_args(args),
                       channels=channels, preorder_processes=args.preorder_processes, chunk_size=args.chunk_size,
                       device=args.device, progress=args.progress, skip_long=args.skip_long,
                       shortlist=args.shortlist, shortlist_build=args.shortlist_build,
                       shortlist_size=tuple(args.shortlist_size))
    log.info("translated %d lines", n)
    return 0
