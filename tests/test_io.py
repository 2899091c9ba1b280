"""Formats: round trips (property-based), streaming, and every bad-input case of the foundation issue."""

import os

import pytest
from hypothesis import given, settings, strategies as st

from xlpe.errors import FormatError
from xlpe.io import (Alignment, DepTree, format_alignment, invert_order, parse_alignment_line, read_alignments,
                     read_bitext, read_conllu, read_joint_bitext, read_orders, read_sentences, tokenize,
                     write_alignments, write_bitext, write_conllu, write_joint_bitext, write_orders)
from xlpe.io.alignments import format_lader_line, parse_lader_line, read_lader_alignments
from xlpe.io.atomic import write_lines
from xlpe.io.orders import apply_order

token = st.text(alphabet=st.characters(blacklist_characters=" \n\r", blacklist_categories=("Cs",)), min_size=1,
                max_size=6)
sentence = st.lists(token, min_size=1, max_size=8)


def _write(p, text, mode="w"):
    if "b" in mode:
        p.write_bytes(text)
    else:
        with open(p, mode, encoding="utf-8", newline="") as f:
            f.write(text)
    return p


# ---------------------------------------------------------------- bitext
def test_tokenize_keeps_ideographic_space():
    assert tokenize("a \u3000 b  c") == ["a", "\u3000", "b", "c"]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(sentence, sentence), min_size=1, max_size=10))
def test_bitext_round_trip(tmp_path_factory, pairs):
    d = tmp_path_factory.mktemp("bt")
    write_bitext(d / "s", d / "t", pairs)
    assert list(read_bitext(d / "s", d / "t")) == pairs
    if not any("|||" in s + t for s, t in pairs):
        write_joint_bitext(d / "j", pairs)
        assert list(read_joint_bitext(d / "j")) == pairs


def test_bitext_line_count_mismatch(tmp_path):
    s = _write(tmp_path / "s", "a b\nc\nd\n")
    t = _write(tmp_path / "t", "x\ny\n")
    with pytest.raises(FormatError) as e:
        list(read_bitext(s, t))
    assert str(s) in str(e.value) and ":3:" in str(e.value) and "equal line counts" in str(e.value)


def test_bitext_empty_line(tmp_path):
    s = _write(tmp_path / "s", "a b\n\n")
    t = _write(tmp_path / "t", "x\ny\n")
    with pytest.raises(FormatError, match=r"s:2: empty source sentence"):
        list(read_bitext(s, t))
    assert len(list(read_bitext(s, t, allow_empty=True))) == 2


def test_invalid_utf8(tmp_path):
    p = _write(tmp_path / "bad", b"ok\nbad \xff\xfe here\n", "wb")
    with pytest.raises(FormatError, match=r"bad:2: invalid UTF-8"):
        list(read_sentences(p))


def test_joint_bitext_separator_errors(tmp_path):
    p = _write(tmp_path / "j", "a b ||| c\na b|||c\n")
    with pytest.raises(FormatError, match=r"j:2: separator"):
        list(read_joint_bitext(p))


def test_reader_streams(tmp_path):
    # a generator: reading the first pair of a file must not read (or validate) the rest
    s = _write(tmp_path / "s", "a\n" + "b\n" * 1000 + "\n")
    t = _write(tmp_path / "t", "x\n" * 1002)
    it = read_bitext(s, t)
    assert next(it) == (["a"], ["x"])


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    p = tmp_path / "out.txt"

    def gen():
        yield "one"
        raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        write_lines(p, gen())
    assert not p.exists() and os.listdir(tmp_path) == []
    write_lines(p, ["old"])
    with pytest.raises(RuntimeError):
        write_lines(p, gen())
    assert p.read_text() == "old\n"


def test_atomic_write_no_partial_on_bad_pair(tmp_path):
    with pytest.raises(FormatError):
        write_bitext(tmp_path / "s", tmp_path / "t", [(["a"], ["b"]), (["a b"], ["c"])])
    assert os.listdir(tmp_path) == []


