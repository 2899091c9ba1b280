"""Reordering: oracle orders from word alignments and the BTG preorderer (SPEC §4.1, §5, §6.2, §6.5).

* :mod:`xlpe.reorder.oracle` — lader oracle ranks, DPE targets, the 2PT reordered source, permutations.
* :mod:`xlpe.reorder.btg` — a lader-style BTG preorderer (train / predict / save / load).
"""

from xlpe.reorder.btg import BTGConfig, BTGPreorderer, format_order, reorder_tokens
from xlpe.reorder.oracle import (dpe_targets, invert_order, lader_ranks, lader_spans, order_from_ranks,
                                 reordered_order, reordered_source)

__all__ = [
    "BTGConfig", "BTGPreorderer", "format_order", "reorder_tokens",
    "dpe_targets", "invert_order", "lader_ranks", "lader_spans", "order_from_ranks",
    "reordered_order", "reordered_source",
]
