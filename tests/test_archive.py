"""`xlpe experiment archive` / `restore` on a hand-made recipe folder: what goes in (results, logs, translations; not
checkpoints, data caches, unfinished or stale stages, stages holding the corpus's text), links, an unchanged stage not
written again, restore keeping what the folder has, recorded checkpoint signatures, and clear errors. The whole
round trip through a real recipe is in tests/test_structural_experiment.py."""

import json

import pytest
import torch

from xlpe.cli import main
from xlpe.errors import ConfigError
from xlpe.experiments.engine.archive import archive_folder, checkpoint_signature, restore_folder
from xlpe.experiments.engine.cache import file_sig


def _stage(d, key="k1", done=True):
    d.mkdir(parents=True, exist_ok=True)
    (d / "started.json").write_text(json.dumps({"key": key, "params": {}}))
    if done:
        (d / "done.json").write_text(json.dumps({"key": key, "params": {}, "result": {"bleu": 1.0}}))


@pytest.fixture
def folder(tmp_path):
    out = tmp_path / "out"
    run = out / "runs" / "base" / "seed1"
    _stage(run)
    (run / "test.hyp").write_text("ein hund\n")
    (run / "train").mkdir()
    (run / "train" / "train_log.csv").write_text("step,loss\n2,1.0\n")
    from xlpe.nn.checkpoint import save_checkpoint
    from xlpe.nn.config import TransformerConfig
    save_checkpoint(run / "train" / "checkpoint_2.pt", {"model": {"w": torch.zeros(2)}, "step": 2,
                    "model_config": TransformerConfig.from_preset("tiny", src_vocab_size=20).to_dict()})
    (run / "train" / "cache").mkdir()
    (run / "train" / "cache" / "train.src-0.npz").write_bytes(b"corpus ids")
    _stage(out / "runs" / "half" / "seed1", done=False)                      # unfinished
    _stage(out / "align.stale-0123")                                         # moved aside
    _stage(out / "data")
    (out / "data" / "train.src").write_text("a dog\n")                       # the corpus's text
    (out / "runs" / "dpe").mkdir()
    (out / "runs" / "dpe" / "seed1").symlink_to("../base/seed1", target_is_directory=True)
    return out


def test_archive_and_restore(folder, tmp_path):
    ck = folder / "runs" / "base" / "seed1" / "train" / "checkpoint_2.pt"
    sig = file_sig(ck)
    arch = tmp_path / "arch"
    r = archive_folder(folder, arch)
    assert r["written"] == ["runs/base/seed1"] and r["unfinished"] == ["runs/half/seed1"]
    assert list(r["left_out"]) == ["data"] and "train.src" in r["left_out"]["data"]
    m = json.loads((arch / "manifest.json").read_text())
    assert set(m["stages"]) == {"runs/base/seed1"} and m["links"] == {"runs/dpe/seed1": "../base/seed1"}
    assert m["stages"]["runs/base/seed1"]["checkpoints_left_out"] == 1
    # nothing new: nothing written again
    assert archive_folder(folder, arch)["unchanged"] == ["runs/base/seed1"]

    moved = tmp_path / "moved"
    _stage(moved / "runs" / "half" / "seed1")                    # the new folder has this one: kept
    r = restore_folder(arch, moved)
    assert r == {"restored": ["runs/base/seed1"], "kept": [], "links": ["runs/dpe/seed1"]}
    run = moved / "runs" / "base" / "seed1"
    assert (run / "test.hyp").read_text() == "ein hund\n" and (run / "train" / "train_log.csv").is_file()
    assert not list(moved.rglob("*.pt")) and not (run / "train" / "cache").exists()
    assert (moved / "runs" / "dpe" / "seed1" / "test.hyp").is_file()                          # the link
    # the checkpoint's signature, recorded: the stages that read the model find their cached results
    linked = moved / "runs" / "dpe" / "seed1" / "train"
    assert checkpoint_signature(run / "train") == sig == checkpoint_signature(linked)
    assert checkpoint_signature(ck.parent) == sig                                                # the live file
    assert checkpoint_signature(moved / "runs" / "half" / "seed1" / "train") is None
    assert restore_folder(arch, moved)["kept"] == ["runs/base/seed1"]                           # never overwritten
    from xlpe.experiments.engine.status import folder_status, render_status
    st = {e["name"]: e for e in folder_status(moved)["stages"]}
    assert st["runs/base/seed1"]["restored"] and "restored" not in st["runs/half/seed1"]
    assert "| runs/base/seed1 | done (restored, no checkpoint) |" in render_status(folder_status(moved))


