"""The eflomal wrapper (xlpe.align.eflomal): quality on a synthetic language pair, priors, chunking,
subwords, bad input, CLI round trip.

The synthetic pair: a random 1-1 lexicon (source word s<k> translates to t<k>), Zipf-distributed words,
no repeated word inside a sentence, and a fixed reordering for every sentence length (a random permutation
chosen once per length), so the gold alignment is known exactly.
"""

import argparse
import io
import logging
import math
import random
import sys

import pytest

pytest.importorskip("eflomal", reason="eflomal is an optional extra: pip install 'xlpe[eflomal]'")

from xlpe.align.eflomal import EFLOMAL_MAX_LEN, EflomalAligner, align_bitext, align_files
from xlpe.align.eflomal_format import AlignResult, TextWriter, eflomal_token
from xlpe.align.eflomal_input import file_blocks
from xlpe.align.priors import PriorIndex, Priors
from xlpe.cli.align import add_cli_arguments, cli_main
from xlpe.errors import ConfigError, FormatError
from xlpe.io.alignments import Alignment, read_alignments

FAST = dict(quiet=True, n_samplers=1, iterations=(4, 4, 4))


def make_corpus(n, vocab=400, seed=0, min_len=4, max_len=10):
    rng = random.Random(seed)
    weights = [1.0 / (k + 1) ** 0.8 for k in range(vocab)]
    perms = {}
    src, tgt, gold = [], [], []
    for _ in range(n):
        length = rng.randint(min_len, max_len)
        words = set()
        while len(words) < length:
            words.add(rng.choices(range(vocab), weights)[0])
        ws = list(words)
        rng.shuffle(ws)
        order = perms.setdefault(length, random.Random(1000 + length).sample(range(length), length))
        src.append([f"s{w}" for w in ws])
        tgt.append([f"t{ws[i]}" for i in order])  # target position j holds source word order[j]
        gold.append(Alignment.from_links((i, j) for j, i in enumerate(order)))
    return src, tgt, gold


def aer(hyps, refs):
    """Micro-averaged AER = 1 - (|A∩S| + |A∩P|) / (|A| + |S|)."""
    a = s = a_s = a_p = 0
    for h, r in zip(hyps, refs, strict=True):
        a += len(h.links)
        s += len(r.sure)
        a_s += len(h.links & r.sure)
        a_p += len(h.links & r.possible)
    return 1.0 - (a_s + a_p) / (a + s)


@pytest.fixture(scope="module")
def corpus():
    return make_corpus(3000)


@pytest.fixture(scope="module")
def fitted(corpus):
    src, tgt, _ = corpus
    al = EflomalAligner(quiet=True, n_samplers=2)
    result = al.fit(src, tgt)
    return al, result


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# --- quality --------------------------------------------------------------------------------------------

def test_fit_reaches_low_aer_on_synthetic_corpus(corpus, fitted):
    _, _, gold = corpus
    al, res = fitted
    assert isinstance(res, AlignResult) and len(res) == len(gold)
    assert aer(res.alignments, gold) <= 0.05
    assert aer(res.forward, gold) <= 0.10 and aer(res.reverse, gold) <= 0.10
    assert res.skipped == [] and res.scores_forward is None
    # the directional alignments have the IBM shape, in source-target orientation
    for f, r, s, t in zip(res.forward[:200], res.reverse[:200], corpus[0], corpus[1]):
        assert len({j for _, j in f.links}) == len(f.links)  # forward: <= 1 source word per target word
        assert len({i for i, _ in r.links}) == len(r.links)  # reverse: <= 1 target word per source word
        assert all(i < len(s) and j < len(t) for i, j in f.links | r.links)
    # the lexical priors know the lexicon (eflomal leaves many of the most frequent word's links to NULL,
    # like a function word, so s0 is left out)
    lex = al.priors.lex
    assert all(max(lex[f"s{k}"], key=lex[f"s{k}"].get) == f"t{k}" for k in range(1, 30))


