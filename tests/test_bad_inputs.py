"""Bad and hostile inputs through the command line: a clear error (exit status != 0, the file, line or option
named, no traceback), inputs unchanged, no partial output and no temporary file left behind."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from xlpe.cli import main

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)


def run(argv, capsys) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``xlpe ARGV`` run in this process; a traceback fails the test."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:                       # argparse refuses an option
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    assert "Traceback" not in err, err
    return code, out, err


def digest(*paths) -> dict:
    return {Path(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths if Path(p).is_file()}


def leftovers(folder) -> list:
    return [p for p in Path(folder).rglob("*") if p.name.endswith(".tmp")]


def fails(argv, capsys, *mentions, inputs=(), absent=(), folder=None):
    """Assert that ``xlpe ARGV`` fails cleanly, naming every string of ``mentions`` in its message."""
    before = digest(*inputs)
    code, _, err = run(argv, capsys)
    assert code != 0, f"{argv} succeeded"
    for m in mentions:
        assert m in err, f"{m!r} not in {err!r}"
    assert digest(*inputs) == before, "an input was changed"
    for p in absent:
        assert not Path(p).exists(), f"{p} was written"
    if folder is not None:
        assert not leftovers(folder)
    return err


@pytest.fixture
def model(toy, tmp_path_factory):
    """A tiny trained APE model (checkpoint path) on the toy corpus."""
    from xlpe.train import DataConfig, train
    out = tmp_path_factory.mktemp("model")
    res = train(tiny_model_config(), quick_train_config(out / "run", max_updates=2),
                DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"])))
    return res.last_checkpoint


# -- subwords -----------------------------------------------------------------------------------------------

def test_subword_train_refuses_a_path_that_is_not_a_file(tmp_path, capsys, toy):
    model = tmp_path / "m.model"
    fails(["subword", "train", "--input", tmp_path / "nope.txt", "--model", model], capsys, "nope.txt",
          "file not found", absent=[model])
    fails(["subword", "train", "--input", tmp_path, "--model", model], capsys, str(tmp_path), absent=[model])
    fails(["subword", "train", "--input", toy["src"], tmp_path / "typo.tgt", "--model", model], capsys,
          "typo.tgt", absent=[model])


def test_subword_train_on_empty_text_names_the_file(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    fails(["subword", "train", "--input", empty, "--model", tmp_path / "m.model", "--vocab-size", "50"], capsys,
          "empty.txt", "no text", absent=[tmp_path / "m.model"], folder=tmp_path)


def test_subword_outputs_never_replace_an_input(tmp_path, capsys, toy):
    src = tmp_path / "in.txt"
    src.write_text("w1 w2\n")
    fails(["subword", "encode", "--model", toy["spm"], "--input", src, "--output", src], capsys, "in.txt",
          "replace the input", inputs=[src])
    fails(["subword", "train", "--input", src, "--model", src], capsys, "replace the input", inputs=[src])


def test_subword_decode_refuses_ids_outside_the_vocabulary(tmp_path, capsys, toy):
    ids = tmp_path / "ids.txt"
    for bad in ("5 999999", "5 -3"):
        ids.write_text("4 5\n" + bad + "\n")
        fails(["subword", "decode", "--model", toy["spm"], "--ids", "--input", ids, "--output", tmp_path / "o"],
              capsys, "ids.txt:2", "outside the vocabulary", absent=[tmp_path / "o"], folder=tmp_path)


def test_a_byte_order_mark_is_not_text(tmp_path, capsys, toy):
    bom = tmp_path / "bom.txt"
    bom.write_bytes("\ufeffw1 w2\n".encode())
    code, out, _ = run(["subword", "encode", "--model", toy["spm"], "--input", bom], capsys)
    assert code == 0 and "0xEF" not in out
    ref = tmp_path / "ref.txt"
    ref.write_text("the cat sat .\n")
    hyp = tmp_path / "hyp.txt"
    hyp.write_bytes("\ufeffthe cat sat .\n".encode())
    code, out, _ = run(["evaluate", "--ref", ref, "--hyp", hyp, "--metrics", "bleu", "--json"], capsys)
    assert code == 0 and '"score": 100.0' in out


# -- evaluation ---------------------------------------------------------------------------------------------

def test_evaluate_refuses_empty_files_bad_samples_and_unknown_tokenizers(tmp_path, capsys):
    a, b, e = tmp_path / "a.txt", tmp_path / "b.txt", tmp_path / "e.txt"
    a.write_text("x y\n")
    b.write_text("x z\n")
    e.write_text("")
    fails(["evaluate", "--ref", e, "--hyp", e], capsys, "nothing to score")
    for n in ("-5", "0"):
        fails(["evaluate", "--ref", a, "--hyp", a, b, "--bootstrap", n], capsys, "--bootstrap")
    fails(["evaluate", "--ref", a, "--hyp", a, "--tokenize", "klingon"], capsys, "klingon", "13a")


def test_aer_refuses_nonsense(tmp_path, capsys):
    gold, hyp, empty = tmp_path / "gold.talp", tmp_path / "hyp.align", tmp_path / "e.align"
    gold.write_text("".join(f"{k + 1}-{k + 1} {k + 2}p{k + 1}\n" for k in range(12)))    # 1-based, never index 0
    hyp.write_text("".join(f"{k}-{k}\n" for k in range(12)))
    empty.write_text("")
    fails(["aer", "--ref", gold, "--ref-base", "0", "--hyp", hyp], capsys, "gold.talp", "1-based")
    fails(["aer", "--ref", empty, "--ref-base", "1", "--hyp", empty], capsys, "empty")
    fails(["aer", "--ref", gold, "--ref-base", "1", "--hyp", hyp, "--alpha", "7"], capsys, "alpha")
    fails(["aer", "--ref", gold, "--ref-base", "1", "--hyp", hyp, "--all-sure", "--ignore-possible"], capsys,
          "--all-sure", "--ignore-possible")
    code, out, _ = run(["aer", "--ref", gold, "--ref-base", "1", "--hyp", hyp], capsys)
    assert code == 0 and out.startswith("AER 0.00")


# -- training -----------------------------------------------------------------------------------------------

def _train_args(toy, out):
    return ["train", "--train-src", toy["src"], "--train-tgt", toy["tgt"], "--subword-model", toy["spm"],
            "--preset", "tiny", "--d-model", "16", "--d-ff", "32", "--max-updates", "1", "--out", out,
            "--no-progress", "--threads", "1", "--max-tokens", "200"]


def test_train_refuses_bad_numbers_and_leaves_no_folder(tmp_path, capsys, toy):
    out = tmp_path / "run"
    fails(_train_args(toy, out) + ["--lr", "-1"], capsys, "lr must be > 0", absent=[out])
    fails(_train_args(toy, out) + ["--max-tokens", "0"], capsys, "max_tokens", absent=[out])
    missing = _train_args(toy, out)
    missing[missing.index("--train-src") + 1] = str(tmp_path / "nope.src")
    fails(missing, capsys, "nope.src", absent=[out])           # fails after the folder was made: removed again


def test_resume_from_a_model_only_checkpoint_is_refused(tmp_path, capsys, toy, model):
    avg = tmp_path / "avg.pt"
    assert run(["average", "--checkpoints", model, "--output", avg], capsys)[0] == 0
    fails(_train_args(toy, tmp_path / "run2") + ["--resume", avg, "--max-updates", "5"], capsys, "model-only")


def test_average_refuses_different_models_and_a_resumable_output(tmp_path, capsys, toy, model):
    from xlpe.train import DataConfig, train
    other = train(tiny_model_config(pe=["ape", "rpe"]), quick_train_config(tmp_path / "rpe", max_updates=1),
                  DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"])))
    fails(["average", "--checkpoints", model, other.last_checkpoint, "--output", tmp_path / "x.pt"], capsys,
          "the models differ", "pe", absent=[tmp_path / "x.pt"])
    fails(["translate", "--checkpoint", model, other.last_checkpoint, "--input", toy["src"]], capsys,
          "the models differ")
    fails(["average", "--checkpoints", model, "--output", other.last_checkpoint], capsys, "resumable",
          inputs=[other.last_checkpoint])
    fails(["average", "--checkpoints", model, "--output", model], capsys, "one of the checkpoints", inputs=[model])


# -- translation --------------------------------------------------------------------------------------------

def test_translate_refuses_contradictions_and_pointless_options(tmp_path, capsys, toy, model):
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n")
    o = tmp_path / "out.txt"
    for args, msg in ((["--max-len-a", "-5", "--max-len-b", "-5"], "length limit"), (["--beam", "0"], "beam"),
                      (["--greedy", "--beam", "7"], "--greedy"), (["--batch-size", "0"], "batch_size"),
                      (["--orders", inp], "reads no channel ['xl']"), (["--device", "cuda:7"], "cuda:7")):
        fails(["translate", "--checkpoint", model, "--input", inp, "--output", o] + args, capsys, msg,
              inputs=[inp], absent=[o], folder=tmp_path)
    fails(["translate", "--checkpoint", model, "--input", inp, "--output", inp], capsys, "replace the input",
          inputs=[inp])
    fails(["translate", "--checkpoint", model, "--input", inp, "--output", tmp_path], capsys, "is a directory")


def test_translate_skip_long_writes_an_empty_line_for_a_long_line(tmp_path, capsys, toy, model):
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n" + " ".join(["w1"] * 300) + "\nw3\n")
    o = tmp_path / "out.txt"
    err = fails(["translate", "--checkpoint", model, "--input", inp, "--output", o, "--beam", "1"], capsys,
                "in.txt:2", "--skip-long", absent=[o])
    assert "skip long lines" not in err
    code, _, err = run(["translate", "--checkpoint", model, "--input", inp, "--output", o, "--beam", "1",
                        "--skip-long"], capsys)
    lines = o.read_text().split("\n")[:-1]
    assert code == 0 and len(lines) == 3 and lines[1] == ""


def test_orders_refuses_a_short_target_text_and_same_file_outputs(tmp_path, capsys):
    src, tgt, al = tmp_path / "s.txt", tmp_path / "t.txt", tmp_path / "a.align"
    src.write_text("a b\nc d\ne f\n")
    tgt.write_text("x y\ny z\n")                              # one line short
    al.write_text("0-0 1-1\n0-1\n1-0\n")
    out = tmp_path / "o.order"
    fails(["orders", "--src", src, "--tgt", tgt, "--align", al, "--order", out], capsys, "t.txt", "3",
          inputs=[src, tgt, al], absent=[out], folder=tmp_path)
    fails(["orders", "--src", src, "--align", al, "--order", src], capsys, "replace the input", inputs=[src])


def test_align_preorder_and_synth_check_their_outputs_before_any_work(tmp_path, capsys):
    pytest.importorskip("eflomal")
    src, tgt = tmp_path / "s.txt", tmp_path / "t.txt"
    src.write_text("a b\nc d\n")
    tgt.write_text("x y\nz w\n")
    fails(["align", src, tgt, "-o", tmp_path], capsys, "is a directory", inputs=[src, tgt], folder=tmp_path)
    fails(["align", src, tgt, "-o", src], capsys, "replace the input", inputs=[src, tgt])
    al = tmp_path / "a.align"
    al.write_text("0-0 1-1\n0-1 1-0\n")
    fails(["preorder", "train", "--src", src, "--align", al, "--model", tmp_path / "m", "--iterations", "0"], capsys,
          "--iterations", absent=[tmp_path / "m"])
    f = tmp_path / "afile"
    f.write_text("x\n")
    fails(["synth", "--out", f, "--train", "5", "--dev", "1", "--test", "1"], capsys, "is a file", inputs=[f])
