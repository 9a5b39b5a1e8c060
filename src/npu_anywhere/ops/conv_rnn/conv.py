"""torch_npu.npu_conv2d, npu_conv3d, npu_convolution and npu_convolution_backward.

Formula (seed 004 / op-plugin docs (beta)torch_npu-npu_conv2d.md, -npu_conv3d.md,
-npu_convolution.md: "same as torch.nn.functional.conv2d / conv3d")::

    out[n, co, p] = bias[co] + sum_{ci in group(co), k} input[n, ci, p * stride - padding
                                                               + k * dilation] * weight[co, ci, k]

Host code followed: op-plugin aclops Conv2dKernelNpu.cpp / Conv3dKernelNpu.cpp (at least 2 / 3
entries in each list, the first ones used), ConvolutionKernelNpu.cpp (``npu_convolution``
picks 2-D or 3-D by the input rank; its backward casts grad_weight to weight's dtype).
Backward (derivatives.yaml): ``input, weight, bias: npu_convolution_backward(input, grad,
weight, stride, padding, dilation, groups, grad_input_mask)``; npu_conv2d / npu_conv3d have no
derivatives entry, so they are not differentiable.
"""

from __future__ import annotations

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import conv_params as cp

_ARGS = ("Tensor input, Tensor weight, Tensor? bias, int[] stride, int[] padding, "
         "int[] dilation, int groups")
CONV2D_SCHEMA = f"npu_conv2d({_ARGS}) -> Tensor"
CONV3D_SCHEMA = f"npu_conv3d({_ARGS}) -> Tensor"
CONVOLUTION_SCHEMA = f"npu_convolution({_ARGS}) -> Tensor"
BACKWARD_OP = "npu_convolution_backward"
_BACKWARD_TAIL = ("Tensor weight, int[] stride, int[] padding, int[] dilation, int groups, "
                  "bool[3] output_mask) -> (Tensor, Tensor, Tensor)")
BACKWARD_SCHEMA = f"npu_convolution_backward(Tensor input, Tensor grad_output, {_BACKWARD_TAIL}"
# The per-rank backward ops op-plugin also exposes (npu_conv3d_backward names its gradient
# ``grad``); not wired to autograd, since npu_conv2d / npu_conv3d have no derivatives entry.
CONV2D_BACKWARD_SCHEMA = f"npu_conv2d_backward(Tensor input, Tensor grad_output, {_BACKWARD_TAIL}"
CONV3D_BACKWARD_SCHEMA = f"npu_conv3d_backward(Tensor input, Tensor grad, {_BACKWARD_TAIL}"


def _checker(op: str, dims):
    def check(input, weight, bias, stride, padding, dilation, groups):
        nd = cp.check_tensors(op, input, weight, bias, dims)
        cp.check_geometry(op, input, weight, bias, stride, padding, dilation, groups,
                          transposed=False, nd=nd)
    check.__name__ = f"check_{op.removeprefix('npu_')}"
    return check


def conv_reference(input, weight, bias, stride, padding, dilation, groups):
    return cp.forward(input, weight, bias, stride, padding, dilation, groups, transposed=False)


def _backward_checker(op: str, dims, grad_name: str = "grad_output"):
    def check(input, grad, weight, stride, padding, dilation, groups, output_mask):
        checks.expect_dim(input, dims, op, "input")
        cp.check_backward(op, input, grad, weight, stride, padding, dilation, groups,
                          output_mask, transposed=False, grad_name=grad_name)
    check.__name__ = f"check_{op.removeprefix('npu_')}"
    return check


def convolution_backward_reference(input, grad_output, weight, stride, padding, dilation, groups,
                                   output_mask):
    return cp.backward(input, grad_output, weight, stride, padding, dilation, groups,
                       output_mask, transposed=False)


check_convolution_backward = _backward_checker(BACKWARD_OP, (4, 5))


def _op(schema: str, dims) -> NpuOp:
    name = schema.split("(", 1)[0]
    return NpuOp(schema, namespace=TORCH_NPU_NS, check=_checker(name, dims),
                 reference=conv_reference, metadata_check=True, info=OpInfo(api="torch_npu"))


conv2d_op = _op(CONV2D_SCHEMA, (4,))
conv3d_op = _op(CONV3D_SCHEMA, (5,))
convolution_op = _op(CONVOLUTION_SCHEMA, (4, 5))


def _backward_op(schema: str, dims, forward: str, grad_name: str = "grad_output") -> NpuOp:
    name = schema.split("(", 1)[0]
    return NpuOp(schema, namespace=TORCH_NPU_NS, check=_backward_checker(name, dims, grad_name),
                 reference=convolution_backward_reference, metadata_check=True,
                 info=OpInfo(api="torch_npu", backward_of=forward))


convolution_backward_op = _backward_op(BACKWARD_SCHEMA, (4, 5), "npu_convolution")
conv2d_backward_op = _backward_op(CONV2D_BACKWARD_SCHEMA, (4,), "npu_conv2d")
conv3d_backward_op = _backward_op(CONV3D_BACKWARD_SCHEMA, (5,), "npu_conv3d", "grad")

for _plain in (conv2d_op, conv3d_op):
    _plain.forbid_autograd("op-plugin's derivatives.yaml has no backward for it; "
                           "npu_convolution is the differentiable form")


