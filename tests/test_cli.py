"""The command line: every sub-command is listed, documents its options, and the subword round trip."""

import argparse
import subprocess
import sys

import pytest

from xlpe.cli import COMMANDS, build_parser, main


def _run(*args):
    return subprocess.run([sys.executable, "-m", "xlpe.cli", *args], capture_output=True, text=True)


def test_help_lists_commands():
    r = _run("--help")
    assert r.returncode == 0
    for name in ("demo", "synth", "subword", "aer", "evaluate"):
        assert name in r.stdout


def _all_actions(parser):
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in a.choices.values():
                yield from _all_actions(sub)
        else:
            yield a


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_command_documents_its_options(name, capsys):
    parser, _ = build_parser([name])
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[name]
    undocumented = [a.option_strings or a.dest for a in _all_actions(sub)
                    if not isinstance(a, argparse._HelpAction) and not a.help]
    assert not undocumented, f"`xlpe {name}` options without help text: {undocumented}"
    with pytest.raises(SystemExit) as e:
        main([name, "--help"])
    assert e.value.code == 0 and f"usage: xlpe {name}" in capsys.readouterr().out


def test_no_command_prints_help(capsys):
    assert main([]) == 2


def test_subword_train_encode_decode(tmp_path, capsys):
    text = tmp_path / "t.txt"
    text.write_text("\n".join(["the lazy dog sleeps .", "a quick fox jumps over the dog ."] * 50) + "\n")
    model = tmp_path / "m.model"
    assert main(["subword", "train", "--input", str(text), "--model", str(model), "--vocab-size", "300"]) == 0
    enc, wmap, dec = tmp_path / "enc", tmp_path / "wmap", tmp_path / "dec"
    assert main(["subword", "encode", "--model", str(model), "--input", str(text), "--output", str(enc),
                 "--word-map", str(wmap)]) == 0
    assert main(["subword", "decode", "--model", str(model), "--input", str(enc), "--output", str(dec)]) == 0
    assert dec.read_text() == text.read_text()
    for pieces, wm, line in zip(enc.read_text().splitlines(), wmap.read_text().splitlines(),
                                text.read_text().splitlines()):
        assert len(pieces.split()) == len(wm.split())
        assert int(wm.split()[-1]) == len(line.split(" ")) - 1
    ids = tmp_path / "ids"
    assert main(["subword", "encode", "--model", str(model), "--input", str(text), "--output", str(ids), "--ids"]) == 0
    assert main(["subword", "decode", "--model", str(model), "--input", str(ids), "--output", str(dec), "--ids"]) == 0
    assert dec.read_text() == text.read_text()


def test_error_exit_code_and_message(tmp_path, capsys):
    rc = main(["subword", "encode", "--model", str(tmp_path / "missing.model"), "--input", "-"])
    assert rc == 1 and "missing.model: subword model not found" in capsys.readouterr().err


def test_a_closed_pipe_ends_the_command_quietly(tmp_path):
    """`xlpe ... | head`: when the reader of stdout is gone, the command stops with 141 (SIGPIPE's code), no
    traceback."""
    p = subprocess.Popen([sys.executable, "-m", "xlpe.cli", "experiment", "status", str(tmp_path)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                    # before the command writes: it imports for a second or more first
    err = p.stderr.read().decode()
    assert p.wait() == 141 and "Traceback" not in err, err
