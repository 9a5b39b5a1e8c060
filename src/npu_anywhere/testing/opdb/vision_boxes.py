"""Op database entries of the vision box coders and YOLO helpers (bounding-box and rotated-box
encode / decode, npu_yolo_boxes_encode, npu_anchor_response_flags, npu_grid_assign_positive)."""

from __future__ import annotations

import torch

from . import ErrorSample, Sample, entry as _entry


def _gen(seed):
    return torch.Generator().manual_seed(seed)


def _boxes(n, dtype=torch.float32, seed=0, scale=20.0):
    """``(n, 4)`` well-formed ``[x1, y1, x2, y2]`` boxes."""
    gen = _gen(seed)
    xy = torch.rand(n, 2, generator=gen) * scale
    wh = torch.rand(n, 2, generator=gen) * scale + 1
    return torch.cat([xy, xy + wh], dim=1).to(dtype)


def _rotated(b, n, dtype=torch.float32, seed=0):
    """``(b, 5, n)`` rotated boxes, angles in degrees."""
    corners = _boxes(b * n, torch.float32, seed).reshape(b, n, 4).transpose(1, 2)
    angle = (torch.rand(b, 1, n, generator=_gen(seed + 1)) - 0.5) * 160
    return torch.cat([corners, angle], dim=1).to(dtype)


_MEANS_STDS = (0.0, 0.1, 0.0, -0.1, 0.1, 0.1, 0.2, 0.2)


def _bbox_coding() -> None:
    e = _entry("npu_bounding_box_encode")
    e.samples += [
        Sample("fp32", lambda: ((_boxes(5), _boxes(5, seed=1), *_MEANS_STDS), {})),
        Sample("fp16", lambda: ((_boxes(3, torch.float16), _boxes(3, torch.float16, 2),
                                 0, 0, 0, 0, 1, 1, 1, 1), {})),
    ]
    e.errors += [
        ErrorSample("shape", lambda: ((_boxes(5), _boxes(4), *_MEANS_STDS), {}), RuntimeError,
                    "npu_bounding_box_encode: expected ground_truth_box the shape of anchor_box"),
        ErrorSample("columns", lambda: ((torch.zeros(5, 5), torch.zeros(5, 5), *_MEANS_STDS),
                                        {}), ValueError,
                    "npu_bounding_box_encode: expected anchor_box a 2-D tensor of shape"),
        ErrorSample("dtype", lambda: ((_boxes(2), _boxes(2, torch.float16), *_MEANS_STDS), {}),
                    TypeError, "npu_bounding_box_encode: expected ground_truth_box the same"),
        ErrorSample("std_zero", lambda: ((_boxes(2), _boxes(2), 0, 0, 0, 0, 1, 0, 1, 1), {}),
                    ValueError, "npu_bounding_box_encode: expected stds1 non-zero"),
    ]

    def deltas(n, dtype=torch.float32, seed=3):
        return (torch.randn(n, 4, generator=_gen(seed)) * 0.5).to(dtype)

    d = _entry("npu_bounding_box_decode")
    d.samples += [
        Sample("fp32", lambda: ((_boxes(5), deltas(5), *_MEANS_STDS, [16, 24], 16 / 1000), {})),
        Sample("fp16", lambda: ((_boxes(3, torch.float16), deltas(3, torch.float16),
                                 0, 0, 0, 0, 1, 1, 1, 1, [10, 10], 0.1), {})),
    ]
    d.errors += [
        ErrorSample("max_shape", lambda: ((_boxes(2), deltas(2), *_MEANS_STDS, [10], 0.1), {}),
                    ValueError, "npu_bounding_box_decode: expected max_shape a list of 2 ints"),
        ErrorSample("deltas_shape", lambda: ((_boxes(2), deltas(3), *_MEANS_STDS, [9, 9], 0.1),
                                             {}), RuntimeError,
                    "npu_bounding_box_decode: expected deltas the shape of rois"),
        ErrorSample("int_rois", lambda: ((torch.zeros(2, 4, dtype=torch.int32), deltas(2),
                                          *_MEANS_STDS, [9, 9], 0.1), {}), TypeError,
                    "npu_bounding_box_decode: expected rois dtype in"),
    ]


_bbox_coding()


