"""Property tests for the readers of every file format: random bytes, and random edits of valid files, either
read to the same result as a small reference parser written here from the format's description, or are refused
with xlpe's own error (an :class:`xlpe.errors.XlpeError`) — never another exception, never a different result.

The reference parsers are deliberately naive (whole-file, no streaming); they state the formats:

* text: lines end at ``\\n`` (a ``\\r`` before it is dropped), strict UTF-8, a leading byte-order mark dropped;
  tokens are separated by ASCII spaces;
* Pharaoh: whitespace-separated links ``i-j`` (sure), ``ipj`` / ``i?j`` (possible), ASCII digits, the file's
  index base subtracted, no negative index;
* lader: ``SRCLEN-TRGLEN ||| links`` with 0-based links inside the lengths;
* orders: whitespace-separated ASCII integers forming a permutation of ``0..n-1``;
* ``src ||| tgt``: exactly one ``|||``, with a space on each side that has text, two non-empty sides;
* DPE targets: Pharaoh sure links ``i-p``, 0-based, at most one per source token;
* CoNLL-U: blank-line-separated blocks of ``#`` comments and 10-column token lines; word ids 1..n in order
  (ranges ``a-b`` and empty nodes ``a.b`` aside), integer heads forming a tree.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xlpe.errors import XlpeError

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


class Bad(Exception):
    """The reference parser refuses the input."""


# -- the reference parsers ---------------------------------------------------------------------------------------

def ref_lines(data: bytes) -> list[str]:
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    out = []
    for k, r in enumerate(raw):
        try:
            t = r.decode("utf-8")
        except UnicodeDecodeError:
            raise Bad(f"line {k + 1}: not UTF-8") from None
        if k == 0 and t.startswith("\ufeff"):
            t = t[1:]
        out.append(t[:-1] if t.endswith("\r") else t)
    return out


def ref_tokens(text: str) -> list[str]:
    return [w for w in text.split(" ") if w]


_REF_LINK = re.compile(r"([0-9]+)([-p?])([0-9]+)", re.ASCII)


def ref_pharaoh_line(text: str, base: int, lengths=None) -> tuple[frozenset, frozenset]:
    sure, poss = set(), set()
    for tok in text.split():
        m = _REF_LINK.fullmatch(tok)
        if m is None:
            raise Bad(tok)
        i, j = int(m.group(1)) - base, int(m.group(3)) - base
        if i < 0 or j < 0 or (lengths is not None and (i >= lengths[0] or j >= lengths[1])):
            raise Bad(tok)
        (sure if m.group(2) == "-" else poss).add((i, j))
    return frozenset(sure), frozenset(poss | sure)


def ref_pharaoh(data: bytes, base: int) -> list:
    return [ref_pharaoh_line(t, base) for t in ref_lines(data)]


def ref_lader(data: bytes) -> list:
    out = []
    for t in ref_lines(data):
        head, sep, rest = t.partition("|||")
        m = re.fullmatch(r"[ \t\n\r\f\v]*([0-9]+)-([0-9]+)[ \t\n\r\f\v]*", head, re.ASCII)
        if not sep or m is None:
            raise Bad(t)
        sl, tl = int(m.group(1)), int(m.group(2))
        out.append((sl, tl, ref_pharaoh_line(rest, 0, (sl, tl))))
    return out


def ref_orders(data: bytes) -> list:
    out = []
    for t in ref_lines(data):
        toks = t.split()
        if not all(re.fullmatch(r"[0-9]+", x, re.ASCII) for x in toks):
            raise Bad(t)
        order = [int(x) for x in toks]
        if sorted(order) != list(range(len(order))):
            raise Bad(t)
        out.append(order)
    return out


def ref_joint(data: bytes) -> list:
    out = []
    for t in ref_lines(data):
        if t.count("|||") != 1:
            raise Bad(t)
        k = t.index("|||")
        left, right = t[:k], t[k + 3:]
        if (left and not left.endswith(" ")) or (right and not right.startswith(" ")):
            raise Bad(t)
        s, g = ref_tokens(left), ref_tokens(right)
        if not s or not g:
            raise Bad(t)
        out.append((s, g))
    return out


def ref_dpe(data: bytes) -> list:
    out = []
    for t in ref_lines(data):
        sure, every = ref_pharaoh_line(t, 0)
        if every != sure:
            raise Bad(t)                              # a possible link is not a DPE target
        targets: dict[int, int] = {}
        for i, p in sorted(sure):
            if i in targets:
                raise Bad(t)
            targets[i] = p
        out.append(targets)
    return out


def ref_conllu(data: bytes) -> list:
    blocks, buf = [], []
    for t in ref_lines(data) + [""]:
        if t.strip() == "":
            if buf:
                blocks.append(buf)
            buf = []
        else:
            buf.append(t)
    trees = []
    for lines in blocks:
        words, heads = [], []
        for ln in lines:
            if ln.startswith("#"):
                continue
            cols = ln.split("\t")
            if len(cols) != 10:
                raise Bad(ln)
            tid = cols[0]
            if re.fullmatch(r"[1-9][0-9]*-[1-9][0-9]*|[1-9][0-9]*\.[1-9][0-9]*", tid, re.ASCII):
                continue
            if not re.fullmatch(r"[1-9][0-9]*", tid, re.ASCII) or int(tid) != len(words) + 1:
                raise Bad(ln)
            if not re.fullmatch(r"0|[1-9][0-9]*", cols[6], re.ASCII):
                raise Bad(ln)
            words.append(cols[1])
            heads.append(int(cols[6]))
        n = len(heads)
        if not n or any(not 0 <= h <= n for h in heads):
            raise Bad(lines)
        for k in range(1, n + 1):                       # every word reaches the root in at most n steps
            v, steps = k, 0
            while v != 0 and steps <= n:
                v, steps = heads[v - 1], steps + 1
            if v != 0:
                raise Bad(lines)
        trees.append((words, heads))
    return trees


# -- the readers under test, each as bytes -> the reference's result --------------------------------------------

def _file(tmp_path, data: bytes):
    p = tmp_path / "f"
    p.write_bytes(data)
    return p


def read_text(p):
    from xlpe.io.text import read_lines
    return [t for _, t in read_lines(p)]


def read_pharaoh(base):
    def read(p):
        from xlpe.io.alignments import read_alignments
        return [(a.sure, a.possible) for a in read_alignments(p, base, check_base=False)]
    return read


def read_lader(p):
    from xlpe.io.alignments import read_lader_alignments
    return [(sl, tl, (a.sure, a.possible)) for sl, tl, a in read_lader_alignments(p)]


def read_orders_(p):
    from xlpe.io.orders import read_orders
    return list(read_orders(p))


def read_joint(p):
    from xlpe.io.bitext import read_joint_bitext
    return list(read_joint_bitext(p))


def read_dpe(p):
    from xlpe.data.channels import _file_items
    return list(_file_items("dpe", p))


def read_trees(p):
    from xlpe.io.conllu import read_conllu
    return [(t.words, t.heads) for t in read_conllu(p)]


FORMATS = {
    "text": (ref_lines, read_text),
    "pharaoh0": (lambda d: ref_pharaoh(d, 0), read_pharaoh(0)),
    "pharaoh1": (lambda d: ref_pharaoh(d, 1), read_pharaoh(1)),
    "lader": (ref_lader, read_lader),
    "orders": (ref_orders, read_orders_),
    "joint": (ref_joint, read_joint),
    "dpe": (ref_dpe, read_dpe),
    "conllu": (ref_conllu, read_trees),
}


def agree(fmt: str, data: bytes, tmp_path) -> None:
    """The reader of ``fmt`` gives the reference's result, or both refuse (the reader with an XlpeError)."""
    ref, read = FORMATS[fmt]
    try:
        expected = ref(data)
    except Bad:
        expected = Bad
    try:
        got = read(_file(tmp_path, data))
    except XlpeError as e:
        assert expected is Bad, f"{fmt}: refused valid input {data!r}: {e}"
        return
    assert expected is not Bad, f"{fmt}: accepted invalid input {data!r} as {got!r}"
    assert got == expected, f"{fmt}: {data!r} read as {got!r}, expected {expected!r}"


