"""torch_npu.npu_roi_align and its backward npu_roi_alignbk (Faster R-CNN ROI Align).

Formula (seed 004 "npu_roi_align"; host code op-plugin op_plugin/ops/{aclops,opapi}/
RoiAlign*KernelNpu*.cpp; sampling steps from ops-cv experimental/objdetect/roi_align_grad/
op_kernel/roi_align_grad.h, whose forward test golden in op-plugin test_roi_align.py this
reproduces).  For roi ``k = (b, x1, y1, x2, y2)`` and the scaled box ``s * (x1, y1, x2, y2)``::

    roi_end_mode 0: end = s * x2;          width = max(end - start, 1)
    roi_end_mode 1: end = s * x2 + s;      width = max(end - start, 1)   (one input pixel more)
    roi_end_mode 2: all four coordinates - 0.5 (pixel-centre aligned), width = end - start
    roi_end_mode 3: end = s * x2 + s;      width = max(end - start, 0)
    bin = width / pooled;  n = sample_num, or ceil(bin) per roi when sample_num == 0
    sample i of bin p sits at  start + (p * n + i + 0.5) * bin / n
    out[k, c, ph, pw] = mean over the n_h x n_w samples of bilinear(x[b, c], y, x)

A sample outside ``[-1, H]`` (``[-1, W]``) contributes 0; inside, the coordinate is clamped to
``[0, H - 1]`` and the upper neighbour to ``H - 1``.  Rois whose ``floor(b)`` is not an image
index produce zeros.  The backward scatters the same weights back (the exact transpose).
Computed in float32 (float64 kept), rounded once to the input dtype.
"""

from __future__ import annotations

import torch

from ... import checks
from ...library import TORCH_NPU_NS, NpuOp, OpInfo
from ...params import accept_alias

OP = "npu_roi_align"
SCHEMA = ("npu_roi_align(Tensor self, Tensor rois, float spatial_scale, int pooled_height, "
          "int pooled_width, int sample_num, int roi_end_mode) -> Tensor")
BACKWARD_OP = "npu_roi_alignbk"
BACKWARD_SCHEMA = ("npu_roi_alignbk(Tensor self, Tensor rois, int[] xdiff_shape, int pooled_width, "
                   "int pooled_height, float spatial_scale, int sample_num, "
                   "int? roi_end_mode=None) -> Tensor")

_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_END_MODES = (0, 1, 2, 3)
# Rois gathered per chunk: bounds the [chunk, C, H, W] copy of their images.
_CHUNK_ELEMENTS = 1 << 24


def _check_common(op, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                  roi_end_mode):
    checks.expect_dtype(rois, _FLOATS, op, "rois")
    checks.expect_dim(rois, 2, op, "rois")
    checks.expect(rois.shape[1] == 5, op, "rois", "of shape [K, 5] (batch_id, x1, y1, x2, y2)",
                  lambda: f"shape {tuple(rois.shape)}")
    checks.expect(spatial_scale > 0, op, "spatial_scale", "> 0", spatial_scale, ValueError)
    checks.expect(pooled_height > 0, op, "pooled_height", "> 0", pooled_height, ValueError)
    checks.expect(pooled_width > 0, op, "pooled_width", "> 0", pooled_width, ValueError)
    checks.expect(sample_num >= 0, op, "sample_num", ">= 0 (0: ceil(bin size) samples)",
                  sample_num, ValueError)
    checks.expect_one_of(roi_end_mode, _END_MODES, op, "roi_end_mode")


def check_roi_align(self, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                    roi_end_mode):
    checks.expect_dtype(self, _FLOATS, OP, "self")
    checks.expect_dim(self, 4, OP, "self")
    _check_common(OP, rois, spatial_scale, pooled_height, pooled_width, sample_num, roi_end_mode)
    checks.expect_same_device({"self": self, "rois": rois}, OP)


