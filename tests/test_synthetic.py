"""The built-in synthetic language pairs: determinism, gold-annotation invariants, profiles, files, CLI."""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from itertools import islice

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from xlpe.cli.synth import add_cli_arguments, cli_main, config_from_args
from xlpe.data.synthetic import (PROFILES, Lexicon, SyntheticConfig, SyntheticPair, generate, gold_order, lexicon,
                                 load_config, synth)
from xlpe.errors import ConfigError
from xlpe.io import read_alignments, read_bitext, read_conllu, read_orders
from xlpe.io.conllu import validate_heads


def kendall_distance(order):
    """Normalised number of inversions of ``order`` with respect to the identity (0 = identity)."""
    n = len(order)
    if n < 2:
        return 0.0
    inv = sum(1 for a in range(n) for b in range(a + 1, n) if order[a] > order[b])
    return inv / (n * (n - 1) / 2)


def descendants(heads):
    """children lists (0-based) from 1-based heads."""
    ch = [[] for _ in heads]
    for k, h in enumerate(heads):
        if h:
            ch[h - 1].append(k)
    return ch


def subtree(ch, k):
    out, stack = [], [k]
    while stack:
        v = stack.pop()
        out.append(v)
        stack.extend(ch[v])
    return out


def check_pair(p: SyntheticPair, cfg: SyntheticConfig):
    """Every invariant a generated pair must satisfy, whatever the options."""
    n, m = len(p.src), len(p.tgt)
    assert 1 <= n <= cfg.max_len and 1 <= m <= cfg.max_len
    assert all(w and " " not in w for w in p.src + p.tgt)
    # tree
    t = p.tree
    assert t.words == p.src
    validate_heads(t.heads)
    roots = [k for k, h in enumerate(t.heads) if h == 0]
    assert len(roots) == 1
    root = roots[0]
    assert t.upos[root] == "VERB" and t.deprels[root] == "root"
    assert p.src[-1] == "." and t.heads[-1] == root + 1 and t.deprels[-1] == "punct"
    for k, (u, r, h) in enumerate(zip(t.upos, t.deprels, t.heads)):
        if u == "DET":
            assert r == "det" and t.upos[h - 1] == "NOUN"
        elif u == "ADJ":
            assert r == "amod" and t.upos[h - 1] == "NOUN"
        elif u == "ADP":
            assert r == "case" and t.upos[h - 1] == "NOUN"
        elif u == "AUX":
            assert r == "aux" and t.upos[h - 1] == "VERB"
        elif r == "acl:relcl":
            assert u == "VERB" and t.upos[h - 1] == "NOUN"
    # alignment
    a = p.alignment
    assert a.sure <= a.possible
    for i, j in a.possible:
        assert 0 <= i < n and 0 <= j < m
    # order: a permutation, monotone in min target index, and what gold_order() recomputes
    assert sorted(p.order) == list(range(n))
    mins = {}
    for i, j in a.possible:
        mins[i] = min(j, mins.get(i, m))
    seq = [mins[i] for i in p.order if i in mins]
    assert seq == sorted(seq)
    assert p.order == gold_order(n, a.possible)
    assert p.pos_xl[p.order[0]] == 0


def first_lines(path, k=3):
    with open(path) as f:
        return [next(f) for _ in range(k)]


# ------------------------------------------------------------------------------------------ config
def test_config_round_trip_and_errors(tmp_path):
    c = SyntheticConfig(profile="v2", seed=7, nouns=12, drop_rate=0.1)
    assert SyntheticConfig.from_dict(c.to_dict()) == c
    assert SyntheticConfig.from_dict(json.loads(json.dumps(c.to_dict()))) == c
    with pytest.raises(ConfigError, match="unknown synthetic option"):
        SyntheticConfig.from_dict({"profile": "sov", "nuons": 3})
    with pytest.raises(ConfigError, match="profile"):
        SyntheticConfig(profile="osv")
    with pytest.raises(ConfigError, match="drop_rate"):
        SyntheticConfig(drop_rate=1.5)
    with pytest.raises(ConfigError, match="verbs"):
        SyntheticConfig(verbs=3)
    with pytest.raises(ConfigError, match="max_len"):
        SyntheticConfig(max_len=5)
    with pytest.raises(ConfigError, match="one_to_many_link"):
        SyntheticConfig(one_to_many_link="maybe")
    with pytest.raises(ConfigError, match="integer"):
        SyntheticConfig(seed=1.5)
    with pytest.raises(ConfigError):
        list(generate(c, -1))


