"""`xlpe orders`: files of ranks, orders, pos_XL, DPE targets and 2PT sources from an alignment file."""


from xlpe.cli import main
from xlpe.io import read_orders

from _nmt_toy import toy  # noqa: F401  (a fixture)


def test_orders_files(tmp_path, capsys):
    (tmp_path / "s").write_text("a b c d\nx ( y ) z\nq r s t u\n")
    # SPEC §12 example 1 (line 1) and example 5 (line 3: fast_align links, 5 tokens)
    (tmp_path / "a").write_text("0-0 1-4 1-5 2-2 3-6\n0-1 2-0 4-2\n0-0 2-1 4-1 2-2 1-3\n")
    out = {k: tmp_path / k for k in ("ranks", "order", "pos", "dpe", "rs")}
    assert main(["orders", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"), "--ranks", str(out["ranks"]),
                 "--order", str(out["order"]), "--pos-xl", str(out["pos"]), "--dpe", str(out["dpe"]),
                 "--reordered-src", str(out["rs"])]) == 0
    ranks = out["ranks"].read_text().splitlines()
    assert ranks[0] == "0 2 1 3"
    assert ranks[1] == "3 0 1 2 4"              # null brackets placed just outside "y"
    assert out["dpe"].read_text().splitlines()[2] == "0-0 2-1 4-2 1-3"
    orders = list(read_orders(out["order"], lengths=[4, 5, 5]))
    pos = list(read_orders(out["pos"], lengths=[4, 5, 5]))
    for o, p in zip(orders, pos):
        assert [p[k] for k in o] == list(range(len(o)))
    assert out["rs"].read_text().splitlines()[2] == "q s u r"   # 2PT drop: unaligned "t" vanishes


def test_orders_errors(tmp_path, capsys):
    (tmp_path / "s").write_text("a b\n")
    (tmp_path / "a").write_text("0-0 2-0\n")
    rc = main(["orders", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"), "--ranks", str(tmp_path / "r")])
    assert rc == 1 and f"{tmp_path / 'a'}:1:" in capsys.readouterr().err and not (tmp_path / "r").exists()
    (tmp_path / "l").write_text("3-1 ||| 0-0\n")
    rc = main(["orders", "--src", str(tmp_path / "s"), "--lader-align", str(tmp_path / "l"), "--order",
               str(tmp_path / "o")])
    assert rc == 1 and "header says the source has 3 words" in capsys.readouterr().err
    rc = main(["orders", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a")])
    assert rc == 1 and "nothing to write" in capsys.readouterr().err


def test_dpe_targets_projected_to_subwords(tmp_path, toy, capsys):
    """--dpe-subword-model: every piece of an aligned word gets a target (SPEC §8.3, §6.2). With a monotone
    word alignment the pieces keep their order: 0-0 1-1 ... over all pieces; swapping the two words of a
    two-word sentence moves the second word's pieces in front."""
    from xlpe.data.subword import SubwordModel
    sw = SubwordModel.load(toy["spm"])
    lines = [ln for ln in open(toy["src"]).read().splitlines() if len(ln.split()) >= 2][:5]
    (tmp_path / "s").write_text("".join(ln + "\n" for ln in lines))
    (tmp_path / "a").write_text("".join(" ".join(f"{i}-{i}" for i in range(len(ln.split()))) + "\n" for ln in lines))
    assert main(["orders", "--src", str(tmp_path / "s"), "--align", str(tmp_path / "a"), "--dpe",
                 str(tmp_path / "d"), "--dpe-subword-model", str(toy["spm"])]) == 0
    for ln, got in zip(lines, (tmp_path / "d").read_text().splitlines()):
        n = len(sw.encode(ln.split()).ids)
        assert got == " ".join(f"{k}-{k}" for k in range(n))
    two = lines[0].split()[:2]
    (tmp_path / "s2").write_text(" ".join(two) + "\n")
    (tmp_path / "a2").write_text("0-1 1-0\n")
    assert main(["orders", "--src", str(tmp_path / "s2"), "--align", str(tmp_path / "a2"), "--dpe",
                 str(tmp_path / "d2"), "--dpe-subword-model", str(toy["spm"])]) == 0
    n0, n1 = (len(sw.encode([w]).ids) for w in two)
    want = {k: n1 + k for k in range(n0)} | {n0 + k: k for k in range(n1)}      # piece -> target rank
    assert (tmp_path / "d2").read_text().split() == [f"{i}-{t}" for t, i in sorted((t, i) for i, t in want.items())]
    assert main(["orders", "--src", str(tmp_path / "s2"), "--align", str(tmp_path / "a2"), "--order",
                 str(tmp_path / "o"), "--dpe-subword-model", str(toy["spm"])]) == 1
    assert "give --dpe too" in capsys.readouterr().err
