"""Translate text with a trained model: lines in memory, files, or standard input.

* :func:`translate_data` decodes an encoded :class:`~xlpe.data.batching.ParallelData` (batches of similar
  length, beam or greedy from :mod:`xlpe.infer.beam`) and returns detokenised hypotheses in data order.
* :func:`translate_lines` takes raw lines (pre-tokenised, words split on ASCII space) and returns exactly
  one output line per input line, in input order; an empty input line gives an empty output line. Line-break
  characters inside a hypothesis (a byte-fallback vocabulary can produce ``\r``) become spaces.
* :func:`translate_file` streams a file (``-`` = stdin) in chunks of ``chunk_size`` lines, so memory stays
  flat however long the input is, and writes the output atomically (or to stdout with ``-``).

A source line longer than the model's ``max_len`` (subwords + EOS) is a :class:`FormatError` naming the
file and line. Position channels that the model reads from the input (``xl`` from a preorderer's order
file, other per-word integer channels) are passed per line, like the training data's.
"""

from __future__ import annotations

import argparse
import logging
import os
from itertools import islice
from typing import Iterable, Iterator, Mapping, Sequence

import torch

from xlpe.data.batching import ParallelData, TokenBatchSampler, collate, read_channel_file
from xlpe.data.subword import SubwordModel
from xlpe.errors import ConfigError, FormatError
from xlpe.infer.beam import STOP_RULES
from xlpe.io.text import read_lines

log = logging.getLogger(__name__)

Subwords = SubwordModel | tuple[SubwordModel, SubwordModel]


def _sides(subwords: Subwords) -> tuple[SubwordModel, SubwordModel]:
    if isinstance(subwords, SubwordModel):
        return subwords, subwords
    src, tgt = subwords
    return src, tgt or src


def _model_device(model: torch.nn.Module) -> torch.device:
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


def resolve_device(device: str | torch.device) -> torch.device:
    """``auto`` -> CUDA when available, else CPU; anything else as torch reads it."""
    if isinstance(device, str) and device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def translate_data(model: torch.nn.Module, data: ParallelData, tgt_subword: SubwordModel, *, beam: int = 5,
                   lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10, batch_size: int = 64,
                   max_tokens: int | None = None, greedy: bool = False, beam_stop: str = "exhaust",
                   device: torch.device | str | None = None) -> list[str]:
    """Decode every source sentence of ``data``; returns detokenised strings in the order of ``data``.

    Batches hold at most ``batch_size`` sentences and (when given) ``max_tokens`` padded source tokens;
    sentences are sorted by length to keep padding low, and the output order is restored.
    """
    from xlpe.infer.beam import beam_search, greedy as greedy_search

    device = torch.device(device) if device is not None else _model_device(model)
    lengths = data.src_lengths
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    longest = int(lengths.max())
    budget = longest * batch_size if max_tokens is None else max(max_tokens, longest)
    out: list[str | None] = [None] * len(data)
    sampler = TokenBatchSampler(lengths, budget, max_sentences=batch_size, shuffle=False, bucket=True)
    for idx in sampler:
        items = [data[i] for i in idx]
        for it in items:
            it.tgt = None                       # decoding needs the source side only
        b = collate(items).to(device)
        if greedy:
            hyps = greedy_search(model, b.src, b.channels, max_len_a=max_len_a, max_len_b=max_len_b)
        else:
            hyps = beam_search(model, b.src, b.channels, beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                               max_len_b=max_len_b, stop=beam_stop)
        for i, h in zip(idx, hyps):
            out[i] = tgt_subword.decode_ids(h.tokens)
    return out  # type: ignore[return-value]


