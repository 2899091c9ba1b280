"""Hostile outputs, operating-system errors, values without bounds and config edges through the command line.

* Special files as outputs: a device, a FIFO, a symlink to one (``/dev/null``, ``/dev/full``) or to a regular file
  is written through, never replaced (the atomic writer's rename used to turn ``/dev/null`` into a regular file).
* Operating-system errors (a full disk, a folder that cannot be written, a symlink loop, a closed or full standard
  stream, a closed pipe) are one line ``xlpe COMMAND: PATH: strerror (ENAME)`` and exit status 1 (141, silent,
  for a closed pipe), with no traceback, no partial output, no temporary file and no new folder left.
* Values without a natural bound (beam, threads, processes, samplers, synthetic sizes, bootstrap samples) and
  beam searches that cannot fit in memory are refused before any work.
* Config edges: a config file that is not UTF-8 text, a list where a number is expected, ``--set`` of a table
  the command does not read.

Each row of :data:`CASES` is one command (``{d}``: a folder of inputs, ``{o}``: the output folder, ``{spm}``,
``{ck}``: the toy subword model and a tiny trained checkpoint), the hostile set-up it runs in (``env``), its exit
status, the pattern of its one-line message and what must hold afterwards (``check``).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from xlpe.cli import main

from _nmt_toy import toy, trained_checkpoint, write_toy_corpus  # noqa: F401  (toy: a fixture)

ENC = "subword encode --model {spm} --input {d}/s.txt"
TR = "translate --checkpoint {ck} --input {d}/s.txt"
SYN = "synth --train 3 --dev 1 --test 1"
TRAIN = ("train --train-src {d}/s.txt --train-tgt {d}/t.txt --subword-model {spm} --preset tiny --d-model 16 "
         "--d-ff 32 --max-updates 1 --save-every 1 --no-progress --threads 1 --max-tokens 200")
ENOSPC = r"No space left on device \(ENOSPC\)"
ELOOP = r"Too many levels of symbolic links \(ELOOP\)"


@dataclass(frozen=True)
class Case:
    name: str
    line: str
    code: int = 1
    pattern: str = ""           # the one error line (code != 0)
    env: tuple = ()             # hostile set-up: see prepare()
    check: str = ""             # what must hold afterwards: see CHECKS
    needs: str = ""             # "model", "eflomal", "mknod"


CASES = [
    # 1. special files as outputs: written in place, never replaced
    Case("null-link", ENC + " --output {o}/null", 0, env=("null",), check="null"),
    Case("word-map-null-link", ENC + " --output {o}/e.txt --word-map {o}/null", 0, env=("null",), check="null"),
    Case("fifo", ENC + " --output {o}/fifo", 0, env=("fifo",), check="fifo"),
    Case("symlink-to-fifo", ENC + " --output {o}/fifo-link", 0, env=("fifo",), check="fifo"),
    Case("device-node", ENC + " --output {o}/dev", 0, env=("device",), check="device", needs="mknod"),
    Case("symlink-to-file", ENC + " --output {o}/link", 0, env=("link",), check="link"),
    Case("dangling-symlink", ENC + " --output {o}/dangling", 0, env=("dangling",), check="dangling"),
    Case("symlink-to-folder", ENC + " --output {o}/dir-link", 1, r"output .*dir-link is a directory",
         env=("dir-link",)),
    Case("full-link", ENC + " --output {o}/full", 1, r"xlpe subword: .*full: " + ENOSPC, env=("full",),
         check="full"),
    Case("translate-null-link", TR + " --output {o}/null", 0, env=("null",), check="null", needs="model"),
    Case("average-fifo", "average --checkpoints {ck} --output {o}/fifo", 0, env=("fifo",), check="fifo-bytes",
         needs="model"),
    Case("synth-split-null-link", SYN + " --out {o}/syn", 0, env=("syn-null",), check="syn-null"),
    # 2. operating-system errors: one line, nothing left behind
    Case("encode-full-disk", ENC + " --output {o}/e.txt", 1, r"xlpe subword: .*e\.txt: " + ENOSPC, env=("enospc",)),
    Case("encode-full-disk-new-folder", ENC + " --output {o}/new/e.txt", 1, r"new/e\.txt: " + ENOSPC,
         env=("enospc",)),
    Case("synth-full-disk", SYN + " --out {o}/syn", 1, r"xlpe synth: .*syn/[a-z]+\.\w+: " + ENOSPC,
         env=("enospc",)),
    Case("synth-full-disk-late", SYN + " --out {o}/syn", 1, r"syn/README\.txt: " + ENOSPC,
         env=("enospc:README",)),
    Case("translate-full-disk", TR + " --output {o}/t.txt", 1, r"xlpe translate: .*t\.txt: " + ENOSPC,
         env=("enospc",), needs="model"),
    Case("average-full-disk", "average --checkpoints {ck} --output {o}/a.pt", 1, r"a\.pt: " + ENOSPC,
         env=("enospc",), needs="model"),
    Case("train-full-disk-checkpoint", TRAIN + " --out {o}/run", 1, r"xlpe train: .*checkpoint_1\.pt: " + ENOSPC,
         env=("enospc:checkpoint",)),
    Case("encode-read-only-folder", ENC + " --output {o}/ro/e.txt", 1, r"ro/e\.txt: .*\((EPERM|EACCES)\)",
         env=("read-only",)),
    Case("synth-read-only-folder", SYN + " --out {o}/ro/syn", 1, r"ro/syn: .*\((EPERM|EACCES)\)",
         env=("read-only",)),
    Case("output-symlink-loop", ENC + " --output {o}/loopa", 1, r"xlpe subword: .*loopa: " + ELOOP, env=("loop",)),
    Case("input-symlink-loop", "evaluate --ref {d}/t.txt --hyp {o}/loopa", 1, r"loopa: " + ELOOP, env=("loop",)),
    Case("config-symlink-loop", SYN + " --out {o}/syn --config {o}/loopa", 1, r"loopa: " + ELOOP, env=("loop",)),
    Case("synth-out-symlink-loop", SYN + " --out {o}/loopa", 1, r"loopa: " + ELOOP, env=("loop",)),
    Case("train-out-symlink-loop", TRAIN + " --out {o}/loopa", 1, r"xlpe train: .*loopa: " + ELOOP, env=("loop",)),
    Case("average-output-loop-resolve", "average --checkpoints {ck} --output {o}/loopa", 1, r"loopa: " + ELOOP,
         env=("loop",), needs="model"),
    Case("output-below-a-file", ENC + " --output {d}/s.txt/e.txt", 1, r"s\.txt/e\.txt: Not a directory \(ENOTDIR\)"),
    Case("output-name-too-long", ENC + " --output {o}/" + "n" * 300, 1, r"File name too long \(ENAMETOOLONG\)"),
    # 5. values without bounds
    Case("translate-beam-beyond-vocabulary", TR + " --beam 1000000", 1, r"--beam 1000000 is larger than the "
         r"model's target vocabulary", needs="model"),
    Case("translate-beam-out-of-memory", TR + " --beam 200", 1, r"beam search of beam 200 .* needs about .* more "
         r"than the 1 MiB available: .*--beam", env=("memory",), needs="model"),
    Case("translate-negative-threads", TR + " --threads -1", 1, r"--threads must be an integer from 0 .* not -1",
         needs="model"),
    Case("translate-preorder-processes", TR + " --preorder-processes 100000", 1,
         r"--preorder-processes must be an integer from 1 to \d+, not 100000", needs="model"),
    Case("align-from-model-negative-threads", "align-from-model --checkpoint {ck} --src {d}/s.txt --tgt {d}/t.txt "
         "--out {o}/a.align --threads -3", 1, r"--threads must be .*not -3", needs="model"),
    Case("train-negative-threads", TRAIN + " --out {o}/run --threads -1", 1, r"--threads must be .*not -1"),
    Case("parse-negative-processes", "parse {d}/s.txt -o {o}/t.conllu --processes -2", 1,
         r"--processes must be an integer from 1 to \d+, not -2"),
    Case("preorder-apply-zero-processes", "preorder apply --model {d} --input {d}/s.txt --output {o}/x --processes 0",
         1, r"--processes must be an integer from 1"),
    Case("demo-jobs", "demo --out {o}/demo --jobs 100000", 1, r"--jobs must be an integer from 0 .*not 100000"),
    Case("experiment-threads", "experiment xl-pe --out {o}/e --set data.builtin='sov' --set experiment.threads=-1",
         1, r"experiment\.threads must be an integer from 0"),
    Case("align-samplers", "align {d}/s.txt {d}/t.txt -o {o}/a --n-samplers 100000", 2,   # align's usage status
         r"--n-samplers must be <= 64", needs="eflomal"),
    Case("synth-nouns", SYN + " --out {o}/syn --nouns 100000000", 1, r"nouns must be <= 10000, not 100000000"),
    Case("synth-depth", SYN + " --out {o}/syn --max-depth 1000", 1, r"--max-depth must be <= 20"),
    Case("synth-length", SYN + " --out {o}/syn --max-len 100000", 1, r"--max-len must be <= 1000"),
    Case("synth-pairs", "synth --out {o}/syn --train 100000000", 1, r"100001000 pairs asked for; .*at most 10000000"),
    Case("evaluate-bootstrap", "evaluate --ref {d}/t.txt --hyp {d}/t.txt {d}/s.txt --bootstrap 1000000000", 1,
         r"--bootstrap must be from 1 to 100000"),
    Case("preorder-train-beam", "preorder train --src {d}/s.txt --align {d}/a.align --model {o}/m --beam 1000000",
         1, r"--beam must be from 1 to 64"),
    Case("subword-train-max-sentences", "subword train --input {d}/s.txt --model {o}/m.model --max-sentences -1", 1,
         r"--max-sentences must be >= 1"),
    # 7. config edges
    Case("synth-toml-not-utf8", SYN + " --out {o}/syn --config {d}/bad_utf8.toml", 1,
         r"bad_utf8\.toml:3: not UTF-8 text \(byte 0xff\)"),
    Case("train-toml-not-utf8", TRAIN + " --out {o}/run --config {d}/bad_utf8.toml", 1, r"bad_utf8\.toml:3: not UTF-8"),
    Case("synth-json-not-utf8", SYN + " --out {o}/syn --config {d}/bad_utf8.json", 1, r"bad_utf8\.json:1: not UTF-8"),
    Case("synth-endless-config", SYN + " --out {o}/syn --config /dev/zero", 1, r"/dev/zero is larger than 16 MiB"),
    Case("train-list-for-an-integer", TRAIN + " --out {o}/run --set model.n_heads=[1,2]", 1,
         r"--set \[model\]: --n-heads must be an integer, not \[1, 2\]"),
    Case("train-list-from-a-file", TRAIN + " --out {o}/run --config {d}/heads.toml", 1,
         r"heads\.toml \[model\]: --n-heads must be an integer, not \[1, 2\]"),
    Case("train-number-for-a-list", TRAIN + " --out {o}/run --set model.pe=3", 1, r"pe must be a list of strings"),
    Case("train-list-for-a-number", TRAIN + " --out {o}/run --set train.lr=[1]", 1, r"lr must be a number"),
    Case("experiment-list-for-an-integer", "experiment xl-pe --out {o}/e --set model.n_heads=[1,2]", 1,
         r"n_heads must be an integer"),
    Case("synth-set-unread-table", SYN + " --out {o}/syn --set train.x=3", 1,
         r"--set train\.x=3: xlpe synth reads only its generator options"),
    Case("synth-set-without-table", SYN + " --out {o}/syn --set nouns=3", 1, r"--set expects SECTION\.KEY=VALUE"),
    Case("synth-toml-with-byte-order-mark", SYN + " --out {o}/syn --config {d}/bom.toml", 0, check="syn"),
]


# -- set-ups ----------------------------------------------------------------------------------------------------

class FifoReader(threading.Thread):
    """Reads a FIFO to its end (what a consumer of ``xlpe ... --output FIFO`` does)."""

    def __init__(self, path: Path):
        super().__init__(daemon=True)
        self.path, self.data = path, b""

    def run(self):
        with open(self.path, "rb") as f:
            self.data = f.read()


def _fill_mkstemp(monkeypatch, only: str = ""):
    """Make the atomic writer's temporary files (those named after ``only``) behave as on a full disk: their
    descriptor is /dev/full's, whose every write fails with ENOSPC (from the kernel)."""
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        fd, name = real(*args, **kwargs)
        if kwargs.get("suffix") == ".tmp" and only in kwargs.get("prefix", ""):
            full = os.open("/dev/full", os.O_WRONLY)
            os.dup2(full, fd)
            os.close(full)
        return fd, name
    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)


