"""npu_apply_adam, npu_apply_adam_w(_out) and npu_bert_apply_adam against float64 goldens.

Goldens: the documented formulas (aclnnApplyAdamD.md, aclnnApplyAdamW.md, ApplyAdamV2's
README and kernel) written per element in Python floats, plus torch.optim.AdamW itself for the
AdamW step (``beta*_power`` there are the powers of the previous step).
"""

from __future__ import annotations

import math

import pytest
import torch

import npu_anywhere as na
from npu_anywhere.testing.tolerances import assert_close_to_golden


def state(shape, dtype, seed=0):
    gen = torch.Generator().manual_seed(seed)
    var, m, grad = (torch.randn(*shape, generator=gen).to(dtype) for _ in range(3))
    v = torch.rand(*shape, generator=gen).to(dtype)
    return var, m, v, grad


def r(x, dtype):
    """A Python scalar rounded to ``dtype`` as the NPU adapter passes it."""
    return float(torch.tensor(x, dtype=dtype))


def tol(dtype):
    return {torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}[dtype]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("nesterov", [False, True])
def test_apply_adam(dtype, nesterov):
    var, m, v, grad = state((3, 7), dtype)
    b1p, b2p, lr, b1, b2, eps = (r(x, dtype) for x in (0.9 ** 4, 0.999 ** 4, 0.05, 0.9, 0.999,
                                                       1e-6))
    want = [[], [], []]
    for p, mm, vv, g in zip(*(t.double().flatten().tolist() for t in (var, m, v, grad))):
        lr_t = lr * math.sqrt(1 - b2p) / (1 - b1p)
        mm = b1 * mm + (1 - b1) * g
        vv = b2 * vv + (1 - b2) * g * g
        num = b1 * mm + (1 - b1) * g if nesterov else mm
        want[0].append(p - lr_t * num / (eps + math.sqrt(vv)))
        want[1].append(mm)
        want[2].append(vv)
    grad_before = grad.clone()
    out = na.npu_apply_adam(0.9 ** 4, 0.999 ** 4, 0.05, 0.9, 0.999, 1e-6, grad, False, nesterov,
                            out=(var, m, v))
    assert out[0] is var and out[1] is m and out[2] is v
    for got, w in zip(out, want):
        assert got.dtype == dtype
        assert_close_to_golden(got, torch.tensor(w, dtype=torch.float64).view(3, 7),
                               rtol=tol(dtype), atol=tol(dtype))
    assert torch.equal(grad, grad_before)


@pytest.mark.parametrize("amsgrad,maximize", [(False, False), (True, True)])
def test_apply_adam_w_matches_torch_adamw(amsgrad, maximize):
    gen = torch.Generator().manual_seed(1)
    param = torch.randn(4, 6, generator=gen, dtype=torch.float64)
    lr, wd, betas, eps = 0.01, 0.1, (0.9, 0.99), 1e-8
    torch_param = param.clone().requires_grad_()
    opt = torch.optim.AdamW([torch_param], lr=lr, betas=betas, eps=eps, weight_decay=wd,
                            amsgrad=amsgrad, maximize=maximize)
    var, m, v = param.clone(), torch.zeros_like(param), torch.zeros_like(param)
    max_v = torch.zeros_like(param)
    for step in range(1, 4):
        grad = torch.randn(4, 6, generator=gen, dtype=torch.float64)
        torch_param.grad = grad.clone()
        opt.step()
        na.npu_apply_adam_w_out(betas[0] ** (step - 1), betas[1] ** (step - 1), lr, wd,
                                betas[0], betas[1], eps, grad, max_v if amsgrad else None,
                                amsgrad, maximize, var, m, v)
        torch.maximum(max_v, v, out=max_v)       # the caller keeps the AMSGrad maximum
        assert_close_to_golden(var, torch_param.detach(), rtol=1e-12, atol=1e-12)
    assert_close_to_golden(m, opt.state[torch_param]["exp_avg"])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_apply_adam_w_half_rounds_scalars_and_results_once(dtype):
    var, m, v, grad = state((5, 3), dtype, seed=2)
    mgn = v + 0.01
    var0, m0, v0 = var.clone(), m.clone(), v.clone()
    na.npu_apply_adam_w(0.9, 0.99, 1e-3, 0.01, 0.9, 0.99, 1e-8, grad, mgn, True, False,
                        out=(var, m, v))
    b1p, b2p, lr, wd, b1, b2, eps = (r(x, dtype) for x in (0.9, 0.99, 1e-3, 0.01, 0.9, 0.99, 1e-8))
    g, m64, v64, p = grad.double(), m0.double(), v0.double(), var0.double()
    m_new = m64 * b1 + (1 - b1) * g
    v_new = v64 * b2 + (1 - b2) * g * g
    denom = (torch.maximum(mgn.double(), v_new) / (1 - b2p * b2)).sqrt() + eps
    want = p * (1 - lr * wd) - lr * m_new / (1 - b1p * b1) / denom
    assert_close_to_golden(var, want, rtol=tol(dtype), atol=tol(dtype))
    assert_close_to_golden(m, m_new, rtol=tol(dtype), atol=1e-6)
    assert_close_to_golden(v, v_new, rtol=tol(dtype), atol=1e-6)


