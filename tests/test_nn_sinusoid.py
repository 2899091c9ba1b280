"""sinusoid(): SPEC §0.1 identities and both frequency schemes written out element by element."""

import math

import pytest
import torch

from xlpe.errors import ConfigError
from xlpe.nn.positions import sinusoid




def test_position_zero_is_sin0_cos1_interleaved():
    assert torch.equal(sinusoid(torch.tensor(0), 8), torch.tensor([0.0, 1.0] * 4))
    # concat layout: all sines first, then all cosines
    assert torch.equal(sinusoid(torch.tensor(0), 8, layout="concat"), torch.tensor([0.0] * 4 + [1.0] * 4))


@pytest.mark.parametrize("layout", ["interleave", "concat"])
@pytest.mark.parametrize("freq", ["paper", "t2t"])
def test_range_and_distinct_rows(layout, freq):
    pe = sinusoid(torch.arange(200), 32, layout=layout, freq=freq)
    assert pe.shape == (200, 32)
    assert pe.abs().max() <= 1.0
    assert torch.cdist(pe, pe).add(torch.eye(200) * 10).min() > 1e-3   # all rows distinct


def test_paper_formula_interleaved():
    d, pos = 6, torch.tensor([0, 1, 5, 37])
    pe = sinusoid(pos, d)
    for r, p in enumerate(pos.tolist()):
        for i in range(d // 2):
            w = 1.0 / 10000 ** (2 * i / d)
            assert pe[r, 2 * i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
            assert pe[r, 2 * i + 1].item() == pytest.approx(math.cos(p * w), abs=1e-6)


def test_t2t_formula_concat():
    d, pos = 8, torch.tensor([0, 3, 11])
    pe = sinusoid(pos, d, layout="concat", freq="t2t")
    half = d // 2
    for r, p in enumerate(pos.tolist()):
        for i in range(half):
            w = math.exp(-math.log(1e4) * i / (half - 1))   # tensor2tensor get_timing_signal_1d
            assert pe[r, i].item() == pytest.approx(math.sin(p * w), abs=1e-6)
            assert pe[r, half + i].item() == pytest.approx(math.cos(p * w), abs=1e-6)


def test_arbitrary_shapes_float_positions_and_no_table():
    pos = torch.tensor([[3, 1, 2], [0, 7, 500]])
    pe = sinusoid(pos, 16)
    assert pe.shape == (2, 3, 16)
    assert torch.allclose(sinusoid(pos.float(), 16), pe)
    # a permutation of positions permutes rows (XL PE): no arange walk inside
    assert torch.equal(pe[0], sinusoid(torch.arange(4), 16)[[3, 1, 2]])
    assert torch.allclose(sinusoid(torch.tensor([0.5]), 4)[0, 0], torch.tensor(math.sin(0.5)))
    assert sinusoid(pos.double(), 16).dtype == torch.float64


def test_odd_width_is_zero_padded():
    pos = torch.arange(5)
    pe = sinusoid(pos, 7)
    assert pe.shape == (5, 7)
    assert torch.equal(pe[:, -1], torch.zeros(5))
    assert torch.equal(pe[:, :6], sinusoid(pos, 6))


def test_bad_options():
    with pytest.raises(ConfigError, match="layout"):
        sinusoid(torch.arange(3), 4, layout="zigzag")
    with pytest.raises(ConfigError, match="frequency"):
        sinusoid(torch.arange(3), 4, freq="fairseq")
