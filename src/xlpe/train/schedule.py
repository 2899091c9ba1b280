"""Learning-rate schedules as functions of the number of updates already done (and, for ``linear_time``, of the
training time used).

All share a linear warm-up from ``warmup_init_lr`` to the peak ``lr`` over ``warmup`` updates.
``lr_at(n)`` is the learning rate used by update ``n + 1`` (so update 1 runs at ``warmup_init_lr``),
which is fairseq's convention: its scheduler sets the rate after each update from ``num_updates``.

* ``inverse_sqrt`` — fairseq's ``inverse_sqrt``: ``lr_at(n) = warmup_init_lr + n·(lr − warmup_init_lr)/warmup``
  for ``n < warmup``, then ``lr·sqrt(warmup)/sqrt(n)`` (so it is continuous at ``n = warmup``). This is the
  Vaswani et al. (2017) "noam" shape with the peak given directly instead of through ``d_model^-0.5``.
* ``constant`` — the warm-up, then ``lr``.
* ``linear`` — the warm-up, then a straight line from ``lr`` at ``warmup`` to ``end_lr`` at ``total``
  and ``end_lr`` afterwards (needs ``total``).
* ``linear_time`` — the warm-up, then a straight line from ``lr`` to ``end_lr`` over the rest of a training-time
  budget (``max_time_minutes``), for runs stopped by time, where the number of updates is not known in advance
  (it depends on the machine). With ``progress`` ``p`` the share of the budget used so far and ``n`` updates done,
  the warm-up ended at about ``p_w = p·warmup/n`` of the budget (updates take equal time on average), so
  ``lr_at(n) = end_lr + (lr − end_lr)·(1 − p)/(1 − p_w)``: continuous at ``n = warmup`` and ``end_lr`` when the
  budget is spent, with no state beyond the clock. Two runs do not repeat exactly (the rate follows measured time);
  a resumed run continues from the elapsed time its checkpoint holds.

:func:`build_scheduler` wraps one in ``torch.optim.lr_scheduler.LambdaLR`` (call ``scheduler.step()`` once
after each ``optimizer.step()``); its state dict is just the update count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

from xlpe.errors import ConfigError

KINDS = ("inverse_sqrt", "constant", "linear", "linear_time")


@dataclass(frozen=True)
class Schedule:
    """A learning-rate schedule; see the module docstring for the formulas."""
    kind: str = "inverse_sqrt"
    lr: float = 5e-4
    warmup: int = 4000
    warmup_init_lr: float = 0.0
    total: int | None = None
    end_lr: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"unknown lr schedule {self.kind!r} (expected one of {', '.join(KINDS)})")
        if self.lr <= 0 or self.warmup < 0:
            raise ConfigError(f"lr must be > 0 and warmup >= 0 (got lr={self.lr}, warmup={self.warmup})")
        if self.kind == "linear" and (self.total is None or self.total <= self.warmup):
            raise ConfigError("the linear schedule needs a total number of updates (max_updates) larger than warmup")

    def lr_at(self, n: int, progress: float | None = None) -> float:
        """The learning rate after ``n`` updates (used by update ``n + 1``); ``linear_time`` also needs
        ``progress``, the share of the time budget used so far."""
        if n < self.warmup:
            return self.warmup_init_lr + n * (self.lr - self.warmup_init_lr) / self.warmup
        if self.kind == "constant":
            return self.lr
        if self.kind == "inverse_sqrt":
            return self.lr * math.sqrt(max(self.warmup, 1)) / math.sqrt(max(n, 1))
        if self.kind == "linear_time":
            if progress is None:
                raise ConfigError("the linear_time schedule needs the share of the time budget used (progress)")
            p = min(max(progress, 0.0), 1.0)
            p_w = p * self.warmup / max(n, 1)
            return self.end_lr + (self.lr - self.end_lr) * (1.0 - p) / (1.0 - p_w) if p < 1.0 else self.end_lr
        frac = min(1.0, (n - self.warmup) / (self.total - self.warmup))
        return self.lr + frac * (self.end_lr - self.lr)


def build_scheduler(optimizer: torch.optim.Optimizer, schedule: Schedule,
                    progress: Callable[[], float] | None = None) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` following ``schedule`` (the optimizer's own lr is overwritten with the peak).
    ``progress`` returns the share of the time budget used so far (``linear_time`` needs it; the trainer passes
    its clock, read when ``scheduler.step()`` runs)."""
    if schedule.kind == "linear_time" and progress is None:
        raise ConfigError("the linear_time schedule needs a clock: give progress (the share of the time budget used)")
    for g in optimizer.param_groups:
        g["lr"] = schedule.lr
        g["initial_lr"] = schedule.lr
    if schedule.kind == "linear_time":
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: schedule.lr_at(n, progress()) / schedule.lr)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda n: schedule.lr_at(n) / schedule.lr)