def test_priors_from_big_corpus_help_small_batch(fitted, tmp_path):
    al, _ = fitted
    src, tgt, gold = make_corpus(40, seed=5)
    alone = EflomalAligner(quiet=True, n_samplers=2).align(src, tgt)
    with_priors = al.align(src, tgt)
    assert aer(with_priors, gold) < aer(alone, gold) - 0.10
    assert aer(with_priors, gold) <= 0.05

    # save -> load -> align in chunks: same quality
    path = tmp_path / "model.priors"
    al.save(path)
    assert path.read_text(encoding="utf-8").startswith("LEX\t")
    assert (tmp_path / "model.priors.xlpe.json").exists()
    loaded = EflomalAligner.load(path, quiet=True, n_samplers=2, chunk_size=15)
    assert loaded.priors.n_lex == al.priors.n_lex and loaded.priors.hmmf == al.priors.hmmf
    chunked = loaded.align(src, tgt)
    assert len(chunked) == 40 and aer(chunked, gold) <= 0.05
    streamed = list(loaded.iter_align(zip(src, tgt)))
    assert len(streamed) == 40 and aer(streamed, gold) <= 0.05
    assert aer(align_bitext(src, tgt, priors=path, quiet=True), gold) <= 0.05


def test_priors_file_is_eflomal_format(fitted, tmp_path):
    import eflomal
    al, _ = fitted
    # byte-identical to a single eflomal.write_priors call with the same counts
    p = al.priors
    ours = tmp_path / "ours.priors"
    p.write(ours)
    buf = io.StringIO()
    eflomal.write_priors(buf, {(s, t): a for s, d in p.lex.items() for t, a in d.items()}, p.hmmf, p.hmmr,
                         {(s, k): a for s, d in p.ferf.items() for k, a in d.items()},
                         {(t, k): a for t, d in p.ferr.items() for k, a in d.items()})
    assert ours.read_text(encoding="utf-8") == buf.getvalue()
    # restricting to a chunk's vocabulary gives the same eflomal input file as converting everything
    sv = {w: k for k, w in enumerate(["s0", "s5", "s17", "zzz"])}
    tv = {w: k for k, w in enumerate(["t5", "t0", "t99"])}
    with open(ours, encoding="utf-8") as f:
        everything = eflomal.read_priors(f)
    full, part = io.StringIO(), io.StringIO()
    eflomal.to_eflomal_priors_file(everything, PriorIndex(sv), PriorIndex(tv), full)
    eflomal.to_eflomal_priors_file(p.restricted(sv, tv), PriorIndex(sv), PriorIndex(tv), part)
    assert full.getvalue() == part.getvalue()
    # a plain eflomal priors file (no xlpe metadata beside it) loads; a corrupt one names the file
    bare = EflomalAligner.load(ours, quiet=True)
    assert bare.priors.n_lex == p.n_lex and bare.lowercase is False
    bad = tmp_path / "bad.priors"
    bad.write_text("LEX\ta\tb\t1\nNOPE\tx\n", encoding="utf-8")
    with pytest.raises(FormatError, match=rf"{bad}: invalid priors line"):
        Priors.read(bad)


def test_text_writer_matches_eflomal_write_text(tmp_path):
    import numpy as np
    from eflomal.cython import write_text
    sents = [[0, 1, 2], [3], [2, 2, 4, 1]]
    tw = TextWriter(str(tmp_path / "ours"))
    for s in sents:
        tw.add(s)
    tw.finish(5)
    with open(tmp_path / "theirs", "wb") as f:
        write_text(f, tuple(np.array(s, dtype=np.uint32) for s in sents), 5)
    assert (tmp_path / "ours").read_bytes() == (tmp_path / "theirs").read_bytes()


def test_sentence_scores_and_directions(corpus):
    src, tgt, gold = (x[:300] for x in corpus)
    res = EflomalAligner(**FAST, sym="intersection").align_detailed(src, tgt, scores=True)
    assert len(res.scores_forward) == 300 and all(math.isfinite(x) for x in res.scores_forward + res.scores_reverse)
    for a, f, r in zip(res.alignments, res.forward, res.reverse):
        assert a.links == f.links & r.links
    fwd_only = EflomalAligner(**FAST, sym="forward").align(src[:50], tgt[:50])
    assert all(len({j for _, j in a.links}) == len(a.links) for a in fwd_only)