# ---------------------------------------------------------------- alignments
links = st.frozensets(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=20)


@settings(max_examples=60, deadline=None)
@given(links, links, st.sampled_from([0, 1]))
def test_alignment_line_round_trip(s, p, base):
    a = Alignment(s, p)
    assert a.sure <= a.possible
    assert parse_alignment_line(format_alignment(a, base), base) == a


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(links, links), min_size=1, max_size=6), st.sampled_from([0, 1]))
def test_alignment_file_round_trip(tmp_path_factory, items, base):
    d = tmp_path_factory.mktemp("al")
    als = [Alignment(s, p) for s, p in items]
    write_alignments(d / "a", als, base)
    assert list(read_alignments(d / "a", base, check_base=False)) == als


def test_possible_link_spellings():
    a = parse_alignment_line("1-1 2p3 3?1", 1)
    assert a.sure == {(0, 0)} and a.possible == {(0, 0), (1, 2), (2, 0)}
    b = parse_alignment_line("0-0 1-2-P", 0, extra_sep="-P")
    assert b.sure == {(0, 0)} and b.possible_only == {(1, 2)}


@pytest.mark.parametrize("line", ["0-0 1:2", "0-0 a-1", "0--1", "1-", "0-0 1x1"])
def test_malformed_link(tmp_path, line):
    p = _write(tmp_path / "al", "0-0\n" + line + "\n")
    with pytest.raises(FormatError, match=r"al:2: link .* is malformed"):
        list(read_alignments(p, 0, check_base=False))


def test_index_beyond_length(tmp_path):
    p = _write(tmp_path / "al", "0-0 1-1\n0-0 2-1\n")
    with pytest.raises(FormatError, match=r"al:2: .*source index 2 is beyond the source sentence of 2 tokens"):
        list(read_alignments(p, 0, lengths=[(2, 2), (2, 2)]))


def test_one_based_read_as_zero_based_with_lengths(tmp_path):
    p = _write(tmp_path / "gold", "1-1 2-2 3-3\n")
    with pytest.raises(FormatError, match="looks 1-based"):
        list(read_alignments(p, 0, lengths=[(3, 3)]))


def test_one_based_read_as_zero_based_without_lengths(tmp_path):
    p = _write(tmp_path / "gold", "".join(f"{k % 5 + 1}-{k % 4 + 1} 2-2\n" for k in range(120)))
    with pytest.raises(FormatError, match="most likely 1-based"):
        list(read_alignments(p, 0))
    assert len(list(read_alignments(p, 1))) == 120


def test_zero_based_read_as_one_based(tmp_path):
    p = _write(tmp_path / "hyp", "0-0 1-1\n")
    with pytest.raises(FormatError, match="looks 0-based"):
        list(read_alignments(p, 1))


def test_alignment_line_count_mismatch(tmp_path):
    p = _write(tmp_path / "al", "0-0\n")
    with pytest.raises(FormatError, match="bitext has more"):
        list(read_alignments(p, 0, lengths=[(1, 1), (1, 1)], check_base=False))
    with pytest.raises(FormatError, match="more lines than the bitext"):
        list(read_alignments(p, 0, lengths=[], check_base=False))


def test_staged_gold_sets_parse(shared_data):
    gold = shared_data / "word-alignment-gold"
    pairs = {"deen": ("de", "en"), "enfr": ("en", "fr"), "zhen": ("zh", "en"), "jaen": ("ja", "en")}
    for name, (s, t) in pairs.items():
        d = gold / name
        lens = [(len(a), len(b)) for a, b in read_bitext(d / f"{name}.{s}", d / f"{name}.{t}")]
        als = list(read_alignments(d / f"{name}.talp", 1, lengths=lens))
        assert len(als) == len(lens) and all(len(a) for a in als)


