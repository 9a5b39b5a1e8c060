"""torch_npu.npu_layer_norm_eval: LayerNorm for inference (torch.nn.functional.layer_norm).

Formula::

    mean = mean(input over the normalized dims);  var = mean((input - mean)^2)  (biased)
    out  = (input - mean) / sqrt(var + eps) * weight + bias
"""

from __future__ import annotations

import math

import torch.nn.functional as F

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from .rms_core import compute_dtype

OP = "npu_layer_norm_eval"
SCHEMA = ("npu_layer_norm_eval(Tensor input, int[] normalized_shape, Tensor? weight=None, "
          "Tensor? bias=None, float eps=1e-05) -> Tensor")


def check_layer_norm_eval(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    op = OP
    allowed = FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE
    checks.expect_dtype(input, allowed, op, "input")
    shape = tuple(normalized_shape)
    checks.expect(len(shape) >= 1, op, "normalized_shape", "at least one dim", list(shape),
                  ValueError)
    tail = tuple(input.shape[input.dim() - len(shape):]) if len(shape) <= input.dim() else None
    checks.expect(tail == shape, op, "normalized_shape",
                  lambda: f"the trailing dims of input {tuple(input.shape)}", list(shape))
    named = {"input": input}
    numel = math.prod(shape)
    for name, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        named[name] = t
        checks.expect_dtype(t, allowed, op, name)
        # op-plugin (LayerNormEvalKernelNpu.cpp) reshapes weight/bias to the normalized dims,
        # so any shape with the right number of elements is accepted.
        checks.expect(t.numel() == numel, op, name,
                      lambda: f"{numel} elements (normalized_shape {list(shape)})",
                      lambda t=t: f"shape {tuple(t.shape)}")
    checks.expect_same_device(named, op)


def layer_norm_eval_reference(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    ct = compute_dtype(input.dtype)
    shape = tuple(normalized_shape)
    w = None if weight is None else weight.to(ct).reshape(shape)
    b = None if bias is None else bias.to(ct).reshape(shape)
    return F.layer_norm(input.to(ct), shape, w, b, eps).to(input.dtype)


layer_norm_eval_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_layer_norm_eval,
                           reference=layer_norm_eval_reference, metadata_check=True,
                           info=OpInfo(api="torch_npu"))
layer_norm_eval_op.forbid_autograd("npu_layer_norm_eval is inference-only (no backward in "
                                   "op-plugin's derivatives.yaml)")


def npu_layer_norm_eval(input, normalized_shape, weight=None, bias=None, eps=1e-05):
    """LayerNorm for inference, the same as ``torch.nn.functional.layer_norm``.

    Formula::

        mean = mean(input over the last len(normalized_shape) dims)
        var  = mean((input - mean)^2)                 (biased)
        out  = (input - mean) / sqrt(var + eps) * weight + bias

    Parameters
    ----------
    input : Tensor
        float16, bfloat16 or float32 (float64 outside strict mode).
    normalized_shape : list of int
        The trailing dims of ``input`` to normalize over.
    weight, bias : Tensor, optional
        gamma / beta with ``prod(normalized_shape)`` elements (any shape: the NPU wrapper
        reshapes them); None means 1 / 0.  Any of the float dtypes above.
    eps : float
        Default 1e-5.

    Returns
    -------
    Tensor
        input's shape and dtype; computed in float32 and rounded once.

    Notes
    -----
    op-plugin runs the LayerNormV3 kernel (``op_plugin/ops/aclops/LayerNormEvalKernelNpu.cpp``)
    and tests it against ``F.layer_norm`` (``test/test_custom_ops/test_npu_layer_norm_eval.py``).
    The NPU wrapper only requires ``prod(normalized_shape)`` to match a product of trailing
    dims; here normalized_shape must equal them, as in ``F.layer_norm``.  Inference only: a
    call with inputs requiring grad raises.

    Examples
    --------
    >>> x = torch.rand(6, 4)
    >>> npu_anywhere.npu_layer_norm_eval(x, x.size()[1:]).shape
    torch.Size([6, 4])
    """
    return layer_norm_eval_op(input, list(normalized_shape), weight, bias, eps)


TORCH_NPU_FUNCTIONS = {"npu_layer_norm_eval": npu_layer_norm_eval}
