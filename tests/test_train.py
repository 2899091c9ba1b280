"""Training: label smoothing, aux losses, schedules, the loop (exact kill-and-resume), configuration."""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import sys

import pytest
import torch
import torch.nn.functional as F

from _nmt_toy import quick_train_config, tiny_model_config, toy  # noqa: F401  (toy is a fixture)
from xlpe.errors import ConfigError
from xlpe.nn.checkpoint import load_checkpoint
from xlpe.nn.positions import PositionEncoding
from xlpe.runtime import host
from xlpe.train.losses import combine_losses, label_smoothed_nll, projected_label_smoothed_nll
from xlpe.train.schedule import Schedule, build_scheduler
from xlpe.cli.train import add_cli_arguments, configs_from_args
from xlpe.train import DataConfig, TrainConfig, train


# -- losses ------------------------------------------------------------------------------------------------

def test_label_smoothing_hand_example():
    # p = [0.5, 0.25, 0.25], gold 0: nll = ln 2, mean_v(-log p_v) = (ln2 + ln4 + ln4)/3 = 5/3 ln 2
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    loss, nll = label_smoothed_nll(logits, torch.tensor([[0]]), 0.1, ignore_index=-100)
    assert nll.item() == pytest.approx(math.log(2))
    assert loss.item() == pytest.approx((0.9 + 0.1 * 5 / 3) * math.log(2))
    loss0, nll0 = label_smoothed_nll(logits, torch.tensor([[0]]), 0.0, ignore_index=-100)
    assert loss0.item() == pytest.approx(math.log(2)) and nll0.item() == pytest.approx(math.log(2))


def test_label_smoothing_matches_torch_and_ignores_pad():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 11)
    target = torch.randint(1, 11, (3, 5))
    target[0, 3:] = 0
    target[2, 1:] = 0
    loss, nll = label_smoothed_nll(logits, target, 0.1, ignore_index=0)
    ref = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=0, label_smoothing=0.1)
    ref_nll = F.cross_entropy(logits.reshape(-1, 11), target.reshape(-1), ignore_index=0)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-5) and nll.item() == pytest.approx(ref_nll.item(), rel=1e-5)
    s, _ = label_smoothed_nll(logits, target, 0.1, ignore_index=0, reduction="sum")
    assert s.item() == pytest.approx(loss.item() * int((target != 0).sum()), rel=1e-5)


