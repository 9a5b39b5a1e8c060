"""torch_npu.npu_ps_roi_pooling and npu_ps_roi_pooling_backward (R-FCN position-sensitive
ROI pooling).

Shapes from op-plugin op_plugin/ops/aclops/PsRoiPoolingKernelNpu.cpp: ``rois`` is
``[N, 5, R]``, the output ``[N * R, output_dim, group_size, group_size]`` (row ``n * R + r``
for roi ``rois[n, :, r]``), the backward's result ``[N, group_size**2 * output_dim, H, W]``.
The pooling is R-FCN's position-sensitive average (the PSROIPooling layer the op is named
after; seed 004 "npu_ps_roi_pooling")::

    start = round(x1) * s,   end = (round(x2) + 1) * s,   size = max(end - start, 0.1)
    bin = size / g
    h0 = clamp(floor(start_y + gh * bin_h), 0, H),  h1 = clamp(ceil(start_y + (gh+1) * bin_h), 0, H)
    (w0, w1 likewise)
    out[k, d, gh, gw] = mean_{h0 <= h < h1, w0 <= w < w1} x[b, (d * g + gh) * g + gw, h, w]
                        (0 for an empty bin or a batch id b = floor(roi[0]) outside [0, B))

``round(v)`` is ``floor(v + 0.5)`` and the batch id is floored, as the PSROIPoolingV2 kernel
converts them (CANN's TBE p_s_r_o_i_pooling_v2.py, which also requires ``rois`` of the
features' batch and dtype).  Bin sums come from a float64 summed-area table of
the features, so the mean is exact to one rounding whatever the bin size.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias

OP = "npu_ps_roi_pooling"
SCHEMA = ("npu_ps_roi_pooling(Tensor self, Tensor rois, float spatial_scale, int group_size, "
          "int output_dim) -> Tensor")
BACKWARD_OP = "npu_ps_roi_pooling_backward"
BACKWARD_SCHEMA = ("npu_ps_roi_pooling_backward(Tensor output_grad, Tensor rois, "
                   "float spatial_scale, int group_size, int output_dim, SymInt[] input_size) "
                   "-> Tensor")

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _check_attrs(op, rois, spatial_scale, group_size, output_dim):
    checks.expect_dtype(rois, _FLOATS, op, "rois")
    checks.expect(rois.dim() == 3 and rois.shape[1] == 5, op, "rois",
                  "of shape [batch, 5, rois_num] (batch_id, x1, y1, x2, y2)",
                  lambda: f"shape {tuple(rois.shape)}", ValueError)
    checks.expect(spatial_scale > 0, op, "spatial_scale", "> 0", spatial_scale, ValueError)
    checks.expect(0 < group_size < 128, op, "group_size", "in (0, 128)", group_size, ValueError)
    checks.expect(output_dim > 0, op, "output_dim", "> 0", output_dim, ValueError)


def check_ps_roi_pooling(self, rois, spatial_scale, group_size, output_dim):
    checks.expect_dtype(self, _FLOATS, OP, "self")
    checks.expect_dim(self, 4, OP, "self")
    _check_attrs(OP, rois, spatial_scale, group_size, output_dim)
    channels = group_size * group_size * output_dim
    checks.expect(self.shape[1] == channels, OP, "self",
                  lambda: f"group_size**2 * output_dim = {channels} channels",
                  lambda: f"shape {tuple(self.shape)}")
    checks.expect(rois.shape[0] == self.shape[0], OP, "rois",
                  lambda: f"the batch of self ({self.shape[0]}) in dim 0",
                  lambda: f"shape {tuple(rois.shape)}")
    checks.expect_same_dtype({"self": self, "rois": rois}, OP)
    checks.expect_same_device({"self": self, "rois": rois}, OP)


def check_ps_roi_pooling_backward(output_grad, rois, spatial_scale, group_size, output_dim,
                                  input_size):
    op = BACKWARD_OP
    checks.expect_dtype(output_grad, _FLOATS, op, "output_grad")
    _check_attrs(op, rois, spatial_scale, group_size, output_dim)
    checks.expect(len(input_size) >= 2, op, "input_size", "at least 2 sizes [H, W]",
                  list(input_size), ValueError)
    expected = [rois.shape[0] * rois.shape[2], output_dim, group_size, group_size]
    checks.expect(list(output_grad.shape) == expected, op, "output_grad",
                  lambda: f"the shape [batch * rois_num, output_dim, group_size, group_size] = "
                          f"{expected}", lambda: f"shape {list(output_grad.shape)}")
    checks.expect_same_dtype({"output_grad": output_grad, "rois": rois}, op)
    checks.expect_same_device({"output_grad": output_grad, "rois": rois}, op)


def _round_half_up(v):
    return torch.floor(v + 0.5)


def _bins(rois, spatial_scale, group_size, height, width):
    """Per roi ``k`` and bin: the edges ``[K, g]`` (h0, h1, w0, w1), the image and validity."""
    r = rois.to(torch.float64).permute(0, 2, 1).reshape(-1, 5)
    steps = torch.arange(group_size, dtype=torch.float64, device=r.device)

    def edges(lo, hi, limit):
        start = _round_half_up(lo) * spatial_scale
        end = (_round_half_up(hi) + 1.0) * spatial_scale
        size = (end - start).clamp_min(0.1) / group_size
        first = torch.floor(start[:, None] + steps * size[:, None]).clamp(0, limit)
        last = torch.ceil(start[:, None] + (steps + 1) * size[:, None]).clamp(0, limit)
        return first.long(), last.long()

    h0, h1 = edges(r[:, 2], r[:, 4], height)
    w0, w1 = edges(r[:, 1], r[:, 3], width)
    return h0, h1, w0, w1, r[:, 0].floor()


def _channel_map(group_size, output_dim, device):
    """``[output_dim, g, g]`` input channel read by each output position."""
    d = torch.arange(output_dim, device=device)[:, None, None]
    gh = torch.arange(group_size, device=device)[None, :, None]
    gw = torch.arange(group_size, device=device)[None, None, :]
    return (d * group_size + gh) * group_size + gw


def _geometry(rois, spatial_scale, group_size, output_dim, batch, height, width):
    h0, h1, w0, w1, b = _bins(rois, spatial_scale, group_size, height, width)
    valid = (b >= 0) & (b < batch)
    image = b.clamp(0, max(batch - 1, 0)).long()
    # [K, g, g] bin corners and areas (gh indexes rows, gw columns)
    rows0, rows1 = h0[:, :, None], h1[:, :, None]
    cols0, cols1 = w0[:, None, :], w1[:, None, :]
    area = ((rows1 - rows0).clamp_min(0) * (cols1 - cols0).clamp_min(0)).to(torch.float64)
    scale = torch.where((area > 0) & valid[:, None, None], 1.0 / area.clamp_min(1.0),
                        torch.zeros_like(area))
    return image, rows0, rows1, cols0, cols1, scale


def ps_roi_pooling_reference(self, rois, spatial_scale, group_size, output_dim):
    batch, _, height, width = self.shape
    k = rois.shape[0] * rois.shape[2]
    if k == 0 or self.numel() == 0:
        return self.new_zeros(k, output_dim, group_size, group_size)
    image, r0, r1, c0, c1, scale = _geometry(rois, spatial_scale, group_size, output_dim,
                                             batch, height, width)
    table = torch.nn.functional.pad(self.to(torch.float64).cumsum(2).cumsum(3), (1, 0, 1, 0))
    channel = _channel_map(group_size, output_dim, self.device)[None]        # [1, D, g, g]
    img = image[:, None, None, None]

    def corner(rows, cols):
        return table[img, channel, rows[:, None], cols[:, None]]             # [K, D, g, g]

    total = corner(r1, c1) - corner(r0, c1) - corner(r1, c0) + corner(r0, c0)
    return (total * scale[:, None]).to(self.dtype)


def _ps_roi_pooling_fake(self, rois, spatial_scale, group_size, output_dim):
    return self.new_empty(rois.shape[0] * rois.shape[2], output_dim, group_size, group_size)


def ps_roi_pooling_backward_reference(output_grad, rois, spatial_scale, group_size, output_dim,
                                      input_size):
    batch = rois.shape[0]
    height, width = int(input_size[0]), int(input_size[1])
    channels = group_size * group_size * output_dim
    # A difference table: +v at the bin's top-left, -v past its edges; two prefix sums spread it.
    diff = torch.zeros(batch, channels, height + 1, width + 1, dtype=torch.float64,
                       device=output_grad.device)
    if output_grad.numel() and height and width and batch:
        image, r0, r1, c0, c1, scale = _geometry(rois, spatial_scale, group_size, output_dim,
                                                 batch, height, width)
        value = output_grad.to(torch.float64) * scale[:, None]              # [K, D, g, g]
        channel = _channel_map(group_size, output_dim, output_grad.device)[None].expand_as(value)
        img = image[:, None, None, None].expand_as(value)
        for rows, cols, sign in ((r0, c0, 1.0), (r0, c1, -1.0), (r1, c0, -1.0), (r1, c1, 1.0)):
            diff.index_put_((img, channel, rows[:, None].expand_as(value),
                             cols[:, None].expand_as(value)), sign * value, accumulate=True)
    return diff.cumsum(2).cumsum(3)[..., :height, :width].to(output_grad.dtype)


def _ps_roi_pooling_backward_fake(output_grad, rois, spatial_scale, group_size, output_dim,
                                  input_size):
    return output_grad.new_empty(rois.shape[0], group_size * group_size * output_dim,
                                 input_size[0], input_size[1])


ps_roi_pooling_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_ps_roi_pooling,
                          reference=ps_roi_pooling_reference, fake=_ps_roi_pooling_fake,
                          info=OpInfo(api="torch_npu"))
ps_roi_pooling_backward_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS,
                                   check=check_ps_roi_pooling_backward,
                                   reference=ps_roi_pooling_backward_reference,
                                   fake=_ps_roi_pooling_backward_fake,
                                   info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    features, rois, spatial_scale, group_size, output_dim = inputs
    ctx.save_for_backward(rois)
    ctx.attrs = (spatial_scale, group_size, output_dim)
    ctx.input_size = [features.shape[2], features.shape[3]]


def _backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    # derivatives.yaml: self only, through npu_ps_roi_pooling_backward(grad, ..., {H, W}).
    return (ps_roi_pooling_backward_op(grad.contiguous(), rois, *ctx.attrs, ctx.input_size),
            None, None, None, None)


ps_roi_pooling_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_ps_roi_pooling(self=None, rois=None, spatial_scale=None, group_size=None,
                       output_dim=None, **kwargs):
    """Position-sensitive ROI pooling (R-FCN): bin ``(gh, gw)`` of output channel ``d``
    averages input channel ``(d * g + gh) * g + gw`` over the bin.

    Formula (R-FCN PSROIPooling; shapes from op-plugin PsRoiPoolingKernelNpu.cpp)::

        start = floor(x1 + 0.5) * s,  end = (floor(x2 + 0.5) + 1) * s,
        bin = max(end - start, 0.1) / g
        out[k, d, gh, gw] = mean x[b, (d*g + gh)*g + gw, floor(start_y + gh*bin_h) :
                                   ceil(start_y + (gh+1)*bin_h), (same along w)]

    Parameters
    ----------
    self : Tensor
        ``[B, group_size**2 * output_dim, H, W]`` features (``x=``, the doc's name, accepted);
        float16, bfloat16, float32 (float64 kept).
    rois : Tensor
        ``[batch, 5, rois_num]`` (``batch`` = ``self``'s, same dtype): per roi
        ``(batch_id, x1, y1, x2, y2)``.
    spatial_scale : float
        Feature / image scale, > 0.
    group_size : int
        Bins per side, in (0, 128).
    output_dim : int
        Output channels, > 0.

    Returns
    -------
    Tensor
        ``[batch * rois_num, output_dim, group_size, group_size]`` in ``self``'s dtype; empty
        bins and rois whose batch id is not an image give 0.

    Notes
    -----
    The NPU takes ``self`` as NC1HWC0; any NCHW tensor is accepted here.  The gradient
    w.r.t. ``self`` is :func:`npu_ps_roi_pooling_backward`.

    Examples
    --------
    >>> x = torch.arange(8.).reshape(1, 8, 1, 1).expand(1, 8, 4, 4)
    >>> rois = torch.tensor([[[0.], [0.], [0.], [3.], [3.]]])
    >>> npu_anywhere.npu_ps_roi_pooling(x, rois, 1.0, 2, 2)[0, 1]
    tensor([[4., 5.],
            [6., 7.]])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "x", kwargs)
    return ps_roi_pooling_op(self, rois, spatial_scale, group_size, output_dim)


def npu_ps_roi_pooling_backward(output_grad=None, rois=None, spatial_scale=None,
                                group_size=None, output_dim=None, input_size=None):
    """Gradient of :func:`npu_ps_roi_pooling` w.r.t. its features.

    Each output gradient is spread evenly over its bin's pixels of the channel it read;
    ``input_size`` is the features' ``[H, W]`` and the result is
    ``[batch, group_size**2 * output_dim, H, W]`` (batch = ``rois.size(0)``).
    """
    return ps_roi_pooling_backward_op(output_grad, rois, spatial_scale, group_size, output_dim,
                                      input_size)


TORCH_NPU_FUNCTIONS = {OP: npu_ps_roi_pooling, BACKWARD_OP: npu_ps_roi_pooling_backward}