def test_subword_alignment_any_rule(corpus):
    src, tgt, gold = (x[:2000] for x in corpus)

    def two_chars(words):  # trivial segmentation: pieces of two characters, e.g. s123 -> s1 23
        pieces, word_of = [], []
        for w_idx, w in enumerate(words):
            for k in range(0, len(w), 2):
                pieces.append(w[k:k + 2])
                word_of.append(w_idx)
        return pieces, word_of

    words = EflomalAligner(quiet=True, n_samplers=2, subword=two_chars).align(src, tgt)
    assert aer(words, gold) <= 0.15
    assert all(i < len(s) and j < len(t) for a, s, t in zip(words, src, tgt) for i, j in a.links)
    pieces = EflomalAligner(**FAST, subword=(two_chars, two_chars), subword_output=True).align(src[:100], tgt[:100])
    n_pieces = lambda ws: len(two_chars(ws)[0])  # noqa: E731
    assert any(i >= len(s) for a, s in zip(pieces, src[:100]) for i, _ in a.links)  # really piece indices
    assert all(i < n_pieces(s) and j < n_pieces(t) for a, s, t in zip(pieces, src[:100], tgt[:100])
               for i, j in a.links)


def test_subword_model_object_from_xlpe_data(tmp_path, corpus):
    sub = pytest.importorskip("xlpe.data.subword")
    pytest.importorskip("sentencepiece")
    src, tgt, _ = (x[:300] for x in corpus)
    model = sub.train_subwords([], tmp_path / "sp.model", sentences=[" ".join(s) + " " + " ".join(t)
                                                                    for s, t in zip(src, tgt)],
                               vocab_size=300, num_threads=1)
    out = EflomalAligner(**FAST, subword=model).align(src, tgt)
    assert all(i < len(s) and j < len(t) for a, s, t in zip(out, src, tgt) for i, j in a.links)
    out2 = EflomalAligner(**FAST, subword=tmp_path / "sp.model").align(src[:20], tgt[:20])
    assert len(out2) == 20


def test_lowercase_option():
    src, tgt, gold = make_corpus(300, seed=3)
    rng = random.Random(0)
    tgt = [[w.upper() if rng.random() < 0.5 else w for w in t] for t in tgt]
    al = EflomalAligner(**FAST, lowercase=True)
    res = al.fit(src, tgt)
    assert all(t == t.lower() for d in al.priors.lex.values() for t in d)
    al_cased = EflomalAligner(**FAST)
    al_cased.fit(src, tgt)
    assert any(t != t.lower() for d in al_cased.priors.lex.values() for t in d)
    assert len(res.alignments) == 300


def test_tokens_with_unicode_spaces_keep_their_index():
    # U+3000 is a token (the Ja-En gold set has it); eflomal's own readers would drop it and shift indices
    assert eflomal_token("\u3000") == "\\u3000"
    assert eflomal_token("a\\b") == "a\\\\b" and eflomal_token("a\tb") == "a\\u0009b"
    assert eflomal_token("<NULL>") == "\\<NULL>" and eflomal_token("") == "\\_" and eflomal_token("x") == "x"
    # single-word pairs pin the lexicon, so the (unseeded) sampler has no ambiguity left
    src = [["a", "\u3000", "b"], ["a"], ["b"], ["\u3000"]] * 30
    tgt = [["A", "\u3000", "B"], ["A"], ["B"], ["\u3000"]] * 30
    al = EflomalAligner(**FAST)
    res = al.fit(src, tgt)
    assert (1, 1) in res.alignments[0].links and (2, 2) in res.alignments[0].links
    assert "\\u3000" in al.priors.lex


# --- bad input --------------------------------------------------------------------------------------------

