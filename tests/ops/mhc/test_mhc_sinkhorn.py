"""npu_mhc_sinkhorn (+ backward) against float64 goldens.

Golden: the doc's iteration (torch_npu-npu_mhc_sinkhorn.md) per matrix in float64 Python
loops: softmax over rows, eps added, a column normalisation, then num_iters - 1 rounds of row
then column normalisation, every sum plus eps.  The saved-intermediate layout is checked at
hand-computed positions; the backward golden is float64 autograd of the iteration.
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.ops.mhc import sinkhorn_layout
from npu_anywhere.testing.tolerances import assert_close_to_golden


def golden_steps(m, eps, iters):
    """One matrix (list of lists): the 2 * iters normalised matrices and the sums."""
    n = len(m)
    prob = []
    for row in m:
        top = max(row)
        e = [math.exp(v - top) for v in row]
        prob.append([v / sum(e) for v in e])
    cur = [[v + eps for v in row] for row in prob]
    norms, row_sums, col_sums = [prob], [], []

    def col_step(cur):
        s = [sum(cur[i][j] for i in range(n)) + eps for j in range(n)]
        col_sums.append(s)
        return [[cur[i][j] / s[j] for j in range(n)] for i in range(n)]

    cur = col_step(cur)
    norms.append(cur)
    for _ in range(iters - 1):
        s = [sum(r) + eps for r in cur]
        row_sums.append(s)
        cur = [[v / s[i] for v in r] for i, r in enumerate(cur)]
        norms.append(cur)
        cur = col_step(cur)
        norms.append(cur)
    return norms, row_sums, col_sums


def golden(x, eps=1e-6, iters=20):
    n = x.shape[-1]
    mats = x.double().reshape(-1, n, n).tolist()
    out = [golden_steps(m, eps, iters)[0][-1] for m in mats]
    return torch.tensor(out, dtype=torch.float64).reshape(x.shape)


@pytest.mark.parametrize("shape,iters", [((5, 4, 4), 20), ((2, 3, 6, 6), 3), ((3, 8, 8), 1)])
def test_forward_against_golden(shape, iters):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 2
    before = x.clone()
    y, norm, sums = na.npu_mhc_sinkhorn(x, num_iters=iters)
    assert torch.equal(x, before) and norm.numel() == sums.numel() == 0
    assert_close_to_golden(y, golden(x, 1e-6, iters), rtol=1e-5, atol=1e-6)
    xt = x.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert torch.equal(torch.ops.npu.npu_mhc_sinkhorn(xt, num_iters=iters)[0], y)


def test_saved_layout_single_token():
    # T = 1: one chunk, norm is [2I, n, 1, 8] and sum is per iteration [8 rows | 8 cols].
    x = torch.randn(1, 4, 4, generator=torch.Generator().manual_seed(1))
    eps, iters = 1e-3, 2
    _, norm, sums = na.npu_mhc_sinkhorn(x, eps=eps, num_iters=iters, out_flag=1)
    assert norm.shape == (2 * iters * 4 * 8,) and sums.shape == (2 * iters * 8,)
    norms, rows, cols = golden_steps(x[0].tolist(), eps, iters)
    want_norm = [norms[k][i][j] if j < 4 else 0.0 for k in range(2 * iters) for i in range(4)
                 for j in range(8)]
    row_slots = [[1.0] * 4] + rows
    want_sum = []
    for k in range(iters):
        want_sum += row_slots[k] + [1.0] * 4 + cols[k] + [0.0] * 4
    assert_close_to_golden(norm, torch.tensor(want_norm, dtype=torch.float64), rtol=1e-5,
                           atol=1e-7)
    assert_close_to_golden(sums, torch.tensor(want_sum, dtype=torch.float64), rtol=1e-5)


def test_chunking_follows_the_kernel_tiling():
    # 64 cores; buffer-bound chunks: n = 4 fits 280 tokens (a multiple of 8) per pass.
    assert sinkhorn_layout.chunk_sizes(65536, 4) == [280, 280, 280, 184] * 64
    assert sinkhorn_layout.chunk_sizes(130, 6) == [3] * 43 + [1]
    assert sinkhorn_layout.chunk_sizes(5, 8) == [1] * 5
    x = torch.randn(130, 4, 4, generator=torch.Generator().manual_seed(2))
    _, norm, sums = na.npu_mhc_sinkhorn(x, num_iters=2, out_flag=1)
    norms, rows, cols = sinkhorn_layout.unpack(norm, sums, 130, 4, 2)
    token = 128                               # core 42's last token (3 per core)
    steps = golden_steps(x[token].tolist(), 1e-6, 2)
    assert_close_to_golden(norms[3, token], torch.tensor(steps[0][3], dtype=torch.float64),
                           rtol=1e-5, atol=1e-7)
    assert_close_to_golden(rows[1, token], torch.tensor(steps[1][0], dtype=torch.float64),
                           rtol=1e-5)
    # token 128 is core 42's third: chunk start 126, so its norm[0] row 0 sits at
    # 126 * 2I*n*8 + (0 * n + 0) * 3 * 8 + 2 * 8 in the flat tensor
    offset = 126 * 2 * 2 * 4 * 8 + 2 * 8
    assert_close_to_golden(norm[offset:offset + 4],
                           torch.tensor(steps[0][0][0], dtype=torch.float64), rtol=1e-5)


@pytest.mark.parametrize("shape,iters", [((6, 4, 4), 4), ((1, 3, 8, 8), 2)])
def test_backward_op_against_golden_autograd(shape, iters):
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(shape, generator=gen)
    grad_y = torch.randn(shape, generator=gen)
    _, norm, sums = na.npu_mhc_sinkhorn(x, num_iters=iters, out_flag=1)
    got = na.npu_mhc_sinkhorn_backward(grad_y, norm, sums)
    xd = x.double().requires_grad_()
    n = shape[-1]
    cur = torch.softmax(xd, -1) + 1e-6
    cur = cur / (cur.sum(-2, keepdim=True) + 1e-6)
    for _ in range(iters - 1):
        cur = cur / (cur.sum(-1, keepdim=True) + 1e-6)
        cur = cur / (cur.sum(-2, keepdim=True) + 1e-6)
    assert_close_to_golden(cur, golden(x, 1e-6, iters), rtol=1e-9)   # same iteration
    (want,) = torch.autograd.grad(cur, xd, grad_y.double())
    assert got.shape == shape and got.dtype == torch.float32 and n in (4, 8)
    assert_close_to_golden(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("out_flag", [0, 1])
def test_autograd_both_flags(out_flag):
    x = torch.randn(3, 4, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    x.requires_grad_()
    torch.autograd.gradcheck(lambda t: na.npu_mhc_sinkhorn(t, num_iters=3,
                                                           out_flag=out_flag)[0], (x,),
                             fast_mode=True)


def test_errors_and_strict_mode():
    with pytest.raises(ValueError, match="npu_mhc_sinkhorn: expected x n \\(its size"):
        na.npu_mhc_sinkhorn(torch.randn(2, 5, 5))
    with pytest.raises(RuntimeError, match="npu_mhc_sinkhorn: expected x square"):
        na.npu_mhc_sinkhorn(torch.randn(2, 4, 6))
    with pytest.raises(TypeError, match="npu_mhc_sinkhorn: expected x dtype in"):
        na.npu_mhc_sinkhorn(torch.randn(2, 4, 4).half())
    with pytest.raises(ValueError, match="expected num_iters in \\[1, 100\\]"):
        na.npu_mhc_sinkhorn(torch.randn(2, 4, 4), num_iters=101)
    with pytest.raises(ValueError, match="expected out_flag one of"):
        na.npu_mhc_sinkhorn(torch.randn(2, 4, 4), out_flag=2)
    _, norm, sums = na.npu_mhc_sinkhorn(torch.randn(2, 4, 4), num_iters=2, out_flag=1)
    with pytest.raises(RuntimeError, match="npu_mhc_sinkhorn_backward: expected norm 2"):
        na.npu_mhc_sinkhorn_backward(torch.randn(3, 4, 4), norm, sums)
    with pytest.raises(RuntimeError, match="npu_mhc_sinkhorn_backward: expected sum 2"):
        na.npu_mhc_sinkhorn_backward(torch.randn(2, 4, 4), norm, sums[:-8])
    with na.strict("950"):
        na.npu_mhc_sinkhorn(torch.randn(2, 4, 4), num_iters=1)
    with na.strict("A2"), pytest.raises(RuntimeError, match="a product the op supports"):
        na.npu_mhc_sinkhorn(torch.randn(2, 4, 4))
