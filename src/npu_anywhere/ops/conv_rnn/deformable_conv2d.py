"""torch_npu.npu_deformable_conv2d and npu_deformable_conv2dbk (modulated deformable conv v2).

Formula (seed 004 / op-plugin docs (beta)torch_npu-npu_deformable_conv2d.md; the sampling, the
offset channel layout and the deformOut layout follow ops-nn conv/deformable_conv2d
tests/assets/golden.py, which mirrors the kernel's DeformableOffsetBilinear)::

    NCHW input; stride / dilation [1, 1, sH, sW], padding [top, bottom, left, right]
    Ho = (H + top + bottom - ((kH - 1) dH + 1)) // sH + 1        (Wo likewise)
    offset channels (K = kH kW, g = deformable group, k = ki kW + kj):
        [g K + k] x (width) offsets, [dg K + g K + k] y offsets, [2 dg K + g K + k] masks
    py = oh sH - top + ki dH + offset_y,   px = ow sW - left + kj dW + offset_x
    deformOut[n, c, oh kH + ki, ow kW + kj] = mask * bilinear(input[n, c], py, px)
        (floor corners; a corner outside the image contributes 0; mask = 1 unmodulated)
    out = conv2d(deformOut, weight, bias, stride=kernel_size, groups=groups)

Computed in float32 (float64 kept) and rounded once to the input dtype (the aclnn path; the
older aclop path documents float32-only outputs).  Backward (derivatives.yaml: ``input, weight,
offset, bias: npu_deformable_conv2dbk(input, grad, result1, weight, offset, ...)``) is the exact
gradient of these steps; it reuses deformOut (``offset_out``) for the weight gradient.
"""

from __future__ import annotations

import torch

from ... import checks, targets
from ...dtypes import FLOATING, FLOATING_OR_DOUBLE
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias

OP = "npu_deformable_conv2d"
_TAIL = ("int[2] kernel_size, int[] stride, int[] padding, int[4] dilation=[1,1,1,1], "
         "int groups=1, int deformable_groups=1, bool modulated=True")
SCHEMA = (f"npu_deformable_conv2d(Tensor input, Tensor weight, Tensor offset, Tensor? bias, "
          f"{_TAIL}) -> (Tensor, Tensor)")
BACKWARD_OP = "npu_deformable_conv2dbk"
BACKWARD_SCHEMA = (f"npu_deformable_conv2dbk(Tensor input, Tensor grad_output, "
                   f"Tensor offset_out, Tensor weight, Tensor offset, {_TAIL}) "
                   f"-> (Tensor, Tensor, Tensor, Tensor)")


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _expect_nchw_list(op, name, values, low):
    checks.expect(len(values) == 4, op, name, "a list of 4 ints", lambda: list(values),
                  ValueError)
    checks.expect(all(v >= low for v in values), op, name, f"entries >= {low}",
                  lambda: list(values), ValueError)
    if name != "padding":
        checks.expect(values[0] == 1 and values[1] == 1, op, name,
                      "1 in its N and C entries", lambda: list(values), ValueError)


