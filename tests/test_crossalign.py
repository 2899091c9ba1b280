"""Cross-Align (SPEC §7): extraction (§12 example 8), the cross layers, SSA labels and loss, TLM masking, saving,
exact resumption, bad input and the command line, on a tiny random BERT and a WordPiece vocabulary built here."""

import csv
import dataclasses
import json
import logging
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import BertConfig, BertModel  # noqa: E402

import xlpe.align.crossalign_data as cd  # noqa: E402
import xlpe.align.crossalign_train as ct  # noqa: E402
from xlpe.align.crossalign import CrossAligner  # noqa: E402
from xlpe.align.crossalign_extract import (Extraction, directional_links, key_mask, link_matrix,  # noqa: E402
                                           link_probabilities, softmax_both_ways, symmetrized_word_links,
                                           word_links, word_states)
from xlpe.align.symmetrize import METHODS as SYM_METHODS  # noqa: E402
from xlpe.align.symmetrize import symmetrize_sets  # noqa: E402
from xlpe.cli import main  # noqa: E402
from xlpe.errors import ConfigError, FormatError  # noqa: E402

from _crossalign_toy import PAIRS, bert_config, tokenizer, write_encoder  # noqa: E402


def aligner(m=2, n=2, seed=0, **kw):
    torch.manual_seed(seed)
    return CrossAligner.from_config(bert_config(m + n), tokenizer(), m=m, n=n, attn_implementation="eager", **kw)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("corpus")
    (d / "src").write_text("".join(s + "\n" for s, _ in PAIRS))
    (d / "tgt").write_text("".join(t + "\n" for _, t in PAIRS))
    return d / "src", d / "tgt"


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """A plain BERT encoder directory without an MLM head (like an e5 import)."""
    return write_encoder(tmp_path_factory.mktemp("enc"))


# -- extraction -----------------------------------------------------------------------------------------------

def test_example8_one_hot_states_give_the_permutation():
    """SPEC §12.8: states 10·onehot, source piece k equal to target piece π(k); τ=0.15 gives exactly {(k, π(k))}
    through the word maps, and a [CLS] scoring 0 against everything changes nothing (null sink or not)."""
    d = 8
    src_words = torch.tensor([[-1, 0, 0, 1, 2, 3, -1, -1]])          # [CLS] w0 w0 w1 w2 w3 [SEP] pad
    tgt_words = torch.tensor([[-1, 0, 1, 1, 2, 3, -1, -1]])          # [CLS] w0 w1 w1 w2 w3 [SEP] pad
    pi = {1: 4, 2: 3, 3: 5, 4: 1, 5: 2}                              # source piece -> target piece
    hs, ht = torch.zeros(1, 8, d), torch.zeros(1, 8, d)              # [CLS], [SEP], pads: zero vectors
    for k, (s, t) in enumerate(pi.items()):
        hs[0, s, k] = ht[0, t, k] = 10.0
    expected = sorted({(src_words[0, s].item(), tgt_words[0, t].item()) for s, t in pi.items()})
    for sink in ("cls", "none"):
        scores = torch.bmm(hs, ht.transpose(1, 2))
        pf, pb = softmax_both_ways(scores, key_mask(src_words, sink), key_mask(tgt_words, sink))
        for s, t in pi.items():
            assert pf[0, s, t] > 0.99 and pb[0, s, t] > 0.99
        g = link_matrix(hs, ht, src_words, tgt_words, threshold=0.15, null_sink=sink)
        assert word_links(g, src_words, tgt_words) == [expected]
        assert not g[0, 0, 1:].any() and not g[0, 1:, 0].any()          # the zero-score [CLS] takes no link
    g = link_matrix(hs, ht, src_words, tgt_words, method="argmax")
    assert word_links(g, src_words, tgt_words) == [expected]
    # SPEC's caution: unscaled one-hots put a non-match at 1/(e+J-1), near τ (here J = 5 pieces + [CLS]);
    # the ×10 leaves no doubt
    off = torch.ones(8, 8, dtype=torch.bool)
    off[list(pi), list(pi.values())] = False
    tk = key_mask(tgt_words, "cls")
    for scale, lo, hi in ((0.01, 1 / (2.718281828 + 5) - 1e-6, 1 / (2.718281828 + 5) + 1e-6), (1.0, 0.0, 1e-4)):
        pf = softmax_both_ways(torch.bmm(hs, ht.transpose(1, 2)) * scale, key_mask(src_words, "cls"), tk)[0]
        worst = pf[0][off & (src_words[0] >= 0)[:, None] & (tgt_words[0] >= 0)[None, :]].max().item()
        assert lo <= worst <= hi


def test_probabilities_and_word_rule():
    sw = torch.tensor([[-1, 0, 0, 1, -1, -1], [-1, 0, 1, 2, 2, -1]])
    tw = torch.tensor([[-1, 0, 1, -1, -1], [-1, 0, 0, 1, -1]])
    g = torch.rand(2, 6, 5) > 0.5
    p = torch.rand(2, 6, 5)
    out = word_links(g, sw, tw, p)
    for b in range(2):      # brute force: any piece pair; probability = max over all piece pairs of the words
        want = {}
        for i in range(6):
            for j in range(5):
                if sw[b, i] >= 0 and tw[b, j] >= 0 and g[b, i, j]:
                    wi, wj = sw[b, i].item(), tw[b, j].item()
                    want[(wi, wj)] = max(p[b, k, l].item() for k in range(6) for l in range(5)
                                         if sw[b, k] == wi and tw[b, l] == wj)
        assert [(i, j) for i, j, _ in out[b]] == sorted(want)
        assert all(abs(q - want[(i, j)]) < 1e-6 for i, j, q in out[b])