def _reference_smoothed(logits, target, eps, pad):
    lp = F.log_softmax(logits.float(), -1)
    mask = target != pad
    nll = -lp.gather(-1, target.masked_fill(~mask, 0)[..., None]).squeeze(-1)
    loss = (1 - eps) * nll + eps * (-lp.mean(-1))
    return loss.masked_fill(~mask, 0).sum(), nll.masked_fill(~mask, 0).sum()


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothing_gradient_matches_autograd(eps):
    """The hand-written backward equals autograd through log_softmax, for the loss, the NLL and any mix of
    the two, with padding; a second backward through the same graph is refused, not silently wrong."""
    torch.manual_seed(1)
    target = torch.randint(1, 13, (4, 6))
    target[1, 4:] = 0
    target[3, 1:] = 0
    for (w_loss, w_nll), overwrite in itertools.product(((1.0, 0.0), (0.0, 1.0), (0.7, -0.3)), (False, True)):
        x1 = torch.randn(4, 6, 13, requires_grad=True)
        x2 = x1.detach().clone().requires_grad_(True)
        logits = x1 * 1.0                                           # a non-leaf, as the model's output
        loss, nll = label_smoothed_nll(logits, target, eps, ignore_index=0, reduction="sum",
                                       overwrite_logits=overwrite)
        assert torch.equal(logits, x2.detach()) != overwrite        # overwritten only when allowed
        (w_loss * loss + w_nll * nll).backward()
        rl, rn = _reference_smoothed(x2, target, eps, 0)
        (w_loss * rl + w_nll * rn).backward()
        assert loss.item() == pytest.approx(rl.item(), rel=1e-5) and nll.item() == pytest.approx(rn.item(), rel=1e-5)
        torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
        assert not x1.grad[3, 1:].any()                              # pad rows get no gradient
    # bf16 logits (autocast): the gradient comes back in bf16, close to the float32 one
    xb = torch.randn(4, 6, 13).to(torch.bfloat16).requires_grad_(True)
    label_smoothed_nll(xb, target, eps, ignore_index=0)[0].backward()
    xf = xb.detach().float().requires_grad_(True)
    label_smoothed_nll(xf, target, eps, ignore_index=0)[0].backward()
    assert xb.grad.dtype == torch.bfloat16
    torch.testing.assert_close(xb.grad.float(), xf.grad, rtol=2e-2, atol=2e-3)
    # retain_graph + a second backward would reuse a consumed buffer: autograd refuses
    x = torch.randn(2, 3, 5, requires_grad=True)
    loss, _ = label_smoothed_nll(x, torch.tensor([[1, 2, 0], [3, 0, 0]]), eps, ignore_index=0)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_projected_loss_of_a_target_far_below_the_maximum():
    """A target whose score is so far below the row's maximum that its float32 probability underflows to 0: the
    NLL is still exact (from logsumexp), not inf, and the gradients stay those of the reference."""
    torch.manual_seed(4)
    h = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], requires_grad=True)
    w = torch.tensor([[300.0, 0.0], [-300.0, 0.0], [0.0, 1.0], [0.0, -1.0]], requires_grad=True)
    target = torch.tensor([1, 2, 1])                 # row 0: target score -300, maximum +300
    loss, nll = projected_label_smoothed_nll(h, w, target, 0.1, ignore_index=-1)
    h2, w2 = h.detach().clone().requires_grad_(True), w.detach().clone().requires_grad_(True)
    rl, rn = _reference_smoothed(h2 @ w2.t(), target, 0.1, -1)
    assert torch.isfinite(nll) and nll.item() == pytest.approx(rn.item(), rel=1e-6)
    assert loss.item() == pytest.approx(rl.item(), rel=1e-6)
    loss.backward()
    rl.backward()
    # h.grad[1, 0] is 0 exactly: two terms of ±20 (probability × 300 / 3 rows) cancel, and float32 leaves ~1e-6 of
    # each (2.5e-6 seen on an AVX512 host without bf16), so atol 2e-5, not 1e-6; a wrong gradient is off by >= 0.1
    torch.testing.assert_close(h.grad, h2.grad, rtol=1e-5, atol=2e-5)
    torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_projected_loss_equals_projection_then_loss(eps, monkeypatch):
    """The fused output projection + loss (row blocks, padding rows skipped, gradients computed in the forward)
    equals ``hidden @ W.T`` followed by the plain loss: values and gradients for hidden and W, in one block and
    in many, with the bf16 gradient products over one or several buffers; pad rows get no gradient; the NLL is for
    logging only; no gradient is computed without grad mode; a second backward is refused."""
    import xlpe.train.losses as losses
    torch.manual_seed(2)
    target = torch.randint(1, 29, (3, 7))
    target[0, 5:] = 0
    target[2, 2:] = 0
    # one block / blocks of 3 rows; their gradients in one buffer, a buffer per block, or buffers of 2 blocks
    for block, grad_bytes in ((1 << 21, 1 << 26), (29 * 3, 1 << 26), (29 * 3, 1), (29 * 3, 29 * 3 * 4 * 2)):
        monkeypatch.setattr(losses, "_PROJ_BLOCK", block)
        monkeypatch.setattr(losses, "_GRAD_BYTES", grad_bytes)
        h1 = torch.randn(3, 7, 8, requires_grad=True)
        w1 = torch.randn(29, 8, requires_grad=True)
        h2, w2 = h1.detach().clone().requires_grad_(True), w1.detach().clone().requires_grad_(True)
        loss, nll = projected_label_smoothed_nll(h1 * 1.0, w1, target, eps, ignore_index=0)
        assert not nll.requires_grad
        (0.7 * loss).backward()
        rl, rn = _reference_smoothed(h2 @ w2.t(), target, eps, 0)
        (0.7 * rl).backward()
        assert loss.item() == pytest.approx(rl.item(), rel=1e-5) and nll.item() == pytest.approx(rn.item(), rel=1e-5)
        torch.testing.assert_close(h1.grad, h2.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-5, atol=1e-6)
        assert not h1.grad[2, 2:].any()
    # bf16 (the bf16-pure model): the block gradients are rounded into buffers (float32 uses each block directly)
    for block, grad_bytes in ((1 << 21, 1 << 26), (29 * 3, 1), (29 * 3, 29 * 3 * 2 * 2)):
        monkeypatch.setattr(losses, "_PROJ_BLOCK", block)
        monkeypatch.setattr(losses, "_GRAD_BYTES", grad_bytes)
        hb = h2.detach().bfloat16().requires_grad_(True)
        wb = w2.detach().bfloat16().requires_grad_(True)
        loss, nll = projected_label_smoothed_nll(hb, wb, target, eps, ignore_index=0)
        (0.7 * loss).backward()
        assert loss.item() == pytest.approx(rl.item(), rel=2e-2)
        torch.testing.assert_close(hb.grad.float(), h2.grad, rtol=5e-2, atol=2e-2)
        torch.testing.assert_close(wb.grad.float(), w2.grad, rtol=5e-2, atol=2e-2)
        assert hb.grad.dtype == torch.bfloat16 and not hb.grad[2, 2:].any()
    calls = []
    monkeypatch.setattr(losses.torch.Tensor, "scatter_add_", lambda self, *a: calls.append(1) or self)
    with torch.no_grad():                                            # validation: no gradient work at all
        l0, _ = projected_label_smoothed_nll(h2, w2, target, eps, ignore_index=0)
    monkeypatch.undo()
    assert l0.item() == pytest.approx(rl.item(), rel=1e-5) and not l0.requires_grad and not calls
    # a frozen output weight: only hidden gets a gradient
    h3 = h2.detach().clone().requires_grad_(True)
    projected_label_smoothed_nll(h3, w2.detach(), target, eps, ignore_index=0)[0].backward()
    torch.testing.assert_close(h3.grad, h2.grad / 0.7, rtol=1e-5, atol=1e-6)
    loss, _ = projected_label_smoothed_nll(h3, w1, target, eps, ignore_index=0)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()
    with pytest.raises(ConfigError, match="does not match"):
        projected_label_smoothed_nll(h3, torch.randn(29, 5), target, eps)


def test_projected_loss_in_bf16_runs_products_of_whole_blocks(monkeypatch):
    """In bf16 the non-pad rows are padded to whole score blocks, so every product has one of a few shapes whatever
    the batch's count of target tokens (oneDNN builds a primitive for every new shape); the padding changes
    nothing: loss and gradients equal those of the rows without padding (blocks of one row)."""
    import xlpe.train.losses as losses
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(3)
    V, d = 29, 8
    h = torch.randn(5, 6, d).bfloat16()
    w = (0.5 * torch.randn(V, d)).bfloat16()
    targets = [torch.randint(1, V, (5, 6)) for _ in range(3)]
    results, shapes = [], set()
    for block in (V * 4, V):                              # 4 rows per block (pads 22 rows to 24), 1 row per block
        monkeypatch.setattr(losses, "_PROJ_BLOCK", block)
        monkeypatch.setattr(losses, "_GRAD_BYTES", V * 4 * 2 * 2)          # 2 blocks of 4 rows per buffer
        for n, target in zip((22, 21, 19), targets):       # three batches, three counts of target tokens
            target.view(-1)[n:] = 0
            h1, w1 = h.clone().requires_grad_(True), w.clone().requires_grad_(True)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                loss, nll = projected_label_smoothed_nll(h1, w1, target, 0.1, ignore_index=0)
            if block == V * 4:
                shapes |= {tuple(e.input_shapes[0]) for e in prof.events() if e.name == "aten::mm"}
            loss.backward()
            results.append((loss.float(), nll.float(), h1.grad.float(), w1.grad.float()))
    # the score blocks (4, d), the gradient buffers (8 or 4, V) and their transposes: rows of 4 and 8 only
    assert shapes and all(s[0] in (4, 8, V) and (s[0] != V or s[1] in (4, 8)) for s in shapes), shapes
    for padded, plain in zip(results[:3], results[3:]):
        for a, b in zip(padded, plain):
            torch.testing.assert_close(a, b, rtol=1e-2, atol=1e-3)


