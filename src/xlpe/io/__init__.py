"""File formats: bitext, Pharaoh/talp and lader alignments, orders, CoNLL-U. Streaming readers,
atomic writers, and errors naming file and line."""

from xlpe.io.alignments import (Alignment, format_alignment, parse_alignment_line, read_alignments,
                                read_lader_alignments, write_alignments, format_lader_line, parse_lader_line)
from xlpe.io.atomic import atomic_write, write_lines
from xlpe.io.bitext import read_bitext, read_joint_bitext, write_bitext, write_joint_bitext
from xlpe.io.conllu import DepTree, read_conllu, write_conllu
from xlpe.io.orders import apply_order, invert_order, read_orders, write_orders
from xlpe.io.text import read_lines, read_sentences, tokenize

__all__ = [
    "Alignment", "format_alignment", "parse_alignment_line", "read_alignments", "write_alignments",
    "read_lader_alignments", "format_lader_line", "parse_lader_line",
    "atomic_write", "write_lines", "read_bitext", "read_joint_bitext", "write_bitext", "write_joint_bitext",
    "DepTree", "read_conllu", "write_conllu", "apply_order", "invert_order", "read_orders", "write_orders",
    "read_lines", "read_sentences", "tokenize",
]