def test_restored_run_is_not_adopted_by_another_recipe(folder, tmp_path):
    """`reuse_runs` adopts checkpoints: a restored run has none, so it must not count as reusable."""
    from xlpe.experiments.engine.reuse import _finished
    arch, moved = tmp_path / "arch", tmp_path / "moved"
    archive_folder(folder, arch)
    restore_folder(arch, moved)
    train = moved / "runs" / "base" / "seed1" / "train"
    assert _finished(train.parent, {"max_updates": 2})
    assert not any(train.glob("*.pt"))        # find_reusable's condition, see reuse.py


def test_cli_and_errors(folder, tmp_path, capsys):
    arch = tmp_path / "arch"
    assert main(["experiment", "archive", str(folder), "--to", str(arch)]) == 0
    out = capsys.readouterr().out
    assert "1 stages written, 0 unchanged, 1 unfinished" in out and "left out data" in out
    assert main(["experiment", "restore", str(arch), "--into", str(tmp_path / "new")]) == 0
    assert "1 stages restored, 1 links, 0 kept" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="must not be inside"):
        archive_folder(folder, folder / "arch")
    with pytest.raises(ConfigError, match="no such folder"):
        archive_folder(tmp_path / "nothing", arch)
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "manifest.json").write_text("{")
    with pytest.raises(ConfigError, match="not an archive manifest"):
        restore_folder(tmp_path / "bad", tmp_path / "x")
    (arch / "runs" / "base" / "seed1.tar.xz").write_bytes(b"not xz")
    with pytest.raises(ConfigError, match="not a readable stage archive"):
        restore_folder(arch, tmp_path / "y")
    assert not (tmp_path / "y" / "runs" / "base" / "seed1").exists()           # nothing half-restored
    (arch / "runs" / "base" / "seed1.tar.xz").unlink()
    with pytest.raises(ConfigError, match="missing"):
        restore_folder(arch, tmp_path / "z")


def test_file_size_limit(folder, tmp_path):
    (folder / "runs" / "base" / "seed1" / "test.hyp").write_text("x" * 2000)
    r = archive_folder(folder, tmp_path / "arch", max_file_mb=0.001)
    assert "runs/base/seed1" in r["left_out"] and "above 0.001 MB" in r["left_out"]["runs/base/seed1"]


def test_paths_in_results_follow_the_folder(tmp_path, monkeypatch):
    """A stage result naming files of the folder (absolute, relative to where the recipe ran, or as a channel spec)
    names them in the restored folder; other strings stay as they were."""
    out = tmp_path / "work" / "runs" / "x"
    _stage(out / "align")
    (out / "align" / "train.align").write_text("0-0\n")
    result = {"paths": {"abs": str(out / "align" / "train.align"), "rel": "runs/x/align/train.align",
                        "spec": f"orders:{out / 'align' / 'train.align'}"}, "other": "runs/y/z", "n": 3}
    (out / "align" / "done.json").write_text(json.dumps({"key": "k1", "params": {}, "result": result}))
    monkeypatch.chdir(tmp_path)                      # archived from elsewhere than where the recipe ran
    archive_folder(out, tmp_path / "arch")
    restore_folder(tmp_path / "arch", tmp_path / "new")
    got = json.loads((tmp_path / "new" / "align" / "done.json").read_text())["result"]
    here = str((tmp_path / "new" / "align" / "train.align").resolve())
    assert got["paths"] == {"abs": here, "rel": here, "spec": f"orders:{here}"}
    assert got["other"] == "runs/y/z" and got["n"] == 3
