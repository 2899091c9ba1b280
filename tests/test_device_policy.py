"""The device policy (``xlpe.nn.device``): each device type's choices as a pure function, and the layers, the
runtime and the trainer reading them. The CUDA kernels themselves cannot run on this CPU-only machine: what is
tested is which path each device type takes, and the loss-scaling path of the trainer run on the CPU under a
policy that grants it fp16 there."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import xlpe.nn.attention as attention
import xlpe.runtime as runtime
from xlpe.errors import ConfigError
from xlpe.nn.device import (DevicePolicy, device_policy, onednn_bf16_linear_available, onednn_linear_available,
                             policy_for)

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)


def test_each_device_type_gets_its_choices():
    cpu, cuda, mps = policy_for("cpu"), policy_for("cuda"), policy_for("mps")
    assert cpu == DevicePolicy("cpu", explicit_low_precision_attention=True, fast_dropout_mask=True,
                               retain_freed_memory=True, limit_onednn_caches=True, chunked_topk=True,
                               packed_output_projection=onednn_linear_available(),
                               bf16_products=onednn_bf16_linear_available(), bucketed_rows=True,
                               lean_decoding_step=True, decoding_dtypes=("float32", "bfloat16", "int8"),
                               amp_modes=("bf16",), loss_scaling=())
    assert cuda == DevicePolicy("cuda", explicit_low_precision_attention=False, fast_dropout_mask=False,
                                retain_freed_memory=False, limit_onednn_caches=False, chunked_topk=False,
                                packed_output_projection=False, bf16_products=False, bucketed_rows=False,
                                lean_decoding_step=False, decoding_dtypes=("float32", "bfloat16", "float16"),
                                amp_modes=("bf16", "fp16"), loss_scaling=("fp16",))
    assert not any((mps.explicit_low_precision_attention, mps.fast_dropout_mask, mps.retain_freed_memory,
                    mps.limit_onednn_caches, mps.chunked_topk, mps.packed_output_projection, mps.bf16_products,
                    mps.bucketed_rows, mps.lean_decoding_step, mps.loss_scaling)) and mps.amp_modes == ("bf16",)
    assert mps.decoding_dtypes == ("float32", "bfloat16")
    assert cuda.grad_scaler("fp16") and not cuda.grad_scaler("bf16") and not cpu.grad_scaler("fp16")
    # by name or torch.device, any index: one cached policy per type
    assert device_policy("cuda:1") is device_policy(torch.device("cuda", 0)) == cuda
    assert device_policy("cpu") is device_policy(torch.device("cpu")) == cpu


def test_autocast_precisions_follow_the_policy():
    with pytest.raises(ConfigError, match="amp='fp16' needs a CUDA GPU; on CPU use amp='bf16'"):
        runtime.autocast_context("fp16", torch.device("cpu"))
    assert callable(runtime.autocast_context("fp16", torch.device("cuda")))     # built, not entered: no GPU here
    assert callable(runtime.autocast_context("bf16", torch.device("cuda")))


def test_decoding_reads_the_policy(monkeypatch):
    """Decoding weight types and beam search's top-k follow the device's policy: int8 on CPU only, float16 on CUDA
    only; top-k through chunk maxima where the policy says, ``topk`` itself elsewhere (same values either way)."""
    import xlpe.infer.beam as beam
    from xlpe.infer.translate import check_dtype
    with pytest.raises(ConfigError, match="float16 needs a GPU"):
        check_dtype("float16", torch.device("cpu"))
    with pytest.raises(ConfigError, match="int8 .* runs on CPU only"):
        check_dtype("int8", torch.device("cuda"))
    with pytest.raises(ConfigError, match="int8 .* runs on CPU only"):
        check_dtype("int8", torch.device("mps"))
    check_dtype("int8", torch.device("cpu"))
    check_dtype("float16", torch.device("cuda"))
    x = torch.randn(3, 4096)
    calls = []
    topk = torch.Tensor.topk
    monkeypatch.setattr(torch.Tensor, "topk", lambda t, *a, **k: calls.append(t.shape[-1]) or topk(t, *a, **k))
    chunked = beam.chunked_topk(x, 5, 64)
    assert 4096 not in calls                          # only over chunk maxima and candidates
    calls.clear()
    monkeypatch.setattr(beam, "device_policy", lambda device: policy_for("cuda"))
    plain = beam.chunked_topk(x, 5, 64)
    assert calls == [4096] and torch.equal(plain[0], chunked[0]) and torch.equal(plain[1], chunked[1])


def test_dropout_and_attention_kernels_read_the_policy(monkeypatch):
    """Under the CPU policy, dropout draws its mask from splitmix64 and bf16 attention is the explicit product;
    under CUDA's (applied here to CPU tensors), ``F.dropout`` and SDPA: the very same results as calling them."""
    torch.manual_seed(0)
    x = torch.randn(4, 64)
    torch.manual_seed(1)
    ours = attention.dropout(x, 0.3, True)
    torch.manual_seed(1)
    assert not torch.equal(ours, F.dropout(x, 0.3, True))
    mha = attention.MultiheadAttention(16, 2).to(torch.bfloat16).eval()
    h = torch.randn(2, 5, 16, dtype=torch.bfloat16)
    calls = []
    sdpa = F.scaled_dot_product_attention
    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or sdpa(*a, **k))
    explicit, _ = mha(h)
    assert calls == []
    monkeypatch.setattr(attention, "device_policy", lambda device: policy_for("cuda"))
    torch.manual_seed(1)
    theirs = attention.dropout(x, 0.3, True)
    torch.manual_seed(1)
    assert torch.equal(theirs, F.dropout(x, 0.3, True))
    fused, _ = mha(h)
    assert calls == [1] and (fused.float() - explicit.float()).abs().max() < 0.05