def _read_only(folder: Path, request) -> None:
    """A folder this process cannot write in: chmod for a user; for root (whom chmod does not stop) the
    immutable attribute, or a skip where it cannot be set."""
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        request.addfinalizer(lambda: folder.chmod(0o755))
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(folder)], capture_output=True).returncode:
        pytest.skip("running as root, where only the immutable attribute (chattr +i) stops a write, and it "
                    "cannot be set here")
    request.addfinalizer(lambda: subprocess.run([chattr, "-i", str(folder)], check=True))


def prepare(env: tuple, o: Path, monkeypatch, request) -> dict:
    """Build the hostile set-up ``env`` in the output folder ``o``; returns what the checks need."""
    got: dict = {}
    for kind in env:
        if kind == "null":
            os.symlink("/dev/null", o / "null")
        elif kind == "full":
            os.symlink("/dev/full", o / "full")
        elif kind == "fifo":
            os.mkfifo(o / "fifo")
            os.symlink("fifo", o / "fifo-link")
            got["reader"] = FifoReader(o / "fifo")
            got["reader"].start()
        elif kind == "device":
            try:
                os.mknod(o / "dev", stat.S_IFCHR | 0o666, os.makedev(1, 3))     # a /dev/null of our own
            except PermissionError:
                pytest.skip("cannot make a device node here (no CAP_MKNOD)")
        elif kind == "link":
            (o / "target.txt").write_text("old\n")
            os.symlink("target.txt", o / "link")
        elif kind == "dangling":
            os.symlink("made.txt", o / "dangling")
        elif kind == "dir-link":
            (o / "dir").mkdir()
            os.symlink("dir", o / "dir-link")
        elif kind == "syn-null":
            (o / "syn").mkdir()
            os.symlink("/dev/null", o / "syn" / "train.src")
        elif kind == "loop":
            os.symlink("loopb", o / "loopa")
            os.symlink("loopa", o / "loopb")
        elif kind.startswith("enospc"):
            _fill_mkstemp(monkeypatch, kind.partition(":")[2])
        elif kind == "read-only":
            _read_only(o / "ro", request)
        elif kind == "memory":
            import xlpe.runtime
            monkeypatch.setattr(xlpe.runtime, "available_memory", lambda: 1 << 20)
        else:
            raise AssertionError(f"unknown set-up {kind}")
    return got


