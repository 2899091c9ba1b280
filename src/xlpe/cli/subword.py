"""``xlpe subword train|encode|decode`` — the command-line face of :mod:`xlpe.data.subword`."""

from __future__ import annotations

import argparse
import json

from xlpe.data.subword import SubwordModel, train_subwords
from xlpe.errors import ConfigError, FormatError
from xlpe.io.atomic import atomic_write, check_outputs
from xlpe.io.text import read_lines, tokenize


def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="subword_command", metavar="ACTION", required=True)
    t = sub.add_parser("train", help="train a sentencepiece model (joint vocabulary: give both sides' files)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--input", nargs="+", required=True, help="training text file(s), one sentence per line")
    t.add_argument("--model", required=True, help="output model path (e.g. spm.model)")
    t.add_argument("--vocab-size", type=int, default=8000, help="target vocabulary size")
    t.add_argument("--model-type", default="bpe", choices=["bpe", "unigram", "char", "word"],
                   help="sentencepiece model type")
    t.add_argument("--character-coverage", type=float, default=1.0, help="character coverage (0.9995 for CJK)")
    t.add_argument("--normalization", default="identity",
                   help="sentencepiece normalisation rule; 'identity' keeps tokens byte for byte (exact word maps)")
    t.add_argument("--no-byte-fallback", action="store_true", help="map unseen characters to <unk> instead of bytes")
    t.add_argument("--max-sentences", type=int, default=2_000_000, help="sample at most this many sentences")
    t.add_argument("--hard-vocab-limit", action="store_true", help="fail if the corpus cannot give --vocab-size pieces")
    e = sub.add_parser("encode", help="text -> pieces or ids (+ optional word map file)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    e.add_argument("--model", required=True, help="sentencepiece model")
    e.add_argument("--input", default="-", help="pre-tokenised text ('-' = stdin)")
    e.add_argument("--output", default="-", help="output file ('-' = stdout)")
    e.add_argument("--ids", action="store_true", help="write ids instead of pieces")
    e.add_argument("--word-map", help="also write, per line, the word index of every piece (0-based)")
    d = sub.add_parser("decode", help="pieces or ids -> detokenised text",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d.add_argument("--model", required=True, help="sentencepiece model")
    d.add_argument("--input", default="-", help="pieces or ids, one sentence per line ('-' = stdin)")
    d.add_argument("--output", default="-", help="output file ('-' = stdout)")
    d.add_argument("--ids", action="store_true", help="input lines are ids")


def cli_main(args: argparse.Namespace) -> int:
    if args.subword_command == "train":
        if args.max_sentences < 1 or args.vocab_size < 1:
            raise ConfigError("--vocab-size and --max-sentences must be >= 1")
        check_outputs([args.model], args.input)
        m = train_subwords(args.input, args.model, vocab_size=args.vocab_size, model_type=args.model_type,
                           character_coverage=args.character_coverage, normalization=args.normalization,
                           byte_fallback=not args.no_byte_fallback, max_sentences=args.max_sentences,
                           hard_vocab_limit=args.hard_vocab_limit)
        print(json.dumps({"model": args.model, "vocab_size": m.vocab_size}))
        return 0
    check_outputs([args.output, getattr(args, "word_map", None)], [args.input, args.model])
    m = SubwordModel.load(args.model)
    if args.subword_command == "encode":
        lines = (t for _, t in read_lines(args.input))
        with atomic_write(args.output) as out:
            wm = atomic_write(args.word_map) if args.word_map else None
            wf = wm.__enter__() if wm else None
            try:
                for enc in m.encode_many(lines):
                    out.write(" ".join(map(str, enc.ids) if args.ids else enc.pieces) + "\n")
                    if wf:
                        wf.write(" ".join(map(str, enc.word_of)) + "\n")
            except BaseException as exc:
                if wm:
                    wm.__exit__(type(exc), exc, exc.__traceback__)
                raise
            if wm:
                wm.__exit__(None, None, None)
        return 0
    with atomic_write(args.output) as out:
        for lineno, text in read_lines(args.input):
            toks = tokenize(text)
            if args.ids:
                try:
                    ids = [int(t) for t in toks]
                except ValueError:
                    raise FormatError("non-integer id", args.input, lineno, "space-separated ids") from None
                bad = [i for i in ids if not 0 <= i < m.vocab_size]
                if bad:
                    raise FormatError(f"id {bad[0]} is outside the vocabulary", args.input, lineno,
                                      f"ids in 0..{m.vocab_size - 1}")
                out.write(m.decode_ids(ids) + "\n")
            else:
                out.write(m.decode_pieces(toks) + "\n")
    return 0