def bert_golden(var, m, v, grad, lr, b1, b2, eps, mgn, ggn, wd, step_size, mode):
    clip = 1.0
    if mode == 0 and not (math.isnan(ggn) or abs(ggn) > 1e30):
        ggn = 1.0 if ggn < 1e-10 else ggn
        clip = 1.0 / ggn if (mgn > 0 and ggn > 1) else 1.0
    out = [[], [], []]
    for p, mm, vv, g in zip(*(t.double().flatten().tolist() for t in (var, m, v, grad))):
        g = g * clip
        mm = b1 * mm + (1 - b1) * g
        vv = b2 * vv + (1 - b2) * g * g
        u = mm / (math.sqrt(vv) + eps)
        if mode == 0:
            p = p - lr * (u + (wd * p if wd > 0 else 0.0))
        else:
            p = p - (lr if step_size is None else step_size) * u - (lr * wd * p if wd > 0 else 0)
        for lst, val in zip(out, (p, mm, vv)):
            lst.append(val)
    return [torch.tensor(o, dtype=torch.float64).view(var.shape) for o in out]


@pytest.mark.parametrize("mode,mgn,ggn,wd,step_size", [
    (0, 1.0, 4.0, 0.01, None),       # clipped by 1 / global_grad_norm, weight decay
    (0, -1.0, 4.0, -0.5, None),      # no clipping (max_grad_norm <= 0), negative decay ignored
    (0, 1.0, float("nan"), 0.0, None),
    (1, 1.0, 4.0, 0.02, 3e-3),       # mbart: no clipping, step_size
    (1, 1.0, 4.0, 0.02, None),       # mbart: step_size defaults to lr
])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_bert_apply_adam(mode, mgn, ggn, wd, step_size, dtype):
    var, m, v, grad = state((2, 9), dtype, seed=3)
    scalars = (0.01, 0.9, 0.99, 1e-6)
    want = bert_golden(var, m, v, grad, *(r(s, dtype) for s in scalars), r(mgn, dtype),
                       r(ggn, dtype), r(wd, dtype),
                       None if step_size is None else r(step_size, dtype), mode)
    out = na.npu_bert_apply_adam(*scalars, grad, mgn, ggn, wd, step_size, mode, out=(var, m, v))
    assert out[0] is var
    for got, w in zip(out, want):
        assert_close_to_golden(got, w, rtol=tol(dtype), atol=tol(dtype))


def test_non_contiguous_state_is_written_in_place():
    base = torch.randn(6, 4, dtype=torch.float64)
    var = base.t()                                  # non-contiguous view
    m, v = torch.zeros(4, 6, dtype=torch.float64), torch.ones(4, 6, dtype=torch.float64)
    grad = torch.randn(4, 6, dtype=torch.float64)
    expected = var.clone()
    na.npu_apply_adam(0.5, 0.5, 0.1, 0.9, 0.999, 1e-8, grad, None, None, var=var, m=m, v=v)
    m_new = 0.1 * grad
    v_new = 0.999 + 0.001 * grad * grad
    expected -= 0.1 * math.sqrt(0.5) / 0.5 * m_new / (1e-8 + v_new.sqrt())
    assert_close_to_golden(base.t(), expected)


def test_bad_calls_leave_the_state_untouched():
    var, m, v, grad = state((3, 4), torch.float32)
    before = [t.clone() for t in (var, m, v)]
    with pytest.raises(RuntimeError, match="npu_apply_adam_w: expected max_grad_norm a tensor"):
        na.npu_apply_adam_w(0.9, 0.99, 1e-3, 0.0, 0.9, 0.99, 1e-8, grad, None, True, False,
                            out=(var, m, v))
    with pytest.raises(RuntimeError, match="npu_bert_apply_adam: expected m the shape of var"):
        na.npu_bert_apply_adam(0.1, 0.9, 0.99, 1e-6, grad, 1.0, 1.0, 0.0,
                               out=(var, torch.zeros(4), v))
    with pytest.raises(RuntimeError, match="npu_apply_adam: expected out the tensors"):
        na.npu_apply_adam(0.9, 0.9, 0.1, 0.9, 0.9, 1e-8, grad, False, False)
    with pytest.raises(TypeError, match="npu_apply_adam: expected grad the same dtype"):
        torch.ops.npu.npu_apply_adam.out(0.9, 0.9, 0.1, 0.9, 0.9, 1e-8, grad.double(), False,
                                         False, var=var, m=m, v=v)
    for t, b in zip((var, m, v), before):
        assert torch.equal(t, b)


def test_one_element_tensor_scalars_are_taken_as_numbers():
    var, m, v, grad = state((8,), torch.float32, seed=4)
    copies = [t.clone() for t in (var, m, v)]
    scalars = (0.9, 0.99, 1e-3, 0.01, 0.9, 0.99, 1e-8)
    na.npu_apply_adam_w(*(torch.tensor([s]) for s in scalars), grad, None, False, False,
                        out=(var, m, v))
    na.npu_apply_adam_w(*scalars, grad, None, False, False, out=tuple(copies))
    for a, b in zip((var, m, v), copies):
        assert torch.equal(a, b)
