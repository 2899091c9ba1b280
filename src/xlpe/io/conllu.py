"""Dependency trees in CoNLL-U (word level), parsed with the ``conllu`` package.

Multi-word-token ranges (``3-4``) and empty nodes (``3.1``) are not words of the tree and are skipped;
the surface form of a range is kept in :attr:`DepTree.mwt` for round-trips. Heads are validated:
every head is in ``0..n`` and the head relation has no cycle (at least one root).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator

import conllu as _conllu

from xlpe.errors import FormatError
from xlpe.io.atomic import atomic_write
from xlpe.io.text import read_lines


@dataclass
class DepTree:
    """One sentence: ``heads[k]`` is the 1-based head of word ``k`` (0 = root), as in CoNLL-U; ``line``: the
    1-based line of the file where its block starts (read trees)."""

    words: list[str]
    heads: list[int]
    deprels: list[str] = field(default_factory=list)
    upos: list[str] = field(default_factory=list)
    mwt: list[tuple[int, int, str]] = field(default_factory=list)   # (first id, last id, form)
    sent_id: str | None = None
    text: str | None = None
    line: int | None = field(default=None, compare=False, repr=False)   # where the block starts in its file

    def __post_init__(self):
        n = len(self.words)
        if not self.deprels:
            self.deprels = ["root" if h == 0 else "dep" for h in self.heads]
        if not self.upos:
            self.upos = ["_"] * n
        if not (len(self.heads) == len(self.deprels) == len(self.upos) == n):
            raise ValueError("words, heads, deprels and upos must have equal length")

    def __len__(self) -> int:
        return len(self.words)


def validate_heads(heads: list[int], *, path=None, lineno=None) -> None:
    """Heads in ``0..n``, at least one root, no cycle."""
    n = len(heads)
    if n == 0:
        raise FormatError("sentence has no words", path, lineno, "at least one word line")
    for k, h in enumerate(heads):
        if not (0 <= h <= n):
            raise FormatError(f"word {k + 1} has head {h}, out of range", path, lineno, f"a head in 0..{n}")
        if h == k + 1:
            raise FormatError(f"word {k + 1} is its own head", path, lineno, "a tree (no cycle)")
    state = [0] * (n + 1)     # 0 unknown, 1 on current path, 2 reaches root
    state[0] = 2
    for start in range(1, n + 1):
        path_nodes, v = [], start
        while state[v] == 0:
            state[v] = 1
            path_nodes.append(v)
            v = heads[v - 1]
        if state[v] == 1:
            raise FormatError(f"the heads form a cycle through word {v}", path, lineno, "a tree (no cycle)")
        for u in path_nodes:
            state[u] = 2


_ID = re.compile(r"[1-9][0-9]*(?:-[1-9][0-9]*|\.[1-9][0-9]*)?", re.ASCII)
_HEAD = re.compile(r"0|[1-9][0-9]*", re.ASCII)


def _blocks(path) -> Iterator[tuple[int, list[str]]]:
    start, buf = None, []
    for lineno, text in read_lines(path):
        if text.strip() == "":
            if buf:
                yield start, buf
            start, buf = None, []
        else:
            if start is None:
                start = lineno
            buf.append(text)
    if buf:
        yield start, buf


def read_conllu(path: str | os.PathLike) -> Iterator[DepTree]:
    """Stream :class:`DepTree` objects from a CoNLL-U file, validating each tree."""
    for start, lines in _blocks(path):
        for off, ln in enumerate(lines):
            if ln.startswith("#"):
                continue
            cols = ln.split("\t")
            if len(cols) != 10:
                raise FormatError(f"token line has {len(cols)} tab-separated columns", path,
                                  start + off, "10 columns (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC)")
            if not _ID.fullmatch(cols[0]):          # the conllu package also reads " 1", "01" or "+1" as 1
                raise FormatError(f"token line has ID {cols[0]!r}", path, start + off,
                                  "a word id 1, 2, ..., a range 'a-b' or an empty node 'a.b'")
            if cols[0].isdigit() and cols[6] != "_" and not _HEAD.fullmatch(cols[6]):
                raise FormatError(f"word {cols[0]} has HEAD {cols[6]!r}", path, start + off,
                                  "an integer HEAD (0 for the root)")
        try:
            sents = _conllu.parse("\n".join(lines) + "\n\n")
        except Exception as e:  # conllu raises ParseException for bad ids/heads
            raise FormatError(f"CoNLL-U parse error: {e}", path, start, "a valid CoNLL-U sentence") from None
        for sent in sents:
            words, heads, rels, upos, mwt = [], [], [], [], []
            for tok in sent:
                tid = tok["id"]
                if isinstance(tid, tuple):
                    if len(tid) == 3 and tid[1] == "-":
                        mwt.append((tid[0], tid[2], tok["form"]))
                    continue            # empty node (3.1) or MWT range
                if tid != len(words) + 1:
                    raise FormatError(f"word id {tid} out of sequence", path, start,
                                      f"word ids 1..n in order (next: {len(words) + 1})")
                h = tok["head"]
                if h is None:
                    raise FormatError(f"word {tid} has no head ('_')", path, start, "an integer HEAD column")
                words.append(tok["form"])
                heads.append(int(h))
                rels.append(tok["deprel"] or "_")
                upos.append(tok["upos"] or "_")
            validate_heads(heads, path=path, lineno=start)
            meta = sent.metadata or {}
            yield DepTree(words, heads, rels, upos, mwt, meta.get("sent_id"), meta.get("text"), start)


def format_conllu(tree: DepTree) -> str:
    """Render one sentence block (without the blank line that ends it)."""
    out = []
    if tree.sent_id is not None:
        out.append(f"# sent_id = {tree.sent_id}")
    if tree.text is not None:
        out.append(f"# text = {tree.text}")
    mwt = {a: (b, f) for a, b, f in tree.mwt}
    for k, (w, h, r, u) in enumerate(zip(tree.words, tree.heads, tree.deprels, tree.upos), 1):
        if k in mwt:
            b, f = mwt[k]
            out.append(f"{k}-{b}\t{f}\t_\t_\t_\t_\t_\t_\t_\t_")
        out.append(f"{k}\t{w}\t_\t{u}\t_\t_\t{h}\t{r}\t_\t_")
    return "\n".join(out)


def write_conllu(path: str | os.PathLike, trees: Iterable[DepTree]) -> int:
    n = 0
    with atomic_write(path) as f:
        for t in trees:
            validate_heads(t.heads, path=path)
            f.write(format_conllu(t) + "\n\n")
            n += 1
    return n