# -- checks ---------------------------------------------------------------------------------------------------

def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _is_link_to(path: Path, target: str) -> bool:
    return path.is_symlink() and os.readlink(path) == target


CHECKS = {
    "null": lambda o, got: _is_link_to(o / "null", "/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode),
    "full": lambda o, got: _is_link_to(o / "full", "/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode),
    "fifo": lambda o, got: stat.S_ISFIFO(os.lstat(o / "fifo").st_mode) and got["reader"].data.count(b"\n") == 3,
    "fifo-bytes": lambda o, got: stat.S_ISFIFO(os.lstat(o / "fifo").st_mode) and len(got["reader"].data) > 1000,
    "device": lambda o, got: stat.S_ISCHR(os.lstat(o / "dev").st_mode),
    "link": lambda o, got: _is_link_to(o / "link", "target.txt") and _lines(o / "target.txt") == 3,
    "dangling": lambda o, got: _is_link_to(o / "dangling", "made.txt") and _lines(o / "made.txt") == 3,
    "syn-null": lambda o, got: _is_link_to(o / "syn" / "train.src", "/dev/null") and _lines(o / "syn" / "train.tgt")
    == 3,
    "syn": lambda o, got: (o / "syn" / "config.json").is_file(),
}


def tree(folder: Path) -> set:
    """Every entry below ``folder`` (symlinks not followed) with its kind."""
    out = set()
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            out.add((str(p.relative_to(folder)), stat.S_IFMT(os.lstat(p).st_mode)))
    return out


def digest(folder: Path) -> dict:
    return {p: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*") if p.is_file()}


def run(argv, capsys) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


# -- fixtures -------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def data(toy, tmp_path_factory):
    """The folder of inputs (never changed by a case)."""
    d = tmp_path_factory.mktemp("inputs")
    (d / "s.txt").write_text("a b c\nd e\nf g h\n")
    (d / "t.txt").write_text("x y z\nu v\nw p q\n")
    (d / "a.align").write_text("0-0 1-1 2-2\n0-0 1-1\n0-0 1-1 2-2\n")
    (d / "bad_utf8.toml").write_bytes(b"[synth]\nnouns = 5\n# \xff\xfe\n")
    (d / "bad_utf8.json").write_bytes(b'{"nouns": 5, "x": "\xff"}')
    (d / "heads.toml").write_text("[model]\nn_heads = [1, 2]\n")
    (d / "bom.toml").write_bytes("\ufeff[synth]\nnouns = 5\n".encode())
    return d


@pytest.fixture(scope="module")
def checkpoint(toy, tmp_path_factory):
    """A tiny trained model (its checkpoint) on the toy corpus."""
    return trained_checkpoint(toy, tmp_path_factory.mktemp("model"))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_hostile_case(case, tmp_path, capsys, monkeypatch, request, toy, data):
    """``xlpe ARGV`` in a hostile set-up: the exit status; on failure exactly one line naming what failed, and
    no traceback; the inputs unchanged; no temporary file; on failure nothing new in the output folder (no partial
    output, no new folder); the special files, links and FIFOs as they were."""
    if case.needs == "eflomal":
        pytest.importorskip("eflomal")
    o = tmp_path / "out"
    o.mkdir()
    ck = request.getfixturevalue("checkpoint") if case.needs == "model" else "-"
    got = prepare(case.env, o, monkeypatch, request)
    before, inputs = tree(o), digest(data)
    argv = case.line.format(d=data, o=o, spm=toy["spm"], ck=ck).split()
    code, _, err = run(argv, capsys)
    if "reader" in got:
        got["reader"].join(10)
    assert "Traceback" not in err, err
    assert code == case.code, f"exit {code}, expected {case.code}: {err}"
    if case.code:
        said = [line for line in err.splitlines() if line.startswith("xlpe ")]
        assert len(said) == 1, err
        assert re.search(case.pattern, said[0]), f"{case.pattern!r} not in {said[0]!r}"
        assert tree(o) == before, f"left behind: {tree(o) - before}"
    assert digest(data) == inputs, "an input was changed"
    assert not [p for p in tmp_path.rglob("*.tmp")], "a temporary file was left"
    if case.check:
        assert CHECKS[case.check](o, got), f"check {case.check} failed: {sorted(tree(o))}"


# -- standard streams, closed pipes and a real full disk (child processes) ------------------------------------------

def _env() -> dict:
    """The environment for a child ``python -m xlpe.cli`` that imports the xlpe this test imported."""
    import xlpe
    src = str(Path(xlpe.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src] + [p for p in [os.environ.get("PYTHONPATH")] if p])}


def _xlpe(args, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xlpe.cli", *map(str, args)], env=_env(), capture_output=True,
                          **kwargs)


def _close(fd: int):
    return lambda: os.close(fd)


STREAM_CASES = [
    # (name, args, child set-up, exit status, the one line on standard error)
    ("encode-stdout-full", ENC, "stdout-full", 1, r"^xlpe subword: <stdout>: " + ENOSPC + "$"),
    ("evaluate-print-stdout-full", "evaluate --ref {d}/t.txt --hyp {d}/t.txt", "stdout-full", 1,
     r"^xlpe evaluate: <stdout>: " + ENOSPC + "$"),
    ("encode-stdout-closed", ENC, "stdout-closed", 1,
     r"^xlpe subword: <stdout>: standard output is closed \(EBADF\)$"),
    ("encode-stdin-closed", "subword encode --model {spm}", "stdin-closed", 1,
     r"^xlpe subword: <stdin>: standard input is closed \(EBADF\)$"),
    ("encode-to-dev-stdout", ENC + " --output /dev/stdout", "", 0, r"^$"),
    ("error-with-stderr-closed", "subword encode --model {d}/nope.model --input {d}/s.txt", "stderr-closed", 1,
     r"^$"),
]


@pytest.mark.parametrize("case", STREAM_CASES, ids=[c[0] for c in STREAM_CASES])
def test_standard_streams(case, toy, data):
    name, line, setup, code, pattern = case
    args = line.format(d=data, spm=toy["spm"]).split()
    kwargs: dict = {"stdin": subprocess.DEVNULL}
    if setup == "stdout-full":
        with open("/dev/full", "wb") as full:
            r = subprocess.run([sys.executable, "-m", "xlpe.cli", *args], env=_env(), stdout=full,
                               stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
    else:
        if setup == "stdout-closed":
            kwargs["preexec_fn"] = _close(1)
        if setup == "stdin-closed":
            kwargs = {"preexec_fn": _close(0)}
        if setup == "stderr-closed":
            kwargs["preexec_fn"] = _close(2)
        r = _xlpe(args, **kwargs)
    err = r.stderr.decode()
    assert "Traceback" not in err, err
    assert r.returncode == code, err
    assert re.search(pattern, err.strip()), f"{pattern!r} not in {err!r}"
    if name == "encode-to-dev-stdout":
        assert r.stdout.decode().count("\n") == 3
    if setup == "stderr-closed":
        assert r.stdout == b"", "a message went to the standard output"


def test_a_closed_pipe_ends_quietly_with_141(toy, tmp_path):
    """``xlpe subword encode ... | head -c 1``: the reader goes away; xlpe stops at once, silently, with 141
    (128 + SIGPIPE, what a shell reports for a tool that SIGPIPE ended)."""
    s, _ = write_toy_corpus(tmp_path, 20000, seed=4)             # far more than a pipe buffer holds
    p = subprocess.Popen([sys.executable, "-m", "xlpe.cli", "subword", "encode", "--model", str(toy["spm"]),
                          "--input", str(s)], env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout.read(1)
    p.stdout.close()
    code = p.wait(60)
    err = p.stderr.read().decode()
    p.stderr.close()
    assert code == 141 and err == "", (code, err)


def test_a_full_disk_leaves_nothing_behind(toy, data, tmp_path):
    """A real full file system (a 32 KiB tmpfs in a private mount namespace): synth stops with one line naming
    the file it could not write, and leaves neither a temporary file nor its output folder."""
    unshare = shutil.which("unshare")
    if unshare is None or subprocess.run([unshare, "-m", "true"], capture_output=True).returncode:
        pytest.skip("no private mount namespace here (unshare -m), so no tmpfs can be mounted")
    disk = tmp_path / "disk"
    disk.mkdir()
    script = (f'mount -t tmpfs -o size=32k tmpfs "{disk}" || exit 99; "{sys.executable}" -m xlpe.cli synth '
              f'--out "{disk}/syn" --train 2000 --dev 5 --test 5; echo "exit=$?"; ls -A "{disk}"')
    r = subprocess.run([unshare, "-m", "sh", "-c", script], env=_env(), capture_output=True, text=True, timeout=120)
    if r.returncode == 99:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    assert "Traceback" not in r.stderr, r.stderr
    assert re.fullmatch(r"xlpe synth: \S+/syn/\w+\.\w+: " + ENOSPC, r.stderr.strip()), r.stderr
    assert r.stdout.split() == ["exit=1"], f"left on the full disk: {r.stdout}"


def test_the_one_line_form_of_an_os_error():
    """The path, the system's words and the errno's name; without a path, the words and the name."""
    from xlpe.cli import os_error_message
    try:
        os.stat(Path(tempfile.gettempdir()) / "no-such-dir-xlpe" / "x")
    except OSError as e:
        assert os_error_message(e).endswith(": No such file or directory (ENOENT)")
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    assert os_error_message(e) == "No space left on device (ENOSPC)"
