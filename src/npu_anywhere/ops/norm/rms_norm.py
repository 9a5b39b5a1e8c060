"""torch_npu.npu_rms_norm and npu_rms_norm_backward.

Formula (seed 004 ``npu_rms_norm``; aclnnRmsNorm)::

    rstd = 1 / sqrt(mean(self^2 over the trailing gamma.dim() dims) + epsilon)
    y    = self * rstd * gamma

Precision: float32 throughout, y rounded once to self's dtype (see ``rms_core``).
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import rms_core
from .rms_core import check_gamma, rms_norm_fp32, rstd_shape, stat_dtype

OP = "npu_rms_norm"
SCHEMA = "npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)"
BACKWARD_OP = "npu_rms_norm_backward"
BACKWARD_SCHEMA = ("npu_rms_norm_backward(Tensor dy, Tensor self, Tensor gamma, Tensor rstd) "
                   "-> (Tensor, Tensor)")

# (self dtype, gamma dtype) pairs of the aclnnRmsNorm dtype table.  A2/A3/950 accept all of
# them; the Atlas inference (310P) and training (910) lines only the same-dtype fp16/fp32 pairs.
_PAIRS = {
    (torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.float32), (torch.float16, torch.float32),
    (torch.bfloat16, torch.float32),
}
_OLD_PAIRS = {(torch.float16, torch.float16), (torch.float32, torch.float32)}
_SUPPORTED = frozenset({Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE, Product.A2, Product.A3,
                        Product.ASCEND_950})
_BACKWARD_SUPPORTED = _SUPPORTED


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_dtype_pair(op: str, x: torch.Tensor, gamma: torch.Tensor, *, x_name: str = "self",
                     mixed_ok: bool = True) -> None:
    """self/gamma dtypes: a documented pair (float64 with float64 outside strict mode)."""
    product = targets.current()
    allowed = FLOATING_OR_DOUBLE if product is None else FLOATING
    checks.expect_dtype(x, allowed, op, x_name)
    checks.expect_dtype(gamma, allowed, op, "gamma")
    pairs = set(_PAIRS if mixed_ok else {p for p in _PAIRS if p[0] == p[1]})
    if product in (Product.ATLAS_TRAINING, Product.ATLAS_INFERENCE):
        pairs &= _OLD_PAIRS
    if product is None:
        pairs.add((torch.float64, torch.float64))
    ok = (x.dtype, gamma.dtype) in pairs
    if not ok:
        allowed_gamma = sorted(_name(g) for s, g in pairs if s == x.dtype)
        where = f" on {product.value}" if product is not None else ""
        if not allowed_gamma:
            checks.expect(False, op, x_name, lambda: f"a dtype in the documented table{where}",
                          _name(x.dtype), TypeError)
        checks.expect(False, op, "gamma",
                      lambda: f"dtype in {allowed_gamma} for {x_name} {_name(x.dtype)}{where}",
                      _name(gamma.dtype), TypeError)


def _check_strict(op: str, x: torch.Tensor, supported, *, tail_rule: bool = True) -> None:
    product = targets.expect_supported(op, supported)
    if tail_rule and product == Product.ATLAS_INFERENCE:
        # aclnnRmsNorm: on Atlas inference products the tail axis must hold >= 32 bytes.
        nbytes = x.shape[-1] * x.element_size()
        checks.expect(nbytes >= 32, op, "self",
                      "a last dim of at least 32 bytes on 310P", lambda: f"{nbytes} bytes",
                      ValueError)


def check_rms_norm(self, gamma, epsilon=1e-06):
    check_dtype_pair(OP, self, gamma)
    checks.expect_same_device({"self": self, "gamma": gamma}, OP)
    check_gamma(OP, self, gamma)
    _check_strict(OP, self, _SUPPORTED)


def _round_before_gamma(x: torch.Tensor) -> bool:
    # The Atlas training (910) kernel rounds x * rstd to float16 before the gamma multiply
    # (ops-nn norm/rms_norm/op_kernel/rms_norm_whole_reduce_sum.h, tiling keys 1010/1110).
    return x.dtype == torch.float16 and targets.current() is Product.ATLAS_TRAINING


def _rms_norm_body(self, gamma, epsilon, round_before_gamma):
    y, rstd = rms_norm_fp32(self, gamma, epsilon,
                            round_normalized=self.dtype if round_before_gamma else None)
    return y.to(self.dtype), rstd.to(stat_dtype(self.dtype))


def rms_norm_reference(self, gamma, epsilon=1e-06):
    return _rms_norm_body(self, gamma, epsilon, _round_before_gamma(self))


def check_rms_norm_backward(dy, self, gamma, rstd):
    op = BACKWARD_OP
    check_dtype_pair(op, self, gamma)
    checks.expect(dy.dtype == self.dtype, op, "dy",
                  lambda: f"the dtype of self ({_name(self.dtype)})", lambda: _name(dy.dtype),
                  TypeError)
    stat = (torch.float32,) if targets.current() is not None else (torch.float32, torch.float64)
    checks.expect_dtype(rstd, stat, op, "rstd")
    checks.expect_same_device({"dy": dy, "self": self, "gamma": gamma, "rstd": rstd}, op)
    check_gamma(op, self, gamma)
    checks.expect(dy.shape == self.shape, op, "dy",
                  lambda: f"the shape of self {tuple(self.shape)}", lambda: tuple(dy.shape))
    keep = rstd_shape(self.shape, gamma.dim())
    lead = keep[:self.dim() - gamma.dim()]
    checks.expect(tuple(rstd.shape) == keep or tuple(rstd.shape) == lead, op, "rstd",
                  lambda: f"shape {keep} (or {lead})", lambda: tuple(rstd.shape))
    _check_strict(op, self, _BACKWARD_SUPPORTED, tail_rule=False)


def rms_norm_backward_reference(dy, self, gamma, rstd):
    """dx = rstd * (dy*g - xhat * mean(dy*g*xhat));  dgamma = sum over leading dims of dy*xhat."""
    ct = rms_core.compute_dtype(self.dtype)
    k = gamma.dim()
    lead = self.dim() - k
    dims = rms_core.norm_dims(self.dim(), k)
    r = rstd.to(ct).reshape(rstd_shape(self.shape, k))
    xhat = self.to(ct) * r
    g = dy.to(ct)
    dyg = g * gamma.to(ct)
    dx = (dyg - xhat * (dyg * xhat).mean(dims, keepdim=True)) * r
    gx = g * xhat
    dgamma = gx.sum(tuple(range(lead))) if lead else gx
    return dx.to(self.dtype), dgamma.to(stat_dtype(self.dtype))


rms_norm_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_rms_norm,
                    reference=rms_norm_reference, metadata_check=True,
                    info=OpInfo(api="torch_npu"))
rms_norm_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                             check=check_rms_norm_backward,
                             reference=rms_norm_backward_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    x, gamma, _ = inputs
    _, rstd = output
    # derivatives.yaml: output_differentiability [true, false]
    ctx.mark_non_differentiable(rstd)
    ctx.save_for_backward(x, gamma, rstd)


def _backward(ctx, dy, _drstd):
    x, gamma, rstd = ctx.saved_tensors
    need_x, need_gamma = ctx.needs_input_grad[:2]
    if not (need_x or need_gamma):
        return None, None, None
    dx, dgamma = rms_norm_backward_op(dy.to(x.dtype), x, gamma, rstd)
    return (dx if need_x else None, dgamma.to(gamma.dtype) if need_gamma else None, None)


rms_norm_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_rms_norm(self, gamma, epsilon=1e-06):
    """RMSNorm returning ``(y, rstd)``.

    Formula (seed 004; aclnnRmsNorm)::

        rstd = 1 / sqrt(mean(self^2 over the trailing gamma.dim() dims) + epsilon)
        y    = self * rstd * gamma

    Parameters
    ----------
    self : Tensor
        1-D to 8-D, float16, bfloat16 or float32 (float64 also accepted outside strict mode).
        Empty tensors are supported.
    gamma : Tensor
        Scale over the normalized dims: ``gamma.shape == self.shape[-k:]`` with
        ``1 <= k <= self.dim()`` (usually ``k = 1``, the hidden size).  Dtype: the same as
        ``self``, or float32 with float16/bfloat16 ``self`` (A2/A3/950 only).
    epsilon : float
        Added to the mean of squares (default 1e-6).

    Returns
    -------
    y : Tensor
        Same shape and dtype as ``self`` (computed in float32, rounded once).
    rstd : Tensor
        float32 (float64 for float64 input), shape ``self.shape[:-k] + (1,) * k``.

    Constraints
    -----------
    Products: Atlas training (910), Atlas inference (310P), A2, A3, 950.  310P and 910 accept
    only the float16/float16 and float32/float32 pairs; on 310P the last dim must hold at
    least 32 bytes.  Strict mode rejects float64.

    Notes
    -----
    Autograd: ``y`` is differentiable w.r.t. ``self`` and ``gamma`` through
    ``npu_rms_norm_backward`` (op-plugin derivatives.yaml; ``rstd`` is not differentiable).
    Precision follows the NPU kernel (hicann/ops-nn ``norm/rms_norm/op_kernel/rms_norm.h`` and
    ``tests/assets/golden.py``; op-plugin ``test/test_custom_ops/test_npu_rms_norm.py``): x
    upcast to float32, ``(x * rstd) * gamma`` in float32, one rounding.  Only under
    ``strict("910")`` with float16 is ``x * rstd`` rounded to float16 before the gamma
    multiply, as that product's kernel does (``rms_norm_whole_reduce_sum.h``).  The seed
    says "2-8 dims" for self and gamma, but its own example passes a 1-D gamma; the aclnn doc
    (1-8 dims for both) is followed.

    Examples
    --------
    >>> x = torch.randn(24, 1, 128); w = torch.randn(128)
    >>> y, rstd = npu_anywhere.npu_rms_norm(x, w, epsilon=1e-5)
    >>> y.shape, rstd.shape, rstd.dtype
    (torch.Size([24, 1, 128]), torch.Size([24, 1, 1]), torch.float32)
    """
    return rms_norm_op(self, gamma, epsilon)


def npu_rms_norm_backward(dy, self, gamma, rstd):
    """Gradients of :func:`npu_rms_norm`: ``(dx, dgamma)``.

    Formula (aclnnRmsNormGrad)::

        xhat   = self * rstd
        dx     = rstd * (dy * gamma - xhat * mean(dy * gamma * xhat over the normalized dims))
        dgamma = sum over the leading dims of dy * xhat

    ``rstd`` is the forward's second output (shape ``self.shape[:-k] + (1,) * k``, or
    ``self.shape[:-k]``), float32.  ``dx`` has self's dtype; ``dgamma`` has gamma's shape and is
    float32 (float64 for float64 input), as op-plugin's meta registration gives.  Computed in
    float32 from the given ``rstd`` (not recomputed).
    """
    return rms_norm_backward_op(dy, self, gamma, rstd)


# -- fast providers --------------------------------------------------------------------------

def _bind(self, gamma, epsilon=1e-06):
    return self, gamma, epsilon


rms_core.register_compiled(
    rms_norm_op, _rms_norm_body,
    key=lambda self, gamma, epsilon: (self.dtype, gamma.dtype, tuple(gamma.shape),
                                      self.device.type),
    numerics=lambda self, gamma, epsilon=1e-06: _round_before_gamma(self),
    bind=_bind)


def _backward_body(dy, self, gamma, rstd, _numerics=None):
    return rms_norm_backward_reference(dy, self, gamma, rstd)


rms_core.register_compiled(
    rms_norm_backward_op, _backward_body,
    key=lambda dy, self, gamma, rstd: (self.dtype, gamma.dtype, tuple(gamma.shape), rstd.dim(),
                                       self.device.type),
    numerics=lambda *a, **k: None, bind=lambda dy, self, gamma, rstd: (dy, self, gamma, rstd))


TORCH_NPU_FUNCTIONS = {
    "npu_rms_norm": npu_rms_norm,
    "npu_rms_norm_backward": npu_rms_norm_backward,
}
