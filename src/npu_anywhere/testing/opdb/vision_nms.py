"""Op database entries of the vision family's suppression, ROI pooling and random-choice ops
(npu_nms_v4, npu_nms_with_mask, npu_nms_rotated, npu_batch_nms, npu_roi_align(bk),
npu_ps_roi_pooling(_backward), npu_random_choice_with_mask)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _boxes(n, seed=0, dtype=torch.float32):
    gen = _gen(seed)
    lo = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 20
    size = torch.rand(n, 2, generator=gen, dtype=torch.float64) * 10 + 1
    return torch.cat([lo, lo + size], 1).to(dtype)


def _scores(n, seed=1, dtype=torch.float32):
    return torch.rand(n, generator=_gen(seed), dtype=torch.float64).to(dtype)


def _nms_v4() -> None:
    def args(dtype=torch.float32, n=9, limit=5, **kw):
        return ((_boxes(n, dtype=dtype), _scores(n, dtype=dtype), limit, torch.tensor(0.3),
                 torch.tensor(0.2)), kw)

    e = _entry("npu_nms_v4")
    e.samples += [Sample("fp32", args),
                  Sample("fp16_pad", lambda: args(torch.float16, 7, 8, pad_to_max_output_size=True))]
    e.errors += [
        ErrorSample("boxes_shape", lambda: ((torch.rand(4, 5), torch.rand(4), 2, torch.tensor(.5),
                                             torch.tensor(0.)), {}), ValueError,
                    "npu_nms_v4: expected self of shape \\[num_boxes, 4\\]"),
        ErrorSample("scores_shape", lambda: ((torch.rand(4, 4), torch.rand(3), 2,
                                              torch.tensor(.5), torch.tensor(0.)), {}),
                    RuntimeError, "npu_nms_v4: expected scores of shape"),
        ErrorSample("threshold_dim", lambda: ((torch.rand(4, 4), torch.rand(4), 2,
                                               torch.tensor([.5]), torch.tensor(0.)), {}),
                    ValueError, "npu_nms_v4: expected iou_threshold a 0-D tensor"),
        ErrorSample("negative_max", lambda: ((torch.rand(4, 4), torch.rand(4), -1,
                                              torch.tensor(.5), torch.tensor(0.)), {}),
                    ValueError, "npu_nms_v4: expected max_output_size an integer >= 0"),
    ]


def _nms_with_mask() -> None:
    def rows(n, cols=5, dtype=torch.float32):
        s = _scores(n).sort(descending=True).values[:, None]
        pad = torch.zeros(n, cols - 5, dtype=torch.float64)
        return torch.cat([_boxes(n).double(), s, pad], 1).to(dtype)

    e = _entry("npu_nms_with_mask")
    e.samples += [Sample("fp32", lambda: ((rows(9), 0.3), {})),
                  Sample("fp16_eight_columns", lambda: ((rows(6, 8, torch.float16), 0.5), {}))]
    e.errors += [ErrorSample("columns", lambda: ((torch.rand(3, 6), 0.5), {}), ValueError,
                             "npu_nms_with_mask: expected input of shape \\[N, 5\\] or \\[N, 8\\]")]


def _rotated(n, seed=3):
    gen = _gen(seed)
    centre = torch.rand(n, 2, generator=gen) * 12
    size = torch.rand(n, 2, generator=gen) * 6 + 1
    angle = torch.rand(n, 1, generator=gen) * 180 - 90
    return torch.cat([centre, size, angle], 1)


def _nms_rotated() -> None:
    # The kept count sizes the output, which a FakeTensorMode without a ShapeEnv (the generic
    # tests') cannot represent, so the samples are the calls whose size is known: nothing to
    # keep.  tests/ops/vision/test_nms.py traces the data-dependent case under a ShapeEnv.
    e = _entry("npu_nms_rotated")
    e.samples += [
        # first: the argument fuzz mutates it, and with no boxes every variant stays sized
        Sample("no_boxes_fp16_xyxya", lambda: ((torch.zeros(0, 5).half(), torch.zeros(0).half(),
                                                0.5), dict(mode=1))),
        Sample("limit_zero", lambda: ((_rotated(4), _scores(4), 0.2), dict(max_output_size=0))),
    ]
    e.errors += [
        ErrorSample("mode", lambda: ((_rotated(3), _scores(3), 0.5), dict(mode=2)), ValueError,
                    "npu_nms_rotated: expected mode one of \\[0, 1\\]"),
        ErrorSample("dets_shape", lambda: ((torch.rand(3, 4), _scores(3), 0.5), {}), ValueError,
                    "npu_nms_rotated: expected self of shape \\[num_boxes, 5\\]"),
        ErrorSample("max_output_size", lambda: ((_rotated(3), _scores(3), 0.5),
                                                dict(max_output_size=-2)), ValueError,
                    "npu_nms_rotated: expected max_output_size >= -1"),
    ]


def _roi_rois(k=3, batch=2, seed=5, dtype=torch.float32):
    gen = _gen(seed)
    lo = torch.rand(k, 2, generator=gen, dtype=torch.float64) * 12 - 2
    hi = lo + torch.rand(k, 2, generator=gen, dtype=torch.float64) * 14 + 0.5
    b = torch.arange(k, dtype=torch.float64)[:, None] % batch
    return torch.cat([b, lo, hi], 1).to(dtype)


def _roi_align() -> None:
    def feats(dtype=torch.float32, shape=(2, 3, 7, 6)):
        return torch.randn(*shape, generator=_gen(6), dtype=torch.float64).to(dtype)

    e = _entry("npu_roi_align")
    e.samples += [
        Sample("fp16_adaptive_mode1", lambda: ((feats(torch.float16), _roi_rois(dtype=torch.float16),
                                                0.5, 2, 3, 0, 1), {})),
        Sample("fp64_mode2", lambda: ((feats(torch.float64, (2, 2, 5, 4)),), dict(
            rois=_roi_rois(dtype=torch.float64), spatial_scale=0.5, pooled_height=2,
            pooled_width=2, sample_num=2, roi_end_mode=2)), differentiable=True),
    ]
    e.errors += [
        ErrorSample("rois_shape", lambda: ((feats(), torch.rand(3, 4), 0.5, 2, 2, 2, 1), {}),
                    RuntimeError, "npu_roi_align: expected rois of shape \\[K, 5\\]"),
        ErrorSample("end_mode", lambda: ((feats(), _roi_rois(), 0.5, 2, 2, 2, 4), {}),
                    ValueError, "npu_roi_align: expected roi_end_mode one of"),
        ErrorSample("pooled", lambda: ((feats(), _roi_rois(), 0.5, 0, 2, 2, 1), {}),
                    ValueError, "npu_roi_align: expected pooled_height > 0"),
    ]
    b = _entry("npu_roi_alignbk")
    b.samples += [
        Sample("fp32_default_mode", lambda: ((torch.randn(3, 3, 2, 4, generator=_gen(7)),
                                              _roi_rois(), [2, 3, 7, 6], 4, 2, 0.5, 2), {})),
        Sample("fp32_adaptive_mode0", lambda: ((torch.randn(3, 3, 3, 3, generator=_gen(8)),
                                                _roi_rois(), [2, 3, 5, 8], 3, 3, 0.25, 0, 0),
                                               {})),
    ]
    b.errors += [
        ErrorSample("grad_shape", lambda: ((torch.randn(3, 3, 2, 4), _roi_rois(), [2, 3, 7, 6],
                                            2, 4, 0.5, 2), {}), RuntimeError,
                    "npu_roi_alignbk: expected self the shape"),
        ErrorSample("xdiff_shape", lambda: ((torch.randn(3, 3, 2, 4), _roi_rois(), [2, 3, 7],
                                             4, 2, 0.5, 2), {}), ValueError,
                    "npu_roi_alignbk: expected xdiff_shape 4 non-negative sizes"),
    ]


def _ps_rois(batch=2, num=3, seed=9, dtype=torch.float32):
    gen = _gen(seed)
    lo = torch.rand(batch, 2, num, generator=gen, dtype=torch.float64) * 6
    hi = lo + torch.rand(batch, 2, num, generator=gen, dtype=torch.float64) * 8
    b = torch.arange(batch, dtype=torch.float64)[:, None, None].expand(batch, 1, num)
    return torch.cat([b, lo, hi], 1).to(dtype)


def _ps_roi_pooling() -> None:
    def feats(dtype=torch.float32, c=8, h=6, w=5):
        return torch.randn(2, c, h, w, generator=_gen(10), dtype=torch.float64).to(dtype)

    e = _entry("npu_ps_roi_pooling")
    e.samples += [
        Sample("fp16", lambda: ((feats(torch.float16), _ps_rois(dtype=torch.float16), 0.5, 2, 2),
                                {})),
        Sample("fp64_group3", lambda: ((feats(torch.float64, c=9),), dict(
            rois=_ps_rois(dtype=torch.float64), spatial_scale=0.7, group_size=3, output_dim=1)),
            differentiable=True),
    ]
    e.errors += [
        ErrorSample("channels", lambda: ((feats(c=6), _ps_rois(), 0.5, 2, 2), {}), RuntimeError,
                    "npu_ps_roi_pooling: expected self group_size\\*\\*2 \\* output_dim = 8"),
        ErrorSample("rois_shape", lambda: ((feats(), torch.rand(2, 4, 3), 0.5, 2, 2), {}),
                    ValueError, "npu_ps_roi_pooling: expected rois of shape \\[batch, 5"),
        ErrorSample("group_size", lambda: ((feats(), _ps_rois(), 0.5, 0, 2), {}), ValueError,
                    "npu_ps_roi_pooling: expected group_size in \\(0, 128\\)"),
    ]
    b = _entry("npu_ps_roi_pooling_backward")
    b.samples += [
        Sample("fp32", lambda: ((torch.randn(6, 2, 2, 2, generator=_gen(11)), _ps_rois(), 0.5,
                                 2, 2, [6, 5]), {})),
        Sample("bf16_group3", lambda: ((torch.randn(6, 1, 3, 3, generator=_gen(12)).bfloat16(),
                                        _ps_rois(dtype=torch.bfloat16), 0.7, 3, 1, [4, 7]),
                                       {})),
    ]
    b.errors += [
        ErrorSample("grad_shape", lambda: ((torch.randn(5, 2, 2, 2), _ps_rois(), 0.5, 2, 2,
                                            [6, 5]), {}), RuntimeError,
                    "npu_ps_roi_pooling_backward: expected output_grad the shape"),
        ErrorSample("input_size", lambda: ((torch.randn(6, 2, 2, 2), _ps_rois(), 0.5, 2, 2,
                                            [6]), {}), ValueError,
                    "npu_ps_roi_pooling_backward: expected input_size at least 2"),
    ]


_nms_v4()
_nms_with_mask()
_nms_rotated()
_roi_align()
_ps_roi_pooling()


def _batch_nms() -> None:
    def args(dtype=torch.float32, q=1, transpose=False, **kw):
        boxes = torch.stack([_boxes(14, seed=s) for s in range(2 * q)]).reshape(2, q, 14, 4)
        boxes = boxes.permute(0, 1, 3, 2) if transpose else boxes.permute(0, 2, 1, 3)
        scores = torch.rand(2, 14, 3, generator=_gen(4))
        return ((boxes.contiguous().to(dtype), scores.to(dtype), 0.2, 0.4, 3, 5),
                dict(transpose_box=transpose, **kw))

    e = _entry("npu_batch_nms")
    e.samples += [Sample("fp32_shared_boxes", args),
                  Sample("fp16_per_class_transposed",
                         lambda: args(torch.float16, 3, True, change_coordinate_frame=True))]
    e.errors += [
        ErrorSample("batch_mismatch", lambda: ((torch.rand(8, 2, 4, 4), torch.rand(3, 2, 4), 0.3,
                                                0.5, 3, 4), {}), RuntimeError,
                    "npu_batch_nms: expected scores of shape \\[batch, num_anchors"),
        ErrorSample("q", lambda: ((torch.rand(1, 2, 2, 4), torch.rand(1, 2, 3), 0.3, 0.5, 3, 4),
                                  {}), RuntimeError,
                    "npu_batch_nms: expected self q equal to 1 or num_classes = 3"),
        ErrorSample("iou_threshold", lambda: ((torch.rand(1, 2, 1, 4), torch.rand(1, 2, 1), 0.3,
                                               1.5, 3, 4), {}), ValueError,
                    "npu_batch_nms: expected iou_threshold in \\[0, 1\\]"),
        ErrorSample("scores_dtype", lambda: ((torch.rand(1, 2, 1, 4), torch.rand(1, 2, 1).half(),
                                              0.3, 0.5, 3, 4), {}), TypeError,
                    "npu_batch_nms: expected scores dtype in"),
    ]


def _random_choice() -> None:
    def mask(shape=(3, 5), seed=13):
        return torch.rand(*shape, generator=_gen(seed)) > 0.5

    e = _entry("npu_random_choice_with_mask")
    # seeded calls: the generic tests compare eager with compiled values, which a draw from
    # the global generator would not repeat
    e.samples += [Sample("two_d_seeded", lambda: ((mask(), 4, 7, 1), {})),
                  Sample("one_d_more_than_nnz", lambda: ((mask((6,)), 9), dict(seed=3)))]
    e.errors += [
        ErrorSample("dtype", lambda: ((torch.ones(4), 2), {}), TypeError,
                    "npu_random_choice_with_mask: expected x dtype in \\['bool'\\]"),
        ErrorSample("count", lambda: ((mask(), 0), {}), ValueError,
                    "npu_random_choice_with_mask: expected count > 0"),
        ErrorSample("dims", lambda: ((torch.ones((1,) * 6, dtype=torch.bool), 2), {}),
                    ValueError, "npu_random_choice_with_mask: expected x a tensor with 1 to 5"),
    ]


_batch_nms()
_random_choice()
