"""npu_dense_lightning_indexer_softmax_lse against a float64 golden written from the doc
formula, query row by query row."""

import pytest
import torch

import npu_anywhere as na


def _golden_rows(q, k, w, causal):
    """q [S1, N1, D], k [S2, N2, D], w [S1, N1] -> (max, sum) [N2, S1] in float64."""
    s1, n1, _ = q.shape
    s2, n2, _ = k.shape
    g = n1 // n2
    mx = torch.zeros(n2, s1, dtype=torch.float64)
    sm = torch.zeros(n2, s1, dtype=torch.float64)
    for n in range(n2):
        for s in range(s1):
            res = []
            for t in range(s2):
                if causal and t > s2 - s1 + s:
                    continue
                res.append(sum(float(w[s, h]) * max(0.0, float(q[s, h].double() @ k[t, n]
                                                              .double()))
                               for h in range(n * g, n * g + g)))
            if not res:                 # a row that sees no key
                mx[n, s], sm[n, s] = float("-inf"), 0.0
                continue
            res = torch.tensor(res, dtype=torch.float64)
            mx[n, s] = res.max()
            sm[n, s] = torch.exp(res - res.max()).sum()
    return mx, sm


@pytest.mark.parametrize("dtype,sparse_mode", [(torch.bfloat16, 3), (torch.float16, 0)])
def test_bsnd_matches_golden(dtype, sparse_mode):
    g = torch.Generator().manual_seed(sparse_mode)
    q = torch.randn(2, 3, 4, 16, generator=g).to(dtype)
    k = torch.randn(2, 5, 2, 16, generator=g).to(dtype)
    w = torch.randn(2, 3, 4, generator=g)          # float32 weights with half inputs
    mx, sm = na.npu_dense_lightning_indexer_softmax_lse(q, k, w, sparse_mode=sparse_mode)
    assert mx.shape == sm.shape == (2, 2, 3) and mx.dtype == sm.dtype == torch.float32
    for b in range(2):
        want_max, want_sum = _golden_rows(q[b], k[b], w[b], sparse_mode == 3)
        torch.testing.assert_close(mx[b].double(), want_max, rtol=1e-4, atol=1e-3)
        torch.testing.assert_close(sm[b].double(), want_sum, rtol=1e-4, atol=1e-3)


def test_tnd_non_contiguous_and_rows_without_keys():
    g = torch.Generator().manual_seed(5)
    q = torch.randn(4, 7, 16, generator=g, dtype=torch.float64).transpose(0, 1)   # [7, 4, 16]
    k = torch.randn(6, 1, 16, generator=g, dtype=torch.float64)
    w = torch.randn(7, 4, generator=g, dtype=torch.float64)
    assert not q.is_contiguous()
    # batch 0: 4 query rows over 2 keys (rows 0 and 1 see none under rightDownCausal)
    mx, sm = torch.ops.npu.npu_dense_lightning_indexer_softmax_lse(
        q, k, w, actual_seq_qlen=[4, 7], actual_seq_klen=[2, 6], layout="TND")
    assert mx.shape == (1, 7)
    assert torch.isinf(mx[0, :2]).all() and (sm[0, :2] == 0).all()
    for rows, keys in ((slice(0, 4), slice(0, 2)), (slice(4, 7), slice(2, 6))):
        want_max, want_sum = _golden_rows(q[rows], k[keys], w[rows], True)
        torch.testing.assert_close(mx[:, rows].double(), want_max)
        torch.testing.assert_close(sm[:, rows].double(), want_sum)


def test_bad_inputs_and_no_backward():
    q = torch.randn(1, 3, 4, 16, dtype=torch.float16)
    k = torch.randn(1, 5, 1, 16, dtype=torch.float16)
    w = torch.randn(1, 3, 4, dtype=torch.float16)
    with pytest.raises(ValueError, match="expected layout one of"):
        na.npu_dense_lightning_indexer_softmax_lse(q, k, w, layout="BNSD")
    with pytest.raises(TypeError, match="expected key_index the same dtype|expected"):
        na.npu_dense_lightning_indexer_softmax_lse(q, k.bfloat16(), w)
    with pytest.raises(RuntimeError, match="expected inputs that do not require grad"):
        na.npu_dense_lightning_indexer_softmax_lse(q.float().requires_grad_(), k.float(), w)
    with na.strict("A2"):
        with pytest.raises(ValueError, match="expected key_index a head count N2 of 1"):
            na.npu_dense_lightning_indexer_softmax_lse(q, torch.cat([k, k], 2), w)