def _rotated_coding() -> None:
    # One sample each: the float16 path is the same float32 computation (tests/ops/vision).
    def weight(dtype=torch.float32):
        return torch.tensor([1.0, 1.0, 2.0, 2.0, 0.5], dtype=dtype)

    e = _entry("npu_rotated_box_encode")
    e.samples += [
        Sample("fp32", lambda: ((_rotated(2, 3), _rotated(2, 3, seed=4), weight()), {})),
    ]
    e.errors += [
        ErrorSample("rows", lambda: ((torch.zeros(1, 4, 3), torch.zeros(1, 4, 3), weight()), {}),
                    ValueError, "npu_rotated_box_encode: expected self a 3-D tensor"),
        ErrorSample("weight", lambda: ((_rotated(1, 3), _rotated(1, 3, seed=2), torch.ones(4)),
                                       {}), ValueError,
                    "npu_rotated_box_encode: expected weight 5 values"),
        ErrorSample("shape", lambda: ((_rotated(1, 3), _rotated(1, 2), weight()), {}),
                    RuntimeError, "npu_rotated_box_encode: expected gt_bboxes the shape of self"),
    ]
    d = _entry("npu_rotated_box_decode")
    d.samples += [
        Sample("fp32", lambda: ((_rotated(2, 3), torch.randn(2, 5, 3, generator=_gen(7)) * 0.3,
                                 weight()), {})),
    ]
    d.errors += [
        ErrorSample("dtype", lambda: ((_rotated(1, 3), _rotated(1, 3).half(), weight()), {}),
                    TypeError, "npu_rotated_box_decode: expected deltas the same dtype"),
        ErrorSample("int_weight", lambda: ((_rotated(1, 3), _rotated(1, 3),
                                            torch.ones(5, dtype=torch.int32)), {}), TypeError,
                    "npu_rotated_box_decode: expected weight a floating-point tensor"),
    ]


_rotated_coding()


def _yolo() -> None:
    def encode_args(n=4, dtype=torch.float32):
        stride = torch.tensor([8, 16, 32, 8, 16][:n], dtype=torch.int32)
        return (_boxes(n, dtype, 9, 40.0), _boxes(n, dtype, 10, 40.0), stride)

    e = _entry("npu_yolo_boxes_encode")
    e.samples += [
        Sample("fp32", lambda: (encode_args(), {})),
        Sample("fp16_performance", lambda: (encode_args(5, torch.float16),
                                            dict(performance_mode=True))),
    ]
    e.errors += [
        ErrorSample("stride_len", lambda: ((*encode_args()[:2], torch.ones(3, dtype=torch.int32)),
                                           {}), RuntimeError,
                    "npu_yolo_boxes_encode: expected stride shape \\(4,\\)"),
        ErrorSample("stride_int64", lambda: ((*encode_args()[:2], torch.ones(4, dtype=torch.long)),
                                             {}), TypeError,
                    "npu_yolo_boxes_encode: expected stride dtype in"),
        ErrorSample("too_many", lambda: ((torch.zeros(20481, 4), torch.zeros(20481, 4),
                                          torch.ones(20481, dtype=torch.int32)), {}), ValueError,
                    "npu_yolo_boxes_encode: expected self at most 20480 anchor boxes"),
    ]

    f = _entry("npu_anchor_response_flags")
    f.samples += [
        Sample("fp32", lambda: ((_boxes(6, seed=11, scale=30.0), [5, 7], [8, 6], 3), {})),
    ]
    f.errors += [
        ErrorSample("featmap", lambda: ((_boxes(2), [4, 4, 4], [8, 8], 3), {}), ValueError,
                    "npu_anchor_response_flags: expected featmap_size a list of 2 ints"),
        ErrorSample("boxes", lambda: ((torch.zeros(2, 5), [4, 4], [8, 8], 3), {}), ValueError,
                    "npu_anchor_response_flags: expected self a 2-D tensor of shape \\(N, 4\\)"),
        ErrorSample("stride_zero", lambda: ((_boxes(2), [4, 4], [0, 8], 3), {}), ValueError,
                    "npu_anchor_response_flags: expected stride positive values"),
    ]

    def assign_args(dtype=torch.float32, k=3, n=6, seed=13):
        gen = _gen(seed)
        overlaps = torch.rand(k, n, generator=gen).to(dtype)
        flags = torch.tensor([1, 1, 0, 1, 1, 0][:n], dtype=torch.uint8)
        mx, amx = overlaps.max(0)
        gmx, gamx = overlaps.max(1)
        inds = torch.full((n,), -1.0, dtype=dtype)
        return (inds, overlaps, flags, mx, amx.int(), gmx, gamx.int())

    a = _entry("npu_grid_assign_positive")
    a.samples += [
        Sample("assign_all", lambda: ((*assign_args(), 3, 0.5, 0.0, True), {})),
        Sample("fp16_argmax_only", lambda: ((*assign_args(torch.float16), 2, 0.7, 0.3, False),
                                            {})),
    ]
    a.errors += [
        ErrorSample("flags_dtype", lambda: ((*assign_args()[:2], torch.ones(6, dtype=torch.int32),
                                             *assign_args()[3:], 3, 0.5, 0.0, True), {}),
                    TypeError, "npu_grid_assign_positive: expected box_responsible_flags dtype"),
        ErrorSample("argmax_int64", lambda: ((*assign_args()[:4], torch.zeros(6, dtype=torch.long),
                                              *assign_args()[5:], 3, 0.5, 0.0, True), {}),
                    TypeError, "npu_grid_assign_positive: expected argmax_overlaps dtype in"),
        ErrorSample("overlaps_shape", lambda: ((assign_args()[0], torch.rand(3, 5),
                                                *assign_args()[2:], 3, 0.5, 0.0, True), {}),
                    RuntimeError, "npu_grid_assign_positive: expected overlaps shape"),
    ]


_yolo()