def _check(op, input, weight, offset, bias, kernel_size, stride, padding, dilation, groups,
           deformable_groups, modulated, extra=None):
    """Shared checks; returns (Ho, Wo)."""
    allowed = FLOATING if targets.current() is not None else FLOATING_OR_DOUBLE
    named = {"input": input, "weight": weight, "offset": offset}
    if bias is not None:
        named["bias"] = bias
    named.update(extra or {})
    for name, t in named.items():
        checks.expect_dtype(t, allowed, op, name)
        checks.expect_nonempty(t, op, name)
    checks.expect_same_dtype(named, op)
    checks.expect_same_device(named, op)
    for name in ("input", "weight", "offset"):
        checks.expect_dim(named[name], 4, op, name)
    checks.expect(len(kernel_size) == 2 and all(k > 0 for k in kernel_size), op, "kernel_size",
                  "2 positive ints", lambda: list(kernel_size), ValueError)
    kh, kw = kernel_size
    _expect_nchw_list(op, "stride", stride, 1)
    _expect_nchw_list(op, "padding", padding, 0)
    _expect_nchw_list(op, "dilation", dilation, 1)
    n, c_in, h, w = input.shape
    c_out = weight.shape[0]
    checks.expect(groups > 0 and c_in % groups == 0 and c_out % groups == 0, op, "groups",
                  lambda: f"a positive divisor of in_channels {c_in} and out_channels {c_out}",
                  groups, ValueError)
    checks.expect(deformable_groups > 0 and c_in % deformable_groups == 0, op,
                  "deformable_groups", lambda: f"a positive divisor of in_channels {c_in}",
                  deformable_groups, ValueError)
    checks.expect(tuple(weight.shape[1:]) == (c_in // groups, kh, kw), op, "weight",
                  lambda: f"the shape [out_channels, in_channels / groups = {c_in // groups}, "
                  f"{kh}, {kw}]", lambda: f"shape {tuple(weight.shape)}", RuntimeError)
    checks.expect(kh * kw <= 2048 and kh * kw * c_in // groups <= 65535, op, "kernel_size",
                  "K_H * K_W <= 2048 and K_H * K_W * in_channels / groups <= 65535",
                  lambda: list(kernel_size), ValueError)
    ho = (h + padding[0] + padding[1] - ((kh - 1) * dilation[2] + 1)) // stride[2] + 1
    wo = (w + padding[2] + padding[3] - ((kw - 1) * dilation[3] + 1)) // stride[3] + 1
    checks.expect(ho > 0 and wo > 0, op, "input", "a size giving a positive output size",
                  lambda: f"output size ({ho}, {wo})", RuntimeError)
    per = 3 if modulated else 2
    want = (n, deformable_groups * kh * kw * per, ho, wo)
    checks.expect(tuple(offset.shape) == want, op, "offset",
                  lambda: f"the shape [N, deformable_groups * K_H * K_W * {per}, outH, outW] = "
                  f"{want}", lambda: f"shape {tuple(offset.shape)}", RuntimeError)
    if bias is not None:
        checks.expect(tuple(bias.shape) == (c_out,), op, "bias",
                      lambda: f"the shape [out_channels] = ({c_out},)",
                      lambda: f"shape {tuple(bias.shape)}", RuntimeError)
    return ho, wo


def check_deformable_conv2d(input, weight, offset, bias, kernel_size, stride, padding,
                            dilation=(1, 1, 1, 1), groups=1, deformable_groups=1,
                            modulated=True):
    _check(OP, input, weight, offset, bias, kernel_size, stride, padding, dilation, groups,
           deformable_groups, modulated)


def check_deformable_conv2dbk(input, grad_output, offset_out, weight, offset, kernel_size, stride,
                              padding, dilation=(1, 1, 1, 1), groups=1, deformable_groups=1,
                              modulated=True):
    ho, wo = _check(BACKWARD_OP, input, weight, offset, None, kernel_size, stride, padding,
                    dilation, groups, deformable_groups, modulated,
                    {"grad_output": grad_output, "offset_out": offset_out})
    n, c_in = input.shape[:2]
    for name, t, shape in (("grad_output", grad_output, (n, weight.shape[0], ho, wo)),
                           ("offset_out", offset_out,
                            (n, c_in, ho * kernel_size[0], wo * kernel_size[1]))):
        checks.expect(tuple(t.shape) == shape, BACKWARD_OP, name, lambda s=shape: f"the shape "
                      f"{s}", lambda t=t: f"shape {tuple(t.shape)}", RuntimeError)


class _Sampling:
    """Sampling positions, bilinear corner indices and weights of one call, [N, dg, P] each
    (P = K_H K_W Ho Wo, ordered (ki, kj, oh, ow))."""

    def __init__(self, input, offset, kernel_size, stride, padding, dilation, dg, modulated, ct):
        n, c, h, w = input.shape
        kh, kw = kernel_size
        ho, wo = offset.shape[2:]
        k = kh * kw
        off = offset.to(ct).reshape(n, 3 if modulated else 2, dg, kh, kw, ho, wo)
        dev = input.device
        base_y = (torch.arange(ho, device=dev, dtype=ct) * stride[2] - padding[0]).reshape(
            1, 1, 1, 1, ho, 1) + (torch.arange(kh, device=dev, dtype=ct) * dilation[2]).reshape(
            1, 1, kh, 1, 1, 1)
        base_x = (torch.arange(wo, device=dev, dtype=ct) * stride[3] - padding[2]).reshape(
            1, 1, 1, 1, 1, wo) + (torch.arange(kw, device=dev, dtype=ct) * dilation[3]).reshape(
            1, 1, 1, kw, 1, 1)
        self.py = (base_y + off[:, 1]).reshape(n, dg, -1)
        self.px = (base_x + off[:, 0]).reshape(n, dg, -1)
        self.mask = off[:, 2].reshape(n, dg, -1) if modulated else None
        y0, x0 = self.py.floor(), self.px.floor()
        self.dy, self.dx = self.py - y0, self.px - x0
        y0, x0 = y0.long(), x0.long()
        self.corners = []
        for cy, cx, wgt in ((0, 0, (1 - self.dy) * (1 - self.dx)), (0, 1, (1 - self.dy) * self.dx),
                            (1, 0, self.dy * (1 - self.dx)), (1, 1, self.dy * self.dx)):
            yy, xx = y0 + cy, x0 + cx
            valid = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
            index = torch.where(valid, yy * w + xx, torch.zeros_like(yy))
            self.corners.append((index, valid.to(ct), wgt))
        self.shape = (n, c, h, w, kh, kw, ho, wo, dg)

    def values(self, x):
        """The four corner values, [N, dg, cg, P] each (0 outside the image)."""
        n, c, h, w, *_rest, dg = self.shape
        flat = x.reshape(n, dg, c // dg, h * w)
        out = []
        for index, valid, _w in self.corners:
            idx = index.unsqueeze(2).expand(-1, -1, c // dg, -1)
            out.append(flat.gather(3, idx) * valid.unsqueeze(2))
        return out

    def to_image(self, cols):
        """[N, dg, cg, P] (ordered ki, kj, oh, ow) -> deformOut [N, C, Ho kH, Wo kW]."""
        n, c, _h, _w, kh, kw, ho, wo, _dg = self.shape
        cols = cols.reshape(n, c, kh, kw, ho, wo).permute(0, 1, 4, 2, 5, 3)
        return cols.reshape(n, c, ho * kh, wo * kw)

    def from_image(self, image):
        n, c, _h, _w, kh, kw, ho, wo, dg = self.shape
        cols = image.reshape(n, c, ho, kh, wo, kw).permute(0, 1, 3, 5, 2, 4)
        return cols.reshape(n, dg, c // dg, -1)


def _bilinear(sampling, corner_values):
    return sum(v * wgt.unsqueeze(2) for v, (_i, _valid, wgt) in zip(corner_values,
                                                                     sampling.corners))


def deformable_conv2d_reference(input, weight, offset, bias, kernel_size, stride, padding,
                                dilation=(1, 1, 1, 1), groups=1, deformable_groups=1,
                                modulated=True):
    ct = _compute_dtype(input.dtype)
    s = _Sampling(input, offset, kernel_size, stride, padding, dilation, deformable_groups,
                  modulated, ct)
    sampled = _bilinear(s, s.values(input.to(ct)))
    if s.mask is not None:
        sampled = sampled * s.mask.unsqueeze(2)
    deform_out = s.to_image(sampled)
    out = torch.nn.functional.conv2d(deform_out, weight.to(ct),
                                     None if bias is None else bias.to(ct),
                                     stride=list(kernel_size), groups=groups)
    return out.to(input.dtype), deform_out.to(input.dtype)


def deformable_conv2dbk_reference(input, grad_output, offset_out, weight, offset, kernel_size,
                                  stride, padding, dilation=(1, 1, 1, 1), groups=1,
                                  deformable_groups=1, modulated=True):
    """(grad_input, grad_weight, grad_offset, grad_bias), each in its input's dtype."""
    ct = _compute_dtype(input.dtype)
    g = grad_output.to(ct)
    grad_deform, grad_weight, grad_bias = torch.ops.aten.convolution_backward(
        g, offset_out.to(ct), weight.to(ct), [weight.shape[0]], list(kernel_size), [0, 0],
        [1, 1], False, [0, 0], groups, [True, True, True])
    s = _Sampling(input, offset, kernel_size, stride, padding, dilation, deformable_groups,
                  modulated, ct)
    x = input.to(ct)
    corners = s.values(x)
    gcols = s.from_image(grad_deform)                           # [N, dg, cg, P]
    g_sample = gcols * s.mask.unsqueeze(2) if s.mask is not None else gcols
    n, c, h, w, *_rest = s.shape
    grad_x = torch.zeros(n, deformable_groups, c // deformable_groups, h * w, dtype=ct,
                         device=input.device)
    for (index, valid, wgt) in s.corners:
        idx = index.unsqueeze(2).expand_as(g_sample)
        grad_x = grad_x.scatter_add(3, idx, g_sample * (wgt * valid).unsqueeze(2))
    tl, tr, bl, br = corners
    dy, dx = s.dy.unsqueeze(2), s.dx.unsqueeze(2)
    d_py = ((1 - dx) * (bl - tl) + dx * (br - tr))
    d_px = ((1 - dy) * (tr - tl) + dy * (br - bl))
    parts = [(g_sample * d_px).sum(2), (g_sample * d_py).sum(2)]
    if s.mask is not None:
        parts.append((gcols * _bilinear(s, corners)).sum(2))
    kh, kw = kernel_size
    ho, wo = offset.shape[2:]
    grad_offset = torch.stack(parts, 1).reshape(n, len(parts) * deformable_groups * kh * kw,
                                                ho, wo)
    return (grad_x.reshape(input.shape).to(input.dtype), grad_weight.to(weight.dtype),
            grad_offset.to(offset.dtype), grad_bias.to(grad_output.dtype))


deformable_conv2d_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_deformable_conv2d,
                             reference=deformable_conv2d_reference, metadata_check=True,
                             info=OpInfo(api="torch_npu"))
deformable_conv2dbk_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                               check=check_deformable_conv2dbk,
                               reference=deformable_conv2dbk_reference, metadata_check=True,
                               info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    input, weight, offset, bias, *args = inputs
    _out, deform_out = output
    ctx.mark_non_differentiable(deform_out)
    ctx.save_for_backward(input, weight, offset, deform_out)
    ctx.args = args
    ctx.has_bias = bias is not None


def _backward(ctx, grad, _grad_deform_out):
    input, weight, offset, deform_out = ctx.saved_tensors
    gi, gw, go, gb = deformable_conv2dbk_op(input, grad.contiguous(), deform_out, weight,
                                            offset, *ctx.args)
    need = ctx.needs_input_grad
    return (gi if need[0] else None, gw if need[1] else None, go if need[2] else None,
            gb if need[3] and ctx.has_bias else None, None, None, None, None, None, None, None)


deformable_conv2d_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_deformable_conv2d(input=None, weight=None, offset=None, bias=None, kernel_size=None,
                          stride=None, padding=None, dilation=(1, 1, 1, 1), groups=1,
                          deformable_groups=1, modulated=True, **kwargs):
    """Modulated deformable convolution (DCN v2) over NCHW input; also returns deformOut.

    Formula (seed 004; layouts from the kernel golden)::

        py = oh sH - pad_top + ki dH + offset[n, dg K + g K + k, oh, ow]
        px = ow sW - pad_left + kj dW + offset[n, g K + k, oh, ow]
        deformOut[n, c, oh kH + ki, ow kW + kj] = mask * bilinear(input[n, c], py, px)
        mask = offset[n, 2 dg K + g K + k, oh, ow] if modulated else 1
        out = conv2d(deformOut, weight, bias, stride=kernel_size, groups=groups)

    Parameters
    ----------
    input : Tensor
        ``[N, C_in, H, W]`` (``self=`` accepted), float16, bfloat16 or float32 (float64 too
        outside strict mode).
    weight : Tensor
        ``[C_out, C_in / groups, K_H, K_W]``.
    offset : Tensor
        ``[N, deformable_groups * K_H * K_W * 3 (2 unmodulated), outH, outW]``: x offsets, then
        y offsets, then masks, each block ordered (group, ki, kj).
    bias : Tensor or None
        ``[C_out]``.
    kernel_size : list of 2 int
    stride : list of 4 int
        ``[1, 1, sH, sW]``.
    padding : list of 4 int
        ``[top, bottom, left, right]``.
    dilation : list of 4 int
        ``[1, 1, dH, dW]``.
    groups, deformable_groups : int
        Divisors of C_in (groups also of C_out).
    modulated : bool
        Whether offset carries the mask block.

    Returns
    -------
    (Tensor, Tensor)
        ``out`` ``[N, C_out, outH, outW]`` and ``deformOut`` ``[N, C_in, outH * K_H,
        outW * K_W]``, input's dtype (float32 computation, rounded once).

    Constraints
    -----------
    K_H K_W <= 2048, K_H K_W C_in / groups <= 65535.

    Notes
    -----
    Differentiable in input, weight, offset and bias through ``npu_deformable_conv2dbk``
    (deformOut is not differentiable).

    Examples
    --------
    >>> x = torch.rand(1, 4, 6, 6); w = torch.rand(4, 4, 3, 3); off = torch.rand(1, 27, 6, 6)
    >>> out, deform = npu_anywhere.npu_deformable_conv2d(
    ...     x, w, off, None, kernel_size=[3, 3], stride=[1, 1, 1, 1], padding=[1, 1, 1, 1])
    >>> out.shape, deform.shape
    (torch.Size([1, 4, 6, 6]), torch.Size([1, 4, 18, 18]))
    """
    if kwargs:
        input = accept_alias(OP, "input", input, "self", kwargs)
    return deformable_conv2d_op(input, weight, offset, bias, kernel_size, stride, padding,
                                dilation, groups, deformable_groups, modulated)


def npu_deformable_conv2dbk(input, grad_output, offset_out, weight, offset, kernel_size, stride,
                            padding, dilation=(1, 1, 1, 1), groups=1, deformable_groups=1,
                            modulated=True):
    """Gradients of :func:`npu_deformable_conv2d`: ``(grad_input, grad_weight, grad_offset,
    grad_bias)``.

    Formula: ``grad_deform = conv_transpose(grad_output, weight)`` (stride = kernel),
    ``grad_weight`` from ``offset_out`` (the forward's deformOut), ``grad_bias`` the sum of
    grad_output over N, H, W; grad_deform flows to the four bilinear corners of input (times
    the mask), to the offsets through the bilinear derivative in y and x, and to the masks as
    the sampled values.
    """
    return deformable_conv2dbk_op(input, grad_output, offset_out, weight, offset, kernel_size,
                                  stride, padding, dilation, groups, deformable_groups,
                                  modulated)


TORCH_NPU_FUNCTIONS = {OP: npu_deformable_conv2d, BACKWARD_OP: npu_deformable_conv2dbk}
