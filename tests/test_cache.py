"""Experiment stage cache: cached reruns, resumption under the same parameters, a clean start under new ones."""

import dataclasses
import json

import pytest

from xlpe.experiments.engine.cache import run_stage
from xlpe.keys import Inputs


@dataclasses.dataclass(frozen=True)
class X(Inputs):
    x: int



def test_stage_cache_resumes_only_under_its_own_parameters(tmp_path):
    seen = []

    def fn(d):
        seen.append(sorted(p.name for p in d.iterdir() if p.name != "started.json"))
        (d / "ckpt").write_text("trained")
        return {"ok": 1}

    def crash(d):
        (d / "ckpt").write_text("half")
        raise KeyboardInterrupt

    assert run_stage(tmp_path, "a/seed1", X(1), fn)["ok"] == 1 and seen == [[]]
    assert run_stage(tmp_path, "a/seed1", X(1), fn)["ok"] == 1 and len(seen) == 1   # cached
    # new parameters: the finished directory is moved aside, the stage starts clean
    run_stage(tmp_path, "a/seed1", X(2), fn)
    assert seen[-1] == [] and len(list((tmp_path / "a").glob("seed1.stale-*"))) == 1
    # a half-done stage resumes (keeps its files) under the same parameters ...
    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, "b", X(1), crash)
    assert not (tmp_path / "b" / "done.json").exists()
    run_stage(tmp_path, "b", X(1), fn)
    assert seen[-1] == ["ckpt"]
    # ... and does not under other parameters
    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, "c", X(1), crash)
    run_stage(tmp_path, "c", X(3), fn)
    assert seen[-1] == []
    stale = list(tmp_path.glob("c.stale-*"))
    assert len(stale) == 1 and (stale[0] / "ckpt").read_text() == "half"
    assert json.loads((tmp_path / "c" / "done.json").read_text())["params"] == {"x": 3}


def test_file_sig_follows_content_not_path_or_mtime(tmp_path):
    import os
    import shutil

    from xlpe.experiments.engine.cache import file_sig

    a = tmp_path / "x" / "train.en"
    a.parent.mkdir()
    a.write_text("ein Haus\n")
    b = tmp_path / "y" / "train.en"
    b.parent.mkdir()
    shutil.copy(a, b)
    os.utime(b, (1, 1))                                  # a copy on another machine: new path, new mtime
    assert file_sig(a) == file_sig(b)
    b.write_text("ein Baum\n")                           # same size, other content
    assert file_sig(a) != file_sig(b) and file_sig(a)[0][1] == file_sig(b)[0][1]


def test_forced_rerun_moves_the_same_key_aside_and_says_so(tmp_path, caplog):
    run_stage(tmp_path, "s", X(1), lambda d: {"n": 1})
    with caplog.at_level("WARNING", logger="xlpe.experiments"):
        assert run_stage(tmp_path, "s", X(1), lambda d: {"n": 2}, force=True)["n"] == 2
    assert "forced to run again" in caplog.text and len(list(tmp_path.glob("s.stale-*"))) == 1


SLEEPER = """
import dataclasses, functools, sys, time
from pathlib import Path
from xlpe.experiments.engine.cache import run_stages
from xlpe.keys import Inputs

@dataclasses.dataclass(frozen=True)
class K(Inputs):
    k: int

def work(d, tag):
    (d / "pid").write_text(str(__import__("os").getpid()))
    time.sleep(60)
    return {}

if __name__ == "__main__":
    out = Path(sys.argv[1])
    run_stages([(out, f"s{k}", K(k), functools.partial(work, tag=k)) for k in range(2)], jobs=2)
"""


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_workers_die_with_a_killed_recipe(tmp_path):
    """A recipe killed with SIGKILL takes its parallel runs with it (they would otherwise keep training and
    writing into the output folder)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    parent = subprocess.Popen([sys.executable, str(script), str(tmp_path / "out")])
    pids = []
    deadline = time.time() + 60
    while time.time() < deadline and len(pids) < 2:
        pids = [int(p.read_text()) for p in (tmp_path / "out").glob("s*/pid") if p.read_text()]
        time.sleep(0.2)
    assert len(pids) == 2, "the workers did not start"
    parent.send_signal(signal.SIGKILL)
    parent.wait()

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as f:          # a zombie is dead, waiting to be reaped
            return f.read().split(")")[-1].split()[0] != "Z"
    deadline = time.time() + 10
    while time.time() < deadline and any(alive(p) for p in pids):
        time.sleep(0.2)
    assert not any(alive(p) for p in pids)


def test_a_second_caller_waits_for_the_running_stage_and_takes_its_result(tmp_path, caplog):
    """Two invocations on one folder (e.g. a second process filling an idle core) never run one stage twice at
    once. Threads stand in for processes: flock locks of two separate opens of one file conflict within a
    process too."""
    import threading
    import time

    from xlpe.experiments.engine.cache import stage_running
    from xlpe.experiments.engine.status import folder_status

    inside, release, calls = threading.Event(), threading.Event(), []

    def slow(d):
        calls.append("first")
        inside.set()
        assert release.wait(30)
        return {"bleu": 7.2}

    def second(d):
        calls.append("second")
        return {"bleu": -1}

    results = {}
    t1 = threading.Thread(target=lambda: results.__setitem__(1, run_stage(tmp_path, "abs/seed3", X(1), slow)))
    t1.start()
    assert inside.wait(30)
    assert stage_running(tmp_path / "abs" / "seed3")
    st = folder_status(tmp_path)["stages"]
    assert [(s["name"], s["state"], s.get("running")) for s in st] == [("abs/seed3", "unfinished", True)]
    with caplog.at_level("INFO", logger="xlpe.experiments"):
        t2 = threading.Thread(target=lambda: results.__setitem__(2, run_stage(tmp_path, "abs/seed3", X(1), second)))
        t2.start()
        deadline = time.monotonic() + 30
        while "running in another process; waiting" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        assert t2.is_alive() and calls == ["first"]          # waiting, not training the same run
        release.set()
        t1.join(30)
        t2.join(30)
    assert calls == ["first"] and results[1]["bleu"] == results[2]["bleu"] == 7.2
    assert "running in another process; waiting" in caplog.text
    assert not stage_running(tmp_path / "abs" / "seed3")
    assert folder_status(tmp_path)["stages"][0]["state"] == "done"


def test_a_file_system_without_locks_runs_the_stage_and_says_so(tmp_path, monkeypatch, caplog):
    import errno
    import fcntl

    def no_locks(*a):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    with caplog.at_level("WARNING", logger="xlpe.experiments"):
        assert run_stage(tmp_path, "s", X(1), lambda d: {"ok": 1})["ok"] == 1
    assert "cannot lock" in caplog.text and "one invocation per folder" in caplog.text
