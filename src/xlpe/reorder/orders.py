"""``xlpe orders`` as an API: alignments -> lader oracle ranks, permutations, ``pos_XL``, DPE targets and the 2PT
reordered source, as files (:func:`orders_files`)."""

from __future__ import annotations

from contextlib import ExitStack

from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import read_alignments, read_lader_alignments
from xlpe.io.atomic import atomic_write, check_outputs
from xlpe.io.orders import format_order
from xlpe.io.text import read_sentences
from xlpe.reorder.oracle import invert_order, lader_ranks, order_from_ranks
from xlpe.reorder.targets import dpe_targets, format_dpe_line, reordered_order, subword_dpe_targets


def orders_files(src: str, *, align: str | None = None, lader_align: str | None = None, align_base: int = 0,
                 tgt: str | None = None, ranks: str | None = None, order: str | None = None,
                 pos_xl: str | None = None, dpe: str | None = None, reordered_src: str | None = None,
                 unaligned: str = "drop", attach_null: str = "right", combine_blocks: bool = True,
                 align_brackets: bool = True, dpe_subword_model: str | None = None) -> dict:
    """Write the requested outputs, one line per sentence pair, each atomically; returns counts. A target text
    (``tgt``) validates the target indices and must have as many lines as the source. With ``dpe_subword_model``
    the DPE targets are over that model's pieces, projected from the word alignments
    (:func:`xlpe.reorder.targets.subword_dpe_targets`); without it, over the tokens of ``src`` (e.g. pieces
    aligned directly with ``xlpe align --subword-output``)."""
    outs = {"ranks": ranks, "order": order, "pos_xl": pos_xl, "dpe": dpe, "reordered_src": reordered_src}
    if dpe_subword_model and not dpe:
        raise ConfigError("--dpe-subword-model applies to --dpe targets: give --dpe too")
    if not any(outs.values()):
        raise ConfigError("nothing to write: give at least one of --ranks --order --pos-xl --dpe --reordered-src")
    check_outputs(outs.values(), [src, tgt, align, lader_align, dpe_subword_model])
    sw = None
    if dpe_subword_model:
        from xlpe.data.subword import SubwordModel
        sw = SubwordModel.load(dpe_subword_model)
    srcs = list(read_sentences(src))
    tl = [len(t) for t in read_sentences(tgt)] if tgt else [None] * len(srcs)
    if len(tl) != len(srcs):
        raise FormatError(f"the target text has {len(tl)} lines but the source text {src} has {len(srcs)}", tgt,
                          min(len(tl), len(srcs)) + 1, "line-aligned source and target texts")
    if align:
        lens = [len(s) for s in srcs]
        als = read_alignments(align, align_base, lengths=zip(lens, tl), check_base=False)
    else:
        als = (a for _, _, a in read_lader_alignments(lader_align, src_lengths=[len(s) for s in srcs]))
    n = 0
    with ExitStack() as stack:
        files = {k: stack.enter_context(atomic_write(v)) for k, v in outs.items() if v}
        for words, a in zip(srcs, als):
            links = sorted(a.links)
            r = lader_ranks(links, len(words), src_words=words, attach_null=attach_null,
                            combine_blocks=combine_blocks, align_brackets=align_brackets)
            o = order_from_ranks(r)
            if "ranks" in files:
                files["ranks"].write(" ".join(map(str, r)) + "\n")
            if "order" in files:
                files["order"].write(format_order(o) + "\n")
            if "pos_xl" in files:
                files["pos_xl"].write(format_order(invert_order(o)) + "\n")
            if "dpe" in files:
                t = subword_dpe_targets(a, sw.encode(words).word_of) if sw else dpe_targets(links, len(words))
                files["dpe"].write(format_dpe_line(t) + "\n")
            if "reordered_src" in files:
                ro = reordered_order(links, len(words), unaligned=unaligned)
                files["reordered_src"].write(" ".join(words[i] for i in ro) + "\n")
            n += 1
    return {"sentences": n, "written": {k: v for k, v in outs.items() if v}}