def test_projected_loss_under_bf16_autocast_matches_the_unfused_path():
    """Under CPU bf16 autocast the fused loss runs its products in bf16 like autocast's ``x @ W.T`` and its softmax
    in float32: loss and gradients agree with autocast projection + plain loss to bf16 precision, and the
    gradients come back in the inputs' dtypes (float32 hidden and weight)."""
    torch.manual_seed(4)
    target = torch.randint(1, 300, (4, 9))
    target[1, 6:] = 0
    h1 = torch.randn(4, 9, 32, requires_grad=True)
    w1 = (0.2 * torch.randn(300, 32)).requires_grad_(True)
    h2, w2 = h1.detach().clone().requires_grad_(True), w1.detach().clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = projected_label_smoothed_nll(h1, w1, target, 0.1, ignore_index=0)
        logits = h2 @ w2.t()
    assert logits.dtype == torch.bfloat16
    rl, _ = label_smoothed_nll(logits, target, 0.1, ignore_index=0, reduction="sum")
    loss.backward()
    rl.backward()
    assert loss.item() == pytest.approx(rl.item(), rel=1e-3)
    assert h1.grad.dtype == torch.float32 and w1.grad.dtype == torch.float32
    torch.testing.assert_close(h1.grad, h2.grad, rtol=3e-2, atol=3e-3)
    torch.testing.assert_close(w1.grad, w2.grad, rtol=3e-2, atol=3e-3)


def test_combine_losses():
    nll = torch.tensor(2.0)
    total, parts = combine_losses(nll, {"loss_dpe": torch.tensor(3.0), "attn": torch.ones(2, 2)}, {"loss_dpe": 0.5})
    assert total.item() == 3.5 and set(parts) == {"loss_dpe"}
    assert combine_losses(nll, {"loss_dpe": torch.tensor(3.0)}, {"loss_dpe": 0.0})[0].item() == 2.0
    with pytest.raises(ConfigError, match="loss_x"):
        combine_losses(nll, {"loss_x": torch.tensor(1.0)}, {})


def test_aux_loss_modes_paper_and_fairseq():
    """SPEC §6.3: 'paper' adds λ·L_pe to the per-token NLL; 'fairseq' is (1-λ)·NLL_sum + λ·L_pe, which the token
    count then divides."""
    nll_sum, ntok, mse = torch.tensor(40.0), 20, torch.tensor(3.0)
    paper, _ = combine_losses(nll_sum, {"loss_dpe": mse}, {"loss_dpe": 0.5}, ntokens=ntok)
    assert paper.item() / ntok == pytest.approx(40.0 / 20 + 0.5 * 3.0)
    fs, parts = combine_losses(nll_sum, {"loss_dpe": mse}, {"loss_dpe": 0.5}, mode="fairseq", ntokens=ntok)
    assert fs.item() / ntok == pytest.approx((0.5 * 40.0 + 0.5 * 3.0) / 20) and parts["loss_dpe"].item() == 3.0
    assert combine_losses(nll_sum, {"loss_dpe": mse}, {"loss_dpe": 0.0}, mode="fairseq")[0].item() == 40.0
    with pytest.raises(ConfigError, match="at most 1"):
        combine_losses(nll_sum, {"loss_dpe": mse}, {"loss_dpe": 1.5}, mode="fairseq")
    with pytest.raises(ConfigError, match="mode"):
        combine_losses(nll_sum, {}, {}, mode="sum")


@pytest.mark.parametrize("kw, match", [({"aux_weights": {"loss_dpe": -0.1}}, "aux_weights must be >= 0"),
                                       ({"aux_loss_mode": "x"}, "aux_loss_mode"),
                                       ({"aux_loss_mode": "fairseq", "aux_weights": {"loss_dpe": 2.0}}, "at most 1")])
def test_bad_aux_loss_settings_fail_before_training(kw, match):
    with pytest.raises(ConfigError, match=match):
        TrainConfig(**kw)


# -- schedules ---------------------------------------------------------------------------------------------

def test_inverse_sqrt_values():
    s = Schedule("inverse_sqrt", lr=1.0, warmup=4, warmup_init_lr=0.0)
    assert [s.lr_at(n) for n in (0, 1, 2, 4)] == [0.0, 0.25, 0.5, 1.0]
    assert s.lr_at(16) == pytest.approx(0.5) and s.lr_at(100) == pytest.approx(0.2)
    f = Schedule("inverse_sqrt", lr=7e-4, warmup=8000, warmup_init_lr=1e-7)   # DPE's setting (SPEC §6.4)
    assert f.lr_at(8000) == pytest.approx(7e-4) and f.lr_at(32000) == pytest.approx(3.5e-4)
    assert f.lr_at(4000) == pytest.approx(1e-7 + 4000 * (7e-4 - 1e-7) / 8000)