def test_memory_errors_and_skip_bad(caplog):
    src = [["a", "b"], ["c"], ["d", "e"]] * 20
    tgt = [["A", "B"], [], ["D", "E"]] * 20
    with pytest.raises(FormatError, match=r"<target>:2: empty target sentence"):
        EflomalAligner(**FAST).align(src, tgt)
    with pytest.raises(FormatError, match="the source has 60 sentences but the target has 59"):
        EflomalAligner(**FAST).align(src, tgt[:-1])
    with caplog.at_level(logging.WARNING, logger="xlpe.align.eflomal"):
        res = EflomalAligner(**FAST, skip_bad=True).align_detailed(src, tgt, scores=True)
    assert len(res) == 60
    assert [k for k, _ in res.skipped] == list(range(1, 60, 3)) and res.skipped[0][1] == "empty"
    assert all(res.alignments[k] == Alignment() for k in range(1, 60, 3))
    assert math.isnan(res.scores_forward[1]) and not math.isnan(res.scores_forward[0])
    assert "skipped 20 of 60 sentence pairs" in caplog.text
    long_src = [["w"] * EFLOMAL_MAX_LEN, ["a"]]
    with pytest.raises(FormatError, match="eflomal aligns at most 1023"):
        EflomalAligner(**FAST).align(long_src, [["x"], ["A"]])
    res = EflomalAligner(**FAST, skip_bad=True).align_detailed(long_src, [["x"], ["A"]])
    assert res.skipped == [(0, "too long")] and len(res) == 2 and res.alignments[0] == Alignment()


def test_file_errors_name_file_and_line(tmp_path):
    src = write(tmp_path / "train.src", ["a b", "c d", "e f", "g h"])
    tgt = write(tmp_path / "train.tgt", ["A B", "C D", "", "G H"])
    out = tmp_path / "out.align"
    with pytest.raises(FormatError) as e:
        align_files(src, tgt, out, **FAST)
    assert f"{tgt}:3: empty target sentence" in str(e.value)
    assert not out.exists()  # nothing half-written
    stats = align_files(src, tgt, out, **FAST, skip_bad=True)
    assert stats["pairs"] == 4 and stats["skipped"] == 1 and stats["skipped_lines"] == [(3, "empty")]
    lines = out.read_text().split("\n")
    assert len(lines) == 5 and lines[2] == "" and lines[4] == "" and all(lines[k] for k in (0, 1, 3))

    short = write(tmp_path / "short.tgt", ["A B", "C D", "E F"])
    for skip in (False, True):  # a line-count mismatch cannot be skipped
        with pytest.raises(FormatError, match=rf"{short} has 3 lines but {src} has more"):
            align_files(src, short, out, **FAST, skip_bad=skip)

    joint = write(tmp_path / "joint.txt", ["a b ||| A B", "c d A B", "e f ||| E F"])
    with pytest.raises(FormatError, match=rf"{joint}:2: found 0 '\|\|\|' separators"):
        align_files(joint, None, out, **FAST)
    stats = align_files(joint, None, out, **FAST, skip_bad=True)
    assert stats["skipped_lines"] == [(2, "malformed")]
    assert out.read_text().split("\n")[1] == ""


def test_missing_eflomal_gives_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "eflomal", None)
    monkeypatch.setitem(sys.modules, "eflomal.cython", None)
    with pytest.raises(ConfigError, match=r"pip install 'xlpe\[eflomal\]' \(GPLv3\)"):
        EflomalAligner(**FAST).align([["a"]], [["b"]])


def test_option_validation(caplog):
    with pytest.raises(ConfigError):
        EflomalAligner(model=4)
    with pytest.raises(ConfigError):
        EflomalAligner(sym="grow")
    with pytest.raises(ConfigError):
        EflomalAligner(iterations=(1, 2))
    with pytest.raises(ConfigError):
        EflomalAligner(subword_output=True)
    assert EflomalAligner(model=1, iterations=5).iterations == (5, 0, 0)
    with caplog.at_level(logging.WARNING, logger="xlpe.align.eflomal"):
        EflomalAligner(seed=7)
    assert "cannot be seeded" in caplog.text
    with pytest.raises(Exception, match="nothing to save"):
        EflomalAligner().save("/nonexistent/x")


# --- the vectorised path equals the per-sentence reference (a deterministic stand-in for the sampler) ----------