def test_word_level_symmetrisation_of_the_two_directions():
    """symmetrize = <method>: each direction's pieces -> words by the "any" rule, then the word-level method with
    P^b's links as the forward (source→target model's) links, exactly as symmetrize_sets; probabilities are the
    word pair's max over its pieces, as for the paper's join."""
    torch.manual_seed(3)
    sw = torch.tensor([[-1, 0, 0, 1, 2, 3, -1], [-1, 0, 1, 2, -1, -1, -1]])
    tw = torch.tensor([[-1, 0, 1, 1, 2, 3, 4], [-1, 0, 0, 1, 2, -1, -1]])
    hs, ht = torch.randn(2, 7, 6), torch.randn(2, 7, 6)
    p = torch.rand(2, 7, 7)
    for method, tau in (("softmax", 0.1), ("softmax", 0.3), ("argmax", 0.0)):
        fwd, bwd = directional_links(hs, ht, sw, tw, method=method, threshold=tau, null_sink="cls")
        assert torch.equal(fwd & bwd, link_matrix(hs, ht, sw, tw, method=method, threshold=tau, null_sink="cls"))
        f_words, b_words = word_links(fwd, sw, tw), word_links(bwd, sw, tw)
        best = {(b, i, j): q for b, rows in enumerate(word_links(torch.ones_like(fwd), sw, tw, p))
                for i, j, q in rows}
        for sym in SYM_METHODS:
            out = symmetrized_word_links(fwd, bwd, sw, tw, sym, p)
            for b in range(2):
                want = symmetrize_sets(set(b_words[b]), set(f_words[b]), sym)
                assert [(i, j) for i, j, _ in out[b]] == sorted(want.links)
                assert all(abs(q - best[(b, i, j)]) < 1e-6 for i, j, q in out[b])
        union = symmetrized_word_links(fwd, bwd, sw, tw, "union")
        inter = symmetrized_word_links(fwd, bwd, sw, tw, "intersection")
        assert all(set(i) <= set(u) for i, u in zip(inter, union))


def test_align_joins_directions_as_configured(tmp_path):
    """The paper's join by default; symmetrize= per call or saved with the model; short forms accepted; a wrong
    name is a ConfigError naming the choices."""
    al = aligner()
    src, tgt = [s for s, _ in PAIRS], [t for _, t in PAIRS]

    def at(**kw):
        return al.extraction(threshold=0.1, **kw)
    pieces = al.align(src, tgt, extraction=at())
    assert pieces == al.align(src, tgt, extraction=at(symmetrize="pieces"))
    gdfa = al.align(src, tgt, extraction=at(symmetrize="gdfa"))
    union = al.align(src, tgt, extraction=at(symmetrize="union"))
    assert all(a.links <= u.links for a, u in zip(pieces + gdfa, union + union))
    assert all(a.links <= g.links for a, g in zip(al.align(src, tgt, extraction=at(symmetrize="intersection")),
                                                   gdfa))
    with_p = al.align(src, tgt, extraction=at(symmetrize="grow-diag-final-and"), probabilities=True)
    assert [a for a, _ in with_p] == gdfa and all(set(q) == a.links for a, q in with_p)
    al.config.symmetrize = "grow-diag-final-and"
    al.save_pretrained(tmp_path / "m")
    again = CrossAligner.from_pretrained(tmp_path / "m", attn_implementation="eager")
    assert again.config.symmetrize == "grow-diag-final-and"
    assert again.align(src, tgt, extraction=again.extraction(threshold=0.1)) == gdfa
    with pytest.raises(ConfigError, match="symmetrize must be one of pieces, intersection"):
        al.extraction(symmetrize="both")


def test_word_states_are_each_words_mean_piece_state_with_cls_kept():
    """word_vectors = "mean" [I]: position 0 keeps the [CLS] state (the null sink), word w's state sits at 1 + w and
    is the mean of its pieces; [SEP] and pads take no part, and a shorter sentence's empty word slots are no key."""
    h = torch.arange(2 * 6 * 2, dtype=torch.float32).reshape(2, 6, 2)
    words = torch.tensor([[-1, 0, 0, 1, -1, -1], [-1, 0, 1, 2, 2, -1]])
    out, ids = word_states(h, words)
    assert out.shape == (2, 4, 2) and ids.tolist() == [[-1, 0, 1, -1], [-1, 0, 1, 2]]
    assert torch.equal(out[:, 0], h[:, 0])
    assert torch.allclose(out[0, 1], (h[0, 1] + h[0, 2]) / 2) and torch.equal(out[0, 2], h[0, 3])
    assert torch.allclose(out[1, 3], (h[1, 3] + h[1, 4]) / 2) and torch.equal(out[1, 1], h[1, 1])
    assert not key_mask(ids, "cls")[0, 3] and key_mask(ids, "cls")[0, 0]


def test_mean_word_states_split_a_words_mass_where_any_keeps_both_links():
    """A source word of two pieces, each the image of a different target word: the "any" rule links the word to
    both (each piece passes τ alone), its mean state puts half its mass on each, under τ = 0.6 in P^f."""
    e = torch.eye(4) * 10
    hs = torch.stack([torch.zeros(4), e[0], e[1], e[2]])[None]            # [CLS] w0=(p0, p1) w1=p2
    ht = torch.stack([torch.zeros(4), e[0], e[1], e[2]])[None]            # [CLS] t0 t1 t2
    sw, tw = torch.tensor([[-1, 0, 0, 1]]), torch.tensor([[-1, 0, 1, 2]])
    pieces = word_links(link_matrix(hs, ht, sw, tw, threshold=0.6), sw, tw)
    assert pieces == [[(0, 0), (0, 1), (1, 2)]]
    (ws, wsw), (wt, wtw) = word_states(hs, sw), word_states(ht, tw)
    assert word_links(link_matrix(ws, wt, wsw, wtw, threshold=0.6), wsw, wtw) == [[(1, 2)]]
    assert word_links(link_matrix(ws, wt, wsw, wtw, threshold=0.4), wsw, wtw) == [[(0, 0), (0, 1), (1, 2)]]


