"""torch_npu.npu_conv_transpose2d, npu_convolution_transpose and its backward.

Formula (seed 004 / op-plugin docs (beta)torch_npu-npu_conv_transpose2d.md,
-npu_convolution_transpose.md: "same as torch.nn.functional.conv_transpose2d / 3d"): the
gradient of a convolution with respect to its input, i.e. every input pixel scatters
``input[n, ci, p] * weight[ci, co, k]`` to output position ``p * stride - padding +
k * dilation``; ``output_padding`` adds rows/columns on one side only::

    out_size = (in - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1

Note the argument order of the NPU schema: ``padding, output_padding, stride, dilation``.
Host code followed: op-plugin aclops ConvTranspose2dKernelNpu.cpp (first 2 entries of each list
used) and ConvolutionKernelNpu.cpp (``npu_convolution_transpose`` picks 2-D or 3-D by rank).
Backward (derivatives.yaml): ``input, weight, bias: npu_convolution_transpose_backward(input,
grad, weight, padding, output_padding, stride, dilation, groups, grad_input_mask)``.
"""

from __future__ import annotations

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from . import conv_params as cp

_ARGS = ("Tensor input, Tensor weight, Tensor? bias, int[] padding, int[] output_padding, "
         "int[] stride, int[] dilation, int groups")
TRANSPOSE2D_SCHEMA = f"npu_conv_transpose2d({_ARGS}) -> Tensor"
TRANSPOSE_SCHEMA = f"npu_convolution_transpose({_ARGS}) -> Tensor"
BACKWARD_OP = "npu_convolution_transpose_backward"
_BACKWARD_ARGS = ("Tensor weight, int[] padding, int[] output_padding, int[] stride, "
                  "int[] dilation, int groups")
_RESULT = "-> (Tensor, Tensor, Tensor)"
BACKWARD_SCHEMA = (f"npu_convolution_transpose_backward(Tensor input, Tensor grad, "
                   f"{_BACKWARD_ARGS}, bool[3] grad_input_mask) {_RESULT}")
# The per-rank backward ops op-plugin also exposes; not wired to autograd (npu_conv_transpose2d
# has no derivatives entry).
TRANSPOSE2D_BACKWARD_SCHEMA = (f"npu_conv_transpose2d_backward(Tensor input, Tensor grad_output, "
                               f"{_BACKWARD_ARGS}, bool[3] output_mask) {_RESULT}")
TRANSPOSE3D_BACKWARD_SCHEMA = (f"npu_conv_transpose3d_backward(Tensor input, Tensor grad_output, "
                               f"{_BACKWARD_ARGS}, bool[3] output_mask) {_RESULT}")


def _checker(op: str, dims):
    def check(input, weight, bias, padding, output_padding, stride, dilation, groups):
        nd = cp.check_tensors(op, input, weight, bias, dims)
        cp.check_geometry(op, input, weight, bias, stride, padding, dilation, groups,
                          transposed=True, output_padding=output_padding, nd=nd)
    check.__name__ = f"check_{op.removeprefix('npu_')}"
    return check


def conv_transpose_reference(input, weight, bias, padding, output_padding, stride, dilation,
                             groups):
    return cp.forward(input, weight, bias, stride, padding, dilation, groups, transposed=True,
                      output_padding=output_padding)


def _backward_checker(op: str, dims, grad_name: str, mask_name: str):
    def check(input, grad, weight, padding, output_padding, stride, dilation, groups, mask):
        checks.expect_dim(input, dims, op, "input")
        cp.check_backward(op, input, grad, weight, stride, padding, dilation, groups, mask,
                          transposed=True, output_padding=output_padding, grad_name=grad_name,
                          mask_name=mask_name)
    check.__name__ = f"check_{op.removeprefix('npu_')}"
    return check


check_convolution_transpose_backward = _backward_checker(BACKWARD_OP, (4, 5), "grad",
                                                         "grad_input_mask")


def convolution_transpose_backward_reference(input, grad, weight, padding, output_padding,
                                             stride, dilation, groups, grad_input_mask):
    return cp.backward(input, grad, weight, stride, padding, dilation, groups, grad_input_mask,
                       transposed=True, output_padding=output_padding)


def _op(schema: str, dims) -> NpuOp:
    name = schema.split("(", 1)[0]
    return NpuOp(schema, namespace=TORCH_NPU_NS, check=_checker(name, dims),
                 reference=conv_transpose_reference, metadata_check=True,
                 info=OpInfo(api="torch_npu"))


conv_transpose2d_op = _op(TRANSPOSE2D_SCHEMA, (4,))
convolution_transpose_op = _op(TRANSPOSE_SCHEMA, (4, 5))


def _backward_op(schema: str, dims, forward: str, grad_name: str = "grad_output",
                 mask_name: str = "output_mask") -> NpuOp:
    name = schema.split("(", 1)[0]
    return NpuOp(schema, namespace=TORCH_NPU_NS,
                 check=_backward_checker(name, dims, grad_name, mask_name),
                 reference=convolution_transpose_backward_reference, metadata_check=True,
                 info=OpInfo(api="torch_npu", backward_of=forward))


