"""Reordering: oracle orders from word alignments, the BTG preorderer, DPE / 2PT targets, the noise attack
(SPEC §4.1, §4.8, §5, §6.2, §6.5; ``docs/reorder.md``).

* :mod:`xlpe.reorder.oracle` — lader oracle ranks (of a sentence, of a corpus), permutations.
* :mod:`xlpe.reorder.targets` — DPE targets and the 2PT reordered source.
* :mod:`xlpe.reorder.orders` — all of these as files (``xlpe orders``).
* :mod:`xlpe.reorder.btg` — a lader-style BTG preorderer (train / predict / save / load).
* :mod:`xlpe.reorder.noise` — the noise attack on XL positions.
"""

from xlpe.reorder.btg import BTGConfig, BTGPreorderer, format_order
from xlpe.reorder.oracle import corpus_ranks, invert_order, lader_ranks, lader_spans, order_from_ranks
from xlpe.reorder.targets import dpe_targets, reordered_order, reordered_source

__all__ = [
    "BTGConfig", "BTGPreorderer", "corpus_ranks", "dpe_targets", "format_order", "invert_order", "lader_ranks",
    "lader_spans", "order_from_ranks", "reordered_order", "reordered_source",
]