def fake_eflomal(calls):
    """A stand-in for ``eflomal.cython.align``: deterministic links from the sentences eflomal is given (IBM-like:
    forward one source word per target word, reverse one target word per source word), written in shuffled
    order with stray spaces, plus scores. Records the input files' bytes in ``calls``."""
    def align(src, tgt, links_filename_fwd=None, links_filename_rev=None, scores_filename_fwd=None,
              scores_filename_rev=None, **kw):
        with open(src, "rb") as f, open(tgt, "rb") as g:
            sb, tb = f.read(), g.read()
        calls.append((sb, tb))
        fl, rl, sf, sr = [], [], [], []
        for line_s, line_t in zip(sb.decode().splitlines()[1:], tb.decode().splitlines()[1:]):
            ids_s, ids_t = line_s.split()[1:], line_t.split()[1:]
            m, n = len(ids_s), len(ids_t)
            rng = random.Random(" ".join(ids_s) + "|" + " ".join(ids_t))
            fwd = [(rng.randrange(m), j) for j in range(n) if rng.random() < 0.85]
            rev = [(i, min(n - 1, max(0, i * n // m + rng.choice((-1, 0, 0, 1))))) for i in range(m)
                   if rng.random() < 0.85]
            rng.shuffle(fwd)
            rng.shuffle(rev)
            fl.append(" ".join(f"{i}-{j}" for i, j in fwd) + rng.choice(("", " ")))
            rl.append(" ".join(f"{i}-{j}" for i, j in rev))
            sf.append(f"{rng.random() * 10:.6f}")
            sr.append(f"{rng.random() * 10:.6f}")
        for name, lines in ((links_filename_fwd, fl), (links_filename_rev, rl), (scores_filename_fwd, sf),
                            (scores_filename_rev, sr)):
            if name:
                with open(name, "w") as f:
                    f.write("".join(x + "\n" for x in lines))
    return align


def reference_outputs(calls_entry, sym, n_pairs, skipped, index_base=0):
    """What the old per-sentence code produced from the sampler's links: symmetrize_sets per pair."""
    from xlpe.align.symmetrize import symmetrize_sets
    from xlpe.io.alignments import format_alignment
    sb, tb = calls_entry
    links = []
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        fake_eflomal([])(write_bytes(d, "s", sb), write_bytes(d, "t", tb), links_filename_fwd=d + "/f",
                         links_filename_rev=d + "/r")
        parse = lambda line: {tuple(map(int, x.split("-"))) for x in line.split()}  # noqa: E731
        fl = [parse(x) for x in open(d + "/f").read().splitlines()]
        rl = [parse(x) for x in open(d + "/r").read().splitlines()]
    it = iter(zip(fl, rl))
    for k in range(n_pairs):
        if k in skipped:
            links.append(("", "", ""))
            continue
        f, r = next(it)
        a = f if sym == "forward" else r if sym == "reverse" else symmetrize_sets(f, r, sym).links
        links.append(tuple(format_alignment(Alignment(frozenset(x)), index_base, possible=False) for x in (a, f, r)))
    return links


def write_bytes(d, name, data):
    path = f"{d}/{name}"
    with open(path, "wb") as f:
        f.write(data)
    return path


def tricky_corpus(n=300, seed=5):
    """Cased tokens, escapes, U+3000, repeated spaces, an empty line, a too-long line."""
    rng = random.Random(seed)
    words = ["a", "B", "c\\d", "\u3000", "<NULL>", "Éé", "x\ty", "mot", "Mot", "MOT", "z"]
    src, tgt = [], []
    for k in range(n):
        src.append("  ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) if k != 7 else "")
        tgt.append(" ".join(rng.choice(words) + rng.choice(("", "s")) for _ in range(rng.randint(1, 12))))
    tgt[11] = " ".join(["w"] * EFLOMAL_MAX_LEN)
    return src, tgt


@pytest.mark.parametrize("sym", ["grow-diag-final-and", "grow-diag", "grow-diag-final", "intersection", "union",
                                 "forward"])
def test_files_path_equals_per_sentence_reference(tmp_path, monkeypatch, sym):
    import eflomal.cython
    calls = []
    monkeypatch.setattr(eflomal.cython, "align", fake_eflomal(calls))
    monkeypatch.setattr("xlpe.align.eflomal_format.BLOCK", 64)       # several input blocks and output batches
    monkeypatch.setattr("xlpe.align.eflomal_format.OUT_BATCH", 50)
    src, tgt = tricky_corpus()
    s = write(tmp_path / "c.src", src)
    t = tmp_path / "c.tgt"
    t.write_bytes("".join(x + "\r\n" for x in tgt).encode())  # CRLF on one side
    outs = {k: tmp_path / f"o.{k}" for k in ("out", "fwd", "rev", "scores")}
    for lower in (False, True):
        calls.clear()
        al = EflomalAligner(quiet=True, sym=sym, lowercase=lower, skip_bad=True)
        stats = al.align_files(s, t, outs["out"], index_base=1, forward_out=outs["fwd"], reverse_out=outs["rev"],
                               scores_out=outs["scores"])
        assert stats["skipped_lines"] == [(8, "empty"), (12, "too long")]
        # eflomal's input: byte-identical to what the per-item path (PairEncoder.prepare + TextWriter) writes
        ref_dir = tmp_path / f"ref{lower}"
        ref_dir.mkdir(exist_ok=True)
        sw, tw = TextWriter(str(ref_dir / "s")), TextWriter(str(ref_dir / "t"))
        sv, tv = {}, {}
        from xlpe.align.eflomal_format import vocab_ids
        for it in al._encoder().prepare((k + 1, a, b, None) for k, (a, b) in enumerate(zip(src, tgt))):
            if not it.skip:
                sw.add(vocab_ids(sv, it.src))
                tw.add(vocab_ids(tv, it.tgt))
        sw.finish(len(sv))
        tw.finish(len(tv))
        assert calls[0] == ((ref_dir / "s").read_bytes(), (ref_dir / "t").read_bytes())
        # outputs: as the per-sentence code (symmetrize_sets, format_alignment) gives them
        ref = reference_outputs(calls[0], sym, len(src), {7, 11}, index_base=1)
        assert outs["out"].read_text().split("\n")[:-1] == [x[0] for x in ref]
        assert outs["fwd"].read_text().split("\n")[:-1] == [x[1] for x in ref]
        assert outs["rev"].read_text().split("\n")[:-1] == [x[2] for x in ref]
        scores = outs["scores"].read_text().splitlines()
        assert len(scores) == len(src) and scores[7] == "nan\tnan" and scores[0] != "nan\tnan"
        # the in-memory API gives the same links and scores
        res = al.align_detailed(src, tgt, scores=True)
        assert [format_pharaoh(a, 1) for a in res.alignments] == [x[0] for x in ref]
        assert [format_pharaoh(a, 1) for a in res.forward] == [x[1] for x in ref]
        assert [f"{x:g}\t{y:g}" for x, y in zip(res.scores_forward, res.scores_reverse)] == scores
        assert al.align(src, tgt) == res.alignments
        assert list(al.iter_align(zip(src, tgt))) == res.alignments


def format_pharaoh(a, base):
    from xlpe.io.alignments import format_alignment
    return format_alignment(a, base, possible=False)


def test_chunks_joint_file_and_fit_through_the_fast_path(tmp_path, monkeypatch):
    import eflomal.cython
    calls = []
    monkeypatch.setattr(eflomal.cython, "align", fake_eflomal(calls))
    monkeypatch.setattr("xlpe.align.eflomal_format.BLOCK", 7)
    src, tgt = tricky_corpus(60, seed=9)
    whole = EflomalAligner(quiet=True, skip_bad=True).align_detailed(src, tgt)
    # chunks: one eflomal job per 13 pairs, indices continue across chunks
    calls.clear()
    res = EflomalAligner(quiet=True, skip_bad=True, chunk_size=13).align_detailed(src, tgt)
    assert len(calls) == 5 and res.skipped == whole.skipped == [(7, "empty"), (11, "too long")]
    assert sum(int(c[0].split(b" ")[0]) for c in calls) == 58
    # a joint file with a malformed line
    joint = write(tmp_path / "j.txt", [f"{a} ||| {b}" if k != 3 else f"{a} {b}" for k, (a, b) in
                                       enumerate(zip(src, tgt))])
    out = tmp_path / "j.align"
    stats = align_files(joint, None, out, quiet=True, skip_bad=True)
    assert stats["skipped_lines"] == [(4, "malformed"), (8, "empty"), (12, "too long")]
    lines = out.read_text().split("\n")[:-1]
    assert len(lines) == 60 and lines[3] == lines[7] == lines[11] == ""
    # fit: priors from eflomal's input files and links, as from the items before
    al = EflomalAligner(quiet=True, skip_bad=True, lowercase=True)
    al.fit(src, tgt)
    assert al.n_fit_sentences == 58 and "mot" in al.priors.lex and "Mot" not in al.priors.lex
    assert "\\u3000" in al.priors.lex or any("\\u3000" in d for d in al.priors.lex.values())


def test_line_blocks_match_read_lines(tmp_path):
    from xlpe.align.eflomal_format import line_blocks
    from xlpe.io.text import read_lines
    p = tmp_path / "x.txt"
    p.write_bytes(b"a b\r\nc\n\n\xc3\xa9 \xe3\x80\x80\r\r\nlast")
    for block in (1, 2, 3, 100):
        got = [x for b in line_blocks(p, block) for x in b]
        assert got == [t for _, t in read_lines(p)]
    p.write_bytes(b"ok\nok\nbad \xff here\nok\n")
    for block in (1, 2, 100):
        with pytest.raises(FormatError) as e1:
            list(line_blocks(p, block))
        with pytest.raises(FormatError) as e2:
            list(read_lines(p))
        assert str(e1.value) == str(e2.value) and ":3:" in str(e1.value)
    with pytest.raises(FormatError, match="file not found"):
        list(line_blocks(tmp_path / "missing"))


@pytest.mark.parametrize("block", [1, 2, 3, 4, 100])
def test_line_count_mismatch_at_any_block_boundary(tmp_path, monkeypatch, block):
    monkeypatch.setattr("xlpe.align.eflomal_format.BLOCK", block)
    a = write(tmp_path / "a", ["x y"] * 4)
    b = write(tmp_path / "b", ["X Y"] * 3)
    for s, t, short, long_ in ((a, b, b, a), (b, a, b, a)):
        with pytest.raises(FormatError, match=rf"{short} has 3 lines but {long_} has more") as e:
            list(file_blocks(s, t))
        assert e.value.line == 4


def test_parse_and_format_links():
    from xlpe.align.eflomal_format import format_links, parse_link_lines
    from xlpe.io.alignments import format_alignment
    from xlpe.errors import XlpeError
    rng = random.Random(3)
    lines, sets = [], []
    for _ in range(200):
        links = {(rng.randrange(1200), rng.randrange(1100)) for _ in range(rng.choice((0, 0, 1, 5, 30)))}
        order = list(links)
        rng.shuffle(order)
        lines.append((" ".join(f"{i}-{j}" for i, j in order) + rng.choice(("", " ")) + "\n").encode())
        sets.append(links)
    lines[-1] = lines[-1].rstrip(b"\n")  # last line without a newline
    ptr, i, j = parse_link_lines(lines)
    assert len(ptr) == 201
    for k, links in enumerate(sets):
        row = list(zip(i[ptr[k]:ptr[k + 1]].tolist(), j[ptr[k]:ptr[k + 1]].tolist()))
        assert row == sorted(links)
    for base in (0, 1):
        expected = "".join(format_alignment(Alignment(frozenset(x)), base, possible=False) + "\n" for x in sets)
        assert format_links((ptr, i, j), base) == expected
    assert format_links(parse_link_lines([b"\n", b"\n"])) == "\n\n"
    assert parse_link_lines([])[0].tolist() == [0]
    ptr, i, j = parse_link_lines([b"1-1 0-0 1-1\n"])  # a repeated link counts once, as in a set
    assert ptr.tolist() == [0, 2] and i.tolist() == [0, 1] and j.tolist() == [0, 1]
    for bad in ([b"0-1 2\n"], [b"0-1 x-2\n"], [b"0 1\n"], [b"0--1\n"]):
        with pytest.raises(XlpeError, match="unexpected eflomal output"):
            parse_link_lines(bad)


# --- CLI ----------------------------------------------------------------------------------------------------

def run_cli(argv):
    parser = add_cli_arguments(argparse.ArgumentParser(prog="xlpe align"))
    return cli_main(parser.parse_args(argv))


def test_cli_round_trip(tmp_path, capsys):
    src, tgt, gold = make_corpus(600, vocab=150, seed=11)
    s = write(tmp_path / "c.src", [" ".join(x) for x in src])
    t = write(tmp_path / "c.tgt", [" ".join(x) for x in tgt])
    out, fwd, rev, priors = (tmp_path / n for n in ("c.align", "c.fwd", "c.rev", "c.priors"))
    rc = run_cli([str(s), str(t), "--out", str(out), "--forward-out", str(fwd), "--reverse-out", str(rev),
                  "--priors-out", str(priors), "--index-base", "1", "--sym", "gdfa", "--n-samplers", "2",
                  "--quiet"])
    assert rc == 0
    lengths = [(len(a), len(b)) for a, b in zip(src, tgt)]
    hyp = list(read_alignments(out, 1, lengths=lengths))
    assert len(hyp) == 600 and aer(hyp, gold) <= 0.10
    assert len(list(read_alignments(fwd, 1, lengths=lengths))) == 600
    assert priors.exists() and (tmp_path / "c.priors.xlpe.json").exists()

    # new text, one '|||' file, aligned with the saved priors in chunks, 0-based output to stdout
    src2, tgt2, gold2 = make_corpus(30, vocab=150, seed=12)
    joint = write(tmp_path / "new.txt", [" ".join(a) + " ||| " + " ".join(b) for a, b in zip(src2, tgt2)])
    capsys.readouterr()
    rc = run_cli([str(joint), "--priors-in", str(priors), "--chunk-size", "10", "--quiet", "--scores-out",
                  str(tmp_path / "new.scores")])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    hyp2 = [Alignment.from_links(tuple(map(int, x.split("-"))) for x in line.split()) for line in lines]
    assert len(hyp2) == 30 and aer(hyp2, gold2) <= 0.10
    assert len((tmp_path / "new.scores").read_text().splitlines()) == 30

    # errors: exit status and a message naming the file, nothing written
    bad = write(tmp_path / "bad.tgt", [" ".join(x) for x in tgt[:599]] + [""])
    rc = run_cli([str(s), str(bad), "--out", str(tmp_path / "x.align"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 1 and f"{bad}:600: empty target sentence" in err and not (tmp_path / "x.align").exists()
    assert run_cli([str(s), str(t), str(t), "--quiet"]) == 2


def test_xlpe_align_command(tmp_path):
    cli = pytest.importorskip("xlpe.cli")
    src, tgt, gold = make_corpus(200, vocab=60, seed=13)
    joint = write(tmp_path / "c.txt", [" ".join(a) + " ||| " + " ".join(b) for a, b in zip(src, tgt)])
    out = tmp_path / "c.align"
    assert cli.main(["align", str(joint), "-o", str(out), "--quiet", "--sym", "intersection", "--iterations", "4",
                     "--n-samplers", "1"]) == 0
    assert len(list(read_alignments(out, 0))) == 200


def test_cli_help_documents_every_option():
    parser = add_cli_arguments(argparse.ArgumentParser(prog="xlpe align"))
    for action in parser._actions:
        if action.dest != "help":
            assert action.help, action.dest
    text = parser.format_help()
    for opt in ("--out", "--sym", "--model", "--iterations", "--seed", "--priors-out", "--priors-in",
                "--subword-model", "--lowercase", "--skip-bad", "--index-base", "--quiet", "--forward-out",
                "--reverse-out", "--chunk-size"):
        assert opt in text


# --- real data (skipped when ../shared/data is absent) -----------------------------------------------------

@pytest.mark.data
def test_japanese_gold_tokens_match_gold_indices(shared_data):
    d = shared_data / "word-alignment-gold" / "jaen"
    from xlpe.io.text import read_sentences
    ja = list(read_sentences(d / "jaen.ja"))
    en = list(read_sentences(d / "jaen.en"))
    lengths = [(len(a), len(b)) for a, b in zip(ja, en)]
    gold = list(read_alignments(d / "jaen.talp", 1, lengths=lengths))
    al = EflomalAligner(**FAST, lowercase=True)
    items = list(al._encoder().prepare((k + 1, a, b, None) for k, (a, b) in enumerate(zip(ja, en))))
    assert sum("\u3000" in s for s in ja) >= 1
    assert all(len(it.src) == len(a) and len(it.tgt) == len(b) for it, a, b in zip(items, ja, en))
    assert len(gold) == 582