# -- valid files of each format, and edits of them ------------------------------------------------------------------

small = st.integers(0, 6)


@st.composite
def pharaoh_lines(draw, base=0, sep=st.sampled_from("-p?")):
    links = draw(st.lists(st.tuples(small, sep, small), max_size=5))
    return " ".join(f"{i + base}{s}{j + base}" for i, s, j in links)


@st.composite
def lader_lines(draw):
    sl, tl = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    links = draw(st.lists(st.tuples(st.integers(0, sl - 1), st.integers(0, tl - 1)), max_size=5))
    return f"{sl}-{tl} ||| " + " ".join(f"{i}-{j}" for i, j in links)


@st.composite
def order_lines(draw):
    return " ".join(map(str, draw(st.permutations(range(draw(st.integers(0, 6)))))))


words = st.lists(st.sampled_from(["a", "b", "x|y", "é", "0-1"]), min_size=1, max_size=4).map(" ".join)


@st.composite
def joint_lines(draw):
    return draw(words) + " ||| " + draw(words)


@st.composite
def dpe_lines(draw):
    n = draw(st.integers(0, 5))
    targets = draw(st.lists(small, min_size=n, max_size=n))
    return " ".join(f"{i}-{p}" for i, p in enumerate(targets))


@st.composite
def conllu_blocks(draw):
    n = draw(st.integers(1, 4))
    heads = [draw(st.integers(0, k)) for k in range(n)]       # word k+1 -> an earlier word or the root: a tree
    rows = ["# sent_id = s"] if draw(st.booleans()) else []
    for k, h in enumerate(heads):
        rows.append("\t".join([str(k + 1), draw(st.sampled_from(["a", "b", "é"])), "_", "X", "_", "_", str(h),
                               "root" if h == 0 else "dep", "_", "_"]))
    return "\n".join(rows)


