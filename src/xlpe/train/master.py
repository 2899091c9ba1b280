"""Pure bf16 training with float32 master weights (``TrainConfig.amp = 'bf16-pure'``).

Under autocast (``amp = 'bf16'``) the model's weights stay float32 and every matrix product casts its inputs to
bf16 again: the weights once per autocast region, the activations at every product, with float32 layer norms and
residual stream in between. Here the model itself is bf16 (weights, activations, gradients), and the update reads
float32 *master* copies (Micikevicius et al. 2018, "Mixed precision training", §3.1; bf16 needs no loss scaling):

1. :class:`MasterWeights` keeps a float32 copy of every parameter and turns the model into bf16;
2. forward and backward run in bf16 (attention softmax and the loss in float32, as in bf16 decoding);
3. :meth:`MasterWeights.collect_grads` adds each bf16 gradient into its master's float32 gradient (after every
   micro-batch without DDP, so gradient accumulation sums in float32; after the last one under DDP, whose
   all-reduce has summed the micro-batches' gradients in bf16 by then);
4. clipping and the optimizer work on the masters in float32;
5. :meth:`MasterWeights.sync` rounds the updated masters into the model's bf16 weights: the weights are cast once
   per update.

Checkpoints hold the float32 masters (:meth:`MasterWeights.model_state_dict`) and an optimizer state over them, so
a checkpoint written this way is an ordinary float32 checkpoint for translation, averaging and export.
"""

from __future__ import annotations

import torch
from torch import nn


class MasterWeights:
    """Float32 master copies of ``model``'s parameters; the model becomes ``dtype`` (in place).

    ``params`` are the masters, in ``model.parameters()`` order: give them to the optimizer and to gradient
    clipping instead of the model's parameters."""

    def __init__(self, model: nn.Module, dtype: torch.dtype = torch.bfloat16):
        self.model, self.dtype = model, dtype
        self._names = [n for n, _ in model.named_parameters()]
        self._model_params = list(model.parameters())
        self.params = [nn.Parameter(p.detach().float().clone(), requires_grad=p.requires_grad)
                       for p in self._model_params]
        model.to(dtype)

    def collect_grads(self) -> None:
        """Add the model's gradients into the masters' (float32) and free them."""
        for p, m in zip(self._model_params, self.params):
            if p.grad is None:
                continue
            if m.grad is None:
                m.grad = p.grad.float()
            else:
                m.grad.add_(p.grad)
            p.grad = None

    @torch.no_grad()
    def sync(self) -> None:
        """Round the masters into the model's weights (after an optimizer step)."""
        for p, m in zip(self._model_params, self.params):
            p.copy_(m)

    def model_state_dict(self) -> dict[str, torch.Tensor]:
        """The model's ``state_dict`` with the float32 masters in place of its parameters (other floating-point
        entries upcast to float32): the checkpoint a float32 run of the same model would write."""
        state = self.model.state_dict()
        masters = dict(zip(self._names, self.params))
        return {k: (masters[k].detach() if k in masters else v.float() if v.is_floating_point() else v)
                for k, v in state.items()}

    @torch.no_grad()
    def restore(self) -> None:
        """Turn the model back into float32 with the masters' exact values (at the end of training)."""
        self.model.float()
        for p, m in zip(self._model_params, self.params):
            p.copy_(m)
