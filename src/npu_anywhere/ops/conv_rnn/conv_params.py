"""What the plain convolution ops share: argument checks, the ATen mapping and the backward.

The NPU entry points (op-plugin aclops Conv2dKernelNpu.cpp, Conv3dKernelNpu.cpp,
ConvTranspose2dKernelNpu.cpp, ConvolutionKernelNpu.cpp) take ``stride``, ``padding``,
``dilation`` (and ``output_padding``) as lists of *at least* as many entries as spatial dims and
read the first ones (``stride[0], stride[1]`` for 2-D); a longer list is not an error.  The
arithmetic is ATen's convolution: float16/bfloat16 accumulate in float32 on the cube unit and
are rounded once, so the reference computes in float32 and rounds once.
"""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def spatial(values: Sequence[int], n: int) -> list[int]:
    """The first ``n`` entries, the ones the NPU kernels read."""
    return [int(v) for v in list(values)[:n]]


def _expect_list(op: str, name: str, values: Sequence[int], n: int, low: int) -> None:
    checks.expect(len(values) >= n, op, name, f"a list of at least {n} ints",
                  lambda: list(values), ValueError)
    bad = [v for v in list(values)[:n] if v < low]
    checks.expect(not bad, op, name, f"entries >= {low}", lambda: list(values), ValueError)


def check_tensors(op: str, input, weight, bias, dims: Sequence[int], grad=None,
                  grad_name: str = "grad_output") -> int:
    """Ranks, dtypes and devices of (grad,) input, weight and bias; the number of spatial dims."""
    checks.expect_dim(input, dims, op, "input")
    nd = input.dim() - 2
    checks.expect(weight.dim() == input.dim(), op, "weight",
                  lambda: f"a {input.dim()}-D tensor like input", lambda: f"shape "
                  f"{tuple(weight.shape)}", ValueError)
    allowed = FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE
    named = {"input": input, "weight": weight}
    if bias is not None:
        named["bias"] = bias
    if grad is not None:
        named[grad_name] = grad
    for name, t in named.items():
        checks.expect_dtype(t, allowed, op, name)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)
    return nd


def check_geometry(op: str, input, weight, bias, stride, padding, dilation, groups,
                   transposed: bool, output_padding: Optional[Sequence[int]] = None,
                   nd: int = 2) -> list[int]:
    """Lists, groups and channel counts; returns the output shape."""
    _expect_list(op, "stride", stride, nd, 1)
    _expect_list(op, "padding", padding, nd, 0)
    _expect_list(op, "dilation", dilation, nd, 1)
    if output_padding is not None:
        _expect_list(op, "output_padding", output_padding, nd, 0)
    checks.expect(groups >= 1, op, "groups", ">= 1", groups, ValueError)
    n, c_in = input.shape[0], input.shape[1]
    checks.expect(c_in % groups == 0, op, "input", lambda: f"in_channels divisible by groups "
                  f"= {groups}", lambda: f"in_channels {c_in}", RuntimeError)
    k = list(weight.shape[2:])
    checks.expect(all(v > 0 for v in k), op, "weight", "a nonzero kernel size",
                  lambda: f"shape {tuple(weight.shape)}", ValueError)
    st, pad, dil = spatial(stride, nd), spatial(padding, nd), spatial(dilation, nd)
    if transposed:
        # weight (in_channels, out_channels / groups, *kernel)
        checks.expect(weight.shape[0] == c_in, op, "weight",
                      lambda: f"size(0) equal to in_channels {c_in}",
                      lambda: f"shape {tuple(weight.shape)}", RuntimeError)
        c_out = weight.shape[1] * groups
        out_pad = spatial(output_padding, nd)
        for i in range(nd):
            checks.expect(out_pad[i] < st[i] or out_pad[i] < dil[i], op, "output_padding",
                          "entries smaller than stride or dilation",
                          lambda: list(output_padding), ValueError)
        size = [(input.shape[2 + i] - 1) * st[i] - 2 * pad[i] + dil[i] * (k[i] - 1)
                + out_pad[i] + 1 for i in range(nd)]
    else:
        # weight (out_channels, in_channels / groups, *kernel)
        checks.expect(weight.shape[1] * groups == c_in, op, "weight",
                      lambda: f"size(1) equal to in_channels / groups = {c_in // groups}",
                      lambda: f"shape {tuple(weight.shape)}", RuntimeError)
        c_out = weight.shape[0]
        checks.expect(c_out % groups == 0, op, "weight",
                      lambda: f"out_channels divisible by groups = {groups}",
                      lambda: f"shape {tuple(weight.shape)}", RuntimeError)
        size = [(input.shape[2 + i] + 2 * pad[i] - dil[i] * (k[i] - 1) - 1) // st[i] + 1
                for i in range(nd)]
    checks.expect(all(s > 0 for s in size), op, "input",
                  "spatial sizes that give a positive output size after padding",
                  lambda: f"input shape {tuple(input.shape)}, kernel {k}, output size {size}",
                  RuntimeError)
    if bias is not None:
        checks.expect(tuple(bias.shape) == (c_out,), op, "bias",
                      lambda: f"the shape (out_channels,) = ({c_out},)",
                      lambda: f"shape {tuple(bias.shape)}", RuntimeError)
    return [n, c_out, *size]