def translate_lines(model: torch.nn.Module, subwords: Subwords, lines: Iterable[str], *, beam: int = 5,
                    lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10, batch_size: int = 64,
                    max_tokens: int | None = None, greedy: bool = False, beam_stop: str = "exhaust",
                    channels: Mapping[str, Sequence] | None = None, channel_level: str | Mapping[str, str] = "word",
                    device: torch.device | str | None = None, source_name: str = "<input>",
                    first_line: int = 1) -> list[str]:
    """Translate raw lines; exactly one output per input line, in input order (empty in, empty out).

    Args:
        model: a Transformer (e.g. from :func:`xlpe.train.checkpoint.load_model`).
        subwords: the joint subword model, or ``(source, target)`` models.
        lines: pre-tokenised sentences (a trailing newline is ignored).
        beam, lenpen, max_len_a, max_len_b: beam-search settings (:func:`xlpe.infer.beam.beam_search`).
        batch_size: most sentences per batch; ``max_tokens``: optional cap on padded source tokens per batch.
        greedy: greedy decoding instead of beam search; ``beam_stop``: the beam's stopping rule
            (``fairseq`` | ``exhaust``, see :mod:`xlpe.infer.beam`).
        channels: position channels per line (name -> one item per line, e.g. ``pos_XL`` lists), see
            :meth:`xlpe.data.batching.ParallelData.from_sentences`.
        source_name, first_line: how errors name the input (``file:line``).
    """
    src_sw, tgt_sw = _sides(subwords)
    lines = [l.rstrip("\n").rstrip("\r") for l in lines]
    keep = [i for i, l in enumerate(lines) if l.strip(" ")]
    out = [""] * len(lines)
    if not keep:
        return out
    ch = {k: [v[i] for i in keep] for k, v in (channels or {}).items()}
    for k, v in (channels or {}).items():
        if len(v) != len(lines):
            raise ConfigError(f"channel {k!r} has {len(v)} items for {len(lines)} lines")
    try:
        data = ParallelData.from_sentences([lines[i] for i in keep], None, src_sw, None,
                                           max_src_len=model.cfg.max_len, channels=ch, channel_level=channel_level,
                                           names=(source_name, None))
    except FormatError as e:
        line = None if e.line is None else first_line + keep[e.line - 1]
        raise FormatError(e.message, source_name, line, e.expected) from None
    hyps = translate_data(model, data, tgt_sw, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
                          batch_size=batch_size, max_tokens=max_tokens, greedy=greedy, beam_stop=beam_stop,
                          device=device)
    for i, h in zip(keep, hyps):
        out[i] = one_line(h)
    return out


#: characters that end a line for Python's ``str.splitlines`` or universal-newline reading
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """``text`` with every line-break character replaced by a space (a byte-fallback model can generate them),
    so that an output file keeps exactly one line per input line."""
    return text.translate(_LINE_BREAKS)


def translate_file(checkpoint: str | os.PathLike | Sequence[str | os.PathLike], input: str | os.PathLike = "-",
                   output: str | os.PathLike = "-", *, beam: int = 5, lenpen: float = 0.6, max_len_a: float = 1.2,
                   max_len_b: float = 10, batch_size: int = 64, max_tokens: int | None = None, greedy: bool = False,
                   beam_stop: str = "exhaust", chunk_size: int = 10000, orders: str | None = None,
                   orders_level: str = "word",
                   preorderer: str | os.PathLike | None = None, preorder_processes: int = 1,
                   channels: Mapping[str, str] | None = None, device: str = "auto", progress: bool = False) -> int:
    """Translate ``input`` (``-`` = stdin) into ``output`` (``-`` = stdout), ``chunk_size`` lines at a time.

    Args:
        checkpoint: a checkpoint path, or several to average.
        orders: lader order lines for the input (channel ``xl``), for XL-PE models; ``orders_level`` says
            whether they index words (default) or subwords.
        preorderer: a BTG preorderer directory (``xlpe preorder train``) that predicts the orders of the input
            on the fly from the source alone (SPEC §4.1); ``preorder_processes`` run it in parallel.
        channels: other per-word integer channel files, ``{name: path}``.

    Returns the number of lines written. The output file appears only when the whole input is translated.
    An empty input is a :class:`FormatError` (most likely a wrong path or an upstream step that failed).
    """
    from xlpe.io.atomic import atomic_write
    from xlpe.train.checkpoint import load_model

    if chunk_size < 1:
        raise ConfigError("chunk_size must be >= 1")
    dev = resolve_device(device)
    if orders and preorderer:
        raise ConfigError("give either orders (a file) or a preorderer (predicts them), not both")
    if orders_level not in ("word", "subword"):
        raise ConfigError(f"orders_level must be 'word' or 'subword', not {orders_level!r}")
    model, cfg, subwords = load_model(checkpoint, device=dev)
    pre = None
    if preorderer:
        from xlpe.reorder.btg import BTGPreorderer
        pre = BTGPreorderer.load(preorderer)
        if pre.config.factors > 1:
            raise ConfigError(f"the preorderer {preorderer} reads {pre.config.factors} factor columns per token, "
                              "which plain input lines do not have; run `xlpe preorder apply` on factored input "
                              "and pass its output with --orders")
        if orders_level != "word":
            raise ConfigError("an on-the-fly preorderer orders words; orders_level must be 'word'")
    name = "<stdin>" if os.fspath(input) == "-" else os.fspath(input)
    ch_iters: dict[str, Iterator] = {}
    if orders:
        ch_iters["xl"] = iter(read_channel_file("orders" if orders_level == "word" else "subword-orders", orders))
    for k, p in (channels or {}).items():
        ch_iters[k] = iter(read_channel_file("ints", p))
    from xlpe.nn.positions import required_channels
    missing = required_channels(cfg) - set(ch_iters) - ({"xl"} if pre is not None else set())
    if missing:
        raise ConfigError(f"the model (pe={cfg.pe}) reads position channel(s) {sorted(missing)}: "
                          + ("give --orders FILE (from `xlpe preorder apply`) or --preorderer MODEL_DIR"
                             if "xl" in missing else "give --channel NAME=FILE"))
    src_lines = (t for _, t in read_lines(input))
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(unit="line", desc="translate")
    n = 0
    with atomic_write(output) as f:
        while True:
            chunk = list(islice(src_lines, chunk_size))
            if not chunk:
                break
            ch = {}
            if pre is not None:
                from xlpe.io.orders import invert_order
                ch["xl"] = [invert_order(o) for o in pre.predict_many(chunk, preorder_processes)]
            for k, it in ch_iters.items():
                ch[k] = list(islice(it, len(chunk)))
                if len(ch[k]) != len(chunk):
                    raise FormatError(f"channel {k!r} file ends before the input (line {n + len(ch[k]) + 1})",
                                      name, n + len(ch[k]) + 1, "one channel line per input line")
            hyps = translate_lines(model, subwords, chunk, beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                                   max_len_b=max_len_b, batch_size=batch_size, max_tokens=max_tokens, greedy=greedy,
                                   beam_stop=beam_stop, channels=ch, channel_level={"xl": orders_level}, device=dev,
                                   source_name=name, first_line=n + 1)
            for h in hyps:
                f.write(h + "\n")
            f.flush()
            n += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
        if n == 0:
            raise FormatError("input is empty", name, expected="at least one line to translate")
        for k, it in ch_iters.items():
            if next(it, None) is not None:
                raise FormatError(f"channel {k!r} file has more lines than the input ({n})", name, n + 1,
                                  "one channel line per input line")
    if bar is not None:
        bar.close()
    return n


