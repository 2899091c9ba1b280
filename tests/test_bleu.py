"""BLEU/chrF via sacrebleu with signatures; paired bootstrap between systems; `xlpe evaluate`."""

import json

import pytest

from xlpe.cli import main
from xlpe.errors import ConfigError, FormatError
from xlpe.evaluate.bleu import corpus_scores, paired_bootstrap

REFS = ["the cat sat on the mat", "a dog runs fast", "hello world", "we like green apples"] * 10
GOOD = list(REFS)
BAD = ["the cat sat", "dog runs", "hello", "we like apples"] * 10


def test_perfect_and_signature():
    s = corpus_scores(GOOD, REFS)
    assert s["bleu"].score == pytest.approx(100.0) and s["chrf"].score == pytest.approx(100.0)
    assert "tok:13a" in s["bleu"].signature and "nrefs:1" in s["bleu"].signature


def test_matches_sacrebleu_directly():
    import sacrebleu
    assert corpus_scores(BAD, REFS)["bleu"].score == pytest.approx(sacrebleu.corpus_bleu(BAD, [REFS]).score)


def test_length_mismatch():
    with pytest.raises(FormatError, match="hypotheses"):
        corpus_scores(GOOD[:-1], REFS)


def test_paired_bootstrap_detects_better_system():
    comps, sigs = paired_bootstrap([("bad", BAD), ("good", GOOD)], REFS, n_samples=200, seed=7)
    assert comps[0].p_values["BLEU"] is None
    assert comps[1].scores["BLEU"] > comps[0].scores["BLEU"] and comps[1].p_values["BLEU"] < 0.05
    assert "bs:200" in sigs["BLEU"] and "seed:7" in sigs["BLEU"]
    with pytest.raises(ConfigError):
        paired_bootstrap([("only", GOOD)], REFS)


def test_cli_evaluate(tmp_path, capsys):
    for name, lines in {"ref": REFS, "a": BAD, "b": GOOD}.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    assert main(["evaluate", "--ref", str(tmp_path / "ref"), "--hyp", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--bootstrap", "100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [s["system"] for s in out["systems"]] == ["a", "b"]


def test_cli_evaluate_prints_a_table_for_people(tmp_path, capsys):
    """Without --json: one row per system (the first is the reference of the comparisons, so it has no p-value),
    then the signatures; --orders adds a reordering line."""
    for name, lines in {"ref": REFS, "a": BAD, "b": GOOD}.items():
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    (tmp_path / "src").write_text("a b c d\n")
    (tmp_path / "al").write_text("0-0 1-4 1-5 2-2 3-6\n")
    (tmp_path / "ord").write_text("0 2 1 3\n")
    assert main(["evaluate", "--ref", str(tmp_path / "ref"), "--hyp", str(tmp_path / "a"), str(tmp_path / "b"),
                 "--bootstrap", "100", "--orders", str(tmp_path / "ord"), "--order-ref", str(tmp_path / "al"),
                 "--order-src", str(tmp_path / "src")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["system", "BLEU", "chrF2"]
    rows = {ln.split()[0]: ln for ln in lines[1:3]}
    assert set(rows) == {"a", "b"} and "p=" not in rows["a"] and rows["b"].count("p=") == 2
    assert any(ln.strip().startswith("BLEU: ") and "bs:100" in ln for ln in lines)
    assert lines[-1].startswith("reordering: ") and "tau=1.0000" in lines[-1] and "identity_tau=0.8333" in lines[-1]
    assert main(["evaluate", "--orders", str(tmp_path / "ord"), "--order-ref", str(tmp_path / "al"),
                 "--seeds", "3"]) != 0
    assert "--seeds groups --hyp files" in capsys.readouterr().err


def test_cli_evaluate_orders(tmp_path, capsys):
    # SPEC §12 example 1: ranks [0,2,1,3]; the oracle order scores 1, the identity 1 - 1/6 (tau), 0.4 (chunk)
    (tmp_path / "src").write_text("a b c d\n")
    (tmp_path / "al").write_text("0-0 1-4 1-5 2-2 3-6\n")
    (tmp_path / "ord").write_text("0 2 1 3\n")
    assert main(["evaluate", "--orders", str(tmp_path / "ord"), "--order-ref", str(tmp_path / "al"),
                 "--order-src", str(tmp_path / "src"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)["reordering"]
    assert r["tau"] == 1.0 and r["chunk"] == 1.0
    assert r["identity_tau"] == pytest.approx(1 - 1 / 6) and r["identity_chunk"] == pytest.approx(0.4)
