"""Translate text with a trained model: lines in memory, files, or standard input.

* :func:`translate_data` decodes an encoded :class:`~xlpe.data.batching.ParallelData` (batches of similar
  length, beam or greedy from :mod:`xlpe.infer.beam`) and returns detokenised hypotheses in data order.
* :func:`translate_lines` takes raw lines (pre-tokenised, words split on ASCII space) and returns exactly
  one output line per input line, in input order; an empty input line gives an empty output line. Line-break
  characters inside a hypothesis (a byte-fallback vocabulary can produce ``\r``) become spaces.
* :func:`translate_file` streams a file (``-`` = stdin) in chunks of ``chunk_size`` lines, so memory stays
  flat however long the input is, and writes the output atomically (or to stdout with ``-``).

A source line longer than the model's ``max_len`` (subwords + EOS) is a :class:`FormatError` naming the
file and line. The position channels that the model reads from the input come from ``sources`` (specs such as
``orders:test.order``, ``conllu:test.conllu`` or ``preorderer:btg/``, each filling the channels its kind
declares, :mod:`xlpe.sources`) or channel by channel from ``channels``, like the training data's. Decoding
options travel together in a :class:`Decoding`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Iterable, Mapping, Sequence

import torch

from xlpe.data.batching import TokenBatchSampler, collate
from xlpe.data.corpus import ParallelData
from xlpe.data.channels import ChannelSource, IterableSource, as_source
from xlpe.data.subword import SubwordModel
from xlpe.errors import ConfigError, FormatError
from xlpe.io.text import read_lines, tokenize
from xlpe.runtime import device_policy, resolve_device, warn_if_emulated_bf16
from xlpe.io.atomic import check_outputs
from xlpe.infer.shortlist import FREQUENT, PER_SOURCE, Shortlist, prepare_shortlist
from xlpe.nn.device import BF16_PRODUCTS
from xlpe.nn.positions import required_inputs
from xlpe.sources import SourceSpec, channel_specs, check_channels, check_read, open_sources, source_paths

log = logging.getLogger(__name__)

Subwords = SubwordModel | tuple[SubwordModel, SubwordModel]


def subword_sides(subwords: Subwords) -> tuple[SubwordModel, SubwordModel]:
    """``(source, target)`` subword models of a joint model or a pair."""
    if isinstance(subwords, SubwordModel):
        return subwords, subwords
    src, tgt = subwords
    return src, tgt or src


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of the model's parameters (CPU for a model without any)."""
    p = next(model.parameters(), None)
    return p.device if p is not None else torch.device("cpu")


#: weight types for decoding (``dtype``): bf16 halves the matrix-multiply time on CPUs with bf16 instructions;
#: ``int8`` is float32 with the linear layers quantised (:func:`decoding_model`)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.float32}


