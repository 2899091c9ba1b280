"""Experiment stage cache: cached reruns, resumption under the same parameters, a clean start under new ones."""

import json

import pytest

from xlpe.experiments.cache import run_stage


def test_stage_cache_resumes_only_under_its_own_parameters(tmp_path):
    seen = []

    def fn(d):
        seen.append(sorted(p.name for p in d.iterdir() if p.name != "started.json"))
        (d / "ckpt").write_text("trained")
        return {"ok": 1}

    def crash(d):
        (d / "ckpt").write_text("half")
        raise KeyboardInterrupt

    assert run_stage(tmp_path, "a/seed1", {"x": 1}, fn)["ok"] == 1 and seen == [[]]
    assert run_stage(tmp_path, "a/seed1", {"x": 1}, fn)["ok"] == 1 and len(seen) == 1   # cached
    # new parameters: the finished directory is moved aside, the stage starts clean
    run_stage(tmp_path, "a/seed1", {"x": 2}, fn)
    assert seen[-1] == [] and len(list((tmp_path / "a").glob("seed1.stale-*"))) == 1
    # a half-done stage resumes (keeps its files) under the same parameters ...
    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, "b", {"x": 1}, crash)
    assert not (tmp_path / "b" / "done.json").exists()
    run_stage(tmp_path, "b", {"x": 1}, fn)
    assert seen[-1] == ["ckpt"]
    # ... and does not under other parameters
    with pytest.raises(KeyboardInterrupt):
        run_stage(tmp_path, "c", {"x": 1}, crash)
    run_stage(tmp_path, "c", {"x": 3}, fn)
    assert seen[-1] == []
    stale = list(tmp_path.glob("c.stale-*"))
    assert len(stale) == 1 and (stale[0] / "ckpt").read_text() == "half"
    assert json.loads((tmp_path / "c" / "done.json").read_text())["params"] == {"x": 3}


def test_file_sig_follows_content_not_path_or_mtime(tmp_path):
    import os
    import shutil

    from xlpe.experiments.cache import file_sig

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
    run_stage(tmp_path, "s", {"x": 1}, lambda d: {"n": 1})
    with caplog.at_level("WARNING", logger="xlpe.experiments"):
        assert run_stage(tmp_path, "s", {"x": 1}, lambda d: {"n": 2}, force=True)["n"] == 2
    assert "forced to run again" in caplog.text and len(list(tmp_path.glob("s.stale-*"))) == 1