# ------------------------------------------------------------------------------------------ invariants
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_invariants_every_profile(profile):
    cfg = SyntheticConfig(profile=profile, seed=3)
    for p in generate(cfg, 300):
        check_pair(p, cfg)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.sampled_from(sorted(PROFILES)), seed=st.integers(0, 2**31),
       lexicon_seed=st.none() | st.integers(0, 99),
       nouns=st.integers(2, 30), verbs=st.integers(4, 12), adjectives=st.integers(0, 6), adverbs=st.integers(0, 4),
       prepositions=st.integers(0, 10), max_len=st.integers(8, 30), max_depth=st.integers(0, 3),
       rates=st.tuples(*[st.floats(0, 0.6)] * 7), one_to_many=st.floats(0, 1), many_to_one=st.floats(0, 1),
       otm_link=st.sampled_from(["sure", "possible"]), particle_link=st.sampled_from(["possible", "none"]),
       noise=st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 0.5)))
def test_invariants_property(profile, seed, lexicon_seed, nouns, verbs, adjectives, adverbs, prepositions, max_len,
                             max_depth, rates, one_to_many, many_to_one, otm_link, particle_link, noise):
    adj, pp, rel, comp, adv, front, aux = rates
    cfg = SyntheticConfig(profile=profile, seed=seed, lexicon_seed=lexicon_seed, nouns=nouns, verbs=verbs,
                          adjectives=adjectives, adverbs=adverbs, prepositions=prepositions, max_len=max_len,
                          max_depth=max_depth, adj_rate=adj, pp_rate=pp, rel_rate=rel, comp_rate=comp,
                          adv_rate=adv, front_rate=front, aux_rate=aux, one_to_many=one_to_many,
                          one_to_many_link=otm_link, many_to_one=many_to_one, particle_link=particle_link,
                          synonym_rate=noise[0], drop_rate=noise[1], insert_rate=noise[2])
    for p in generate(cfg, 25):
        check_pair(p, cfg)
        if profile == "identity":
            assert p.order == list(range(len(p.src)))


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, 15)), max_size=20))))
def test_gold_order_matches_reference(case):
    """gold_order == the literal rule: sort aligned words by min target index (stable), each unaligned run
    goes right before the next aligned word, a trailing run right after the last aligned word."""
    n, links = case
    mins = {}
    for i, j in links:
        mins[i] = min(j, mins.get(i, 99))
    aligned = sorted(mins, key=lambda i: (mins[i], i))
    before, run = {}, []
    for i in range(n):
        if i in mins:
            before[i], run = run, []
        else:
            run.append(i)
    ref = []
    for i in aligned:
        ref += before[i] + [i]
    if not aligned:
        ref = list(range(n))
    elif run:
        k = ref.index(max(aligned)) + 1
        ref[k:k] = run
    assert gold_order(n, links) == ref
    assert gold_order(n, links, tgt_len=16) == ref


# ------------------------------------------------------------------------------------------ profiles
def test_identity_order_is_identity_and_sov_is_far():
    ident = list(generate(SyntheticConfig(profile="identity", seed=5, drop_rate=0.3, synonym_rate=0.5), 300))
    assert all(p.order == list(range(len(p.src))) for p in ident)
    sov = list(generate(SyntheticConfig(profile="sov", seed=5), 300))
    mean_tau = sum(kendall_distance(p.order) for p in sov) / len(sov)
    assert mean_tau > 0.15
    # only short clauses without objects, PPs or adverbs ('the N V-ed .') keep their order in sov
    assert sum(p.order != list(range(len(p.src))) for p in sov) > 0.8 * len(sov)
    for prof in ("v2", "svo-flip"):
        ps = list(generate(SyntheticConfig(profile=prof, seed=5), 300))
        assert 0.0 < sum(kendall_distance(p.order) for p in ps) / len(ps) < mean_tau