LINES = {
    "text": st.text(max_size=12), "pharaoh0": pharaoh_lines(0), "pharaoh1": pharaoh_lines(1),
    "lader": lader_lines(), "orders": order_lines(), "joint": joint_lines(), "dpe": dpe_lines(),
}


def valid_file(fmt):
    if fmt == "conllu":
        return st.lists(conllu_blocks(), min_size=1, max_size=3).map(lambda bs: "\n\n".join(bs) + "\n\n")
    return st.lists(LINES[fmt], max_size=4).map(lambda ls: "".join(t + "\n" for t in ls))


#: characters an edit inserts: each format's syntax, its near misses, and encodings' traps
NOISE = list("0123456789-p?| \t\r\n_#.+x") + ["\ufeff", "\u0663", "\uff11", "\u00a0", "\u2028", "|||", " ||| ",
                                               "-1", "\x85"]


@st.composite
def edited(draw, fmt):
    data = draw(valid_file(fmt)).encode("utf-8")
    for _ in range(draw(st.integers(1, 3))):
        k = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["insert", "delete", "replace", "byte"]))
        if op == "byte":
            piece = bytes([draw(st.integers(0, 255))])
        else:
            piece = draw(st.sampled_from(NOISE)).encode("utf-8")
        if op == "insert" or op == "byte":
            data = data[:k] + piece + data[k:]
        elif op == "delete":
            data = data[:k] + data[k + draw(st.integers(1, 3)):]
        else:
            data = data[:k] + piece + data[k + 1:]
    return data


# -- the properties ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", list(FORMATS))
@SETTINGS
@given(data=st.data())
def test_valid_files_read_as_the_reference_says(fmt, data, tmp_path):
    text = data.draw(valid_file(fmt))
    assert FORMATS[fmt][0](text.encode("utf-8")) is not Bad
    agree(fmt, text.encode("utf-8"), tmp_path)


@pytest.mark.parametrize("fmt", list(FORMATS))
@SETTINGS
@given(data=st.data())
def test_edited_files_read_as_the_reference_says_or_are_refused(fmt, data, tmp_path):
    agree(fmt, data.draw(edited(fmt)), tmp_path)


@pytest.mark.parametrize("fmt", list(FORMATS))
@SETTINGS
@given(blob=st.binary(max_size=120))
def test_random_bytes_read_as_the_reference_says_or_are_refused(fmt, blob, tmp_path):
    agree(fmt, blob, tmp_path)


# -- channel contents: trees against their source lines, DPE targets against their sentence ---------------------------
#
# * a tree fits its source line when it has as many words; several roots only as the trees of consecutive
#   sentences (each root's subtree a span of words, the spans one after another); words that differ from the line's
#   tokens are counted (an error under ``strict``, as are several roots);
# * a DPE target ranks the sentence's subwords: every ``i-p`` has ``i`` and ``p`` in ``0..n-1``.