def check_dtype(dtype: str, device: torch.device) -> None:
    """A :class:`ConfigError` for a decoding weight type that is unknown or unusable on ``device``."""
    if dtype not in DTYPES:
        raise ConfigError(f"unknown decoding dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    if dtype not in device_policy(device).decoding_dtypes:
        raise ConfigError({"float16": f"dtype float16 needs a GPU (CUDA); on {device.type} use bfloat16",
                           "int8": "dtype int8 (torch's dynamic quantisation) runs on CPU only"
                           }.get(dtype, f"dtype {dtype} is not available on {device.type}"))
    if dtype == "bfloat16":
        warn_if_emulated_bf16(device, "dtype float32 (--dtype float32) decodes in float32")


def decoding_model(model: torch.nn.Module, dtype: str = "float32",
                   device: torch.device | str | None = None) -> torch.nn.Module:
    """``model`` with weights of type ``dtype`` (``float32`` | ``bfloat16`` | ``float16``, the last on GPU
    only): the model itself when they already are, else a cast copy (the caller's model is left as it is).
    ``bfloat16`` on CPU (:attr:`~xlpe.nn.device.DevicePolicy.bf16_products`): a float32 copy whose linear layers
    run as bf16 products with packed bf16 weights, everything else (attention, norms, the cache, log-probabilities)
    in float32: on CPU the rest of a decoding step is slower in bf16 than in float32 (docs/results/speed.md).
    ``int8``: a copy whose ``nn.Linear`` layers are torch's dynamically quantised ones
    (``torch.ao.quantization.quantize_dynamic``: int8 weights, activations quantised per product, float32
    outputs; CPU only); the output projection (the embedding table when tied) and the rest stay float32."""
    check_dtype(dtype, torch.device(device) if device is not None else model_device(model))
    if dtype == "int8":
        if is_quantized(model):
            return model
        return torch.ao.quantization.quantize_dynamic(_mark(copy.deepcopy(model).float(), False),
                                                      {torch.nn.Linear}, dtype=torch.qint8)
    p = next(model.parameters(), None)
    if p is None:
        return model
    products = dtype == "bfloat16" and device_policy(p.device).bf16_products
    if products == bf16_products_model(model) and (products or p.dtype == DTYPES[dtype]) \
            and not is_quantized(model):
        return model
    if is_quantized(model):
        raise ConfigError(f"the model's linear layers are quantised to int8: it cannot decode as {dtype}")
    return _mark(copy.deepcopy(model).to(torch.float32 if products else DTYPES[dtype]), products)


def _mark(model: torch.nn.Module, products: bool) -> torch.nn.Module:
    """``model`` with every module marked to run its linear layers as bf16 products or not
    (:func:`xlpe.nn.device.packed_linear`)."""
    for m in model.modules():
        setattr(m, BF16_PRODUCTS, products)
    return model


def bf16_products_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` runs its linear layers as bf16 products (:func:`decoding_model` with ``bfloat16`` on CPU)."""
    return bool(model.__dict__.get(BF16_PRODUCTS, False))


def is_quantized(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds dynamically quantised linear layers (:func:`decoding_model` with ``int8``)."""
    return any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in model.modules())


def translate_data(model: torch.nn.Module, data: ParallelData, tgt_subword: SubwordModel, *, beam: int = 5,
                   lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10, batch_size: int = 64,
                   max_tokens: int | None = None, greedy: bool = False, beam_stop: str = "exhaust",
                   device: torch.device | str | None = None, dtype: str = "float32",
                   shortlist: Shortlist | None = None, workers: int = 1) -> list[str]:
    """Decode every source sentence of ``data``; returns detokenised strings in the order of ``data``.

    Batches hold at most ``batch_size`` sentences and (when given) ``max_tokens`` padded source tokens;
    sentences are sorted by length to keep padding low, and the output order is restored. ``dtype``: the
    weights' type while decoding (:func:`decoding_model`; log-probabilities are always summed in float).
    ``shortlist``: score only each batch's vocabulary shortlist (:mod:`xlpe.infer.shortlist`; off by default).
    ``workers``: batches decoded at once, each on its own thread (CPU; :func:`map_batches`).
    """
    from xlpe.infer.beam import beam_search, greedy as greedy_search

    device = torch.device(device) if device is not None else model_device(model)
    check_decoding_workers(workers, device)
    model = decoding_model(model, dtype, device)
    lengths = data.src_lengths
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    longest = int(lengths.max())
    budget = longest * batch_size if max_tokens is None else max(max_tokens, longest)
    out: list[str | None] = [None] * len(data)
    sampler = TokenBatchSampler(lengths, budget, max_sentences=batch_size, shuffle=False, bucket=True)

    def decode(idx: list[int]) -> list[str]:
        items = [data[i] for i in idx]
        for it in items:
            it.tgt = None                       # decoding needs the source side only
        b = collate(items).to(device)
        if greedy:
            hyps = greedy_search(model, b.src, b.channels, max_len_a=max_len_a, max_len_b=max_len_b,
                                 shortlist=shortlist)
        else:
            hyps = beam_search(model, b.src, b.channels, beam=beam, lenpen=lenpen, max_len_a=max_len_a,
                               max_len_b=max_len_b, stop=beam_stop, shortlist=shortlist)
        return [tgt_subword.decode_ids(h.tokens) for h in hyps]

    for idx, texts in map_batches(decode, sampler, model, workers):
        for i, text in zip(idx, texts):
            out[i] = text
    return out  # type: ignore[return-value]


def check_decoding_workers(workers: int, device: torch.device) -> None:
    """A :class:`ConfigError` for a count of decoding workers that is not a positive integer, or above 1 on a
    GPU (one device decodes one batch at a time)."""
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer >= 1, not {workers!r}")
    if workers > 1 and device.type != "cpu":
        raise ConfigError(f"workers={workers} decodes batches on CPU threads; on {device.type} use workers=1")


def map_batches(decode, batches: Iterable[list[int]], model: torch.nn.Module, workers: int = 1) -> list:
    """``[(batch, decode(batch))]`` for every batch, in order. With ``workers > 1`` (CPU), ``workers`` batches
    are decoded at once on threads of this process, sharing the model: torch's CPU threads are divided among them
    (``torch.get_num_threads() // workers`` each, at least one, restored after), and the model is put in eval mode
    once, before (its training flag restored after), so that no thread's decoding switches it under another.
    A small model's decoding step is many small operations, which leave cores idle when one batch has them all;
    separate batches keep them busy (CTranslate2's ``inter_threads``). Outputs are those of ``workers=1`` at the
    same per-worker thread count; memory grows with the batches decoded at once."""
    if workers == 1:
        return [(idx, decode(idx)) for idx in batches]
    threads, was_training = torch.get_num_threads(), model.training
    model.eval()
    torch.set_num_threads(max(1, threads // workers))
    try:
        with ThreadPoolExecutor(workers, thread_name_prefix="xlpe-decode") as pool:
            batches = list(batches)
            return list(zip(batches, pool.map(decode, batches)))
    finally:
        torch.set_num_threads(threads)
        model.train(was_training)


def translate_lines(model: torch.nn.Module, subwords: Subwords, lines: Iterable[str], *, beam: int = 5,
                    lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10, batch_size: int = 64,
                    max_tokens: int | None = None, greedy: bool = False, beam_stop: str = "exhaust",
                    sources: Sequence[SourceSpec] = (),
                    channels: Mapping[str, ChannelSource | Sequence] | None = None,
                    channel_level: str | Mapping[str, str] = "word",
                    device: torch.device | str | None = None, source_name: str = "<input>",
                    first_line: int = 1, skip_long: bool = False, counts: dict | None = None,
                    dtype: str = "float32", shortlist: Shortlist | None = None, workers: int = 1) -> list[str]:
    """Translate raw lines; exactly one output per input line, in input order (empty in, empty out).

    Args:
        model: a Transformer (e.g. from :func:`xlpe.nn.checkpoint.load_model`).
        subwords: the joint subword model, or ``(source, target)`` models.
        lines: pre-tokenised sentences (a trailing newline is ignored).
        beam, lenpen, max_len_a, max_len_b: beam-search settings (:func:`xlpe.infer.beam.beam_search`).
        batch_size: most sentences per batch; ``max_tokens``: optional cap on padded source tokens per batch.
        greedy: greedy decoding instead of beam search; ``beam_stop``: the beam's stopping rule
            (``fairseq`` | ``exhaust``, see :mod:`xlpe.infer.beam`).
        sources: sources of the lines' position channels: ``[NAME=][KIND:]PATH`` specs (``conllu:test.conllu``
            fills the tree channels the model reads, read once for all of them; :mod:`xlpe.sources`) or
            :class:`~xlpe.data.channels.Source` objects (their next ``len(lines)`` values are taken).
        channels: position channels one by one: name -> a ``[KIND:]PATH`` spec, a
            :class:`~xlpe.data.channels.ChannelSource` (its next ``len(lines)`` values are taken) or one item per
            line (e.g. ``pos_XL`` lists) at ``channel_level``.
        source_name, first_line: how errors name the input (``file:line``).
        skip_long: a line longer than the model's ``max_len`` gets an empty output line (counted in
            ``counts["skipped_long"]``) instead of stopping with an error.
        dtype: the weights' type while decoding, ``float32`` | ``bfloat16`` | ``float16`` (GPU) | ``int8``
            (quantised linear layers, CPU); a model of another type is cast on a copy (:func:`decoding_model`).
        shortlist: score only each batch's vocabulary shortlist (:mod:`xlpe.infer.shortlist`, e.g.
            :func:`~xlpe.infer.shortlist.load_shortlist`): faster, approximate; None (default) = the whole vocabulary.
        workers: batches decoded at once on threads of this process, torch's CPU threads divided among them (CPU
            only; :func:`map_batches`).
    """
    check_decoding(beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b, batch_size=batch_size,
                   max_tokens=max_tokens)
    src_sw, tgt_sw = subword_sides(subwords)
    lines = [line.rstrip("\n").rstrip("\r") for line in lines]
    keep = [i for i, line in enumerate(lines) if line.strip(" ")]
    out = [""] * len(lines)
    opened = open_sources(sources, channels, reads=required_inputs(model.cfg))
    ch = channel_values(opened, channel_level, [tokenize(line) for line in lines], keep, first_line)
    if not keep:
        return out
    try:
        data = ParallelData.from_sentences([lines[i] for i in keep], None, src_sw, None,
                                           max_src_len=model.cfg.max_len, channels=ch, names=(source_name, None),
                                           skip_long=skip_long)
    except FormatError as e:
        line = None if e.line is None else first_line + keep[e.line - 1]
        raise FormatError(e.message.replace("(or skip long lines)", "(or --skip-long)"), source_name, line,
                          (e.expected or "").replace("or skip long lines", "or --skip-long")) from None
    if counts is not None:
        counts["skipped_long"] = counts.get("skipped_long", 0) + data.skipped
    hyps = translate_data(model, data, tgt_sw, beam=beam, lenpen=lenpen, max_len_a=max_len_a, max_len_b=max_len_b,
                          batch_size=batch_size, max_tokens=max_tokens, greedy=greedy, beam_stop=beam_stop,
                          device=device, dtype=dtype, shortlist=shortlist, workers=workers)
    for ln, h in zip(data.line_numbers.tolist(), hyps):      # 1-based positions among the kept lines
        out[keep[ln - 1]] = one_line(h)
    return out


def check_decoding(*, beam: int = 5, lenpen: float = 0.6, max_len_a: float = 1.2, max_len_b: float = 10,
                   batch_size: int = 64, max_tokens: int | None = None) -> None:
    """A :class:`ConfigError` for decoding settings that cannot give a translation."""
    bad = []
    if beam < 1:
        bad.append(f"beam must be >= 1, not {beam}")
    if max_len_a < 0 or max_len_b < 0 or max_len_a == max_len_b == 0:
        bad.append(f"the output length limit max_len_a·S + max_len_b must be positive with a, b >= 0 "
                   f"(got a={max_len_a}, b={max_len_b})")
    if batch_size < 1 or (max_tokens is not None and max_tokens < 1):
        bad.append("batch_size and max_tokens must be >= 1")
    if lenpen != lenpen:
        bad.append("lenpen is not a number")
    if bad:
        raise ConfigError("; ".join(bad))


@dataclass(frozen=True)
class Decoding:
    """How :func:`translate_file` decodes (the options of :func:`translate_lines`, checked when made).

    Attributes:
        beam, lenpen, max_len_a, max_len_b: beam-search settings (:func:`xlpe.infer.beam.beam_search`): beam size,
            length penalty, output length limit ``max_len_a·S + max_len_b``.
        batch_size: most sentences per batch; ``max_tokens``: optional cap on padded source tokens per batch.
        greedy: greedy decoding instead of beam search; ``beam_stop``: the beam's stopping rule
            (``fairseq`` | ``exhaust``, see :mod:`xlpe.infer.beam`).
        dtype: the weights' type while decoding: ``float32`` (default), ``bfloat16`` (about twice the matrix
            throughput on CPUs with bf16 instructions; BLEU in ``docs/results/speed.md``), ``float16`` (GPU),
            ``int8`` (the linear layers dynamically quantised, CPU; :func:`decoding_model`).
        workers: batches decoded at once on threads, torch's CPU threads divided among them (CPU only;
            :func:`map_batches`).
    """

    beam: int = 5
    lenpen: float = 0.6
    max_len_a: float = 1.2
    max_len_b: float = 10
    batch_size: int = 64
    max_tokens: int | None = None
    greedy: bool = False
    beam_stop: str = "exhaust"
    dtype: str = "float32"
    workers: int = 1

    def __post_init__(self):
        check_decoding(beam=self.beam, lenpen=self.lenpen, max_len_a=self.max_len_a, max_len_b=self.max_len_b,
                       batch_size=self.batch_size, max_tokens=self.max_tokens)
        if self.dtype not in DTYPES:
            raise ConfigError(f"unknown decoding dtype {self.dtype!r}; valid: {', '.join(DTYPES)}")
        check_decoding_workers(self.workers, torch.device("cpu"))

    def check_device(self, device: torch.device) -> None:
        """A :class:`ConfigError` when ``device`` cannot decode with these options (weight type, workers)."""
        check_dtype(self.dtype, device)
        check_decoding_workers(self.workers, device)

    def options(self) -> dict:
        """The options as keyword arguments of :func:`translate_lines`."""
        return dataclasses.asdict(self)


def channel_values(channels: Mapping[str, ChannelSource | Sequence] | None, channel_level: str | Mapping[str, str],
                   sentences: list[list[str]], keep: list[int], first_line: int = 1) -> dict[str, IterableSource]:
    """The channel values of ``sentences`` (all input lines, empty ones included), restricted to the lines in
    ``keep``, as in-memory sources of the right level: opened sources (:func:`xlpe.sources.open_sources`) give
    their next ``len(sentences)`` values, lists must have one item per line."""
    out = {}
    for k, v in (channels or {}).items():
        level = channel_level if isinstance(channel_level, str) else channel_level.get(k, "word")
        if not isinstance(v, ChannelSource) and len(v) != len(sentences):
            raise ConfigError(f"channel {k!r} has {len(v)} items for {len(sentences)} lines")
        source = as_source(v, level, f"channel {k!r}")
        values = source.take(sentences, first_line)
        out[k] = IterableSource([values[i] for i in keep], source.level, source.description)
    return out


#: characters that end a line for Python's ``str.splitlines`` or universal-newline reading
_LINE_BREAKS = str.maketrans({c: " " for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"})


def one_line(text: str) -> str:
    """``text`` with every line-break character replaced by a space (a byte-fallback model can generate them),
    so that an output file keeps exactly one line per input line."""
    return text.translate(_LINE_BREAKS)


def translate_file(checkpoint: str | os.PathLike | Sequence[str | os.PathLike], input: str | os.PathLike = "-",
                   output: str | os.PathLike = "-", *, decoding: Decoding = Decoding(),
                   sources: Sequence[SourceSpec] = (), channels: Mapping[str, str | ChannelSource] | None = None,
                   preorder_processes: int = 1, chunk_size: int = 10000, device: str = "auto",
                   progress: bool = False, skip_long: bool = False, shortlist: str | os.PathLike | None = None,
                   shortlist_build: tuple[str, str] | None = None,
                   shortlist_size: tuple[int, int] = (PER_SOURCE, FREQUENT)) -> int:
    """Translate ``input`` (``-`` = stdin) into ``output`` (``-`` = stdout), ``chunk_size`` lines at a time.

    Args:
        checkpoint: a checkpoint path, or several to average.
        decoding: beam or greedy search, length limit, batches and weight type (:class:`Decoding`).
        sources: the input's channel sources, ``[NAME=][KIND:]PATH`` specs or :class:`~xlpe.data.channels.Source`
            objects (:mod:`xlpe.sources`): ``orders:test.order`` (lader order lines; ``subword-orders:`` when they
            index subwords), ``preorderer:btg/`` (a BTG preorderer that predicts the orders on the fly from the
            source alone, SPEC §4.1, in ``preorder_processes`` processes), ``conllu:test.conllu`` (the input's
            dependency trees: the tree channels the model reads, read once). A source that fills no channel the
            model reads is a :class:`ConfigError`.
        channels: channel by channel, ``{name: "[KIND:]PATH"}`` or source objects.
        shortlist: a vocabulary shortlist table (:mod:`xlpe.infer.shortlist`; off by default), built from the
            training text ``shortlist_build (source, target)`` with ``shortlist_size (per_source, frequent)``
            when it does not exist yet (:func:`~xlpe.infer.shortlist.prepare_shortlist`).

    Returns the number of lines written. The output file appears only when the whole input is translated.
    An empty input is a :class:`FormatError` (most likely a wrong path or an upstream step that failed).
    """
    from xlpe.io.atomic import atomic_write
    from xlpe.nn.checkpoint import load_model

    if chunk_size < 1:
        raise ConfigError("chunk_size must be >= 1")
    ckpts = [checkpoint] if isinstance(checkpoint, (str, os.PathLike)) else list(checkpoint)
    check_outputs([output], [input, *ckpts, *source_paths(sources, channels)])
    dev = resolve_device(device)
    decoding.check_device(dev)
    model, cfg, subwords = load_model(checkpoint, device=dev)
    # cast in place; int8: quantised once here, not per chunk
    model = decoding_model(model, "int8", dev) if decoding.dtype == "int8" else model.to(DTYPES[decoding.dtype])
    if not decoding.greedy and decoding.beam > cfg.tgt_vocab:
        raise ConfigError(f"beam={decoding.beam} is larger than the model's target vocabulary ({cfg.tgt_vocab} "
                          f"pieces); give at most {cfg.tgt_vocab}")
    table = prepare_shortlist(shortlist, cfg, subword_sides(subwords), shortlist_build, per_source=shortlist_size[0],
                              frequent=shortlist_size[1]) if shortlist else None
    reads, who = required_inputs(cfg), f"the model (pe={list(cfg.pe)})"
    specs = channel_specs(sources, channels, reads=reads, who=who)
    check_channels(cfg, specs, "input", training=False)
    check_read(channels or {}, reads, who)
    opened = open_sources(specs, processes=preorder_processes)
    name = "<stdin>" if os.fspath(input) == "-" else os.fspath(input)
    src_lines = (t for _, t in read_lines(input))
    counts: dict[str, int] = {}
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
            hyps = translate_lines(model, subwords, chunk, channels=opened, device=dev, source_name=name,
                                   first_line=n + 1, skip_long=skip_long, counts=counts, shortlist=table,
                                   **decoding.options())
            for h in hyps:
                f.write(h + "\n")
            f.flush()
            n += len(chunk)
            if bar is not None:
                bar.update(len(chunk))
        if n == 0:
            raise FormatError("input is empty", name, expected="at least one line to translate")
        for source in opened.values():
            source.finish(n)
    if bar is not None:
        bar.close()
    if counts.get("skipped_long"):
        log.warning("%d of %d lines were longer than the model's limit of %d subwords: their output lines are "
                    "empty (--skip-long)", counts["skipped_long"], n, cfg.max_len)
    return n
