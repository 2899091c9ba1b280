"""Translation: one output line per input line in input order, for any batching; streaming; errors; CLI."""

from __future__ import annotations

import io
import sys

import pytest

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)
from xlpe.errors import FormatError
from xlpe.infer.translate import Decoding, translate_file, translate_lines
from xlpe.nn.checkpoint import load_model
from xlpe.train import DataConfig, train

LINES = ["w1 w2 w3", "", "w4", "w5 w6 w7 w8 w9 w10 w11 w12", "w3 w3", "   ", "w29 w0 w1 w2 w3 w4", "w7",
         "w8 w9", "w10 w11 w12 w13 w14 w15 w16 w17 w18 w19", "w20", "w21 w22 w23"]


@pytest.fixture(scope="module")
def trained(toy, tmp_path_factory):
    out = tmp_path_factory.mktemp("translate_run")
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]))
    res = train(tiny_model_config(max_len=40), quick_train_config(out, max_updates=12), data)
    return res.last_checkpoint


def test_one_line_per_input_in_order(trained):
    model, cfg, sw = load_model(trained)
    reference = [translate_lines(model, sw, [line], beam=3, batch_size=1)[0] for line in LINES]
    assert reference[1] == "" and reference[5] == ""
    assert all(r for i, r in enumerate(reference) if i not in (1, 5))       # a trained-a-little model says something
    for bs in (1, 3, 64):
        assert translate_lines(model, sw, LINES, beam=3, batch_size=bs) == reference
    assert translate_lines(model, sw, LINES, beam=3, batch_size=64, max_tokens=12) == reference
    greedy = translate_lines(model, sw, LINES, greedy=True, batch_size=3)
    assert len(greedy) == len(LINES) and greedy[1] == ""
    assert translate_lines(model, sw, []) == [] and translate_lines(model, sw, ["", ""]) == ["", ""]


def test_workers_decode_batches_on_threads_with_the_same_outputs(trained, monkeypatch):
    """``workers=2``: batches run on two threads with torch's threads divided among them, the outputs those of
    one worker at that thread count, the model's training flag and the thread count restored."""
    import threading

    import torch

    from xlpe.infer import beam as beam_mod

    model, _, sw = load_model(trained)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        reference = translate_lines(model, sw, LINES, beam=3, batch_size=2)
        greedy = translate_lines(model, sw, LINES, greedy=True, batch_size=2)
        torch.set_num_threads(2)
        seen = []
        real = beam_mod.beam_search

        def recording(*a, **kw):
            seen.append((threading.current_thread().name, torch.get_num_threads()))
            return real(*a, **kw)

        monkeypatch.setattr(beam_mod, "beam_search", recording)
        model.train()
        assert translate_lines(model, sw, LINES, beam=3, batch_size=2, workers=2) == reference
        assert model.training and torch.get_num_threads() == 2
        assert len(seen) == 5 and {n for n, _ in seen} != {threading.current_thread().name}
        assert all(n.startswith("xlpe-decode") and t == 1 for n, t in seen)
        assert translate_lines(model, sw, LINES, greedy=True, batch_size=2, workers=3) == greedy
    finally:
        torch.set_num_threads(threads)


def test_workers_are_checked():
    import torch

    from xlpe.errors import ConfigError
    from xlpe.infer.translate import check_decoding_workers

    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="workers must be an integer"):
            Decoding(workers=bad)
    with pytest.raises(ConfigError, match="on cuda use workers=1"):
        check_decoding_workers(2, torch.device("cuda"))
    check_decoding_workers(1, torch.device("cuda"))


def test_translate_file_streams_in_chunks(trained, tmp_path, monkeypatch):
    model, _, sw = load_model(trained)
    expect = translate_lines(model, sw, LINES, beam=2)
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("\n".join(LINES) + "\n", encoding="utf-8")
    assert translate_file(trained, inp, out, decoding=Decoding(beam=2, batch_size=2), chunk_size=5) == len(LINES)
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == expect
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(inp.read_bytes())))
    assert translate_file(trained, "-", tmp_path / "out2.txt", decoding=Decoding(beam=2), chunk_size=4) == len(LINES)
    assert (tmp_path / "out2.txt").read_text(encoding="utf-8").split("\n")[:-1] == expect


def test_errors_name_file_and_line(trained, tmp_path):
    inp = tmp_path / "long.txt"
    lines = list(LINES)
    lines[6] = " ".join(["w1"] * 30)                       # 60 subwords + EOS > max_len 40
    inp.write_text("\n".join(lines) + "\n")
    with pytest.raises(FormatError, match=r"long\.txt:7: .*limit 40"):
        translate_file(trained, inp, tmp_path / "o.txt", chunk_size=4)
    assert not (tmp_path / "o.txt").exists()               # no half output
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(FormatError, match="empty"):
        translate_file(trained, empty, tmp_path / "o.txt")