def check_roi_alignbk(self, rois, xdiff_shape, pooled_width, pooled_height, spatial_scale,
                      sample_num, roi_end_mode=None):
    op = BACKWARD_OP
    checks.expect_dtype(self, _FLOATS, op, "self")
    checks.expect_dim(self, 4, op, "self")
    _check_common(op, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                  1 if roi_end_mode is None else roi_end_mode)
    checks.expect_same_device({"self": self, "rois": rois}, op)
    shape = list(xdiff_shape)
    checks.expect(len(shape) == 4 and all(d >= 0 for d in shape), op, "xdiff_shape",
                  "4 non-negative sizes [B, C, H, W]", shape, ValueError)
    expected = [rois.shape[0], shape[1], pooled_height, pooled_width]
    checks.expect(list(self.shape) == expected, op, "self",
                  lambda: f"the shape [K, C, pooled_height, pooled_width] = {expected}",
                  lambda: f"shape {list(self.shape)}")


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _axis_weights(start, end, pooled, sample_num, roi_end_mode, scale, limit):
    """``[K, pooled, limit]`` interpolation weights along one axis (each row sums to <= 1)."""
    if roi_end_mode in (1, 3):
        end = end + scale
    elif roi_end_mode == 2:
        start, end = start - 0.5, end - 0.5
    size = end - start
    if roi_end_mode < 2:
        size = size.clamp_min(1.0)
    elif roi_end_mode == 3:
        size = size.clamp_min(0.0)
    bin_size = size / pooled
    if sample_num > 0:
        counts = torch.full_like(bin_size, float(sample_num))
        most = sample_num
    else:
        counts = torch.ceil(bin_size).clamp_min(0.0)
        most = int(counts.max().item()) if counts.numel() else 0
    k = start.shape[0]
    weights = start.new_zeros(k, pooled, limit)
    if most == 0 or limit == 0:
        return weights
    bins = torch.arange(pooled, dtype=start.dtype, device=start.device)[:, None]
    taps = torch.arange(most, dtype=start.dtype, device=start.device)[None, :]
    n = counts[:, None, None]
    grid = (bin_size / counts.clamp_min(1.0))[:, None, None]
    coord = start[:, None, None] + (bins * n + taps + 0.5) * grid          # [K, pooled, most]
    inside = (taps < n) & (coord >= -1.0) & (coord <= limit)
    clamped = coord.clamp(0.0, limit - 1)
    low = clamped.floor()
    frac = clamped - low
    low = low.long()
    high = (low + 1).clamp_max(limit - 1)
    per_sample = inside.to(start.dtype) / n.clamp_min(1.0)
    weights.scatter_add_(2, low, (1.0 - frac) * per_sample)
    weights.scatter_add_(2, high, frac * per_sample)
    return weights


def _roi_weights(rois, spatial_scale, pooled_height, pooled_width, sample_num, roi_end_mode,
                 height, width):
    r = rois * spatial_scale
    wy = _axis_weights(r[:, 2], r[:, 4], pooled_height, sample_num, roi_end_mode,
                       spatial_scale, height)
    wx = _axis_weights(r[:, 1], r[:, 3], pooled_width, sample_num, roi_end_mode,
                       spatial_scale, width)
    return wy, wx


def _image_index(rois, batch):
    b = rois[:, 0].floor()
    valid = (b >= 0) & (b < batch)
    return b.clamp(0, max(batch - 1, 0)).long(), valid