convolution_transpose_backward_op = _backward_op(BACKWARD_SCHEMA, (4, 5),
                                                 "npu_convolution_transpose", "grad",
                                                 "grad_input_mask")
conv_transpose2d_backward_op = _backward_op(TRANSPOSE2D_BACKWARD_SCHEMA, (4,),
                                            "npu_conv_transpose2d")
conv_transpose3d_backward_op = _backward_op(TRANSPOSE3D_BACKWARD_SCHEMA, (5,),
                                            "npu_convolution_transpose")

conv_transpose2d_op.forbid_autograd("op-plugin's derivatives.yaml has no backward for it; "
                                    "npu_convolution_transpose is the differentiable form")


cp.set_autograd(convolution_transpose_op, convolution_transpose_backward_op)


def npu_conv_transpose2d(input, weight, bias, padding, output_padding, stride, dilation, groups):
    """2-D transposed convolution ("deconvolution"), as ``torch.nn.functional.conv_transpose2d``.

    Formula::

        out[n, co, h, w] = bias[co] + sum over (ci, i, j, h', w') with
                           h = h' * sH - pH + i * dH,  w = w' * sW - pW + j * dW  of
                           input[n, ci, h', w'] * weight[ci, co - g(ci) * C_out/groups, i, j]
        Ho = (H - 1) * sH - 2 pH + dH (kH - 1) + output_padding_H + 1

    Parameters
    ----------
    input : Tensor
        ``(N, C_in, H, W)``, float16, bfloat16 or float32 (float64 outside strict mode).
    weight : Tensor
        ``(C_in, C_out / groups, kH, kW)``.
    bias : Tensor or None
        ``(C_out,)``.
    padding : list of int
        ``dilation * (kernel - 1) - padding`` zeros pad each side of the input (>= 0).
    output_padding : list of int
        Extra size on one side of each output dim; smaller than stride or dilation.
    stride, dilation : list of int
        At least 2 entries each (the first 2 are used).
    groups : int
        ``C_in`` divisible by it.

    Returns
    -------
    Tensor
        ``(N, C_out, Ho, Wo)``, input's dtype (float32 accumulation, rounded once).

    Notes
    -----
    Not differentiable (no derivatives.yaml entry; use ``npu_convolution_transpose``).
    """
    return conv_transpose2d_op(input, weight, bias, padding, output_padding, stride, dilation,
                               groups)


def npu_convolution_transpose(input, weight, bias, padding, output_padding, stride, dilation,
                              groups):
    """2-D or 3-D transposed convolution chosen by the input rank.

    Formula: :func:`npu_conv_transpose2d`, with a third spatial dim for 5-D input.

    Parameters
    ----------
    input : Tensor
        ``(N, C_in, H, W)`` or ``(N, C_in, D, H, W)``.
    weight : Tensor
        ``(C_in, C_out / groups, *kernel)``.
    bias : Tensor or None
        ``(C_out,)``.
    padding, output_padding, stride, dilation : list of int
        At least as many entries as spatial dims (in this order, as the schema has them).
    groups : int

    Returns
    -------
    Tensor
        Input's dtype.

    Notes
    -----
    Differentiable in input, weight and bias through ``npu_convolution_transpose_backward``.
    """
    return convolution_transpose_op(input, weight, bias, padding, output_padding, stride,
                                    dilation, groups)


def npu_convolution_transpose_backward(input, grad, weight, padding, output_padding, stride,
                                       dilation, groups, grad_input_mask):
    """Gradients of :func:`npu_convolution_transpose`: ``(grad_input, grad_weight, grad_bias)``.

    Formula::

        grad_input  = conv(grad, weight)           (same stride/padding/dilation/groups)
        grad_weight = correlation of grad with input
        grad_bias   = grad summed over N and the spatial dims

    ``grad_input_mask`` (3 bools) selects the gradients computed; an unselected one is an empty
    tensor (undefined on the NPU).  grad_weight has weight's dtype.
    """
    return convolution_transpose_backward_op(input, grad, weight, padding, output_padding,
                                             stride, dilation, groups, grad_input_mask)


def npu_conv_transpose2d_backward(input, grad_output, weight, padding, output_padding, stride,
                                  dilation, groups, output_mask):
    """Gradients of :func:`npu_conv_transpose2d` (4-D input), as
    :func:`npu_convolution_transpose_backward`."""
    return conv_transpose2d_backward_op(input, grad_output, weight, padding, output_padding,
                                        stride, dilation, groups, output_mask)


def npu_conv_transpose3d_backward(input, grad_output, weight, padding, output_padding, stride,
                                  dilation, groups, output_mask):
    """Gradients of a 3-D transposed convolution (5-D input), as
    :func:`npu_convolution_transpose_backward`."""
    return conv_transpose3d_backward_op(input, grad_output, weight, padding, output_padding,
                                        stride, dilation, groups, output_mask)


TORCH_NPU_FUNCTIONS = {
    "npu_conv_transpose2d_backward": npu_conv_transpose2d_backward,
    "npu_conv_transpose3d_backward": npu_conv_transpose3d_backward,
    "npu_conv_transpose2d": npu_conv_transpose2d,
    "npu_convolution_transpose": npu_convolution_transpose,
    "npu_convolution_transpose_backward": npu_convolution_transpose_backward,
}
