"""torch_npu.npu_apply_adam (out= form): one TF ApplyAdam step in place.

Formula (hicann ops-nn experimental/optim/apply_adam_d/docs/aclnnApplyAdamD.md; op-plugin's
golden test/test_base_ops/test_apply_adam.py; ``beta*_power`` are already ``beta ** t``)::

    lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
    m'   = beta1 * m + (1 - beta1) * grad
    v'   = beta2 * v + (1 - beta2) * grad * grad
    var' = var - lr_t * m' / (epsilon + sqrt(v'))                             (use_nesterov False)
    var' = var - lr_t * (beta1 * m' + (1 - beta1) * grad) / (epsilon + sqrt(v'))   (True)

``var``, ``m``, ``v`` are overwritten.  On A2/A3 op-plugin runs the ApplyAdamD graph op with the
scalars as tensors of ``var``'s dtype (op_plugin/ops/aclops/ApplyAdamKernelNpu.cpp), so they are
rounded to it; the kernel (apply_adam_d_kernel.h) computes in float32 and rounds each result once.
``use_locking`` has no effect on the result.
"""

from __future__ import annotations

from typing import Optional, Union

import torch

from ...library import define_out
from . import _common

OP = "npu_apply_adam"
OUT_SCHEMA = ("npu_apply_adam.out(Scalar beta1_power, Scalar beta2_power, Scalar lr, "
              "Scalar beta1, Scalar beta2, Scalar epsilon, Tensor grad, bool? use_locking, "
              "bool? use_nesterov, *, Tensor(a!) var, Tensor(b!) m, Tensor(c!) v) "
              "-> (Tensor(a!), Tensor(b!), Tensor(c!))")

Number = Union[int, float, bool, torch.Tensor]


def check_apply_adam_out(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad, use_locking,
                         use_nesterov, *, var, m, v):
    _common.check_state(OP, grad, var, m, v, _common.FLOATING, min_dims=0)


def apply_adam_out_reference(beta1_power, beta2_power, lr, beta1, beta2, epsilon, grad,
                             use_locking, use_nesterov, *, var, m, v):
    dtype = var.dtype
    ct = _common.compute_dtype(dtype)
    b1p, b2p, lr, b1, b2, eps = (_common.rounded(s, dtype) for s in (
        beta1_power, beta2_power, lr, beta1, beta2, epsilon))
    g = grad.to(ct)
    # A 0-dim tensor, so that beta1_power = 1 gives inf (and beta2_power > 1 NaN) as the kernel
    # does, rather than a Python ZeroDivisionError.
    lr_t = (torch.tensor(1.0 - b2p, dtype=ct, device=grad.device).sqrt() * lr) / (1.0 - b1p)
    m_new = b1 * m.to(ct) + (1.0 - b1) * g
    v_new = b2 * v.to(ct) + (1.0 - b2) * g * g
    numerator = b1 * m_new + (1.0 - b1) * g if use_nesterov else m_new
    var_new = var.to(ct) - lr_t * numerator / (eps + v_new.sqrt())
    var.copy_(var_new)
    m.copy_(m_new)
    v.copy_(v_new)


_internal, apply_adam_out_op = define_out(
    OUT_SCHEMA, check=check_apply_adam_out, reference=apply_adam_out_reference,
    no_grad="an optimizer step has no backward")


def npu_apply_adam(beta1_power: Number, beta2_power: Number, lr: Number, beta1: Number,
                   beta2: Number, epsilon: Number, grad: torch.Tensor,
                   use_locking: Optional[bool] = None, use_nesterov: Optional[bool] = None, *,
                   out: Optional[tuple] = None, var: Optional[torch.Tensor] = None,
                   m: Optional[torch.Tensor] = None, v: Optional[torch.Tensor] = None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One Adam step (TF ApplyAdam) written into ``out=(var, m, v)``; returns those tensors.

    Formula (aclnnApplyAdamD.md; ``beta1_power = beta1 ** t``, ``beta2_power = beta2 ** t``)::

        lr_t = lr * sqrt(1 - beta2_power) / (1 - beta1_power)
        m    = beta1 * m + (1 - beta1) * grad;     v = beta2 * v + (1 - beta2) * grad ** 2
        var  = var - lr_t * m / (epsilon + sqrt(v))
        use_nesterov: var = var - lr_t * (beta1 * m + (1 - beta1) * grad) / (epsilon + sqrt(v))

    Parameters
    ----------
    beta1_power, beta2_power, lr, beta1, beta2, epsilon : number
        Scalars (a 1-element tensor is taken as its value), rounded to ``var``'s dtype.
    grad : Tensor
        ``var``'s shape and dtype: float16, bfloat16 or float32 (float64 outside strict mode).
    use_locking : bool, optional
        Accepted; no effect on the values.
    use_nesterov : bool, optional
        Nesterov momentum (default False).
    out : tuple of Tensor
        ``(var, m, v)``, updated in place (``var=``, ``m=``, ``v=`` keywords also accepted).

    Returns
    -------
    (var, m, v) : the tensors of ``out``.

    Notes
    -----
    Computed in float32, each output rounded once (ops-nn apply_adam_d_kernel.h).  Without
    ``out`` the call fails, as torch_npu's functional overload does.
    """
    var, m, v = _common.outputs(OP, out, var, m, v)
    scalars = (_common.as_number(s) for s in (beta1_power, beta2_power, lr, beta1, beta2,
                                              epsilon))
    return apply_adam_out_op(*scalars, grad, use_locking, use_nesterov, var=var, m=m, v=v)


TORCH_NPU_FUNCTIONS = {OP: npu_apply_adam}