def test_lader_alignment_format(tmp_path):
    sl, tl, a = parse_lader_line("4-7 ||| 0-0 1-4 1-5 2-2 3-6")
    assert (sl, tl) == (4, 7) and (1, 5) in a.sure
    assert format_lader_line(sl, tl, a) == "4-7 ||| 0-0 1-4 1-5 2-2 3-6"
    p = _write(tmp_path / "la", "2-2 ||| 0-0 1-1\n3-2 ||| 0-0\n")
    with pytest.raises(FormatError, match=r"la:2: header says the source has 3 words"):
        list(read_lader_alignments(p, src_lengths=[2, 2]))
    with pytest.raises(FormatError, match="target index 5"):
        parse_lader_line("2-2 ||| 0-5")


# ---------------------------------------------------------------- orders
perm = st.integers(1, 12).flatmap(lambda n: st.permutations(list(range(n))))


def test_xl_index_direction():
    # SPEC §12 example 3: [a,b,c,d] reordered as c d b a
    o = [2, 3, 1, 0]
    assert apply_order(list("abcd"), o) == list("cdba")
    assert invert_order(o) == [3, 2, 0, 1]


@settings(max_examples=50, deadline=None)
@given(st.lists(perm, min_size=1, max_size=5))
def test_order_round_trip(tmp_path_factory, orders):
    d = tmp_path_factory.mktemp("or")
    write_orders(d / "o", orders)
    assert list(read_orders(d / "o", lengths=[len(o) for o in orders])) == orders
    for o in orders:
        inv = invert_order(o)
        assert [inv[k] for k in o] == list(range(len(o)))
        assert invert_order(inv) == list(o)


@pytest.mark.parametrize("line,msg", [("0 1 1", "not a permutation"), ("0 2", "not a permutation"),
                                      ("0 x", "non-integer"), ("0 1 2", "has 3 entries but the sentence has 2")])
def test_bad_order_lines(tmp_path, line, msg):
    p = _write(tmp_path / "ord", "1 0\n" + line + "\n")
    with pytest.raises(FormatError, match=rf"ord:2: .*{msg}"):
        list(read_orders(p, lengths=[2, 2] if "entries" in msg else None))


# ---------------------------------------------------------------- CoNLL-U
def _tree_strategy():
    @st.composite
    def tree(draw):
        n = draw(st.integers(1, 8))
        heads = [0]
        for k in range(1, n):              # attach each new word to an earlier one: always a tree
            heads.append(draw(st.integers(1, k)))
        order = draw(st.permutations(list(range(n))))   # then relabel words
        pos = {old: new for new, old in enumerate(order)}
        new_heads = [0] * n
        for old, h in enumerate(heads):
            new_heads[pos[old]] = 0 if h == 0 else pos[h - 1] + 1
        words = draw(st.lists(st.text("abcxyz", min_size=1, max_size=4), min_size=n, max_size=n))
        return DepTree(words, new_heads)
    return tree()


@settings(max_examples=40, deadline=None)
@given(st.lists(_tree_strategy(), min_size=1, max_size=4))
def test_conllu_round_trip(tmp_path_factory, trees):
    d = tmp_path_factory.mktemp("cu")
    write_conllu(d / "t.conllu", trees)
    back = list(read_conllu(d / "t.conllu"))
    assert [(t.words, t.heads, t.deprels) for t in back] == [(t.words, t.heads, t.deprels) for t in trees]


CONLLU_MWT = """# sent_id = 1
# text = vámonos al mar
1-2\tvámonos\t_\t_\t_\t_\t_\t_\t_\t_
1\tvamos\tir\tVERB\t_\t_\t0\troot\t_\t_
2\tnos\tnosotros\tPRON\t_\t_\t1\tobj\t_\t_
3-4\tal\t_\t_\t_\t_\t_\t_\t_\t_
3\ta\ta\tADP\t_\t_\t5\tcase\t_\t_
4\tel\tel\tDET\t_\t_\t5\tdet\t_\t_
5\tmar\tmar\tNOUN\t_\t_\t1\tobl\t_\t_
5.1\tx\t_\t_\t_\t_\t_\t_\t_\t_

"""