def test_constant_and_linear():
    c = Schedule("constant", lr=2.0, warmup=2)
    assert [c.lr_at(n) for n in (0, 1, 2, 50)] == [0.0, 1.0, 2.0, 2.0]
    lin = Schedule("linear", lr=1.0, warmup=2, total=12, end_lr=0.0)
    assert [lin.lr_at(n) for n in (2, 7, 12, 20)] == [1.0, 0.5, 0.0, 0.0]
    with pytest.raises(ConfigError):
        Schedule("linear", lr=1.0, warmup=2)
    with pytest.raises(ConfigError):
        Schedule("cosine")


def test_linear_time_values():
    """Warm-up in updates, then a line from lr to end_lr over the rest of the time budget: with p the budget
    share used after n updates, the warm-up ended at p·warmup/n, so the rate is (1 − p)/(1 − p·warmup/n) of
    the way from end_lr to lr."""
    s = Schedule("linear_time", lr=1.0, warmup=4, warmup_init_lr=0.0, end_lr=0.1)
    assert [s.lr_at(n, 0.01 * n) for n in (0, 2)] == [0.0, 0.5]
    assert s.lr_at(4, 0.25) == pytest.approx(1.0)                     # continuous at the end of warm-up
    assert s.lr_at(10, 0.625) == pytest.approx(0.1 + 0.9 * 0.5)       # p_w = 0.25: half-way through the rest
    assert s.lr_at(16, 1.0) == s.lr_at(20, 1.3) == 0.1
    with pytest.raises(ConfigError, match="progress"):
        s.lr_at(10)
    with pytest.raises(ConfigError, match="clock"):
        build_scheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), s)
    with pytest.raises(ConfigError, match="max_time_minutes"):
        TrainConfig(schedule="linear_time")


def test_linear_time_schedule_in_training(toy, tmp_path):
    """A run stopped by time with the linear_time schedule: the rate rises over the warm-up, then only falls,
    and the last updates run near end_lr."""
    r = train(tiny_model_config(), quick_train_config(tmp_path / "t", schedule="linear_time", max_time_minutes=0.03,
                                                      warmup=4, lr=3e-3, log_every=1), _data(toy))
    assert r.stop_reason == "max_time"
    lrs = [float(row["lr"]) for row in csv.DictReader(open(tmp_path / "t" / "train_log.csv"))]
    assert len(lrs) > 8 and lrs[3] < lrs[4] == pytest.approx(3e-3)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))
    assert lrs[-1] < 0.2 * 3e-3


def test_scheduler_drives_optimizer():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=123.0)
    sched = build_scheduler(opt, Schedule("inverse_sqrt", lr=1.0, warmup=4, warmup_init_lr=0.0))
    used = []
    for _ in range(6):
        used.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert used == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1 / math.sqrt(5) * 2])


# -- the loop ----------------------------------------------------------------------------------------------

def _data(toy, **kw):
    return DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]), **kw)


def _params(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_kill_and_resume_is_exact(toy, tmp_path):
    """N updates straight == N/2, stop, resume, N/2 (dropout on, accumulation, across an epoch boundary)."""
    mcfg = tiny_model_config(dropout=0.3)
    common = dict(update_freq=2, max_tokens=160, save_every=3)
    straight = train(mcfg, quick_train_config(tmp_path / "a", max_updates=14, **common), _data(toy))
    assert straight.epoch >= 1                       # the run crossed an epoch boundary
    half = train(mcfg, quick_train_config(tmp_path / "b", max_updates=7, **common), _data(toy))
    assert half.step == 7
    resumed = train(mcfg, quick_train_config(tmp_path / "b", max_updates=14, **common), _data(toy))
    assert resumed.step == 14
    a, b = _params(straight.model), _params(resumed.model)
    assert a.keys() == b.keys()
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-7), k
    # the logs were continued, not duplicated
    rows = list(csv.DictReader(open(tmp_path / "b" / "train_log.csv")))
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)) and steps[-1] == 14
    loss_a = {int(r["step"]): r["loss"] for r in csv.DictReader(open(tmp_path / "a" / "train_log.csv"))}
    loss_b = {int(r["step"]): r["loss"] for r in rows}
    assert 7 in loss_b                                 # the stopped run's last, partial interval
    for s in (2, 4, 6, 10, 12, 14):                    # the same intervals log the same losses
        assert loss_a[s] == loss_b[s]
    # a fresh start over an existing run is refused
    with pytest.raises(ConfigError, match="already holds checkpoints"):
        train(mcfg, quick_train_config(tmp_path / "b", max_updates=1, resume="none"), _data(toy))


