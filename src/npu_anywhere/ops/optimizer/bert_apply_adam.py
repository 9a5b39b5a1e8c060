"""torch_npu.npu_bert_apply_adam (out= form): one BERT Adam / mBART Adam step in place.

Formula (hicann ops-nn optim/apply_adam_v2: README.md and the kernel
op_kernel/arch35/apply_adam_v2_kernel.h, which decides where they differ)::

    adam (adam_mode 0):
        clip = 1 / global_grad_norm  if max_grad_norm > 0 and global_grad_norm > 1  else 1
               (a NaN / inf global_grad_norm, or one below 1e-10, gives clip = 1)
        g = grad * clip
        m' = beta1 * m + (1 - beta1) * g;   v' = beta2 * v + (1 - beta2) * g * g
        u  = m' / (sqrt(v') + epsilon) [+ weight_decay * var  when weight_decay > 0]
        var' = var - lr * u
    mbart_adam (adam_mode 1):
        m', v' from grad (no clipping);  u = m' / (sqrt(v') + epsilon)
        var' = var - step_size * u [- lr * weight_decay * var  when weight_decay > 0]
        step_size defaults to lr

op-plugin (op_plugin/ops/aclops/BertApplyAdamKernelNpu.cpp) hands the scalars over as tensors of
``var``'s dtype, so they are rounded to it; the kernel computes in float32 and rounds once.
"""

from __future__ import annotations

import math
from typing import Optional, Union

import torch

from ... import checks
from ...library import define_out
from . import _common

OP = "npu_bert_apply_adam"
OUT_SCHEMA = ("npu_bert_apply_adam.out(Scalar lr, Scalar beta1, Scalar beta2, Scalar epsilon, "
              "Tensor grad, Scalar max_grad_norm, Scalar global_grad_norm, Scalar weight_decay, "
              "Scalar? step_size=None, int adam_mode=0, *, Tensor(a!) var, Tensor(b!) m, "
              "Tensor(c!) v) -> (Tensor(a!), Tensor(b!), Tensor(c!))")

Number = Union[int, float, bool, torch.Tensor]


def check_bert_apply_adam_out(lr, beta1, beta2, epsilon, grad, max_grad_norm, global_grad_norm,
                              weight_decay, step_size=None, adam_mode=0, *, var, m, v):
    _common.check_state(OP, grad, var, m, v, _common.HALF_FLOAT, min_dims=0)
    checks.expect(adam_mode in (0, 1), OP, "adam_mode", "0 (adam) or 1 (mbert_adam)",
                  repr(adam_mode), ValueError)


def _clip(max_grad_norm: float, global_grad_norm: float) -> float:
    if math.isnan(global_grad_norm) or abs(global_grad_norm) > 1e30:
        return 1.0
    if global_grad_norm < 1e-10:
        global_grad_norm = 1.0
    if max_grad_norm > 0.0 and global_grad_norm > 1.0:
        return 1.0 / global_grad_norm
    return 1.0


def bert_apply_adam_out_reference(lr, beta1, beta2, epsilon, grad, max_grad_norm,
                                  global_grad_norm, weight_decay, step_size=None, adam_mode=0, *,
                                  var, m, v):
    dtype = var.dtype
    ct = _common.compute_dtype(dtype)
    lr, b1, b2, eps, mgn, ggn, wd = (_common.rounded(s, dtype) for s in (
        lr, beta1, beta2, epsilon, max_grad_norm, global_grad_norm, weight_decay))
    g = grad.to(ct)
    if adam_mode == 0:
        g = g * _clip(mgn, ggn)
    m_new = b1 * m.to(ct) + (1.0 - b1) * g
    v_new = b2 * v.to(ct) + (1.0 - b2) * g * g
    u = m_new / (v_new.sqrt() + eps)
    old = var.to(ct)
    if adam_mode == 0:
        if wd > 0.0:
            u = u + wd * old
        var_new = old - lr * u
    else:
        step = lr if step_size is None else _common.rounded(step_size, dtype)
        u = step * u
        if wd > 0.0:
            u = u + (wd * lr) * old
        var_new = old - u
    var.copy_(var_new)
    m.copy_(m_new)
    v.copy_(v_new)


_internal, bert_apply_adam_out_op = define_out(
    OUT_SCHEMA, check=check_bert_apply_adam_out, reference=bert_apply_adam_out_reference,
    no_grad="an optimizer step has no backward")


def npu_bert_apply_adam(lr: Number, beta1: Number, beta2: Number, epsilon: Number,
                        grad: torch.Tensor, max_grad_norm: Number, global_grad_norm: Number,
                        weight_decay: Number, step_size: Optional[Number] = None,
                        adam_mode: int = 0, *, out: Optional[tuple] = None,
                        var: Optional[torch.Tensor] = None, m: Optional[torch.Tensor] = None,
                        v: Optional[torch.Tensor] = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One BERT Adam (``adam_mode=0``) or mBART Adam (``1``) step written into ``out=(var, m, v)``.

    Formula (ops-nn ApplyAdamV2 kernel, apply_adam_v2_kernel.h)::

        adam:  g = grad * (1 / global_grad_norm if max_grad_norm > 0 and global_grad_norm > 1
                           else 1)
               m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g ** 2
               var = var - lr * (m / (sqrt(v) + epsilon) + weight_decay * var)
        mbart: m, v from grad;  var = var - step_size * m / (sqrt(v) + epsilon)
                                         - lr * weight_decay * var       (step_size default lr)

    The weight-decay term is applied only when ``weight_decay > 0``; a NaN / inf
    ``global_grad_norm`` disables clipping, one below 1e-10 counts as 1.

    Parameters
    ----------
    lr, beta1, beta2, epsilon, max_grad_norm, global_grad_norm, weight_decay, step_size : number
        Scalars (a 1-element tensor is taken as its value), rounded to ``var``'s dtype.
    grad : Tensor
        ``var``'s shape and dtype, float16 or float32 (float64 outside strict mode).
    adam_mode : int
        0 ("adam") or 1 ("mbert_adam"; op-plugin passes "mbart_adam" to the kernel).
    out : tuple of Tensor
        ``(var, m, v)``, updated in place (``var=``, ``m=``, ``v=`` keywords also accepted).

    Returns
    -------
    (var, m, v) : the tensors of ``out``.

    Notes
    -----
    The kernel's clipping rule (``1 / global_grad_norm``) differs from its README's
    (``min(1, max_grad_norm / global_grad_norm)``); the kernel is followed.  torch_npu marks this
    API as planned for deprecation.
    """
    var, m, v = _common.outputs(OP, out, var, m, v)
    scalars = [_common.as_number(s) for s in (lr, beta1, beta2, epsilon)]
    norms = [_common.as_number(s) for s in (max_grad_norm, global_grad_norm, weight_decay)]
    return bert_apply_adam_out_op(*scalars, grad, *norms, _common.as_number(step_size),
                                  adam_mode, var=var, m=m, v=v)


TORCH_NPU_FUNCTIONS = {OP: npu_bert_apply_adam}