cp.set_autograd(convolution_op, convolution_backward_op)


def npu_conv2d(input, weight, bias, stride, padding, dilation, groups):
    """2-D convolution over ``(N, C_in, H, W)`` input, as ``torch.nn.functional.conv2d``.

    Formula::

        out[n, co, h, w] = bias[co] + sum_{ci, i, j} input[n, g(co) * C_in/groups + ci,
                           h * sH - pH + i * dH, w * sW - pW + j * dW] * weight[co, ci, i, j]

    Parameters
    ----------
    input : Tensor
        ``(N, C_in, H, W)``, float16, bfloat16 or float32 (float64 too outside strict mode).
    weight : Tensor
        ``(C_out, C_in / groups, kH, kW)``, input's dtype.
    bias : Tensor or None
        ``(C_out,)``.
    stride, padding, dilation : list of int
        At least 2 entries each (the first 2 are used, as the NPU kernel does); stride and
        dilation >= 1, padding >= 0 (symmetric, both sides).
    groups : int
        ``C_in`` and ``C_out`` divisible by it.

    Returns
    -------
    Tensor
        ``(N, C_out, Ho, Wo)`` with ``Ho = (H + 2 pH - dH (kH - 1) - 1) // sH + 1``; float16 and
        bfloat16 accumulate in float32 and are rounded once.

    Notes
    -----
    Not differentiable (op-plugin's derivatives.yaml has no entry; use ``npu_convolution``).
    The doc marks the API for deprecation in favour of ``torch.nn.functional.conv2d``.
    """
    return conv2d_op(input, weight, bias, stride, padding, dilation, groups)


def npu_conv3d(input, weight, bias, stride, padding, dilation, groups):
    """3-D convolution over ``(N, C_in, D, H, W)`` input, as ``torch.nn.functional.conv3d``.

    Formula: that of :func:`npu_conv2d` with a third spatial dim.

    Parameters
    ----------
    input : Tensor
        ``(N, C_in, D, H, W)``, float16, bfloat16 or float32 (float64 outside strict mode).
    weight : Tensor
        ``(C_out, C_in / groups, kD, kH, kW)``.
    bias : Tensor or None
        ``(C_out,)``.
    stride, padding, dilation : list of int
        At least 3 entries each (the first 3 are used).
    groups : int

    Returns
    -------
    Tensor
        ``(N, C_out, Do, Ho, Wo)``, input's dtype (float32 accumulation).

    Notes
    -----
    Not differentiable (no derivatives.yaml entry; use ``npu_convolution``).
    """
    return conv3d_op(input, weight, bias, stride, padding, dilation, groups)


def npu_convolution(input, weight, bias, stride, padding, dilation, groups):
    """2-D or 3-D convolution chosen by the input rank (4-D: conv2d, 5-D: conv3d).

    Formula: :func:`npu_conv2d` / :func:`npu_conv3d`.

    Parameters
    ----------
    input : Tensor
        ``(N, C_in, H, W)`` or ``(N, C_in, D, H, W)``.
    weight : Tensor
        ``(C_out, C_in / groups, *kernel)``, same rank as input.
    bias : Tensor or None
        ``(C_out,)``.
    stride, padding, dilation : list of int
        At least as many entries as spatial dims.
    groups : int

    Returns
    -------
    Tensor
        Input's dtype.

    Notes
    -----
    Differentiable in input, weight and bias through ``npu_convolution_backward``.
    """
    return convolution_op(input, weight, bias, stride, padding, dilation, groups)


def npu_convolution_backward(input, grad_output, weight, stride, padding, dilation, groups,
                             output_mask):
    """Gradients of :func:`npu_convolution`: ``(grad_input, grad_weight, grad_bias)``.

    Formula::

        grad_input  = conv_transpose(grad_output, weight)      (same stride/padding/dilation)
        grad_weight = correlation of input with grad_output
        grad_bias   = grad_output summed over N and the spatial dims

    ``output_mask`` (3 bools) selects the gradients computed; an unselected one is an empty
    tensor (the NPU leaves it undefined, ``None`` in Python, which a custom op cannot return).
    grad_weight has weight's dtype, the others input's dtype.
    """
    return convolution_backward_op(input, grad_output, weight, stride, padding, dilation, groups,
                                   output_mask)


def npu_conv2d_backward(input, grad_output, weight, stride, padding, dilation, groups,
                        output_mask):
    """Gradients of :func:`npu_conv2d` (4-D input), as :func:`npu_convolution_backward`."""
    return conv2d_backward_op(input, grad_output, weight, stride, padding, dilation, groups,
                              output_mask)


def npu_conv3d_backward(input, grad, weight, stride, padding, dilation, groups, output_mask):
    """Gradients of :func:`npu_conv3d` (5-D input), as :func:`npu_convolution_backward`."""
    return conv3d_backward_op(input, grad, weight, stride, padding, dilation, groups,
                              output_mask)


TORCH_NPU_FUNCTIONS = {
    "npu_conv2d_backward": npu_conv2d_backward,
    "npu_conv3d_backward": npu_conv3d_backward,
    "npu_conv2d": npu_conv2d,
    "npu_conv3d": npu_conv3d,
    "npu_convolution": npu_convolution,
    "npu_convolution_backward": npu_convolution_backward,
}