def check_backward(op: str, input, grad, weight, stride, padding, dilation, groups, mask,
                   transposed: bool, output_padding=None, grad_name: str = "grad_output",
                   mask_name: str = "output_mask") -> None:
    nd = check_tensors(op, input, weight, None, (4, 5), grad, grad_name)
    shape = check_geometry(op, input, weight, None, stride, padding, dilation, groups,
                           transposed, output_padding, nd)
    checks.expect(list(grad.shape) == shape, op, grad_name,
                  lambda: f"the forward output shape {tuple(shape)}",
                  lambda: f"shape {tuple(grad.shape)}", RuntimeError)
    checks.expect(len(mask) == 3, op, mask_name, "3 bools", lambda: list(mask), ValueError)


def forward(input, weight, bias, stride, padding, dilation, groups, transposed,
            output_padding=None):
    """ATen's convolution, float32 accumulation for the half types, rounded once."""
    nd = input.dim() - 2
    ct = compute_dtype(input.dtype)
    out_pad = spatial(output_padding, nd) if transposed else [0] * nd
    out = torch.ops.aten.convolution(
        input.to(ct), weight.to(ct), None if bias is None else bias.to(ct),
        spatial(stride, nd), spatial(padding, nd), spatial(dilation, nd), transposed, out_pad,
        groups)
    return out.to(input.dtype)


def backward(input, grad, weight, stride, padding, dilation, groups, mask, transposed,
             output_padding=None):
    """(grad_input, grad_weight, grad_bias); an entry whose mask is False is an empty tensor
    (the NPU returns an undefined tensor there, which a custom op cannot).  grad_weight has
    weight's dtype, as op-plugin casts it."""
    nd = input.dim() - 2
    ct = compute_dtype(input.dtype)
    out_pad = spatial(output_padding, nd) if transposed else [0] * nd
    c_out = grad.shape[1]
    want = [bool(m) for m in mask]
    gi, gw, gb = torch.ops.aten.convolution_backward(
        grad.to(ct), input.to(ct), weight.to(ct), [c_out], spatial(stride, nd),
        spatial(padding, nd), spatial(dilation, nd), transposed, out_pad, groups, want)
    empty = input.new_empty((0,))
    return (gi.to(input.dtype) if want[0] else empty,
            gw.to(weight.dtype) if want[1] else weight.new_empty((0,)),
            gb.to(grad.dtype) if want[2] else empty)


def set_autograd(forward_op, backward_op) -> None:
    """Differentiate ``forward_op(input, weight, bias, *geometry)`` through
    ``backward_op(input, grad, weight, *geometry, mask)`` (derivatives.yaml passes the
    needs-grad mask of input, weight and bias as the backward's output mask)."""

    def setup_context(ctx, inputs, output):
        input, weight, bias, *geometry = inputs
        ctx.save_for_backward(input, weight)
        ctx.geometry = geometry
        ctx.has_bias = bias is not None

    def backward(ctx, grad):
        input, weight = ctx.saved_tensors
        need = list(ctx.needs_input_grad[:3])
        need[2] = need[2] and ctx.has_bias
        result = backward_op(input, grad.contiguous(), weight, *ctx.geometry, need)
        grads = tuple(r if n else None for n, r in zip(need, result))
        return (*grads, *([None] * len(ctx.geometry)))

    forward_op.set_autograd(setup_context=setup_context, backward=backward)