def test_align_on_mean_word_states(tmp_path):
    """align(word_vectors="mean") is the extraction on :func:`word_states` of the layer's states; where every word
    is one piece it equals the piece-level extraction; saved with a model it is its default; a wrong name is a
    ConfigError."""
    al = aligner()
    src, tgt = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    batch = al.encode([s.split() for s in src], [t.split() for t in tgt])
    hs, ht, sw, tw = al.states(batch, al.config.align_layer)
    (ws, sw), (wt, tw) = word_states(hs, sw), word_states(ht, tw)
    fwd, bwd = directional_links(ws, wt, sw, tw, threshold=0.1)
    want = symmetrized_word_links(fwd, bwd, sw, tw, "grow-diag-final-and")

    def at(**kw):
        return al.extraction(threshold=0.1, **kw)
    got = al.align(src, tgt, extraction=at(symmetrize="gdfa", word_vectors="mean"))
    assert [sorted(a.links) for a in got] == [[(i, j) for i, j in row] for row in want]
    assert got != al.align(src, tgt, extraction=at(symmetrize="gdfa"))       # several words have several pieces
    one = [(s, t) for s, t in PAIRS if len(al.encode([s.split()], [t.split()]).ids[0]) == len(s.split()) + 2
           and len(al.encode([s.split()], [t.split()]).ids[1]) == len(t.split()) + 2]
    assert one, "the toy data has a pair whose words are all single pieces"
    s1, t1 = [s for s, _ in one], [t for _, t in one]
    assert al.align(s1, t1, extraction=at(word_vectors="mean")) == al.align(s1, t1, extraction=at())
    with_p = al.align(src, tgt, extraction=at(word_vectors="mean"), probabilities=True)
    assert all(set(q) == a.links for a, q in with_p)
    al.config.word_vectors = "mean"
    al.save_pretrained(tmp_path / "m")
    again = CrossAligner.from_pretrained(tmp_path / "m", attn_implementation="eager")
    assert again.config.word_vectors == "mean"
    assert again.align(src, tgt, extraction=again.extraction(threshold=0.1, symmetrize="gdfa")) == got
    with pytest.raises(ConfigError, match="word_vectors must be one of pieces, mean"):
        al.extraction(word_vectors="max")