def test_conllu_multiword_tokens(tmp_path):
    p = _write(tmp_path / "m.conllu", CONLLU_MWT)
    (t,) = list(read_conllu(p))
    assert t.words == ["vamos", "nos", "a", "el", "mar"] and t.heads == [0, 1, 5, 5, 1]
    assert t.mwt == [(1, 2, "vámonos"), (3, 4, "al")]
    write_conllu(tmp_path / "o.conllu", [t])
    (u,) = list(read_conllu(tmp_path / "o.conllu"))
    assert u.words == t.words and u.mwt == t.mwt


def _sent(heads):
    rows = [f"{k}\tw{k}\t_\tX\t_\t_\t{h}\tdep\t_\t_" for k, h in enumerate(heads, 1)]
    return "# sent_id = s\n" + "\n".join(rows) + "\n\n"


def test_conllu_cycle(tmp_path):
    p = _write(tmp_path / "c.conllu", _sent([0, 1]) + _sent([0, 3, 2]))
    with pytest.raises(FormatError, match=r"c.conllu:5: the heads form a cycle"):
        list(read_conllu(p))


def test_conllu_head_out_of_range(tmp_path):
    p = _write(tmp_path / "c.conllu", _sent([0, 7]))
    with pytest.raises(FormatError, match=r"c.conllu:1: word 2 has head 7, out of range"):
        list(read_conllu(p))


def test_conllu_wrong_columns(tmp_path):
    p = _write(tmp_path / "c.conllu", "1\tw\t_\n\n")
    with pytest.raises(FormatError, match=r"c.conllu:1: token line has 3 tab-separated columns"):
        list(read_conllu(p))


def test_ud_treebanks_read(shared_data):
    p = shared_data / "ud-treebanks" / "UD_English-EWT" / "en_ewt-ud-dev.conllu"
    trees = list(read_conllu(p))
    assert len(trees) > 1000 and all(0 in t.heads for t in trees)


def test_atomic_dir_replaces_only_its_own_kind_of_directory(tmp_path):
    from xlpe.errors import ConfigError
    from xlpe.io.atomic import atomic_dir
    out = tmp_path / "model"
    with atomic_dir(out, "made.json", "a test model") as tmp:
        (tmp / "made.json").write_text("1")
        (tmp / "w").write_text("first")
    with atomic_dir(out, "made.json", "a test model") as tmp:      # an earlier one of its kind is replaced
        (tmp / "made.json").write_text("2")
    assert sorted(p.name for p in out.iterdir()) == ["made.json"]
    with pytest.raises(RuntimeError):                               # a failed write leaves the old one whole
        with atomic_dir(out, "made.json", "a test model") as tmp:
            (tmp / "made.json").write_text("3")
            raise RuntimeError("boom")
    assert (out / "made.json").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    user = tmp_path / "user"
    user.mkdir()
    (user / "thesis.tex").write_text("keep")
    afile = tmp_path / "a.txt"
    afile.write_text("keep")
    for target, message in ((user, "not a test model"), (afile, "not a directory")):
        with pytest.raises(ConfigError, match=message):
            with atomic_dir(target, "made.json", "a test model"):
                raise AssertionError("never reached")
    assert (user / "thesis.tex").read_text() == "keep" and afile.read_text() == "keep"
    empty = tmp_path / "empty"
    empty.mkdir()
    with atomic_dir(empty, "made.json", "a test model") as tmp:     # an empty folder is fine
        (tmp / "made.json").write_text("4")
    assert (empty / "made.json").is_file()


def test_file_sha256_reads_blocks_and_names_a_missing_file(tmp_path):
    import hashlib

    from xlpe.io.text import file_sha256
    p = tmp_path / "big.bin"
    data = bytes(range(256)) * 8193                   # > 2 MiB: several 1 MiB blocks, the last one partial
    p.write_bytes(data)
    assert file_sha256(p) == hashlib.sha256(data).hexdigest()
    with pytest.raises(FormatError, match="missing.bin"):
        file_sha256(tmp_path / "missing.bin")
