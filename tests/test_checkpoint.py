"""Checkpoints: round trip, averaging, damaged files, directory housekeeping, models from checkpoints."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from _nmt_toy import tiny_model_config, toy  # noqa: F401  (toy is a fixture)
from xlpe.data.subword import SubwordModel
from xlpe.errors import XlpeError
from xlpe.nn.transformer import build_model
from xlpe.nn.checkpoint import (average_checkpoints, checkpoint_path, latest_checkpoint, list_checkpoints,
                                load_checkpoint, load_model, prune_checkpoints, save_checkpoint, subword_entry)
from xlpe.runtime import get_rng_state, set_rng_state


def _model_state(seed=0, spm=None):
    torch.manual_seed(seed)
    cfg = tiny_model_config(src_vocab_size=50)
    m = build_model(cfg)
    state = {"model": m.state_dict(), "model_config": cfg.to_dict(), "step": seed}
    if spm is not None:
        state["subwords"] = {"src": subword_entry(SubwordModel.load(spm)), "tgt": None}
    return m, state


class _SigtermWhilePickled:
    """Sends this process SIGTERM while ``torch.save`` pickles it, then pickles as the int 5."""

    def __reduce__(self):
        import os
        import signal
        os.kill(os.getpid(), signal.SIGTERM)
        return int, (5,)


def test_a_sigterm_during_a_checkpoint_write_lands_once_the_file_is_whole(tmp_path):
    """A SIGTERM in the middle of a periodic checkpoint write made torch's zip writer fail (a RuntimeError with a
    traceback, or a C++ abort) instead of stopping the run: the write now completes, then the stop is raised."""
    from xlpe.io.process import Terminated, sigterm_as_interrupt
    m, state = _model_state()
    with pytest.raises(Terminated), sigterm_as_interrupt():
        save_checkpoint(tmp_path / "c.pt", {**state, "marker": _SigtermWhilePickled()})
    ck = torch.load(tmp_path / "c.pt", weights_only=False)                 # (the int 5 is a pickled global)
    assert ck["marker"] == 5 and torch.equal(ck["model"]["encoder.embed.weight"], m.encoder.embed.weight)
    assert [p.name for p in tmp_path.iterdir()] == ["c.pt"]              # no temporary file left


def test_roundtrip_and_rng(tmp_path):
    m, state = _model_state()
    random.seed(1), np.random.seed(2), torch.manual_seed(3)
    state["rng"] = [get_rng_state()]
    expect = (random.random(), np.random.rand(), torch.rand(1).item())
    save_checkpoint(tmp_path / "c.pt", state)
    ck = load_checkpoint(tmp_path / "c.pt")
    assert ck["format"] == "xlpe-checkpoint" and ck["version"] == 1 and ck["step"] == 0
    for k, v in m.state_dict().items():
        assert torch.equal(ck["model"][k], v)
    set_rng_state(ck["rng"][0])
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expect
    # plain torch can read it too
    assert torch.load(tmp_path / "c.pt", weights_only=True)["step"] == 0


def test_average_identity_and_mean(tmp_path):
    _, s0 = _model_state(0)
    _, s1 = _model_state(1)
    for name, s in (("a", s0), ("b", s0), ("c", s0), ("d", s1)):
        save_checkpoint(tmp_path / f"{name}.pt", s)
    avg = average_checkpoints([tmp_path / "a.pt", tmp_path / "b.pt", tmp_path / "c.pt"])
    for k, v in s0["model"].items():
        assert torch.equal(avg[k], v), k                      # averaging copies is exactly the identity
    mean = average_checkpoints([tmp_path / "a.pt", tmp_path / "d.pt"])
    for k, v in s0["model"].items():
        if v.is_floating_point():
            assert torch.allclose(mean[k], (v.double() + s1["model"][k].double()).div(2).float()), k
    other = dict(s0, model={k: v for k, v in list(s0["model"].items())[:-1]})
    save_checkpoint(tmp_path / "e.pt", other)
    with pytest.raises(XlpeError, match="different parameters"):
        average_checkpoints([tmp_path / "a.pt", tmp_path / "e.pt"])


def test_damaged_files_give_clear_errors(tmp_path):
    _, state = _model_state()
    good = tmp_path / "good.pt"
    save_checkpoint(good, state)
    data = good.read_bytes()
    (tmp_path / "trunc.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "trunc_end.pt").write_bytes(data[:-30])
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF                       # inside tensor storage: only a checksum sees it
    (tmp_path / "flip.pt").write_bytes(bytes(flipped))
    (tmp_path / "text.pt").write_text("hello\n")
    (tmp_path / "empty.pt").write_bytes(b"")
    for name in ("trunc.pt", "trunc_end.pt", "flip.pt", "text.pt", "empty.pt"):
        with pytest.raises(XlpeError, match=name.replace(".", r"\.")):
            load_checkpoint(tmp_path / name)
    torch.save({"weights": torch.zeros(2)}, tmp_path / "foreign.pt")
    with pytest.raises(XlpeError, match="not an xlpe checkpoint"):
        load_checkpoint(tmp_path / "foreign.pt")
    save_checkpoint(tmp_path / "future.pt", {**state, "version": 99})
    with pytest.raises(XlpeError, match="version 99"):
        load_checkpoint(tmp_path / "future.pt")
    with pytest.raises(XlpeError, match="not found"):
        load_checkpoint(tmp_path / "missing.pt")


def test_directory_housekeeping(tmp_path):
    _, state = _model_state()
    for step in (5, 10, 15, 20):
        save_checkpoint(checkpoint_path(tmp_path, step), state)
    save_checkpoint(tmp_path / "checkpoint_best.pt", state)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [5, 10, 15, 20]
    prune_checkpoints(tmp_path, 2)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [15, 20]
    assert (tmp_path / "checkpoint_best.pt").exists()
    # a damaged newest checkpoint is passed over when resuming
    p20 = checkpoint_path(tmp_path, 20)
    p20.write_bytes(p20.read_bytes()[:100])
    assert latest_checkpoint(tmp_path) == checkpoint_path(tmp_path, 15)


def test_load_model(tmp_path, toy):
    m, state = _model_state(spm=toy["spm"])
    cfg = tiny_model_config(src_vocab_size=50)
    save_checkpoint(tmp_path / "m.pt", state)
    model, cfg2, (src_sw, tgt_sw) = load_model(tmp_path / "m.pt")
    assert cfg2 == cfg and not model.training and src_sw is tgt_sw
    assert src_sw.encode("w1 w2").ids == SubwordModel.load(toy["spm"]).encode("w1 w2").ids
    for k, v in m.state_dict().items():
        assert torch.equal(model.state_dict()[k], v)
    model2, _, _ = load_model([tmp_path / "m.pt", tmp_path / "m.pt"])       # averaged
    for k, v in m.state_dict().items():
        assert torch.equal(model2.state_dict()[k], v)


def test_average_command_writes_a_translatable_model_only_checkpoint(tmp_path, toy):
    from xlpe.cli import main
    from xlpe.nn.checkpoint import last_checkpoints
    states = [_model_state(seed, spm=toy["spm"])[1] for seed in (0, 1, 2)]
    for step, s in zip((10, 20, 30), states):
        save_checkpoint(checkpoint_path(tmp_path, step), {**s, "step": step, "optimizer": {"junk": 1}})
    assert last_checkpoints(tmp_path, 2) == [checkpoint_path(tmp_path, 20), checkpoint_path(tmp_path, 30)]
    with pytest.raises(XlpeError, match="3 step checkpoints .* 4 asked for"):
        last_checkpoints(tmp_path, 4)
    out = tmp_path / "avg" / "avg.pt"
    assert main(["average", "--dir", str(tmp_path), "--last", "2", "--output", str(out)]) == 0
    ck = load_checkpoint(out)
    assert ck["averaged_steps"] == [20, 30] and ck["step"] == 30
    assert "optimizer" not in ck and ck["train_config"] is None
    w = {k: (states[1]["model"][k].double() + states[2]["model"][k].double()).div(2).float()
         for k, v in states[1]["model"].items() if v.is_floating_point()}
    model, _, (sw, _) = load_model(out)                      # subwords travel with the averaged file
    for k, v in w.items():
        assert torch.allclose(model.state_dict()[k], v), k
    assert sw.encode("w1 w2").ids == SubwordModel.load(toy["spm"]).encode("w1 w2").ids
    # explicit list: averaging one file is that file's model
    assert main(["average", "--checkpoints", str(checkpoint_path(tmp_path, 10)), "--output", str(out)]) == 0
    for k, v in states[0]["model"].items():
        assert torch.equal(load_checkpoint(out)["model"][k], v), k
    assert main(["average", "--dir", str(tmp_path / "nothing"), "--output", str(out)]) == 1