def test_extraction_is_one_checked_value_with_a_text_form():
    """Extraction: the paper's inference settings by default; every field checked when made (the error names the
    field and its choices); short join names canonical; argmax keeps no τ; str() and parse() round-trip."""
    e = Extraction()
    assert (e.method, e.threshold, e.null_sink, e.symmetrize, e.word_vectors, e.layer) == (
        "softmax", 0.15, "cls", "pieces", "pieces", None)
    assert str(e) == "softmax tau=0.15 sink=cls join=pieces states=pieces"
    assert str(Extraction(method="argmax", null_sink="none", symmetrize="gdfa", word_vectors="mean", layer=7)) == (
        "argmax sink=none join=grow-diag-final-and states=mean layer=7")
    assert Extraction(symmetrize="gdfa").symmetrize == "grow-diag-final-and"
    assert Extraction(method="argmax", threshold=0.3) == Extraction(method="argmax")
    for bad, message in ((dict(method="max"), "method must be one of softmax, argmax"),
                         (dict(threshold=1.0), r"threshold must be in \[0, 1\)"),
                         (dict(threshold=True), "threshold must be"),
                         (dict(null_sink="sep"), "null_sink must be one of cls, none"),
                         (dict(symmetrize="both"), "symmetrize must be one of pieces, intersection"),
                         (dict(word_vectors="max"), "word_vectors must be one of pieces, mean"),
                         (dict(layer=-1), "layer must be an integer >= 0"), (dict(layer=1.5), "layer must be")):
        with pytest.raises(ConfigError, match=message):
            Extraction(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.threshold = 0.2
    for ext in (e, Extraction(threshold=0.001, layer=0), Extraction(method="argmax", symmetrize="union", layer=12),
                Extraction(threshold=0.4, null_sink="none", symmetrize="grow-diag", word_vectors="mean")):
        assert Extraction.parse(str(ext)) == ext
    assert Extraction.parse("layer=3 join=gdfa tau=0.2") == Extraction(threshold=0.2, symmetrize="gdfa", layer=3)
    assert Extraction.parse("argmax") == Extraction(method="argmax") and Extraction.parse("") == e
    for bad, message in (("softmax tau=x", "tau must be a number"), ("softmax depth=2", "is not one of tau, sink"),
                         ("softmax tau=0.1 tau=0.2", "given once"), ("softmax 0.1", "is not one of"),
                         ("mean", "method must be one of")):
        with pytest.raises(ConfigError, match=message):
            Extraction.parse(bad)


def _keyword_align(al, src, tgt, *, layer=None, threshold=None, null_sink=None, method="softmax", symmetrize=None,
                   word_vectors=None, probabilities=False):
    """The reference: CrossAligner.align as it took the extraction in loose keywords (commit d20401d), from the
    pure tensor functions, one length-sorted batch."""
    cfg = al.config
    layer = cfg.align_layer if layer is None else layer
    threshold = cfg.threshold if threshold is None else threshold
    null_sink = cfg.null_sink if null_sink is None else null_sink
    symmetrize = {"gdfa": "grow-diag-final-and"}.get(symmetrize, symmetrize) or cfg.symmetrize
    order = sorted(range(len(src)), key=lambda k: src[k].count(" "))
    b = al.encode([src[k] for k in order], [tgt[k] for k in order])
    with torch.inference_mode():
        h = al.model.eval()(b.ids, b.attention, layer=layer)
    hs, ht, sw, tw = h[:b.size], h[b.size:], b.words[:b.size], b.words[b.size:]
    if (word_vectors or cfg.word_vectors) == "mean":
        (hs, sw), (ht, tw) = word_states(hs, sw), word_states(ht, tw)
    fwd, bwd = directional_links(hs, ht, sw, tw, method=method, threshold=threshold, null_sink=null_sink)
    p = link_probabilities(hs, ht, sw, tw, null_sink) if probabilities else None
    words = (word_links(fwd & bwd, sw, tw, p) if symmetrize == "pieces"
             else symmetrized_word_links(fwd, bwd, sw, tw, symmetrize, p))
    out = [None] * len(src)
    for k, links in zip(order, words):
        out[k] = [tuple(x) for x in links]
    return out


KEYWORD_FORMS = [{}, dict(threshold=0.05), dict(threshold=0.05, null_sink="none"), dict(layer=2, threshold=0.2),
                 dict(method="argmax"), dict(method="argmax", null_sink="none", layer=3),
                 dict(threshold=0.05, symmetrize="gdfa"), dict(threshold=0.1, symmetrize="union", null_sink="none"),
                 dict(threshold=0.05, word_vectors="mean"), dict(threshold=0.1, symmetrize="gdfa", word_vectors="mean"),
                 dict(method="argmax", symmetrize="grow-diag", word_vectors="mean", null_sink="none", layer=1)]


def test_the_typed_extraction_gives_the_links_of_the_old_keyword_form():
    """align(extraction=...) with each keyword form of the old align (the model's settings where one is not given)
    gives exactly the old composition's links and probabilities, on a model whose settings are not the defaults."""
    al = aligner(m=2, n=2, seed=3, threshold=0.08, null_sink="cls", symmetrize="intersection")
    src, tgt = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    seen = set()
    for kw in KEYWORD_FORMS:
        want = _keyword_align(al, src, tgt, **kw, probabilities=True)
        got = al.align(src, tgt, extraction=al.extraction(**kw), probabilities=True, batch_size=64)
        assert [sorted(a.links) for a, _ in got] == [[x[:2] for x in row] for row in want], kw
        assert all(abs(q[x[:2]] - x[2]) < 1e-6 for (_, q), row in zip(got, want) for x in row)
        seen.add(tuple(map(tuple, (sorted(a.links) for a, _ in got))))
    assert len(seen) == len(KEYWORD_FORMS)                              # every form extracts differently here


def _keyword_labels(teacher, data, *, layer, threshold, symmetrize="pieces", word_vectors="pieces"):
    """The reference: SSA's labels as label_pairs computed them from loose keywords (commit d20401d), every pair in
    one batch: ``{pair: sorted word links}``."""
    b = data.batch(list(range(len(data))))
    with torch.inference_mode():
        h = teacher(b.ids, b.attention, layer=layer)
    hs, ht, sw, tw = h[:b.size], h[b.size:], b.words[:b.size], b.words[b.size:]
    if word_vectors == "mean":
        (hs, sw), (ht, tw) = word_states(hs, sw), word_states(ht, tw)
    fwd, bwd = directional_links(hs, ht, sw, tw, threshold=threshold, null_sink="cls")
    rows = word_links(fwd & bwd, sw, tw) if symmetrize == "pieces" else symmetrized_word_links(
        fwd, bwd, sw, tw, symmetrize)
    return {p: sorted(map(tuple, r)) for p, r in enumerate(rows)}


def test_ssa_labels_and_their_key_match_the_old_keyword_form(corpus, tmp_path):
    """TrainConfig.labels(c) labels the data exactly as the keyword form did, and names the label file's setting
    with the key material the keyword form had (the paper's settings left out of it)."""
    al = aligner(m=2, n=2, seed=4)
    data = cd.PairData(al, *corpus)
    digest = data.digest()
    for kw, key in ((dict(label_threshold=0.2), {"layer": 3, "threshold": 0.2, "data": digest}),
                    (dict(label_threshold=0.1, label_symmetrize="gdfa"),
                     {"layer": 3, "threshold": 0.1, "data": digest, "symmetrize": "grow-diag-final-and"}),
                    (dict(label_threshold=0.1, label_symmetrize="grow-diag-final-and", label_word_vectors="mean"),
                     {"layer": 3, "threshold": 0.1, "data": digest, "symmetrize": "grow-diag-final-and",
                      "word_vectors": "mean"})):
        labels = ct.TrainConfig(**kw).labels(al.config.align_layer)
        assert cd.label_key(labels, data) == key
        got = cd.label_pairs(al.model, data, labels, device="cpu", batch_size=3)
        want = _keyword_labels(al.model, data, layer=3, threshold=kw["label_threshold"],
                               symmetrize=labels.symmetrize, word_vectors=labels.word_vectors)
        assert {p: sorted(map(tuple, got.links[got.offsets[p]:got.offsets[p + 1]].tolist()))
                for p in range(len(data))} == want
    assert cd.label_key(dataclasses.replace(labels, null_sink="none"), data)["null_sink"] == "none"
    with pytest.raises(ConfigError, match="needs its layer"):
        cd.label_pairs(al.model, data, Extraction(), device="cpu")


# -- the model --------------------------------------------------------------------------------------------------

def _states(al, layer, src, tgt):
    return al.states(al.encode(src, tgt), layer)[:2]


def test_simultaneous_and_sequential_update_differ_only_as_specified():
    al = aligner(m=1, n=2)
    src, tgt = ["the cat sat on a mat"], ["die katze sass"]          # different lengths: padding involved
    batch = al.encode(src, tgt)
    model = al.model
    with torch.no_grad():                       # larger cross-attention weights than the N(0, 0.02) init
        for layer in model.cross_layers:
            for p in layer.crossattention.self.parameters():
                p.mul_(10)
    h0 = torch.cat(_states(al, 1, src, tgt))
    other = torch.cat([batch.attention[1:], batch.attention[:1]])
    from transformers.masking_utils import create_bidirectional_mask
    mask = create_bidirectional_mask(config=model.config, inputs_embeds=h0, attention_mask=other,
                                     encoder_hidden_states=h0)
    layer = model.cross_layers[0]
    with torch.no_grad():
        x_sim, y_sim = layer(h0[:1], h0[1:], mask[:1]), layer(h0[1:], h0[:1], mask[1:])
        y_seq = layer(h0[1:], x_sim, mask[1:])
    sim = _states(al, 2, src, tgt)
    model.config.sequential_cross_update = True
    seq = _states(al, 2, src, tgt)
    assert torch.allclose(sim[0], x_sim, atol=1e-5) and torch.allclose(sim[1], y_sim, atol=1e-5)
    assert torch.allclose(seq[0], x_sim, atol=1e-5) and torch.allclose(seq[1], y_seq, atol=1e-5)
    assert (sim[1] - seq[1]).abs().max() > 1e-3                         # only the target stream differs
    model.config.sequential_cross_update = False
    # the other stream's padding is masked: the pair alone gives the same states as in a padded batch
    alone = _states(al, 3, src, tgt)
    both = _states(al, 3, src + ["a dog"], tgt + ["hund lief zum haus gross klein rot matte katze"])
    n_s, n_t = (al.encode(src, tgt).attention[k].sum().item() for k in (0, 1))
    assert torch.allclose(alone[0][0, :n_s], both[0][0, :n_s], atol=1e-5)
    assert torch.allclose(alone[1][0, :n_t], both[1][0, :n_t], atol=1e-5)


def test_cross_weights_are_shared_by_both_directions():
    al = aligner(m=1, n=2)
    assert sum("crossattention" in name for name, _ in al.model.named_modules() if name.endswith("crossattention")) == 2
    parts = {n.split(".")[1] for n, _ in al.model.cross_layers.named_parameters()}
    assert parts == {"crossattention", "intermediate", "output"}          # no self-attention sub-layer
    a, b = "the big dog ran to the house", "der hund lief"
    for layer in (1, 2, 3):                                            # swapping the inputs swaps the outputs
        hx, hy = _states(al, layer, [a], [b])
        gy, gx = _states(al, layer, [b], [a])
        assert torch.allclose(hx, gx, atol=1e-5) and torch.allclose(hy, gy, atol=1e-5)
    q = al.model.cross_layers[0].crossattention.self.query.weight
    assert 0.015 < q.std().item() < 0.025                              # BERT init N(0, 0.02)


def test_init_from_an_encoder_directory_maps_layers(encoder_dir, caplog):
    enc = BertModel.from_pretrained(encoder_dir)
    with caplog.at_level(logging.INFO):
        al = CrossAligner.from_encoder(encoder_dir, n=1)
    assert "no MLM head" in caplog.text and (al.config.m, al.config.n, al.config.align_layer) == (3, 1, 4)
    sd, ref = al.model.state_dict(), enc.state_dict()
    for k in ("attention.self.query.weight", "intermediate.dense.weight", "output.LayerNorm.bias"):
        for i in range(3):
            assert torch.equal(sd[f"self_layers.{i}.{k}"], ref[f"encoder.layer.{i}.{k}"])
    assert torch.equal(sd["cross_layers.0.intermediate.dense.weight"], ref["encoder.layer.3.intermediate.dense.weight"])
    assert torch.equal(sd["embeddings.word_embeddings.weight"], ref["embeddings.word_embeddings.weight"])
    assert al.model.cls.predictions.decoder.weight is al.model.embeddings.word_embeddings.weight


# -- training objectives -------------------------------------------------------------------------------------------

def test_ssa_labels_follow_the_null_sink_rule():
    sw = torch.tensor([[-1, 0, 0, 1, 2, -1, -1]])                     # w0 has 2 pieces; word 2 unaligned
    tw = torch.tensor([[-1, 0, 1, 1, -1]])                             # target word 0 unaligned
    links = torch.zeros(1, 3, 2, dtype=torch.bool)
    links[0, 0, 1] = links[0, 1, 1] = True
    g = ct.ssa_labels(links, sw, tw)
    want = torch.zeros(1, 7, 5)
    want[0, 1:4, 2:4] = 1                                               # all piece pairs of linked words
    want[0, 4, 0] = 1                                                   # unaligned source piece -> CLS_tgt
    want[0, 0, 1] = 1                                                   # unaligned target piece -> CLS_src
    assert torch.equal(g, want)
    # word links back from piece links ("any" rule)
    piece = torch.zeros(1, 7, 5, dtype=torch.bool)
    piece[0, 2, 3] = piece[0, 3, 2] = True
    assert word_links(piece, sw, tw) == [[(0, 1), (1, 1)]] == [list(map(tuple, links[0].nonzero().tolist()))]
    # the loss: row-normalised CE with the source-[CLS] row zeroed + column-normalised with the target-[CLS]
    # column zeroed, each over the real pieces (I=4, J=3), computed here by hand
    hs, ht = torch.randn(1, 7, 6), torch.randn(1, 5, 6)
    s = hs[0] @ ht[0].T
    sk, tk = [0, 1, 2, 3, 4], [0, 1, 2, 3]
    lf = sum(want[0, i, j] * torch.log(torch.softmax(s[i, tk], 0)[tk.index(j)] + 1e-10)
             for i in range(1, 7) for j in tk)
    lb = sum(want[0, i, j] * torch.log(torch.softmax(s[sk, j], 0)[sk.index(i)] + 1e-10)
             for j in range(1, 5) for i in sk)
    assert torch.allclose(ct.ssa_loss(hs, ht, g, sw, tw), -(lf / 4 + lb / 3), atol=1e-5)


def test_tlm_masking_rates():
    V, mask_id = 100, 4
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(5, V, (4000, 40), generator=gen)
    words = torch.arange(40).expand(4000, 40).clone()
    words[:, 0] = words[:, 30:] = -1                                    # [CLS], [SEP] and pads
    inputs, labels = ct.mask_tokens(ids, words, vocab_size=V, mask_id=mask_id, generator=gen)
    chosen = labels != -100
    assert not chosen[words < 0].any() and torch.equal(labels[chosen], ids[chosen])
    assert torch.equal(inputs[~chosen], ids[~chosen])
    assert abs(chosen[words >= 0].float().mean().item() - 0.15) < 0.004
    sel_in, sel_orig = inputs[chosen], ids[chosen]
    rate_mask = (sel_in == mask_id).float().mean().item()
    rate_same = (sel_in == sel_orig).float().mean().item()
    assert abs(rate_mask - (0.8 + 0.1 / V)) < 0.01
    assert abs(rate_same - (0.1 + 0.1 / V)) < 0.01
    assert abs(1 - rate_mask - rate_same - 0.1 * (V - 2) / V) < 0.01
    # the two sides of a batch (different rows) are masked independently
    a, b = chosen[:2000, 1:30].float(), chosen[2000:, 1:30].float()
    assert abs((a * b).mean().item() - a.mean().item() * b.mean().item()) < 0.003


def _quick(**kw):
    base = dict(batch_size=3, tlm_accumulation=2, tlm_epochs=10, tlm_max_steps=5, ssa_max_steps=2, ssa_epochs=5,
                save_every=1, keep_last=2, log_every=1, progress=False, device="cpu", seed=3)
    return ct.TrainConfig(**{**base, **kw})


def test_ssa_trains_only_the_alignment_layer(corpus):
    for freeze in (True, False):
        al = aligner(m=2, n=2)
        before = {k: v.clone() for k, v in al.model.state_dict().items()}
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            res = ct.train_stage("ssa", al, *corpus, d, _quick(ssa_lr=1e-2, freeze_embeddings=freeze))
        changed = {k for k, v in res.aligner.model.state_dict().items() if not torch.equal(v, before[k])}
        layer_c = {k for k in before if k.startswith("cross_layers.0.")}   # c = m + 1 = 3
        emb = {k for k in before if k.startswith("embeddings.") and "LayerNorm" not in k and "token_type" not in k}
        assert layer_c <= changed
        outside = changed - layer_c                                     # embeddings (tied: the MLM decoder)
        assert outside == (set() if freeze else
                           {k for k in changed if k.startswith(("embeddings.", "cls.predictions.decoder"))})
        assert freeze or emb & changed


def test_ssa_upto_trains_every_layer_up_to_c_and_nothing_else(corpus, tmp_path):
    al = aligner(m=2, n=2)                                              # c = 3: self layers 0, 1 and cross layer 0
    before = {k: v.clone() for k, v in al.model.state_dict().items()}
    res = ct.train_stage("ssa", al, *corpus, tmp_path / "x", _quick(ssa_lr=1e-2, ssa_trainable="upto"))
    changed = {k for k, v in res.aligner.model.state_dict().items() if not torch.equal(v, before[k])}
    assert {k.split(".")[0] + "." + k.split(".")[1] for k in changed} == {"self_layers.0", "self_layers.1",
                                                                          "cross_layers.0"}
    with pytest.raises(ConfigError, match="ssa_trainable"):                   # resuming under another setting
        ct.train_stage("ssa", aligner(m=2, n=2), *corpus, tmp_path / "x", _quick(ssa_max_steps=3))
    with pytest.raises(ConfigError, match="ssa_trainable must be"):
        _quick(ssa_trainable="all")
    with pytest.raises(ConfigError, match="beyond the model's 4 layers"):
        ct.set_trainable(aligner(m=2, n=2).model, "ssa", 5)


def test_tlm_cross_only_keeps_the_encoders_own_weights(corpus, tmp_path):
    al = aligner()
    before = {k: v.clone() for k, v in al.model.state_dict().items()}
    after = ct.train_stage("tlm", al, *corpus, tmp_path / "x", _quick(tlm_trainable="cross")).aligner.model.state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed and all(k.startswith(("cross_layers.", "cls.predictions.transform.", "cls.predictions.bias",
                                         "cls.predictions.decoder.bias")) for k in changed)
    assert any(k.startswith("cross_layers.") for k in changed)
    with pytest.raises(ConfigError, match="tlm_trainable"):                   # resuming under another setting
        ct.train_stage("tlm", aligner(), *corpus, tmp_path / "x", _quick(tlm_trainable="all", tlm_max_steps=6))
    with pytest.raises(ConfigError, match="tlm_trainable must be"):
        _quick(tlm_trainable="self")


def test_a_stage_sets_up_memory_before_training(corpus, tmp_path, monkeypatch):
    """As xlpe train: freed memory stays in glibc's heap and oneDNN's caches are capped (bf16 products would keep
    a primitive per batch shape), before the first update."""
    class Stop(Exception):
        pass

    def reading_data(*a, **k):
        calls.append("data")
        raise Stop

    calls = []
    monkeypatch.setattr(ct, "retain_freed_memory", lambda: calls.append("retain") or True)
    monkeypatch.setattr(ct, "limit_onednn_caches", lambda: calls.append("limit") or True)
    monkeypatch.setattr(ct, "PairData", reading_data)          # the step before the first update
    with pytest.raises(Stop):
        ct.train_stage("tlm", aligner(), *corpus, tmp_path / "x", _quick())
    assert calls == ["retain", "limit", "data"]


def test_kill_and_resume_of_stage1_is_exact(corpus, tmp_path, monkeypatch):
    straight = ct.train_stage("tlm", aligner(), *corpus, tmp_path / "a", _quick())
    assert straight.step == 5 and straight.epoch >= 2

    class Killed(BaseException):
        pass

    real_save = ct.save_checkpoint

    def save_then_die(path, state):
        real_save(path, state)
        if state["step"] == 3:                                           # mid-epoch (2 updates per epoch)
            raise Killed

    monkeypatch.setattr(ct, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        ct.train_stage("tlm", aligner(), *corpus, tmp_path / "b", _quick())
    monkeypatch.setattr(ct, "save_checkpoint", real_save)
    resumed = ct.train_stage("tlm", aligner(seed=99), *corpus, tmp_path / "b", _quick())   # a fresh process
    assert resumed.step == 5
    a, b = straight.aligner.model.state_dict(), resumed.aligner.model.state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-7), k
    rows = list(csv.DictReader(open(tmp_path / "b" / "train_log.csv")))
    assert [int(r["step"]) for r in rows] == [1, 2, 3, 4, 5]             # the log was continued, not duplicated
    first = {r["step"]: r["loss"] for r in csv.DictReader(open(tmp_path / "a" / "train_log.csv"))}
    assert all(first[r["step"]] == r["loss"] for r in rows)
    with pytest.raises(ConfigError, match="batch_size differ"):             # not resumable exactly
        ct.train_stage("tlm", aligner(), *corpus, tmp_path / "b", _quick(batch_size=4))
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        ct.train_stage("tlm", aligner(), *corpus, tmp_path / "b", _quick(resume="none"))


def test_a_stop_keeps_the_updates_since_the_last_checkpoint(corpus, tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) during an update: the update completes, a checkpoint of it is written although
    save_every is far off (a TLM stage of hours used to lose every update since its start), and the same call
    resumes to the parameters of a run that was never stopped."""
    import os
    import signal

    cfg = _quick(save_every=100)
    straight = ct.train_stage("tlm", aligner(), *corpus, tmp_path / "a", cfg)
    accumulate = ct._Updates.accumulate

    def interrupted(self, *args):
        if self.step == 2:                                   # the signal arrives as update 3 begins
            os.kill(os.getpid(), signal.SIGINT)
        return accumulate(self, *args)

    monkeypatch.setattr(ct._Updates, "accumulate", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ct.train_stage("tlm", aligner(), *corpus, tmp_path / "b", cfg)
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint_*.pt")) == ["checkpoint_3.pt"]
    monkeypatch.setattr(ct._Updates, "accumulate", accumulate)
    resumed = ct.train_stage("tlm", aligner(seed=99), *corpus, tmp_path / "b", cfg)
    assert resumed.step == 5
    a, b = straight.aligner.model.state_dict(), resumed.aligner.model.state_dict()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-7), k


def test_ssa_labels_are_the_frozen_models_links_computed_once(corpus, tmp_path, caplog):
    """The labels SSA trains on are the stage-1 model's extraction (layer c, softmax both ways at the label tau,
    [CLS] null sink, "any" rule), computed in one pass and reused while the teacher, data and settings match."""
    al = aligner(m=2, n=2)
    data = cd.PairData(al, *corpus)
    labels = Extraction(threshold=0.2, layer=3)
    kw = dict(device="cpu", autocast=__import__("contextlib").nullcontext, progress=False)
    with caplog.at_level(logging.INFO, logger="xlpe.align.crossalign_data"):
        links = cd.cached_labels(tmp_path / "l.npz", al.model, data, labels, **kw)
        want = al.align([s for s, _ in PAIRS], [t for _, t in PAIRS], extraction=labels)
        got = [sorted(map(tuple, links.links[links.offsets[p]:links.offsets[p + 1]].tolist()))
               for p in range(len(PAIRS))]
        assert got == [sorted(a.possible) for a in want]
        assert 0 < len(links.links) < sum(len(s.split()) * len(t.split()) for s, t in PAIRS)   # not trivial
        # the batch tensor the loss sees: the same links, shaped by the batch's word indices
        idx = [4, 0, 7]
        b = data.batch(idx)
        t = links.tensor(idx, b.words[:3], b.words[3:])
        for row, p in enumerate(idx):
            assert sorted(map(tuple, t[row].nonzero().tolist())) == got[p]
        caplog.clear()
        cd.cached_labels(tmp_path / "l.npz", al.model, data, labels, **kw)
        assert "labels read from" in caplog.text
        for other in (dataclasses.replace(labels, threshold=0.3), labels):
            caplog.clear()
            model = al.model if other is not labels else aligner(m=2, n=2, seed=5).model      # another teacher
            cd.cached_labels(tmp_path / "l.npz", model, data, other, **kw)
            assert "another teacher, data or setting; labelling again" in caplog.text
        (tmp_path / "l.npz").write_bytes(b"half-written")
        assert len(cd.cached_labels(tmp_path / "l.npz", al.model, data, labels, **kw).links) == len(links.links)
        assert "unreadable" in caplog.text
        # labels joined by a word-level symmetrisation [I]: the extraction's own join, under a key of their own
        caplog.clear()
        joined = dataclasses.replace(labels, symmetrize="grow-diag-final-and")
        sym = cd.cached_labels(tmp_path / "l.npz", al.model, data, joined, **kw)
        assert "labelling again" in caplog.text
        want = al.align([s for s, _ in PAIRS], [t for _, t in PAIRS], extraction=joined)
        got_sym = [sorted(map(tuple, sym.links[sym.offsets[p]:sym.offsets[p + 1]].tolist()))
                   for p in range(len(PAIRS))]
        assert got_sym == [sorted(a.possible) for a in want]
        assert got_sym != got and all(set(g) <= set(s) for g, s in zip(got, got_sym))   # grows the intersection
        # labels on each word's mean piece state [I]: the extraction's word_vectors = "mean", a key of their own
        caplog.clear()
        on_mean = dataclasses.replace(joined, word_vectors="mean")
        mean = cd.cached_labels(tmp_path / "l.npz", al.model, data, on_mean, **kw)
        assert "labelling again" in caplog.text
        want = al.align([s for s, _ in PAIRS], [t for _, t in PAIRS], extraction=on_mean)
        got_mean = [sorted(map(tuple, mean.links[mean.offsets[p]:mean.offsets[p + 1]].tolist()))
                    for p in range(len(PAIRS))]
        assert got_mean == [sorted(a.possible) for a in want] and got_mean != got_sym


def test_kill_and_resume_of_stage2_is_exact(corpus, tmp_path, monkeypatch):
    cfg = _quick(ssa_max_steps=5, ssa_lr=1e-2, label_threshold=0.2)
    straight = ct.train_stage("ssa", aligner(m=2, n=2), *corpus, tmp_path / "a", cfg)

    class Killed(BaseException):
        pass

    real_save = ct.save_checkpoint

    def save_then_die(path, state):
        real_save(path, state)
        if state["step"] == 3:
            raise Killed

    monkeypatch.setattr(ct, "save_checkpoint", save_then_die)
    with pytest.raises(Killed):
        ct.train_stage("ssa", aligner(m=2, n=2), *corpus, tmp_path / "b", cfg)
    monkeypatch.setattr(ct, "save_checkpoint", real_save)
    (tmp_path / "b" / ct.LABELS).unlink()                    # labelled again from the stage-1 model: the same
    resumed = ct.train_stage("ssa", aligner(m=2, n=2), *corpus, tmp_path / "b", cfg)
    assert resumed.step == 5
    a, b = straight.aligner.model.state_dict(), resumed.aligner.model.state_dict()
    assert any(not torch.equal(a[k], v) for k, v in aligner(m=2, n=2).model.state_dict().items())
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-7), k


# -- saving, bad input, the command line ------------------------------------------------------------------------

def test_save_and_load_give_identical_links(tmp_path):
    al = aligner(m=2, n=1, threshold=0.1)
    src, tgt = [s for s, _ in PAIRS], [t for _, t in PAIRS]
    before = al.align(src, tgt, probabilities=True)
    al.save_pretrained(tmp_path / "m")
    meta = json.loads((tmp_path / "m" / "crossalign.json").read_text())
    assert (meta["m"], meta["n"], meta["align_layer"], meta["threshold"]) == (2, 1, 3, 0.1)
    again = CrossAligner.from_pretrained(tmp_path / "m", attn_implementation="eager")
    assert again.align(src, tgt, probabilities=True) == before
    sdpa = CrossAligner.from_pretrained(tmp_path / "m").align(src, tgt, probabilities=True)   # another kernel
    assert [a for a, _ in sdpa] == [a for a, _ in before]
    assert all(abs(p[k] - q[k]) < 1e-5 for (_, p), (_, q) in zip(sdpa, before) for k in p)
    argmax = Extraction(method="argmax", layer=2)
    assert again.align(src, tgt, extraction=argmax) == al.align(src, tgt, extraction=argmax)


def test_bad_inputs(tmp_path, encoder_dir, caplog):
    al = aligner()
    with pytest.raises(ConfigError, match="2 source sentences but 1 target"):
        al.align(["a cat", "a dog"], ["katze"])
    with pytest.raises(FormatError, match=r"<target>:2: empty sentence"):
        al.align(["a cat", "a dog"], ["katze", "  "])
    # too long: truncated with a warning and a count, never silently
    al.config.max_len = 6
    with caplog.at_level(logging.WARNING):
        out = al.align(["the cat sat on a mat dog", "a dog"], ["die katze", "hund"],
                       extraction=al.extraction(threshold=0.0))
    assert "1 sentences" in caplog.text and al.truncated == 1
    assert max(i for i, _ in out[0].links) <= 3                         # words 4.. were cut off
    (tmp_path / "gpt").mkdir()
    (tmp_path / "gpt" / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigError, match="not BERT-like"):
        CrossAligner.from_encoder(tmp_path / "gpt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="no config.json"):
        CrossAligner.load(tmp_path / "empty")
    big = tmp_path / "big"
    big.mkdir()
    BertModel(BertConfig(vocab_size=20, hidden_size=8, num_hidden_layers=2, num_attention_heads=2,
                         intermediate_size=8)).save_pretrained(big)
    tokenizer().save_pretrained(big)
    with pytest.raises(ConfigError, match="do not belong together"):
        CrossAligner.from_encoder(big, n=1)
    short = tmp_path / "short"
    short.write_text("a cat\n")
    (tmp_path / "two").write_text("katze\nhund\n")
    with pytest.raises(FormatError, match="short has 1 lines"):
        cd.PairData(al, short, tmp_path / "two")


def test_cli_train_then_align(corpus, encoder_dir, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["crossalign", "train", "--init", str(encoder_dir), "--src", str(corpus[0]), "--tgt", str(corpus[1]),
            "--out", str(out), "--n", "1", "--batch-size", "4", "--tlm-max-steps", "2", "--tlm-accumulation", "1",
            "--ssa-max-steps", "2", "--no-progress", "--save-every", "1", "--attn-implementation", "eager"]
    assert main(argv) == 0
    model = out / "ssa" / "model"
    meta = json.loads((model / "crossalign.json").read_text())
    assert meta["stages"] == ["tlm", "ssa"] and (meta["m"], meta["n"], meta["align_layer"]) == (3, 1, 4)
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["model"] == str(model)
    assert main(argv) == 0                                               # done stages are not run again
    links, probs = tmp_path / "links", tmp_path / "probs"
    assert main(["crossalign", "align", str(corpus[0]), str(corpus[1]), "--model", str(model), "-o", str(links),
                 "--probs-out", str(probs), "--batch-size", "3", "--chunk-size", "4", "--quiet"]) == 0
    lines, plines = links.read_text().splitlines(), probs.read_text().splitlines()
    assert len(lines) == len(plines) == len(PAIRS)
    api = CrossAligner.from_pretrained(model).align([s for s, _ in PAIRS], [t for _, t in PAIRS])
    for line, pl, a, (s, t) in zip(lines, plines, api, PAIRS):
        got = [tuple(map(int, x.split("-"))) for x in line.split()]
        assert got == sorted(a.links) and len(pl.split()) == len(got)
        assert all(i < len(s.split()) and j < len(t.split()) for i, j in got)
    # the untrained-encoder baseline; 'trained' on a plain encoder is refused
    assert main(["crossalign", "align", str(corpus[0]), str(corpus[1]), "--model", str(encoder_dir), "-o",
                 str(tmp_path / "base"), "--method", "argmax", "--layer", "2", "--quiet"]) == 0
    assert len((tmp_path / "base").read_text().splitlines()) == len(PAIRS)
    sym = tmp_path / "sym"                                               # a word-level join of the directions
    assert main(["crossalign", "align", str(corpus[0]), str(corpus[1]), "--model", str(model), "-o", str(sym),
                 "--symmetrize", "gdfa", "--threshold", "0.1", "--quiet"]) == 0
    trained = CrossAligner.from_pretrained(model)
    want = trained.align([s for s, _ in PAIRS], [t for _, t in PAIRS],
                         extraction=trained.extraction(threshold=0.1, symmetrize="grow-diag-final-and"))
    assert sym.read_text().splitlines() == [" ".join(f"{i}-{j}" for i, j in sorted(a.links)) for a in want]
    assert main(["crossalign", "align", str(corpus[0]), str(corpus[1]), "--model", str(model), "-o", str(sym),
                 "--word-vectors", "mean", "--threshold", "0.1", "--quiet"]) == 0
    want = trained.align([s for s, _ in PAIRS], [t for _, t in PAIRS],
                         extraction=trained.extraction(threshold=0.1, word_vectors="mean"))
    assert sym.read_text().splitlines() == [" ".join(f"{i}-{j}" for i, j in sorted(a.links)) for a in want]
    assert main(["crossalign", "align", str(corpus[0]), str(corpus[1]), "--model", str(encoder_dir), "-o",
                 str(tmp_path / "x")]) == 1
    assert "plain encoder" in capsys.readouterr().err


def test_adamw_implementation_is_an_option(corpus, tmp_path, monkeypatch):
    """``adam`` reaches torch's AdamW (fused by default); the implementations train the same model up to rounding."""
    seen, real = [], torch.optim.AdamW
    monkeypatch.setattr(torch.optim, "AdamW", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    fused = ct.train_stage("tlm", aligner(), *corpus, tmp_path / "a", _quick())
    loop = ct.train_stage("tlm", aligner(), *corpus, tmp_path / "b", _quick(adam="for-loop"))
    assert [(kw.get("fused"), kw.get("foreach")) for kw in seen] == [(True, None), (None, False)]
    a, b = fused.aligner.model.state_dict(), loop.aligner.model.state_dict()
    assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-6) for k in a if "key.bias" not in k)
    with pytest.raises(ConfigError, match="adam must be one of"):
        _quick(adam="sgd")


def test_cli_train_into_a_folder_another_run_holds_stops_before_writing(corpus, encoder_dir, tmp_path, capsys):
    from xlpe.io.process import FolderLock
    from xlpe.io.process import RUN_LOCK
    out = tmp_path / "held"
    out.mkdir()
    lock = FolderLock(out, RUN_LOCK, "Cross-Align training run")
    try:
        assert main(["crossalign", "train", "--init", str(encoder_dir), "--src", str(corpus[0]), "--tgt",
                     str(corpus[1]), "--out", str(out), "--n", "1", "--tlm-max-steps", "1", "--ssa-max-steps", "1",
                     "--no-progress", "--attn-implementation", "eager"]) != 0
    finally:
        lock.release()
    assert f"process {os.getpid()} on this host" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK]             # nothing written
