"""The one sinusoid function every sinusoidal encoding uses (SPEC §0.1).

APE (Vaswani et al. 2017), XL PE (Ding et al. 2020, Eq. 6), absolute structural PE (Wang et al. 2019, §3.2),
the DPE regression targets (Zheng et al., SPEC §6.3) and the decoder all call :func:`model_sinusoid` (the
model's settings) on different integer position channels, so :func:`sinusoid` takes arbitrary (int or float)
positions rather than walking a precomputed table.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from xlpe.errors import ConfigError

LAYOUTS = ("interleave", "concat")
FREQS = ("paper", "t2t")


def inverse_frequencies(d: int, base: float = 1e4, freq: str = "paper", *,
                        device: torch.device | None = None, dtype: torch.dtype = torch.float32) -> Tensor:
    """The ``d // 2`` inverse frequencies ``w_i`` of :func:`sinusoid`.

    ``paper``: ``w_i = base^(-2i/d')`` with ``d' = 2 * (d // 2)`` (Vaswani Eq.; OpenNMT-py).
    ``t2t``:   ``w_i = exp(-ln(base) * i / max(d/2 - 1, 1))`` (tensor2tensor ``get_timing_signal_1d``, THUMT,
    fairseq ``SinusoidalPositionalEmbedding``).
    """
    if freq not in FREQS:
        raise ConfigError(f"unknown sinusoid frequency scheme {freq!r}; valid: {', '.join(FREQS)}")
    half = d // 2
    i = torch.arange(half, device=device, dtype=torch.float64)
    if freq == "paper":
        w = torch.exp(-math.log(base) * (2.0 * i) / (2 * half)) if half else i
    else:
        w = torch.exp(-math.log(base) * i / max(half - 1, 1))
    return w.to(dtype)


def sinusoid(pos: Tensor, d: int, base: float = 1e4, layout: str = "interleave", freq: str = "paper") -> Tensor:
    """Sinusoidal encoding of arbitrary positions (SPEC §0.1).

    ``PE(pos, 2i) = sin(pos * w_i)``, ``PE(pos, 2i+1) = cos(pos * w_i)`` for ``layout='interleave'`` (the paper
    formula, OpenNMT-py); ``[sin(pos * w), cos(pos * w)]`` for ``layout='concat'`` (tensor2tensor, fairseq).
    ``w_i`` comes from :func:`inverse_frequencies`. An odd ``d`` gives the encoding of ``d - 1`` followed by a
    zero column (fairseq's padding). Positions are used as given: no offset is added (fairseq starts at
    ``padding_idx + 1``; shift the channel yourself to mimic it).

    Verified in ``tests/test_nn_sinusoid.py`` against: ``PE(0) = [0,1,0,1,...]``; the closed form of both
    frequency schemes written out element by element; values in [-1, 1]; distinct rows; float == int positions.

    Args:
        pos: positions of any shape, integer or floating point (permuted indices, tree depths, ...).
        d: encoding width (``d_model``).
        base: the wavelength base, 10000 in all the papers.
        layout: ``'interleave'`` (default) or ``'concat'``.
        freq: ``'paper'`` (default) or ``'t2t'``.

    Returns:
        Tensor of shape ``pos.shape + (d,)``; dtype of ``pos`` if it is floating point, else the default dtype.
    """
    if layout not in LAYOUTS:
        raise ConfigError(f"unknown sinusoid layout {layout!r}; valid: {', '.join(LAYOUTS)}")
    if d < 1:
        raise ConfigError(f"sinusoid width must be >= 1, got {d}")
    dtype = pos.dtype if pos.is_floating_point() else torch.get_default_dtype()
    w = inverse_frequencies(d, base, freq, device=pos.device, dtype=torch.float32 if dtype != torch.float64 else dtype)
    angles = pos.to(w.dtype).unsqueeze(-1) * w                      # (..., d // 2)
    sin, cos = torch.sin(angles), torch.cos(angles)
    if layout == "interleave":
        out = torch.stack((sin, cos), dim=-1).flatten(-2)            # sin0 cos0 sin1 cos1 ...
    else:
        out = torch.cat((sin, cos), dim=-1)                          # sin0 sin1 ... cos0 cos1 ...
    if d % 2:
        out = torch.nn.functional.pad(out, (0, 1))
    return out.to(dtype)


def model_sinusoid(pos: Tensor, cfg) -> Tensor:
    """``PE(pos)``: :func:`sinusoid` with the model's own width, base, layout and frequencies (``cfg``: a
    ``TransformerConfig``, or anything with ``d_model`` and the ``sinusoid_*`` fields)."""
    return sinusoid(pos, cfg.d_model, cfg.sinusoid_base, cfg.sinusoid_layout, cfg.sinusoid_freq)