def test_same_source_in_every_profile():
    srcs = {prof: [p.src for p in generate(SyntheticConfig(profile=prof, seed=11, max_len=14), 400)]
            for prof in PROFILES}
    assert all(s == srcs["sov"] for s in srcs.values())


def _tgt_positions(p):
    pos = {}
    for i, j in p.alignment.sure:
        pos.setdefault(i, []).append(j)
    return {i: min(js) for i, js in pos.items()}


def test_sov_structure():
    for p in generate(SyntheticConfig(profile="sov", seed=2), 300):
        t, a = p.tree, p.alignment
        linked = {i for i, _ in a.possible}
        for k, w in enumerate(p.src):
            if w in ("the", "a", "who") or (w == "that" and t.upos[k] == "PRON"):
                assert k not in linked, "articles and relative pronouns have no translation in sov"
        root = t.heads.index(0)
        last = len(p.tgt) - 2                       # the word before "."
        owners = {i for i, j in a.sure if j == last}
        assert owners & {root} | {k for k in owners if t.heads[k] == root + 1 and t.upos[k] == "AUX"}
        # every argument noun has its particle right after its NP, possibly linked
        for k, r in enumerate(t.deprels):
            if r in ("obj", "iobj") and t.upos[k] == "NOUN":
                assert any(i == k for i, _ in a.possible_only)
        # verb after all its object/oblique dependents
        pos = _tgt_positions(p)
        ch = descendants(t.heads)
        for k, r in enumerate(t.deprels):
            if r in ("obj", "iobj", "obl"):
                v = t.heads[k] - 1
                assert max((pos[x] for x in subtree(ch, k) if x in pos), default=-1) < pos[v]


def test_v2_structure():
    n_inverted = n_split = 0
    for p in generate(SyntheticConfig(profile="v2", seed=4), 400):
        t = p.tree
        pos = _tgt_positions(p)
        ch = descendants(t.heads)
        root = t.heads.index(0)
        aux = [k for k in ch[root] if t.deprels[k] == "aux"]
        subj = [k for k in ch[root] if t.deprels[k] == "nsubj"][0]
        fin = aux[0] if aux else root
        first = [k for k in ch[root] if t.upos[k] == "ADV" and k < subj]
        if first:                                 # fronted adverb: verb second, subject inverted
            assert pos[first[0]] == 0 and pos[fin] == 1 and pos[subj] > pos[fin]
            n_inverted += 1
        if aux and not any(t.deprels[k] == "ccomp" for k in ch[root]):
            assert pos[root] == len(p.tgt) - 2   # participle / infinitive at the end
            n_split += 1
        # subordinate clauses are verb-final (before an extraposed complement clause)
        for v, r in enumerate(t.deprels):
            if r in ("acl:relcl", "ccomp"):
                inner = [x for c in ch[v] if t.deprels[c] not in ("ccomp", "aux") for x in subtree(ch, c)]
                assert all(pos[x] < pos[v] for x in inner if x in pos)
                for c in ch[v]:
                    if t.deprels[c] == "aux":
                        assert pos[c] == pos[v] + 1
    assert n_inverted > 5 and n_split > 20


def test_svo_flip_structure():
    seen = 0
    for p in generate(SyntheticConfig(profile="svo-flip", seed=6), 300):
        pos = _tgt_positions(p)
        for k, r in enumerate(p.tree.deprels):
            if r == "amod":
                assert pos[k] > pos[p.tree.heads[k] - 1]
                seen += 1
        # nothing else moves: the order restricted to non-adjectives is increasing
        rest = [i for i in p.order if p.tree.upos[i] != "ADJ"]
        assert rest == sorted(rest)
    assert seen > 50


def test_link_options():
    cfg = SyntheticConfig(profile="sov", seed=1, particle_link="none", one_to_many_link="sure", one_to_many=0.5)
    assert all(not p.alignment.possible_only for p in generate(cfg, 200))
    cfg = SyntheticConfig(profile="identity", seed=1, one_to_many_link="possible", one_to_many=0.5)
    assert any(p.alignment.possible_only for p in generate(cfg, 200))
    # one-to-many and many-to-one both occur with the defaults
    ps = list(generate(SyntheticConfig(profile="identity", seed=1), 500))
    assert any(len(p.tgt) > len(p.src) for p in ps) and any(len(p.tgt) < len(p.src) for p in ps)


