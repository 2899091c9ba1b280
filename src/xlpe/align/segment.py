"""Subword segmentation for the aligners: a sentencepiece model (or any callable) applied word by word, with
each word's pieces cached, giving the pieces of a sentence and the word of each piece."""

from __future__ import annotations

import os
from typing import Any, Callable, Iterable, Sequence


from xlpe.errors import ConfigError

Segmenter = Callable[[Sequence[str]], tuple[Sequence[str], Sequence[int]]]

# --- subword segmentation -----------------------------------------------------------------------------

class WordCachedSegmenter:
    """Segments with an :class:`xlpe.data.subword.SubwordModel`, which encodes every word on its own, so
    a sentence's pieces are the concatenation of its words' pieces. Words are segmented in batches
    (:meth:`prefetch`, one sentencepiece call per block of sentences; a call per sentence costs
    milliseconds) and cached (the cache is cleared past ``max_words``)."""

    def __init__(self, model, max_words: int = 1_000_000):
        self.model, self.max_words = model, max_words
        self.cache: dict[str, list[str]] = {}

    def prefetch(self, sentences: Iterable[Sequence[str]]) -> None:
        new = list(dict.fromkeys(w for sent in sentences for w in sent if w not in self.cache))
        if not new:
            return
        if len(self.cache) + len(new) > self.max_words:
            self.cache.clear()
        pieces, word_of = self.model.encode_words(new)
        per: list[list[str]] = [[] for _ in new]
        for piece, w in zip(pieces, word_of):
            per[w].append(piece)
        self.cache.update(zip(new, per))

    def __call__(self, words: Sequence[str]) -> tuple[list[str], list[int]]:
        if any(w not in self.cache for w in words):
            self.prefetch([words])
        pieces: list[str] = []
        word_of: list[int] = []
        for k, w in enumerate(words):
            ps = self.cache[w]
            pieces += ps
            word_of += [k] * len(ps)
        return pieces, word_of


def as_segmenter(obj: Any) -> Segmenter:
    if isinstance(obj, (str, os.PathLike)):
        from xlpe.data.subword import SubwordModel  # lazy: sentencepiece is only needed here
        obj = SubwordModel.load(obj)
    if type(obj).__name__ == "SubwordModel" and type(obj).__module__ == "xlpe.data.subword":
        return WordCachedSegmenter(obj)
    if hasattr(obj, "encode_words"):
        return obj.encode_words
    if callable(obj):
        return obj
    raise ConfigError(f"subword segmentation must be a model path, an object with encode_words(words) or a "
                      f"callable words -> (pieces, word_of); got {type(obj).__name__}")


def segmenters(subword: Any) -> tuple[Segmenter, Segmenter] | None:
    if subword is None:
        return None
    if isinstance(subword, (tuple, list)):
        if len(subword) != 2:
            raise ConfigError("subword=(source_segmenter, target_segmenter) needs exactly two items")
        return as_segmenter(subword[0]), as_segmenter(subword[1])
    seg = as_segmenter(subword)
    return seg, seg