def test_training_sets_up_the_host_only_where_the_policy_says(toy, tmp_path, monkeypatch):
    """The allocator and oneDNN settings are CPU choices: a device type whose policy declines them skips them."""
    import xlpe.train.trainer as trainer
    from xlpe.train import DataConfig, train
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]))
    calls = []
    monkeypatch.setattr(trainer, "retain_freed_memory", lambda: calls.append("retain") or True)
    monkeypatch.setattr(trainer, "limit_onednn_caches", lambda: calls.append("limit") or True)
    train(tiny_model_config(), quick_train_config(tmp_path / "cpu", max_updates=1), data)
    assert calls == ["retain", "limit"]
    declined = dataclasses.replace(policy_for("cpu"), retain_freed_memory=False, limit_onednn_caches=False)
    monkeypatch.setattr(trainer, "device_policy", lambda device: declined)
    train(tiny_model_config(), quick_train_config(tmp_path / "declined", max_updates=1), data)
    assert calls == ["retain", "limit"]


def test_fp16_training_with_the_grad_scaler_under_a_policy_that_allows_it(toy, tmp_path, monkeypatch):
    """The trainer's fp16 path (autocast fp16, ``torch.amp.GradScaler`` scaling, unscaling before clipping, its
    state in the checkpoint) as CUDA's policy takes it, run on the CPU by granting the CPU fp16 and loss scaling
    (torch has CPU kernels for both). Not a test of CUDA's kernels."""
    import xlpe.train.trainer as trainer
    from xlpe.nn.checkpoint import load_checkpoint
    from xlpe.train import DataConfig, train
    grant = dataclasses.replace(policy_for("cpu"), amp_modes=("bf16", "fp16"), loss_scaling=("fp16",))
    monkeypatch.setattr(runtime, "device_policy", lambda device: grant)
    monkeypatch.setattr(trainer, "device_policy", lambda device: grant)
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]))
    res = train(tiny_model_config(dropout=0.0),
                quick_train_config(tmp_path / "fp16", max_updates=6, amp="fp16", save_every=6), data)
    assert all(torch.isfinite(p).all() for p in res.model.parameters())
    scaler = load_checkpoint(res.last_checkpoint)["scaler"]
    assert scaler is not None and scaler["scale"] > 0
