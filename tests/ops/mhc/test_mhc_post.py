"""npu_mhc_post (+ backward) against float64 goldens.

Golden: per token, ``y[j] = sum_i h_res[i, j] x[i] + h_post[j] h_out`` (seed 004 writes
H_res^T x), or ``x[j] + h_post[j] h_out`` without h_res, in float64 loops over the streams; the
backward golden is float64 autograd of it.
"""

from __future__ import annotations

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def _inputs(lead=(3,), n=4, d=12, dtype=torch.float16, res=True, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*lead, n, d, generator=gen).to(dtype)
    h_res = torch.rand(*lead, n, n, generator=gen) if res else None
    h_out = torch.randn(*lead, d, generator=gen).to(dtype)
    h_post = torch.rand(*lead, n, generator=gen) * 2
    return x, h_res, h_out, h_post


def golden(x, h_res, h_out, h_post):
    n = x.shape[-2]
    rows = []
    for j in range(n):
        if h_res is None:
            mixed = x[..., j, :].double()
        else:
            mixed = sum(h_res[..., i, j, None].double() * x[..., i, :].double() for i in range(n))
        rows.append(mixed + h_post[..., j, None].double() * h_out.double())
    return torch.stack(rows, -2)


@pytest.mark.parametrize("dtype,lead,n,res", [
    (torch.float16, (3,), 4, True), (torch.bfloat16, (2, 3), 6, True),
    (torch.float16, (1, 2), 8, False),
])
def test_forward_against_golden(dtype, lead, n, res):
    x, h_res, h_out, h_post = _inputs(lead, n, dtype=dtype, res=res)
    before = [t.clone() for t in (x, h_out, h_post)]
    y = na.npu_mhc_post(x, h_res, h_out, h_post)
    assert y.dtype == dtype and y.shape == x.shape
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert_close_to_golden(y, golden(x, h_res, h_out, h_post), rtol=tol, atol=tol)
    assert all(torch.equal(a, b) for a, b in zip(before, (x, h_out, h_post)))


def test_non_contiguous_and_empty():
    x, h_res, h_out, h_post = _inputs((5,))
    xt = x.transpose(0, 1).contiguous().transpose(0, 1)
    rt = h_res.transpose(-1, -2).contiguous().transpose(-1, -2)
    assert not xt.is_contiguous() and not rt.is_contiguous()
    assert torch.equal(na.npu_mhc_post(xt, rt, h_out, h_post),
                       torch.ops.npu.npu_mhc_post(x, h_res, h_out, h_post))
    empty = na.npu_mhc_post(x[:0], h_res[:0], h_out[:0], h_post[:0])
    assert empty.shape == (0, 4, 12)


@pytest.mark.parametrize("dtype,lead,res", [(torch.float16, (3,), True),
                                            (torch.bfloat16, (1, 2), False)])
def test_backward_op_against_golden_autograd(dtype, lead, res):
    x, h_res, h_out, h_post = _inputs(lead, dtype=dtype, res=res, seed=1)
    grad_y = torch.randn(x.shape, generator=torch.Generator().manual_seed(2)).to(dtype)
    got = na.npu_mhc_post_backward(grad_y, x, h_res, h_out, h_post)
    leaves = [x.double().requires_grad_(), (h_res.double() if res else
                                             torch.eye(4, dtype=torch.float64).expand(
                                                 *lead, 4, 4).clone()).requires_grad_(),
              h_out.double().requires_grad_(), h_post.double().requires_grad_()]
    wants = torch.autograd.grad(golden(*leaves), leaves, grad_y.double())
    assert [g.dtype for g in got] == [dtype, torch.float32, dtype, torch.float32]
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    for g, w in zip(got, wants):   # without h_res: its gradient at the identity mixing
        assert g.shape == w.shape
        assert_close_to_golden(g, w, rtol=tol, atol=tol)


def test_autograd_and_gradcheck():
    x, h_res, h_out, h_post = (t.double() for t in _inputs((2,), d=5, seed=3))
    args = [t.requires_grad_() for t in (x, h_res, h_out, h_post)]
    torch.autograd.gradcheck(na.npu_mhc_post, args, fast_mode=True)
    y = na.npu_mhc_post(args[0], None, args[2], args[3])
    grads = torch.autograd.grad(y.sum(), [args[0], args[2], args[3]])
    assert torch.equal(grads[0], torch.ones_like(x))


@pytest.mark.parametrize("case,words", [
    ("x_dtype", "x dtype must be FLOAT16 or BFLOAT16"),
    ("h_post_dtype", "h_post dtype must be FLOAT32"),
    ("x_dim", "x dim must be 3 or 4"),
    ("grad_y_shape", "grad_y shape must be the same as x shape"),
    ("h_res_shape", "h_res shape must be"),
    ("empty", "npu_mhc_post_backward: expected grad_y a non-empty tensor"),
])
def test_backward_errors_carry_the_npu_words(case, words):
    x, h_res, h_out, h_post = _inputs()
    grad_y = torch.zeros_like(x)
    if case == "x_dtype":
        x, grad_y, h_out = x.float(), grad_y.float(), h_out.float()
    elif case == "h_post_dtype":
        h_post = h_post.half()
    elif case == "x_dim":
        x, grad_y, h_out, h_post = x[0], grad_y[0], h_out[0], h_post[0]
    elif case == "grad_y_shape":
        grad_y = grad_y[..., :6]
    elif case == "h_res_shape":
        h_res = torch.rand(3, 4, 8)
    else:
        grad_y, x, h_res, h_out, h_post = grad_y[:0], x[:0], h_res[:0], h_out[:0], h_post[:0]
    with pytest.raises(RuntimeError, match=words):
        na.npu_mhc_post_backward(grad_y, x, h_res, h_out, h_post)


def test_forward_errors_and_strict_mode():
    x, h_res, h_out, h_post = _inputs()
    with pytest.raises(TypeError, match="npu_mhc_post: expected h_out the dtype of x"):
        na.npu_mhc_post(x, h_res, h_out.bfloat16(), h_post)
    with pytest.raises(RuntimeError, match="npu_mhc_post: expected h_post the shape"):
        na.npu_mhc_post(x, h_res, h_out, h_post[..., :2])     # the seed example's [1, 1, 2]
    with na.strict("A3"), pytest.raises(RuntimeError, match="a product the op supports"):
        na.npu_mhc_post(x, h_res, h_out, h_post)
