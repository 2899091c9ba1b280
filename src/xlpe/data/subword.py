"""Subwords with exact word <-> subword index maps (sentencepiece BPE or unigram).

Input is pre-tokenised text (words separated by ASCII space). Every word is encoded on its own, so no
piece ever crosses a word boundary and ``word_of[k]`` (the word index of piece ``k``) is exact by
construction — it never depends on the ``▁`` dummy-prefix convention that silently shifts indices when
pieces are counted from a joined string (SPEC §8.3, lilt/alignment-scripts#5). The default
normalisation is ``identity`` (tokens are kept byte for byte, including the ideographic space U+3000 that
NFKC would turn into a separator) with byte fallback for unseen characters, so decode(encode(x)) == x.

Special ids are fixed for the whole toolkit: pad 0, unk 1, bos 2, eos 3 (what :mod:`xlpe.nn` assumes).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import Alignment
from xlpe.io.atomic import atomic_write
from xlpe.io.text import read_lines, tokenize

PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3
WORD_START = "\u2581"  # ▁


def _spm():
    import sentencepiece as spm
    return spm


@dataclass
class Encoded:
    """One sentence: pieces, their ids and the word index of every piece."""
    pieces: list[str]
    ids: list[int]
    word_of: list[int]


class SubwordModel:
    """A trained sentencepiece model plus word maps. Load with :meth:`load`, train with :func:`train_subwords`."""

    def __init__(self, proto: bytes, path: str | None = None):
        spm = _spm()
        self.sp = spm.SentencePieceProcessor(model_proto=proto)
        self.proto = proto
        self.path = path
        if (self.sp.pad_id(), self.sp.unk_id(), self.sp.bos_id(), self.sp.eos_id()) != (PAD_ID, UNK_ID, BOS_ID, EOS_ID):
            raise ConfigError(f"sentencepiece model {path or ''} has special ids pad/unk/bos/eos = "
                              f"{self.sp.pad_id()}/{self.sp.unk_id()}/{self.sp.bos_id()}/{self.sp.eos_id()}; "
                              f"xlpe needs 0/1/2/3 (train it with `xlpe subword train`)")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "SubwordModel":
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            raise FormatError("subword model not found", path) from None
        try:
            return cls(data, os.fspath(path))
        except RuntimeError as e:
            raise FormatError(f"not a sentencepiece model ({e})", path) from None

    def save(self, path: str | os.PathLike) -> None:
        with atomic_write(path, "wb") as f:
            f.write(self.proto)

    def __len__(self) -> int:
        return self.sp.get_piece_size()

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def encode_words(self, words: Sequence[str]) -> tuple[list[str], list[int]]:
        """Pieces of a pre-tokenised sentence and ``word_of`` (piece -> word index, 0-based)."""
        e = self.encode(words)
        return e.pieces, e.word_of

    def encode(self, words: Sequence[str] | str) -> Encoded:
        """Encode one sentence (a list of words, or a line split on ASCII space)."""
        return next(self.encode_many([words]))

    def encode_many(self, sentences: Iterable[Sequence[str] | str], chunk: int = 2048) -> Iterator[Encoded]:
        """Encode sentences lazily, batching the words of ``chunk`` sentences into one sentencepiece call."""
        buf: list[list[str]] = []
        for s in sentences:
            buf.append(tokenize(s) if isinstance(s, str) else list(s))
            if len(buf) >= chunk:
                yield from self._encode_batch(buf)
                buf = []
        if buf:
            yield from self._encode_batch(buf)

    def _encode_batch(self, sents: list[list[str]]) -> Iterator[Encoded]:
        flat = [w for s in sents for w in s]
        per_word = self.sp.encode(flat, out_type=int, num_threads=1) if flat else []
        table = self._piece_table
        k = 0
        for s in sents:
            pieces, ids, word_of = [], [], []
            for w in range(len(s)):
                pi = per_word[k]
                k += 1
                if not pi:    # a word that normalises to nothing: keep it visible as <unk>
                    pi = [UNK_ID]
                ids += pi
                pieces += [table[i] for i in pi]
                word_of += [w] * len(pi)
            yield Encoded(pieces, ids, word_of)

    @property
    def _piece_table(self) -> list[str]:
        t = getattr(self, "_table", None)
        if t is None:
            t = self._table = [self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]
        return t

    def decode_ids(self, ids: Sequence[int]) -> str:
        """Ids -> detokenised text (specials dropped)."""
        return self.sp.decode([int(i) for i in ids if int(i) > EOS_ID])

    def decode_pieces(self, pieces: Sequence[str]) -> str:
        return self.sp.decode_pieces(list(pieces))

    def words_of_pieces(self, pieces: Sequence[str]) -> list[str]:
        """Regroup pieces into words (a new word starts at each ``▁`` piece)."""
        text = self.decode_pieces(pieces)
        return tokenize(text)


def train_subwords(inputs: Iterable[str | os.PathLike], model_path: str | os.PathLike, *,
                   sentences: Iterable[str] | None = None, vocab_size: int = 8000, model_type: str = "bpe",
                   character_coverage: float = 1.0, normalization: str = "identity", byte_fallback: bool = True,
                   max_sentences: int = 2_000_000, hard_vocab_limit: bool = False,
                   num_threads: int = 2) -> SubwordModel:
    """Train a sentencepiece model on text files (``inputs``, paths) or on ``sentences`` in memory.

    For a joint vocabulary pass the source and target files together; for separate vocabularies call it
    once per side. ``hard_vocab_limit=False`` lets a small corpus produce fewer pieces than asked instead
    of failing. The model is written atomically to ``model_path``. A path that is not a readable file, or
    input with no text at all, is an error naming it (never treated as text).
    """
    spm = _spm()
    paths = [inputs] if isinstance(inputs, (str, os.PathLike)) else list(inputs)
    for p in paths:
        if not _is_file(p):
            raise FormatError("not a readable file" if os.path.exists(p) else "file not found", p,
                              expected="a text file, one sentence per line")
    if not paths and sentences is None:
        raise ConfigError("no training text: give input files or sentences")
    described = ", ".join(map(os.fspath, paths)) or "the sentences given"
    count = [0]

    def lines() -> Iterator[str]:
        stream = (t for p in paths for _, t in read_lines(p)) if sentences is None else iter(sentences)
        for text in stream:
            if text.strip():
                yield text
                count[0] += 1
                if count[0] >= max_sentences:
                    return

    if model_type not in ("bpe", "unigram", "char", "word"):
        raise ConfigError(f"unknown subword model type {model_type!r}", )
    buf = io.BytesIO()
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=lines(), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
            character_coverage=character_coverage, normalization_rule_name=normalization,
            byte_fallback=byte_fallback, pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
            hard_vocab_limit=hard_vocab_limit, num_threads=num_threads, minloglevel=2,
            split_by_whitespace=True, add_dummy_prefix=True, input_sentence_size=max_sentences,
            shuffle_input_sentence=True, train_extremely_large_corpus=False)
    except RuntimeError as e:
        if count[0] == 0:
            raise FormatError("no text to train subwords on (empty or blank lines only)", described,
                              expected="at least one non-empty line") from None
        raise ConfigError(f"sentencepiece training on {described} failed: {e}") from None
    model = SubwordModel(buf.getvalue(), os.fspath(model_path))
    model.save(model_path)
    return model


def _is_file(x) -> bool:
    return isinstance(x, (str, os.PathLike)) and os.path.isfile(x)


# --- conversions between word and subword level (SPEC §8.3) ------------------------------------

def word_alignment_from_subword(a: Alignment, src_word_of: Sequence[int], tgt_word_of: Sequence[int]) -> Alignment:
    """The "any" rule: words (u, v) are linked if any of their piece pairs is. A word pair is sure if any
    sure piece pair links it, possible otherwise."""
    sure = frozenset((src_word_of[i], tgt_word_of[j]) for i, j in a.sure)
    poss = frozenset((src_word_of[i], tgt_word_of[j]) for i, j in a.possible)
    return Alignment(sure, poss)


def _pieces_of(word_of: Sequence[int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for k, w in enumerate(word_of):
        out.setdefault(w, []).append(k)
    return out


def subword_alignment_from_word(a: Alignment, src_word_of: Sequence[int], tgt_word_of: Sequence[int]) -> Alignment:
    """All pairs: every piece of u is linked to every piece of v for each word link (u, v)."""
    sp, tp = _pieces_of(src_word_of), _pieces_of(tgt_word_of)

    def expand(links):
        try:
            return frozenset((i, j) for u, v in links for i in sp[u] for j in tp[v])
        except KeyError as e:
            raise FormatError(f"alignment links word {e.args[0]}, which the subword map does not have",
                              expected="word indices within the sentence") from None
    return Alignment(expand(a.sure), expand(a.possible))


def subword_order_from_word(order: Sequence[int], word_of: Sequence[int]) -> list[int]:
    """A word-level permutation expanded to pieces (each word's pieces keep their inner order)."""
    pieces = _pieces_of(word_of)
    return [k for w in order for k in pieces[w]]
