"""Dependency trees as a channel source: a CoNLL-U file (one tree per source line, word level, from
``xlpe parse`` or any parser) gives the ``depth``, ``tree_word`` and ``tree_head`` channels of structural PE,
each tree read once for all of them."""

from __future__ import annotations

import os
from itertools import islice
from typing import Sequence

from xlpe.data.channels import Source
from xlpe.errors import ConfigError, FormatError
from xlpe.io.conllu import read_conllu
from xlpe.syntax.trees import word_channels

#: the channels a trees file fills
TREE_CHANNELS = ("depth", "tree_word", "tree_head")


class TreesSource(Source):
    """The tree channels ``channels`` (default: all of :data:`TREE_CHANNELS`) from a CoNLL-U file, streamed; a tree
    whose word count differs from its source line is an error naming the file and the sentence."""

    level = "word"

    def __init__(self, path: str | os.PathLike, channels: Sequence[str] = TREE_CHANNELS):
        other = [c for c in channels if c not in TREE_CHANNELS]
        if other or not channels:
            raise ConfigError(f"a trees file gives the channels {', '.join(TREE_CHANNELS)}, not {other or 'none'}")
        if not os.path.isfile(path):
            raise ConfigError(f"trees file {os.fspath(path)} not found")
        self.description, self.channels = os.fspath(path), tuple(channels)
        self._trees = read_conllu(path)
        self._n = 0

    def take(self, sentences: Sequence[Sequence[str]], first_line: int = 1) -> list:
        trees = list(islice(self._trees, len(sentences)))
        if len(trees) < len(sentences):
            raise FormatError(f"has {self._n + len(trees)} trees but the text has more lines", self.description,
                              expected="one tree per source line")
        out = []
        for k, (tree, words) in enumerate(zip(trees, sentences)):
            if len(tree.words) != len(words):
                raise FormatError(f"tree {self._n + k + 1} has {len(tree.words)} words but source line "
                                  f"{first_line + k} has {len(words)}", self.description,
                                  expected="the tokens of the source line, one word line each")
            values = word_channels(tree.heads)
            out.append({c: values[c] for c in self.channels})
        self._n += len(trees)
        return out

    def finish(self, lines: int) -> None:
        if next(self._trees, None) is not None:
            raise FormatError(f"has more trees than the text has lines ({lines})", self.description,
                              expected="one tree per source line")
