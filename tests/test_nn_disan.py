"""DiSAN's directional head masks (docs/spec-additions.md §13): the worked example of §13.3, padding, options."""

import pytest
import torch

from xlpe.errors import ConfigError
from xlpe.nn import TransformerConfig, build_model
from xlpe.nn.attention import MultiheadAttention
from xlpe.nn.positions import EncodingContext, directional_masks
from xlpe.nn.transformer import count_parameters

# §13.3: allowed keys per query, T = 4, H = 4 (heads 0, 1 forward; 2, 3 backward)
FORWARD = [[], [0], [0, 1], [0, 1, 2]]
BACKWARD = [[1, 2, 3], [2, 3], [3], []]
FORWARD_DIAG = [[0], [0, 1], [0, 1, 2], [0, 1, 2, 3]]
BACKWARD_DIAG = [[0, 1, 2, 3], [1, 2, 3], [2, 3], [3]]


def allowed(mask):
    return [[j for j in range(len(row)) if row[j]] for row in mask.tolist()]


@pytest.mark.parametrize("diagonal, fw, bw", [(False, FORWARD, BACKWARD), (True, FORWARD_DIAG, BACKWARD_DIAG)])
def test_masks_of_the_worked_example(diagonal, fw, bw):
    m = directional_masks(4, 4, diagonal)
    assert m.shape == (4, 4, 4) and m.dtype == torch.bool
    assert [allowed(m[h]) for h in range(4)] == [fw, fw, bw, bw]


def test_odd_head_count_gives_the_extra_head_to_forward():
    m = directional_masks(3, 3)
    assert allowed(m[1]) == [[], [0], [0, 1]] and allowed(m[2]) == [[1, 2], [2], []]


def uniform_attention(H=4, d=8):
    """Zero Q/K projections: the weights are uniform over the allowed keys. V and the output are the identity."""
    mha = MultiheadAttention(d, H).eval()
    with torch.no_grad():
        for lin in (mha.q_proj, mha.k_proj):
            lin.weight.zero_()
            lin.bias.zero_()
        for lin in (mha.v_proj, mha.out_proj):
            lin.weight.copy_(torch.eye(d))
            lin.bias.zero_()
    return mha


@pytest.mark.parametrize("need_weights", [False, True])   # SDPA and the explicit product
def test_each_head_averages_its_allowed_keys_and_empty_rows_are_zero(need_weights):
    H, d, T = 4, 8, 4
    mha = uniform_attention(H, d)
    x = torch.randn(1, T, d)
    out, w = mha(x, head_mask=directional_masks(T, H), need_weights=need_weights)
    per_head = out.view(1, T, H, d // H)
    for h, rows in enumerate([FORWARD, FORWARD, BACKWARD, BACKWARD]):
        for i, keys in enumerate(rows):
            want = x[0, keys, h * 2:h * 2 + 2].mean(0) if keys else torch.zeros(2)
            torch.testing.assert_close(per_head[0, i, h], want)
            if need_weights:
                expect = torch.zeros(T)
                expect[keys] = 1.0 / len(keys) if keys else 0.0
                torch.testing.assert_close(w[0, h, i], expect)


def test_a_pad_key_is_never_read_and_leaves_the_backward_row_empty():
    H, d, T = 4, 8, 4
    mha = uniform_attention(H, d)
    x = torch.randn(1, T, d)
    pad = torch.tensor([[False, False, False, True]])
    out, _ = mha(x, key_pad_mask=pad, head_mask=directional_masks(T, H))
    per_head = out.view(1, T, H, 2)
    torch.testing.assert_close(per_head[0, 2, 2], torch.zeros(2))             # key 3 is a pad: nothing after 2
    torch.testing.assert_close(per_head[0, 1, 3], x[0, 2, 6:8])               # keys 2 and 3 -> only 2
    torch.testing.assert_close(per_head[0, 3, 0], x[0, :3, 0:2].mean(0))      # forward heads unchanged


def tiny(**kw):
    return TransformerConfig.from_preset("tiny", src_vocab_size=16, **kw)


def test_order_matters_with_masks_alone_and_no_parameters_are_added():
    torch.manual_seed(0)
    m = build_model(tiny(pe=["disan"])).eval()
    none = build_model(tiny(pe=["none"])).eval()
    none.load_state_dict(m.state_dict())
    assert count_parameters(m) == count_parameters(none)
    src = torch.tensor([[5, 6, 7, 8, 3]])
    swapped = torch.tensor([[6, 5, 7, 8, 3]])
    # without positions, swapping two tokens only swaps their states; with DiSAN the states change
    a, b = none.encode(src).memory, none.encode(swapped).memory
    torch.testing.assert_close(a[0, 2:], b[0, 2:])
    a, b = m.encode(src).memory, m.encode(swapped).memory
    assert (a[0, 2:] - b[0, 2:]).abs().max() > 1e-3


def test_disan_layers_limits_the_masks_to_the_lowest_layers():
    torch.manual_seed(0)
    full = build_model(tiny(pe=["disan"])).eval()
    lowest = build_model(tiny(pe=["disan"], pe_options={"disan_layers": 1})).eval()
    lowest.load_state_dict(full.state_dict())
    src = torch.tensor([[5, 6, 7, 8, 3]])
    assert (full.encode(src).memory - lowest.encode(src).memory).abs().max() > 1e-4
    enc = lowest.encoder
    ctx = EncodingContext(src, torch.zeros(1, 5, 32), src.eq(0))
    assert enc.pe[0].head_mask(ctx, 0) is not None and enc.pe[0].head_mask(ctx, 1) is None


@pytest.mark.parametrize("options, match", [({"disan_layers": 9}, "disan_layers"),
                                            ({"disan_layers": -1}, "disan_layers"),
                                            ({"disan_diagonal": "yes"}, "disan_diagonal")])
def test_bad_options_fail_when_the_config_is_made(options, match):
    with pytest.raises(ConfigError, match=match):
        tiny(pe=["disan"], pe_options=options)


def test_encoder_free_model_refuses_disan():
    with pytest.raises(ConfigError, match="encoder-free"):
        tiny(pe=["disan"], encoder_free=True)
