"""torch_npu.npu_apply_adam_w (out= form) and npu_apply_adam_w_out: one AdamW step in place.

Formula (hicann ops-nn experimental/optim/apply_adam_w/docs/aclnnApplyAdamW.md; the kernel
test golden experimental/optim/apply_adam_w/tests/assets/golden.py and op-plugin's
test/test_custom_ops/test_npu_apply_adam_w.py are followed for the order)::

    g      = -grad if maximize else grad
    m'     = beta1 * m + (1 - beta1) * g
    v'     = beta2 * v + (1 - beta2) * g * g
    b1t    = beta1_power * beta1;   b2t = beta2_power * beta2   # the powers of step t - 1 come in
    vhat   = max(max_grad_norm, v') if amsgrad else v'
    var'   = var * (1 - lr * weight_decay) - lr * m' / (1 - b1t) / (sqrt(vhat / (1 - b2t)) + eps)

``var``, ``m`` and ``v`` are overwritten with ``var'``, ``m'``, ``v'`` (``max_grad_norm`` is read,
never written).  The scalars reach the kernel as 1-element tensors of ``grad``'s dtype
(op-plugin op_plugin/ops/opapi/ApplyAdamWKernelNpuOpApi.cpp), so they are rounded to it first;
the update runs in float32 (float64 kept) and each result is rounded once.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from ... import checks
from ...library import define_out
from . import _common

OP = "npu_apply_adam_w"
OUT_SCHEMA = ("npu_apply_adam_w.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, "
              "Scalar weight_decay, Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, "
              "Tensor? max_grad_norm, bool? amsgrad, bool? maximize, *, Tensor(a!) var, "
              "Tensor(b!) m, Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))")

Number = Union[int, float, bool, torch.Tensor]


def check_apply_adam_w_out(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon,
                           grad, max_grad_norm, amsgrad, maximize, *, var, m, v):
    _common.check_state(OP, grad, var, m, v, _common.FLOATING, min_dims=1)
    if amsgrad:
        checks.expect(max_grad_norm is not None, OP, "max_grad_norm",
                      "a tensor when amsgrad is True", "None", RuntimeError)
    if max_grad_norm is not None:
        checks.expect(max_grad_norm.shape == var.shape, OP, "max_grad_norm",
                      lambda: f"the shape of var {tuple(var.shape)}",
                      lambda: f"shape {tuple(max_grad_norm.shape)}", RuntimeError)
        checks.expect_same_dtype({"var": var, "max_grad_norm": max_grad_norm}, OP)
        checks.expect_same_device({"var": var, "max_grad_norm": max_grad_norm}, OP)


def adam_w_step(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon, grad,
                max_grad_norm, amsgrad, maximize, var, m, v):
    """The new ``(var, m, v)`` in the compute dtype (shared by the out= op and the tests' shape)."""
    dtype = grad.dtype
    ct = _common.compute_dtype(dtype)
    b1p, b2p, lr, wd, b1, b2, eps = (_common.rounded(s, dtype) for s in (
        beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon))
    g = grad.to(ct)
    if maximize:
        g = -g
    m_new = m.to(ct) * b1 + (1.0 - b1) * g
    v_new = v.to(ct) * b2 + (1.0 - b2) * g * g
    b1t = b1p * b1
    b2t = b2p * b2
    second = torch.maximum(max_grad_norm.to(ct), v_new) if amsgrad else v_new
    denom = (second / (1.0 - b2t)).sqrt() + eps
    var_new = var.to(ct) * (1.0 - lr * wd) - lr * (m_new / (1.0 - b1t)) / denom
    return var_new, m_new, v_new


def apply_adam_w_out_reference(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon,
                               grad, max_grad_norm, amsgrad, maximize, *, var, m, v):
    var_new, m_new, v_new = adam_w_step(beta1_power, beta2_power, lr, weight_decay, beta1,
                                        beta2, epsilon, grad, max_grad_norm, bool(amsgrad),
                                        bool(maximize), var, m, v)
    var.copy_(var_new)
    m.copy_(m_new)
    v.copy_(v_new)


_internal, apply_adam_w_out_op = define_out(
    OUT_SCHEMA, check=check_apply_adam_w_out, reference=apply_adam_w_out_reference,
    no_grad="an optimizer step has no backward")


def npu_apply_adam_w(beta1_power: Number, beta2_power: Number, lr: Number,
                     weight_decay: Number, beta1: Number, beta2: Number, epsilon: Number,
                     grad: torch.Tensor, max_grad_norm: Optional[torch.Tensor] = None,
                     amsgrad: Optional[bool] = None, maximize: Optional[bool] = None, *,
                     out: Optional[tuple] = None, var: Optional[torch.Tensor] = None,
                     m: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One AdamW step written into ``out=(var, m, v)``; returns those three tensors.

    Formula (aclnnApplyAdamW.md; ``beta*_power`` are the powers of the previous step)::

        g    = -grad if maximize else grad
        m    = beta1 * m + (1 - beta1) * g;        v = beta2 * v + (1 - beta2) * g ** 2
        b1t  = beta1_power * beta1;                b2t = beta2_power * beta2
        vhat = max(max_grad_norm, v) if amsgrad else v
        var  = var * (1 - lr * weight_decay) - lr * m / (1 - b1t) / (sqrt(vhat / (1 - b2t)) + eps)

    Parameters
    ----------
    beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon : number
        Scalars (a 1-element tensor is taken as its value), rounded to ``grad``'s dtype as
        the NPU adapter does.
    grad : Tensor
        float16, bfloat16 or float32 (float64 too outside strict mode), ``var``'s shape, 1-8 dims.
    max_grad_norm : Tensor, optional
        The running maximum of ``v`` for AMSGrad, ``var``'s shape and dtype; required when
        ``amsgrad``.  Read only: keeping it up to date (``max(max_grad_norm, v)``) is the caller's.
    amsgrad, maximize : bool, optional
        Default False.
    out : tuple of Tensor
        ``(var, m, v)``, updated in place (``var=``, ``m=``, ``v=`` keywords also accepted).

    Returns
    -------
    (var, m, v) : the tensors of ``out``.

    Notes
    -----
    Computed in float32 and rounded once per output (ops-nn's golden).  Without ``out`` the call
    fails, as torch_npu's functional overload does ("not implemented for Tensor").
    """
    var, m, v = _common.outputs(OP, out, var, m, v)
    scalars = (_common.as_number(s) for s in (beta1_power, beta2_power, lr, weight_decay, beta1,
                                              beta2, epsilon))
    return apply_adam_w_out_op(*scalars, grad, max_grad_norm, amsgrad, maximize, var=var, m=m,
                               v=v)


def npu_apply_adam_w_out(beta1_power: Number, beta2_power: Number, lr: Number,
                         weight_decay: Number, beta1: Number, beta2: Number, epsilon: Number,
                         grad: torch.Tensor, max_grad_norm: Optional[torch.Tensor],
                         amsgrad: Optional[bool], maximize: Optional[bool], var: torch.Tensor,
                         m: torch.Tensor, v: torch.Tensor
                         ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Seed 004's spelling of :func:`npu_apply_adam_w` with ``var``, ``m``, ``v`` positional.

    Updates ``var``, ``m`` and ``v`` in place and returns them (op-plugin's
    ``npu_apply_adam_w.out`` overload); see :func:`npu_apply_adam_w` for the formula.
    """
    return npu_apply_adam_w(beta1_power, beta2_power, lr, weight_decay, beta1, beta2, epsilon,
                            grad, max_grad_norm, amsgrad, maximize, var=var, m=m, v=v)


TORCH_NPU_FUNCTIONS = {
    OP: npu_apply_adam_w,
    "npu_apply_adam_w_out": npu_apply_adam_w_out,
}