def test_noise():
    lex = lexicon(SyntheticConfig(profile="v2", seed=3))
    fw = lex["function_words"]
    clean = list(generate(SyntheticConfig(profile="v2", seed=3), 200))
    assert any(fw["the"] in p.tgt for p in clean)
    dropped = list(generate(SyntheticConfig(profile="v2", seed=3, drop_rate=1.0), 200))
    assert not any(fw["the"] in p.tgt or fw["a"] in p.tgt for p in dropped)
    assert any("the" in p.src for p in dropped)
    inserted = list(generate(SyntheticConfig(profile="v2", seed=3, insert_rate=0.3), 200))
    fillers = {fw["filler1"], fw["filler2"], fw["filler3"]}
    n_fill = 0
    for p in inserted:
        for j, w in enumerate(p.tgt):
            if w in fillers:
                n_fill += 1
                assert all(jj != j for _, jj in p.alignment.possible)
    assert n_fill > 100
    syn = lexicon(SyntheticConfig(seed=3, synonym_rate=1.0))
    assert all(2 <= len(e["tgt"]) <= 3 for e in syn["nouns"] + syn["adjectives"] + syn["verbs"])


def test_vocabularies_disjoint_and_sized():
    cfg = SyntheticConfig(seed=9, nouns=30, verbs=10, adjectives=5, adverbs=3, prepositions=4)
    src, tgt = Lexicon(cfg).vocabularies()
    assert src & tgt == {"."}
    lex = lexicon(cfg)
    assert len(lex["nouns"]) == 30 and len(lex["verbs"]) == 10 and len(lex["adjectives"]) == 5
    classes = {v["class"] for v in lex["verbs"]}
    assert classes == {"intransitive", "transitive", "ditransitive", "sentential"}
    ps = list(generate(cfg, 300))
    assert {w for p in ps for w in p.src} <= src and {w for p in ps for w in p.tgt} <= tgt
    # the lexicon is fixed by lexicon_seed, sentences by seed
    a = lexicon(SyntheticConfig(seed=1, lexicon_seed=42))
    b = lexicon(SyntheticConfig(seed=2, lexicon_seed=42))
    assert a == b and a != lexicon(SyntheticConfig(seed=1))


# ------------------------------------------------------------------------------------------ streaming
def test_generate_is_lazy():
    t0 = time.perf_counter()
    it = generate(SyntheticConfig(), 10**12)
    first = list(islice(it, 5))
    assert len(first) == 5 and time.perf_counter() - t0 < 2.0
    assert len(list(islice(generate(SyntheticConfig(), None), 3))) == 3
    assert len(list(generate(SyntheticConfig(), 100))) == 100


def _digest(pairs):
    h = hashlib.sha256()
    for p in pairs:
        h.update(repr((p.src, p.tgt, sorted(p.alignment.sure), sorted(p.alignment.possible), p.tree.heads,
                       p.order)).encode())
    return h.hexdigest()


def test_deterministic_across_processes():
    """Same seed -> same pairs, also under another PYTHONHASHSEED; other seed or split -> other pairs."""
    cfg = SyntheticConfig(profile="sov", seed=13, synonym_rate=0.3, drop_rate=0.1, insert_rate=0.1)
    here = _digest(generate(cfg, 200))
    assert here == _digest(generate(cfg, 200))
    assert here != _digest(generate(SyntheticConfig(profile="sov", seed=14, synonym_rate=0.3, drop_rate=0.1,
                                                    insert_rate=0.1), 200))
    assert here != _digest(generate(cfg, 200, split="test"))
    code = ("import sys; sys.path.insert(0, %r); from test_synthetic import _digest; "
            "from xlpe.data.synthetic import SyntheticConfig, generate; "
            "print(_digest(generate(SyntheticConfig.from_dict(%r), 200)))") % (os.path.dirname(__file__), cfg.to_dict())
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, PYTHONHASHSEED="12345"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == here


# ------------------------------------------------------------------------------------------ files
def _count_lines(path):
    with open(path) as f:
        return sum(1 for _ in f)


