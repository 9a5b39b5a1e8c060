"""torch_npu.npu_fused_attention_score, npu_fused_attention_score_fwd and their backward ops
(npu_fused_attention_score_backward, and npu_fused_attention_score_grad: the same gradients in
the kernel's (B * S, N * D) layout).

Formula (seed 004: the fused matmul, transpose, add, softmax, dropout, batch matmul and
permute of a BERT attention layer; shapes from op-plugin FusedAttentionScoreKernelNpu.cpp)::

    q, k, v : (B, N, S, D)          attention_mask: broadcasts to (B, N, S, S)
    P       = softmax(q @ k^T * scale + attention_mask, dim=-1)        # softmax_output
    Pd      = P * drop_mask / keep_prob                                # drop_mask: 1 = kept
    out     = (Pd @ v).permute(0, 2, 1, 3).reshape(B * S, N * D)

    backward (AttentionScoreGrad), g = grad_output.reshape(B, S, N, D).permute(0, 2, 1, 3):
    dv = Pd^T @ g;   dP = (g @ v^T) * drop_mask / keep_prob
    dS = scale * P * (dP - sum(dP * P, -1));   dq = dS @ k;   dk = dS^T @ q

``npu_fused_attention_score_fwd`` returns ``(out, softmax_output, drop_mask)`` with ``drop_mask``
a flat uint8 tensor of ``B * N * S * S`` elements (DropOutGenMaskV3, one byte per element);
``npu_fused_attention_score`` returns ``out`` alone and differentiates through the ``_fwd`` op
(derivatives.yaml).  The backward returns gradients of shape (B, N, S, D) laid out as
(B, S, N, D), as op-plugin permutes them.

Precision: the AttentionScore kernel source is not public.  ``scale`` is passed to it as a
float16 tensor (op-plugin: ``Input(scale, at::kHalf)``), so it is rounded to float16 first;
the matmuls accumulate in float32; the softmax is taken in float32 and rounded once to the
input dtype (``softmax_output``); dropout and the second matmul start from that rounded
softmax, and the output is rounded once.  The keep-mask comes from torch's default generator.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...targets import Product
from . import _common
from ._common import softmax_grad

OP = "npu_fused_attention_score"
FWD_OP = "npu_fused_attention_score_fwd"
GRAD_OP = "npu_fused_attention_score_backward"
GRAD2_OP = "npu_fused_attention_score_grad"
_FLAGS = ("bool query_transpose=False, bool key_transpose=False, "
          "bool bmm_score_transpose_a=False, bool bmm_score_transpose_b=False, "
          "bool value_transpose=False, bool dx_transpose=False")
_INPUTS = ("Tensor query_layer, Tensor key_layer, Tensor value_layer, Tensor attention_mask, "
           "Scalar scale, float keep_prob, ")
SCHEMA = f"{OP}({_INPUTS}{_FLAGS}) -> Tensor"
FWD_SCHEMA = f"{FWD_OP}({_INPUTS}{_FLAGS}) -> (Tensor, Tensor, Tensor)"
_GRAD_ARGS = ("(Tensor grad_output, Tensor softmax_output, Tensor query_layer, "
              "Tensor key_layer, Tensor value_layer, Tensor mask, Scalar scale, float keep_prob, "
              "bool query_transpose=False, bool key_transpose=False, "
              "bool value_transpose=False, bool dx_transpose=False) -> (Tensor, Tensor, Tensor)")
GRAD_SCHEMA = GRAD_OP + _GRAD_ARGS
# op-plugin also defines _grad with the same schema: the same AttentionScoreGrad kernel, its
# outputs returned as the kernel writes them, (B * S, N * D) like grad_output.
GRAD2_SCHEMA = GRAD2_OP + _GRAD_ARGS

DTYPES = (torch.float16,)            # seed 004: every input "仅支持float16"
# Seed 004: "支持的型号: Atlas 训练系列产品".
_SUPPORTED = frozenset({Product.ATLAS_TRAINING})


def _check_flags(op: str, flags: dict) -> None:
    # The flags pick transposed fractal (NZ) operand layouts inside the kernel's matmuls; the
    # doc does not say what they mean for ND tensors, so only the default is emulated.
    for name, value in flags.items():
        checks.expect(not value, op, name, "False (what a transposed operand means for this "
                      "kernel is not documented)", repr(value), NotImplementedError)


def _check_qkv(op: str, q, k, v) -> None:
    named = {"query_layer": q, "key_layer": k, "value_layer": v}
    for name, t in named.items():
        _common.expect_dtype(op, name, t, DTYPES)
    _common.expect_shape_4d(op, "query_layer", q)
    _common.expect_same_shape(op, "key_layer", k, "query_layer", q)
    _common.expect_same_shape(op, "value_layer", v, "query_layer", q)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)


def _check_keep_prob(op: str, keep_prob: float) -> None:
    checks.expect(0.0 <= keep_prob <= 1.0, op, "keep_prob", "in [0, 1]", repr(keep_prob),
                  ValueError)
    checks.expect(keep_prob > 0.0, op, "keep_prob", "above 0 (keep_prob = 0 divides by zero; "
                  "the NPU's result is not documented)", repr(keep_prob), NotImplementedError)


def _broadcasts_to(shape, target) -> bool:
    if len(shape) > len(target):
        return False
    return all(s in (t, 1) for s, t in zip(reversed(tuple(shape)), reversed(tuple(target))))


def _check_forward(op, q, k, v, attention_mask, scale, keep_prob, flags) -> None:
    _check_flags(op, flags)
    _check_qkv(op, q, k, v)
    _common.expect_dtype(op, "attention_mask", attention_mask, DTYPES)
    checks.expect_same_dtype({"query_layer": q, "attention_mask": attention_mask}, op)
    b, n, s, _ = q.shape
    checks.expect(_broadcasts_to(attention_mask.shape, (b, n, s, s)), op, "attention_mask",
                  f"a shape that broadcasts to (B, N, S, S) = {(b, n, s, s)}",
                  lambda: f"shape {tuple(attention_mask.shape)}")
    checks.expect_same_device({"query_layer": q, "attention_mask": attention_mask}, op)
    _common.scalar_value(op, "scale", scale)
    _check_keep_prob(op, keep_prob)
    targets.expect_supported(op, _SUPPORTED)


def _flag_dict(query_transpose, key_transpose, bmm_score_transpose_a, bmm_score_transpose_b,
               value_transpose, dx_transpose) -> dict:
    return {"query_transpose": query_transpose, "key_transpose": key_transpose,
            "bmm_score_transpose_a": bmm_score_transpose_a,
            "bmm_score_transpose_b": bmm_score_transpose_b,
            "value_transpose": value_transpose, "dx_transpose": dx_transpose}


def _checker(op):
    def check(query_layer, key_layer, value_layer, attention_mask, scale, keep_prob,
              query_transpose=False, key_transpose=False, bmm_score_transpose_a=False,
              bmm_score_transpose_b=False, value_transpose=False, dx_transpose=False):
        _check_forward(op, query_layer, key_layer, value_layer, attention_mask, scale,
                       keep_prob, _flag_dict(query_transpose, key_transpose,
                                             bmm_score_transpose_a, bmm_score_transpose_b,
                                             value_transpose, dx_transpose))
    return check


check_fused_attention_score = _checker(OP)
check_fused_attention_score_fwd = _checker(FWD_OP)


def check_fused_attention_score_backward(grad_output, softmax_output, query_layer, key_layer,
                                         value_layer, mask, scale, keep_prob,
                                         query_transpose=False, key_transpose=False,
                                         value_transpose=False, dx_transpose=False):
    _check_backward(GRAD_OP, grad_output, softmax_output, query_layer, key_layer, value_layer,
                    mask, scale, keep_prob, query_transpose, key_transpose, value_transpose,
                    dx_transpose)


def check_fused_attention_score_grad(grad_output, softmax_output, query_layer, key_layer,
                                     value_layer, mask, scale, keep_prob, query_transpose=False,
                                     key_transpose=False, value_transpose=False,
                                     dx_transpose=False):
    _check_backward(GRAD2_OP, grad_output, softmax_output, query_layer, key_layer, value_layer,
                    mask, scale, keep_prob, query_transpose, key_transpose, value_transpose,
                    dx_transpose)


def _check_backward(op, grad_output, softmax_output, query_layer, key_layer, value_layer, mask,
                    scale, keep_prob, query_transpose, key_transpose, value_transpose,
                    dx_transpose):
    _check_flags(op, {"query_transpose": query_transpose, "key_transpose": key_transpose,
                      "value_transpose": value_transpose, "dx_transpose": dx_transpose})
    _check_qkv(op, query_layer, key_layer, value_layer)
    b, n, s, d = query_layer.shape
    named = {"query_layer": query_layer, "grad_output": grad_output,
             "softmax_output": softmax_output}
    checks.expect_same_dtype(named, op)
    checks.expect(tuple(grad_output.shape) == (b * s, n * d), op, "grad_output",
                  f"the shape (B * S, N * D) = {(b * s, n * d)}",
                  lambda: f"shape {tuple(grad_output.shape)}")
    checks.expect(tuple(softmax_output.shape) == (b, n, s, s), op, "softmax_output",
                  f"the shape (B, N, S, S) = {(b, n, s, s)}",
                  lambda: f"shape {tuple(softmax_output.shape)}")
    checks.expect_dtype(mask, (torch.uint8,), op, "mask")
    checks.expect(tuple(mask.shape) == (b * n * s * s,), op, "mask",
                  f"a 1-D tensor of B * N * S * S = {b * n * s * s} elements",
                  lambda: f"shape {tuple(mask.shape)}")
    checks.expect_same_device({**named, "mask": mask}, op)
    _common.scalar_value(op, "scale", scale)
    _check_keep_prob(op, keep_prob)
    targets.expect_supported(op, _SUPPORTED)


def _kernel_scale(scale, dtype) -> float:
    # op-plugin hands the kernel ``scale`` as a float16 tensor.
    return _common.as_compute_scalar(scale, torch.float16 if dtype == torch.float16 else dtype)


def _keep_mask(numel: int, keep_prob: float, device) -> torch.Tensor:
    if keep_prob >= 1.0:
        return torch.ones(numel, dtype=torch.uint8, device=device)   # draws nothing
    return (torch.rand(numel, device=device) < keep_prob).to(torch.uint8)


def fused_attention_score_fwd_reference(query_layer, key_layer, value_layer, attention_mask,
                                        scale, keep_prob, query_transpose=False,
                                        key_transpose=False, bmm_score_transpose_a=False,
                                        bmm_score_transpose_b=False, value_transpose=False,
                                        dx_transpose=False):
    dtype = query_layer.dtype
    ct = _common.compute_dtype(dtype)
    b, n, s, d = query_layer.shape
    q, k, v = query_layer.to(ct), key_layer.to(ct), value_layer.to(ct)
    scores = q @ k.transpose(-1, -2) * _kernel_scale(scale, dtype) + attention_mask.to(ct)
    probs = torch.softmax(scores, dim=-1).to(dtype)
    drop_mask = _keep_mask(b * n * s * s, keep_prob, query_layer.device)
    keep = drop_mask.reshape(b, n, s, s).to(ct)
    dropped = probs.to(ct) * keep * _common.as_compute_scalar(1.0 / keep_prob, ct)
    context = (dropped @ v).to(dtype)
    out = context.permute(0, 2, 1, 3).reshape(b * s, n * d)
    return out, probs, drop_mask


def _fused_attention_score_composite(query_layer, key_layer, value_layer, attention_mask,
                                     scale, keep_prob, query_transpose=False,
                                     key_transpose=False, bmm_score_transpose_a=False,
                                     bmm_score_transpose_b=False, value_transpose=False,
                                     dx_transpose=False):
    args = (query_layer, key_layer, value_layer, attention_mask, scale, keep_prob,
            query_transpose, key_transpose, bmm_score_transpose_a, bmm_score_transpose_b,
            value_transpose, dx_transpose)
    # errors name the public op (a None tensor included), then the _fwd op does the work
    fused_attention_score_op.arguments.check_required(args, {})
    check_fused_attention_score(*args)
    return fused_attention_score_fwd_op.overload(*args)[0]


def fused_attention_score_backward_reference(grad_output, softmax_output, query_layer,
                                             key_layer, value_layer, mask, scale, keep_prob,
                                             query_transpose=False, key_transpose=False,
                                             value_transpose=False, dx_transpose=False):
    dtype = query_layer.dtype
    ct = _common.compute_dtype(dtype)
    b, n, s, d = query_layer.shape
    g = grad_output.to(ct).reshape(b, s, n, d).permute(0, 2, 1, 3)
    p = softmax_output.to(ct)
    keep = mask.reshape(b, n, s, s).to(ct) * _common.as_compute_scalar(1.0 / keep_prob, ct)
    q, k, v = query_layer.to(ct), key_layer.to(ct), value_layer.to(ct)
    dv = (p * keep).transpose(-1, -2) @ g
    ds = softmax_grad((g @ v.transpose(-1, -2)) * keep, p) * _kernel_scale(scale, dtype)
    dq = ds @ k
    dk = ds.transpose(-1, -2) @ q

    def laid_out(t):   # (B, N, S, D) values stored as (B, S, N, D), as op-plugin returns them
        return t.to(dtype).permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)

    return laid_out(dq), laid_out(dk), laid_out(dv)


def fused_attention_score_grad_reference(grad_output, softmax_output, query_layer, key_layer,
                                         value_layer, mask, scale, keep_prob,
                                         query_transpose=False, key_transpose=False,
                                         value_transpose=False, dx_transpose=False):
    b, n, s, d = query_layer.shape
    grads = fused_attention_score_backward_reference(
        grad_output, softmax_output, query_layer, key_layer, value_layer, mask, scale,
        keep_prob, query_transpose, key_transpose, value_transpose, dx_transpose)
    # (B, N, S, D) values stored (B, S, N, D): the kernel's buffers, read as (B * S, N * D)
    return tuple(t.permute(0, 2, 1, 3).reshape(b * s, n * d) for t in grads)


fused_attention_score_fwd_op = NpuOp(FWD_SCHEMA, namespace=TORCH_NPU_NS,
                                     check=check_fused_attention_score_fwd,
                                     reference=fused_attention_score_fwd_reference,
                                     metadata_check=True, random=True,
                                     info=OpInfo(api="torch_npu"))
fused_attention_score_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS,
                                 check=check_fused_attention_score,
                                 composite=_fused_attention_score_composite,
                                 info=OpInfo(api="torch_npu"))
fused_attention_score_backward_op = NpuOp(GRAD_SCHEMA, namespace=TORCH_NPU_NS,
                                          check=check_fused_attention_score_backward,
                                          reference=fused_attention_score_backward_reference,
                                          metadata_check=True,
                                          info=OpInfo(api="torch_npu", backward_of=FWD_OP))
fused_attention_score_grad_op = NpuOp(GRAD2_SCHEMA, namespace=TORCH_NPU_NS,
                                      check=check_fused_attention_score_grad,
                                      reference=fused_attention_score_grad_reference,
                                      metadata_check=True,
                                      info=OpInfo(api="torch_npu", backward_of=FWD_OP))


def _setup_context(ctx, inputs, output):
    q, k, v, _, scale, keep_prob, qt, kt, _, _, vt, dxt = inputs
    _, probs, drop_mask = output
    ctx.args = (scale, keep_prob, qt, kt, vt, dxt)
    ctx.mark_non_differentiable(probs, drop_mask)
    ctx.save_for_backward(probs, q, k, v, drop_mask)


def _backward(ctx, grad_out, grad_probs, grad_mask):
    nones = (None,) * 9
    if grad_out is None:
        return (None, None, None) + nones
    probs, q, k, v, drop_mask = ctx.saved_tensors
    # derivatives.yaml: query, key, value from npu_fused_attention_score_backward(grad,
    # result1, ..., result2, ...); the attention mask gets no gradient.
    dq, dk, dv = fused_attention_score_backward_op(grad_out.contiguous(), probs, q, k, v,
                                                   drop_mask, *ctx.args)
    return (dq, dk, dv) + nones


fused_attention_score_fwd_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_fused_attention_score(query_layer, key_layer, value_layer, attention_mask, scale,
                              keep_prob, query_transpose=False, key_transpose=False,
                              bmm_score_transpose_a=False, bmm_score_transpose_b=False,
                              value_transpose=False, dx_transpose=False):
    """BERT attention score block: scaled scores, additive mask, softmax, dropout, times value.

    Formula (seed 004)::

        P   = softmax(query @ key^T * scale + attention_mask, dim=-1)
        out = (P * drop_mask / keep_prob) @ value, permuted (B, S, N, D), reshaped (B*S, N*D)

    Parameters
    ----------
    query_layer, key_layer, value_layer : Tensor
        (B, N, S, D), float16 (float64 also accepted outside strict mode).
    attention_mask : Tensor
        Additive mask of the same dtype that broadcasts to (B, N, S, S).
    scale : float
        Score scale (rounded to float16, as the NPU receives it).
    keep_prob : float
        Probability of keeping an element, in (0, 1]; 1 draws no random numbers.
    query_transpose, key_transpose, bmm_score_transpose_a, bmm_score_transpose_b,
    value_transpose, dx_transpose : bool, default False
        Transposed fractal operand layouts of the NPU kernel; only False is emulated (True
        raises NotImplementedError).

    Returns
    -------
    Tensor of shape (B * S, N * D) and the input dtype.

    Constraints
    -----------
    Strict mode: Atlas training series (910) only.  The doc's "format 29 (FRACTAL_NZ)"
    requirement is about the NPU's storage and has no counterpart here.

    Notes
    -----
    Differentiable in query, key and value through ``npu_fused_attention_score_fwd`` and
    ``npu_fused_attention_score_backward`` (derivatives.yaml); the dropout mask is drawn from
    torch's default generator.

    Examples
    --------
    >>> q = torch.rand(2, 4, 32, 16).half()
    >>> mask = torch.zeros(2, 4, 32, 32).half()
    >>> npu_anywhere.npu_fused_attention_score(q, q, q, mask, 0.25, 1.0).shape
    torch.Size([64, 64])
    """
    return fused_attention_score_op(query_layer, key_layer, value_layer, attention_mask, scale,
                                    keep_prob, query_transpose, key_transpose,
                                    bmm_score_transpose_a, bmm_score_transpose_b,
                                    value_transpose, dx_transpose)


def npu_fused_attention_score_fwd(query_layer, key_layer, value_layer, attention_mask, scale,
                                  keep_prob, query_transpose=False, key_transpose=False,
                                  bmm_score_transpose_a=False, bmm_score_transpose_b=False,
                                  value_transpose=False, dx_transpose=False):
    """:func:`npu_fused_attention_score` also returning ``softmax_output`` (B, N, S, S, before
    dropout) and ``drop_mask`` (flat uint8, B * N * S * S elements, 1 = kept)."""
    return fused_attention_score_fwd_op(query_layer, key_layer, value_layer, attention_mask,
                                        scale, keep_prob, query_transpose, key_transpose,
                                        bmm_score_transpose_a, bmm_score_transpose_b,
                                        value_transpose, dx_transpose)


def npu_fused_attention_score_backward(grad_output, softmax_output, query_layer, key_layer,
                                       value_layer, mask, scale, keep_prob,
                                       query_transpose=False, key_transpose=False,
                                       value_transpose=False, dx_transpose=False):
    """Gradients ``(query_dx, key_dw, value_dw)`` of :func:`npu_fused_attention_score`.

    Formula (g = grad_output (B*S, N*D) viewed as (B, N, S, D); Pd = P * mask / keep_prob)::

        dv = Pd^T @ g;  dP = (g @ v^T) * mask / keep_prob
        dS = scale * P * (dP - sum(dP * P, -1));  dq = dS @ k;  dk = dS^T @ q

    ``softmax_output`` and ``mask`` are the ``_fwd`` op's second and third outputs.  Results
    are (B, N, S, D), stored (B, S, N, D) as the NPU returns them.
    """
    return fused_attention_score_backward_op(grad_output, softmax_output, query_layer,
                                             key_layer, value_layer, mask, scale, keep_prob,
                                             query_transpose, key_transpose, value_transpose,
                                             dx_transpose)


def npu_fused_attention_score_grad(grad_output, softmax_output, query_layer, key_layer,
                                   value_layer, mask, scale, keep_prob, query_transpose=False,
                                   key_transpose=False, value_transpose=False,
                                   dx_transpose=False):
    """:func:`npu_fused_attention_score_backward` with the gradients as the kernel writes them.

    The same formula and arguments; ``(query_dx, key_dw, value_dw)`` each of grad_output's
    shape (B * S, N * D): ``dq.permute(0, 2, 1, 3).reshape(B * S, N * D)`` (op-plugin
    ``FusedAttentionScoreKernelNpu.cpp``, ``npu_fused_attention_score_grad``, which skips the
    _backward op's final reshape and permute).  Autograd of npu_fused_attention_score goes
    through ``_backward`` (derivatives.yaml), not this op.
    """
    return fused_attention_score_grad_op(grad_output, softmax_output, query_layer, key_layer,
                                         value_layer, mask, scale, keep_prob, query_transpose,
                                         key_transpose, value_transpose, dx_transpose)


TORCH_NPU_FUNCTIONS = {
    "npu_fused_attention_score": npu_fused_attention_score,
    "npu_fused_attention_score_grad": npu_fused_attention_score_grad,
    "npu_fused_attention_score_fwd": npu_fused_attention_score_fwd,
    "npu_fused_attention_score_backward": npu_fused_attention_score_backward,
}
