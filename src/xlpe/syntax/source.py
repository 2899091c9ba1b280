"""Dependency trees as a channel source: a CoNLL-U file (one tree per source line, word level, from
``xlpe parse`` or any parser) gives the ``depth``, ``tree_word`` and ``tree_head`` channels of structural PE,
each tree read once for all of them.

A tree must fit its source line, and an error names the tree's file and line where it does not: the same
number of words; several roots only as the trees of sentences side by side (a parser that split the line, each
root at depth 0, SPEC §3.2), never roots whose subtrees interleave. Words that differ from the line's tokens
(a parser's own escaping or normalisation of the same tokens) are counted and reported in one warning at the end;
``strict=True`` (the source kind ``conllu-strict``) makes them an error, and several roots too.
"""

from __future__ import annotations

import logging
import os
from itertools import islice
from typing import Sequence

from xlpe.data.channels import Source
from xlpe.errors import ConfigError, FormatError
from xlpe.io.conllu import DepTree, read_conllu
from xlpe.syntax.trees import side_by_side, word_channels

log = logging.getLogger(__name__)

#: the channels a trees file fills
TREE_CHANNELS = ("depth", "tree_word", "tree_head")


class TreesSource(Source):
    """The tree channels ``channels`` (default: all of :data:`TREE_CHANNELS`) from a CoNLL-U file, streamed and
    checked against the source lines (see the module docstring; ``strict``: the words must be the line's tokens
    and each tree must have one root)."""

    level = "word"

    def __init__(self, path: str | os.PathLike, channels: Sequence[str] = TREE_CHANNELS, *, strict: bool = False):
        other = [c for c in channels if c not in TREE_CHANNELS]
        if other or not channels:
            raise ConfigError(f"a trees file gives the channels {', '.join(TREE_CHANNELS)}, not {other or 'none'}")
        if not os.path.isfile(path):
            raise ConfigError(f"trees file {os.fspath(path)} not found")
        self.description, self.channels, self.strict = os.fspath(path), tuple(channels), strict
        self._trees = read_conllu(path)
        self._n = 0
        self.n_differing = self.n_forests = 0                  # trees whose words differ; trees with several roots
        self._first_difference: tuple | None = None            # (tree number, its line, what differs)

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list:
        trees = list(islice(self._trees, len(sentences)))
        if len(trees) < len(sentences):
            raise FormatError(f"has {self._n + len(trees)} trees but the text has more lines", self.description,
                              expected="one tree per source line")
        out = []
        for k, (tree, words) in enumerate(zip(trees, sentences)):
            self._check(tree, words, self._n + k + 1, first_line + k)
            values = word_channels(tree.heads)
            out.append({c: values[c] for c in self.channels})
        self._n += len(trees)
        return out

    def _check(self, tree: DepTree, words: Sequence[str], number: int, line: int) -> None:
        """A :class:`FormatError` naming the tree's file and line where it does not fit source line ``line``."""
        if len(tree.words) != len(words):
            raise FormatError(f"tree {number} has {len(tree.words)} words but source line {line} has {len(words)}",
                              self.description, tree.line, "the tokens of the source line, one word line each")
        roots = [k + 1 for k, h in enumerate(tree.heads) if h == 0]
        if len(roots) > 1:
            if self.strict or not side_by_side(tree.heads):
                how = "" if self.strict else ", whose subtrees interleave"
                raise FormatError(f"tree {number} (source line {line}) has {len(roots)} roots{how}: words "
                                  f"{', '.join(map(str, roots[:5]))}", self.description, tree.line,
                                  "one root" if self.strict else "one root, or the trees of consecutive sentences")
            self.n_forests += 1
        if tree.words != list(words):
            k = next(k for k, (a, b) in enumerate(zip(tree.words, words)) if a != b)
            what = f"word {k + 1} {tree.words[k]!r} where source line {line} has {words[k]!r}"
            if self.strict:
                raise FormatError(f"tree {number} has {what}", self.description, tree.line,
                                  "the tokens of the source line")
            self._first_difference = self._first_difference or (number, tree.line, what)
            self.n_differing += 1

    def finish(self, lines: int) -> None:
        if next(self._trees, None) is not None:
            raise FormatError(f"has more trees than the text has lines ({lines})", self.description,
                              expected="one tree per source line")
        if self.n_forests:
            log.info("%s: %d of %d trees have several roots, the trees of consecutive sentences (each root at "
                     "depth 0, SPEC §3.2)", self.description, self.n_forests, self._n)
        if self.n_differing:
            number, at, what = self._first_difference
            log.warning("%s: %d of %d trees have words that differ from their source line's tokens (the first: tree "
                        "%d, line %s: %s); give the trees as conllu-strict:%s to make this an error",
                        self.description, self.n_differing, self._n, number, at, what, self.description)
