"""Shaw RPE (SPEC §2) against a naive double loop over (i, j) written from the paper's formulas."""

import math

import pytest
import torch

from xlpe.nn.attention import MultiheadAttention
from xlpe.nn.positions import RelativeTerms, relative_index




def naive_attention(mha, x, pad, terms):
    """e_ij = q_i.(k_j + sum_p aK_p(i,j)) / sqrt(dk); z_i = sum_j alpha_ij (v_j + sum_p aV_p(i,j)); one pair at a
    time."""
    B, T, d = x.shape
    H, dk = mha.n_heads, mha.d_k
    q = mha.q_proj(x).view(B, T, H, dk)
    k = mha.k_proj(x).view(B, T, H, dk)
    v = mha.v_proj(x).view(B, T, H, dk)

    def a(which, b, i, j):
        out = torch.zeros(dk)
        for t in terms:
            table = t.table_k if which == "k" else t.table_v
            idx = t.index[i, j] if t.index.dim() == 2 else t.index[b, i, j]
            if table is not None:
                out = out + table[idx]
        return out

    z = torch.zeros(B, T, H, dk)
    for b in range(B):
        for h in range(H):
            for i in range(T):
                e = torch.full((T,), float("-inf"))
                for j in range(T):
                    if not pad[b, j]:
                        e[j] = q[b, i, h] @ (k[b, j, h] + a("k", b, i, j)) / math.sqrt(dk)
                alpha = e.softmax(0)
                for j in range(T):
                    z[b, i, h] += alpha[j] * (v[b, j, h] + a("v", b, i, j))
    return mha.out_proj(z.reshape(B, T, d))


def test_relative_index_is_key_minus_query_clipped():
    idx = relative_index(5, 2)
    assert idx.tolist()[1] == [1, 2, 3, 4, 4]      # query 1: keys 0..4 -> j-i = -1,0,1,2,3 -> clip 2 -> +k
    assert idx[0, 4] == 4 and idx[4, 0] == 0 and (idx.diagonal() == 2).all()


@pytest.mark.parametrize("per_sentence", [False, True])
def test_rpe_matches_naive_loop(per_sentence):
    torch.manual_seed(0)
    B, T, d, H, k = 2, 6, 16, 2, 2
    mha = MultiheadAttention(d, H).eval()
    x = torch.randn(B, T, d)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, 4:] = True
    tk, tv = torch.randn(2 * k + 1, d // H), torch.randn(2 * k + 1, d // H)
    if per_sentence:   # e.g. structural relative positions: a different index matrix per sentence
        index = torch.randint(0, 2 * k + 1, (B, T, T))
    else:
        index = relative_index(T, k)
    terms = [RelativeTerms(index, tk, tv)]
    out, _ = mha(x, key_pad_mask=pad, rel=terms)
    ref = naive_attention(mha, x, pad, terms)
    assert torch.allclose(out[~pad], ref[~pad], atol=1e-5)


def test_two_tables_are_summed_and_key_only_works():
    """SPEC §3.3 default: sequential + structural tables, summed; plus a K-only term."""
    torch.manual_seed(1)
    B, T, d, H, k = 2, 5, 8, 2, 3
    mha = MultiheadAttention(d, H).eval()
    x = torch.randn(B, T, d)
    pad = torch.zeros(B, T, dtype=torch.bool)
    terms = [RelativeTerms(relative_index(T, k), torch.randn(2 * k + 1, 4), torch.randn(2 * k + 1, 4)),
             RelativeTerms(torch.randint(0, 7, (B, T, T)), torch.randn(7, 4), None)]
    out, w = mha(x, key_pad_mask=pad, rel=terms, need_weights=True)
    assert torch.allclose(out, naive_attention(mha, x, pad, terms), atol=1e-5)
    assert torch.allclose(w.sum(-1), torch.ones(B, H, T))


def test_zero_tables_equal_plain_attention():
    torch.manual_seed(2)
    mha = MultiheadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    zero = RelativeTerms(relative_index(5, 2), torch.zeros(5, 4), torch.zeros(5, 4))
    assert torch.allclose(mha(x, rel=[zero])[0], mha(x)[0], atol=1e-6)


def test_gathered_relative_attention_equals_the_dense_tables_with_per_sentence_indices():
    """The efficient path (scores gathered from q·table_kᵀ, weights scatter-added into buckets) equals the
    naive O(B·T²·d_k) form with dense per-sentence tables, for a mix of a shared and a per-sentence index."""
    from xlpe.nn.attention import MultiheadAttention
    torch.manual_seed(0)
    B, T, d, H, R = 3, 7, 16, 2, 9
    att = MultiheadAttention(d, H).eval()
    x = torch.randn(B, T, d)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, 5:] = True
    shared = RelativeTerms(torch.randint(0, R, (T, T)), torch.randn(R, d // H), torch.randn(R, d // H))
    per = RelativeTerms(torch.randint(0, R, (B, T, T)), torch.randn(R, d // H), torch.randn(R, d // H))
    out, w = att(x, key_pad_mask=pad, rel=[shared, per], need_weights=True)
    # naive reference
    q, k, v = (att._split(lin(x)) for lin in (att.q_proj, att.k_proj, att.v_proj))
    a_k = shared.table_k[shared.index][None] + per.table_k[per.index]                # (B, T, T, d_k)
    a_v = shared.table_v[shared.index][None] + per.table_v[per.index]
    scores = (q @ k.transpose(-1, -2) + torch.einsum("bhid,bijd->bhij", q, a_k)) / math.sqrt(d // H)
    scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    alpha = scores.softmax(-1)
    ref = alpha @ v + torch.einsum("bhij,bijd->bhid", alpha, a_v)
    ref = att.out_proj(ref.transpose(1, 2).reshape(B, T, d))
    assert torch.allclose(w, alpha, atol=1e-6) and torch.allclose(out, ref, atol=1e-5)