def test_cli(trained, tmp_path):
    from xlpe.cli import main
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("w1 w2\n\nw3\n")
    assert main(["translate", "--checkpoint", str(trained), "--input", str(inp), "--output", str(out),
                 "--greedy", "--batch-size", "2"]) == 0
    got = out.read_text().split("\n")
    assert len(got) == 4 and got[1] == "" and got[3] == ""
    assert main(["translate", "--checkpoint", str(trained), "--input", str(inp), "--output", str(tmp_path / "w.txt"),
                 "--greedy", "--batch-size", "1", "--workers", "2"]) == 0
    assert (tmp_path / "w.txt").read_text() == out.read_text()


def test_cli_sets_up_memory_before_decoding(trained, tmp_path, monkeypatch):
    """`xlpe translate` keeps freed memory in glibc's heap and caps oneDNN's caches (bf16 decoding kept a
    primitive per step shape) before it decodes."""
    import xlpe.cli.translate as cli
    from xlpe.cli import main
    calls = []
    monkeypatch.setattr(cli, "retain_freed_memory", lambda: calls.append("retain") or True)
    monkeypatch.setattr(cli, "limit_onednn_caches", lambda: calls.append("limit") or True)
    real = cli.translate_file
    monkeypatch.setattr(cli, "translate_file", lambda *a, **k: calls.append("decode") or real(*a, **k))
    inp, out = tmp_path / "in.txt", tmp_path / "out.txt"
    inp.write_text("w1 w2\n")
    assert main(["translate", "--checkpoint", str(trained), "--input", str(inp), "--output", str(out),
                 "--greedy"]) == 0
    assert calls == ["retain", "limit", "decode"]


_PAGE_FAULTS = """
import resource, sys, torch
from xlpe.runtime import retain_freed_memory
print(retain_freed_memory())
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
def batch():                # a batch of decoding: each step's blocks are freed, the live rows shrink step by step
    for rows in range(320, 0, -20):
        logits = torch.ones(rows, 8000); lp = logits.log_softmax(-1); h = torch.ones(rows, 1024); del logits, lp, h
for _ in range(3):
    batch()
f0 = faults()
for _ in range(3):
    batch()
print((faults() - f0) / 3)
"""


def test_retain_freed_memory_stops_page_faults_in_a_fresh_process():
    """``xlpe translate``'s allocator set-up (xlpe.runtime.retain_freed_memory), in a child process (it is
    process-wide): on glibc, blocks freed by decoding-like steps serve the next batches without new page faults;
    a user's own MALLOC_* setting is left alone."""
    import os
    import platform
    import subprocess
    from xlpe.runtime import MALLOC_ENV
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's mallopt only")
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    out = subprocess.run([sys.executable, "-c", _PAGE_FAULTS], env=env, capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "True"
    assert float(out[1]) < 100         # glibc's defaults: ~5,000 page faults a batch here, every batch
    out = subprocess.run([sys.executable, "-c", _PAGE_FAULTS], env={**env, "MALLOC_TRIM_THRESHOLD_": "131072"},
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "False"


_RELEASE = """
import sys, torch
from xlpe.runtime import release_freed_memory, retain_freed_memory
retain_freed_memory()                 # freed blocks stay in the heap
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
blocks = [torch.ones(1 << 18) for _ in range(200)]      # 200 blocks of 1 MB, written to
del blocks[:-1:2]                                       # every other one freed: holes inside the heap
before = rss_mb()
print(release_freed_memory(), before, rss_mb())
"""


def test_release_freed_memory_returns_the_heaps_free_pages():
    """``xlpe.runtime.release_freed_memory`` (``TrainConfig.trim_memory_every``): free blocks held inside glibc's
    heap (not only at its top) go back to the OS, so the resident size falls by about the memory freed."""
    import os
    import platform
    import subprocess
    from xlpe.runtime import MALLOC_ENV
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        pytest.skip("glibc's malloc_trim only")
    env = {k: v for k, v in os.environ.items() if k not in MALLOC_ENV}
    ok, before, after = subprocess.run([sys.executable, "-c", _RELEASE], env=env, capture_output=True, text=True,
                                       check=True).stdout.split()
    assert ok == "True"
    assert float(before) - float(after) > 70         # 100 MB freed inside the heap
