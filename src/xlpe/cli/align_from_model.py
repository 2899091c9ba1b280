"""``xlpe align-from-model``: word alignments from a trained model's attention (SPEC §4.6), scored against a
gold file, with heat maps (:func:`xlpe.infer.attention_align.align_from_model_files`)."""

from __future__ import annotations

import argparse
import logging

from xlpe.cli.shortcuts import add_shortcut_arguments, sources_from_args
from xlpe.config import parse_pairs
from xlpe.infer.attention_align import MERGES, GoldFile, Heatmaps, align_from_model_files
from xlpe.runtime import set_threads

log = logging.getLogger("xlpe.align_from_model")


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, nargs="+",
                   help="checkpoint file (checkpoint_<step>.pt / checkpoint_best.pt); several are averaged")
    p.add_argument("--src", required=True, help="source text, one pre-tokenised sentence a line")
    p.add_argument("--tgt", required=True, help="reference target text, line-aligned with --src (force-decoded)")
    p.add_argument("--out", required=True, help="output word alignments, Pharaoh 'i-j' (0-based); written atomically")
    p.add_argument("--gold", default=None, help="gold alignments to score against (i-j sure, ipj possible)")
    p.add_argument("--gold-base", type=int, choices=(0, 1), default=None,
                   help="index base of the gold file (required with --gold; most gold sets, e.g. RWTH De-En, are 1)")
    p.add_argument("--gold-reverse", action="store_true",
                   help="swap the gold file's sides (e.g. the De-En RWTH gold scored for an En-De model)")
    p.add_argument("--layer", type=int, default=-2,
                   help="decoder layer whose encoder-decoder attention is used (0-based, negative from the top; "
                        "-2 = penultimate, SPEC §4.6)")
    p.add_argument("--merge", choices=MERGES, default="any",
                   help="subword -> word rule: 'any' (words linked if any subword pair is) or 'attn_merge' "
                        "(sum attention over source subwords, mean over target subwords, then argmax)")
    add_shortcut_arguments(p, "the source")
    p.add_argument("--channel", action="append", default=[], metavar="NAME=[KIND:]PATH",
                   help="a channel source of the source side (repeatable; see xlpe.sources)")
    p.add_argument("--heatmaps", default=None, help="folder for PNG heat maps of the attention (optional)")
    p.add_argument("--heatmap-count", type=int, default=10, help="how many sentences (the first N) get a heat map")
    p.add_argument("--heatmap-level", choices=("word", "subword"), default="word",
                   help="heat maps per word (attn_merge matrix) or per subword (raw matrix with EOS)")
    p.add_argument("--report", default=None, help="JSON report: options, counts, AER/P/R, versions")
    p.add_argument("--batch-size", type=int, default=64, help="most sentence pairs per batch")
    p.add_argument("--max-tokens", type=int, default=None, help="most padded tokens per batch (optional)")
    p.add_argument("--chunk-size", type=int, default=10000, help="lines read, aligned and written at a time")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")


def cli_main(args: argparse.Namespace) -> int:
    set_threads(args.threads)
    channels = parse_pairs(args.channel, "--channel")
    gold = GoldFile(args.gold, args.gold_base, args.gold_reverse) if args.gold is not None else None
    heatmaps = Heatmaps(args.heatmaps, args.heatmap_count, args.heatmap_level) if args.heatmaps is not None else None
    s = align_from_model_files(args.checkpoint, args.src, args.tgt, args.out, gold=gold, layer=args.layer,
                               merge=args.merge, sources=sources_from_args(args), channels=channels,
                               heatmaps=heatmaps, report=args.report, batch_size=args.batch_size,
                               max_tokens=args.max_tokens, chunk_size=args.chunk_size, device=args.device)
    log.info("aligned %d sentence pairs -> %s", s["sentences"], s["out"])
    if s["aer"] is not None:
        a = s["aer"]
        print(f"AER {100 * a['aer']:.2f} (P {100 * a['precision']:.2f} / R {100 * a['recall']:.2f} / "
              f"|A| {a['n_hyp']})  [{a['sentences']} sentences, layer {args.layer}, merge {args.merge}]")
    return 0