def test_synth_writes_consistent_files(tmp_path):
    cfg = SyntheticConfig(profile="sov", seed=21)
    sizes = {"train": 120, "dev": 30, "test": 40}
    paths = synth(tmp_path / "a", cfg, sizes)
    for split, n in sizes.items():
        for kind in ("src", "tgt", "align", "order"):
            assert _count_lines(paths[f"{split}.{kind}"]) == n
        pairs = list(read_bitext(paths[f"{split}.src"], paths[f"{split}.tgt"]))
        als = list(read_alignments(paths[f"{split}.align"], 0, lengths=[(len(s), len(t)) for s, t in pairs],
                                   check_base=False))
        orders = list(read_orders(paths[f"{split}.order"], lengths=[len(s) for s, _ in pairs]))
        trees = list(read_conllu(paths[f"{split}.conllu"]))
        assert len(als) == len(orders) == len(trees) == n
        assert [t.words for t in trees] == [s for s, _ in pairs]
        for (s, _), a, o in zip(pairs, als, orders):
            assert o == gold_order(len(s), a.possible)
        assert any(a.possible_only for a in als)        # particles: 'ipj' links written and read back
    # the first pairs of a split are the first pairs of its stream (dedup aside) and match generate()
    first = next(generate(cfg, 1, split="dev"))
    if " ".join(first.src) not in open(paths["test.src"]).read().splitlines():
        assert first_lines(paths["dev.src"], 1) == [" ".join(first.src) + "\n"]
    # disjoint splits
    sets = {s: set(open(paths[f"{s}.src"]).read().splitlines()) for s in sizes}
    assert not (sets["train"] & sets["dev"]) and not (sets["train"] & sets["test"]) and not (sets["dev"] & sets["test"])
    meta = json.loads(paths["config.json"].read_text())
    assert meta["written"] == sizes and load_config(paths["config.json"]) == cfg
    readme = paths["README.txt"].read_text()
    assert "0-BASED" in readme and "ipj" in readme and "order" in readme
    assert not [f for f in os.listdir(tmp_path / "a") if f.endswith(".tmp")]
    # identical seeds -> identical files; a split does not depend on the size of the others
    paths_b = synth(tmp_path / "b", cfg, {"train": 120, "dev": 30, "test": 40})
    paths_c = synth(tmp_path / "c", SyntheticConfig(profile="sov", seed=22), sizes)
    paths_d = synth(tmp_path / "d", cfg, {"test": 40})
    for k, p in paths.items():
        if k != "config.json":
            assert p.read_bytes() == paths_b[k].read_bytes(), k
    assert paths["train.src"].read_bytes() != paths_c["train.src"].read_bytes()
    assert paths["test.align"].read_bytes() == paths_d["test.align"].read_bytes()
    assert "train.src" not in paths_d


def test_synth_rejects_bad_sizes(tmp_path):
    with pytest.raises(ConfigError):
        synth(tmp_path, SyntheticConfig(), {"train": -1})
    with pytest.raises(ConfigError):
        synth(tmp_path, SyntheticConfig(), {"../x": 1})


def test_cli(tmp_path):
    parser = argparse.ArgumentParser(formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_cli_arguments(parser)
    helptext = parser.format_help()
    for flag in ("--out", "--profile", "--seed", "--train", "--dev", "--test", "--nouns", "--verbs", "--noise-drop"):
        assert flag in helptext
    args = parser.parse_args(["--out", str(tmp_path / "o"), "--profile", "v2", "--seed", "4", "--train", "50",
                              "--dev", "10", "--test", "10", "--nouns", "12", "--noise-drop", "0.1"])
    assert cli_main(args) == 0
    meta = json.loads((tmp_path / "o" / "config.json").read_text())
    assert meta["config"]["profile"] == "v2" and meta["config"]["nouns"] == 12 and meta["config"]["drop_rate"] == 0.1
    assert meta["config"]["verbs"] == SyntheticConfig().verbs
    assert _count_lines(tmp_path / "o" / "train.order") == 50
    # --config loads a written config; command-line options override it
    args = parser.parse_args(["--out", str(tmp_path / "p"), "--config", str(tmp_path / "o" / "config.json"),
                              "--seed", "5"])
    cfg = config_from_args(args)
    assert cfg.profile == "v2" and cfg.nouns == 12 and cfg.seed == 5
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--profile", "osv"])
