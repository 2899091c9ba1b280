"""DistributedDataParallel on CPU: two gloo processes train a few updates and keep identical parameters."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
import torch

from _nmt_toy import toy  # noqa: F401  (fixture)

HERE = str(Path(__file__).resolve().parent)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, paths: dict, out: str, max_updates: int, amp: str) -> None:
    sys.path.insert(0, HERE)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from _nmt_toy import quick_train_config, tiny_model_config
    from xlpe.train import DataConfig, train

    data = DataConfig(train_src=paths["src"], train_tgt=paths["tgt"], subword_model=paths["spm"],
                      dev_src=paths["dev_src"], dev_tgt=paths["dev_tgt"])
    cfg = quick_train_config(out, max_updates=max_updates, update_freq=2, validate_every=2, save_every=2, amp=amp)
    res = train(tiny_model_config(), cfg, data)
    torch.save({k: v.clone() for k, v in res.model.state_dict().items()}, os.path.join(out, f"params_rank{rank}.pt"))


@pytest.mark.parametrize("amp", ["none", "bf16-pure"])
def test_ddp_two_cpu_processes(toy, tmp_path, amp):
    """bf16-pure: the bf16 gradients are all-reduced, the float32 masters stay identical on both ranks."""
    import torch.multiprocessing as mp

    paths = {k: str(v) for k, v in toy.items()}
    out = str(tmp_path / "ddp")
    mp.spawn(_worker, args=(2, _free_port(), paths, out, 4, amp), nprocs=2, join=True)
    p0 = torch.load(os.path.join(out, "params_rank0.pt"))
    p1 = torch.load(os.path.join(out, "params_rank1.pt"))
    for k in p0:
        assert torch.equal(p0[k], p1[k]), k                       # ranks stay in lockstep
    from xlpe.nn.checkpoint import load_checkpoint
    ck = load_checkpoint(Path(out) / "checkpoint_4.pt")
    assert ck["step"] == 4 and len(ck["rng"]) == 2 and ck["sampler"]["num_replicas"] == 2
    for k in p0:
        assert torch.equal(ck["model"][k], p0[k])
    assert (Path(out) / "valid_log.csv").exists() and not (Path(out) / "params_rank2.pt").exists()
    # the parameters moved from their initialisation
    from _nmt_toy import tiny_model_config
    from xlpe.nn.transformer import build_model
    torch.manual_seed(3)
    init = build_model(tiny_model_config(src_vocab_size=ck["model_config"]["src_vocab_size"])).state_dict()
    assert any(not torch.equal(init[k], p0[k]) for k in p0)


def _locked_out_worker(rank: int, world: int, port: int, paths: dict, out: str, notes: str) -> None:
    sys.path.insert(0, HERE)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(1)
    from _nmt_toy import quick_train_config, tiny_model_config
    from xlpe.errors import ConfigError
    from xlpe.train import DataConfig, train

    data = DataConfig(train_src=paths["src"], train_tgt=paths["tgt"], subword_model=paths["spm"])
    try:
        train(tiny_model_config(), quick_train_config(out, max_updates=2), data)
        message = "trained"
    except ConfigError as e:
        message = str(e)
    Path(notes, f"rank{rank}").write_text(message)


def test_ddp_into_a_folder_another_run_holds_stops_every_rank(toy, tmp_path):
    """Only rank 0 takes the run folder's lock; when it cannot, every rank stops with its message (none waits
    for rank 0 in a collective)."""
    import torch.multiprocessing as mp
    from xlpe.io.process import FolderLock
    from xlpe.train.trainer import RUN_LOCK

    out, notes = tmp_path / "ddp", tmp_path / "notes"
    out.mkdir()
    notes.mkdir()
    lock = FolderLock(out, RUN_LOCK, "training run")
    try:
        paths = {k: str(v) for k, v in toy.items()}
        mp.spawn(_locked_out_worker, args=(2, _free_port(), paths, str(out), str(notes)), nprocs=2, join=True)
    finally:
        lock.release()
    for rank in (0, 1):
        assert f"process {os.getpid()} on this host" in (notes / f"rank{rank}").read_text()
    assert sorted(p.name for p in out.iterdir()) == [RUN_LOCK]             # nothing written