def _chunks(k, per_roi):
    step = max(1, _CHUNK_ELEMENTS // max(per_roi, 1))
    return [(i, min(i + step, k)) for i in range(0, k, step)]


def roi_align_reference(self, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                        roi_end_mode):
    dtype = _compute_dtype(self.dtype)
    x = self.to(dtype)
    r = rois.to(dtype)
    batch, channels, height, width = x.shape
    k = r.shape[0]
    out = x.new_zeros(k, channels, pooled_height, pooled_width)
    if k == 0 or x.numel() == 0:
        return out.to(self.dtype)
    wy, wx = _roi_weights(r, spatial_scale, pooled_height, pooled_width, sample_num,
                          roi_end_mode, height, width)
    image, valid = _image_index(r, batch)
    wy = wy * valid.to(dtype)[:, None, None]
    parts = [torch.einsum("kph,kchw,kqw->kcpq", wy[a:b], x[image[a:b]], wx[a:b])
             for a, b in _chunks(k, channels * height * width)]
    return torch.cat(parts).to(self.dtype)


def _roi_align_fake(self, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                    roi_end_mode):
    return self.new_empty(rois.shape[0], self.shape[1], pooled_height, pooled_width)


def roi_alignbk_reference(self, rois, xdiff_shape, pooled_width, pooled_height, spatial_scale,
                          sample_num, roi_end_mode=None):
    mode = 1 if roi_end_mode is None else roi_end_mode
    dtype = _compute_dtype(self.dtype)
    grad = self.to(dtype)
    r = rois.to(dtype)
    batch, channels, height, width = xdiff_shape
    result = grad.new_zeros(batch, channels, height, width)
    k = r.shape[0]
    if k == 0 or result.numel() == 0 or grad.numel() == 0:
        return result.to(self.dtype)
    wy, wx = _roi_weights(r, spatial_scale, pooled_height, pooled_width, sample_num, mode,
                          height, width)
    image, valid = _image_index(r, batch)
    wy = wy * valid.to(dtype)[:, None, None]
    for a, b in _chunks(k, channels * height * width):
        part = torch.einsum("kph,kcpq,kqw->kchw", wy[a:b], grad[a:b], wx[a:b])
        result = result.index_add(0, image[a:b], part)
    return result.to(self.dtype)


def _roi_alignbk_fake(self, rois, xdiff_shape, pooled_width, pooled_height, spatial_scale,
                      sample_num, roi_end_mode=None):
    return self.new_empty(list(xdiff_shape))


roi_align_op = NpuOp(SCHEMA, namespace=TORCH_NPU_NS, check=check_roi_align,
                     reference=roi_align_reference, fake=_roi_align_fake,
                     info=OpInfo(api="torch_npu"))
roi_alignbk_op = NpuOp(BACKWARD_SCHEMA, namespace=TORCH_NPU_NS, check=check_roi_alignbk,
                       reference=roi_alignbk_reference, fake=_roi_alignbk_fake,
                       info=OpInfo(api="torch_npu", backward_of=OP))


def _setup_context(ctx, inputs, output):
    features, rois, spatial_scale, pooled_height, pooled_width, sample_num, roi_end_mode = inputs
    ctx.save_for_backward(rois)
    ctx.shape = list(features.shape)
    ctx.attrs = (pooled_width, pooled_height, spatial_scale, sample_num, roi_end_mode)


def _backward(ctx, grad):
    (rois,) = ctx.saved_tensors
    # torch_npu.contrib's ROIAlign differentiates the features only, through npu_roi_alignbk.
    return (roi_alignbk_op(grad.contiguous(), rois, ctx.shape, *ctx.attrs),
            None, None, None, None, None, None)


roi_align_op.set_autograd(setup_context=_setup_context, backward=_backward)


def npu_roi_align(self=None, rois=None, spatial_scale=None, pooled_height=None,
                  pooled_width=None, sample_num=None, roi_end_mode=None, **kwargs):
    """Bilinearly sample a fixed ``pooled_height x pooled_width`` patch of features per roi.

    Formula (ops-cv roi_align_grad kernel's sampling; op-plugin test_roi_align.py)::

        bin = width(roi, roi_end_mode) / pooled,  n = sample_num or ceil(bin)
        out[k, c, ph, pw] = mean_{i, j < n} bilinear(x[b_k, c],
                                start_y + (ph*n + i + 0.5) * bin_h / n,
                                start_x + (pw*n + j + 0.5) * bin_w / n)

    Parameters
    ----------
    self : Tensor
        ``[B, C, H, W]`` features (``features=``, the doc's name, is accepted too), float16,
        bfloat16 or float32 (float64 kept).
    rois : Tensor
        ``[K, 5]`` rows ``(batch_id, x1, y1, x2, y2)`` in input-image coordinates.
    spatial_scale : float
        Feature-map / image scale, > 0.
    pooled_height, pooled_width : int
        Output patch size, > 0.
    sample_num : int
        Samples per bin along each axis; 0 takes ``ceil(bin size)`` per roi.
    roi_end_mode : int
        0: ``x2`` is the end; 1: one input pixel past ``x2`` (both with sizes at least 1);
        2: pixel-centre aligned (coordinates - 0.5); 3: as 1 with sizes at least 0.

    Returns
    -------
    Tensor
        ``[K, C, pooled_height, pooled_width]`` in ``self``'s dtype (float32 math).

    Notes
    -----
    Rois whose batch id is not an image index give zeros.  The gradient w.r.t. ``self`` is
    :func:`npu_roi_alignbk`; ``rois`` get none.

    Examples
    --------
    >>> x = torch.arange(1., 37.).reshape(1, 1, 6, 6)
    >>> npu_anywhere.npu_roi_align(x, torch.tensor([[0, -2., -2., 22., 22.]]), 0.25, 3, 3, 2, 0)
    tensor([[[[ 4.5000,  6.5000,  8.5000],
              [16.5000, 18.5000, 20.5000],
              [28.5000, 30.5000, 32.5000]]]])
    """
    if kwargs:
        self = accept_alias(OP, "self", self, "features", kwargs)
    return roi_align_op(self, rois, spatial_scale, pooled_height, pooled_width, sample_num,
                        roi_end_mode)


def npu_roi_alignbk(self=None, rois=None, xdiff_shape=None, pooled_width=None,
                    pooled_height=None, spatial_scale=None, sample_num=None, roi_end_mode=None,
                    **kwargs):
    """Gradient of :func:`npu_roi_align` w.r.t. its features (scatters ``self`` back).

    ``self`` is the ``[K, C, pooled_height, pooled_width]`` output gradient, ``xdiff_shape``
    the features' ``[B, C, H, W]``; note ``pooled_width`` comes before ``pooled_height`` here.
    ``roi_end_mode=None`` means 1, the kernel's default.  Every sample's bilinear weights are
    added to the four pixels it read, divided by the samples per bin (the forward's transpose).
    """
    if kwargs:
        self = accept_alias(BACKWARD_OP, "self", self, "grad", kwargs)
    return roi_alignbk_op(self, rois, xdiff_shape, pooled_width, pooled_height, spatial_scale,
                          sample_num, roi_end_mode)


TORCH_NPU_FUNCTIONS = {OP: npu_roi_align, BACKWARD_OP: npu_roi_alignbk}
