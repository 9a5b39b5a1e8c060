"""torch_npu.npu_cross_entropy_loss and npu_cross_entropy_loss_backward.

Formula (seed 004; op-plugin docs/zh/custom_APIs/torch_npu/torch_npu-npu_cross_entropy_loss.md;
hicann ops-nn loss/cross_entropy_loss/docs/aclnnCrossEntropyLoss.md)::

    lse_n        = log(sum_c exp(x[n, c]))              # as max_n + log(sum_c exp(x - max_n))
    log_prob     = x - lse_n
    keep_n       = target_n != ignore_index
    nll_n        = -weight[y_n] * log_prob[n, y_n] * keep_n
    smooth_n     = -sum_c weight[c] * log_prob[n, c] * keep_n
    l_n          = (1 - label_smoothing) * nll_n + label_smoothing / C * smooth_n
    zloss_n      = lse_square_scale_for_zloss * lse_n ** 2 * keep_n
    none: loss = l + zloss;  sum: loss = [sum l + sum zloss]
    mean: loss = [sum l / sum_n(weight[y_n] * keep_n) + sum zloss / sum_n keep_n]

The label-smoothing and weight terms follow the kernel (ops-nn loss/cross_entropy_loss/op_kernel/
cross_entropy_loss.h: the smoothing sum is weighted per class, skipped on ignored rows, and the mean
divides both terms by the kept weight sum) and op-plugin's golden
(test/test_custom_ops/test_npu_cross_entropy_loss.py).  Everything is computed in float32 (float64
kept) and rounded once to the input dtype.

The z-loss terms (which the NPU documents but does not enable yet: "当前暂不支持") follow
aclnnCrossEntropyLoss.md (``zloss_n = scale * lse_n ** 2``) and the gradient that
aclnnCrossEntropyLossGrad.md gives for them (``lseGrad = 2 * scale * lse * keep * (grad +
grad_zloss) [/ sum keep]``), which is the gradient of a loss that includes the z-loss: ``loss``
adds it whenever the scale is nonzero, and ``zloss`` returns the z-loss term alone.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common

OP = "npu_cross_entropy_loss"
SCHEMA = ("npu_cross_entropy_loss(Tensor input, Tensor target, Tensor? weight=None, "
          "str reduction='mean', int ignore_index=-100, float label_smoothing=0.0, "
          "float lse_square_scale_for_zloss=0.0, bool return_zloss=False) "
          "-> (Tensor, Tensor, Tensor, Tensor)")
BACKWARD_OP = "npu_cross_entropy_loss_backward"
BACKWARD_SCHEMA = ("npu_cross_entropy_loss_backward(Tensor grad_loss, Tensor log_prob, "
                   "Tensor target, Tensor? weight=None, Tensor? grad_zloss=None, "
                   "Tensor? lse_for_zloss=None, str reduction='mean', int ignore_index=-100, "
                   "float label_smoothing=0.0, float lse_square_scale_for_zloss=0.0) -> Tensor")

_SUPPORTED = frozenset({Product.A2, Product.A3, Product.ASCEND_950})
_REDUCTIONS = ("mean", "sum", "none")
_MAX_N = 200000
_TARGET_DTYPES = (torch.int64, torch.int32)


def _check_common(op: str, x_name: str, x, target, weight, reduction, ignore_index,
                  label_smoothing, lse_square_scale_for_zloss) -> None:
    _common.expect_float(op, x_name, x)
    _common.expect_dim(op, x_name, x, 2)
    n, c = x.shape
    checks.expect(n > 0 and c > 0, op, x_name, "a shape [N, C] with N > 0 and C > 0",
                  lambda: f"shape {tuple(x.shape)}", ValueError)
    product = targets.expect_supported(op, _SUPPORTED)
    if product is not None:
        checks.expect(n <= _MAX_N, op, x_name, f"N = size(0) in (0, {_MAX_N}]",
                      lambda: f"N = {n}", ValueError)
    checks.expect_dtype(target, _TARGET_DTYPES, op, "target")
    _common.expect_shape(op, "target", target, (n,), f"[N] of {x_name}")
    if weight is not None:
        _common.expect_float(op, "weight", weight, (torch.float32,))
        _common.expect_shape(op, "weight", weight, (c,), f"[C] of {x_name}")
    _common.expect_devices(op, {x_name: x, "target": target, "weight": weight})
    checks.expect_one_of(reduction, _REDUCTIONS, op, "reduction")
    checks.expect(ignore_index < c, op, "ignore_index", lambda: f"less than C = {c}",
                  repr(ignore_index), ValueError)
    checks.expect(0.0 <= label_smoothing < 1.0, op, "label_smoothing", "in [0.0, 1.0)",
                  repr(label_smoothing), ValueError)
    checks.expect(0.0 <= lse_square_scale_for_zloss < 1.0, op, "lse_square_scale_for_zloss",
                  "in [0.0, 1.0)", repr(lse_square_scale_for_zloss), ValueError)


def check_cross_entropy_loss(input, target, weight=None, reduction="mean", ignore_index=-100,
                             label_smoothing=0.0, lse_square_scale_for_zloss=0.0,
                             return_zloss=False):
    _check_common(OP, "input", input, target, weight, reduction, ignore_index, label_smoothing,
                  lse_square_scale_for_zloss)


def check_cross_entropy_loss_backward(grad_loss, log_prob, target, weight=None, grad_zloss=None,
                                      lse_for_zloss=None, reduction="mean", ignore_index=-100,
                                      label_smoothing=0.0, lse_square_scale_for_zloss=0.0):
    op = BACKWARD_OP
    _check_common(op, "log_prob", log_prob, target, weight, reduction, ignore_index,
                  label_smoothing, lse_square_scale_for_zloss)
    n = log_prob.shape[0]
    loss_shape = (n,) if reduction == "none" else (1,)
    _common.expect_float(op, "grad_loss", grad_loss)
    checks.expect(tuple(grad_loss.shape) == loss_shape
                  or (reduction != "none" and grad_loss.dim() == 0), op, "grad_loss",
                  lambda: f"the shape of loss {loss_shape} (reduction={reduction!r})",
                  lambda: f"shape {tuple(grad_loss.shape)}", RuntimeError)
    checks.expect_same_dtype({"log_prob": log_prob, "grad_loss": grad_loss}, op)
    if grad_zloss is not None:
        checks.expect(grad_zloss.numel() == 0 or tuple(grad_zloss.shape) ==
                      tuple(grad_loss.shape), op, "grad_zloss",
                      lambda: f"the shape of grad_loss {tuple(grad_loss.shape)} (or empty)",
                      lambda: f"shape {tuple(grad_zloss.shape)}", RuntimeError)
        checks.expect_same_dtype({"grad_loss": grad_loss, "grad_zloss": grad_zloss}, op)
    if lse_for_zloss is not None:
        checks.expect(lse_for_zloss.numel() == 0 or tuple(lse_for_zloss.shape) == (n,), op,
                      "lse_for_zloss", lambda: f"the shape [N] = ({n},) (or empty)",
                      lambda: f"shape {tuple(lse_for_zloss.shape)}", RuntimeError)
        _common.expect_float(op, "lse_for_zloss", lse_for_zloss)
    _common.expect_devices(op, {"log_prob": log_prob, "grad_loss": grad_loss,
                                "grad_zloss": grad_zloss, "lse_for_zloss": lse_for_zloss})


def _row_terms(target, weight, ignore_index, c, ct, device):
    """(kept-row mask, target with ignored rows pointed at class 0, class weights)."""
    keep = target != ignore_index
    safe_target = target.masked_fill(~keep, 0).long()
    w = weight.to(ct) if weight is not None else torch.ones(c, dtype=ct, device=device)
    return keep, safe_target, w


def cross_entropy_loss_reference(input, target, weight=None, reduction="mean", ignore_index=-100,
                                 label_smoothing=0.0, lse_square_scale_for_zloss=0.0,
                                 return_zloss=False):
    n, c = input.shape
    ct = _common.compute_dtype(input.dtype)
    x = input.to(ct)
    row_max = x.amax(dim=-1, keepdim=True)
    lse = (x - row_max).exp().sum(dim=-1, keepdim=True).log() + row_max
    log_prob = x - lse
    lse = lse.squeeze(-1)
    keep, safe_target, w = _row_terms(target, weight, ignore_index, c, ct, input.device)
    keep_f = keep.to(ct)
    w_y = w[safe_target] * keep_f
    picked = log_prob.gather(1, safe_target.unsqueeze(1)).squeeze(1)
    rows = -picked * w_y
    if label_smoothing != 0.0:
        smooth = -(log_prob * w).sum(dim=-1) * keep_f
        rows = (1.0 - label_smoothing) * rows + (label_smoothing / c) * smooth
    z_rows = lse_square_scale_for_zloss * lse * lse * keep_f
    with_z = lse_square_scale_for_zloss != 0.0
    if reduction == "none":
        loss = rows + z_rows if with_z else rows
        zloss = z_rows
    elif reduction == "sum":
        loss = rows.sum().reshape(1)
        zloss = z_rows.sum().reshape(1)
        if with_z:
            loss = loss + zloss
    else:
        loss = (rows.sum() / w_y.sum()).reshape(1)
        zloss = (z_rows.sum() / keep_f.sum()).reshape(1)
        if with_z:
            loss = loss + zloss
    dtype = input.dtype
    zloss_out = zloss.to(dtype) if return_zloss else input.new_empty((0,))
    lse_out = lse.to(dtype) if with_z else input.new_empty((0,))
    return loss.to(dtype), log_prob.to(dtype), zloss_out, lse_out


def cross_entropy_loss_backward_reference(grad_loss, log_prob, target, weight=None,
                                          grad_zloss=None, lse_for_zloss=None, reduction="mean",
                                          ignore_index=-100, label_smoothing=0.0,
                                          lse_square_scale_for_zloss=0.0):
    """The steps of aclnnCrossEntropyLossGrad.md, in float32 (float64 kept), rounded once."""
    n, c = log_prob.shape
    ct = _common.compute_dtype(log_prob.dtype)
    g = grad_loss.to(ct).reshape(-1)                    # [N] (none) or [1]
    keep, safe_target, w = _row_terms(target, weight, ignore_index, c, ct, log_prob.device)
    keep_f = keep.to(ct)
    p = log_prob.to(ct).exp()
    w_y = w[safe_target]
    if reduction == "mean":
        g = g / (w_y * keep_f).sum()
    loss_grad = g * (1.0 - label_smoothing) * keep_f    # [N]
    nll_grad = loss_grad * w_y
    grad = p * nll_grad.unsqueeze(1)
    grad = grad.scatter_add(1, safe_target.unsqueeze(1), -nll_grad.unsqueeze(1))
    if label_smoothing != 0.0:
        smooth_grad = (g * (label_smoothing / c) * keep_f).unsqueeze(1) * w   # [N, C]
        grad = grad + p * smooth_grad.sum(dim=-1, keepdim=True) - smooth_grad
    if (lse_square_scale_for_zloss != 0.0 and lse_for_zloss is not None
            and lse_for_zloss.numel() != 0):
        gz = grad_loss.to(ct).reshape(-1)
        if grad_zloss is not None and grad_zloss.numel() != 0:
            gz = gz + grad_zloss.to(ct).reshape(-1)
        if reduction == "mean":
            gz = gz / keep_f.sum()
        lse_grad = 2.0 * lse_square_scale_for_zloss * lse_for_zloss.to(ct) * keep_f * gz
        grad = grad + p * lse_grad.unsqueeze(1)
    return grad.to(grad_loss.dtype)


cross_entropy_loss_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_cross_entropy_loss,
                              reference=cross_entropy_loss_reference, metadata_check=True,
                              info=OpInfo(api="torch_npu"))
cross_entropy_loss_backward_op = NpuOp(
    BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_cross_entropy_loss_backward,
    reference=cross_entropy_loss_backward_reference, metadata_check=True,
    info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    (_input, target, weight, reduction, ignore_index, label_smoothing, scale,
     _return_zloss) = inputs
    _loss, log_prob, _zloss, lse = output
    ctx.mark_non_differentiable(log_prob, lse)
    ctx.save_for_backward(log_prob, target, weight, lse)
    ctx.args = (reduction, ignore_index, label_smoothing, scale)


def _backward(ctx, grad_loss, _grad_log_prob, grad_zloss, _grad_lse):
    log_prob, target, weight, lse = ctx.saved_tensors
    reduction, ignore_index, label_smoothing, scale = ctx.args
    if grad_zloss is not None and grad_zloss.numel() == 0:
        grad_zloss = None
    grad = cross_entropy_loss_backward_op(
        grad_loss, log_prob, target, weight, grad_zloss, lse if lse.numel() else None,
        reduction, ignore_index, label_smoothing, scale)
    return grad, None, None, None, None, None, None, None


cross_entropy_loss_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_cross_entropy_loss(input, target, weight=None, reduction="mean", ignore_index=-100,
                           label_smoothing=0.0, lse_square_scale_for_zloss=0.0,
                           return_zloss=False):
    """Cross-entropy of logits ``input`` against class indices ``target``, with ``log_prob``.

    Formula (seed 004 / aclnnCrossEntropyLoss; ``keep_n = target_n != ignore_index``)::

        lse_n    = log(sum_c exp(x[n, c]));   log_prob = x - lse
        l_n      = -(1 - ls) * weight[y_n] * log_prob[n, y_n] * keep_n
                   - ls / C * sum_c weight[c] * log_prob[n, c] * keep_n
        zloss_n  = lse_square_scale_for_zloss * lse_n ** 2 * keep_n
        none: l + zloss;  sum: sum(l) + sum(zloss)
        mean: sum(l) / sum(weight[y] * keep) + sum(zloss) / sum(keep)

    Parameters
    ----------
    input : Tensor
        ``[N, C]`` logits, float16, bfloat16 or float32 (float64 too outside strict mode).
    target : Tensor
        ``[N]`` class indices in ``[0, C)`` (or ``ignore_index``), int64 (int32 accepted, as
        aclnnCrossEntropyLoss does).
    weight : Tensor, optional
        ``[C]`` float32 class weights (documented range (0, 1], not checked); default all ones.
    reduction : str
        ``"mean"`` (default), ``"sum"`` or ``"none"``.
    ignore_index : int
        Rows whose target equals it contribute nothing; must be ``< C``.  Default -100.
    label_smoothing : float
        In ``[0, 1)``.
    lse_square_scale_for_zloss : float
        In ``[0, 1)``; nonzero adds the z-loss to ``loss`` and returns ``lse_for_zloss``.
    return_zloss : bool
        Also return the z-loss term on its own.

    Returns
    -------
    (loss, log_prob, zloss, lse_for_zloss), all in ``input``'s dtype: ``loss`` ``[N]`` for
    ``"none"`` else ``[1]``; ``log_prob`` ``[N, C]``; ``zloss`` shaped like ``loss`` when
    ``return_zloss`` else empty ``(0,)``; ``lse_for_zloss`` ``[N]`` when the scale is nonzero
    else empty ``(0,)``.  ``loss`` and ``zloss`` are differentiable w.r.t. ``input``
    (through :func:`npu_cross_entropy_loss_backward`, op-plugin derivatives.yaml).

    Constraints
    -----------
    ``N`` in (0, 200000] (checked in strict mode); strict mode: A2, A3 and Ascend 950.
    On the NPU, with ``input.requires_grad`` the ``sum``/``none`` modes need the default
    ``label_smoothing`` and ``mean`` all defaults: a limit of its kernel that is not enforced.

    Notes
    -----
    Computed in float32 and rounded once, as ops-nn's kernel (loss/cross_entropy_loss/op_kernel/
    cross_entropy_loss.h) does: the smoothing term is weighted per class and the mean divides
    it by the kept weight sum too.  The NPU accepts the z-loss arguments but does not act on
    them yet ("当前暂不支持"); here they follow the z-loss formula of aclnnCrossEntropyLoss.md
    and the gradient of aclnnCrossEntropyLossGrad.md, which is the gradient of a loss that
    includes the z-loss.  A mean over rows that are all ignored is NaN (0 / 0).

    Examples
    --------
    >>> loss, log_prob, _, _ = npu_anywhere.npu_cross_entropy_loss(torch.randn(4, 10),
    ...                                                            torch.tensor([1, 0, 9, 3]))
    """
    return cross_entropy_loss_op(input, target, weight, reduction, ignore_index, label_smoothing,
                                 lse_square_scale_for_zloss, return_zloss)


def npu_cross_entropy_loss_backward(grad_loss, log_prob, target, weight=None, grad_zloss=None,
                                    lse_for_zloss=None, reduction="mean", ignore_index=-100,
                                    label_smoothing=0.0, lse_square_scale_for_zloss=0.0):
    """Gradient of :func:`npu_cross_entropy_loss` w.r.t. ``input``.

    Formula (aclnnCrossEntropyLossGrad.md; ``p = exp(log_prob)``, ``k = keep``)::

        g      = grad_loss [/ sum(weight[y] * k) for mean]
        nll    = g * (1 - ls) * k * weight[y]
        dx     = p * nll - onehot(y) * nll
               + p * sum_c(s * weight[c]) - s * weight,   s = g * ls / C * k
        z-loss (scale != 0 and lse_for_zloss given):
        gz     = (grad_loss + grad_zloss) [/ sum(k) for mean]
        dx    += p * 2 * scale * lse_for_zloss * k * gz

    ``grad_loss`` is shaped like the forward's ``loss``; the result has ``log_prob``'s shape
    and ``grad_loss``'s dtype, computed in float32 and rounded once.
    """
    return cross_entropy_loss_backward_op(grad_loss, log_prob, target, weight, grad_zloss,
                                          lse_for_zloss, reduction, ignore_index,
                                          label_smoothing, lse_square_scale_for_zloss)


TORCH_NPU_FUNCTIONS = {
    OP: npu_cross_entropy_loss,
    BACKWARD_OP: npu_cross_entropy_loss_backward,
}
