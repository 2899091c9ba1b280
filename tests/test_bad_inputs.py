"""Bad and hostile inputs through the command line: a clear error (exit status != 0, the file, line or option
named, no traceback), inputs unchanged, no partial output and no temporary file left behind."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import pytest

from xlpe.cli import main

from _nmt_toy import quick_train_config, tiny_model_config, toy, trained_checkpoint  # noqa: F401  (toy is a fixture)
from _procs import running as _running, wait_for as _wait_for, xlpe_env as _same_xlpe_env


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


@pytest.fixture(scope="module")
def model(toy, tmp_path_factory):
    """A tiny trained APE model (checkpoint path) on the toy corpus."""
    return trained_checkpoint(toy, tmp_path_factory.mktemp("model"))


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
    fails(_train_args(toy, out) + ["--max-tokens", "0"], capsys, "--max-tokens", absent=[out])
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
    # the same model config, but another subword model of the same size (unigram, not BPE): ids mean other pieces
    from xlpe.data.subword import train_subwords
    train_subwords([toy["src"], toy["tgt"]], tmp_path / "other.model", vocab_size=320, model_type="unigram")
    spm_b = train(tiny_model_config(), quick_train_config(tmp_path / "spm_b", max_updates=1),
                  DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]),
                             subword_model=str(tmp_path / "other.model")))
    fails(["average", "--checkpoints", model, spm_b.last_checkpoint, "--output", tmp_path / "y.pt"], capsys,
          "different subword models", absent=[tmp_path / "y.pt"])


# -- translation --------------------------------------------------------------------------------------------

def test_translate_refuses_contradictions_and_pointless_options(tmp_path, capsys, toy, model):
    inp = tmp_path / "in.txt"
    inp.write_text("w1 w2\n")
    o = tmp_path / "out.txt"
    for args, msg in ((["--max-len-a", "-5", "--max-len-b", "-5"], "length limit"), (["--beam", "0"], "beam"),
                      (["--greedy", "--beam", "7"], "--greedy"), (["--batch-size", "0"], "--batch-size"),
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


# -- the table: one bad input per case, every command ------------------------------------------------------------
#
# Each case is ``(id, command line, message regex, needs)``: the command line is split on spaces after filling in
# {d} (the folder of bad inputs below, never changed), {o} (an empty output folder), {ck} (a tiny trained model)
# and {spm} (its subword model); ``needs`` names what the case cannot run without ("eflomal", "model").
# :func:`check_case` asserts a non-zero exit status, the message (and no traceback), that no input changed, that
# the output folder is still empty and that no temporary file or directory of this process is left.

A = "align {d}/s.txt {d}/t.txt"
AER = "aer --ref {d}/a.align --ref-base 0"
TR = "translate --checkpoint {ck} --input {d}/s.txt --output {o}/out.txt"
TRAIN = ("train --train-src {d}/s.txt --train-tgt {d}/t.txt --subword-model {spm} --preset tiny --d-model 16 "
         "--d-ff 32 --max-updates 1 --no-progress --threads 1 --max-tokens 200 --out {o}/run")
AFM = "align-from-model --checkpoint {ck} --src {d}/s.txt --tgt {d}/t.txt --out {o}/a.align --layer -1"
ORD = "orders --src {d}/s.txt --order {o}/o.order"

CASES = [
    # align: inputs
    ("align-short-target", A.replace("t.txt", "t_short.txt") + " -o {o}/a", r"t_short\.txt.*(line|:)", "eflomal"),
    ("align-missing-input", "align {d}/nope.txt {d}/t.txt -o {o}/a", r"nope\.txt", "eflomal"),
    ("align-empty-line", A.replace("s.txt", "s_empty.txt") + " -o {o}/a", r"s_empty\.txt:2", "eflomal"),
    ("align-space-only-line", A.replace("s.txt", "s_spaces.txt") + " -o {o}/a", r"s_spaces\.txt:2", "eflomal"),
    ("align-invalid-utf8", A.replace("s.txt", "bad_utf8.txt") + " -o {o}/a", r"bad_utf8\.txt:2.*UTF-8", "eflomal"),
    ("align-joint-no-separator", "align {d}/joint_bad.txt -o {o}/a", r"joint_bad\.txt:2.*\|\|\|", "eflomal"),
    ("align-joint-two-separators", "align {d}/joint_two.txt -o {o}/a", r"joint_two\.txt:2", "eflomal"),
    ("align-three-files", A + " {d}/t.txt -o {o}/a", r"SRC TGT", "eflomal"),
    ("align-output-is-directory", A + " -o {o}", r"is a directory", "eflomal"),
    ("align-output-is-input", A + " -o {d}/t.txt", r"replace the input", "eflomal"),
    ("align-two-outputs-same-file", A + " -o {o}/a --forward-out {o}/a", r"same file", "eflomal"),
    ("align-length-zero", A + " -o {o}/a --length 0", r"--length must be > 0", "eflomal"),
    ("align-samplers-zero", A + " -o {o}/a --n-samplers 0", r"--n-samplers must be >= 1", "eflomal"),
    ("align-null-prior-above-one", A + " -o {o}/a --null-prior 2", r"--null-prior must be in \[0, 1\]", "eflomal"),
    ("align-chunk-size-zero", A + " -o {o}/a --chunk-size 0", r"--chunk-size must be >= 1", "eflomal"),
    ("align-subword-output-alone", A + " -o {o}/a --subword-output", r"--subword-output needs .*--subword-model",
     "eflomal"),
    ("align-tgt-subword-alone", A + " -o {o}/a --tgt-subword-model {spm}", r"--tgt-subword-model needs", "eflomal"),
    ("align-missing-tmp-dir", A + " -o {o}/a --tmp-dir {d}/nope", r"--tmp-dir .*nope is not a directory", "eflomal"),
    ("align-iterations-zero", A + " -o {o}/a --iterations 0", r"iterations must be >= 1", "eflomal"),
    ("align-iterations-two-numbers", A + " -o {o}/a --iterations 1,2", r"--iterations", "eflomal"),
    ("align-missing-priors", A + " -o {o}/a --priors-in {d}/nope.priors", r"nope\.priors", "eflomal"),
    ("align-random-priors", A + " -o {o}/a --priors-in {d}/random.bin", r"random\.bin", "eflomal"),
    ("align-missing-subword-model", A + " -o {o}/a --subword-model {d}/nope.model", r"nope\.model", "eflomal"),
    ("align-random-subword-model", A + " -o {o}/a --subword-model {d}/random.bin", r"random\.bin", "eflomal"),
    ("align-too-long-line", A.replace("s.txt", "s_long.txt") + " -o {o}/a", r"s_long\.txt:2.*--skip-bad",
     "eflomal"),
    # aer
    ("aer-malformed-link", AER + " --hyp {d}/a_bad.align", r"a_bad\.align:2.*'0-x'", None),
    ("aer-short-hypothesis", AER + " --hyp {d}/a_short.align", r"a_short\.align", None),
    ("aer-missing-hypothesis", AER + " --hyp {d}/nope.align", r"nope\.align", None),
    ("aer-invalid-utf8", AER + " --hyp {d}/a_utf8.align", r"a_utf8\.align:2.*UTF-8", None),
    ("aer-link-beyond-sentence", AER + " --hyp {d}/a_oor.align --src {d}/s.txt --tgt {d}/t.txt",
     r"a_oor\.align:2.*beyond", None),
    ("aer-negative-alpha", AER + " --hyp {d}/a.align --alpha -1", r"alpha", None),
    ("aer-reversed-base", AER.replace("a.align", "a_1based.align") + " --hyp {d}/a.align --src {d}/s.txt "
     "--tgt {d}/t.txt", r"a_1based\.align", None),
    # orders
    ("orders-malformed-link", ORD + " --align {d}/a_bad.align", r"a_bad\.align:2", None),
    ("orders-link-beyond-sentence", ORD + " --align {d}/a_oor.align", r"a_oor\.align:2.*beyond", None),
    ("orders-short-alignment", ORD + " --align {d}/a_short.align", r"a_short\.align", None),
    ("orders-one-based-as-zero", ORD + " --align {d}/a_1based.align", r"a_1based\.align.*1-based|--align-base",
     None),
    ("orders-zero-based-as-one", ORD + " --align {d}/a_zero.align --align-base 1", r"a_zero\.align:\d", None),
    ("orders-missing-source", "orders --src {d}/nope.txt --align {d}/a.align --order {o}/o.order", r"nope\.txt",
     None),
    ("orders-output-is-directory", "orders --src {d}/s.txt --align {d}/a.align --order {o}", r"is a directory", None),
    ("orders-invalid-utf8", "orders --src {d}/bad_utf8.txt --align {d}/a.align --order {o}/o.order",
     r"bad_utf8\.txt:2", None),
    ("orders-malformed-lader-alignment", ORD + " --lader-align {d}/a_bad.align", r"a_bad\.align:1", None),
    ("orders-missing-dpe-subword-model", ORD + " --align {d}/a.align --dpe {o}/d --dpe-subword-model {d}/nope.model",
     r"nope\.model", None),
    # preorder
    ("preorder-max-len-zero", "preorder train --src {d}/s.txt --align {d}/a.align --model {o}/m --max-len 0",
     r"--max-len must be >= 1", None),
    ("preorder-hash-bits", "preorder train --src {d}/s.txt --align {d}/a.align --model {o}/m --hash-bits 3",
     r"--hash-bits must be in 8\.\.30", None),
    ("preorder-malformed-alignment", "preorder train --src {d}/s.txt --align {d}/a_bad.align --model {o}/m",
     r"a_bad\.align:2", None),
    ("preorder-short-alignment", "preorder train --src {d}/s.txt --align {d}/a_short.align --model {o}/m",
     r"a_short\.align", None),
    ("preorder-short-target", "preorder train --src {d}/s.txt --tgt {d}/t_short.txt --align {d}/a.align "
     "--model {o}/m", r"t_short\.txt", None),
    ("orders-short-target", ORD + " --tgt {d}/t_short.txt --align {d}/a.align", r"t_short\.txt", None),
    ("preorder-apply-missing-model", "preorder apply --model {d}/nope --input {d}/s.txt --output {o}/x",
     r"nope", None),
    ("preorder-apply-file-as-model", "preorder apply --model {d}/random.bin --input {d}/s.txt --output {o}/x",
     r"random\.bin", None),
    # evaluate
    ("evaluate-line-counts-differ", "evaluate --ref {d}/t.txt --hyp {d}/t_short.txt", r"t_short\.txt.*t\.txt", None),
    ("evaluate-invalid-utf8", "evaluate --ref {d}/s.txt --hyp {d}/bad_utf8.txt", r"bad_utf8\.txt:2", None),
    ("evaluate-missing-hypothesis", "evaluate --ref {d}/t.txt --hyp {d}/nope.txt", r"nope\.txt", None),
    ("evaluate-orders-not-a-permutation", "evaluate --ref {d}/t.txt --hyp {d}/t.txt --orders {d}/o_nonperm.order "
     "--order-ref {d}/a.align", r"o_nonperm\.order:1.*permutation", None),
    ("evaluate-orders-short", "evaluate --ref {d}/t.txt --hyp {d}/t.txt --orders {d}/o_short.order "
     "--order-ref {d}/a.align", r"o_short\.order", None),
    ("evaluate-orders-without-reference", "evaluate --ref {d}/t.txt --hyp {d}/t.txt --orders {d}/o.order",
     r"--order-ref", None),
    ("evaluate-bootstrap-negative-one", "evaluate --ref {d}/t.txt --hyp {d}/t.txt {d}/s.txt --bootstrap -1",
     r"--bootstrap", None),
    # subword
    ("subword-encode-missing-model", "subword encode --model {d}/nope.model --input {d}/s.txt --output {o}/e",
     r"nope\.model", None),
    ("subword-encode-random-model", "subword encode --model {d}/random.bin --input {d}/s.txt --output {o}/e",
     r"random\.bin", None),
    ("subword-encode-invalid-utf8", "subword encode --model {spm} --input {d}/bad_utf8.txt --output {o}/e",
     r"bad_utf8\.txt:2", None),
    ("subword-encode-output-is-directory", "subword encode --model {spm} --input {d}/s.txt --output {o}",
     r"is a directory", None),
    ("subword-decode-ids-not-numbers", "subword decode --model {spm} --ids --input {d}/ids_bad.txt --output {o}/x",
     r"ids_bad\.txt:1", None),
    ("subword-train-vocab-too-small", "subword train --input {d}/s.txt --model {o}/m.model --vocab-size 5",
     r"s\.txt", None),
    # train
    ("train-best-bleu-without-dev-bleu", TRAIN + " --best-metric bleu", r"--best-metric 'bleu' needs --dev-bleu",
     None),
    ("train-dev-src-alone", TRAIN + " --dev-src {d}/s.txt", r"--dev-src and --dev-tgt", None),
    ("train-no-stopping-rule", TRAIN + " --max-updates 0", r"--max-updates, --max-epochs", None),
    ("train-heads-do-not-divide", TRAIN + " --d-model 15", r"--d-model 15 is not divisible by --n-heads 2", None),
    ("train-two-kinds-of-subwords", TRAIN + " --src-subword {spm}", r"--subword-model .*--src-subword", None),
    ("train-batch-multiple-zero", TRAIN + " --batch-multiple 0", r"--batch-multiple must be >= 1", None),
    ("train-noise-without-orders", TRAIN + " --train-orders-noise 0.5", r"--train-orders-noise", None),
    ("train-xl-without-orders", TRAIN + " --pe xl", r"--train-orders FILE", None),
    ("train-unknown-pe-option", TRAIN + " --pe-option foo=1", r"--pe-option \['foo'\]", None),
    ("train-unknown-encoding", TRAIN + " --pe depth", r"unknown position encoding 'depth'", None),
    ("train-short-target", TRAIN.replace("t.txt", "t_short.txt"), r"t_short\.txt", None),
    ("train-invalid-utf8", TRAIN.replace("s.txt", "bad_utf8.txt"), r"bad_utf8\.txt:2", None),
    ("train-missing-target", TRAIN.replace("t.txt", "nope.txt"), r"nope\.txt", None),
    ("train-orders-not-a-permutation", TRAIN + " --pe xl --train-orders {d}/o_nonperm.order",
     r"o_nonperm\.order:1", None),
    ("train-orders-short", TRAIN + " --pe xl --train-orders {d}/o_short.order", r"o_short\.order", None),
    ("train-random-subword-model", TRAIN.replace("{spm}", "{d}/random.bin"), r"random\.bin", None),
    ("train-missing-gpu", TRAIN + " --device cuda:7", r"cuda:7", None),
    ("train-resume-truncated-checkpoint", TRAIN + " --resume {d}/ck_truncated.pt", r"ck_truncated\.pt", "model"),
    ("train-bad-trees", TRAIN + " --pe struct_abs --train-trees {d}/bad.conllu", r"bad\.conllu:1", None),
    ("train-negative-dropout", TRAIN + " --dropout -0.5", r"dropout", None),
    ("train-label-smoothing-above-one", TRAIN + " --label-smoothing 1.5", r"label.smoothing", None),
    ("train-negative-warmup", TRAIN + " --warmup -3", r"warmup", None),
    # translate and checkpoints
    ("translate-truncated-checkpoint", TR.replace("{ck}", "{d}/ck_truncated.pt"), r"ck_truncated\.pt", "model"),
    ("translate-random-checkpoint", TR.replace("{ck}", "{d}/random.bin"), r"random\.bin", None),
    ("translate-bit-flipped-checkpoint", TR.replace("{ck}", "{d}/ck_flipped.pt"), r"ck_flipped\.pt", "model"),
    ("translate-pickled-payload", TR.replace("{ck}", "{d}/ck_pickle.pt"), r"ck_pickle\.pt: checkpoint refused.*print",
     None),
    ("translate-plain-pickle", TR.replace("{ck}", "{d}/ck_pickle.pkl"), r"ck_pickle\.pkl: not a readable checkpoint",
     None),
    ("translate-missing-checkpoint", TR.replace("{ck}", "{d}/nope.pt"), r"nope\.pt", None),
    ("translate-invalid-utf8", TR.replace("s.txt", "bad_utf8.txt"), r"bad_utf8\.txt:2", "model"),
    ("translate-missing-input", TR.replace("s.txt", "nope.txt"), r"nope\.txt", "model"),
    ("translate-chunk-size-zero", TR + " --chunk-size 0", r"--chunk-size must be >= 1", "model"),
    ("translate-max-tokens-zero", TR + " --max-tokens 0", r"--max-tokens", "model"),
    ("translate-unread-channel", TR + " --channel foo=order:{d}/o.order", r"--channel", "model"),
    ("translate-output-is-directory", TR.replace("{o}/out.txt", "{o}"), r"is a directory", "model"),
    # average
    ("average-truncated-checkpoint", "average --checkpoints {ck} {d}/ck_truncated.pt --output {o}/a.pt",
     r"ck_truncated\.pt", "model"),
    ("average-pickled-payload", "average --checkpoints {ck} {d}/ck_pickle.pt --output {o}/a.pt",
     r"ck_pickle\.pt: checkpoint refused", "model"),
    ("average-missing-checkpoint", "average --checkpoints {ck} {d}/nope.pt --output {o}/a.pt", r"nope\.pt", "model"),
    ("average-more-than-there-are", "average --dir {ckdir} --last 99 --output {o}/a.pt", r"99 asked for", "model"),
    ("average-output-is-directory", "average --checkpoints {ck} --output {o}", r"is a directory", "model"),
    # export
    ("export-unknown-quantization", "export --checkpoint {ck} --output {o}/m --quantization foo", r"--quantization",
     "model"),
    ("export-output-is-a-file", "export --checkpoint {ck} --output {d}/s.txt", r"s\.txt is a file", "model"),
    ("export-random-checkpoint", "export --checkpoint {d}/random.bin --output {o}/m", r"random\.bin", None),
    # synth
    ("synth-max-len-zero", "synth --out {o}/syn --train 5 --dev 1 --test 1 --max-len 0", r"--max-len must be", None),
    ("synth-rate-above-one", "synth --out {o}/syn --train 5 --dev 1 --test 1 --one-to-many 2", r"--one-to-many",
     None),
    ("synth-negative-count", "synth --out {o}/syn --train -5 --dev 1 --test 1", r"--train", None),
    ("synth-bad-config", "synth --out {o}/syn --config {d}/bad.toml", r"bad\.toml", None),
    # align-from-model
    ("align-from-model-layer", AFM + " --layer 9", r"--layer 9", "model"),
    ("align-from-model-batch-size-zero", AFM + " --batch-size 0", r"--batch-size must be >= 1", "model"),
    ("align-from-model-gold-without-base", AFM + " --gold {d}/a.align", r"--gold-base", "model"),
    ("align-from-model-short-target", AFM.replace("t.txt", "t_short.txt"), r"t_short\.txt", "model"),
    ("align-from-model-output-is-input", AFM.replace("{o}/a.align", "{d}/s.txt"), r"replace the input", "model"),
    # crossalign: model directories and outputs (no model is loaded: each fails before)
    ("ca-import-onto-a-file", "crossalign import-e5 {d}/s.txt", r"s\.txt exists and is not a directory",
     "transformers"),
    ("ca-import-onto-a-user-folder", "crossalign import-e5 {d}", r"non-empty directory that is not an e5 import",
     "transformers"),
    ("ca-import-prune-missing-text", "crossalign import-e5 {o}/e5 --prune {d}/nope.txt", r"nope\.txt: file not found",
     "transformers"),
    ("ca-align-missing-model", "crossalign align --model {o}/nope {d}/s.txt {d}/t.txt -o {o}/a",
     r"model directory .*nope not found", "transformers"),
    ("ca-align-not-a-model", "crossalign align --model {d} {d}/s.txt {d}/t.txt -o {o}/a", r"no config\.json",
     "transformers"),
    ("ca-align-output-is-input", "crossalign align --model {d} {d}/s.txt {d}/t.txt -o {d}/t.txt", r"replace the input",
     "transformers"),
    ("ca-train-out-is-a-file", "crossalign train --init {d} --src {d}/s.txt --tgt {d}/t.txt --out {d}/s.txt",
     r"--out .*s\.txt is a file", "transformers"),
    ("ca-train-init-not-a-model", "crossalign train --init {d} --src {d}/s.txt --tgt {d}/t.txt --out {o}/run",
     r"no config\.json", "transformers"),
]


@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    """The folder of bad inputs (shared by the cases, which must not change it)."""
    import pickle
    import random
    d = tmp_path_factory.mktemp("bad")
    files = {
        "s.txt": "a b c\nd e\nf g h\n", "t.txt": "x y z\nu v\nw p q\n", "t_short.txt": "x y z\nu v\n",
        "s_empty.txt": "a b c\n\nf g h\n", "s_spaces.txt": "a b c\n   \nf g h\n",
        "s_long.txt": "a b c\n" + " ".join(["d"] * 1100) + "\nf g h\n",
        "joint_bad.txt": "a b ||| x y\nno separator here\n", "joint_two.txt": "a b ||| x y\na ||| b ||| c\n",
        "a.align": "0-0 1-1 2-2\n0-0 1-1\n0-0 1-1 2-2\n", "a_zero.align": "0-0 1-1 2-2\n0-0 1-1\n0-0 1-1 2-2\n",
        "a_bad.align": "0-0 1-1\n0-x\n0-0\n", "a_oor.align": "0-0\n0-0 5-1\n0-0\n", "a_short.align": "0-0\n0-0\n",
        "a_1based.align": "1-1 2-2 3-3\n1-1 2-2\n1-1 2-2 3-3\n",
        "o.order": "0 1 2\n1 0\n2 1 0\n", "o_nonperm.order": "0 0 1\n1 0\n2 1 0\n", "o_short.order": "0 1 2\n1 0\n",
        "ids_bad.txt": "4 x\n", "bad.conllu": "1\ta\n\n", "bad.toml": "[synth\nmax_len = \n",
    }
    for name, text in files.items():
        (d / name).write_text(text, encoding="utf-8")
    (d / "bad_utf8.txt").write_bytes(b"a b c\nd \xff e\nf g h\n")
    (d / "a_utf8.align").write_bytes(b"0-0\n0-\xff1\n0-0\n")
    (d / "random.bin").write_bytes(random.Random(7).randbytes(300))

    class Payload:                          # a pickle that would call print() when loaded without weights_only
        def __reduce__(self):
            return print, ("a pickled payload ran",)
    (d / "ck_pickle.pkl").write_bytes(pickle.dumps({"model": Payload()}))
    torch = pytest.importorskip("torch")
    torch.save({"model": Payload()}, d / "ck_pickle.pt")
    return d


@pytest.fixture(scope="module")
def bad_checkpoints(bad, model):
    """Broken copies of the tiny model's checkpoint in the folder of bad inputs."""
    data = Path(model).read_bytes()
    (bad / "ck_truncated.pt").write_bytes(data[: len(data) // 2])
    flipped = bytearray(data)
    for k in range(len(data) // 3, len(data) // 3 + 64):
        flipped[k] ^= 0xFF
    (bad / "ck_flipped.pt").write_bytes(bytes(flipped))
    return bad


def own_temp_files() -> list:
    """Temporary directories of xlpe (eflomal jobs) owned by this process, in the system temp dir."""
    import tempfile

    from xlpe.io.process import owner_tag
    return sorted(Path(tempfile.gettempdir()).glob(f"xlpe-*-{owner_tag()}-*"))


def check_case(argv, capsys, pattern, folder, out):
    """``xlpe ARGV`` fails cleanly: exit status != 0, a message matching ``pattern`` and no traceback, no file of
    ``folder`` (the inputs) changed, ``out`` (the outputs) still empty, no temporary file left anywhere."""
    before = digest(*Path(folder).rglob("*"))
    code, _, err = run(argv, capsys)
    assert code != 0, f"xlpe {' '.join(argv)} succeeded"
    assert re.search(pattern, err, re.S), f"{pattern!r} not in {err!r}"
    assert digest(*Path(folder).rglob("*")) == before, "an input was changed"
    assert not [p for p in Path(out).rglob("*") if p.is_file()], f"output left: {list(Path(out).rglob('*'))}"
    assert not leftovers(folder) and not leftovers(out) and not own_temp_files()
    return err


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_bad_input(case, tmp_path, capsys, request, toy, bad):
    name, line, pattern, needs = case
    if needs == "eflomal" or name.startswith("align-") and not name.startswith("align-from-model"):
        pytest.importorskip("eflomal")
    if needs == "transformers":
        pytest.importorskip("transformers")
    paths = {"d": bad, "o": tmp_path / "out", "spm": toy["spm"], "ck": "-", "ckdir": "-"}
    if needs == "model" or "{ck" in line:
        request.getfixturevalue("bad_checkpoints")
        ck = request.getfixturevalue("model")
        paths.update(ck=ck, ckdir=Path(ck).parent)
    paths["o"].mkdir()
    argv = line.format(**{k: str(v) for k, v in paths.items()}).split()
    check_case(argv, capsys, pattern, bad, paths["o"])


# -- a killed `xlpe align` leaves no eflomal running and no temporary file -----------------------------------------

def _children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_align_leaves_no_child_and_no_temporary_file(tmp_path, capsys, sig):
    """Case 17: SIGTERM cleans up like Ctrl-C; after SIGKILL the eflomal child dies with its parent, and the next
    run removes the temporary files the killed one left."""
    import random
    import signal
    import subprocess
    import sys
    pytest.importorskip("eflomal")
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG and /proc are Linux's")
    rng = random.Random(0)
    src, tgt, tmpd, out = tmp_path / "s.txt", tmp_path / "t.txt", tmp_path / "tmpd", tmp_path / "out.align"
    pairs = [[rng.randint(0, 200) for _ in range(rng.randint(3, 12))] for _ in range(300)]
    src.write_text("".join(" ".join(f"a{w}" for w in p) + "\n" for p in pairs))
    tgt.write_text("".join(" ".join(f"b{w}" for w in reversed(p)) + "\n" for p in pairs))
    tmpd.mkdir()
    before = digest(src, tgt)
    proc = subprocess.Popen([sys.executable, "-m", "xlpe.cli", "align", str(src), str(tgt), "-o", str(out),
                             "--iterations", "100000", "--tmp-dir", str(tmpd), "--quiet"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_same_xlpe_env())
    try:
        assert _wait_for(lambda: _children(proc.pid) or proc.poll() is not None, 20), "eflomal never started"
        kids = _children(proc.pid)
        assert kids and proc.poll() is None, proc.communicate()
        proc.send_signal(getattr(signal, sig))
        _, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        assert _wait_for(lambda: not any(_running(k) for k in kids), 5), "eflomal outlived xlpe align"
    finally:
        for k in kids:                                                  # never leave one behind, even on failure
            if _running(k):
                os.kill(k, signal.SIGKILL)
    assert proc.returncode != 0 and "Traceback" not in err
    assert digest(src, tgt) == before and not out.exists()
    if sig == "SIGTERM":
        assert "terminated" in err
        assert not list(tmpd.iterdir()) and not leftovers(tmp_path)
        return
    assert list(tmpd.iterdir()) and leftovers(tmp_path)                # what a SIGKILL leaves ...
    src.write_text("a1 a2\n")
    tgt.write_text("b2 b1\n")
    code, _, _ = run(["align", src, tgt, "-o", out, "--iterations", "1", "--tmp-dir", tmpd, "--quiet"], capsys)
    assert code == 0 and out.exists()
    assert not list(tmpd.iterdir()) and not leftovers(tmp_path)      # ... the next run removes


def test_only_the_leftovers_of_dead_processes_of_this_host_are_removed(tmp_path):
    import subprocess
    import sys

    from xlpe.io.atomic import TMP_PATTERN, atomic_write
    from xlpe.io.process import owner_tag, remove_stale
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host, me = owner_tag().split("-")
    names = {"dead": f".o.txt.{host}-{proc.pid}.abc12345.tmp", "alive": f".o.txt.{host}-{me}.abc12345.tmp",
             "other host": f".o.txt.{'0' * 8 if host != '0' * 8 else '1' * 8}-{proc.pid}.abc12345.tmp",
             "untagged": ".o.txt.abc12345.tmp", "not ours": f"o.txt.{host}-{proc.pid}.abc12345.tmp"}
    for n in names.values():
        (tmp_path / n).write_text("x")
    assert remove_stale(tmp_path, TMP_PATTERN) == [tmp_path / names["dead"]]
    with atomic_write(tmp_path / "p.txt") as f:          # every atomic write cleans its folder the same way
        f.write("y\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([n for k, n in names.items() if k != "dead"]
                                                                 + ["p.txt"])


def test_a_tokenizer_that_needs_a_download_says_so_without_network(tmp_path, capsys, monkeypatch):
    """Issue 21 case 11: sacrebleu's SentencePiece tokenizers fetch a model on first use; without network the
    error names the tokenizer and says it needs the network (no traceback)."""
    import urllib.error
    import urllib.request

    def offline(*a, **k):
        raise urllib.error.URLError("no network (test)")
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    monkeypatch.setattr(urllib.request, "urlretrieve", offline)
    monkeypatch.setenv("SACREBLEU", str(tmp_path / "sacrebleu-cache"))      # no model cached from earlier runs
    (tmp_path / "h").write_text("a b c\n")
    code = main(["evaluate", "--ref", str(tmp_path / "h"), "--hyp", str(tmp_path / "h"), "--tokenize", "flores101"])
    err = capsys.readouterr().err
    assert code != 0 and "flores101" in err and "needs the network" in err and "Traceback" not in err