@st.composite
def forests(draw):
    """Heads (1-based, 0 = root) of a random forest: word ``order[k]`` hangs from the root or an earlier word."""
    n = draw(st.integers(1, 6))
    order = draw(st.permutations(range(n)))
    heads = [0] * n
    for k, w in enumerate(order):
        heads[w] = draw(st.sampled_from([0] + [order[j] + 1 for j in range(k)]))
    return heads


def ref_tree_fits(words: list[str], heads: list[int], line: list[str], strict: bool) -> tuple[bool, bool]:
    """``(fits, words differ)`` of a tree against its source line."""
    if len(words) != len(line):
        return False, False
    def root(k):
        while heads[k]:
            k = heads[k] - 1
        return k
    roots = [root(k) for k in range(len(heads))]
    runs = [r for k, r in enumerate(roots) if k == 0 or roots[k - 1] != r]
    if len(set(roots)) > 1 and (strict or len(runs) != len(set(runs))):
        return False, False
    differ = words != line
    return not (differ and strict), differ


def ref_depths(heads: list[int]) -> list[int]:
    out = []
    for k in range(len(heads)):
        d, v = 0, k
        while heads[v]:
            d, v = d + 1, heads[v] - 1
        out.append(d)
    return out


@SETTINGS
@given(data=st.data(), strict=st.booleans())
def test_trees_fit_their_source_lines_as_the_reference_says(data, strict, tmp_path):
    from xlpe.errors import FormatError
    from xlpe.syntax.source import TreesSource
    vocab = st.sampled_from(["a", "b", "é"])
    trees = data.draw(st.lists(forests(), min_size=1, max_size=4))
    blocks, lines, starts, at = [], [], [], 1
    for heads in trees:
        words = [data.draw(vocab) for _ in heads]
        comment = data.draw(st.booleans())
        rows = ["# sent_id = s"] if comment else []
        rows += ["\t".join([str(k + 1), w, "_", "X", "_", "_", str(h), "root" if h == 0 else "dep", "_", "_"])
                 for k, (w, h) in enumerate(zip(words, heads))]
        blocks.append("\n".join(rows))
        starts.append(at)
        at += len(rows) + 1
        line = data.draw(st.sampled_from([list(words), [data.draw(vocab) for _ in words],
                                          list(words) + ["a"], list(words)[1:]]))
        lines.append((words, heads, line))
    path = tmp_path / "t.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    checks = [ref_tree_fits(w, h, ln, strict) for w, h, ln in lines]
    bad = next((k for k, (fits, _) in enumerate(checks) if not fits), None)
    source = TreesSource(path, strict=strict)
    sentences = [ln for _, _, ln in lines]
    if bad is not None:
        with pytest.raises(FormatError) as e:
            source.take(sentences)
        assert (e.value.path, e.value.line) == (str(path), starts[bad]), e.value
        return
    got = source.take(sentences)
    source.finish(len(sentences))
    assert source.n_differing == sum(differ for _, differ in checks)
    for (words, heads, _), values in zip(lines, got):
        assert values == {"depth": ref_depths(heads), "tree_word": list(range(len(heads))),
                          "tree_head": [h - 1 for h in heads]}


@SETTINGS
@given(lines=st.lists(st.tuples(st.integers(1, 6), st.lists(st.tuples(st.integers(0, 7), st.integers(0, 9)),
                                                            max_size=5, unique_by=lambda l: l[0])),
                      min_size=1, max_size=4))
def test_dpe_targets_rank_the_sentence_s_subwords(lines, tmp_path):
    from xlpe.data.channels import expand_channel, file_source
    from xlpe.errors import ConfigError
    path = tmp_path / "t.dpe"
    path.write_text("".join(" ".join(f"{i}-{p}" for i, p in links) + "\n" for _, links in lines))
    values = file_source("dpe", path).take([["x"]] * len(lines))
    for (n, links), v in zip(lines, values):
        fits = all(i < n and p < n for i, p in links)
        if not fits:
            with pytest.raises(ConfigError, match=rf"{n} subwords"):
                expand_channel("dpe_target", v, None, n)
            continue
        expected = [-1] * n + [-1]
        for i, p in links:
            expected[i] = p
        assert expand_channel("dpe_target", v, None, n).tolist() == expected