def test_a_stop_lands_between_updates_and_keeps_them(toy, tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) during an update: the update completes, a checkpoint of it is written, and the same
    command resumes to the very parameters of a run that was never stopped (here before the first save_every
    checkpoint, which used to lose every update)."""
    import os
    import signal

    import xlpe.train.trainer as trainer
    mcfg = tiny_model_config(dropout=0.3)
    common = dict(max_tokens=160, save_every=100)
    straight = train(mcfg, quick_train_config(tmp_path / "a", max_updates=8, **common), _data(toy))
    update = trainer._Run.update

    def interrupted(self, group):
        if self.step == 4:                               # the signal arrives as update 5 begins
            os.kill(os.getpid(), signal.SIGINT)
        return update(self, group)
    monkeypatch.setattr(trainer._Run, "update", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(mcfg, quick_train_config(tmp_path / "b", max_updates=8, **common), _data(toy))
    assert sorted(p.name for p in (tmp_path / "b").glob("checkpoint_*.pt")) == ["checkpoint_5.pt"]
    monkeypatch.setattr(trainer._Run, "update", update)
    resumed = train(mcfg, quick_train_config(tmp_path / "b", max_updates=8, **common), _data(toy))
    a, b = _params(straight.model), _params(resumed.model)
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-7), k


def test_loop_validation_epochs_and_checkpoints(toy, tmp_path):
    out = tmp_path / "run"
    cfg = quick_train_config(out, max_epochs=2, validate_every=4, save_every=4, keep_last=2, dev_bleu=True,
                             max_tokens=400)
    res = train(tiny_model_config(), cfg, _data(toy, dev_src=str(toy["dev_src"]), dev_tgt=str(toy["dev_tgt"])))
    assert res.stop_reason == "max_epochs" and res.epoch == 1
    assert {"valid_loss", "valid_nll", "valid_bleu"} <= set(res.valid)
    assert (out / "checkpoint_best.pt").exists()
    names = sorted(p.name for p in out.glob("checkpoint_*.pt") if p.name != "checkpoint_best.pt")
    assert len(names) == 2 and f"checkpoint_{res.step}.pt" in names
    vrows = list(csv.DictReader(open(out / "valid_log.csv")))
    assert int(vrows[-1]["step"]) == res.step
    # early stopping: patience 1 on a metric that stops improving at some point
    res2 = train(tiny_model_config(), quick_train_config(tmp_path / "es", max_updates=200, validate_every=1,
                                                         patience=1, lr=1.0, warmup=1),
                 _data(toy, dev_src=str(toy["dev_src"]), dev_tgt=str(toy["dev_tgt"])))
    assert res2.stop_reason == "early_stopping" and res2.step < 200


def test_bf16_autocast_on_cpu(toy, tmp_path):
    res = train(tiny_model_config(), quick_train_config(tmp_path / "bf", max_updates=2, amp="bf16"), _data(toy))
    assert all(torch.isfinite(p).all() for p in res.model.parameters())
    with pytest.raises(ConfigError, match="fp16"):
        train(tiny_model_config(), quick_train_config(tmp_path / "fp", max_updates=2, amp="fp16", device="cpu"),
              _data(toy))


def test_bf16_training_follows_the_fp32_loss_curve(toy, tmp_path):
    """The bf16 path (autocast, explicit attention with a float softmax, the CPU dropout mask) learns as fp32
    does: with the same seed, the logged training losses stay within a few percent over 40 updates."""
    def losses(amp):
        out = tmp_path / amp
        train(tiny_model_config(d_model=32, d_ff=64, dropout=0.1), quick_train_config(out, max_updates=40, amp=amp),
              _data(toy))
        return [float(r["loss"]) for r in csv.DictReader(open(out / "train_log.csv"))]
    fp32, bf16, pure = losses("none"), losses("bf16"), losses("bf16-pure")
    assert len(fp32) == len(bf16) == len(pure) == 20 and fp32[-1] < 0.8 * fp32[0]
    assert max(abs(a - b) / a for a, b in zip(fp32, bf16)) < 0.05
    assert max(abs(a - b) / a for a, b in zip(fp32, pure)) < 0.05


def test_bf16_pure_keeps_float32_masters_and_resumes_exactly(toy, tmp_path):
    """amp='bf16-pure': the checkpoints and the returned model are float32 (the masters, not bf16-rounded
    copies), the masters are what the optimizer updates (they differ from their bf16 rounding), and a killed run
    resumes exactly, gradient accumulation included."""
    mcfg = tiny_model_config(dropout=0.3)
    common = dict(update_freq=2, max_tokens=160, save_every=3, amp="bf16-pure")
    straight = train(mcfg, quick_train_config(tmp_path / "a", max_updates=8, **common), _data(toy))
    assert all(p.dtype == torch.float32 for p in straight.model.parameters())
    ck = load_checkpoint(straight.last_checkpoint)
    weights = [v for k, v in ck["model"].items() if v.is_floating_point()]
    assert weights and all(v.dtype == torch.float32 for v in weights)
    assert any(not torch.equal(v, v.bfloat16().float()) for v in weights)      # not bf16 values stored as fp32
    for k, v in straight.model.state_dict().items():
        assert torch.equal(v, ck["model"][k]), k
    train(mcfg, quick_train_config(tmp_path / "b", max_updates=4, **common), _data(toy))
    resumed = train(mcfg, quick_train_config(tmp_path / "b", max_updates=8, **common), _data(toy))
    a, b = _params(straight.model), _params(resumed.model)
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("amp", ["none", "bf16-pure"])
def test_gradient_clipping_rescales_the_update_and_logs_the_unclipped_norm(toy, tmp_path, amp):
    """clip_norm rescales the gradient before the optimizer step (the float32 masters' gradient under bf16-pure).
    A norm far below Adam's eps leaves the first update almost nothing; a norm far above the gradient's changes
    nothing at all. The log keeps the unclipped norm in every case."""
    from xlpe.nn.checkpoint import load_model
    from xlpe.nn.transformer import TransformerConfig, build_model
    from xlpe.runtime import seed_all
    mcfg = tiny_model_config(dropout=0.0)

    def one_update(name, clip):
        res = train(mcfg, quick_train_config(tmp_path / name, max_updates=1, log_every=1, warmup=0, amp=amp,
                                             clip_norm=clip), _data(toy))
        norm = float(next(csv.DictReader(open(tmp_path / name / "train_log.csv")))["grad_norm"])
        return _params(load_model(res.last_checkpoint)[0]), norm, res.last_checkpoint
    free, n_free, ck = one_update("free", 0.0)
    huge, n_huge, _ = one_update("huge", 1e9)
    tiny, n_tiny, _ = one_update("tiny", 1e-12)
    seed_all(3)                                  # the run's seed: the weights before the update
    init = _params(build_model(TransformerConfig.from_dict(load_checkpoint(ck)["model_config"])))
    assert n_free > 0 and n_huge == n_free and n_tiny == n_free
    assert all(torch.equal(free[k], huge[k]) for k in free)

    def moved(a):
        return sum(float((a[k].double() - init[k].double()).norm()) for k in init if init[k].is_floating_point())
    assert moved(free) > 0 and moved(tiny) < 1e-3 * moved(free)


def test_config_errors(toy, tmp_path):
    with pytest.raises(ConfigError, match="stopping rule"):
        train(tiny_model_config(), quick_train_config(tmp_path / "x"), _data(toy))
    with pytest.raises(ConfigError, match="update_freq"):
        TrainConfig(update_freq=0)
    with pytest.raises(ConfigError, match="subword"):
        train(tiny_model_config(), quick_train_config(tmp_path / "y", max_updates=1),
              DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"])))


def test_cli_config_file_and_overrides(tmp_path):
    toml = tmp_path / "c.toml"
    toml.write_text('[data]\ntrain_src = "a.txt"\ntrain_tgt = "b.txt"\nsubword_model = "j.model"\n'
                    '[model]\npreset = "tiny"\npe = ["ape", "rpe"]\nd_model = 64\n'
                    '[train]\nlr = 0.002\nmax_updates = 50\nbetas = [0.9, 0.99]\n'
                    '[train.aux_weights]\nloss_dpe = 0.3\n')
    p = argparse.ArgumentParser()
    add_cli_arguments(p)
    args = p.parse_args(["--config", str(toml), "--lr", "0.004", "--d-model", "32", "--no-bucket",
                         "--aux-weight", "loss_x=2", "--pe", "ape"])
    mcfg, tcfg, dcfg = configs_from_args(args)
    assert mcfg.d_model == 32 and mcfg.pe == ["ape"] and mcfg.n_heads == 2           # CLI > TOML > preset
    assert tcfg.lr == 0.004 and tcfg.max_updates == 50 and tcfg.betas == (0.9, 0.99) and tcfg.bucket is False
    assert tcfg.aux_weights == {"loss_dpe": 0.3, "loss_x": 2.0}
    assert dcfg.train_src == "a.txt" and dcfg.subword_model == "j.model"
    bad = tmp_path / "bad.toml"
    bad.write_text("[train]\nlearning_rate = 1\n")
    with pytest.raises(ConfigError, match="learning_rate"):
        configs_from_args(p.parse_args(["--config", str(bad)]))
    help_text = p.format_help()
    for opt in ("--train-src", "--subword-model", "--update-freq", "--max-time-minutes", "--preset", "--resume"):
        assert opt in help_text


class _AuxEncoding(PositionEncoding):
    """A toy position encoding that declares an auxiliary loss (stands in for DPE's) and writes it to ctx.aux."""

    name = "auxtest"
    aux_losses = {"loss_test": 1.0}

    def __init__(self, cfg):
        super().__init__(cfg)
        self.p = torch.nn.Parameter(torch.ones(cfg.d_model))

    def input_term(self, ctx):
        ctx.aux["loss_test"] = self.p.pow(2).mean() * 100
        return None


def test_aux_losses_are_weighted_and_logged(toy, tmp_path, monkeypatch):
    from xlpe.nn.positions import ENCODINGS
    monkeypatch.setitem(ENCODINGS, "auxtest", _AuxEncoding)
    runs = {}
    for w in (0.0, None):          # None: the weight the encoding declares (1.0)
        opts = {} if w is None else {"aux_weights": {"loss_test": w}}
        cfg = quick_train_config(tmp_path / f"w{w}", max_updates=2, log_every=1, **opts)
        runs[w] = train(tiny_model_config(dropout=0.0, pe=["ape", "auxtest"]), cfg, _data(toy))
        rows = list(csv.DictReader(open(tmp_path / f"w{w}" / "train_log.csv")))
        assert float(rows[0]["loss_test"]) > 0                 # logged (unweighted, per token-weighted batch)
    p0 = runs[0.0].model.encoder.pe[1].p
    p1 = runs[None].model.encoder.pe[1].p
    assert p1.pow(2).mean() < p0.pow(2).mean()                 # the weighted aux term reached the gradient
    with pytest.raises(ConfigError, match="loss_test.*no encoding"):   # a weight for a loss nobody returns
        train(tiny_model_config(), quick_train_config(tmp_path / "none", max_updates=1,
                                                      aux_weights={"loss_test": 1.0}), _data(toy))


def test_train_cli_end_to_end(toy, tmp_path):
    from xlpe.cli import main
    out = tmp_path / "cli"
    argv = ["train", "--train-src", str(toy["src"]), "--train-tgt", str(toy["tgt"]), "--subword-model",
            str(toy["spm"]), "--preset", "tiny", "--d-model", "16", "--d-ff", "32", "--enc-layers", "1",
            "--dec-layers", "1", "--pe", "ape", "rpe", "--max-tokens", "200", "--warmup", "2",
            "--out", str(out), "--no-progress", "--threads", "1", "--log-every", "1"]
    assert main(argv + ["--max-updates", "3"]) == 0
    assert (out / "checkpoint_3.pt").exists() and (out / "run.json").exists()
    assert main(argv + ["--max-updates", "4"]) == 0                       # resume=auto continues
    assert (out / "checkpoint_4.pt").exists()
    # one record per start, each naming the host it ran on (two hosts can train different models from one seed)
    records = json.loads((out / "run.json").read_text())
    assert len(records) == 2
    for r in records:
        assert r["host"]["cpu"] == host()["cpu"] and r["host"]["cores"] == os.cpu_count()
        assert r["host"]["native_bf16"] in (True, False, None) and r["host"]["threads"] == 1
    steps = [int(r["step"]) for r in csv.DictReader(open(out / "train_log.csv"))]
    assert steps == [1, 2, 3, 4]


def test_a_second_run_into_a_running_run_s_folder_stops_at_once(toy, tmp_path, capsys):
    """Issue 57 class 4: two ``xlpe train`` into one --out both exited 0 and interleaved their checkpoints and
    train_log.csv rows. The second now stops before writing anything, naming the process that holds the folder,
    and the first trains on undisturbed; once it ends, the folder is free again."""
    import os
    import signal
    import subprocess
    import time
    from pathlib import Path

    import xlpe
    from xlpe.cli import main
    out = tmp_path / "run"
    argv = ["train", "--train-src", str(toy["src"]), "--train-tgt", str(toy["tgt"]), "--subword-model",
            str(toy["spm"]), "--preset", "tiny", "--d-model", "16", "--d-ff", "32", "--enc-layers", "1",
            "--dec-layers", "1", "--max-tokens", "160", "--out", str(out), "--no-progress", "--threads", "1",
            "--log-every", "1", "--save-every", "2"]
    env = {**os.environ, "PYTHONPATH": str(Path(xlpe.__file__).resolve().parents[1])}
    first = subprocess.Popen([sys.executable, "-m", "xlpe.cli", *argv, "--max-updates", "1000000"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and first.poll() is None and not (out / "checkpoint_2.pt").exists():
            time.sleep(0.1)
        assert first.poll() is None, first.communicate()
        assert main(argv + ["--max-updates", "3"]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and str(out) in err and f"process {first.pid}" in err, err
        first.send_signal(signal.SIGTERM)
        _, first_err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 143 and "Traceback" not in first_err, first_err
    steps = [int(r["step"]) for r in csv.DictReader(open(out / "train_log.csv"))]
    assert steps == list(range(1, len(steps) + 1))                        # one run's rows, in order
    assert main(argv + ["--max-updates", str(steps[-1] + 1)]) == 0          # the folder is free: resume=auto goes on


def test_folder_lock_names_its_holder_and_frees_the_folder_when_released(tmp_path):
    from xlpe.io.process import FolderLock
    lock = FolderLock(tmp_path, ".run.lock", "training run")
    with pytest.raises(ConfigError, match=rf"{tmp_path} is in use: another training run writes there \(process "
                                          rf"{__import__('os').getpid()} on this host\)"):
        FolderLock(tmp_path, ".run.lock", "training run")
    lock.release()
    FolderLock(tmp_path, ".run.lock", "training run").release()


def test_resuming_removes_the_temp_file_of_a_killed_checkpoint_write(toy, tmp_path):
    """Issue 21 case 18: a kill -9 during a checkpoint write leaves '.checkpoint_N.pt.*.tmp'; the resume removes it."""
    from xlpe.train import DataConfig, train
    data = DataConfig(train_src=str(toy["src"]), train_tgt=str(toy["tgt"]), subword_model=str(toy["spm"]))
    out = tmp_path / "run"
    train(tiny_model_config(), quick_train_config(out, max_updates=2, save_every=2), data)
    stale = out / ".checkpoint_4.pt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    train(tiny_model_config(), quick_train_config(out, max_updates=4, save_every=2), data)
    assert not stale.exists() and (out / "checkpoint_4.pt").exists()


def test_master_weights_accumulate_in_float32_and_round_once():
    """MasterWeights: the model turns bf16, the masters keep the float32 values; gradients of several micro-batches
    are summed into the masters' float32 gradients (not in bf16); sync rounds the masters into the model;
    model_state_dict holds the masters; restore gives back a float32 model with the masters' exact values."""
    from xlpe.train.master import MasterWeights
    torch.manual_seed(0)
    lin = torch.nn.Linear(4, 3)
    w32 = lin.weight.detach().clone()
    mw = MasterWeights(lin)
    assert lin.weight.dtype == torch.bfloat16 and torch.equal(mw.params[0], w32)
    xs = [torch.randn(5, 4) for _ in range(2)]
    expect = torch.zeros(3, 4)
    for x in xs:
        lin(x.bfloat16()).float().pow(2).sum().backward()
        expect += lin.weight.grad.float()
        mw.collect_grads()
        assert lin.weight.grad is None
    assert mw.params[0].grad.dtype == torch.float32 and torch.equal(mw.params[0].grad, expect)
    with torch.no_grad():
        mw.params[0].add_(1e-3)                       # an update smaller than bf16's spacing near 1
    mw.sync()
    assert torch.equal(lin.weight, mw.params[0].bfloat16())
    sd = mw.model_state_dict()
    assert sd["weight"].dtype == torch.float32 and torch.equal(sd["weight"], mw.params[0])
    mw.restore()
    assert lin.weight.dtype == torch.float32 and torch.equal(lin.weight, mw.params[0])


def test_trim_memory_every_changes_nothing_but_memory(toy, tmp_path):
    """trim_memory_every hands freed memory back between updates; the training itself is the same."""
    a = train(tiny_model_config(), quick_train_config(tmp_path / "a", max_updates=4), _data(toy))
    b = train(tiny_model_config(), quick_train_config(tmp_path / "b", max_updates=4, trim_memory_every=1), _data(toy))
    pa, pb = _params(a.model), _params(b.model)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    with pytest.raises(ConfigError, match=">= 0"):
        TrainConfig(trim_memory_every=-1)


def test_training_sets_up_memory_before_the_first_update(toy, tmp_path, monkeypatch):
    """train() keeps freed memory in glibc's heap, as `xlpe translate` does (each update's activations come from
    the heap, not from fresh pages), and caps oneDNN's caches, before the first update; trim_memory_every still
    trims after every update (docs/results/speed.md)."""
    import xlpe.train.trainer as trainer
    calls = []
    monkeypatch.setattr(trainer, "retain_freed_memory", lambda: calls.append("retain") or True)
    monkeypatch.setattr(trainer, "release_freed_memory", lambda: calls.append("release") or True)
    monkeypatch.setattr(trainer, "limit_onednn_caches", lambda: calls.append("limit") or True)
    train(tiny_model_config(), quick_train_config(tmp_path / "a", max_updates=2, trim_memory_every=1), _data(toy))
    assert calls == ["retain", "limit", "release", "release"]


_BF16_SHAPES = """
import sys, torch
from xlpe.runtime import limit_onednn_caches
print(limit_onednn_caches(16) if sys.argv[1] == "limit" else "-")
torch.set_num_threads(1)
def rss_mb():
    return int(open("/proc/self/statm").read().split()[1]) * 4096 / 2**20
w, x = torch.randn(64, 256).bfloat16(), torch.randn(400, 64).bfloat16()
x[:8] @ w                                               # the first product sets everything up
before = rss_mb()
for n in range(9, 409):                                 # 400 shapes, as 400 training batches of other lengths
    x[:n] @ w
print(rss_mb() - before)
"""


def test_limit_onednn_caches_bounds_the_memory_of_many_bf16_shapes():
    """``xlpe.runtime.limit_onednn_caches`` (train() calls it): oneDNN and ideep keep a primitive, with its own
    memory, for every bf16 product shape they see; capped at 16, 400 shapes cost little memory. A user's own
    setting wins. Skips on builds whose bf16 products keep nothing per shape."""
    import os
    import subprocess
    from xlpe.runtime import ONEDNN_CACHE_ENV
    env = {k: v for k, v in os.environ.items() if k not in ONEDNN_CACHE_ENV}

    def run(*args, **extra):
        return subprocess.run([sys.executable, "-c", _BF16_SHAPES, *args], env={**env, **extra},
                              capture_output=True, text=True, check=True).stdout.split()

    default = float(run("none")[1])
    if default < 100:
        pytest.skip(f"bf16 products kept only {default:.0f} MB for 400 shapes here: nothing to limit")
    ok, limited = run("limit")
    assert ok == "True" and float(limited) < default / 4, (default, limited)
    assert run("limit", LRU_CACHE_CAPACITY="1024")[0] == "False"
    with pytest.raises(ConfigError, match=">= 1"):
        from xlpe.runtime import limit_onednn_caches
        limit_onednn_caches(0)


def test_bf16_without_bf16_hardware_is_said_once(monkeypatch, caplog, toy, tmp_path):
    """bf16 asked for on a CPU without AVX512-BF16 / AMX (torch emulates it: slower than float32, not faster) gets a
    warning naming the float32 setting, once per setting, from training (autocast and bf16-pure) and decoding; a CPU
    with the instructions, or one torch cannot tell about, gets none."""
    import xlpe.runtime as rt
    from xlpe.infer.translate import check_dtype
    monkeypatch.setattr(rt.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(rt, "_WARNED_BF16", set())
    for has in (False, True):
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False, raising=False)
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda has=has: has, raising=False)
        assert rt.native_bf16("cpu") is has
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    caplog.set_level("WARNING", logger="xlpe.runtime")
    rt.autocast_context("bf16", torch.device("cpu"))
    rt.autocast_context("bf16", torch.device("cpu"))
    rt.autocast_context("none", torch.device("cpu"))
    check_dtype("bfloat16", torch.device("cpu"))
    check_dtype("float32", torch.device("cpu"))
    said = [r.getMessage() for r in caplog.records if r.name == "xlpe.runtime"]
    assert len(said) == 2 and "--amp none" in said[0] and "--dtype float32" in said[1], said
    assert all("no AVX512-BF16 or AMX" in m for m in said)
    monkeypatch.setattr(rt, "_WARNED_BF16", set())
    caplog.clear()
    train(tiny_model_config(), quick_train_config(tmp_path / "p", max_updates=1, amp="bf16-pure"), _data(toy))
    assert any("--amp none" in r.getMessage() for r in caplog.records if r.name == "xlpe.runtime")
    monkeypatch.setattr(rt.platform, "machine", lambda: "aarch64")        # torch's checks are x86 instructions
    assert rt.native_bf16("cpu") is None and not rt.warn_if_emulated_bf16("cpu", "x")


def test_adam_implementations_are_one_algorithm(toy, tmp_path, monkeypatch, caplog):
    """``adam = fused | foreach | for-loop`` reaches torch's Adam and trains the same model up to rounding; a
    checkpoint from before the option (no ``adam`` in it: the for-loop) resumed with another one says so."""
    seen, real = [], torch.optim.Adam
    monkeypatch.setattr(torch.optim, "Adam", lambda *a, **kw: seen.append(kw) or real(*a, **kw))
    final = {}
    for impl in ("fused", "foreach", "for-loop"):
        cfg = quick_train_config(tmp_path / impl, max_updates=6, adam=impl, save_every=6)
        final[impl] = _params(train(tiny_model_config(dropout=0.3), cfg, _data(toy)).model)
    assert [(kw.get("fused"), kw.get("foreach")) for kw in seen] == [(True, None), (None, True), (None, False)]
    for impl in ("foreach", "for-loop"):
        for k, v in final["fused"].items():       # (the key biases' gradient is 0 up to rounding: Adam amplifies it)
            assert "k_proj.bias" in k or torch.allclose(v, final[impl][k], rtol=1e-4, atol=1e-6), (impl, k)
    with pytest.raises(ConfigError, match="adam must be one of fused, foreach, for-loop"):
        quick_train_config(tmp_path / "x", max_updates=1, adam="sgd")
    old = tmp_path / "for-loop" / "checkpoint_6.pt"
    ck = torch.load(old, weights_only=False)
    del ck["train_config"]["adam"]
    torch.save(ck, old)
    train(tiny_model_config(dropout=0.3), quick_train_config(tmp_path / "for-loop", max_updates=7), _data(toy))
    assert "with changed adam ('for-loop' -> 'fused')" in caplog.text


def test_stop_signals_are_put_off_to_the_end_of_the_block_by_the_handlers_they_had():
    """``stop_signals_deferred``: a signal inside the block reaches its own handler once the block ends (once, however
    often it came), an ignored one stays ignored, and the handlers are back as they were."""
    import os
    import signal

    from xlpe.io.process import stop_signals_deferred
    seen = []
    old = signal.signal(signal.SIGTERM, lambda signum, frame: seen.append(signum))
    try:
        with stop_signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGTERM)
            assert seen == []
        assert seen == [signal.SIGTERM]
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with stop_signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
        assert seen == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, old)