# -- command line: `xlpe translate` ----------------------------------------------------------------------

def add_cli_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", required=True, nargs="+",
                   help="checkpoint file (checkpoint_<step>.pt / checkpoint_best.pt); several are averaged")
    p.add_argument("--input", default="-", help="input text, one pre-tokenised sentence a line ('-' = stdin)")
    p.add_argument("--output", default="-", help="output file ('-' = stdout); written atomically")
    p.add_argument("--beam", type=int, default=5, help="beam size")
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
    p.add_argument("--orders", default=None,
                   help="lader order lines for the input -> channel 'xl' (XL-PE models)")
    p.add_argument("--orders-level", default="word", choices=("word", "subword"),
                   help="whether --orders index words (expanded to subwords) or subwords")
    p.add_argument("--preorderer", default=None,
                   help="BTG preorderer directory (`xlpe preorder train`): predict the orders of the input on the "
                        "fly, from the source alone (XL-PE models)")
    p.add_argument("--preorder-processes", type=int, default=1, help="processes for the on-the-fly preorderer")
    p.add_argument("--channel", action="append", default=[], metavar="NAME=FILE",
                   help="another per-word integer channel file for the input (repeatable)")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = torch's default)")
    p.add_argument("--progress", action="store_true", help="show a progress bar on stderr")


def cli_main(args: argparse.Namespace) -> int:
    if args.threads:
        torch.set_num_threads(args.threads)
    channels = {}
    for item in args.channel:
        if "=" not in item:
            raise ConfigError(f"--channel expects NAME=FILE, got {item!r}")
        k, v = item.split("=", 1)
        channels[k] = v
    n = translate_file(args.checkpoint, args.input, args.output, beam=args.beam, lenpen=args.lenpen,
                       max_len_a=args.max_len_a, max_len_b=args.max_len_b, batch_size=args.batch_size,
                       max_tokens=args.max_tokens, greedy=args.greedy, beam_stop=args.beam_stop,
                       chunk_size=args.chunk_size,
                       orders=args.orders, orders_level=args.orders_level, preorderer=args.preorderer,
                       preorder_processes=args.preorder_processes, channels=channels, device=args.device,
                       progress=args.progress)
    log.info("translated %d lines", n)
    return 0
