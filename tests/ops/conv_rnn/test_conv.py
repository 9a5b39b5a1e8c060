"""npu_conv2d / npu_conv3d / npu_convolution / npu_conv_transpose2d / npu_convolution_transpose
and their backward ops against float64 goldens.

Golden for convolution: the doc formula as an explicit sum over kernel taps in float64
(``out[n, co, p] = bias[co] + sum_{ci, k} x[n, ci, p * s - pad + k * d] * w[co, ci, k]``).
Golden for the transposed forms: the docs say "same as torch.nn.functional.conv_transpose2d /
3d", so F.conv_transpose* in float64 with the arguments mapped from the NPU order
(padding, output_padding, stride, dilation).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def _rand(*shape, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)


def conv_golden(x, w, b, stride, padding, dilation, groups):
    """Explicit tap sum, any number of spatial dims, float64."""
    x, w = x.double(), w.double()
    nd = x.dim() - 2
    x = F.pad(x, [p for v in reversed(padding[:nd]) for p in (v, v)])
    n, c_in = x.shape[:2]
    c_out, cg = w.shape[:2]
    kernel = w.shape[2:]
    out_size = [(x.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
                for i in range(nd)]
    out = torch.zeros(n, c_out, *out_size, dtype=torch.float64)
    per_group = c_out // groups
    for idx in torch.cartesian_prod(*[torch.arange(k) for k in kernel]).reshape(-1, nd).tolist():
        window = x
        for i in range(nd):
            start = idx[i] * dilation[i]
            window = window.narrow(2 + i, start, (out_size[i] - 1) * stride[i] + 1)
            window = window[(slice(None),) * (2 + i) + (slice(None, None, stride[i]),)]
        for g in range(groups):
            xs = window[:, g * cg:(g + 1) * cg]
            ws = w[g * per_group:(g + 1) * per_group][(slice(None), slice(None), *idx)]
            out[:, g * per_group:(g + 1) * per_group] += torch.einsum("nc...,oc->no...", xs, ws)
    if b is not None:
        out += b.double().reshape(1, -1, *([1] * nd))
    return out


CASES_2D = [  # (input shape, weight shape, stride, padding, dilation, groups)
    ((2, 4, 7, 6), (6, 2, 3, 2), [2, 1], [1, 0], [1, 2], 2),
    ((1, 3, 5, 9), (5, 3, 1, 3), [1, 3, 1, 1], [0, 2, 0, 0], [1, 1, 1, 1], 1),  # long lists
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("case", CASES_2D)
def test_conv2d_against_golden(case, dtype):
    xs, ws, stride, padding, dilation, groups = case
    x, w, b = _rand(*xs, dtype=dtype), _rand(*ws, dtype=dtype, seed=1), \
        _rand(ws[0], dtype=dtype, seed=2)
    want = conv_golden(x, w, b, stride, padding, dilation, groups)
    for fn in (na.npu_conv2d, na.npu_convolution, torch.ops.npu.npu_conv2d):
        got = fn(x, w, b, stride, padding, dilation, groups)
        assert got.dtype == dtype
        assert_close_to_golden(got, want)


def test_conv3d_and_convolution_3d_against_golden():
    x = _rand(2, 2, 5, 4, 6)[..., ::2]                    # non-contiguous input
    w, b = _rand(4, 1, 2, 3, 2, seed=1), None
    args = ([2, 1, 1], [1, 1, 0], [1, 1, 2], 2)
    want = conv_golden(x, w, b, *args)
    assert_close_to_golden(na.npu_conv3d(x, w, b, *args), want)
    assert_close_to_golden(na.npu_convolution(x, w, b, *args), want)


TRANSPOSE_CASES = [  # (input, weight, padding, output_padding, stride, dilation, groups)
    ((2, 4, 4, 5), (4, 3, 3, 2), [1, 0], [1, 0], [2, 1], [1, 2], 2),
    ((1, 2, 3, 2, 3), (2, 3, 2, 3, 2), [0, 1, 1], [0, 1, 1], [1, 2, 2], [2, 1, 1], 1),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", TRANSPOSE_CASES)
def test_convolution_transpose_against_golden(case, dtype):
    xs, ws, padding, output_padding, stride, dilation, groups = case
    x, w = _rand(*xs, dtype=dtype), _rand(*ws, dtype=dtype, seed=1)
    b = _rand(ws[1] * groups, dtype=dtype, seed=2)
    torch_fn = F.conv_transpose2d if len(xs) == 4 else F.conv_transpose3d
    want = torch_fn(x.double(), w.double(), b.double(), stride, padding, output_padding, groups,
                    dilation)
    fns = [na.npu_convolution_transpose] + ([na.npu_conv_transpose2d] if len(xs) == 4 else [])
    for fn in fns:
        got = fn(x, w, b, padding, output_padding, stride, dilation, groups)
        assert got.dtype == dtype and got.shape == want.shape
        assert_close_to_golden(got, want)


def test_convolution_backward_values_mask_and_autograd():
    x = _rand(2, 4, 7, 6, dtype=torch.float64).requires_grad_()
    w = _rand(6, 2, 3, 2, dtype=torch.float64, seed=1).requires_grad_()
    b = _rand(6, dtype=torch.float64, seed=2).requires_grad_()
    args = ([2, 1], [1, 0], [1, 2], 2)
    grad = _rand(2, 6, 4, 4, dtype=torch.float64, seed=3)
    conv_golden(x, w, b, *args).backward(grad)
    gi, gw, gb = na.npu_convolution_backward(x.detach(), grad, w.detach(), *args,
                                             [True, True, True])
    assert_close_to_golden(gi, x.grad)
    assert_close_to_golden(gw, w.grad)
    assert_close_to_golden(gb, b.grad)
    masked = na.npu_convolution_backward(x.detach(), grad, w.detach(), *args,
                                         [False, True, False])
    assert masked[0].numel() == 0 and masked[2].numel() == 0
    assert_close_to_golden(masked[1], w.grad)
    small = _rand(1, 4, 4, 3, dtype=torch.float64, seed=4).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a, c, d: na.npu_convolution(a, c, d, *args), (small, w, b))
    # half types: grad_weight keeps weight's dtype; golden from the rounded inputs
    xb, gb16, wb = x.detach().bfloat16(), grad.bfloat16(), w.detach().bfloat16()
    half = na.npu_convolution_backward(xb, gb16, wb, *args, [True, True, True])
    assert [t.dtype for t in half] == [torch.bfloat16] * 3
    wr = wb.double().requires_grad_()
    conv_golden(xb.double(), wr, None, *args).backward(gb16.double())
    assert_close_to_golden(half[1], wr.grad)


def test_convolution_transpose_backward_and_autograd():
    x = _rand(1, 4, 3, 4, dtype=torch.float64).requires_grad_()
    w = _rand(4, 2, 2, 3, dtype=torch.float64, seed=1).requires_grad_()
    b = _rand(4, dtype=torch.float64, seed=2).requires_grad_()
    args = ([1, 0], [1, 0], [2, 1], [1, 1], 2)
    out = na.npu_convolution_transpose(x, w, b, *args)
    grad = _rand(*out.shape, dtype=torch.float64, seed=3)
    want = F.conv_transpose2d(x, w, b, [2, 1], [1, 0], [1, 0], 2, [1, 1])
    want.backward(grad)
    gi, gw, gb = na.npu_convolution_transpose_backward(x.detach(), grad, w.detach(), *args,
                                                       [True, True, True])
    for got, ref in ((gi, x.grad), (gw, w.grad), (gb, b.grad)):
        assert_close_to_golden(got, ref)
    assert torch.autograd.gradcheck(
        lambda a, c: na.npu_convolution_transpose(a, c, None, *args), (x, w))


def test_plain_forms_are_not_differentiable():
    x = _rand(1, 2, 4, 4).requires_grad_()
    with pytest.raises(RuntimeError, match="npu_conv2d: expected inputs that do not require"):
        na.npu_conv2d(x, _rand(3, 2, 3, 3), None, [1, 1], [0, 0], [1, 1], 1)


@pytest.mark.parametrize("call, match", [
    (lambda: na.npu_conv2d(_rand(1, 4, 5, 5), _rand(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1],
                           1), "npu_conv2d: expected weight size\\(1\\) equal to in_channels"),
    (lambda: na.npu_conv2d(_rand(1, 2, 2, 2), _rand(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1],
                           1), "npu_conv2d: expected input spatial sizes that give a positive"),
    (lambda: na.npu_conv2d(_rand(1, 2, 5, 5), _rand(4, 2, 3, 3), None, [0, 1], [0, 0], [1, 1],
                           1), "npu_conv2d: expected stride entries >= 1"),
    (lambda: na.npu_conv3d(_rand(1, 2, 5, 5), _rand(4, 2, 3, 3), None, [1, 1], [0, 0], [1, 1],
                           1), "npu_conv3d: expected input a 5-D tensor"),
    (lambda: na.npu_convolution(_rand(1, 2, 5, 5), _rand(4, 2, 3, 3).half(), None, [1, 1],
                                [0, 0], [1, 1], 1), "npu_convolution: expected weight the same"),
])
def test_bad_inputs(call, match):
    with pytest.raises(RuntimeError, match=match):
        call()


def test_strict_mode_rejects_float64():
    with na.strict("A2"), pytest.raises(TypeError, match="npu_convolution: expected input dtype"):
        na.npu_convolution(_rand(1, 2, 5, 5, dtype=torch.float64),
                           _rand(4, 2, 3, 3, dtype=torch.float64), None, [1, 1], [0, 0],
                           [1, 1], 1)


def test_per_rank_backward_ops_match_the_generic_ones():
    x, w = _rand(1, 2, 5, 4), _rand(3, 2, 2, 2, seed=1)
    grad = _rand(1, 3, 4, 3, seed=2)
    args = ([1, 1], [0, 0], [1, 1], 1, [True, True, True])
    for got, ref in zip(na.npu_conv2d_backward(x, grad, w, *args),
                        na.npu_convolution_backward(x, grad, w, *args)):
        assert torch.equal(got, ref)
    x3, w3 = _rand(1, 2, 3, 3, 2), _rand(2, 3, 2, 2, 1, seed=1)
    targs = ([0, 0, 0], [0, 0, 0], [1, 1, 1], [1, 1, 1], 1, [True, True, True])
    g3 = _rand(1, 3, 4, 4, 2, seed=2)
    for got, ref in zip(na.npu_conv_transpose3d_backward(x3, g3, w3, *targs),
                        na.npu_convolution_transpose_backward(x3, g3, w3, *targs)):
        assert torch.equal(got, ref)
    with pytest.raises(RuntimeError, match="npu_conv3d_backward: expected input a 5-D tensor"):
        na.npu_conv3d_backward(x, grad, w, *args)
